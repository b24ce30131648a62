"""Runtime values and ONNX types.

A value at run time is one of:

- a tensor: a ``numpy.ndarray`` (special float and small-int types come from ``ml_dtypes``;
  strings are object arrays of ``str``);
- a sequence: a Python ``list`` of values;
- a map: a Python ``dict``;
- an optional: the contained value, or ``None`` when the optional is empty.

An omitted optional input or output (the name ``""``) is also ``None`` inside a kernel call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, TypeProto, helper, numpy_helper

from onnxflow.errors import ExternalDataError

#: ONNX element type names, as onnxruntime spells them in ``tensor(...)``.
_ELEM_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
}


def elem_type_name(elem_type: int) -> str:
    """Return the readable name of an ONNX element type (``float``, ``float8e4m3fn``, ...)."""
    if elem_type in _ELEM_NAMES:
        return _ELEM_NAMES[elem_type]
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"elem_type_{elem_type}"


def np_dtype(elem_type: int) -> np.dtype:
    """Return the NumPy dtype that holds an ONNX element type."""
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _build_dtype_to_elem() -> dict[np.dtype, int]:
    table: dict[np.dtype, int] = {}
    for elem in TensorProto.DataType.values():
        if elem in (TensorProto.UNDEFINED, TensorProto.STRING):
            continue
        try:
            table.setdefault(np_dtype(elem), elem)
        except (KeyError, ValueError, TypeError):
            continue
    table[np.dtype(object)] = TensorProto.STRING
    table[np.dtype(np.str_)] = TensorProto.STRING
    return table


_DTYPE_TO_ELEM = _build_dtype_to_elem()


def elem_type_of(dtype: np.dtype) -> int:
    """Return the ONNX element type for a NumPy dtype (``U`` strings count as ``string``)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "U":
        return TensorProto.STRING
    try:
        return _DTYPE_TO_ELEM[dtype]
    except KeyError:
        raise TypeError(f"NumPy dtype {dtype} has no ONNX element type") from None


def type_str(tp: TypeProto) -> str:
    """Return onnxruntime's spelling of a type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({elem_type_name(tp.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({elem_type_name(tp.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_str(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_str(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = elem_type_name(tp.map_type.key_type)
        return f"map({key},{type_str(tp.map_type.value_type)})"
    return "unknown"


def type_shape(tp: TypeProto) -> list[int | str | None] | None:
    """Return a tensor type's shape as ints, dim_param strings or None; None when unranked."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tp.tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind else None)
    return dims


def value_type_str(value: Any) -> str:
    """Describe a runtime value in the same spelling as :func:`type_str`."""
    if value is None:
        return "optional(empty)"
    if isinstance(value, np.ndarray):
        try:
            return f"tensor({elem_type_name(elem_type_of(value.dtype))})"
        except TypeError:
            return f"ndarray({value.dtype})"
    if isinstance(value, list):
        inner = value_type_str(value[0]) if value else "?"
        return f"seq({inner})"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: name, type string and shape."""

    name: str
    type: str
    shape: list[int | str | None] | None
    type_proto: TypeProto | None = None

    @classmethod
    def from_value_info(cls, vi: onnx.ValueInfoProto) -> NodeArg:
        """Build a NodeArg from a graph's ValueInfoProto."""
        return cls(vi.name, type_str(vi.type), type_shape(vi.type), vi.type)


def tensor_to_array(t: TensorProto) -> np.ndarray:
    """Decode a TensorProto into a NumPy array. Its data must be in the proto:
    :func:`onnxflow.ir.load.load_model` reads external data in, safely; onnx's reader, which
    opens the file by name relative to the working directory, is never reached."""
    if t.data_location == TensorProto.EXTERNAL:
        raise ExternalDataError(
            f"tensor {t.name!r} refers to external data that was not read in: load the model "
            f"with onnxflow.load_model (or give it to InferenceSession) with its base_dir"
        )
    return numpy_helper.to_array(t)


def proto_to_value(proto: Any) -> Any:
    """Decode a TensorProto, SequenceProto, MapProto or OptionalProto into a runtime value."""
    if isinstance(proto, TensorProto):
        return numpy_helper.to_array(proto)
    if isinstance(proto, onnx.SequenceProto):
        return [proto_to_value(v) for v in numpy_helper.to_list(proto)]
    if isinstance(proto, onnx.OptionalProto):
        return numpy_helper.to_optional(proto)
    if isinstance(proto, onnx.MapProto):
        return numpy_helper.to_dict(proto)
    return proto
