"""Convolution and pooling kernels: what the node suite does not pin down.

Each convolution is checked against a tiny oracle written straight from the definition (one
output pixel at a time), across ranks, groups, dilations, strides, asymmetric pads and the
chunked im2col; dtypes are preserved and inputs never mutated; MaxPool's Indices in both storage
orders round-trip through MaxUnpool; legacy versions (LpPool-1's float p, RoiAlign-10) keep their
semantics; bad shapes fail with clear messages.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from op_testing import runner

from onnxflow.errors import OnnxflowError
from onnxflow.ops import conv_paths

F32 = np.float32
RNG = np.random.default_rng(7)


run = runner(opset=22)


def normal(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


# -- oracles, one output pixel at a time --------------------------------------------------------
def conv_oracle(x, w, b, group, strides, dilations, pads):
    n, _, *spatial = x.shape
    m, cg, *kernel = w.shape
    rank = len(spatial)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *zip(pads[:rank], pads[rank:])])
    out = [
        (size + pads[i] + pads[i + rank] - (k - 1) * d - 1) // s + 1
        for i, (size, k, d, s) in enumerate(zip(spatial, kernel, dilations, strides))
    ]
    y = np.zeros((n, m, *out))
    mg = m // group
    for b_, f, *o in itertools.product(range(n), range(m), *map(range, out)):
        g = f // mg
        window = tuple(
            slice(oi * s, oi * s + (k - 1) * d + 1, d)
            for oi, s, k, d in zip(o, strides, kernel, dilations)
        )
        patch = xp[(b_, slice(g * cg, (g + 1) * cg), *window)]
        y[(b_, f, *o)] = (patch * w[f]).sum() + (0 if b is None else b[f])
    return y


def conv_transpose_oracle(x, w, group, strides, dilations, pads, output_padding):
    n, c, *spatial = x.shape
    _, mg, *kernel = w.shape
    rank = len(spatial)
    full = [
        s * (i - 1) + a + (k - 1) * d + 1
        for s, i, a, k, d in zip(strides, spatial, output_padding, kernel, dilations)
    ]
    y = np.zeros((n, mg * group, *full))
    cg = c // group
    for b_, ch, *p in itertools.product(range(n), range(c), *map(range, spatial)):
        g = ch // cg
        for k in itertools.product(*map(range, kernel)):
            pos = tuple(pi * s + ki * d for pi, s, ki, d in zip(p, strides, k, dilations))
            y[(b_, slice(g * mg, (g + 1) * mg), *pos)] += x[(b_, ch, *p)] * w[(ch, slice(None), *k)]
    crop = tuple(slice(pads[i], full[i] - pads[i + rank]) for i in range(rank))
    return y[(..., *crop)]


# -- Conv ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spatial", "kernel", "group", "strides", "dilations", "pads"),
    [
        ((9,), (3,), 1, (2,), (1,), (1, 2)),
        ((7, 8), (3, 2), 2, (1, 2), (2, 1), (1, 0, 2, 1)),
        ((7, 8), (3, 3), 4, (2, 2), (1, 1), (1, 1, 1, 1)),  # depthwise
        ((6, 6), (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0)),  # 1x1 fast path
        ((6, 6), (1, 1), 2, (2, 1), (1, 1), (0, 0, 0, 0)),  # strided 1x1
        ((5, 4, 6), (2, 3, 2), 2, (1, 2, 1), (2, 1, 1), (0, 1, 1, 1, 0, 0)),
    ],
)
def test_conv_matches_definition(spatial, kernel, group, strides, dilations, pads):
    x = normal(2, 4, *spatial)
    w = normal(4 if group == 4 else 6, 4 // group, *kernel)
    b = normal(w.shape[0])
    y = run("Conv", [x, w, b], group=group, strides=strides, dilations=dilations, pads=pads)
    expected = conv_oracle(x, w, b, group, strides, dilations, pads)
    assert y.dtype == F32
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_conv_chunked_im2col_matches_unchunked(monkeypatch):
    x, w = normal(2, 3, 11, 9), normal(5, 3, 3, 3)
    whole = run("Conv", [x, w], strides=[2, 1], pads=[1, 1, 2, 0])
    monkeypatch.setattr(conv_paths, "_CHUNK_BYTES", 1)  # one output row per GEMM
    chunked = run("Conv", [x, w], strides=[2, 1], pads=[1, 1, 2, 0])
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("auto_pad", "begin"), [("SAME_UPPER", 1), ("SAME_LOWER", 2)])
def test_conv_same_padding_puts_odd_extra_at_the_named_end(auto_pad, begin):
    x, w = normal(1, 1, 7), normal(1, 1, 4)  # total padding 3
    y = run("Conv", [x, w], auto_pad=auto_pad)
    np.testing.assert_allclose(
        y, conv_oracle(x, w, None, 1, [1], [1], [begin, 3 - begin]), atol=1e-5
    )


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_conv_keeps_dtype_and_does_not_mutate_inputs(dtype):
    x, w, b = (
        normal(1, 2, 5, 5, dtype=dtype),
        normal(3, 2, 3, 3, dtype=dtype),
        normal(3, dtype=dtype),
    )
    copies = [x.copy(), w.copy(), b.copy()]
    y = run("Conv", [x, w, b], pads=[1, 1, 1, 1])
    assert y.dtype == dtype
    for original, copy in zip([x, w, b], copies):
        np.testing.assert_array_equal(original, copy)
    tol = 1e-2 if dtype == np.float16 else 1e-10
    expected = conv_oracle(x, w, b, 1, [1, 1], [1, 1], [1, 1, 1, 1])
    np.testing.assert_allclose(y, expected, rtol=tol, atol=tol)


def test_conv_rejects_mismatched_channels_clearly():
    with pytest.raises(OnnxflowError, match=r"W.shape\[1\] \* group == C"):
        run("Conv", [normal(1, 4, 5, 5), normal(2, 3, 3, 3)])


def test_conv_rejects_unknown_auto_pad():
    with pytest.raises(OnnxflowError, match="auto_pad must be"):
        run("Conv", [normal(1, 1, 5), normal(1, 1, 3)], auto_pad="SAME")


# -- ConvTranspose, Col2Im ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spatial", "kernel", "group", "strides", "dilations", "pads", "output_padding"),
    [
        ((4,), (3,), 1, (2,), (1,), (1, 0), (1,)),
        ((3, 4), (3, 2), 2, (2, 3), (2, 1), (1, 0, 0, 1), (1, 0)),
        ((2, 3, 2), (2, 2, 3), 1, (1, 2, 2), (1, 1, 2), (0, 0, 1, 0, 1, 0), (0, 1, 0)),
    ],
)
def test_conv_transpose_matches_definition(
    spatial, kernel, group, strides, dilations, pads, output_padding
):
    x, w = normal(2, 4, *spatial), normal(4, 3, *kernel)
    y = run(
        "ConvTranspose",
        [x, w],
        group=group,
        strides=strides,
        dilations=dilations,
        pads=pads,
        output_padding=output_padding,
    )
    expected = conv_transpose_oracle(x, w, group, strides, dilations, pads, output_padding)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_conv_transpose_output_shape_sets_the_padding():
    x, w = normal(1, 2, 4, 4), normal(2, 3, 3, 3)
    y = run("ConvTranspose", [x, w], strides=[2, 2], output_shape=[8, 8])
    full = conv_transpose_oracle(x, w, 1, [2, 2], [1, 1], [0, 0, 0, 0], [0, 0])  # 9 x 9
    np.testing.assert_allclose(y, full[:, :, 1:, 1:], rtol=1e-4, atol=1e-4)  # total 1: at start


@pytest.mark.parametrize(("auto_pad", "begin"), [("SAME_UPPER", 0), ("SAME_LOWER", 1)])
def test_conv_transpose_same_output_is_input_times_stride(auto_pad, begin):
    x, w = normal(1, 2, 3, 4), normal(2, 1, 2, 2)
    y = run("ConvTranspose", [x, w], strides=[2, 2], auto_pad=auto_pad, output_padding=[1, 1])
    assert y.shape == (1, 1, 6, 8)  # full size 7 x 9: one padding pixel per axis
    full = conv_transpose_oracle(x, w, 1, [2, 2], [1, 1], [0, 0, 0, 0], [1, 1])
    np.testing.assert_allclose(y, full[:, :, begin : begin + 6, begin : begin + 8], atol=1e-5)


def test_col2im_counts_how_many_blocks_cover_each_pixel():
    image, block = np.array([5, 4]), np.array([2, 3])
    y = run("Col2Im", [np.ones((1, 6, 4 * 2), F32), image, block], dilations=[1, 1])
    expected = np.array([[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]])
    np.testing.assert_array_equal(y[0, 0], expected)


# -- integer convolutions -----------------------------------------------------------------------
def test_conv_integer_per_channel_weight_zero_point():
    x = RNG.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    xz, wz = np.array(128, np.uint8), np.array([1, -2, 3], np.int8)
    y = run("ConvInteger", [x, w, xz, wz], opset=10, pads=[1, 1, 1, 1])
    expected = conv_oracle(
        x.astype(np.int64) - 128,
        w - wz.reshape(3, 1, 1, 1).astype(np.int64),
        None,
        1,
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
    )
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_qlinear_conv_rounds_half_to_even_and_saturates():
    x, w = np.full((1, 1, 1, 1), 3, np.uint8), np.ones((2, 1, 1, 1), np.uint8)
    scale, zero = np.array(1.0, F32), np.array(0, np.uint8)
    b = np.array([-2, 300], np.int32)  # (3 - 2) * 0.5 = 0.5 -> 0;  (3 + 300) * 0.5 = 151.5 -> 152
    w_scale = np.array([0.5, 0.5], F32)
    y = run("QLinearConv", [x, scale, zero, w, w_scale, zero, scale, zero, b], opset=10)
    np.testing.assert_array_equal(y.ravel(), [0, 152])
    y = run("QLinearConv", [x, scale, zero, w, w_scale * 8, zero, scale, zero, b], opset=10)
    np.testing.assert_array_equal(y.ravel(), [4, 255])  # 303 * 4 saturates


# -- CausalConvWithState ------------------------------------------------------------------------
def test_causal_conv_streams_in_chunks_like_one_call():
    x, w, b = normal(2, 3, 9), normal(3, 1, 4), normal(3)
    whole, state = run("CausalConvWithState", [x, w, b], opset=27, n_out=2, activation="silu")
    first, mid = run(
        "CausalConvWithState", [x[..., :5], w, b], opset=27, n_out=2, activation="silu"
    )
    second, last = run(
        "CausalConvWithState", [x[..., 5:], w, b, mid], opset=27, n_out=2, activation="silu"
    )
    np.testing.assert_allclose(np.concatenate([first, second], axis=2), whole, rtol=1e-5)
    np.testing.assert_allclose(last, state)
    np.testing.assert_array_equal(state, x[..., -3:])


# -- windowed pools -----------------------------------------------------------------------------
def test_average_pool_count_include_pad_and_ceil_mode():
    x = np.arange(1, 6, dtype=F32).reshape(1, 1, 5)
    common = dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)
    # windows (pad,1,2) (2,3,4) (4,5,pad); ceil_mode adds none: the next would start in padding
    np.testing.assert_allclose(run("AveragePool", [x], **common).ravel(), [1.5, 3, 4.5])
    np.testing.assert_allclose(
        run("AveragePool", [x], count_include_pad=1, **common).ravel(), [1, 3, 3]
    )


def test_average_pool_ceil_window_past_the_padding_is_not_counted():
    x = np.arange(1, 7, dtype=F32).reshape(1, 1, 6)
    y = run("AveragePool", [x], kernel_shape=[3], strides=[2], ceil_mode=1, count_include_pad=1)
    np.testing.assert_allclose(y.ravel(), [2, 4, 5.5])  # last window: 5, 6 and one cell beyond


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_point_at_the_max(storage_order):
    x = normal(2, 3, 6, 5)
    y, idx = run(
        "MaxPool",
        [x],
        n_out=2,
        kernel_shape=[3, 2],
        strides=[2, 2],
        pads=[1, 0, 1, 1],
        dilations=[1, 2],
        storage_order=storage_order,
    )
    assert idx.dtype == np.int64
    source = x if storage_order == 0 else x.transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(source.ravel()[idx], y)


def test_max_unpool_indices_point_into_an_explicit_output_shape() -> None:
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    indices = np.array([[[[6, 8], [16, 18]]]], np.int64)
    y = run("MaxUnpool", [x, indices, np.array([1, 1, 5, 5], np.int64)], kernel_shape=[2, 2],
            strides=[2, 2])  # fmt: skip
    expected = np.zeros((1, 1, 5, 5), np.float32)
    expected[0, 0, 1::2, 1::2] = [[5, 6], [7, 8]]
    np.testing.assert_array_equal(y, expected)
    with pytest.raises(OnnxflowError, match=r"index 25 in I is outside an output of shape"):
        run("MaxUnpool", [x, indices + 7, np.array([1, 1, 5, 5], np.int64)],
            kernel_shape=[2, 2], strides=[2, 2])  # fmt: skip


def test_max_pool_indices_round_trip_through_max_unpool():
    x = np.abs(normal(1, 2, 4, 6)) + 0.5  # positive, so unpooled zeros never win a window
    y, idx = run("MaxPool", [x], n_out=2, kernel_shape=[2, 2], strides=[2, 2])
    restored = run("MaxUnpool", [y, idx], kernel_shape=[2, 2], strides=[2, 2])
    assert restored.shape == x.shape
    np.testing.assert_array_equal(restored[restored != 0], x[restored != 0])
    np.testing.assert_array_equal(
        run("MaxPool", [restored], kernel_shape=[2, 2], strides=[2, 2]), y
    )


def max_pool_oracle(x, kernel, strides, dilations, pads, ceil_mode):
    """MaxPool one output pixel at a time: the max of the window's taps inside the input."""
    n = len(kernel)
    spatial = x.shape[2:]
    out = []
    for a in range(n):
        span = spatial[a] + pads[a] + pads[a + n] - ((kernel[a] - 1) * dilations[a] + 1)
        size = (math.ceil if ceil_mode else math.floor)(span / strides[a]) + 1
        if ceil_mode and (size - 1) * strides[a] >= spatial[a] + pads[a]:
            size -= 1  # a window may not start in the end padding
        out.append(size)
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    for pixel in itertools.product(*map(range, out)):
        taps = []
        for tap in itertools.product(*map(range, kernel)):
            pos = [p * s - b + t * d for p, s, b, t, d in zip(pixel, strides, pads, tap, dilations)]
            if all(0 <= q < size for q, size in zip(pos, spatial)):
                taps.append(x[(..., *pos)])
        y[(..., *pixel)] = np.max(np.stack(taps), axis=0)
    return y


