"""Kernels of the ``com.microsoft`` and ``com.microsoft.nchwc`` operators that onnxruntime's CPU
provider runs and its own tools emit (the transformer optimizer, the quantizer, saved optimized
models, the generation converters), one family module each.

Their schemas and docs are onnxruntime's (``onnxruntime.capi.onnxruntime_pybind11_state.
get_all_operator_schema()``); the tests hold each kernel against onnxruntime's output.
"""

from __future__ import annotations

MS_DOMAIN = "com.microsoft"
NCHWC_DOMAIN = "com.microsoft.nchwc"
