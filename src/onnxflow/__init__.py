"""onnxflow: an ONNX inference runtime in Python on NumPy.

Load a model (path, bytes or ``onnx.ModelProto``), validate it against the ONNX IR rules,
compile it once into an execution plan, run it many times::

    import onnxflow
    sess = onnxflow.InferenceSession("model.onnx")
    outputs = sess.run(None, {"X": x})

``compare``, ``export_python``, ``view`` and ``View`` load their modules the first time they are
named (``onnxflow.compare`` say): a plain ``import onnxflow`` does not import them, since a
session needs none of them.
"""

import importlib
import sys
from types import ModuleType
from typing import Any

from onnxflow import capi
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

__version__ = "0.1.0"


def get_version_string() -> str:
    """onnxflow's version, as onnxruntime's function of that name gives its own."""
    return __version__


#: The public names whose modules load when first named: name -> (module, attribute).
_LAZY: dict[str, tuple[str, str]] = {
    "compare": ("onnxflow.compare", "compare"),
    "export_python": ("onnxflow.export", "export_python"),
    "view": ("onnxflow.view", "view"),
    "View": ("onnxflow.view", "View"),
}


def __getattr__(name: str) -> Any:
    """A lazily loaded public name (:data:`_LAZY`), imported the first time it is asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'onnxflow' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazily loaded ones included."""
    return sorted({*globals(), *_LAZY})


class _Package(ModuleType):
    """onnxflow's module type: importing ``onnxflow.compare`` or ``onnxflow.view`` (the
    submodules) leaves ``onnxflow.compare`` and ``onnxflow.view`` the functions, as eager
    imports of the functions did."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and name in _LAZY:
            value = getattr(value, _LAZY[name][1])
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
