"""Run a model in onnxflow and in onnxruntime and compare, for the com.microsoft kernels."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, helper
from op_testing import one_node_model

import onnxflow


def ms_model(
    op: str,
    inputs: Sequence[Any],
    n_out: int = 1,
    domain: str = "com.microsoft",
    opset: int = 17,
    **attrs: Any,
) -> tuple[ModelProto, dict[str, Any]]:
    """A model of one ``domain.op`` node (``domain`` imported at version 1, the default domain
    at ``opset``, IR version 8 as onnxruntime accepts) and its feeds; a None input is omitted."""
    model, feeds = one_node_model(op, inputs, opset, n_out, domain, **attrs)
    model.ir_version = 8
    for out in model.graph.output:  # onnxruntime refuses the UNDEFINED element type: no type
        out.ClearField("type")
    return model, feeds


def run_both(model: ModelProto, feeds: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The outputs of onnxflow and of onnxruntime (one thread, no graph rewrites) on ``feeds``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    ours = onnxflow.InferenceSession(_typed_outputs(model, theirs)).run(None, feeds)
    return ours, theirs


def _typed_outputs(model: ModelProto, results: list[Any]) -> ModelProto:
    """A copy of ``model`` whose untyped graph outputs (onnxruntime accepts them, the ONNX
    checker does not) take the element type onnxruntime's results have, shape unknown."""
    model = copy.deepcopy(model)
    for out, value in zip(model.graph.output, results, strict=True):
        if not out.type.HasField("tensor_type") and isinstance(value, np.ndarray):
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            out.CopyFrom(helper.make_tensor_value_info(out.name, elem, None))
    return model


def assert_matches(
    model: ModelProto, feeds: dict[str, Any], rtol: float = 1e-5, atol: float = 1e-5
) -> list[Any]:
    """Assert onnxflow's outputs equal onnxruntime's (dtype, shape, values within tolerance);
    return onnxflow's."""
    ours, theirs = run_both(model, feeds)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} vs onnxruntime's {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} vs onnxruntime's {b.shape}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
    return ours
