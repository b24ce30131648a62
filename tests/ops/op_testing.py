"""Helpers shared by the focused kernel tests: build a one-node model and run it.

Each test module makes its own ``run`` with the opset its cases default to::

    run = runner(opset=22)
    y = run("Relu", [x])
    y, indices = run("MaxPool", [x], n_out=2, kernel_shape=[2, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, TypeProto, helper

import onnxflow


def value_type(value: Any) -> TypeProto:
    """Return the ONNX type of a feed: a tensor (object arrays are strings) or a sequence."""
    if isinstance(value, list):
        return helper.make_sequence_type_proto(
            value_type(value[0] if value else np.zeros(0, np.float32))
        )
    if value.dtype == object:
        elem = TensorProto.STRING
    else:
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_type_proto(elem, value.shape)


def one_node_model(
    op: str,
    inputs: Sequence[Any],
    opset: int,
    n_out: int = 1,
    domain: str = "",
    **attrs: Any,
) -> tuple[ModelProto, dict[str, Any]]:
    """Return a model of one ``op`` node and its feeds; a None input is an omitted one.

    Outputs are left untyped; a ``domain`` other than the default one is imported at version 1.
    """
    names = ["" if v is None else f"in{i}" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    feeds = {n: v for n, v in zip(names, inputs) if n}
    outs = [f"out{i}" for i in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, domain=domain, **attrs)],
        "g",
        [helper.make_value_info(n, value_type(v)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets), feeds


def session(
    op: str, inputs: Sequence[Any], opset: int, n_out: int = 1, domain: str = "", **attrs: Any
) -> tuple[onnxflow.InferenceSession, dict[str, Any]]:
    """Compile one ``op`` node on ``inputs``; return the session and its feeds."""
    model, feeds = one_node_model(op, inputs, opset, n_out, domain, **attrs)
    return onnxflow.InferenceSession(model), feeds


def runner(opset: int) -> Callable[..., Any]:
    """Return ``run(op, inputs, opset=opset, n_out=1, domain="", **attrs)``.

    ``run`` compiles and runs one node and returns its output, or the list of its ``n_out``
    outputs when there are several.
    """

    def run(
        op: str,
        inputs: Sequence[Any],
        opset: int = opset,
        n_out: int = 1,
        domain: str = "",
        **attrs: Any,
    ) -> Any:
        sess, feeds = session(op, inputs, opset, n_out, domain, **attrs)
        results = sess.run(None, feeds)
        return results if n_out > 1 else results[0]

    return run


def f32(*values: Any) -> np.ndarray:
    """Return a float32 tensor of the values."""
    return np.array(values, dtype=np.float32)


def strings(*values: str) -> np.ndarray:
    """Return a string tensor of the values."""
    return np.array(values, dtype=object)
