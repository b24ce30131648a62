"""onnxflow: an ONNX inference runtime in Python on NumPy.

Load a model (path, bytes or ``onnx.ModelProto``), validate it against the ONNX IR rules,
compile it once into an execution plan, run it many times::

    import onnxflow
    sess = onnxflow.InferenceSession("model.onnx")
    outputs = sess.run(None, {"X": x})
"""

from onnxflow import capi
from onnxflow.compare import compare
from onnxflow.errors import (
    CancelledError,
    ExternalDataError,
    InputError,
    ModelLoadError,
    OnnxflowError,
    OnnxflowWarning,
    ResourceError,
    RuntimeFailure,
    UnsupportedOperatorError,
    UnsupportedVersionError,
    ValidationError,
)
from onnxflow.export import export_python
from onnxflow.ir.load import load_model
from onnxflow.options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, SessionOptions
from onnxflow.ort_api import (
    IOBinding,
    ModelMetadata,
    OrtValue,
    SessionIOBinding,
    get_all_providers,
    get_available_providers,
    get_device,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from onnxflow.session import InferenceSession, RunOptions, run
from onnxflow.values import NodeArg
from onnxflow.view import View, view

__version__ = "0.1.0"


def get_version_string() -> str:
    """onnxflow's version, as onnxruntime's function of that name gives its own."""
    return __version__


__all__ = [
    "CancelledError",
    "ExecutionMode",
    "ExecutionOrder",
    "ExternalDataError",
    "GraphOptimizationLevel",
    "IOBinding",
    "InferenceSession",
    "InputError",
    "ModelLoadError",
    "ModelMetadata",
    "NodeArg",
    "OnnxflowError",
    "OnnxflowWarning",
    "OrtValue",
    "ResourceError",
    "RunOptions",
    "RuntimeFailure",
    "SessionIOBinding",
    "SessionOptions",
    "UnsupportedOperatorError",
    "UnsupportedVersionError",
    "ValidationError",
    "View",
    "__version__",
    "capi",
    "compare",
    "export_python",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
    "load_model",
    "run",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "view",
]
