"""Shape's, Squeeze's, Unsqueeze's, Slice's, Gather's and Concat's compiled forms
(onnxflow.native._arrays.Shape, Axes, Slice, Gather, Concat): the dims read, dropped or
inserted, the slice clamped, take and concatenate called, in C give the NumPy form's very result
(for views: shape, strides, base) of the same data; whatever the NumPy form would refuse goes to
it and raises its error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.ops import indexing, shape

FORMS_TESTED = [
    ("", "Shape"),
    ("", "Squeeze"),
    ("", "Unsqueeze"),
    ("", "Slice"),
    ("", "Gather"),
    ("", "Concat"),
    ("", "Transpose"),
    ("", "Split"),
    ("", "Pad"),
]

pytestmark = pytest.mark.skipif(shape._ARRAYS is None, reason="native/_arrays not built")

BIG = np.iinfo(np.int64).max
SMALL = np.iinfo(np.int64).min


def _ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _same_outcome(compiled: Any, numpy_form: Any, *args: Any) -> None:
    """Both forms give the same view of the same data, or raise the same error."""
    try:
        want = numpy_form(*args)
    except Exception as exc:  # the compiled form must hand these to the NumPy form
        with pytest.raises(type(exc)) as raised:
            compiled(*args)
        assert str(raised.value) == str(exc)
        return
    got = compiled(*args)
    assert got.__class__ is want.__class__
    assert (got.shape, got.strides, got.dtype) == (want.shape, want.strides, want.dtype)
    assert got.tobytes() == want.tobytes()
    assert np.shares_memory(got, args[0]) == np.shares_memory(want, args[0])


DATA = np.arange(24, dtype=np.float32).reshape(2, 1, 3, 1, 4)

AXES_CASES = [
    (DATA, _ints(1)),
    (DATA, _ints(-2, 1)),
    (DATA, _ints(3, 1)),
    (DATA, _ints(0)),  # a dim of 2: refused
    (DATA, _ints(1, 1)),  # repeated
    (DATA, _ints(1, -4)),  # the same axis twice, once negative
    (DATA, _ints(5)),  # out of range
    (DATA, _ints(-6)),
    (DATA, _ints()),
    (DATA, None),
    (DATA, np.array([1], np.int32)),  # another dtype: the NumPy form's
    (DATA[:, :, ::2], _ints(1, 3)),  # a strided view
    (np.array(3.5), _ints(0)),
    (np.array(3.5), _ints(-1)),
    (np.zeros((0, 1), np.int64), _ints(1)),
    (np.zeros((0, 1), np.int64), _ints(0)),
]


@pytest.mark.parametrize("data, axes", AXES_CASES)
def test_squeeze_and_unsqueeze_are_the_numpy_forms(data, axes):
    """Every axes input: the same view, or the NumPy form's error."""
    _same_outcome(shape._SQUEEZE_COMPILED, shape.squeeze, data, axes)
    if axes is not None:
        _same_outcome(shape._UNSQUEEZE_COMPILED, shape.unsqueeze, data, axes)


GRID = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

SLICE_CASES = [
    (_ints(0), _ints(2), None, None),
    (_ints(1, 0), _ints(BIG, -1), _ints(2, 0), None),
    (_ints(-1), _ints(SMALL), _ints(1), _ints(-1)),  # backwards to the start
    (_ints(4, 1), _ints(0, 3), _ints(-1, 1), _ints(-2, 1)),
    (_ints(-100), _ints(100), _ints(0), _ints(2)),  # clamped both ends
    (_ints(100), _ints(-100), _ints(2), _ints(-1)),
    (_ints(2), _ints(1), _ints(0), None),  # empty
    (_ints(0, 0, 0, 0), _ints(1, 1, 1, 1), None, None),  # more starts than axes
    (_ints(0), _ints(1), _ints(3), None),  # an axis out of range
    (_ints(0, 0), _ints(1, 1), _ints(1, -2), None),  # one axis twice
    (_ints(0), _ints(1), _ints(0), _ints(0)),  # step 0
    (_ints(0, 1), _ints(1), None, None),  # lengths differ
    (_ints(0), _ints(1), _ints(0), _ints(1, 1)),
    (np.array([1], np.int32), np.array([3], np.int32), None, None),  # int32 bounds
]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICE_CASES)
@pytest.mark.parametrize("data", [GRID, GRID[:, ::2, ::-1], np.zeros((0, 4, 5), np.float32)])
def test_slice_is_the_numpy_form(data, starts, ends, axes, steps):
    """Every bound: the same view, or the NumPy form's error."""
    _same_outcome(shape._SLICE_COMPILED, shape.slice_, data, starts, ends, axes, steps)


