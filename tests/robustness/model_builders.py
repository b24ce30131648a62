"""Small models the robustness tests share, built with ``onnx.helper``.

Also makes ``tests/`` importable, so the spec oracles in ``tests/oracles.py`` can be used here.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from onnx import GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper
from onnx import numpy_helper as nh

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from onnxflow.values import elem_type_of  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
Shape = Sequence[int | str | None] | None


def vi(name: str, dtype: type | np.dtype | int, shape: Shape = None) -> ValueInfoProto:
    """A tensor value info; ``dtype`` is a numpy dtype or an ONNX element type."""
    elem = dtype if isinstance(dtype, int) else elem_type_of(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: np.ndarray | float | int | bool) -> TensorProto:
    """An initializer holding ``value``."""
    return nh.from_array(np.asarray(value), name)


def model(
    nodes: Sequence[NodeProto],
    inputs: Sequence[ValueInfoProto],
    outputs: Sequence[ValueInfoProto],
    inits: Sequence[TensorProto] = (),
    opset: int = 21,
    name: str = "g",
) -> ModelProto:
    """A model of one graph at ``opset`` of ai.onnx."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def counter_body(extra_nodes: Sequence[NodeProto] = ()) -> GraphProto:
    """Loop body ``(i, cond_in, x) -> (cond_in, x + 1)`` on a float32 [1] counter."""
    return helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["x", "one"], ["x_out"]),
            *extra_nodes,
        ],
        "counter",
        [vi("i", I64, []), vi("cond_in", B, []), vi("x", F, [1])],
        [vi("cond_out", B, []), vi("x_out", F, [1])],
        [const("one", np.ones(1, np.float32))],
    )


def unbounded_loop() -> ModelProto:
    """A Loop with neither M nor cond: per the spec it runs until terminated."""
    node = helper.make_node("Loop", ["", "", "x0"], ["x_final"], name="loop", body=counter_body())
    return model([node], [vi("x0", F, [1])], [vi("x_final", F, [1])])


def chain(n: int, size: int = 64) -> ModelProto:
    """``n`` Neg nodes in a row on a float32 [size] input."""
    names = ["X", *(f"t{k}" for k in range(1, n)), "Y"]
    nodes = [
        helper.make_node("Neg", [a], [b], name=f"neg{k}")
        for k, (a, b) in enumerate(itertools.pairwise(names))
    ]
    return model(nodes, [vi("X", F, [size])], [vi("Y", F, [size])])


@functools.cache
def node_suite_cases() -> tuple[Any, ...]:
    """The ONNX node suite's cases that carry a model and data (generated once per session)."""
    from onnx.backend.test.loader import load_node_model_tests

    return tuple(c for c in load_node_model_tests() if c.model is not None and c.data_sets)


def tiny_initializers(n: int) -> bytes:
    """A serialized model of ``n`` float32 scalar initializers ``w0``..``w{n-1}`` of which only
    the first and the last are read: ``z = (x + w0) * w{n-1}``. Built as the bytes of the
    repeated field, one tensor at a time (a million take a couple of seconds)."""
    nodes = [
        helper.make_node("Add", ["x", "w0"], ["y"]),
        helper.make_node("Mul", ["y", f"w{n - 1}"], ["z"]),
    ]
    m = model(nodes, [vi("x", F, [1])], [vi("z", F, [1])])
    one = GraphProto()
    t = one.initializer.add(data_type=TensorProto.FLOAT)
    parts = []
    for i in range(n):
        t.name = f"w{i}"
        t.raw_data = np.float32(i).tobytes()
        parts.append(one.SerializeToString())
    m.graph.MergeFromString(b"".join(parts))
    return m.SerializeToString()
