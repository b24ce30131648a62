"""Shape and indexing kernels: what the node suite does not pin down.

Old versions' attribute forms, index dtypes, negative indices, the spec's clamping and ordering
rules, inputs left untouched, and clear errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from op_testing import runner

from onnxflow.errors import OnnxflowError

I64 = np.int64


run = runner(opset=21)


def i64(*values):
    """Return an int64 tensor of the values, or of the one nested list given."""
    if len(values) == 1 and isinstance(values[0], list):
        return np.array(values[0], dtype=I64)
    return np.array(values, dtype=I64)


# -- never writing into inputs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "inputs"),
    [
        (
            "ScatterElements",
            18,
            {"reduction": "add"},
            [np.zeros((2, 3)), i64([[0, 1, -1]]), np.ones((1, 3))],
        ),
        ("ScatterND", 18, {"reduction": "max"}, [np.zeros((2, 3)), i64([[1, -1]]), np.ones(1)]),
        ("ScatterND", 13, {}, [np.zeros((2, 3)), i64([[0], [1]]), np.ones((2, 3))]),
        ("Scatter", 9, {}, [np.zeros((2, 3)), i64([[1, 0, 1]]), np.ones((1, 3))]),
        ("TensorScatter", 24, {}, [np.zeros((2, 4, 2)), np.ones((2, 1, 2)), i64(1, 3)]),
        ("ReverseSequence", 10, {}, [np.arange(6.0).reshape(3, 2), i64(3, 2)]),
        ("CumSum", 14, {"reverse": 1}, [np.arange(4.0), np.array(0)]),
        ("TopK", 11, {}, [np.array([3.0, 1.0, 2.0]), i64(2)]),
    ],
)
def test_inputs_are_not_mutated(op, opset, attrs, inputs):
    before = [x.copy() for x in inputs]
    run(op, inputs, opset=opset, n_out=2 if op == "TopK" else 1, **attrs)
    for x, y in zip(inputs, before):
        np.testing.assert_array_equal(x, y)


# -- generators and metadata --------------------------------------------------------------------


def test_shape_and_size_are_int64_and_shape_slices_with_clamping():
    x = np.zeros((2, 3, 4, 5), np.float32)
    assert run("Shape", [x], opset=1).dtype == I64
    np.testing.assert_array_equal(run("Shape", [x], start=-3, end=-1), [3, 4])
    np.testing.assert_array_equal(run("Shape", [x], start=-10, end=10), [2, 3, 4, 5])
    assert run("Shape", [x], start=3, end=1).shape == (0,)
    size = run("Size", [x])
    assert size.dtype == I64 and size.shape == () and size == 120


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({"value_float": 2.5}, np.array(2.5, np.float32)),
        ({"value_floats": [1.0, 2.0]}, np.array([1.0, 2.0], np.float32)),
        ({"value_int": 3}, np.array(3, I64)),
        ({"value_ints": [1, 2]}, np.array([1, 2], I64)),
        ({"value_string": "ab"}, np.array("ab", dtype=object)),
        ({"value_strings": ["a", "b"]}, np.array(["a", "b"], dtype=object)),
    ],
)
def test_constant_value_attributes(attrs, expected):
    out = run("Constant", [], opset=13, **attrs)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def test_constant_sparse_value_with_flat_and_coordinate_indices():
    values = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
    flat = helper.make_sparse_tensor(
        values, helper.make_tensor("i", TensorProto.INT64, [2], [1, 7]), [2, 4]
    )
    coords = helper.make_sparse_tensor(
        values, helper.make_tensor("i", TensorProto.INT64, [2, 2], [0, 1, 1, 3]), [2, 4]
    )
    expected = np.array([[0, 1, 0, 0], [0, 0, 0, 2]], np.float32)
    np.testing.assert_array_equal(run("Constant", [], opset=11, sparse_value=flat), expected)
    np.testing.assert_array_equal(run("Constant", [], opset=13, sparse_value=coords), expected)


def test_constant_value_string_attribute_is_rejected_before_version_12():
    with pytest.raises(OnnxflowError, match="value_int"):
        run("Constant", [], opset=11, value_int=3)


def test_constant_of_shape_and_eye_like():
    out = run("ConstantOfShape", [i64()], opset=9)
    assert out.shape == () and out.dtype == np.float32 and out == 0
    value = helper.make_tensor("v", TensorProto.INT32, [1], [7])
    out = run("ConstantOfShape", [i64(2, 0)], opset=20, value=value)
    assert out.shape == (2, 0) and out.dtype == np.int32
    eye = run("EyeLike", [np.zeros((3, 4), np.int32)], opset=9, k=1, dtype=TensorProto.DOUBLE)
    np.testing.assert_array_equal(eye, np.eye(3, 4, k=1))
    assert eye.dtype == np.float64
    assert run("EyeLike", [np.zeros((2, 2), np.int8)], opset=22).dtype == np.int8


@pytest.mark.parametrize(
    ("start", "limit", "delta", "expected"),
    [(3, 9, 3, [3, 6]), (10, 4, -2, [10, 8, 6]), (5, 1, 1, []), (0, 0, 1, [])],
)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64, np.int16])
def test_range_count_and_dtype(start, limit, delta, expected, dtype):
    out = run(
        "Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)], opset=11
    )
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.array(expected, dtype))


def test_range_float_count_is_ceil_of_span_over_delta():
    out = run(
        "Range", [np.array(0.0, np.float32), np.array(1.0, np.float32), np.array(0.3, np.float32)]
    )
    assert out.shape == (4,)


def test_range_accepts_one_element_tensors_and_rejects_zero_delta():
    out = run("Range", [i64(2), i64(8), i64(3)])
    np.testing.assert_array_equal(out, [2, 5])
    with pytest.raises(OnnxflowError, match="delta cannot be 0"):
        run("Range", [i64(2), i64(8), i64(0)])


# -- reshaping ----------------------------------------------------------------------------------


def test_reshape_zero_copies_dim_unless_allowzero():
    x = np.zeros((0, 3), np.float32)
    assert run("Reshape", [x, i64(0, 3)], opset=14).shape == (0, 3)
    assert run("Reshape", [x, i64(3, 0)], opset=14, allowzero=1).shape == (3, 0)
    y = np.arange(24.0).reshape(2, 3, 4)
    assert run("Reshape", [y, i64(0, -1)], opset=13).shape == (2, 12)
    assert run("Reshape", [y], opset=1, shape=[4, 0, -1]).shape == (4, 3, 2)
    with pytest.raises(OnnxflowError, match="0 and -1"):
        run("Reshape", [x, i64(0, -1)], opset=14, allowzero=1)


def test_squeeze_unsqueeze_old_attribute_forms():
    x = np.zeros((1, 3, 1), np.float32)
    assert run("Squeeze", [x], opset=1, axes=[0]).shape == (3, 1)
    assert run("Squeeze", [x], opset=11).shape == (3,)
    assert run("Unsqueeze", [np.zeros((3, 4))], opset=1, axes=[0, 3]).shape == (1, 3, 4, 1)
    assert run("Unsqueeze", [np.zeros((3, 4)), i64(-1, 0)], opset=13).shape == (1, 3, 4, 1)
    with pytest.raises(OnnxflowError, match="size is not 1"):
        run("Squeeze", [x, i64(1)], opset=13)


def test_flatten_zero_axis_and_empty_input():
    assert run("Flatten", [np.zeros((2, 3, 4))], axis=0).shape == (1, 24)
    assert run("Flatten", [np.zeros((2, 0, 4))], axis=-1).shape == (0, 4)


def test_concat_strings_empty_tensors_and_version_1_default_axis():
    a, b = np.array([["a"]], dtype=object), np.array([["b", "c"]], dtype=object)
    out = run("Concat", [a, b], axis=1)
    assert out.dtype == object and out.tolist() == [["a", "b", "c"]]
    out = run("Concat", [np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32)], axis=0)
    assert out.shape == (2, 3)
    assert run("Concat", [np.zeros((2, 1)), np.zeros((2, 2))], opset=1).shape == (2, 3)


def test_split_forms():
    x = np.arange(10.0)
    assert [p.tolist() for p in run("Split", [x], opset=13, n_out=2)] == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
    ]
    parts = run("Split", [x], opset=18, n_out=3, num_outputs=3)
    assert [len(p) for p in parts] == [4, 4, 2]
    assert [len(p) for p in run("Split", [x], opset=2, n_out=2, split=[3, 7])] == [3, 7]
    assert [len(p) for p in run("Split", [x, i64(0, 10)], opset=13, n_out=2)] == [0, 10]
    assert [len(p) for p in run("Split", [x, i64()], opset=13, n_out=2)] == [5, 5]
    with pytest.raises(OnnxflowError, match="equal parts"):
        run("Split", [x], opset=13, n_out=3)
    with pytest.raises(OnnxflowError, match="do not add up"):
        run("Split", [x, i64(3, 3)], opset=13, n_out=2)


def test_slice_negative_step_clamps_start_to_last_and_end_to_before_first():
    x = np.arange(5)
    np.testing.assert_array_equal(run("Slice", [x, i64(-20), i64(-30), i64(0), i64(-1)]), [0])
    np.testing.assert_array_equal(
        run("Slice", [x, i64(100), i64(-100), i64(0), i64(-2)]), [4, 2, 0]
    )
    np.testing.assert_array_equal(run("Slice", [x], opset=1, starts=[1], ends=[-1]), [1, 2, 3])
    with pytest.raises(OnnxflowError, match="step cannot be 0"):
        run("Slice", [x, i64(0), i64(3), i64(0), i64(0)])


def test_pad_attribute_versions_axes_and_negative_pads():
    x = np.arange(6.0).reshape(2, 3)
    out = run("Pad", [x], opset=2, pads=[0, 1, 0, 0], value=9.0)
    np.testing.assert_array_equal(out, [[9, 0, 1, 2], [9, 3, 4, 5]])
    out = run("Pad", [x], opset=1, paddings=[1, 0, 0, 0], mode="edge")
    np.testing.assert_array_equal(out, [[0, 1, 2], [0, 1, 2], [3, 4, 5]])
    out = run("Pad", [x, i64(1, 1), None, i64(-1)], opset=18)
    np.testing.assert_array_equal(out, [[0, 0, 1, 2, 0], [0, 3, 4, 5, 0]])
    out = run("Pad", [x, i64(0, -1, 0, 2)], opset=19, mode="wrap")
    np.testing.assert_array_equal(out, [[1, 2, 1, 2], [4, 5, 4, 5]])
    assert run("Pad", [x.astype(np.int8), i64(1, 0, 0, 0)], opset=13).dtype == np.int8


@pytest.mark.parametrize(
    ("pads", "expected"),
    [
        ([-4, 2], [-1]),  # the crop runs one past the far end: one of the two pads remains
        ([2, -4], [-1]),
        ([2, -5], []),
        ([-3, 0], []),
        ([-1, -1], [2]),
        ([-1, 2], [2, 3, -1, -1]),
    ],
    ids=["crop_past_end", "crop_past_start", "to_empty_from_pads", "to_empty", "both", "mixed"],
)
def test_pad_output_length_is_n_plus_pads_even_when_a_crop_passes_the_data(
    pads: list[int], expected: list[int]
) -> None:
    x = np.array([1, 2, 3], np.int32)
    y = run("Pad", [x, np.array(pads, np.int64), np.array(-1, np.int32)])
    assert y.tolist() == expected


def test_pad_strings_default_to_empty_string():
    out = run("Pad", [np.array(["a"], dtype=object), i64(1, 0)], opset=13)
    assert out.tolist() == ["", "a"]


# -- gathering and scattering -------------------------------------------------------------------


def test_negative_indices_in_gathers():
    data = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(run("Gather", [data, np.array(-1, np.int32)]), data[-1])
    np.testing.assert_array_equal(
        run("Gather", [data, i64([-1, 0])], opset=1, axis=1), data[:, [3, 0]]
    )
    np.testing.assert_array_equal(
        run("GatherElements", [data, i64([[-1], [0]])], axis=1), [[3], [4]]
    )
    np.testing.assert_array_equal(run("GatherND", [data, i64([[-1, -2], [0, 1]])]), [10, 1])
    with pytest.raises(OnnxflowError, match="out of range"):
        run("Gather", [data, i64(3)])


def test_gather_nd_batch_dims():
    data = np.arange(24.0).reshape(2, 3, 4)
    out = run(
        "GatherND", [data, i64([[[-1], [0]], [[1], [1]], [[0], [3]]][:2])], opset=12, batch_dims=1
    )
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out, [[data[0, 2], data[0, 0]], [data[1, 1], data[1, 1]]])
    out = run("GatherND", [data, i64([[[3], [-4], [1]], [[0], [1], [2]]])], batch_dims=2)
    np.testing.assert_array_equal(out, [[3, 4, 9], [12, 17, 22]])


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [("add", [1, 6, 9]), ("mul", [1, 6, 24]), ("max", [1, 3, 4]), ("min", [1, 1, 2])],
)
def test_scatter_nd_reductions_with_duplicate_and_negative_indices(reduction, expected):
    data, indices = np.array([1.0, 1.0, 2.0]), i64([[-2], [2], [1], [-1]])
    updates = np.array([2.0, 4.0, 3.0, 3.0])
    out = run("ScatterND", [data, indices, updates], opset=18, reduction=reduction)
    np.testing.assert_array_equal(out, expected)


def test_scatter_nd_without_reduction_negative_index():
    out = run("ScatterND", [np.zeros(3), i64([[-2], [2]]), np.array([5.0, 7.0])], opset=11)
    np.testing.assert_array_equal(out, [0, 5, 7])


def test_scatter_elements_duplicates_accumulate_and_negative_indices():
    data = np.zeros((2, 3))
    out = run(
        "ScatterElements",
        [data, i64([[0, -1, 0]]), np.array([[1.0, 2.0, 3.0]])],
        opset=16,
        axis=1,
        reduction="add",
    )
    np.testing.assert_array_equal(out, [[4, 0, 2], [0, 0, 0]])


def test_tensor_scatter_linear_and_circular():
    cache = np.zeros((2, 4, 1))
    update = np.array([[[1.0], [2.0]], [[3.0], [4.0]]])
    out = run("TensorScatter", [cache, update, i64(0, 3)], opset=24, mode="circular")
    np.testing.assert_array_equal(out[..., 0], [[1, 2, 0, 0], [4, 0, 0, 3]])
    out = run("TensorScatter", [cache, update], opset=24)
    np.testing.assert_array_equal(out[..., 0], [[1, 2, 0, 0], [3, 4, 0, 0]])
    with pytest.raises(OnnxflowError, match="exceeds"):
        run("TensorScatter", [cache, update, i64(0, 3)], opset=24)


# -- selecting, ordering, counting -------------------------------------------------------------


def test_one_hot_negative_indices_off_in_version_9_wrap_from_11():
    indices, depth, values = i64(-1, 1), i64(3), np.array([0, 5], np.int32)
    np.testing.assert_array_equal(
        run("OneHot", [indices, depth, values], opset=9), [[0, 0, 0], [0, 5, 0]]
    )
    out = run("OneHot", [indices, depth, values], opset=11, axis=0)
    np.testing.assert_array_equal(out, [[0, 0], [0, 5], [5, 0]])
    assert out.dtype == np.int32


def test_unique_unsorted_matches_spec_example_and_outputs_int64():
    y, idx, inv, cnt = run(
        "Unique", [np.array([2, 1, 1, 3, 4, 3], np.float32)], opset=11, n_out=4, sorted=0
    )
    np.testing.assert_array_equal(y, [2, 1, 3, 4])
    np.testing.assert_array_equal(idx, [0, 1, 3, 4])
    np.testing.assert_array_equal(inv, [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(cnt, [1, 2, 2, 1])
    assert {a.dtype for a in (idx, inv, cnt)} == {np.dtype(I64)}


def test_unique_sorted_along_axis_matches_spec_example_4():
    x = np.array([[[1, 1], [0, 1], [2, 1], [0, 1]]] * 2, np.float32)
    y, idx, inv, cnt = run("Unique", [x], opset=11, n_out=4, axis=1)
    np.testing.assert_array_equal(y, [[[0, 1], [1, 1], [2, 1]]] * 2)
    np.testing.assert_array_equal(idx, [1, 0, 2])
    np.testing.assert_array_equal(inv, [1, 0, 2, 0])
    np.testing.assert_array_equal(cnt, [2, 1, 1])


def test_top_k_ties_lower_index_first_and_version_1_k_attribute():
    x = np.array([[1, 3, 3, 2, 3]], np.uint64)
    values, indices = run("TopK", [x, i64(3)], opset=11, n_out=2)
    np.testing.assert_array_equal(indices, [[1, 2, 4]])
    assert values.dtype == np.uint64 and indices.dtype == I64
    _, indices = run("TopK", [x, i64(2)], opset=11, n_out=2, largest=0)
    np.testing.assert_array_equal(indices, [[0, 3]])
    _, indices = run("TopK", [x.astype(np.float32)], opset=1, n_out=2, k=2)
    np.testing.assert_array_equal(indices, [[1, 2]])


def test_arg_max_min_last_index_and_keepdims():
    x = np.array([[1, 3, 3], [2, 2, 1]], np.float32)
    out = run("ArgMax", [x], opset=12, axis=1, select_last_index=1, keepdims=0)
    np.testing.assert_array_equal(out, [2, 1])
    assert out.dtype == I64
    out = run("ArgMin", [x], opset=1, axis=-1)
    np.testing.assert_array_equal(out, [[0], [2]])


def test_cum_sum_keeps_dtype_exclusive_reverse():
    x = np.array([1, 2, 3], np.int32)
    out = run("CumSum", [x, np.array(0, np.int32)], opset=11, exclusive=1, reverse=1)
    np.testing.assert_array_equal(out, [5, 3, 0])
    assert out.dtype == np.int32
    out = run("CumProd", [x, i64(0)], opset=26, exclusive=1)
    np.testing.assert_array_equal(out, [1, 1, 2])


def test_compress_nonzero_and_trilu():
    x = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(run("Compress", [x, np.array([False, True])], opset=9), [1])
    nz = run("NonZero", [np.array([[0, 2], [3, 0]])], opset=9)
    assert nz.dtype == I64
    np.testing.assert_array_equal(nz, [[0, 1], [1, 0]])
    np.testing.assert_array_equal(
        run("Trilu", [x, i64(1)], opset=14, upper=0), [[0, 1, 0], [3, 4, 5]]
    )


def test_depth_to_space_and_space_to_depth_are_inverse_in_both_modes():
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float32).reshape(2, 8, 2, 3)
    for mode in ("DCR", "CRD"):
        y = run("DepthToSpace", [x], opset=13, blocksize=2, mode=mode)
        assert y.shape == (2, 2, 4, 6)
        np.testing.assert_array_equal(run("SpaceToDepth", [y], opset=28, blocksize=2, mode=mode), x)


def test_center_crop_pad_odd_crop_left_odd_pad_right():
    x = np.arange(5.0)
    np.testing.assert_array_equal(run("CenterCropPad", [x, i64(2)], opset=18), [1, 2])
    np.testing.assert_array_equal(run("CenterCropPad", [x[:2], i64(5)], opset=18), [0, 0, 1, 0, 0])


def test_expand_and_tile_versions():
    out = run("Expand", [np.arange(3.0).reshape(3, 1), i64(2, 1, 4)], opset=8)
    assert out.shape == (2, 3, 4) and out.flags.writeable
    out = run("Tile", [np.arange(2.0).reshape(1, 2), i64(3), i64(1)], opset=1)
    np.testing.assert_array_equal(out, [[0, 1, 0, 1, 0, 1]])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_copies_what_np_pad_makes_in_every_mode(mode: str) -> None:
    """Pad builds its result by a fill and a copy (constant) or one gather per axis (reflect,
    edge, wrap, up to one reflection or wrap of the axis; np.pad beyond): equal to np.pad for
    pads from none to past the axis, crops included, and always a new array."""
    import ml_dtypes

    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.int64, ml_dtypes.bfloat16):
        x = rng.integers(-9, 9, (2, 3, 5)).astype(dtype)
        for begin, end in [((0, 0, 0), (0, 0, 0)), ((0, 2, 4), (1, 2, 3)), ((0, 0, 6), (0, 3, 9)),
                           ((0, -1, 2), (0, 1, -2)), ((1, 1, 1), (0, 0, 0))]:  # fmt: skip
            pads = [*begin, *end]
            got = run("Pad", [x, np.array(pads, np.int64)], opset=18, mode=mode)
            cropped = x[:, 1:, :-2] if -1 in begin else x
            widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
            if mode == "reflect" and any(
                w > n - 1 for n, p in zip(cropped.shape, widths) for w in p
            ):
                continue  # np.pad reflects past the axis again; the spec leaves it open
            want = np.pad(cropped, widths, mode=mode)
            assert got.dtype == x.dtype and got is not x
            np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_gather_counts_negative_indices_from_the_end_and_names_the_range_it_misses() -> None:
    data = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(run("Gather", [data, i64(-1, 0)], axis=1), data[:, [3, 0]])
    np.testing.assert_array_equal(run("Gather", [data, np.array(-3)], axis=0), data[0])
    for bad in (4, -5):
        with pytest.raises(OnnxflowError, match=r"valid indices are from -4 to 3"):
            run("Gather", [data, i64(0, bad)], axis=1)


def test_gathers_index_error_says_which_input_axis_and_range_in_words() -> None:
    data = np.arange(12).reshape(3, 4)
    with pytest.raises(OnnxflowError) as caught:
        run("Gather", [data, i64(0, 2, 7, 9)], axis=1)
    message = str(caught.value)
    assert "Gather's indices (input 2) along data's axis 1" in message
    assert "index 7 at position [2] is out of range (2 of 4 are; found 0..9)" in message
    assert "the axis has size 4, so valid indices are from -4 to 3" in message
    with pytest.raises(OnnxflowError, match=r"along data's axis 0: index -4 .* from -3 to 2"):
        run("Gather", [data, np.array([[-4]])], axis=0)


@pytest.mark.parametrize(
    "shape, axis, sizes, n, uneven",
    [
        ((2, 1, 32), 0, None, 2, False),  # an LSTM's two directions' states
        ((3, 10), -1, [3, 0, 7], 3, False),  # an empty part
        ((4, 7, 2), 1, None, 3, True),  # opset 18: the last part smaller
        ((5,), 0, [5], 1, False),
    ],
)
def test_split_parts_are_np_split_views(shape, axis, sizes, n, uneven):
    """Split's parts are np.split's: the same views of X (shape, strides, offset), found with
    a remembered index and no call to np.split."""
    import sys

    from onnxflow.ops.shape import _split

    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    parts = _split(x, axis, sizes, n, uneven)
    dim = shape[axis]
    chunk = -(-dim // n) if uneven else dim // n
    cuts = np.cumsum(sizes or [min(chunk, dim - i * chunk) for i in range(n)])[:-1]
    want = np.split(x, cuts, axis=axis)
    assert len(parts) == len(want) == n
    for got, ref in zip(parts, want):
        assert got.shape == ref.shape and got.strides == ref.strides
        assert got.__array_interface__["data"] == ref.__array_interface__["data"]
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name))
    try:
        _split(x, axis, sizes, n, uneven)
    finally:
        sys.setprofile(None)
    assert "split" not in calls and "array_split" not in calls, calls


def test_split_sizes_that_do_not_add_up_are_named():
    """Sizes that do not add up to the axis are refused on every call (not remembered)."""
    from onnxflow.ops.shape import _split

    x = np.zeros((2, 6), np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"split sizes \[2, 3\] do not add up to dim 6"):
            _split(x, 1, [2, 3], 2, False)


@pytest.mark.parametrize(
    "shape, indices, axis",
    [((3,), np.array([1]), 0), ((3,), np.array(-1), 0), ((2, 1, 4), np.array(1), 0)],
)
def test_gather_takes_without_numpys_wrapper(shape, indices, axis):
    """Gather on an array (a shape's dim, a state's direction) is np.take's result, a 0-d array
    for a scalar index of a vector, made by ndarray.take without np.take's Python wrapper."""
    import sys

    from onnxflow.ops.indexing import gather

    data = np.arange(int(np.prod(shape)), dtype=I64).reshape(shape)
    want = np.asarray(np.take(data, indices, axis=axis))
    calls: list[str] = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name))
    try:
        got = gather(data, indices, axis=axis)
    finally:
        sys.setprofile(None)
    assert got.__class__ is np.ndarray and got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert "take" not in calls and "_wrapfunc" not in calls, calls
