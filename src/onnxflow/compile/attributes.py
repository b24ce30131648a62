"""Decoding node attributes into Python values, once, at compile time."""

from __future__ import annotations

from typing import Any

from onnx import AttributeProto, numpy_helper


def _decode_string(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def decode_attribute(attr: AttributeProto) -> Any:
    """Return the Python value of an attribute; graphs stay GraphProtos for builders to compile.

    INT -> int, FLOAT -> float, STRING -> str, TENSOR -> ndarray, GRAPH -> GraphProto,
    TYPE_PROTO -> TypeProto, and the plural kinds -> lists of those.
    """
    t = attr.type
    A = AttributeProto
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.INT:
        return int(attr.i)
    if t == A.STRING:
        return _decode_string(attr.s)
    if t == A.TENSOR:
        return numpy_helper.to_array(attr.t)
    if t == A.SPARSE_TENSOR:
        return attr.sparse_tensor
    if t == A.GRAPH:
        return attr.g
    if t == A.TYPE_PROTO:
        return attr.tp
    if t == A.FLOATS:
        return [float(x) for x in attr.floats]
    if t == A.INTS:
        return [int(x) for x in attr.ints]
    if t == A.STRINGS:
        return [_decode_string(s) for s in attr.strings]
    if t == A.TENSORS:
        return [numpy_helper.to_array(x) for x in attr.tensors]
    if t == A.GRAPHS:
        return list(attr.graphs)
    if t == A.SPARSE_TENSORS:
        return list(attr.sparse_tensors)
    if t == A.TYPE_PROTOS:
        return list(attr.type_protos)
    raise ValueError(f"attribute {attr.name!r} has unknown type {t}")
