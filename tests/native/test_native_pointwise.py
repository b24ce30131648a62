"""A pointwise region's compiled program against its nodes run one by one (its NumPy form):
every instruction, on special values, bit for bit (the signs of zeros included)."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms
from onnx import TensorProto, helper, numpy_helper

from onnxflow.compile.passes.pointwise import ARITY

FORMS_TESTED = [("onnxflow.fused", "Pointwise")]

F = TensorProto.FLOAT
#: The ONNX op each instruction is declared by.
OPS = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min",
    "neg": "Neg", "abs": "Abs", "sqrt": "Sqrt", "reciprocal": "Reciprocal", "relu": "Relu",
    "erf": "Erf", "sigmoid": "Sigmoid", "clip": "Clip", "half": "HalfRound",
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
        ],
    )
    imports = [helper.make_opsetid(d, 1) for d in {DOMAINS.get(code, "")} if d]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *imports])


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a[~nan].view(np.uint32), b[~nan].view(np.uint32)
    )


@pytest.mark.parametrize("code", sorted(ARITY))
def test_each_instruction_gives_its_nodes_values(code):
    inputs = {1: [], 2: ["b"], 3: ["lo", "hi"]}[ARITY[code]]
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
