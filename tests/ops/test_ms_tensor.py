"""com.microsoft tensor operators against onnxruntime (ops/microsoft/tensor.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ort_compare import assert_matches, ms_model

import onnxflow

RNG = np.random.default_rng(18)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cdist_as_skl2onnx_emits_it(metric: str, dtype: type) -> None:
    a, b = _f32(5, 3).astype(dtype), _f32(4, 3).astype(dtype)
    assert_matches(*ms_model("CDist", [a, b], metric=metric))


def test_cdist_rejects_an_unknown_metric_by_name() -> None:
    model, feeds = ms_model("CDist", [_f32(2, 2), _f32(2, 2)], metric="cosine")
    model.graph.output[0].type.tensor_type.elem_type = 1
    with pytest.raises(onnxflow.OnnxflowError, match="cosine"):
        onnxflow.InferenceSession(model).run(None, feeds)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_expand_dims_at_each_axis(axis: int) -> None:
    assert_matches(*ms_model("ExpandDims", [_f32(2, 3), np.array(axis, np.int32)]))


@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_gather_nd_tuples_and_slices(index_type: type) -> None:
    data = _f32(3, 4, 2)
    for indices in ([[0, 1], [2, 3]], [[1], [0]], [[[0, 0, 1]], [[2, 3, 0]]]):
        assert_matches(*ms_model("GatherND", [data, np.array(indices, index_type)]))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_inverse_of_square_matrices(shape: tuple[int, ...]) -> None:
    x = _f32(*shape) + 3 * np.eye(shape[-1], dtype=np.float32)
    assert_matches(*ms_model("Inverse", [x]), rtol=1e-4, atol=1e-5)


def test_matmul_integer16_accumulates_in_int32() -> None:
    a = RNG.integers(-30000, 30000, (3, 5)).astype(np.int16)
    b = RNG.integers(-30000, 30000, (5, 2)).astype(np.int16)
    (out,) = assert_matches(*ms_model("MatMulInteger16", [a, b]))
    assert out.dtype == np.int32


@pytest.mark.parametrize("ngram_size", [1, 2, 3])
def test_ngram_repeat_block_bans_the_repeating_tokens(ngram_size: int) -> None:
    ids = np.array([[1, 2, 3, 1, 2], [4, 4, 4, 4, 4]], np.int64)
    scores = _f32(2, 6)
    (out,) = assert_matches(*ms_model("NGramRepeatBlock", [ids, scores], ngram_size=ngram_size))
    if ngram_size == 3:  # "1 2" was followed by 3 before, so 3 would repeat "1 2 3"
        assert out[0, 3] == -np.inf and np.isfinite(out[0, [0, 1, 2, 4, 5]]).all()


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes_with_pads_as_input(mode: str) -> None:
    pads = np.array([0, 1, 1, 2], np.int64)
    value = np.array([1.5], np.float32) if mode == "constant" else None
    assert_matches(*ms_model("Pad", [_f32(3, 4), pads, value], mode=mode))


def test_pad_crops_where_pads_are_negative() -> None:
    assert_matches(*ms_model("Pad", [_f32(3, 4), np.array([0, -1, 1, 0], np.int64)]))


@pytest.mark.parametrize(
    "start, limit, delta",
    [(0, 10, 3), (10, 0, -2), (0.5, 3.0, 0.75), (2, 7, None)],
)
def test_range_with_and_without_delta(start: float, limit: float, delta: float | None) -> None:
    dtype = np.float32 if isinstance(start, float) else np.int64
    inputs = [np.array(v, dtype) if v is not None else None for v in (start, limit, delta)]
    assert_matches(*ms_model("Range", inputs))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_scaled_silu_from_alpha_and_from_the_scale_input(dtype: type) -> None:
    x = _f32(4, 7).astype(dtype)
    assert_matches(*ms_model("ScaledSiLU", [x], alpha=0.7), rtol=1e-3, atol=1e-3)
    scale = np.array(1.7, dtype)
    assert_matches(*ms_model("ScaledSiLU", [x, scale]), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu_both_triangles_and_diagonals(upper: int, k: int | None) -> None:
    kk = None if k is None else np.array(k, np.int64)
    assert_matches(*ms_model("Trilu", [_f32(2, 4, 5), kk], upper=upper))


def test_unique_keeps_the_order_of_first_occurrence() -> None:
    x = np.array([2, 1, 1, 3, 4, 3, 2], np.float32)
    y, idx, counts = assert_matches(*ms_model("Unique", [x], n_out=3))
    assert y.tolist() == [2, 1, 3, 4] and counts.tolist() == [2, 2, 2, 1]
    assert (y[idx] == x).all()


@pytest.mark.parametrize("dim, size, step", [(-1, 3, 1), (0, 2, 2), (1, 4, 3)])
def test_unfold_tensor_windows(dim: int, size: int, step: int) -> None:
    assert_matches(*ms_model("UnfoldTensor", [_f32(5, 7)], dim=dim, size=size, step=step))


@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (1, 6, 2)])
def test_dynamic_time_warping_path(shape: tuple[int, ...]) -> None:
    (path,) = assert_matches(*ms_model("DynamicTimeWarping", [RNG.random(shape, np.float32)]))
    assert path[:, 0].tolist() == [0, 0] and path[:, -1].tolist() == [s - 1 for s in shape[-2:]]


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_contrib(mode: str, padding_mode: str, align_corners: int) -> None:
    x, grid = _f32(1, 2, 4, 5), RNG.uniform(-1.2, 1.2, (1, 3, 3, 2)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    assert_matches(*ms_model("GridSample", [x, grid], **attrs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 1, 2]])
def test_conv_transpose_with_dynamic_pads(pads: list[int]) -> None:
    x, w, b = _f32(1, 2, 4, 4), _f32(2, 3, 3, 3), _f32(3)
    p = np.array(pads, np.int64)
    model, feeds = ms_model("ConvTransposeWithDynamicPads", [x, w, p, b], strides=[2, 2])
    assert_matches(model, feeds, rtol=1e-4, atol=1e-5)


def test_conv_transpose_with_the_optional_pads_omitted_pads_nothing() -> None:
    """The schema makes ``Pads`` optional (onnxruntime's kernel refuses to run without it):
    omitted, it means no padding."""
    x, w = _f32(1, 2, 4, 4), _f32(2, 3, 3, 3)
    results = []
    for inputs in ([x, w], [x, w, np.zeros(4, np.int64)]):
        model, feeds = ms_model("ConvTransposeWithDynamicPads", inputs)
        model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        results.append(onnxflow.InferenceSession(model).run(None, feeds)[0])
    assert results[0].shape == (1, 3, 6, 6)
    np.testing.assert_array_equal(results[0], results[1])
