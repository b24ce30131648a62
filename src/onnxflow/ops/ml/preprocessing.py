"""ai.onnx.ml feature preprocessing.

ArrayFeatureExtractor-1, Binarizer-1, FeatureVectorizer-1, Imputer-1, Normalizer-1,
OneHotEncoder-1, Scaler-1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops.ml.common import ML_DOMAIN, as_2d
from onnxflow.ops.registry import op


@op("ArrayFeatureExtractor", 1, domain=ML_DOMAIN)
def array_feature_extractor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return the elements of ``x`` at indices ``y`` along the last axis.

    A negative index counts from the end, as in Python (skl2onnx's RadiusNeighborsRegressor
    pads its neighbour lists with -1); an index outside ``[-width, width)`` is an error.
    """
    indices = np.asarray(y, dtype=np.int64).reshape(-1)
    width = x.shape[-1] if x.ndim else 0
    if indices.size and (indices.min() < -width or indices.max() >= width):
        bad = indices[(indices < -width) | (indices >= width)]
        raise ValueError(
            f"indices must be in [{-width}, {width}) for a last axis of size {width}, "
            f"found {bad[0]} (indices {indices.min()}..{indices.max()})"
        )
    if x.ndim == 1:
        return x[indices].reshape(1, -1)
    return np.take(x, indices, axis=-1)


@op("Binarizer", 1, domain=ML_DOMAIN)
def binarizer(x: np.ndarray, *, threshold: float = 0.0) -> np.ndarray:
    """Return 1 where x > threshold and 0 elsewhere, in x's dtype."""
    return (x > threshold).astype(x.dtype)


@op("FeatureVectorizer", 1, domain=ML_DOMAIN)
def feature_vectorizer(*xs: np.ndarray, inputdimensions: list[int] | None = None) -> np.ndarray:
    """Concatenate the inputs' columns (each cut or zero-padded to its inputdimensions)."""
    if not xs:
        raise ValueError("FeatureVectorizer needs at least one input")
    dims = list(inputdimensions or [])
    if dims and len(dims) != len(xs):
        raise ValueError(f"inputdimensions has {len(dims)} entries for {len(xs)} inputs")
    mats = [as_2d(x).astype(np.float32) for x in xs]
    rows = {m.shape[0] for m in mats}
    if len(rows) > 1:
        raise ValueError(f"inputs have different batch sizes {sorted(rows)}")
    parts = []
    for i, m in enumerate(mats):
        width = dims[i] if dims else m.shape[1]
        part = np.zeros((m.shape[0], width), np.float32)
        keep = min(width, m.shape[1])
        part[:, :keep] = m[:, :keep]
        parts.append(part)
    return np.concatenate(parts, axis=1)


@op("Imputer", 1, domain=ML_DOMAIN)
def imputer(
    x: np.ndarray,
    *,
    imputed_value_floats: list[float] | None = None,
    imputed_value_int64s: list[int] | None = None,
    replaced_value_float: float = 0.0,
    replaced_value_int64: int = 0,
) -> np.ndarray:
    """Replace the elements equal to the replaced value by the imputed value of their feature."""
    if x.dtype.kind == "f":
        imputed, replaced = imputed_value_floats, replaced_value_float
    else:
        imputed, replaced = imputed_value_int64s, replaced_value_int64
    if not imputed:
        kind = "imputed_value_floats" if x.dtype.kind == "f" else "imputed_value_int64s"
        raise ValueError(f"Imputer on a {x.dtype} input needs {kind}")
    values = np.asarray(imputed).astype(x.dtype)
    width = x.shape[-1] if x.ndim else 1
    if values.size not in (1, width):
        raise ValueError(f"imputed values have {values.size} entries, expected 1 or {width}")
    hit = np.isnan(x) if np.isnan(replaced) else x == replaced
    return np.where(hit, values, x).astype(x.dtype, copy=False)


@op("Normalizer", 1, domain=ML_DOMAIN)
def normalizer(x: np.ndarray, *, norm: str = "MAX") -> np.ndarray:
    """Normalize each row by its max, L1 or L2 norm (rows with a zero divisor stay as they are)."""
    m = as_2d(x).astype(np.float64)
    if norm == "MAX":
        divisor = m.max(axis=1, keepdims=True)
    elif norm == "L1":
        divisor = np.abs(m).sum(axis=1, keepdims=True)
    elif norm == "L2":
        divisor = np.sqrt((m * m).sum(axis=1, keepdims=True))
    else:
        raise ValueError(f"norm must be MAX, L1 or L2, found {norm!r}")
    out = np.divide(m, divisor, out=m.copy(), where=divisor != 0)
    return out.astype(np.float32).reshape(x.shape)


@op("OneHotEncoder", 1, domain=ML_DOMAIN)
def one_hot_encoder(
    x: np.ndarray,
    *,
    cats_int64s: list[int] | None = None,
    cats_strings: list[str] | None = None,
    zeros: int = 1,
) -> np.ndarray:
    """Return x with a trailing one-hot axis over the categories (float32)."""
    if x.dtype == object:
        if not cats_strings:
            raise ValueError("OneHotEncoder on a string input needs cats_strings")
        cats: list = list(cats_strings)
        flat = x.reshape(-1).tolist()
    else:
        if not cats_int64s:
            raise ValueError(f"OneHotEncoder on a {x.dtype} input needs cats_int64s")
        cats = list(cats_int64s)
        flat = x.reshape(-1).astype(np.int64).tolist()
    table = {c: i for i, c in reversed(list(enumerate(cats)))}
    pos = np.array([table.get(v, -1) for v in flat], dtype=np.int64)
    if not zeros and (pos < 0).any():
        raise ValueError(f"value {flat[int(np.argmax(pos < 0))]!r} is not a category (zeros=0)")
    out = np.zeros((pos.size, len(cats)), np.float32)
    known = pos >= 0
    out[np.nonzero(known)[0], pos[known]] = 1.0
    return out.reshape((*x.shape, len(cats)))


@op("Scaler", 1, domain=ML_DOMAIN, build=True)
def scaler(
    node: NodeContext, *, offset: list[float] | None = None, scale: list[float] | None = None
) -> Callable[[np.ndarray], np.ndarray]:
    """Return the function giving (x - offset) * scale as float32, offset and scale per
    feature or broadcast (made once, when the session is made)."""
    off = np.asarray(offset if offset else [0.0], np.float32)
    sc = np.asarray(scale if scale else [1.0], np.float32)
    if 1 != off.size != sc.size != 1:
        raise node.error(f"offset has {off.size} entries and scale {sc.size}: 1 or one a feature")
    features = max(off.size, sc.size)  # the input's width these fix (1: any)

    def run(x: np.ndarray) -> np.ndarray:
        width = x.shape[-1] if x.ndim else 1
        if features not in (1, width):
            name, v = ("offset", off) if off.size == features else ("scale", sc)
            raise ValueError(f"{name} has {v.size} entries, expected 1 or {width}")
        if x.dtype == np.float32:  # the same two float32 steps, without a copy of x first
            y = np.subtract(x, off)
            return np.multiply(y, sc, out=y)
        return ((x.astype(np.float32) - off) * sc).astype(np.float32, copy=False)

    return run
