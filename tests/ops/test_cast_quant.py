"""Type conversion and quantization kernels: what the node suite does not pin down.

Strings, Cast-1's named types, float 8 saturation and exact rounding, float8e8m0 rounding modes,
BitCast's bit widths, rounding half to even before the zero point, uneven blocks, the precision
and output_dtype attributes, per-row and per-column zero points, and clear errors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from op_testing import runner, strings

from onnxflow.errors import OnnxflowError
from onnxflow.ops.quantization import dequantize, quantize

F32 = np.float32
E8M0 = ml_dtypes.float8_e8m0fnu


run = runner(opset=25)


# -- Cast: strings ------------------------------------------------------------------------------


def test_string_to_float_parses_special_literals_in_any_case():
    y = run("Cast", [strings("NaN", "INF", "+INF", "-inf", "1e-5", "100.5", "-0")], to=1)
    assert y.dtype == F32
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:], F32([np.inf, np.inf, -np.inf, 1e-5, 100.5, -0.0]))


def test_string_to_int_truncates_decimals_and_keeps_int64_exact():
    y = run("Cast", [strings("100.5", "-7", "9223372036854775807")], to=TensorProto.INT64)
    np.testing.assert_array_equal(y, np.array([100, -7, 2**63 - 1], dtype=np.int64))


def test_number_to_string_round_trips_and_spells_specials_like_the_spec():
    x = F32([0.47892547, 1e-7, np.nan, np.inf, -np.inf])
    y = run("Cast", [x], to=TensorProto.STRING)
    assert y.dtype == object
    assert list(y) == ["0.47892547", "1e-07", "NaN", "INF", "-INF"]
    back = run("Cast", [y], to=1)
    np.testing.assert_array_equal(back, x)


def test_bool_and_int_to_string():
    assert list(run("Cast", [np.array([True, False])], to=TensorProto.STRING)) == ["1", "0"]
    assert list(run("Cast", [np.array([-5, 12], np.int8)], to=TensorProto.STRING)) == ["-5", "12"]


def test_unparseable_string_is_a_clear_error():
    with pytest.raises(OnnxflowError, match="cannot cast string 'hello'"):
        run("Cast", [strings("1", "hello")], to=1)


# -- Cast: versions, saturation, rounding --------------------------------------------------------


def test_cast_1_takes_the_type_by_name():
    y = run("Cast", [np.array([1.7, -2.2], F32)], opset=1, to="INT32")
    np.testing.assert_array_equal(y, np.array([1, -2], np.int32))


def test_bool_and_integers_to_float32_and_float64_are_a_plain_astype(monkeypatch):
    """No bool or integer (to 64 bits) overflows float32 or is invalid as one: Cast converts
    them with no errstate around astype (about 1 us of a stream's scalar Cast), same values."""
    from onnxflow.ops import cast

    def refuse(**kwargs: str) -> None:
        raise AssertionError(f"errstate entered: {kwargs}")

    info = np.iinfo(np.int64)
    cases = [
        np.array([True, False]),
        np.array([0, -1, info.min, info.max], np.int64),
        np.array([0, np.iinfo(np.uint64).max], np.uint64),
        np.array(16000, np.int64),
    ]
    monkeypatch.setattr(np, "errstate", refuse)
    for x in cases:
        for target in (np.float32, np.float64):
            got = cast.convert(x, np.dtype(target))
            assert got.dtype == target and got.shape == x.shape
            assert got.tobytes() == x.astype(target).tobytes()


def test_cast_to_same_type_and_input_untouched():
    x = np.array([1.5, 2.5], F32)
    keep = x.copy()
    np.testing.assert_array_equal(run("Cast", [x], to=1), x)
    run("Cast", [x], to=TensorProto.FLOAT8E4M3FN)
    np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize(
    ("to", "saturated", "unsaturated"),
    [
        (TensorProto.FLOAT8E4M3FN, 448.0, np.nan),
        (TensorProto.FLOAT8E4M3FNUZ, 240.0, np.nan),
        (TensorProto.FLOAT8E5M2, 57344.0, np.inf),
        (TensorProto.FLOAT8E5M2FNUZ, 57344.0, np.nan),
    ],
)
def test_float8_saturate_attribute(to, saturated, unsaturated):
    x = np.array([1e6, np.inf], F32)
    np.testing.assert_array_equal(run("Cast", [x], to=to).astype(F32), [saturated] * 2)
    y = run("Cast", [x], to=to, saturate=0).astype(F32)
    np.testing.assert_array_equal(y, [unsaturated] * 2)


def test_double_to_float8_rounds_once():
    # 1.0625 is the midpoint of 1.0 and 1.125; a hair above it must round up, which rounding
    # through float32 first would lose.
    y = run("Cast", [np.array([1.0625 + 1e-12, 1.0625])], to=TensorProto.FLOAT8E4M3FN)
    np.testing.assert_array_equal(y.astype(F32), [1.125, 1.0])


@pytest.mark.parametrize(
    ("mode", "expected"), [("up", [4, 4, 1]), ("down", [2, 2, 1]), ("nearest", [4, 2, 1])]
)
def test_e8m0_round_modes(mode, expected):
    y = run("Cast", [np.array([3.0, 2.9, 1.0], F32)], to=TensorProto.FLOAT8E8M0, round_mode=mode)
    assert y.dtype == E8M0
    np.testing.assert_array_equal(y.astype(F32), expected)


def test_e8m0_without_saturation_gives_nan_out_of_range():
    x = np.array([0.0, np.inf, 1e39, 1.0])
    y = run("Cast", [x], to=TensorProto.FLOAT8E8M0, saturate=0, round_mode="nearest")
    np.testing.assert_array_equal(np.isnan(y.astype(F32)), [True, True, True, False])


def test_unknown_round_mode_is_rejected():
    with pytest.raises(OnnxflowError, match="round_mode"):
        run("Cast", [np.ones(2, F32)], to=TensorProto.FLOAT8E8M0, round_mode="sideways")


def test_cast_like_takes_the_type_of_its_second_input():
    y = run("CastLike", [np.array([1e6], F32), np.zeros(0, ml_dtypes.float8_e5m2)], saturate=0)
    assert y.dtype == ml_dtypes.float8_e5m2
    assert np.isinf(y.astype(F32)[0])


# -- BitCast -------------------------------------------------------------------------------------


def test_bitcast_keeps_bits_and_shape():
    y = run("BitCast", [np.array([[1.0, -2.0]], F32)], opset=26, to=TensorProto.INT32)
    np.testing.assert_array_equal(y, np.array([[0x3F800000, -0x40000000]], np.int32))


def test_bitcast_between_4_bit_types():
    y = run("BitCast", [np.array([-1, 7], ml_dtypes.int4)], opset=26, to=TensorProto.UINT4)
    np.testing.assert_array_equal(y.astype(np.uint8), [15, 7])


def test_bitcast_needs_equal_bit_widths():
    with pytest.raises(OnnxflowError, match="equal bit width"):
        run("BitCast", [np.ones(2, F32)], opset=26, to=TensorProto.INT64)


# -- QuantizeLinear ------------------------------------------------------------------------------


def test_quantize_rounds_half_to_even_before_adding_the_zero_point():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5], F32)
    y = run("QuantizeLinear", [x, F32(1), np.int8(1)])
    np.testing.assert_array_equal(y, np.array([1, 3, 3, 1, -1], np.int8))


