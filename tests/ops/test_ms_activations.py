"""com.microsoft GELU family against onnxruntime (ops/microsoft/activations.py).

onnxruntime's CPU provider runs these for float32 only, so that is what is compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from ort_compare import assert_matches, ms_model

RNG = np.random.default_rng(181)

SHAPES = [(4, 16), (2, 3, 16)]


def _f32(*shape: int, spread: float = 3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * spread).astype(np.float32)


#: 4800 points from deep in the negative tail, where 1 + erf(x / sqrt 2) cancels, to where
#: GELU is x.
SWEEP = np.linspace(-12, 12, 4800, dtype=np.float32).reshape(3, -1)


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_is_x_times_the_normal_cdf(shape: tuple[int, ...]) -> None:
    (out,) = assert_matches(*ms_model("Gelu", [_f32(*shape)]))
    assert out.shape == shape


def test_gelu_over_both_tails() -> None:
    (out,) = assert_matches(*ms_model("Gelu", [SWEEP]), atol=1e-6)
    assert out[-1, -1] == np.float32(12) and abs(out[0, 0]) < 1e-30


@pytest.mark.parametrize("shape", SHAPES)
def test_bias_gelu_adds_the_bias_over_the_last_axis_first(shape: tuple[int, ...]) -> None:
    x, bias = _f32(*shape), _f32(shape[-1])
    (out,) = assert_matches(*ms_model("BiasGelu", [x, bias]))
    (plain,) = assert_matches(*ms_model("Gelu", [x + bias]))
    np.testing.assert_array_equal(out, plain)


@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fast_gelu_tanh_approximation(shape: tuple[int, ...], with_bias: bool) -> None:
    bias = _f32(shape[-1]) if with_bias else None
    assert_matches(*ms_model("FastGelu", [_f32(*shape), bias]))


def test_fast_gelu_over_both_tails() -> None:
    (out,) = assert_matches(*ms_model("FastGelu", [SWEEP]), atol=2e-6)
    assert out[-1, -1] == np.float32(12)


@pytest.mark.parametrize("alpha", [None, 1.0, 2.5], ids=["default_1.702", "1.0", "2.5"])
@pytest.mark.parametrize("shape", SHAPES)
def test_quick_gelu_is_x_times_sigmoid_of_alpha_x(shape: tuple[int, ...], alpha: float) -> None:
    attrs = {} if alpha is None else {"alpha": alpha}
    x = _f32(*shape)
    (out,) = assert_matches(*ms_model("QuickGelu", [x], **attrs))
    a = 1.702 if alpha is None else alpha
    np.testing.assert_allclose(
        out, x / (1 + np.exp(-a * x.astype(np.float64))), rtol=1e-5, atol=1e-6
    )


def test_quick_gelu_over_both_tails() -> None:
    assert_matches(*ms_model("QuickGelu", [SWEEP]), atol=4e-6)
