"""Identity and constants: Identity, Constant, ConstantOfShape, EyeLike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op
from onnxflow.traits import NumpyCall, Traits
from onnxflow.values import np_dtype


@op(
    "Identity",
    1,
    13,
    14,
    16,
    19,
    21,
    23,
    24,
    25,
    traits=Traits(passthrough=True, elementwise=True, selects=True),
)
def identity(x: Any) -> Any:
    """Return the input unchanged (tensors, sequences and optionals alike)."""
    return x


@op("Constant", 1, 9, 11, 12, 13, 19, 21, 23, 24, 25, build=True)
def constant(node: NodeContext, **attrs: Any) -> Callable[[], np.ndarray]:
    """Return the one tensor given by exactly one of the ``value*`` attributes."""
    if len(attrs) != 1:
        raise node.error(f"expected exactly one value attribute, found {sorted(attrs)}")
    ((name, given),) = attrs.items()
    decoders: dict[str, Callable[[Any], np.ndarray]] = {
        "value": np.asarray,
        "sparse_value": _sparse_to_dense,
        "value_float": lambda v: np.asarray(v, dtype=np.float32),
        "value_floats": lambda v: np.asarray(v, dtype=np.float32).reshape(-1),
        "value_int": lambda v: np.asarray(v, dtype=np.int64),
        "value_ints": lambda v: np.asarray(v, dtype=np.int64).reshape(-1),
        "value_string": lambda v: np.asarray(v, dtype=object),
        "value_strings": lambda v: np.asarray(v, dtype=object).reshape(-1),
    }
    allowed = ("value",) if node.opset < 11 else ("value", "sparse_value")
    if name not in decoders or (node.opset < 12 and name not in allowed):
        raise node.error(f"attribute {name!r} is not a Constant value attribute at this opset")
    value = decoders[name](given)
    value.flags.writeable = False
    return lambda: value


def _sparse_to_dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """Densify a SparseTensorProto (indices flat [NNZ] or coordinates [NNZ, rank])."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    shape = tuple(sparse.dims)
    dense = np.zeros(shape, dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape)
    dense.reshape(-1)[indices] = values
    return dense


def _constant_of_shape_numpy(f: NumpyCall) -> str:
    return f"onnx_constant_of_shape({f.ins[0]}, {f.arg('value', None)})"


@op(
    "ConstantOfShape",
    *(9, 20, 21, 23, 24, 25),
    traits=Traits(numpy=_constant_of_shape_numpy),
)
def constant_of_shape(shape: np.ndarray, *, value: np.ndarray | None = None) -> np.ndarray:
    """Return a tensor of the given shape filled with ``value``'s one element (default 0.0f)."""
    if value is None:
        value = np.zeros(1, dtype=np.float32)
    if value.size != 1:
        raise ValueError(f"value must hold exactly one element, found shape {value.shape}")
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must be non-negative, found {dims}")
    return np.full(dims, value.reshape(-1)[0], dtype=value.dtype)


@op("EyeLike", 9, 22)
def eye_like(x: np.ndarray, *, dtype: int | None = None, k: int = 0) -> np.ndarray:
    """Return a matrix shaped like the 2-D ``x`` with ones on diagonal ``k``."""
    if x.ndim != 2:
        raise ValueError(f"EyeLike expects a 2-D input, found shape {x.shape}")
    out_dtype = x.dtype if dtype is None else np_dtype(dtype)
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=np.float64).astype(out_dtype)
