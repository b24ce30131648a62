"""onnxflow: an ONNX inference runtime in Python on NumPy.

Load a model (path, bytes or ``onnx.ModelProto``), validate it against the ONNX IR rules,
compile it once into an execution plan, run it many times::

    import onnxflow
    sess = onnxflow.InferenceSession("model.onnx")
    outputs = sess.run(None, {"X": x})
"""

from onnxflow.errors import (
    CancelledError,
    ExternalDataError,
    InputError,
    ModelLoadError,
    OnnxflowError,
    OnnxflowWarning,
    RuntimeFailure,
    UnsupportedOperatorError,
    UnsupportedVersionError,
    ValidationError,
)
from onnxflow.ir.load import load_model
from onnxflow.options import SessionOptions
from onnxflow.session import InferenceSession, RunOptions, run
from onnxflow.values import NodeArg

__version__ = "0.1.0"

__all__ = [
    "CancelledError",
    "ExternalDataError",
    "InferenceSession",
    "InputError",
    "ModelLoadError",
    "NodeArg",
    "OnnxflowError",
    "OnnxflowWarning",
    "RunOptions",
    "RuntimeFailure",
    "SessionOptions",
    "UnsupportedOperatorError",
    "UnsupportedVersionError",
    "ValidationError",
    "__version__",
    "load_model",
    "run",
]
