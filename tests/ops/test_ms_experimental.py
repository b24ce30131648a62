"""onnx's former experimental operators, as onnxruntime runs them in the default domain
(ops/microsoft/experimental.py), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from ort_compare import assert_matches, ms_model

RNG = np.random.default_rng(7)
IMAGE = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)


def _run(op: str, inputs: list, opset: int = 8, **attrs) -> list:
    return assert_matches(*ms_model(op, inputs, domain="", opset=opset, **attrs), rtol=1e-5)


def test_affine() -> None:
    _run("Affine", [IMAGE], alpha=1.5, beta=-0.25)


@pytest.mark.parametrize(
    "attrs", [{"border": [1, 2, 0, 1]}, {"border": [1, 0, 2, 2], "scale": [2, 3]}]
)
def test_crop_by_border_and_by_scale(attrs: dict) -> None:
    (out,) = _run("Crop", [IMAGE], **attrs)
    assert out.shape[2:] == ((2, 3) if "scale" in attrs else (2, 5))


def test_dynamic_slice_with_and_without_axes() -> None:
    starts, ends = np.array([1, 0], np.int64), np.array([3, -1], np.int64)
    _run("DynamicSlice", [IMAGE, starts, ends])
    _run("DynamicSlice", [IMAGE, starts, ends, np.array([2, 3], np.int64)])


def test_image_scaler_as_tiny_yolov2_uses_it() -> None:
    _run("ImageScaler", [IMAGE], scale=0.5, bias=[0.1, -0.2, 0.3])


@pytest.mark.parametrize("across_channels", [0, 1])
@pytest.mark.parametrize("normalize_variance", [0, 1])
def test_mean_variance_normalization_1(across_channels: int, normalize_variance: int) -> None:
    _run(
        "MeanVarianceNormalization",
        [IMAGE],
        across_channels=across_channels,
        normalize_variance=normalize_variance,
    )


def test_parametric_softplus_stays_finite_for_large_inputs() -> None:
    x = np.concatenate([IMAGE.reshape(-1), np.array([80, -80], np.float32)])
    (out,) = _run("ParametricSoftplus", [x], alpha=2.0, beta=1.5)
    assert np.isfinite(out).all()


def test_scale_and_scaled_tanh() -> None:
    _run("Scale", [IMAGE], scale=3.0)
    _run("ScaledTanh", [IMAGE], alpha=2.0, beta=0.5)


def test_thresholded_relu_version_1() -> None:
    (out,) = _run("ThresholdedRelu", [IMAGE], opset=9, alpha=0.3)
    assert ((out == 0) | (out > 0.3)).all()


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [
        ("Affine", {"alpha": 2.0}),
        ("ParametricSoftplus", {}),
        ("Scale", {"scale": 3.0}),
        ("ScaledTanh", {}),
        ("ThresholdedRelu", {}),
        ("Crop", {"border": [1, 1, 1, 1]}),
        ("ImageScaler", {"bias": [0.5, 1.0, 1.5]}),
        ("MeanVarianceNormalization", {}),
    ],
)
def test_registered_promises_hold(op_type: str, attrs: dict) -> None:
    """What each registration declares (a fresh result; elementwise: the input's shape and
    type, element by element) holds for the kernel."""
    from onnxflow.ops import REGISTRY, load_all

    load_all()
    kernel = REGISTRY.lookup("", op_type, 1)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = kernel.fn(x, **attrs)
    assert kernel.traits.fresh and not np.shares_memory(x, y)
    if kernel.traits.elementwise:
        assert y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_array_equal(kernel.fn(x[:1, :1], **attrs), y[:1, :1])
