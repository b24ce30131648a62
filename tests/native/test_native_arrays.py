"""ShapeMemo's compiled form: its memo compares inputs in C (onnxflow.native._arrays.same),
the same answers as the NumPy form's test (kernels._same), so the same outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from native_forms import both_forms
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.native import module
from onnxflow.ops.pass_made.kernels import _same
from onnxflow.ops.shape import reshape

FORMS_TESTED = [("onnxflow.fused", "ShapeMemo"), ("", "Reshape"), ("ai.onnx.ml", "ZipMap")]

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
    (((1, 4, 16),), ((1, 4, 16),)),  # shapes of inputs a memo takes by shape
    (((1, 4, 16),), ((1, 4, 17),)),
    (((1, 4, 16),), (_SHAPE,)),
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
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("target", TensorProto.INT64, None),  # kept a memo
        ],
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
        (compiled, _), (numpy_form, _) = (s.run(None, {"x": x}) for s in sessions)
        assert compiled.shape == numpy_form.shape == (shape[0], shape[1] * shape[2])
        np.testing.assert_array_equal(compiled, numpy_form)
    (compiled, _), (numpy_form, _) = both_forms(model, {"x": np.ones((3, 2, 2), np.float32)})
    assert compiled.shape == numpy_form.shape == (3, 4)


def test_the_compiled_memo_keeps_and_refreshes_in_c():
    """ShapeMemo's stateful compiled form (_arrays.Remembered): equal inputs (shapes at the
    shaped positions, values elsewhere) give the kept result itself without running the body;
    others run it and are kept in turn, read-only; a result past the limit is not kept."""
    from onnxflow.ops.pass_made import kernels

    runs: list[tuple] = []

    def body(x, k):
        runs.append((x.shape, int(k)))
        return np.array([x.shape[0] * int(k)], np.int64)

    memo = kernels._remembered_in_c(body, 2, frozenset({0}), module("_arrays").same)
    assert isinstance(memo, module("_arrays").Remembered)
    x, k = np.zeros((2, 3), np.float32), np.array(3, np.int64)
    first = memo(x, k)
    assert memo(np.ones((2, 3), np.float32), k.copy()) is first and not first.flags.writeable
    assert memo(np.zeros((4, 3), np.float32), k).tolist() == [12]
    assert memo(np.zeros((4, 3), np.float32), np.array(5, np.int64)).tolist() == [20]
    assert runs == [((2, 3), 3), ((4, 3), 3), ((4, 3), 5)]
    big = kernels._remembered_in_c(
        lambda x: np.zeros(kernels.MEMO_LIMIT // 8 + 1, np.int64), 1, frozenset(), None
    )
    assert big(x).flags.writeable and big.kept is None


# -- Reshape: positive dims and one -1 in C, the rest in the NumPy form -------------------------
def _reshape_of(calls):
    def fallback(data, shape, *, allowzero=0):
        calls.append((data, shape, allowzero))
        return reshape(data, shape, allowzero=allowzero)

    return module("_arrays").Reshape(fallback)


@pytest.mark.parametrize("target", [[2, 12], [-1], [4, -1, 3], [24, 1, 1], [1, 2, 3, 4], [-1, 1]])
def test_reshape_is_the_numpy_forms_view(target):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    calls = []
    for d in (data, data.transpose(2, 0, 1)):  # a view, then a copy
        got = _reshape_of(calls)(d, np.array(target, np.int64))
        want = reshape(d, np.array(target, np.int64))
        assert got.shape == want.shape and np.array_equal(got, want)
        assert np.shares_memory(got, d) == np.shares_memory(want, d)
    assert calls == []
    (compiled,), (numpy_form,) = both_forms(*_reshape_model(data, target))
    assert compiled.shape == numpy_form.shape and np.array_equal(compiled, numpy_form)


@pytest.mark.parametrize(
    ("target", "dtype", "allowzero"),
    [
        ([0, -1], np.int64, 0),  # a zero copies the input's dim
        ([0, 24], np.int64, 1),  # or stays (an error here)
        ([-1, -1], np.int64, 0),  # two inferred: an error the NumPy form words
        ([2, -2, 3], np.int64, 0),
        ([2, 12], np.int32, 0),  # not int64
        ([5, 5], np.int64, 0),  # the wrong size: the NumPy form's error
    ],
)
def test_reshape_others_go_to_the_numpy_form(target, dtype, allowzero):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    shape = np.array(target, dtype)
    calls = []
    try:
        want = reshape(data, shape, allowzero=allowzero)
    except ValueError as error:
        with pytest.raises(ValueError, match=None) as compiled_error:
            _reshape_of(calls)(data, shape, allowzero=allowzero)
        assert str(compiled_error.value) == str(error)
    else:
        got = _reshape_of(calls)(data, shape, allowzero=allowzero)
        assert got.shape == want.shape and np.array_equal(got, want)
    assert len(calls) == (0 if target == [5, 5] else 1)


def test_reshape_of_a_non_array_shape_goes_to_the_numpy_form():
    calls = []
    data = np.ones((2, 3))
    assert _reshape_of(calls)(data, [3, 2]).shape == (3, 2) and len(calls) == 1
    assert _reshape_of(calls)(data, np.array([[3, 2]], np.int64)).shape == (3, 2)
    assert len(calls) == 2


def _reshape_model(data, target):
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, data.shape),
            helper.make_tensor_value_info("s", TensorProto.INT64, [len(target)]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, {"x": data, "s": np.array(target, np.int64)}


@pytest.mark.parametrize("allowzero", [0, 1])
def test_reshape_node_with_its_allowzero_attribute(allowzero):
    """A node that states allowzero binds it into the compiled form as into the NumPy form."""
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    model, feeds = _reshape_model(data, [2, -1])
    model.graph.node[0].attribute.append(helper.make_attribute("allowzero", allowzero))
    (compiled,), (numpy_form,) = both_forms(model, feeds)
    assert compiled.shape == numpy_form.shape == (2, 12)
    feeds["s"] = np.array([0, 12], np.int64)
    if allowzero:
        with pytest.raises(onnxflow.OnnxflowError):
            both_forms(model, feeds)
    else:
        (compiled,), (numpy_form,) = both_forms(model, feeds)
        assert compiled.shape == numpy_form.shape == (2, 12)


def _zip_map_model(labels: dict[str, Any], elem: int) -> Any:
    """A ZipMap node of ``labels`` (its attribute) on a [N, 3] tensor of ``elem``."""
    key = TensorProto.STRING if "classlabels_strings" in labels else TensorProto.INT64
    out = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    node = helper.make_node("ZipMap", ["x"], ["y"], domain="ai.onnx.ml", **labels)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", elem, [None, 3])],
        [helper.make_value_info("y", out)],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize(
    "labels", [{"classlabels_int64s": [7, -1, 3]}, {"classlabels_strings": ["a", "b", "c"]}]
)
def test_zip_map_in_c_makes_the_numpy_forms_maps(labels, monkeypatch):
    """ZipMap's compiled form zips float32 rows in C (a spy counts its calls) into the NumPy
    form's maps: the same keys in order and the same Python floats (NaN, infinities, -0.0);
    a float64 or non-contiguous input takes the NumPy form."""
    from types import SimpleNamespace

    from onnxflow.ops.ml import mapping

    calls: list[int] = []
    real = mapping._ARRAYS
    spy = SimpleNamespace(zip_rows=lambda x, keys: calls.append(len(x)) or real.zip_rows(x, keys))
    monkeypatch.setattr(mapping, "_ARRAYS", spy)
    x = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    x[0] = [np.nan, np.inf, -0.0]
    for feed, elem, compiled_calls in (
        (x, TensorProto.FLOAT, [50]),
        (x[::2], TensorProto.FLOAT, []),
        (x.astype(np.float64), TensorProto.DOUBLE, []),
    ):
        calls.clear()
        (native,), (numpy_form,) = both_forms(_zip_map_model(labels, elem), {"x": feed})
        assert calls == compiled_calls
        assert len(native) == len(numpy_form) == len(feed)
        for a, b in zip(native, numpy_form, strict=True):
            assert list(a) == list(b)
            assert all(type(v) is float for v in a.values())
            assert np.array_equal(
                np.array(list(a.values())), np.array(list(b.values())), equal_nan=True
            )
            assert [np.signbit(v) for v in a.values()] == [np.signbit(v) for v in b.values()]
