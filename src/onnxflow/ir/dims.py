"""Dimension variables (IR: "the same name denotes the same value" across a model).

Only a ``dim_param`` that is a C identifier names a variable. Any other ``dim_param`` (``"?"``,
``"-1"``, ``"batch size"``, ``"N/2"``) is an unknown dimension that relates to nothing: two
``"?"`` in one shape, or in two inputs, may have different sizes.
"""

from __future__ import annotations

from typing import Any

from onnx import TypeProto

from onnxflow.values import type_shape


def dimension_variable(dim: Any) -> str | None:
    """``dim`` when it names a dimension variable (a ``dim_param`` that is a C identifier)."""
    if isinstance(dim, str) and dim.isascii() and dim.isidentifier():
        return dim
    return None


def static_shape(tp: TypeProto) -> tuple[int | str | None, ...] | None:
    """A tensor type's shape for reasoning about sizes: ints, dimension variables, and None for
    every dimension that relates to nothing (unset, or a ``dim_param`` that is no identifier);
    None when the type is unranked."""
    dims = type_shape(tp)
    if dims is None:
        return None
    return tuple(d if not isinstance(d, str) else dimension_variable(d) for d in dims)
