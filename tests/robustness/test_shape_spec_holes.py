"""Reshape and Slice arguments the spec rules out are refused, naming the node and the value.

NumPy reads any negative dim of a reshape as "infer" and lets a repeated index overwrite the
earlier one, so these ran and gave a result onnxruntime refuses to give. Each case is tried on
every path the node can take: computed at run time, folded at compile time (every input
constant), and inside the ``ShapeMemo`` group that shape arithmetic is gathered into.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_builders import I64, F, const, model, vi
from onnx import ModelProto, helper

import onnxflow

DATA = np.arange(6, dtype=np.float32).reshape(2, 3)


def _reshape(target: list[int], path: str, **attrs: int) -> tuple[ModelProto, dict]:
    """A Reshape named 'rs' of a [2, 3] tensor by ``target``, on ``path``: "run" (the target
    is a feed), "fold" (data and target constants) or "memo" (the data is a Shape output)."""
    node = helper.make_node("Reshape", ["d", "s"], ["y"], name="rs", **attrs)
    if path == "run":
        feeds = {"d": DATA, "s": np.array(target, np.int64)}
        return model([node], [vi("d", F, [2, 3]), vi("s", I64, [len(target)])], [vi("y", F)]), feeds
    if path == "fold":
        inits = [const("d", DATA), const("s", np.array(target, np.int64))]
        return model([node], [], [vi("y", F)], inits), {}
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Concat", ["shape", "shape", "shape"], ["d"], name="cat", axis=0),
        node,
        helper.make_node("Neg", ["y"], ["n"], name="neg"),
        helper.make_node("ReduceSum", ["n"], ["z"], name="sum", keepdims=0),
    ]
    inits = [const("s", np.array(target, np.int64))]
    return model(nodes, [vi("x", F, [2, 3])], [vi("z", I64)], inits), {"x": DATA}


PATHS = ["run", "fold", "memo"]


def _refused(m: ModelProto, feeds: dict, *words: str) -> None:
    """Opening ``m`` or running it on ``feeds`` fails with an error naming every one of
    ``words``."""
    with pytest.raises(onnxflow.OnnxflowError) as caught:
        onnxflow.InferenceSession(m).run(None, feeds)
    for word in words:
        assert word in str(caught.value), f"{word!r} not in: {caught.value}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("target", [[-3], [2, -2], [-6], [-1, -2]])
def test_reshape_refuses_a_dim_below_minus_one(path: str, target: list[int]) -> None:
    m, feeds = _reshape(target, path)
    bad = next(d for d in target if d < -1)
    _refused(m, feeds, "'rs'", "Reshape", f"dim {bad}")


@pytest.mark.parametrize("path", PATHS)
def test_reshape_refuses_two_minus_ones(path: str) -> None:
    m, feeds = _reshape([-1, -1], path)
    _refused(m, feeds, "'rs'", "more than one -1")


@pytest.mark.parametrize("path", PATHS)
def test_reshape_refuses_minus_one_and_zero_with_allowzero(path: str) -> None:
    m, feeds = _reshape([0, -1], path, allowzero=1)
    _refused(m, feeds, "'rs'", "both 0 and -1 while allowzero=1")


def test_reshape_v1_attribute_refuses_a_dim_below_minus_one() -> None:
    node = helper.make_node("Reshape", ["d"], ["y"], name="rs1", shape=[3, -2])
    m = model([node], [vi("d", F, [2, 3])], [vi("y", F)], opset=1)
    _refused(m, {"d": DATA}, "'rs1'", "dim -2")


@pytest.mark.parametrize("path", PATHS)
def test_reshape_still_infers_one_minus_one(path: str) -> None:
    m, feeds = _reshape([0, -1], path)
    got = onnxflow.InferenceSession(m).run(None, feeds)[0]
    if path != "memo":
        np.testing.assert_array_equal(got, DATA)


def _slice(axes: list[int], starts: list[int], ends: list[int], path: str) -> tuple:
    """A Slice named 'sl' of a [3, 4] tensor along ``axes``: "run" (feeds), "fold" or
    "attr" (Slice-1, bounds as attributes)."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    if path == "attr":
        node = helper.make_node(
            "Slice", ["x"], ["y"], name="sl", starts=starts, ends=ends, axes=axes
        )
        return model([node], [vi("x", F, [3, 4])], [vi("y", F)], opset=1), {"x": data}
    node = helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"], name="sl")
    bounds = {k: np.array(v, np.int64) for k, v in zip(("st", "en", "ax"), (starts, ends, axes))}
    if path == "fold":
        inits = [const("x", data), *(const(k, v) for k, v in bounds.items())]
        return model([node], [], [vi("y", F)], inits, opset=13), {}
    inputs = [vi("x", F, [3, 4]), *(vi(k, I64, [len(v)]) for k, v in bounds.items())]
    return model([node], inputs, [vi("y", F)], opset=13), {"x": data, **bounds}


@pytest.mark.parametrize("path", ["run", "fold", "attr"])
@pytest.mark.parametrize("axes", [[0, 0], [1, -1], [-2, 1, 0]])
def test_slice_refuses_repeated_axes(path: str, axes: list[int]) -> None:
    m, feeds = _slice(axes, [0] * len(axes), [2] * len(axes), path)
    _refused(m, feeds, "'sl'", "Slice", f"axes {axes}", "more than once")


@pytest.mark.parametrize("path", ["run", "fold", "attr"])
@pytest.mark.parametrize("axes", [[0, 2], [-3], [5, 0]])
def test_slice_refuses_axes_out_of_range(path: str, axes: list[int]) -> None:
    m, feeds = _slice(axes, [0] * len(axes), [1] * len(axes), path)
    bad = next(a for a in axes if not -2 <= a < 2)
    _refused(m, feeds, "'sl'", f"axis {bad} is out of range")


def test_slice_without_axes_refuses_more_bounds_than_dims() -> None:
    node = helper.make_node("Slice", ["x", "st", "en"], ["y"], name="sl")
    inits = [const("st", np.zeros(3, np.int64)), const("en", np.ones(3, np.int64))]
    m = model([node], [vi("x", F, [3, 4])], [vi("y", F)], inits, opset=13)
    _refused(m, {"x": np.zeros((3, 4), np.float32)}, "'sl'", "rank 2")


@pytest.mark.parametrize("path", ["run", "fold", "attr"])
def test_slice_with_distinct_axes_still_slices(path: str) -> None:
    m, feeds = _slice([1, -2], [1, 0], [3, 2], path)
    got = onnxflow.InferenceSession(m).run(None, feeds)[0]
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.float32).reshape(3, 4)[0:2, 1:3])
