"""Compiled means against the NumPy forms: the compiled row mean sums in NumPy's own pairwise
order and divides in float32, so the two forms agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import node_forms

from onnxflow.native import module

FORMS_TESTED = [("", "GlobalAveragePool")]

#: Row lengths on each side of the pairwise sum's turns (8, 128 and the halving above it) and
#: a large image.
LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 136, 255, 256, 257, 1000, 4097, 50176]


def _rows(rows: int, n: int, seed: int) -> np.ndarray:
    """Float32 rows of mixed scale and sign, a -0.0 and a tiny value among them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)) * rng.choice([1e-3, 1.0, 1e4], size=(rows, 1))
    x = x.astype(np.float32)
    x[:, 0] = -0.0
    x[:, -1] = 1e-42
    return x


@pytest.mark.parametrize("n", LENGTHS)
def test_row_means_match_numpy_mean_bit_for_bit(n):
    x = _rows(3, n, n)
    out = np.empty(3, np.float32)
    module("_math").row_means_f32(x.reshape(-1), out)
    assert np.array_equal(out.view(np.int32), x.mean(axis=1).view(np.int32))


def test_row_means_refuse_buffers_that_do_not_match():
    with pytest.raises(ValueError, match="buffer sizes"):
        module("_math").row_means_f32(np.zeros(10, np.float32), np.empty(3, np.float32))


@pytest.mark.parametrize(
    "shape", [(1, 200, 2, 96), (2, 3, 5), (1, 4, 3, 7, 5), (2, 8, 224, 224), (3, 2, 1, 1)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_global_average_pool_forms_agree_bit_for_bit(shape, dtype):
    x = _rows(shape[0] * shape[1], int(np.prod(shape[2:])), 7).reshape(shape).astype(dtype)
    (compiled,), (numpy_form,) = node_forms("GlobalAveragePool", [x], 22)
    assert compiled.dtype == dtype and compiled.shape == shape[:2] + (1,) * (len(shape) - 2)
    assert np.array_equal(compiled.view(np.uint8), numpy_form.view(np.uint8))


def test_global_average_pool_of_empty_and_non_contiguous_inputs():
    empty = np.zeros((0, 3, 4, 4), np.float32)
    (compiled,), (numpy_form,) = node_forms("GlobalAveragePool", [empty], 22)
    assert compiled.shape == numpy_form.shape == (0, 3, 1, 1)
    strided = _rows(6, 40, 3).reshape(2, 3, 8, 5).transpose(0, 1, 3, 2)
    (compiled,), (numpy_form,) = node_forms("GlobalAveragePool", [strided], 22)
    assert np.array_equal(compiled, numpy_form)
