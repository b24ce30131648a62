"""Compiled means against the NumPy forms: the compiled row mean sums in NumPy's own pairwise
order and divides as the NumPy form does (GlobalAveragePool in float32, ReduceMean as NumPy
promotes its float64 count), so the two forms agree bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import node_forms

from onnxflow.native import module

FORMS_TESTED = [("", "GlobalAveragePool"), ("", "ReduceMean")]

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


#: (shape, axes, keepdims) of ReduceMeans: over the last axis (the compiled pass), and others
#: (the NumPy form, through the compiled form's fallback).
MEAN_CASES = [
    ((1, 1), [1], 0),  # a streaming decoder's last mean
    ((1, 1), [-1], 1),
    ((3, 9), [1], 0),
    ((2, 3, 129), [2], 1),
    ((4, 1000), [-1], 0),
    ((5,), [0], 0),  # a vector to a scalar
    ((3, 9), [0], 0),  # not the last axis
    ((2, 3, 4), [1, 2], 1),  # two axes
    ((2, 3, 0), [2], 1),  # empty rows
    ((3, 9), None, 0),  # all axes
]


@pytest.mark.parametrize("shape, axes, keepdims", MEAN_CASES)
@pytest.mark.parametrize("opset", [13, 18])  # axes an attribute, then an input
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_mean_forms_agree_bit_for_bit(shape, axes, keepdims, opset, dtype):
    rows = int(np.prod(shape[:-1])) if shape else 1
    x = _rows(max(rows, 1), max(shape[-1], 1), sum(shape))[:rows, : shape[-1]]
    x = x.reshape(shape).astype(dtype)
    if opset >= 18:
        given = None if axes is None else np.array(axes, np.int64)
        (compiled,), (numpy_form,) = node_forms("ReduceMean", [x, given], 18, keepdims=keepdims)
    else:
        extra = {} if axes is None else {"axes": axes}
        (compiled,), (numpy_form,) = node_forms("ReduceMean", [x], 13, keepdims=keepdims, **extra)
    assert compiled.dtype == numpy_form.dtype == dtype
    assert compiled.shape == numpy_form.shape
    assert compiled.tobytes() == numpy_form.tobytes()


@pytest.mark.parametrize("n", LENGTHS)
def test_wide_row_means_are_the_numpy_forms_sum_and_division(n):
    """The compiled ReduceMean's rows: NumPy's float32 sum divided by a float64 count."""
    x = _rows(3, n, n + 1)
    out = np.empty(3, np.float32)
    module("_math").row_means_f32(x.reshape(-1), out, True)
    want = np.true_divide(np.add.reduce(x, axis=1), np.float64(n)).astype(np.float32)
    assert out.tobytes() == want.tobytes()


def test_last_axis_means_in_one_call():
    """_math.last_axis_means (ReduceMean over the last axis named by its attribute, in one
    compiled call) gives the NumPy form's bits and shape for ranks 1 to 4, kept or not, axis
    -1 or rank - 1; None (the other paths then run) for anything else."""
    from onnxflow.ops import reduction

    means = module("_math").last_axis_means
    for shape in [(5,), (1, 1), (3, 17), (2, 3, 129), (2, 1, 2, 300)]:
        x = _rows(int(np.prod(shape[:-1])), shape[-1], len(shape)).reshape(shape)
        for axes in ([-1], (len(shape) - 1,)):
            for keep in (True, False):
                want = reduction._reduce(reduction._mean, x, list(axes), keep, 0)
                got = means(x, axes, keep, reduction._WIDE_MEAN)
                assert got.shape == want.shape and got.tobytes() == want.tobytes()
    x = _rows(3, 4, 1)
    for args in [
        (x, [0]),
        (x, [0, 1]),
        (x, None),
        (x, np.array([1])),
        (x.T, [1]),
        (x.astype(np.float64), [1]),
        (x[:, :0], [1]),
        (np.float32(2.0), [0]),
    ]:
        assert means(*args, True, False) is None
