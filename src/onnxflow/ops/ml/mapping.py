"""ai.onnx.ml value mappings between strings, integers, floats and maps.

CastMap-1, CategoryMapper-1, DictVectorizer-1, LabelEncoder-1/2/4, ZipMap-1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops import compiled
from onnxflow.ops.ml.common import ML_DOMAIN, as_2d
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form
from onnxflow.values import np_dtype

_F32 = np.dtype(np.float32)
#: onnxflow.native._arrays, or None where it was not built.
_ARRAYS = compiled.module("_arrays")


class _Lookup:
    """A key -> value table applied elementwise; unknown keys map to ``default``."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default: Any) -> None:
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        self.out_dtype = values.dtype
        self.default = default
        self.numeric = keys.dtype != object
        if not self.numeric:
            self.table = dict(zip(keys.tolist(), values.tolist()))
            return
        nan = np.isnan(keys) if keys.dtype.kind == "f" else np.zeros(len(keys), bool)
        self.nan_value = values[nan][-1] if nan.any() else None
        keys, values = keys[~nan], values[~nan]
        last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]  # last key wins
        self.keys, self.values = keys[last], values[last]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not self.numeric:
            if x.dtype != object:
                raise TypeError(f"string keys need a string input, found {x.dtype}")
            out = [self.table.get(k, self.default) for k in x.reshape(-1).tolist()]
            return np.array(out, dtype=self.out_dtype).reshape(x.shape)
        if x.dtype == object:
            raise TypeError("numeric keys need a numeric input, found strings")
        out = np.full(x.shape, self.default, dtype=self.out_dtype)
        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, x), len(self.keys) - 1)
            hit = self.keys[pos] == x
            out[hit] = self.values[pos[hit]]
        if self.nan_value is not None and x.dtype.kind == "f":
            out[np.isnan(x)] = self.nan_value
        return out


def _one(what: str, **candidates: Any) -> tuple[str, Any]:
    given = [(k, v) for k, v in candidates.items() if v is not None]
    if len(given) != 1:
        raise ValueError(f"exactly one of {sorted(candidates)} must be set for {what}")
    return given[0]


@op("LabelEncoder", 1, domain=ML_DOMAIN)
def label_encoder_1(
    x: np.ndarray,
    *,
    classes_strings: list[str] | None = None,
    default_int64: int = -1,
    default_string: str = "_Unused",
) -> np.ndarray:
    """Map strings to their index in classes_strings, or integers to the string at that index."""
    classes = list(classes_strings or [])
    if x.dtype == object:
        index = {c: i for i, c in reversed(list(enumerate(classes)))}
        out = [index.get(s, default_int64) for s in x.reshape(-1).tolist()]
        return np.array(out, dtype=np.int64).reshape(x.shape)
    n = len(classes)
    out = [classes[i] if 0 <= i < n else default_string for i in x.reshape(-1).tolist()]
    return np.array(out, dtype=object).reshape(x.shape)