@pytest.mark.parametrize(
    "shape, kernel, strides, dilations, pads, ceil_mode",
    [
        ((2, 3, 11), [3], [2], [1], [1, 1], 0),
        ((1, 2, 9, 8), [3, 3], [2, 2], [1, 1], [0, 0, 0, 0], 0),
        ((1, 2, 9, 8), [3, 2], [2, 1], [1, 2], [1, 0, 1, 1], 1),
        ((1, 2, 7, 7), [1, 1], [2, 2], [1, 1], [0, 0, 0, 0], 0),
        ((1, 1, 5, 6, 7), [2, 3, 2], [1, 2, 2], [2, 1, 1], [0, 1, 1, 1, 0, 0], 1),
    ],
)
def test_max_pool_matches_definition(shape, kernel, strides, dilations, pads, ceil_mode):
    x = normal(*shape)
    x.flat[::7] = np.nan  # a NaN anywhere in a window is the window's max
    attrs = dict(kernel_shape=kernel, strides=strides, dilations=dilations, pads=pads)
    y = run("MaxPool", [x], ceil_mode=ceil_mode, **attrs)
    np.testing.assert_array_equal(
        y, max_pool_oracle(x, kernel, strides, dilations, pads, ceil_mode)
    )
    assert y.base is None  # a new array, even for a kernel of one tap


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool_integers_pad_with_the_lowest_value(dtype):
    x = np.full((1, 1, 3, 3), np.iinfo(dtype).min + 1, dtype)
    y = run("MaxPool", [x], opset=12, kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.full((1, 1, 4, 4), np.iinfo(dtype).min + 1, dtype))


