"""Helpers for holding a kernel's compiled form to its NumPy form (tests/native)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

import onnxflow


def node_model(
    op: str,
    inputs: Sequence[np.ndarray | None],
    opset: int,
    n_out: int = 1,
    domain: str = "",
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of one ``op`` node reading ``inputs`` (None: an omitted input) with outputs of
    unknown type; and its feeds."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    feeds = {n: x for n, x in zip(names, inputs) if x is not None}
    outs = [f"y{i}" for i in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, domain=domain, **attrs)],
        op,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in feeds.items()
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
    )
    imports = [helper.make_opsetid("", opset if not domain else 21)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    return helper.make_model(graph, opset_imports=imports), feeds


def both_forms(
    model: onnx.ModelProto, feeds: dict[str, Any], **options: Any
) -> tuple[list[Any], list[Any]]:
    """The outputs of ``model`` on ``feeds`` with the compiled kernels, then with NumPy forms."""
    data = model.SerializeToString()
    runs = []
    for kernels in ("native", "numpy"):
        opts = onnxflow.SessionOptions(kernels=kernels, **options)
        runs.append(onnxflow.InferenceSession(data, opts).run(None, feeds))
    return runs[0], runs[1]


def node_forms(
    op: str,
    inputs: Sequence[np.ndarray | None],
    opset: int,
    n_out: int = 1,
    domain: str = "",
    **attrs: Any,
) -> tuple[list[Any], list[Any]]:
    """:func:`both_forms` of a one-node model (:func:`node_model`)."""
    return both_forms(*node_model(op, inputs, opset, n_out, domain, **attrs))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable floats lie between a and b, elementwise (same float dtype; NaN
    against NaN counts 0)."""
    a, b = np.asarray(a), np.asarray(b)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    top = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ia, ib = (v.view(bits).astype(np.int64) for v in (a, b))
    ia, ib = (np.where(i < 0, -(i + top), i) for i in (ia, ib))  # a monotonic integer line
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.abs(ia - ib))
