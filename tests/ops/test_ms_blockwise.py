"""com.microsoft block-quantized weights against onnxruntime (ops/microsoft/blockwise.py):
MatMulNBits and GatherBlockQuantized over bit widths, block sizes and zero-point forms.

The codes are packed here bit by bit, independently of the kernel's unpacking. Float results
agree to float32 rounding: the kernel and onnxruntime sum the same products in other orders.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import ModelProto, numpy_helper
from ort_compare import assert_matches, ms_model, run_both

import onnxflow

RNG = np.random.default_rng(18)


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """``bits``-wide codes (last axis) packed little-endian into uint8 rows, zero-padded."""
    rows = codes.reshape(-1, codes.shape[-1]).astype(np.int64)
    n_bytes = -(-codes.shape[-1] * bits // 8)
    out = np.zeros((rows.shape[0], n_bytes), np.uint8)
    for i in range(codes.shape[-1]):
        for bit in range(bits):
            pos = i * bits + bit
            out[:, pos // 8] |= (((rows[:, i] >> bit) & 1) << (pos % 8)).astype(np.uint8)
    return out.reshape(*codes.shape[:-1], n_bytes)


def _constant(
    built: tuple[ModelProto, dict[str, Any]], *names: str
) -> tuple[ModelProto, dict[str, Any]]:
    """The model with the named inputs made initializers (onnxruntime takes no 4-bit feeds)."""
    model, feeds = built
    for name in names:
        model.graph.initializer.append(numpy_helper.from_array(feeds.pop(name), name))
    kept = [i for i in model.graph.input if i.name in feeds]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, feeds


# -- MatMulNBits --------------------------------------------------------------------------------
def _nbits_inputs(k: int, n: int, bits: int, block_size: int, zero: str) -> list[Any]:
    """B packed per block, scales and zero points (``none``, ``packed`` or ``float``)."""
    blocks = -(-k // block_size)
    codes = RNG.integers(0, 2**bits, size=(n, blocks, block_size))
    b = _pack(codes, bits)
    scales = (RNG.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    zeros = RNG.integers(0, 2**bits, size=(n, blocks))
    zero_points = {
        "none": None,
        "packed": _pack(zeros, bits).reshape(-1),
        "float": (zeros + RNG.random((n, blocks))).astype(np.float32),
    }[zero]
    return [b, scales.reshape(-1) if zero != "float" else scales, zero_points]


@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("block_size", [16, 32, 64, 128])
@pytest.mark.parametrize("zero", ["none", "packed"])
def test_matmul_nbits_blocks_and_zero_points(bits: int, block_size: int, zero: str) -> None:
    k, n = 160, 24
    b, scales, zero_points = _nbits_inputs(k, n, bits, block_size, zero)
    a = RNG.standard_normal((2, 3, k)).astype(np.float32)
    inputs = [a, b, scales, zero_points]
    attrs = dict(K=k, N=n, bits=bits, block_size=block_size)
    assert_matches(*ms_model("MatMulNBits", inputs, **attrs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [40, 100])
def test_matmul_nbits_k_not_a_multiple_of_the_block(k: int) -> None:
    b, scales, zero_points = _nbits_inputs(k, 8, 4, 32, "packed")
    a = RNG.standard_normal((5, k)).astype(np.float32)
    attrs = dict(K=k, N=8, bits=4, block_size=32)
    assert_matches(*ms_model("MatMulNBits", [a, b, scales, zero_points], **attrs), 1e-4, 1e-4)


def test_matmul_nbits_float_zero_points() -> None:
    b, scales, zero_points = _nbits_inputs(64, 16, 4, 32, "float")
    a = RNG.standard_normal((3, 64)).astype(np.float32)
    attrs = dict(K=64, N=16, bits=4, block_size=32)
    assert_matches(*ms_model("MatMulNBits", [a, b, scales, zero_points], **attrs), 1e-4, 1e-4)


@pytest.mark.parametrize("order", ["sequential", "act_order"])
@pytest.mark.parametrize("zero", ["none", "float"])
def test_matmul_nbits_g_idx(order: str, zero: str) -> None:
    """Packed uint8 zero points are left out: onnxruntime 1.32's CPU kernel reads none with a
    g_idx (it dequantizes with 2 ** (bits - 1) instead), where the schema applies them."""
    k, n, block_size = 64, 8, 16
    b, scales, zero_points = _nbits_inputs(k, n, 4, block_size, zero)
    g_idx = np.arange(k, dtype=np.int32) // block_size
    if order == "act_order":
        g_idx = RNG.permutation(g_idx).astype(np.int32)
    a = RNG.standard_normal((3, k)).astype(np.float32)
    inputs = [a, b, scales, zero_points, g_idx]
    attrs = dict(K=k, N=n, bits=4, block_size=block_size)
    assert_matches(*ms_model("MatMulNBits", inputs, **attrs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("accuracy_level", [0, 1])
def test_matmul_nbits_bias_and_accuracy_level(accuracy_level: int) -> None:
    b, scales, _ = _nbits_inputs(96, 12, 4, 32, "none")
    a, bias = RNG.standard_normal((4, 96)).astype(np.float32), RNG.standard_normal(12)
    inputs = [a, b, scales, None, None, bias.astype(np.float32)]
    attrs = dict(K=96, N=12, bits=4, block_size=32, accuracy_level=accuracy_level)
    assert_matches(*ms_model("MatMulNBits", inputs, **attrs), rtol=1e-4, atol=1e-4)


def test_matmul_nbits_accuracy_level_4_is_the_float_product_within_a_quantization() -> None:
    """Level 4 quantizes A to int8 in onnxruntime; onnxflow keeps the float product."""
    b, scales, _ = _nbits_inputs(128, 16, 4, 32, "none")
    a = RNG.standard_normal((4, 128)).astype(np.float32)
    attrs = dict(K=128, N=16, bits=4, block_size=32, accuracy_level=4)
    ours = assert_matches(*ms_model("MatMulNBits", [a, b, scales], **attrs), 0.05, 0.05)
    exact = assert_matches(
        *ms_model("MatMulNBits", [a, b, scales], **dict(attrs, accuracy_level=0))
    )
    np.testing.assert_array_equal(ours[0], exact[0])


@pytest.mark.parametrize("weights", ["constant", "fed"])
def test_matmul_nbits_session_run_twice(weights: str) -> None:
    """Constant weights are dequantized once and kept; weights fed anew are read anew."""
    attrs = dict(K=64, N=8, bits=4, block_size=32)
    model, feeds = ms_model(
        "MatMulNBits", [*_f32_rows(3), *_nbits_inputs(64, 8, 4, 32, "packed")], **attrs
    )
    if weights == "constant":
        model, feeds = _constant((model, feeds), "in1", "in2", "in3")
    session = onnxflow.InferenceSession(_typed(model))
    for _ in range(2):
        feeds = dict(feeds, in0=_f32_rows(3)[0])
        if weights == "fed":
            feeds.update(
                zip(["in1", "in2", "in3"], _nbits_inputs(64, 8, 4, 32, "packed"), strict=True)
            )
        (ours,) = session.run(None, feeds)
        (theirs,) = run_both(model, feeds)[1]
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def _f32_rows(n: int) -> list[np.ndarray]:
    return [RNG.standard_normal((n, 64)).astype(np.float32)]


def _typed(model: ModelProto) -> ModelProto:
    model.graph.output[0].type.tensor_type.elem_type = 1
    return model


def test_matmul_nbits_float16() -> None:
    b, scales, zero_points = _nbits_inputs(64, 8, 4, 32, "packed")
    a = RNG.standard_normal((3, 64)).astype(np.float16)
    inputs = [a, b, scales.astype(np.float16), zero_points]
    attrs = dict(K=64, N=8, bits=4, block_size=32)
    assert_matches(*ms_model("MatMulNBits", inputs, **attrs), rtol=1e-3, atol=1e-3)


def test_matmul_nbits_empty_b_is_the_bias() -> None:
    a, bias = RNG.standard_normal((2, 32)).astype(np.float32), np.arange(4, dtype=np.float32)
    b, scales = np.zeros((4, 0, 16), np.uint8), np.zeros(0, np.float32)
    attrs = dict(K=32, N=4, bits=4, block_size=32)
    out = assert_matches(*ms_model("MatMulNBits", [a, b, scales, None, None, bias], **attrs))
    np.testing.assert_array_equal(out[0], np.broadcast_to(bias, (2, 4)))


# -- GatherBlockQuantized -------------------------------------------------------------------------
SMALL = [ml_dtypes.int4, ml_dtypes.uint4]


def _gather_table(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    low, high = (-8, 8) if dtype == ml_dtypes.int4 else (0, 16)
    return RNG.integers(low, high, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", SMALL, ids=["int4", "uint4"])
@pytest.mark.parametrize(
    ("gather_axis", "quantize_axis"), [(0, 1), (1, 0), (0, -1), (2, 1), (1, 1), (0, 0)]
)
@pytest.mark.parametrize("with_zero", [False, True], ids=["no_zero", "zero"])
def test_gather_block_quantized_4bit(
    dtype: type, gather_axis: int, quantize_axis: int, with_zero: bool
) -> None:
    shape, block_size = (6, 32, 5), 16
    data = _gather_table(dtype, shape)
    axis = quantize_axis % 3
    blocked = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(shape))
    scales = (RNG.random(blocked) + 0.5).astype(np.float32)
    zero = _gather_table(dtype, blocked) if with_zero else None
    indices = RNG.integers(0, shape[gather_axis], size=(2, 3)).astype(np.int64)
    attrs = dict(gather_axis=gather_axis, quantize_axis=quantize_axis, block_size=block_size)
    built = ms_model("GatherBlockQuantized", [data, indices, scales, zero], **attrs)
    assert_matches(*_constant(built, "in0", *(["in3"] if with_zero else [])))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("with_zero", [False, True], ids=["no_zero", "zero"])
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_gather_block_quantized_packed_uint8(bits: int, with_zero: bool, index_type: type) -> None:
    rows, cols, block_size = 10, 64, 32
    codes = RNG.integers(0, 2**bits, size=(rows, cols))
    scales = (RNG.random((rows, cols // block_size)) + 0.5).astype(np.float32)
    zero = _pack(RNG.integers(0, 2**bits, size=scales.shape), bits) if with_zero else None
    indices = np.array([[3, 0], [9, 3]], index_type)
    attrs = dict(bits=bits, block_size=block_size, gather_axis=0, quantize_axis=1)
    inputs = [_pack(codes, bits), indices, scales, zero]
    assert_matches(*ms_model("GatherBlockQuantized", inputs, **attrs))


def test_gather_block_quantized_float16_scales() -> None:
    data = _gather_table(ml_dtypes.uint4, (8, 64))
    scales = (RNG.random((8, 2)) + 0.5).astype(np.float16)
    indices = np.array([1, 7, 1], np.int64)
    built = ms_model("GatherBlockQuantized", [data, indices, scales], block_size=32)
    assert_matches(*_constant(built, "in0"), rtol=1e-3, atol=1e-3)


FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.mark.parametrize("dtype", FLOAT8, ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize(
    ("block_size", "scale_shape"),
    [(16, (6, 2)), (0, (6, 1)), (0, (1, 1))],
    ids=["blocks", "one_block_per_row", "one_scale_shared"],
)
def test_gather_block_quantized_float8(
    dtype: type, block_size: int, scale_shape: tuple[int, int]
) -> None:
    data = RNG.standard_normal((6, 32)).astype(dtype)
    scales = (RNG.random(scale_shape) + 0.5).astype(np.float32)
    indices = np.array([[5, 0, 2]], np.int64)
    built = ms_model("GatherBlockQuantized", [data, indices, scales], block_size=block_size)
    assert_matches(*_constant(built, "in0"))


# -- MatMulBnb4 ----------------------------------------------------------------------------------
def _bnb4_inputs(n: int, k: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    b = RNG.integers(0, 256, size=(n * k + 1) // 2).astype(np.uint8)
    absmax = (RNG.random(-(-n * k // block_size)) + 0.5).astype(np.float32)
    return b, absmax


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("a_shape", [(3,), (2, 3)])
def test_matmul_bnb4(quant_type: int, block_size: int, a_shape: tuple[int, ...]) -> None:
    n, k = 12, 40  # N * K not a multiple of the larger block
    b, absmax = _bnb4_inputs(n, k, block_size)
    a = RNG.standard_normal((*a_shape, k)).astype(np.float32)
    attrs = dict(K=k, N=n, block_size=block_size, quant_type=quant_type)
    assert_matches(*ms_model("MatMulBnb4", [a, b, absmax], **attrs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
def test_matmul_bnb4_untransposed_is_a_times_w(quant_type: int) -> None:
    """transB=0 is ``A (.., N) @ W (N, K)``. onnxruntime 1.32's CPU kernel returns other
    values there (rows of zeros among them), so W is read from a transB=1 run on the
    identity, and the untransposed product checked against ``A @ W``."""
    n, k = 8, 32
    b, absmax = _bnb4_inputs(n, k, 16)
    attrs = dict(K=k, N=n, block_size=16, quant_type=quant_type)
    (w_t,) = assert_matches(
        *ms_model("MatMulBnb4", [np.eye(k, dtype=np.float32), b, absmax], **attrs)
    )
    a = RNG.standard_normal((3, n)).astype(np.float32)
    model, feeds = ms_model("MatMulBnb4", [a, b, absmax], transB=0, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = 1
    (y,) = onnxflow.InferenceSession(model).run(None, feeds)
    np.testing.assert_allclose(y, a @ w_t.T, rtol=1e-5, atol=1e-5)


# -- errors --------------------------------------------------------------------------------------
def _fails(model: ModelProto, feeds: dict[str, Any], match: str) -> None:
    with pytest.raises(onnxflow.OnnxflowError, match=match):
        onnxflow.InferenceSession(_typed(model)).run(None, feeds)


def test_matmul_nbits_names_a_k_mismatch() -> None:
    b, scales, _ = _nbits_inputs(64, 8, 4, 32, "none")
    a = RNG.standard_normal((2, 48)).astype(np.float32)
    model, feeds = ms_model("MatMulNBits", [a, b, scales], K=64, N=8, block_size=32)
    _fails(model, feeds, "48 columns, expected K = 64")


def test_matmul_nbits_refuses_prepacked_weights() -> None:
    b, scales, _ = _nbits_inputs(64, 8, 4, 32, "none")
    a = RNG.standard_normal((2, 64)).astype(np.float32)
    attrs = dict(K=64, N=8, block_size=32, weight_prepacked=1)
    _fails(*ms_model("MatMulNBits", [a, b, scales], **attrs), "weight_prepacked")


def test_gather_block_quantized_refuses_odd_bit_widths_in_uint8() -> None:
    data, scales = np.zeros((4, 24), np.uint8), np.ones((4, 2), np.float32)
    inputs = [data, np.array([0], np.int64), scales]
    _fails(*ms_model("GatherBlockQuantized", inputs, bits=3, block_size=32), "bits=3")
