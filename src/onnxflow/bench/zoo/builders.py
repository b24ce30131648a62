"""Builders of zoo models made the way users make them. Each imports its framework when it runs
(lightgbm, xgboost, onnxmltools, onnxruntime.quantization, onnxconverter-common): none of them is
a dependency of onnxflow, and a missing one makes the model unavailable, not the bench fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

#: Rows and features of the tree models' training data (a fixed synthetic problem).
TREE_ROWS, TREE_FEATURES = 2000, 20


def _tree_data(classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((TREE_ROWS, TREE_FEATURES)).astype(np.float32)
    score = x[:, :3] @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3 * x[:, 3] * x[:, 4]
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return x, y


def lightgbm_classifier(target: Path, classes: int = 3, trees: int = 100) -> None:
    """A lightgbm multiclass classifier converted by onnxmltools (probabilities as a tensor)."""
    import lightgbm
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _tree_data(classes)
    model = lightgbm.LGBMClassifier(n_estimators=trees, num_leaves=31, verbose=-1).fit(x, y)
    onx = convert_lightgbm(
        model,
        initial_types=[("input", FloatTensorType([None, TREE_FEATURES]))],
        zipmap=False,
        target_opset=15,
    )
    onnx.save(onx, target)


def xgboost_classifier(target: Path, classes: int = 3, trees: int = 100) -> None:
    """An xgboost multiclass classifier converted by onnxmltools."""
    import xgboost
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _tree_data(classes)
    model = xgboost.XGBClassifier(n_estimators=trees, max_depth=6).fit(x, y)
    onx = convert_xgboost(
        model,
        initial_types=[("input", FloatTensorType([None, TREE_FEATURES]))],
        target_opset=15,
    )
    onnx.save(onx, target)


def float16_of(base: Callable[[], Path]) -> Callable[[Path], None]:
    """A builder of ``base``'s model in float16 throughout (onnxconverter-common, inputs and
    outputs too), as users make fp16 models for smaller files."""

    def build(target: Path) -> None:
        from onnxconverter_common import float16

        model = onnx.load(base())
        onnx.save(float16.convert_float_to_float16(model, keep_io_types=False), target)

    return build


def quantized_of(
    base: Callable[[], Path], mode: str, feeds: Callable[[], dict]
) -> Callable[[Path], None]:
    """A builder of ``base``'s model quantized by onnxruntime.quantization: ``"dynamic"``
    (MatMulInteger / ConvInteger, int8 weights) or ``"qdq"`` (static QuantizeLinear /
    DequantizeLinear pairs, calibrated on ``feeds``)."""

    def build(target: Path) -> None:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_dynamic,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        prepared = target.with_suffix(".pre.onnx")
        quant_pre_process(str(base()), str(prepared), skip_symbolic_shape=True)
        if mode == "dynamic":
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
            return

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.left = [feeds() for _ in range(4)]

            def get_next(self) -> dict | None:
                return self.left.pop() if self.left else None

        quantize_static(
            str(prepared),
            str(target),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )

    return build
