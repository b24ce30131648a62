"""onnxruntime's Python API around a session, with CPU meaning, one module per part:

- :mod:`~onnxflow.ort_api.api`: the module functions (device, providers, logger severity);
- :mod:`~onnxflow.ort_api.ortvalue`: :class:`OrtValue`;
- :mod:`~onnxflow.ort_api.binding`: :class:`SessionIOBinding` (``IOBinding``);
- :mod:`~onnxflow.ort_api.model_info`: :class:`ModelMetadata` and inputs as onnxruntime shows them;
- :mod:`~onnxflow.ort_api.editing`: the session's edits of its model (added initializers, the
  folded model onnxruntime's ``optimized_model_filepath`` writes);
- :mod:`~onnxflow.ort_api.threads`: the BLAS thread bound of ``intra_op_num_threads``;
- :mod:`~onnxflow.ort_api.profiler`: the profile trace in onnxruntime's JSON format;
- :mod:`~onnxflow.ort_api.session_api`: the session methods beyond ``run`` (a mixin of
  :class:`onnxflow.InferenceSession`) and the warnings it gives once.

Everything is on the CPU: the only provider is ``CPUExecutionProvider``, the only device
``"cpu"``; an OrtValue holds a NumPy array (or a sequence, map or optional value).
"""

from __future__ import annotations

from onnxflow.ort_api.api import (
    CPU,
    check_providers,
    get_all_providers,
    get_available_providers,
    get_device,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from onnxflow.ort_api.binding import IOBinding, SessionIOBinding
from onnxflow.ort_api.editing import folded_model, replace_initializers
from onnxflow.ort_api.model_info import ModelMetadata, ort_node_arg
from onnxflow.ort_api.ortvalue import OrtValue
from onnxflow.ort_api.profiler import OrtProfile
from onnxflow.ort_api.session_api import OrtSessionAPI, warn_once
from onnxflow.ort_api.threads import BlasThreads

__all__ = [
    "CPU",
    "BlasThreads",
    "IOBinding",
    "ModelMetadata",
    "OrtProfile",
    "OrtSessionAPI",
    "OrtValue",
    "SessionIOBinding",
    "check_providers",
    "folded_model",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "ort_node_arg",
    "replace_initializers",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "warn_once",
]