GATHER_CASES = [
    (np.array([1, 128, 1], np.int64), np.array(2, np.int64), 0),  # a shape's dim
    (np.array([1, 128, 1], np.int64), np.array([0, -1], np.int64), 0),
    (GRID, np.array(1, np.int64), 0),  # a state's layer
    (GRID, np.array([[3, 0], [-5, 4]], np.int32), -1),
    (GRID[:, ::2, ::-1], np.array([1, 0], np.int64), 2),
    (GRID, np.array([3], np.int64), 0),  # out of range: the NumPy form's words
    (GRID, np.array([-6], np.int64), 2),
    (GRID, np.array([0], np.int64), 3),  # an axis out of range
    (GRID, np.array([0], np.uint64), 0),  # another dtype: the NumPy form's
    (np.array(4.0), np.array(0, np.int64), 0),  # a scalar: the NumPy form's error
    (GRID, np.array(-1, np.int64), 1),  # one index, copied straight: negative, a middle axis
    (GRID, np.array(4, np.int32), 2),
    (GRID > 20, np.array(2, np.int64), 0),  # bool
    (GRID.astype(">f4"), np.array(1, np.int64), 1),  # swapped bytes: take's
    (GRID[:, ::2], np.array(1, np.int64), 1),  # a strided view: take's
    (GRID, np.array(5, np.int64), 1),  # out of range: the NumPy form's words
    (GRID[0, 0], np.array(3, np.int64), 0),  # rank 1: a 0-d result
    (np.array(["a", "b"]), np.array([1, 1], np.int64), 0),
    (np.zeros((0, 3), np.float32), np.array([], np.int64), 0),
]


@pytest.mark.parametrize("data, indices, axis", GATHER_CASES)
def test_gather_is_the_numpy_form(data, indices, axis):
    """Every index: the same values, shape and dtype, or the NumPy form's error."""

    def compiled(*args: Any) -> Any:
        return indexing._GATHER_COMPILED(*args, axis=axis)

    def numpy_form(*args: Any) -> Any:
        return indexing.gather(*args, axis=axis)

    _same_outcome(compiled, numpy_form, data, indices)


CONCAT_CASES = [
    ((np.ones((1, 1, 128), np.float32), np.zeros((1, 1, 128), np.float32)), 0),  # LSTM states
    ((GRID, GRID[:, :2], GRID[:, ::-2]), 1),
    ((GRID, GRID), -1),
    ((GRID,), 2),  # one input: a copy
    ((np.array(["a"]), np.array(["bc", "d"])), 0),  # strings
    ((np.zeros((0, 4, 5), np.float32), GRID), 0),  # an empty input
    ((GRID, GRID[0]), 0),  # ranks differ: the NumPy form's error
    ((GRID, GRID[:, :2]), 0),  # other dims differ
    ((GRID, GRID), 3),  # an axis out of range
    ((np.array(1.0), np.array(2.0)), 0),  # scalars
    ((GRID, GRID[:, :1], GRID[:, 1:3].copy()), 1),  # copied straight: the middle axis
    ((GRID[:1], GRID[1:]), 0),
    ((GRID > 30, GRID < 10), 2),  # bool
    ((GRID.astype(np.int64), GRID.astype(np.int64)[:, :, :1]), -1),
    ((GRID, GRID.astype(np.float64)), 0),  # dtypes differ: promoted, as NumPy does
    ((GRID, GRID.astype(">f4")), 0),  # byte order differs
    ((GRID.astype(np.float16), GRID.astype(np.float16)), 1),
]


