"""Optionals: Optional, OptionalHasElement, OptionalGetElement.

An optional holding a value is the value itself; an empty optional is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TypeProto

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits


def _optional_numpy(f: NumpyCall) -> str:
    """Optional's NumPy form: its input, or None (an empty optional) when it has none."""
    return f.ins[0] if f.ins else "None"


@op("Optional", 15, 28, traits=Traits(numpy=_optional_numpy))
def optional(value: Any = None, *, type: TypeProto | None = None) -> Any:
    """Return an optional holding the input, or an empty one (``None``) when it is omitted."""
    return value


@op(
    "OptionalHasElement",
    *(15, 18, 28),
    traits=Traits(numpy=lambda f: f"np.asarray({f.ins[0] if f.ins else 'None'} is not None)"),
)
def optional_has_element(value: Any = None) -> np.ndarray:
    """Return a bool scalar: False for an omitted input or an empty optional, else True."""
    return np.asarray(value is not None)


@op(
    "OptionalGetElement",
    *(15, 18, 28),
    build=True,
    traits=Traits(numpy=lambda f: f"onnx_element({f.ins[0]})"),
)
def optional_get_element(node: NodeContext) -> Callable[[Any], Any]:
    """Return the optional's element; a plain tensor or sequence passes through unchanged."""
    name = node.inputs[0] if node.inputs else ""

    def get_element(value: Any = None) -> Any:
        if value is None:
            raise ValueError(f"input {name!r} is an empty optional; expected one holding a value")
        return value

    return get_element
