"""One exception tree for everything onnxflow raises on purpose.

Every message names what was wrong: the graph, node, op and opset where it applies, and what was
expected versus what was found.
"""

from __future__ import annotations


class OnnxflowError(Exception):
    """Root of every error onnxflow raises on purpose."""


class ModelLoadError(OnnxflowError):
    """The model could not be read: missing file, garbage bytes, bad external data."""


class ExternalDataError(ModelLoadError):
    """An external-data reference is unsafe or does not fit the file it points into."""


class ValidationError(OnnxflowError):
    """The model breaks an ONNX IR rule (SSA, scoping, topological order, arity, opsets)."""


class UnsupportedOperatorError(ValidationError):
    """The model uses operators (or operator versions) that onnxflow has no kernel for.

    ``missing`` lists every ``(domain, op_type, opset)`` that was not found, all at once.
    """

    def __init__(self, message: str, missing: list[tuple[str, str, int]]):
        super().__init__(message)
        self.missing = missing


class UnsupportedVersionError(ValidationError):
    """The model needs a newer IR version or operator set than onnxflow supports."""


class InputError(OnnxflowError):
    """A feed does not match the model: unknown or missing name, wrong dtype, rank or shape."""


class RuntimeFailure(OnnxflowError):
    """A kernel failed while running; the message names the node, op and opset."""


class CancelledError(OnnxflowError):
    """The run was stopped through ``RunOptions.terminate`` or an interrupt."""


def where(node_name: str, op_type: str, domain: str, opset: int | None) -> str:
    """Return the standard description of a node used at the start of error messages."""
    dom = f"{domain}." if domain and domain != "ai.onnx" else ""
    name = f" {node_name!r}" if node_name else ""
    ver = f" (opset {opset})" if opset is not None else ""
    return f"{dom}{op_type}{name}{ver}"


class OnnxflowWarning(UserWarning):
    """Something that runs as the spec says but may not be what the model's author meant."""