@pytest.mark.parametrize("inputs, axis", CONCAT_CASES)
def test_concat_is_the_numpy_form(inputs, axis):
    """Every set of inputs: a new array of the same values, shape and dtype, or the NumPy
    form's error."""

    def compiled(*args: Any) -> Any:
        return shape._CONCAT_COMPILED(*args, axis=axis)

    def numpy_form(*args: Any) -> Any:
        return shape.concat(*args, axis=axis)

    _same_outcome(compiled, numpy_form, *inputs)
    if len(inputs) == 1:
        assert not np.shares_memory(compiled(*inputs), inputs[0])


@pytest.mark.parametrize("data", [DATA, DATA[:, :, ::2], np.array(2.0), np.zeros((0, 3))])
@pytest.mark.parametrize(
    "start, end",
    [(0, None), (1, 3), (-2, None), (-9, 2), (3, 1), (2, -1), (7, None), (0, 1 << 70), (True, 2)],
)
def test_shape_is_the_numpy_form(data, start, end):
    """Every slice of the dims (negatives from the back, clamped, empty): a new int64 array of
    the same values."""

    def compiled(x: Any) -> Any:
        return shape._SHAPE_COMPILED(x, start=start, end=end)

    def numpy_form(x: Any) -> Any:
        return shape.shape(x, start=start, end=end)

    _same_outcome(compiled, numpy_form, data)