def test_quantize_without_zero_point_is_uint8_and_saturates():
    y = run("QuantizeLinear", [np.array([-3.0, 1000.0], F32), F32(1)], opset=10)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [0, 255])


def test_quantize_blocks_may_overhang_the_axis():
    x = np.arange(5, dtype=F32).reshape(1, 5)
    scale = np.array([[1.0, 2.0, 4.0]], F32)  # blocks of 2 over 5 columns: 2 + 2 + 1
    y = run("QuantizeLinear", [x, scale], axis=1, block_size=2, output_dtype=TensorProto.INT8)
    np.testing.assert_array_equal(y, np.array([[0, 1, 1, 2, 1]], np.int8))


def test_quantize_precision_attribute_sets_the_division_type():
    x = np.array([3001.0], F32)
    half = run("QuantizeLinear", [x, np.float16(1), np.int16(0)], opset=23)
    full = run("QuantizeLinear", [x, np.float16(1), np.int16(0)], opset=23, precision=1)
    assert (half[0], full[0]) == (3000, 3001)


def test_quantize_output_dtype_must_agree_with_zero_point():
    with pytest.raises(OnnxflowError, match="output_dtype"):
        run("QuantizeLinear", [np.ones(2, F32), F32(1), np.int8(0)], output_dtype=2)


