"""Shape inference as an aid: the types onnx can tell, recorded in each graph's value_info."""

from __future__ import annotations

import onnx.shape_inference
from onnx import ModelProto


def infer_types(model: ModelProto) -> ModelProto:
    """``model`` with the types shape inference can tell recorded in each graph's value_info
    (the model itself when inference fails: it is an aid only, a model it cannot handle still
    runs)."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        return model
