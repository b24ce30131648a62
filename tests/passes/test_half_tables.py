"""float16 tables (compile/passes/half_tables.py): elementwise nodes computing on one float16
value, each op's result rounded, become one HalfTable node whose results are the nodes' own,
bit for bit, for every float16 value."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.compile.passes import half_tables

H = TensorProto.FLOAT16
#: Every float16 value, by its bits (NaNs with every payload, both signs, both zeros).
EVERY_HALF = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(1, -1)


def _scalar(name: str, value: float) -> helper.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float16))
    )


def _chains_model(opset: int = 17, extra_output: str | None = None) -> bytes:
    """A float16 model of three chains on its input x: GELU in its tanh form (with Pow 3),
    hardswish written out (Add, Clip, Mul, Div) and GELU in its erf form, each op's result a
    float16 value; ``extra_output`` also makes that inner value an output."""
    consts = {"three": 3.0, "c": 0.044715, "k": 0.7978845608, "one": 1.0, "half": 0.5,
              "zero": 0.0, "six": 6.0, "sqrt2": 1.4142135}  # fmt: skip
    nodes = [_scalar(n, v) for n, v in consts.items()]
    nodes += [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "c"], ["cc"]),
        helper.make_node("Add", ["x", "cc"], ["inner"]),
        helper.make_node("Mul", ["inner", "k"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["tm"]),
        helper.make_node("Mul", ["tm", "half"], ["gelu"]),
        helper.make_node("Add", ["x", "three"], ["a3"]),
        helper.make_node("Clip", ["a3", "zero", "six"], ["cl"]),
        helper.make_node("Mul", ["x", "cl"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["swish"]),
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["x", "e1"], ["em"]),
        helper.make_node("Mul", ["em", "half"], ["egelu"]),
    ]
    outs = ["gelu", "swish", "egelu", *([extra_output] if extra_output else [])]
    graph = helper.make_graph(
        nodes,
        "chains",
        [helper.make_tensor_value_info("x", H, [1, None])],
        [helper.make_tensor_value_info(o, H, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


def _run(model: bytes, x: np.ndarray, **options: object) -> tuple[list[np.ndarray], str]:
    session = onnxflow.InferenceSession(model, onnxflow.SessionOptions(**options))
    return session.run(None, {"x": x}), session.source()


@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_chains_become_tables_with_the_nodes_bits_for_every_float16_value(kernels):
    model = _chains_model()
    got, code = _run(model, EVERY_HALF, kernels=kernels)
    assert code.count("= HalfTable") == 3, code
    for name in ("Tanh", "Erf", "Clip", "Pow"):
        assert f"{name}(" not in code.split("# ")[0], name
    (as_written, _) = _run(model, EVERY_HALF, optimize=False)
    for name, a, b in zip(("gelu", "swish", "egelu"), got, as_written):
        assert a.dtype == b.dtype == np.float16 and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), (name, np.flatnonzero(a.view("u2") != b.view("u2")))


def test_tables_give_the_bits_of_the_plan_without_them(monkeypatch):
    """The same session options but for the pass (no group is large enough): the rounded
    nodes as they ran before it."""
    model = _chains_model()
    x = EVERY_HALF[:, ::7].copy()
    got, _ = _run(model, x)
    monkeypatch.setattr(half_tables, "MIN_NODES", 1 << 20)
    before, code = _run(model, x)
    assert "HalfTable" not in code
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, before))


def test_a_value_read_outside_ends_the_group_before_it(monkeypatch):
    """``t`` (Tanh's rounded result) is also an output: the GELU's group cannot take the nodes
    before it into a group ending after it, and every output keeps its bits."""
    model = _chains_model(extra_output="t")
    x = EVERY_HALF[:, ::5].copy()
    got, code = _run(model, x)
    assert "t__float32 = HalfTable(x__float32)" in code  # Pow .. Tanh: one table ending at t
    monkeypatch.setattr(half_tables, "MIN_NODES", 1 << 20)
    before, _ = _run(model, x)
    for a, b in zip(got, before):  # the bits; a NaN's payload is a region's to choose
        nan = np.isnan(a)
        assert np.array_equal(nan, np.isnan(b))
        assert a[~nan].tobytes() == b[~nan].tobytes()
    (as_written, _) = _run(model, x, optimize=False)  # NaN payloads aside: float16 arithmetic
    for a, b in zip(got, as_written):
        np.testing.assert_array_equal(a, b)


def test_nodes_of_two_varying_inputs_and_float32_models_are_left_alone():
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "y"], ["m"]),
            helper.make_node("Tanh", ["m"], ["t"]),
            helper.make_node("Add", ["t", "y"], ["z"]),
        ],
        "two",
        [helper.make_tensor_value_info(n, H, [4]) for n in ("x", "y")],
        [helper.make_tensor_value_info("z", H, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    code = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "t = HalfTable(m)" in code  # Tanh and its rounding: a function of m alone
    assert "= Mul(x__float32, y__float32" in code and "= Add(t, y__float32" in code
    graph32 = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Exp", ["t"], ["z"])],
        "f32",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
    )
    model32 = helper.make_model(graph32, opset_imports=[helper.make_opsetid("", 17)])
    assert "HalfTable" not in onnxflow.InferenceSession(model32.SerializeToString()).source()


class _Asking:
    """A registry that records each operator a pass asks it about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def lookup(self, domain: str, op_type: str, opset: int) -> None:
        self.asked.append(op_type)


def test_a_graph_with_no_float16_value_is_left_without_reading_its_kernels():
    """No HalfRound and no Cast to float32: no group can start, and the pass returns before
    it asks the registry about any node (a float32 model's compile pays nothing for it)."""
    from onnxflow.compile.passes.graph_view import GraphView

    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", f, [2])],
        [helper.make_tensor_value_info("y", f, [2])],
    )
    registry = _Asking()
    view = GraphView(graph, list(graph.node), {"": 17}, registry, main=True)  # type: ignore[arg-type]
    assert half_tables.half_tables(view) is None
    assert registry.asked == [], f"the pass read the kernels of {registry.asked}"