@op("LabelEncoder", 2, 4, domain=ML_DOMAIN, build=True)
def label_encoder(
    node: NodeContext,
    *,
    keys_strings: list[str] | None = None,
    keys_int64s: list[int] | None = None,
    keys_floats: list[float] | None = None,
    keys_tensor: np.ndarray | None = None,
    values_strings: list[str] | None = None,
    values_int64s: list[int] | None = None,
    values_floats: list[float] | None = None,
    values_tensor: np.ndarray | None = None,
    default_string: str = "_Unused",
    default_int64: int = -1,
    default_float: float = -0.0,
    default_tensor: np.ndarray | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Map each element through the keys_* -> values_* table (version 4 adds *_tensor)."""
    if node.opset < 4 and (keys_tensor is not None or values_tensor is not None):
        raise node.error("keys_tensor/values_tensor need ai.onnx.ml opset 4")
    key_arr = _column("keys", keys_strings, keys_int64s, keys_floats, keys_tensor)
    value_arr = _column("values", values_strings, values_int64s, values_floats, values_tensor)
    if default_tensor is not None:
        default: Any = default_tensor.reshape(-1)[0]
    elif value_arr.dtype == object:
        default = default_string
    elif value_arr.dtype.kind in "iu":
        default = default_int64
    else:
        default = default_float
    try:
        return _Lookup(key_arr, value_arr, default)
    except ValueError as exc:
        raise node.error(str(exc)) from exc


def _column(
    what: str,
    strings: list[str] | None,
    int64s: list[int] | None,
    floats: list[float] | None,
    tensor: np.ndarray | None,
) -> np.ndarray:
    """Return the one of ``<what>_strings``, ``_int64s``, ``_floats``, ``_tensor`` that is set."""
    given = {"strings": strings, "int64s": int64s, "floats": floats, "tensor": tensor}
    name, value = _one(what, **{f"{what}_{kind}": v for kind, v in given.items()})
    return _as_array(name, value)


def _as_array(name: str, value: Any) -> np.ndarray:
    if name.endswith("_tensor"):
        return np.asarray(value).reshape(-1)
    dtype = {"strings": object, "int64s": np.int64, "floats": np.float32}[name.split("_")[1]]
    return np.array(list(value), dtype=dtype)


@op("CategoryMapper", 1, domain=ML_DOMAIN)
def category_mapper(
    x: np.ndarray,
    *,
    cats_int64s: list[int] | None = None,
    cats_strings: list[str] | None = None,
    default_int64: int = -1,
    default_string: str = "_Unused",
) -> np.ndarray:
    """Map strings to integers (or integers to strings) through the parallel cats_* lists."""
    ints, strings = list(cats_int64s or []), list(cats_strings or [])
    if len(ints) != len(strings):
        raise ValueError(f"cats_int64s has {len(ints)} entries but cats_strings {len(strings)}")
    if x.dtype == object:
        to_int = dict(zip(strings, ints))
        out = [to_int.get(s, default_int64) for s in x.reshape(-1).tolist()]
        return np.array(out, dtype=np.int64).reshape(x.shape)
    to_str = dict(zip(ints, strings))
    out = [to_str.get(i, default_string) for i in x.reshape(-1).tolist()]
    return np.array(out, dtype=object).reshape(x.shape)


def _zip_map_compiled(node: NodeContext, **labels: Any) -> Callable[..., list[dict[Any, float]]]:
    """ZipMap's compiled form: float32 rows of a 2-D C-ordered input zipped in C
    (:func:`onnxflow.native._arrays.zip_rows`), the same maps; anything else as the NumPy
    form."""
    numpy_form = zip_map(node, **labels)
    keys = tuple(_zip_labels(node, **labels))

    def run_compiled(x: np.ndarray) -> list[dict[Any, float]]:
        if x.__class__ is np.ndarray and x.ndim == 2 and x.dtype == _F32 and x.flags.c_contiguous:
            return _ARRAYS.zip_rows(x, keys)
        return numpy_form(x)

    return run_compiled


@op(
    "ZipMap",
    1,
    domain=ML_DOMAIN,
    build=True,
    traits=Traits(fresh=True, native=native_form(_zip_map_compiled if _ARRAYS else None)),
)
def zip_map(
    node: NodeContext,
    *,
    classlabels_int64s: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
) -> Callable[[np.ndarray], list[dict[Any, float]]]:
    """Return the function giving one {label: score} map per row of its input (the labels
    checked once, when the session is made)."""
    labels = _zip_labels(
        node, classlabels_int64s=classlabels_int64s, classlabels_strings=classlabels_strings
    )

    def run(x: np.ndarray) -> list[dict[Any, float]]:
        rows = x if x.ndim == 2 else as_2d(x)
        if rows.shape[1] != len(labels):
            raise ValueError(f"input has {rows.shape[1]} columns for {len(labels)} class labels")
        values = (rows if rows.dtype == np.float32 else rows.astype(np.float32)).tolist()
        return list(map(dict, map(zip, repeat(labels, len(values)), values)))

    return run


def _zip_labels(
    node: NodeContext,
    classlabels_int64s: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
) -> list[Any]:
    """ZipMap's labels (exactly one of its two attributes), or the node's error."""
    try:
        _, given = _one(
            "ZipMap labels",
            classlabels_int64s=classlabels_int64s,
            classlabels_strings=classlabels_strings,
        )
    except ValueError as exc:
        raise node.error(str(exc)) from exc
    return list(given)


_CAST_TO = {"TO_FLOAT": np.float32, "TO_STRING": object, "TO_INT64": np.int64}


@op("CastMap", 1, domain=ML_DOMAIN)
def cast_map(
    x: dict[int, Any], *, cast_to: str = "TO_FLOAT", map_form: str = "DENSE", max_map: int = 1
) -> np.ndarray:
    """Return the map's values ordered by key as a [1, C] tensor (dense or sparse packing)."""
    if cast_to not in _CAST_TO:
        raise ValueError(f"cast_to must be one of {sorted(_CAST_TO)}, found {cast_to!r}")
    dtype = _CAST_TO[cast_to]
    items = sorted((int(k), v) for k, v in x.items())
    convert = _converter(dtype)
    if map_form == "DENSE":
        return np.array([[convert(v) for _, v in items]], dtype=dtype).reshape(1, len(items))
    if map_form != "SPARSE":
        raise ValueError(f"map_form must be DENSE or SPARSE, found {map_form!r}")
    out = np.full((1, max_map), "" if dtype is object else 0, dtype=dtype)
    for k, v in items:
        if not 0 <= k < max_map:
            raise ValueError(f"key {k} is outside [0, max_map={max_map}) in SPARSE form")
        out[0, k] = convert(v)
    return out


def _converter(dtype: Any) -> Callable[[Any], Any]:
    if dtype is object:  # numbers print with six decimals, as onnxruntime does
        return lambda v: v if isinstance(v, str) else f"{float(v):f}"
    if dtype is np.int64:
        return lambda v: int(float(v))
    return float


@op("DictVectorizer", 1, domain=ML_DOMAIN, build=True)
def dict_vectorizer(
    node: NodeContext,
    *,
    int64_vocabulary: list[int] | None = None,
    string_vocabulary: list[str] | None = None,
) -> Callable[[dict[Any, Any]], np.ndarray]:
    """Place each map value at its key's vocabulary index; absent keys give zero."""
    _, vocab = _one(
        "vocabulary", int64_vocabulary=int64_vocabulary, string_vocabulary=string_vocabulary
    )
    index = {k: i for i, k in enumerate(vocab)}
    tp = node.input_type(0)
    known = (
        np_dtype(tp.map_type.value_type.tensor_type.elem_type)
        if tp is not None and tp.WhichOneof("value") == "map_type"
        else None
    )

    def run(x: dict[Any, Any]) -> np.ndarray:
        dtype = known if known is not None else _value_dtype(list(x.values()))
        out = np.full((1, len(vocab)), "" if dtype.kind == "O" else 0, dtype=dtype)
        for k, v in x.items():
            i = index.get(k.item() if isinstance(k, np.generic) else k)
            if i is not None:
                out[0, i] = v
        return out

    return run


def _value_dtype(values: Sequence[Any]) -> np.dtype:
    if values and isinstance(values[0], str):
        return np.dtype(object)
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return np.dtype(np.int64)
    return arr.dtype if arr.dtype in (np.float32, np.float64) else np.dtype(np.float32)
