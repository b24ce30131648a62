"""Export an ONNX model as a standalone, readable NumPy module (``onnxflow export-python``)."""

from onnxflow.export.python import export_python

__all__ = ["export_python"]
