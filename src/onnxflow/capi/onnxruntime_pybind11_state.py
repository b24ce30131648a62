"""onnxruntime's status exceptions under the names and module path its users import them from::

    from onnxflow.capi.onnxruntime_pybind11_state import InvalidArgument

Each is a class of :mod:`onnxflow.errors` (so ``OnnxflowError`` is their root) that onnxflow's
own errors derive from where onnxruntime raises it: a bad feed or output name is an
``InvalidArgument``, a missing model file ``NoSuchFile``, bytes that are no model
``InvalidProtobuf``, an invalid graph ``InvalidGraph`` (and ``InvalidArgument``), an op with no
kernel ``NotImplemented``, a kernel failure or a cancelled run ``Fail``.
"""

from onnxflow.errors import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,
    RuntimeException,
)

__all__ = [
    "DeviceReset",
    "EPFail",
    "EngineError",
    "Fail",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NotFound",
    "NotImplemented",
    "RuntimeException",
]
