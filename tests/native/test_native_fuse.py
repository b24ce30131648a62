"""Compiled forms of the fused norms (the LayerNormalization loop of native/_math.pyx)
against their NumPy forms, which run the primitives as written (tests/passes/norm_models.py
builds them)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

import onnxflow

sys.path.insert(0, str(Path(__file__).parents[1] / "passes"))
from native_forms import both_forms
from norm_models import (
    activations,
    layer_norm_nodes,
    norm_model,
    rms_norm_nodes,
)

FORMS_TESTED = [("onnxflow.fused", "PrimitiveLayerNorm"), ("onnxflow.fused", "PrimitiveRMSNorm")]

#: The compiled norm and the written chain differ by at most this many float32 ulps of
#: max(|y|, 1): the chain rounds in float32 at each of its nodes (the two means summed over the
#: row, the centring, the square root, the division, the scale and the shift), the compiled form
#: once, from double; each rounding costs at most half an ulp of a value of about |y| or 1
#: (normalized rows have unit spread), and the means' sums a few more (measured: 8 at most).
NORM_ULPS = 16


def _ulps_of_scale(found: np.ndarray, written: np.ndarray) -> float:
    scale = np.spacing(np.maximum(np.abs(written), 1).astype(np.float32))
    return float((np.abs(found.astype(np.float64) - written) / scale).max())


CHAINS = {
    "layer_norm": layer_norm_nodes(),
    "layer_norm_reciprocal_unscaled": layer_norm_nodes(divide="Reciprocal", affine="none"),
    "layer_norm_div_one_scale": layer_norm_nodes(square="Mul", divide="DivOne", affine="scale"),
    "rms_norm": rms_norm_nodes(),
}


@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("shape", [(2, 7, 64), (3, 50, 64), (1, 1, 64)])
def test_fused_norm_within_bound_of_the_written_chain(chain, shape):
    model = norm_model(CHAINS[chain])
    code = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "norm_compiled" in code
    x = activations(shape, seed=len(chain))
    (found,), (written,) = both_forms(model, {"x": x})
    assert found.dtype == written.dtype == np.float32 and found.shape == written.shape
    assert _ulps_of_scale(found, written) <= NORM_ULPS


def test_fused_norm_wide_rows():
    """Rows as wide as BERT-base's (768): still within the bound."""
    model = norm_model(layer_norm_nodes(), hidden=768)
    x = activations((4, 9, 768))
    (found,), (written,) = both_forms(model, {"x": x})
    assert _ulps_of_scale(found, written) <= NORM_ULPS


def test_other_inputs_run_the_chain_as_written():
    """float64 input (x's declared type left open) and an empty batch: the compiled form hands
    them to the nodes as written, bitwise."""
    model = norm_model(layer_norm_nodes(), x_type=TensorProto.UNDEFINED)
    for x in (activations().astype(np.float64), np.zeros((0, 3, 64), np.float32)):
        (found,), (written,) = both_forms(model, {"x": x})
        assert found.dtype == written.dtype and found.shape == written.shape
        np.testing.assert_array_equal(found, written)


def test_constant_rows_give_beta():
    """Rows of one value: variance 0, so y is beta in both forms (x - mean is exactly 0)."""
    model = norm_model(layer_norm_nodes())
    x = np.full((2, 3, 64), 7.25, np.float32)
    (found,), (written,) = both_forms(model, {"x": x})
    np.testing.assert_array_equal(found, written)
