"""Decoding node attributes into Python values, once, at compile time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import AttributeProto, numpy_helper


def _decode_string(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


A = AttributeProto

#: How each attribute type decodes (graphs stay GraphProtos for builders to compile).
_DECODERS: dict[int, Callable[[AttributeProto], Any]] = {
    A.FLOAT: lambda a: float(a.f),
    A.INT: lambda a: int(a.i),
    A.STRING: lambda a: _decode_string(a.s),
    A.TENSOR: lambda a: numpy_helper.to_array(a.t),
    A.SPARSE_TENSOR: lambda a: a.sparse_tensor,
    A.GRAPH: lambda a: a.g,
    A.TYPE_PROTO: lambda a: a.tp,
    A.FLOATS: lambda a: [float(x) for x in a.floats],
    A.INTS: lambda a: [int(x) for x in a.ints],
    A.STRINGS: lambda a: [_decode_string(s) for s in a.strings],
    A.TENSORS: lambda a: [numpy_helper.to_array(x) for x in a.tensors],
    A.GRAPHS: lambda a: list(a.graphs),
    A.SPARSE_TENSORS: lambda a: list(a.sparse_tensors),
    A.TYPE_PROTOS: lambda a: list(a.type_protos),
}


def decode_attribute(attr: AttributeProto) -> Any:
    """Return the Python value of an attribute; graphs stay GraphProtos for builders to compile.

    INT -> int, FLOAT -> float, STRING -> str, TENSOR -> ndarray, GRAPH -> GraphProto,
    TYPE_PROTO -> TypeProto, and the plural kinds -> lists of those.
    """
    decode = _DECODERS.get(attr.type)
    if decode is None:
        raise ValueError(f"attribute {attr.name!r} has unknown type {attr.type}")
    return decode(attr)
