"""Pointwise regions (compile/passes/pointwise.py): chains of float32 elementwise nodes run as
one Pointwise node, with the values the nodes give one by one; what cannot join stays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow

F = TensorProto.FLOAT


def _gelu_nodes() -> list:
    """A bias add and GELU as torch exports it before opset 20."""
    return [
        helper.make_node("Add", ["x", "bias"], ["xb"]),
        helper.make_node("Div", ["xb", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["xb", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]


def _model(nodes: list, outputs: tuple[str, ...] = ("y",), shape=("B", 16, 768), opset=17):
    inits = [
        numpy_helper.from_array(np.random.default_rng(1).random(768).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, list(shape))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _sessions(model, **options):
    data = model.SerializeToString()
    fused = onnxflow.InferenceSession(data, onnxflow.SessionOptions(**options))
    written = onnxflow.InferenceSession(data, onnxflow.SessionOptions(optimize=False, **options))
    return fused, written


def _x(shape=(2, 16, 768)):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3


@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_bias_and_gelu_become_one_node_with_the_same_values(kernels):
    fused, written = _sessions(_model(_gelu_nodes()), kernels=kernels)
    code = fused.source().split("\n\n")[0]
    assert code.count("for Pointwise") == 1 and "for Add" not in code
    x = _x()
    assert np.array_equal(fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


def test_a_value_read_outside_the_group_splits_it():
    """``xb`` is also a graph output: the bias add cannot join, the rest still does."""
    fused, written = _sessions(_model(_gelu_nodes(), outputs=("y", "xb")))
    code = fused.source().split("\n\n")[0]
    assert "for Add" in code and code.count("for Pointwise") == 1
    x = _x()
    for a, b in zip(fused.run(None, {"x": x}), written.run(None, {"x": x})):
        assert np.array_equal(a, b)


def test_a_group_with_two_outputs_is_left_as_written():
    nodes = [
        helper.make_node("Mul", ["x", "half"], ["a"]),
        helper.make_node("Add", ["a", "one"], ["b"]),
        helper.make_node("Shape", ["a"], ["s"]),  # reads a: a leaves the group
    ]
    graph_outputs = ("b", "s")
    model = _model(nodes, outputs=graph_outputs)
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    fused, _ = _sessions(model)
    assert "Pointwise" not in fused.source()


def test_small_static_tensors_stay_as_written():
    fused, _ = _sessions(_model(_gelu_nodes(), shape=(1, 4, 768)[1:]))  # 3,072 elements
    assert "Pointwise" not in fused.source()


def test_other_dtypes_and_attributes_stay_as_written():
    nodes = [
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("Neg", ["xd"], ["n"]),
        helper.make_node("Abs", ["n"], ["y"]),
    ]
    fused, _ = _sessions(_model(nodes))
    assert "Pointwise" not in fused.source()


def test_loop_bodies_are_not_rewritten():
    body = helper.make_graph(
        [
            helper.make_node("Neg", ["v"], ["n"]),
            helper.make_node("Abs", ["n"], ["w"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", F, [64, 128]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("w", F, [64, 128]),
        ],
    )
    loop = helper.make_node("Loop", ["n_iter", "", "x"], ["y"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [helper.make_tensor_value_info("x", F, [64, 128])],
        [helper.make_tensor_value_info("y", F, [64, 128])],
        [numpy_helper.from_array(np.array(3, np.int64), "n_iter")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fused, written = _sessions(model)
    assert "Pointwise" not in fused.source()
    x = _x((64, 128))
    assert np.array_equal(fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    "other_shape",
    [(), (1,), (768,), (16, 1), (2, 1, 1), (2, 16, 768), (1, 16, 768), (2, 1, 768)],
)
def test_broadcast_operands(other_shape):
    """Whole, scalar, trailing, per-channel and leading operands; one that one pass cannot
    read as a run of the output's dims ((2, 1, 768)) runs the nodes as written."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"]),
        helper.make_node("Max", ["a", "x"], ["b"]),
        helper.make_node("Sub", ["b", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, ["B", "S", "H"]),
            helper.make_tensor_value_info("w", F, None),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fused, written = _sessions(model)
    assert fused.source().count("for Pointwise") == 1
    feeds = {"x": _x(), "w": np.random.default_rng(2).standard_normal(other_shape).astype("f")}
    expected = written.run(None, feeds)[0]
    assert np.array_equal(fused.run(None, feeds)[0], expected)


def test_long_chains_are_cut_so_terminate_is_read_between_regions():
    from onnxflow.compile.passes.pointwise import MAX_NODES

    names = ["x", *(f"v{i}" for i in range(60))]
    nodes = [helper.make_node("Neg", [a], [b]) for a, b in itertools.pairwise(names)]
    nodes.append(helper.make_node("Abs", [names[-1]], ["y"]))
    fused, written = _sessions(_model(nodes))
    code = fused.source().split("\n\n")[0]
    regions = code.count("for Pointwise")
    assert regions == -(-61 // MAX_NODES) and "for Neg" not in code
    x = _x()
    assert np.array_equal(fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    "other_shape", [(24, 1, 1), (1, 24, 1, 1), (12, 96), (96,), (12, 1), (24, 12, 1), (7, 1, 1, 1)]
)
def test_broadcast_operands_across_chunks(other_shape):
    """Operands repeated along an image whose runs and periods do not divide the region's
    chunk: a channel's value over 1152 elements, a (12, 96) plane of period 1152, rows of 96,
    runs of 96 with a period of 12 or 288; the batch's value over a whole image."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"]),
        helper.make_node("Add", ["a", "w"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, ["N", 24, 12, 96]),
            helper.make_tensor_value_info("w", F, None),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fused, written = _sessions(model)
    assert fused.source().count("for Pointwise") == 1
    rng = np.random.default_rng(len(other_shape))
    n = 7 if other_shape[0] == 7 else 2
    feeds = {"x": _x((n, 24, 12, 96)), "w": rng.standard_normal(other_shape).astype("f")}
    expected = written.run(None, feeds)[0]
    assert np.array_equal(fused.run(None, feeds)[0], expected)


def _gelu_tanh_nodes(exponent: str = "three") -> list:
    """GELU's tanh form as GPT-2 and torch.onnx's dynamo exporter write it."""
    return [
        helper.make_node("Pow", ["x", exponent], ["p"]),
        helper.make_node("Mul", ["p", "c"], ["pc"]),
        helper.make_node("Add", ["x", "pc"], ["a"]),
        helper.make_node("Mul", ["a", "k"], ["u"]),
        helper.make_node("Tanh", ["u"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "half"], ["xh"]),
        helper.make_node("Mul", ["xh", "t1"], ["y"]),
    ]


def _gelu_tanh_model(exponent: float) -> object:
    model = _model(_gelu_tanh_nodes())
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(exponent, np.float32), "three"),
            numpy_helper.from_array(np.array(0.044715, np.float32), "c"),
            numpy_helper.from_array(np.array(0.7978846, np.float32), "k"),
        ]
    )
    return model


@pytest.mark.parametrize("kernels", ["native", "numpy"])
@pytest.mark.parametrize("exponent", [3.0, -2.0, 4.0, -3.0])
def test_tanh_gelu_with_a_small_power_is_one_region_with_the_same_bits(kernels, exponent):
    """Pow by a constant small integer and Tanh join regions: Pow's products in double rounded
    once, Tanh through NumPy's own float32 tanh loop, so the values are the nodes' bit for bit
    (the region's NumPy form is those nodes)."""
    fused, written = _sessions(_gelu_tanh_model(exponent), kernels=kernels)
    code = fused.source().split("\n\n")[0]
    assert code.count("for Pointwise") == 1, code
    assert "for Pow" not in code and "for Tanh" not in code
    x = _x()
    x[0, 0, :8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -40.0, 3e12]
    got, want = fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("exponent", [2.5, 0.5, 5.0, 1.0])
def test_a_pow_whose_exponent_the_region_does_not_compute_stays(exponent):
    """Pow joins a region only by a constant exponent among SMALL_POWERS (other powers take
    NumPy's power, which a region does not reproduce); the Tanh chain after it still joins."""
    fused, written = _sessions(_gelu_tanh_model(exponent))
    code = fused.source().split("\n\n")[0]
    assert "for Pow" in code and code.count("for Pointwise") >= 1
    x = _x()
    got, want = fused.run(None, {"x": x})[0], written.run(None, {"x": x})[0]
    assert np.array_equal(got, want, equal_nan=True)  # negative x to 2.5 or 0.5: NaN


def test_a_pow_whose_exponent_is_an_input_stays():
    nodes = _gelu_tanh_nodes("e")
    model = _gelu_tanh_model(3.0)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    model.graph.input.append(helper.make_tensor_value_info("e", F, []))
    fused, written = _sessions(model)
    assert "for Pow" in fused.source().split("\n\n")[0]
    feeds = {"x": _x(), "e": np.array(3.0, np.float32)}
    assert np.array_equal(fused.run(None, feeds)[0], written.run(None, feeds)[0])


def _body_plans(sess) -> list:
    """The subgraph plans the session compiled for its Pointwise nodes."""
    plan = sess.plan
    return [child for k, child in plan.children if plan.infos[k].op_type == "Pointwise"]


def test_a_region_compiles_its_nodes_as_written_only_for_the_numpy_form():
    """The compiled form runs the nodes as written only on inputs its one pass does not read:
    it compiles them then, not with the session; the NumPy form runs them, so compiles them."""
    native, _ = _sessions(_model(_gelu_nodes()), kernels="native")
    numpy_form, _ = _sessions(_model(_gelu_nodes()), kernels="numpy")
    assert "Pointwise" in native.source() and "Pointwise" in numpy_form.source()
    assert _body_plans(native) == [], "the compiled form compiled its fallback eagerly"
    assert len(_body_plans(numpy_form)) == 1


@pytest.mark.parametrize("kernels", ["native", "numpy"])
def test_a_region_falls_back_to_its_nodes_as_written(kernels):
    """Inputs broadcast in a way one pass does not read (both stretched) run the nodes as
    written: compiled at the first such call, with their own values, every call after it."""
    nodes = [
        helper.make_node("Add", ["x", "w"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Mul", ["r", "half"], ["y"]),
    ]
    model = _model(nodes, shape=("A", 1, "C"))
    model.graph.input.append(helper.make_tensor_value_info("w", F, [1, "B", 1]))
    fused, written = _sessions(model, kernels=kernels)
    assert "Pointwise" in fused.source()
    rng = np.random.default_rng(3)
    for a, b in ((4, 5), (3, 7), (4, 5)):
        feeds = {
            "x": rng.standard_normal((a, 1, 6)).astype(np.float32),
            "w": rng.standard_normal((1, b, 1)).astype(np.float32),
        }
        got, expected = fused.run(None, feeds)[0], written.run(None, feeds)[0]
        assert got.shape == (a, b, 6) and np.array_equal(got, expected)