def test_quantize_per_axis_scale_length_is_checked():
    with pytest.raises(OnnxflowError, match="per-axis scale has 3 values, expected 2"):
        run("QuantizeLinear", [np.ones((2, 2), F32), np.ones(3, F32)], axis=0)


def test_quantize_leaves_inputs_untouched():
    x, scale = np.array([1.0, 2.0], F32), np.array([0.5, 0.25], F32)
    run("QuantizeLinear", [x, scale], axis=0)
    np.testing.assert_array_equal(x, [1.0, 2.0])
    np.testing.assert_array_equal(scale, [0.5, 0.25])


# -- DequantizeLinear ----------------------------------------------------------------------------


def test_dequantize_int32_and_output_type_follows_the_scale():
    y = run("DequantizeLinear", [np.array([-70000, 5], np.int32), np.float16(0.5)])
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.float16([-35000, 2.5]))


def test_dequantize_output_dtype_attribute():
    y = run("DequantizeLinear", [np.array([3], np.uint8), np.float16(0.5)], output_dtype=1)
    assert y.dtype == F32


def test_dequantize_e8m0_scale_needs_output_dtype():
    scale = np.array(2.0, E8M0)
    y = run("DequantizeLinear", [np.array([3], np.int8), scale], output_dtype=1)
    np.testing.assert_array_equal(y, F32([6.0]))
    with pytest.raises(OnnxflowError, match="output_dtype must be set"):
        run("DequantizeLinear", [np.array([3], np.int8), scale])


# -- DynamicQuantizeLinear, QLinearMatMul, MatMulInteger -----------------------------------------


@pytest.mark.parametrize("x", [np.zeros(3, F32), np.zeros((0, 2), F32)], ids=["zeros", "empty"])
def test_dynamic_quantize_of_an_empty_range_has_scale_one(x: np.ndarray) -> None:
    y, scale, zero = run("DynamicQuantizeLinear", [x], opset=11, n_out=3)
    np.testing.assert_array_equal(y, np.zeros(x.shape, np.uint8))
    assert (scale, zero) == (1, 0)  # as onnxruntime and the node suite of onnx 1.24
    assert (scale.dtype, zero.dtype) == (F32, np.uint8)


def test_matmul_integer_per_row_and_per_column_zero_points():
    a = np.array([[1, 2], [3, 4], [5, 6]], np.uint8)
    b = np.array([[7, 8], [9, 10]], np.uint8)
    a_zp, b_zp = np.array([1, 2, 3], np.uint8), np.array([4, 5], np.uint8)
    y = run("MatMulInteger", [a, b, a_zp, b_zp], opset=10)
    expected = (a.astype(int) - a_zp[:, None]) @ (b.astype(int) - b_zp)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_qlinear_matmul_per_row_scale_of_a():
    a = np.array([[10, 10], [10, 10]], np.uint8)
    b = np.array([[1], [1]], np.uint8)
    a_scale = np.array([1.0, 2.0], F32)
    args = [a, a_scale, np.uint8(0), b, F32(1), np.uint8(0), F32(4), np.uint8(0)]
    y = run("QLinearMatMul", args, opset=21)
    np.testing.assert_array_equal(y, np.array([[5], [10]], np.uint8))


# -- the helpers QLinearConv and ConvInteger import ----------------------------------------------


def test_quantize_dequantize_helpers_round_trip_per_axis():
    x = np.array([[0.0, 1.0, 2.0], [-1.0, 0.5, 3.0]], F32)
    scale, zero = np.array([0.5, 0.25], F32), np.array([10, 20], np.uint8)
    q = quantize(x, scale, zero, 0, 0, np.dtype(np.uint8), True)
    np.testing.assert_array_equal(q, [[10, 12, 14], [16, 22, 32]])
    np.testing.assert_array_equal(dequantize(q, scale, zero, 0, 0, np.dtype(F32)), x)
