"""The compiled form of the fused attention core (ScaledDotProductAttention, made by
compile/passes/fuse_attention.py) against its NumPy form. The two run the same NumPy
operations but Softmax, in its compiled form (double, rounded once) in the first and its NumPy
form in the second; each is bitwise the unfused chain of its kind (tests/passes/
test_fuse_attention.py), so they differ by what Softmax's two forms differ by, carried through
the product by V."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import onnxflow

sys.path.insert(0, str(Path(__file__).parents[1] / "passes"))
from native_forms import both_forms
from test_fuse_attention import _feeds, _model

FORMS_TESTED = [("onnxflow.fused", "ScaledDotProductAttention")]

EPS32 = float(np.finfo(np.float32).eps)
#: Softmax's two forms differ by at most this many float32 epsilons of the row's largest
#: magnitude (at least 1): tests/native/test_native_math.py's SOFTMAX_FORMS_ABS.
SOFTMAX_FORMS_ABS = 8


def _bound(feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Per output element: the probabilities' gap times sum_j |v_j|, plus each product's own
    rounding (at most keys * eps32 of sum_j p_j |v_j| <= sum_j |v_j|, taken twice)."""
    q, kt, v, mask = (feeds[n].astype(np.float64) for n in ("q", "kt", "v", "mask"))
    scores = q @ kt / 0.25 + mask
    finite = np.where(np.isfinite(scores), np.abs(scores), 0)
    rows = np.maximum(1, finite.max(-1, keepdims=True))
    gap = SOFTMAX_FORMS_ABS * EPS32 * rows + 2 * v.shape[-2] * EPS32
    return gap * np.abs(v).sum(-2, keepdims=True)


@pytest.mark.parametrize("shape", [(4, 1, 33, 16), (4, 5, 9, 8), (2, 64, 64, 32)])
def test_fused_attention_within_bound_of_its_numpy_form(shape):
    heads, tokens, total, depth = shape
    feeds = _feeds(heads, tokens, total, depth)
    model = _model()
    code = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "attention_compiled_softmax" in code
    (found,), (written,) = both_forms(model, feeds)
    assert found.dtype == written.dtype == np.float32 and found.shape == written.shape
    gap = np.abs(found.astype(np.float64) - written)
    assert (gap <= _bound(feeds)).all()
