"""One exception tree for everything onnxflow raises on purpose.

Every message names what was wrong: the graph, node, op and opset where it applies, and what was
expected versus what was found.

Each error also derives from the status class onnxruntime raises in the same case
(``onnxflow.capi.onnxruntime_pybind11_state.InvalidArgument`` for a bad feed, ``NoSuchFile`` for
a missing model file, ...), and those from the matching built-in (``ValueError``,
``RuntimeError``, ...), so code written to catch onnxruntime's errors catches onnxflow's.
"""

from __future__ import annotations


class OnnxflowError(Exception):
    """Root of every error onnxflow raises on purpose."""


# -- onnxruntime's status classes (its StatusCode names), each under a built-in ---------------
class Fail(OnnxflowError, RuntimeError):
    """onnxruntime's FAIL: a general failure (a kernel error, a cancelled run)."""


class InvalidArgument(OnnxflowError, ValueError):
    """onnxruntime's INVALID_ARGUMENT: a feed, output name or model that is not acceptable."""


class NoSuchFile(OnnxflowError, FileNotFoundError):
    """onnxruntime's NO_SUCHFILE: the model file does not exist."""


class NoModel(OnnxflowError, RuntimeError):
    """onnxruntime's NO_MODEL."""


class EngineError(OnnxflowError, RuntimeError):
    """onnxruntime's ENGINE_ERROR."""


class RuntimeException(OnnxflowError, RuntimeError):
    """onnxruntime's RUNTIME_EXCEPTION: an error while running."""


class InvalidProtobuf(OnnxflowError, ValueError):
    """onnxruntime's INVALID_PROTOBUF: the bytes are not an ONNX model."""


class ModelLoaded(OnnxflowError, RuntimeError):
    """onnxruntime's MODEL_LOADED."""


class NotImplemented(OnnxflowError, NotImplementedError):
    """onnxruntime's NOT_IMPLEMENTED: no kernel for an operator (its name shadows the built-in
    constant in this module only)."""


class InvalidGraph(OnnxflowError, ValueError):
    """onnxruntime's INVALID_GRAPH: the graph breaks a rule of ONNX."""


class EPFail(OnnxflowError, RuntimeError):
    """onnxruntime's EP_FAIL: an execution provider failed."""


class ModelLoadCanceled(OnnxflowError, RuntimeError):
    """onnxruntime's MODEL_LOAD_CANCELED."""


class ModelRequiresCompilation(OnnxflowError, RuntimeError):
    """onnxruntime's MODEL_REQUIRES_COMPILATION."""


class NotFound(OnnxflowError, LookupError):
    """onnxruntime's NOT_FOUND."""


class DeviceReset(OnnxflowError, RuntimeError):
    """onnxruntime's DeviceReset."""


#: onnxruntime's status classes by name, as ``onnxruntime.capi.onnxruntime_pybind11_state``
#: exports them.
ORT_STATUS_CLASSES = (
    Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException, InvalidProtobuf,
    ModelLoaded, NotImplemented, InvalidGraph, EPFail, ModelLoadCanceled,
    ModelRequiresCompilation, NotFound, DeviceReset,
)  # fmt: skip


# -- onnxflow's errors --------------------------------------------------------------------------
class ModelLoadError(Fail):
    """The model could not be read: missing file, garbage bytes, bad external data."""


class ModelFileNotFoundError(ModelLoadError, NoSuchFile):
    """The model file does not exist."""


class ModelParseError(ModelLoadError, InvalidProtobuf):
    """The bytes given or read are not a serialized ONNX model."""


class ExternalDataError(ModelLoadError):
    """An external-data reference is unsafe or does not fit the file it points into."""


class ValidationError(InvalidGraph, InvalidArgument):
    """The model breaks an ONNX IR rule (SSA, scoping, topological order, arity, opsets).

    onnxruntime reports these as INVALID_GRAPH or INVALID_ARGUMENT: either catches it.
    """


class UnsupportedOperatorError(ValidationError, NotImplemented):
    """The model uses operators (or operator versions) that onnxflow has no kernel for.

    ``missing`` lists every ``(domain, op_type, opset)`` that was not found, all at once.
    """

    def __init__(self, message: str, missing: list[tuple[str, str, int]]):
        super().__init__(message)
        self.missing = missing


class UnsupportedVersionError(ValidationError, Fail):
    """The model needs a newer IR version or operator set than onnxflow supports."""


class InputError(InvalidArgument):
    """A feed does not match the model: unknown or missing name, wrong dtype, rank or shape."""


class RuntimeFailure(Fail, RuntimeException):
    """A kernel failed while running; the message names the node, op and opset."""


class ResourceError(Fail, MemoryError):
    """The model or the run needs more memory than this process can have (what the machine,
    ``RLIMIT_AS`` and the cgroup leave): the message names what was being built or grown and
    the bytes. Also a MemoryError, as running out of memory is in Python."""


class CancelledError(Fail):
    """The run was stopped through ``RunOptions.terminate`` or an interrupt."""


def where(node_name: str, op_type: str, domain: str, opset: int | None) -> str:
    """Return the standard description of a node used at the start of error messages."""
    dom = f"{domain}." if domain and domain != "ai.onnx" else ""
    name = f" {node_name!r}" if node_name else ""
    ver = f" (opset {opset})" if opset is not None else ""
    return f"{dom}{op_type}{name}{ver}"


class OnnxflowWarning(UserWarning):
    """Something that runs as the spec says but may not be what the model's author meant."""
