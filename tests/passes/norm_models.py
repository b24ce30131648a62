"""LayerNorm and RMSNorm written as primitives, the way exports write them (for the fusion
tests in tests/passes and tests/native)."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
HIDDEN = 64


def _mean(x: str, out: str, opset: int, axis: int = -1) -> list[NodeProto]:
    """ReduceMean over ``axis``, kept: by attribute before opset 18, by input from 18."""
    if opset >= 18:
        return [helper.make_node("ReduceMean", [x, "axes_last" if axis == -1 else "axes_1"], [out])]
    return [helper.make_node("ReduceMean", [x], [out], axes=[axis])]


def layer_norm_nodes(
    opset: int = 14, square: str = "Pow", divide: str = "Div", affine: str = "both", axis: int = -1
) -> list[NodeProto]:
    """LayerNorm of x into y as torch.onnx writes it (``square``: Pow or Mul; ``divide``: Div,
    Reciprocal or DivOne; ``affine``: both, scale or none)."""
    nodes = [*_mean("x", "m", opset, axis), helper.make_node("Sub", ["x", "m"], ["d"])]
    sq = ["d", "two"] if square == "Pow" else ["d", "d"]
    nodes += [helper.make_node(square, sq, ["d2"]), *_mean("d2", "v", opset, axis)]
    nodes += [
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
    ]
    nodes += _divide("d", divide, "n")
    last = "n"
    if affine in ("both", "scale"):
        nodes.append(helper.make_node("Mul", ["n", "gamma"], ["g"]))
        last = "g"
    if affine == "both":
        nodes.append(helper.make_node("Add", ["beta", "g"], ["y"]))
        last = "y"
    if last != "y":
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    return nodes


def _divide(d: str, divide: str, out: str) -> list[NodeProto]:
    if divide == "Div":
        return [helper.make_node("Div", [d, "s"], [out])]
    if divide == "Reciprocal":
        first = helper.make_node("Reciprocal", ["s"], ["r"])
    else:
        first = helper.make_node("Div", ["one", "s"], ["r"])
    return [first, helper.make_node("Mul", ["r", d], [out])]


def rms_norm_nodes(opset: int = 14, cast: bool = True) -> list[NodeProto]:
    """LLaMA's RMSNorm of x into y: Cast, Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Cast,
    Mul(weight)."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=F),
        helper.make_node("Pow", ["xf", "two"], ["x2"]),
        *_mean("x2", "v", opset),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Reciprocal", ["s"], ["r"]),
        helper.make_node("Mul", ["xf", "r"], ["n"]),
    ]
    if cast:
        nodes.append(helper.make_node("Cast", ["n"], ["nc"], to=F))
    nodes.append(helper.make_node("Mul", ["gamma", "nc" if cast else "n"], ["y"]))
    return nodes


def norm_model(
    nodes: list[NodeProto],
    opset: int = 14,
    outputs: tuple[str, ...] = ("y",),
    x_type: int = F,
    constant_nodes: bool = False,
    hidden: int = HIDDEN,
) -> ModelProto:
    """A model running ``nodes`` on x (batch, seq, hidden), its constants initializers (or
    Constant nodes when ``constant_nodes``)."""
    rng = np.random.default_rng(3)
    values = {
        "two": np.array(2.0, np.float32),
        "one": np.array(1.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "gamma": (rng.standard_normal(hidden) * 0.5 + 1).astype(np.float32),
        "beta": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "axes_last": np.array([-1], np.int64),
        "axes_1": np.array([1], np.int64),
    }
    tensors = [numpy_helper.from_array(v, k) for k, v in values.items()]
    if constant_nodes:
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in tensors] + nodes
        tensors = []
    graph = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", x_type, ["B", "S", hidden])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        tensors,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def activations(shape: tuple[int, ...] = (2, 7, HIDDEN), seed: int = 0) -> np.ndarray:
    """Residual-stream-like float32 rows: an offset per row and spread values."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 2 + rng.standard_normal((*shape[:-1], 1)) * 3
    return x.astype(np.float32)
