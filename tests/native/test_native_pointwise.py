"""A pointwise region's compiled program against its nodes run one by one (its NumPy form):
every instruction, on special values, bit for bit (the signs of zeros included)."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms
from onnx import TensorProto, helper, numpy_helper

from onnxflow.compile.passes.pointwise import ARITY
from onnxflow.ops.pass_made import SMALL_POWERS

FORMS_TESTED = [("onnxflow.fused", "Pointwise")]

F = TensorProto.FLOAT
#: The ONNX op each instruction is declared by.
OPS = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min",
    "neg": "Neg", "abs": "Abs", "sqrt": "Sqrt", "reciprocal": "Reciprocal", "relu": "Relu",
    "erf": "Erf", "sigmoid": "Sigmoid", "clip": "Clip", "half": "HalfRound", "tanh": "Tanh",
    "pow": "Pow",
}  # fmt: skip
#: Instructions declared by a node the passes make (float16 models' rounding), by domain.
DOMAINS = {"half": "onnxflow.fused"}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e-45, -3e38, 3e38, 2.5]
SPECIAL += [65504.0, 65520.0, -65519.996, 6e-8, -2.9e-8, 1.00048828125, 3e-5]  # float16's edges


def _values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    special = np.array(SPECIAL, np.float32)
    x = rng.standard_normal(n).astype(np.float32) * 4
    x[: n // 2] = rng.choice(special, n // 2)
    return x.reshape(4, n // 4)


def _model(code: str, inputs: list[str]):
    """``Neg`` then the instruction: a region of two nodes (Neg is exact, so each
    instruction's own values decide the comparison)."""
    nodes = [
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node(OPS[code], ["nx", *inputs], ["y"], domain=DOMAINS.get(code, "")),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, [4, 2048]) for n in ("x", "b") if n in ["x", *inputs]],
        [helper.make_tensor_value_info("y", F, [4, 2048])],
        [
            numpy_helper.from_array(np.array(-0.75, np.float32), "lo"),
            numpy_helper.from_array(np.array(1.5, np.float32), "hi"),
            *(numpy_helper.from_array(np.array(n, np.float32), f"n{n}") for n in SMALL_POWERS),
        ],
    )
    imports = [helper.make_opsetid(d, 1) for d in {DOMAINS.get(code, "")} if d]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *imports])


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a[~nan].view(np.uint32), b[~nan].view(np.uint32)
    )


#: The second operand of each instruction's test: a run-time input, or for pow each of the
#: constant exponents it admits.
SECOND = {code: [["b"]] for code in ARITY} | {"pow": [[f"n{n}"] for n in sorted(SMALL_POWERS)]}


@pytest.mark.parametrize(
    "code, second",
    [(c, s) for c in sorted(ARITY) for s in (SECOND[c] if ARITY[c] == 2 else [[]])],
)
def test_each_instruction_gives_its_nodes_values(code, second):
    inputs = {1: [], 2: second, 3: ["lo", "hi"]}[ARITY[code]]
    feeds = {"x": _values(8192, 0), "b": _values(8192, 1)}
    feeds = {k: v for k, v in feeds.items() if k == "x" or k in inputs}
    (compiled,), (numpy_form,) = both_forms(_model(code, inputs), feeds)
    if code in ("erf", "sigmoid"):  # their compiled and NumPy forms differ: test_native_math
        (unfused,), _ = both_forms(_model(code, inputs), feeds, optimize=False)
        assert _same_bits(compiled, unfused)
        return
    assert _same_bits(compiled, numpy_form)


@pytest.mark.parametrize("bounds", [["lo", ""], ["", "hi"], ["lo", "hi"]])
def test_clip_with_omitted_bounds(bounds):
    model = _model("clip", bounds)
    feeds = {"x": _values(8192, 3)}
    (compiled,), (numpy_form,) = both_forms(model, feeds)
    assert _same_bits(compiled, numpy_form)


def test_sizes_around_the_chunk():
    """Outputs shorter than, equal to and not a multiple of the compiled loop's chunk."""
    for n in (1, 511, 512, 513, 5000):
        nodes = [
            helper.make_node("Mul", ["x", "x"], ["a"]),
            helper.make_node("Add", ["a", "x"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", F, ["N"])],
            [helper.make_tensor_value_info("y", F, ["N"])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        (compiled,), (numpy_form,) = both_forms(model, {"x": x})
        assert _same_bits(compiled, numpy_form)


# -- the region's call, in C (native._pointwise.Region) -----------------------------------------
_ADD = np.array([[0, 0, 1, -1]], np.int32)  # out = input 0 + input 1


def _region():
    """A compiled ``a + b`` region and the list of the argument tuples its fallback saw."""
    from onnxflow.native import module

    seen = []

    def as_written(*args):
        seen.append(args)
        return np.add(*args)

    return module("_pointwise").Region(_ADD, as_written), seen


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((1, 1, 64), (1, 1, 64)),  # a transformer step's
        ((1, 1, 64), (64,)),  # a bias
        ((2, 3, 5), ()),  # a scalar
        ((2, 4, 3, 3), (4, 1, 1)),  # per channel
        ((3, 1), (3, 4)),  # both broadcast
        ((1,), (7,)),
        ((), ()),
    ],
)
def test_region_call_runs_every_layout_one_pass_reads(a_shape, b_shape):
    region, seen = _region()
    rng = np.random.default_rng(len(a_shape) + len(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    for x, y in ((a, b), (b, a)):
        got = region(x, y)
        expected = np.add(x, y)
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert _same_bits(got, expected)
    assert seen == []


def test_region_call_reads_strided_inputs():
    region, seen = _region()
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for x, y in ((a.T, a.T[::-1]), (a[:, ::2], np.float32(2) * a[:, 1::2])):
        assert _same_bits(region(x, y), np.add(x, y))
    assert seen == []


def test_region_call_gives_empty_outputs_without_running():
    region, seen = _region()
    got = region(np.zeros((0, 3), np.float32), np.ones((3,), np.float32))
    assert got.shape == (0, 3) and got.dtype == np.float32 and seen == []


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize(
    "a, b",
    [
        (np.ones(3, np.float64), np.ones(3, np.float64)),  # not float32
        (np.ones(3, np.float32), np.ones(3, np.float64)),
        (np.ones(3, ">f4"), np.ones(3, np.float32)),  # swapped bytes
        (np.ones(3, np.float32).view(_Sub), np.ones(3, np.float32)),  # a subclass
        (np.ones(3, np.float32), 1.5),  # not an array
        (np.ones((4, 1, 3), np.float32), np.ones((1, 5, 1), np.float32)),  # not one run
        (np.ones((1,) * 40, np.float32), np.ones(1, np.float32)),  # rank above the C table
    ],
)
def test_region_call_leaves_other_inputs_to_the_nodes_as_written(a, b):
    region, seen = _region()
    got = region(a, b)
    assert len(seen) == 1 and seen[0][0] is a and seen[0][1] is b
    np.testing.assert_array_equal(got, np.add(a, b))


def test_region_call_lets_the_nodes_report_shapes_that_do_not_broadcast():
    region, seen = _region()
    with pytest.raises(ValueError, match="broadcast"):
        region(np.ones(3, np.float32), np.ones(4, np.float32))
    assert len(seen) == 1


def test_region_call_with_more_inputs_than_its_table_runs_the_nodes():
    from onnxflow.native import module

    region = module("_pointwise").Region(_ADD, lambda *args: len(args))
    assert region(*[np.ones(2, np.float32)] * 17) == 17