def test_sessions_run_the_compiled_glue_with_the_numpy_forms_results():
    """A streaming decoder's glue (Unsqueeze, Slice, Squeeze on constant axes and bounds) runs
    the compiled forms under kernels='native' and gives the NumPy forms' outputs."""
    consts = {
        "ax0": _ints(0),
        "s": _ints(1),
        "e": _ints(BIG),
        "a": _ints(-1),
        "st": _ints(2),
        "ax2": _ints(2),
    }
    nodes = [
        helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
        helper.make_node("Slice", ["u", "s", "e", "a", "st"], ["v"]),
        helper.make_node("Unsqueeze", ["v", "ax2"], ["w"]),
        helper.make_node("Squeeze", ["w", "ax2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "glue",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    native = onnxflow.InferenceSession(data)
    code = native.source()
    for form in ("_arrays.Axes", "_arrays.Slice"):
        assert form in code, code
    numpy_form = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy"))
    assert "_arrays" not in numpy_form.source()
    x = np.random.default_rng(3).standard_normal((2, 9)).astype(np.float32)
    for feed in (x, x[:, :4], x[:1]):
        got, want = native.run(None, {"x": feed})[0], numpy_form.run(None, {"x": feed})[0]
        assert (got.shape, got.tobytes()) == (want.shape, want.tobytes())


TRANSPOSE_CASES = [
    (GRID, None),
    (GRID, [2, 0, 1]),
    (GRID, [0, 1, 2]),
    (GRID[:, ::2, ::-1], [1, 2, 0]),  # a strided view
    (np.array(3.5), None),
    (np.array(3.5), []),
    (np.zeros((0, 4), np.float32), [1, 0]),
    (GRID, [-1, 0, 1]),  # a negative axis: the NumPy form's
    (GRID, [0, 0, 1]),  # repeated: the NumPy form's error
    (GRID, [0, 1]),  # too short
    (GRID, [0, 1, 3]),  # out of range
    (GRID, (2, 1, 0)),  # a tuple: the NumPy form's
]


@pytest.mark.parametrize("data, perm", TRANSPOSE_CASES)
def test_transpose_is_the_numpy_form(data, perm):
    """Every perm: the same view, or the NumPy form's error."""
    _same_outcome(
        lambda d: shape._TRANSPOSE_COMPILED(d, perm=perm),
        lambda d: shape.transpose(d, perm=perm),
        data,
    )


def _split_model(opset: int, n_out: int, sizes_input: bool, **attrs: Any) -> bytes:
    """One Split of X (N, L) into ``n_out`` parts, with a sizes input when ``sizes_input``."""
    names = ["x", "sizes"] if sizes_input else ["x"]
    outs = [f"y{i}" for i in range(n_out)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])]
    if sizes_input:
        inputs.append(helper.make_tensor_value_info("sizes", TensorProto.INT64, [n_out]))
    graph = helper.make_graph(
        [helper.make_node("Split", names, outs, **attrs)],
        "split",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("opset", "n_out", "sizes_input", "attrs"),
    [
        (13, 2, False, {"axis": 0}),
        (13, 3, False, {"axis": -1}),
        (11, 2, False, {"axis": 1, "split": [1, 3]}),
        (18, 3, False, {"axis": 1, "num_outputs": 3}),  # the last part smaller
        (13, 2, True, {"axis": 1}),  # a sizes input: the NumPy form's
    ],
)
def test_split_is_the_numpy_form(opset, n_out, sizes_input, attrs):
    """Split's compiled form (_arrays.Split, its indexes looked up again as X's shape changes)
    gives the NumPy form's parts for every shape of a stream, and its errors."""
    data = _split_model(opset, n_out, sizes_input, **attrs)
    native = onnxflow.InferenceSession(data)
    assert "_arrays.Split" in native.source()
    numpy_form = onnxflow.InferenceSession(data, onnxflow.SessionOptions(kernels="numpy"))
    x = np.arange(60, dtype=np.float32).reshape(6, 10)
    for feed in (x[:4, :4], x[:4, :4], x[:, :6], x[:2, :4], x[:3, :3]):
        feeds = {"x": np.ascontiguousarray(feed)}
        if sizes_input:
            feeds["sizes"] = _ints(1, feed.shape[1] - 1)
        try:
            want = numpy_form.run(None, feeds)
        except onnxflow.errors.OnnxflowError as exc:
            with pytest.raises(type(exc), match="add up|equal parts|split"):
                native.run(None, feeds)
            continue
        got = native.run(None, feeds)
        assert [(g.shape, g.tobytes()) for g in got] == [(w.shape, w.tobytes()) for w in want]


PAD_CASES = [
    (GRID, _ints(0, 1, 2, 0, 3, 1), "reflect"),
    (GRID, _ints(0, 1, 2, 0, 3, 1), "edge"),
    (GRID, _ints(0, 1, 2, 0, 3, 1), "wrap"),
    (GRID, _ints(1, 1, 2, 0, 3, 1), "reflect"),  # the same shape, other pads: made again
    (GRID[:, :3], _ints(1, 1, 2, 0, 3, 1), "reflect"),  # another shape
    (GRID, _ints(0, -1, 2, 0, 3, -2), "edge"),  # negative pads crop
    (GRID, _ints(0, 0, 0, 0, 0, 0), "reflect"),  # nothing to add: a copy
    (GRID, _ints(0, 0, 9, 0, 0, 0), "reflect"),  # wider than one reflection: np.pad's
    (GRID, _ints(0, 1, 2, 0, 3, 1), "constant"),  # the NumPy form's
    (GRID, np.array([0, 1, 2, 0, 3, 1], np.int32), "reflect"),  # other pads: the NumPy form's
    (GRID, _ints(0, 1, 2, 0), "reflect"),  # too few pads: its error
    (GRID, _ints(0, 1, 2, 0, 3, 1), "mirror"),  # an unknown mode: its error
    (np.zeros((2, 0), np.float32), _ints(0, 1, 0, 1), "edge"),
]


def test_pad_is_the_numpy_form():
    """Every case, in turn on one compiled form (its kept crop and gathers made again as the
    shape, pads or mode change): the NumPy form's values, or its error."""
    for data, pads, mode in PAD_CASES + PAD_CASES[:3]:
        try:
            want = shape.pad(data, pads, None, None, mode=mode)
        except Exception as exc:
            with pytest.raises(type(exc)) as raised:
                shape._PAD_COMPILED(data, pads, None, None, mode=mode)
            assert str(raised.value) == str(exc)
            continue
        got = shape._PAD_COMPILED(data, pads, None, None, mode=mode)
        assert got.__class__ is want.__class__ and got.dtype == want.dtype
        assert (got.shape, got.tobytes()) == (want.shape, want.tobytes())
        assert not np.shares_memory(got, data)
    axes = shape._PAD_COMPILED(GRID, _ints(1, 2), None, _ints(1), mode="edge")
    assert axes.tobytes() == shape.pad(GRID, _ints(1, 2), None, _ints(1), mode="edge").tobytes()
