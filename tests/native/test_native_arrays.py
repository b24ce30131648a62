"""ShapeMemo's compiled form: its memo compares inputs in C (onnxflow.native._arrays.same),
the same answers as the NumPy form's test (kernels._same), so the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.native import module
from onnxflow.ops.pass_made.kernels import _same

FORMS_TESTED = [("onnxflow.fused", "ShapeMemo")]

_SHAPE = np.array([1, 4, 16], np.int64)
_GRID = np.arange(12, dtype=np.int64).reshape(3, 4)


class _Sub(np.ndarray):
    pass


PAIRS = [
    ((_SHAPE,), (_SHAPE,)),  # the same object
    ((_SHAPE,), (_SHAPE.copy(),)),  # equal values
    ((_SHAPE,), (np.array([1, 4, 17], np.int64),)),
    ((_SHAPE,), (np.array([1, 4], np.int64),)),  # another shape
    ((_SHAPE,), (_SHAPE.astype(np.int32),)),  # another dtype
    ((_SHAPE,), (_SHAPE.astype(np.dtype(">i8")),)),  # other bytes of equal values
    ((_SHAPE,), (_SHAPE.astype(np.dtype("=i8")),)),  # an equivalent dtype
    ((np.array(0.0),), (np.array(-0.0),)),  # bitwise: 0.0 and -0.0 differ
    ((np.array(np.nan),), (np.array(np.nan),)),
    ((_GRID.T.copy(),), (_GRID.T,)),  # strided, equal
    ((_GRID[:, ::2].copy(),), (_GRID[:, 1::2],)),  # strided, not equal
    ((_SHAPE,), (_SHAPE.view(_Sub),)),  # a subclass
    ((_SHAPE,), ([1, 4, 16],)),  # not an array
    ((1,), (1,)),  # one int object
    ((_SHAPE, _SHAPE), (_SHAPE,)),  # as zip: to the shorter
    ((_SHAPE, _GRID), (_SHAPE.copy(), _GRID + 0)),
    ((_SHAPE, _GRID), (_SHAPE.copy(), _GRID + 1)),
    ((), ()),
    ((np.zeros((0, 3)),), (np.zeros((0, 3)),)),
]


@pytest.mark.parametrize(("kept", "now"), PAIRS)
def test_same_answers_as_the_numpy_forms_test(kept, now):
    assert module("_arrays").same(kept, now) is _same(kept, now)


def _model():
    """y = Reshape(x, [batch, H * W]): its target from x's shape, through a ShapeMemo."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["h"], axis=0),
        helper.make_node("Gather", ["shape", "two"], ["w"], axis=0),
        helper.make_node("Mul", ["h", "w"], ["hw"]),
        helper.make_node("Concat", ["batch", "hw"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_memo_forms_follow_changing_shapes():
    model = _model()
    sessions = [
        onnxflow.InferenceSession(model.SerializeToString(), onnxflow.SessionOptions(kernels=k))
        for k in ("native", "numpy")
    ]
    assert "ShapeMemo" in sessions[0].source()
    for shape in [(2, 3, 4), (2, 3, 4), (5, 1, 2), (2, 3, 4), (2, 6, 2), (1, 1, 1)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        (compiled,), (numpy_form,) = (s.run(None, {"x": x}) for s in sessions)
        assert compiled.shape == numpy_form.shape == (shape[0], shape[1] * shape[2])
        np.testing.assert_array_equal(compiled, numpy_form)
    (compiled,), (numpy_form,) = both_forms(model, {"x": np.ones((3, 2, 2), np.float32)})
    assert compiled.shape == numpy_form.shape == (3, 4)