def test_max_pool_version_1_and_float16():
    x = normal(1, 2, 4, 4, dtype=np.float16)
    y = run("MaxPool", [x], opset=1, kernel_shape=[2, 2], strides=[2, 2])
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)))


def test_lp_pool_version_1_takes_a_float_p():
    x = normal(1, 1, 4)
    y = run("LpPool", [x], opset=1, kernel_shape=[2], p=3.0)
    expected = (np.abs(x[..., :-1]) ** 3 + np.abs(x[..., 1:]) ** 3) ** (1 / 3)
    np.testing.assert_allclose(y, expected, rtol=1e-5)
    g = run("GlobalLpPool", [x], opset=1, p=3.0)
    np.testing.assert_allclose(g.ravel(), [(np.abs(x) ** 3).sum() ** (1 / 3)], rtol=1e-5)


def test_global_pools_keep_spatial_axes_and_dtype():
    x = normal(2, 3, 4, 5, 2, dtype=np.float16)
    for op_type, reduce in [("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)]:
        y = run(op_type, [x])
        assert y.shape == (2, 3, 1, 1, 1) and y.dtype == np.float16
        np.testing.assert_allclose(
            y, reduce(x.astype(F32), axis=(2, 3, 4), keepdims=True), rtol=1e-3, atol=1e-3
        )


def test_pool_requires_a_kernel_shape_per_axis():
    with pytest.raises(OnnxflowError, match="kernel_shape"):
        run("AveragePool", [normal(1, 1, 4, 4)], kernel_shape=[2])


# -- region-of-interest pools -------------------------------------------------------------------
def test_max_roi_pool_rounds_corners_and_includes_the_end_pixel():
    x = np.arange(36, dtype=F32).reshape(1, 1, 6, 6)
    rois = np.array([[0, 0.4, 0.6, 3.4, 3.5]], F32)  # x 0..3, y 1..4 (inclusive) after rounding
    y = run("MaxRoiPool", [x, rois], pooled_shape=[2, 2])
    np.testing.assert_array_equal(y[0, 0], [[13, 15], [25, 27]])


def test_roi_align_10_is_output_half_pixel():
    x, rois, batch = (
        normal(2, 3, 8, 8),
        np.array([[1, 1.5, 6, 5], [0, 0, 2, 7]], F32),
        np.array([1, 0]),
    )
    attrs = dict(output_height=3, output_width=2, sampling_ratio=2, mode="max")
    old = run("RoiAlign", [x, rois, batch], opset=10, **attrs)
    new = run(
        "RoiAlign",
        [x, rois, batch],
        opset=16,
        coordinate_transformation_mode="output_half_pixel",
        **attrs,
    )
    np.testing.assert_array_equal(old, new)
    shifted = run("RoiAlign", [x, rois, batch], opset=16, **attrs)
    assert not np.allclose(old, shifted)


def test_roi_align_avg_of_a_constant_image_is_the_constant():
    x = np.full((1, 2, 6, 6), 3.0, F32)
    y = run(
        "RoiAlign",
        [x, np.array([[1, 1, 4, 5]], F32), np.array([0])],
        output_height=2,
        output_width=3,
    )
    np.testing.assert_allclose(y, 3.0, rtol=1e-6)


# -- DeformConv ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("spatial", "kernel"), [((7,), (3,)), ((4, 5, 4), (2, 3, 2))])
def test_deform_conv_with_zero_offsets_is_conv(spatial, kernel):
    x, w, b = normal(2, 4, *spatial), normal(6, 2, *kernel), normal(6)
    attrs = dict(group=2, pads=[1] * 2 * len(spatial), strides=[2] * len(spatial))
    expected = run("Conv", [x, w, b], **attrs)
    offset = np.zeros((2, 2 * math.prod(kernel) * len(spatial), *expected.shape[2:]), F32)
    y = run("DeformConv", [x, w, offset, b], offset_group=2, **attrs)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_deform_conv_integer_offset_shifts_the_sample_and_zero_fills_outside():
    x, w = normal(1, 1, 6), np.ones((1, 1, 1), F32)
    offset = np.full((1, 1, 6), 2.0, F32)
    y = run("DeformConv", [x, w, offset])
    np.testing.assert_allclose(y.ravel(), [*x.ravel()[2:], 0, 0], rtol=1e-6)
