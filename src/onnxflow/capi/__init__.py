"""Where onnxruntime users import from: ``onnxflow.capi.onnxruntime_pybind11_state`` holds the
exception classes under onnxruntime's names."""

from onnxflow.capi import onnxruntime_pybind11_state

__all__ = ["onnxruntime_pybind11_state"]
