"""Compiled float math against the NumPy forms and against float64 rounded once."""

from __future__ import annotations

import math

import numpy as np
import pytest
from native_forms import node_forms, ulp_distance

FORMS_TESTED = [("", "Erf")]

#: The compiled erf is float64 erf rounded once: within 1 ulp of the exact value rounded.
ERF_ULP = 1
#: How far the two forms may differ: the NumPy form's own error (measured: 3 ulp in float32, 83
#: in float64, where its polynomials are sized for 1e-16 relative error) plus the compiled one's.
ERF_FORMS_ULP = {np.float32: 4, np.float64: 100}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [rng.standard_normal(5000) * 3, [0.0, -0.0, 0.5, -0.5, 4.0, 10.0, -10.0, np.inf, -np.inf]]
    ).astype(dtype)
    (compiled,), (numpy_form,) = node_forms("Erf", [x], 13)
    exact = np.array([math.erf(float(v)) for v in x]).astype(dtype)
    assert compiled.dtype == dtype and compiled.shape == x.shape
    assert ulp_distance(compiled, exact).max() <= ERF_ULP
    assert ulp_distance(compiled, numpy_form).max() <= ERF_FORMS_ULP[dtype]
    assert np.array_equal(np.signbit(compiled[x == 0]), np.signbit(x[x == 0]))


def test_erf_nan_and_other_dtypes():
    x = np.array([np.nan, 1.0, -2.0], np.float16)
    (compiled,), (numpy_form,) = node_forms("Erf", [x], 13)
    assert np.isnan(compiled[0]) and np.array_equal(compiled[1:], numpy_form[1:])
