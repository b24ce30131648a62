"""The feeds of a command's run: read from ``--input`` files or generated from the model's
declared types (``--dim``, ``--shape``, ``--seed``), and one-line summaries of values."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from onnxflow.errors import OnnxflowError
from onnxflow.ir.dims import dimension_variable
from onnxflow.ir.load import read_external
from onnxflow.session import InferenceSession
from onnxflow.values import NodeArg, np_dtype


def _pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise OnnxflowError(f"{what} {item!r} is not of the form NAME=VALUE")
        out[name] = value
    return out


def _read_input(name: str, path: str) -> np.ndarray:
    file = Path(path)
    try:
        if file.suffix == ".pb":
            tensor = onnx.TensorProto()
            tensor.ParseFromString(file.read_bytes())
            if tensor.data_location == onnx.TensorProto.EXTERNAL:  # beside the .pb, confined
                read_external(tensor, file.parent)
            return numpy_helper.to_array(tensor)
        return np.load(file, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise OnnxflowError(f"cannot read input {name!r} from {path!r}: {exc}") from exc


def generate_input(
    arg: NodeArg,
    dims: dict[str, int],
    rng: np.random.Generator,
    shape: Sequence[int] | None = None,
) -> np.ndarray:
    """Return random values of an input's declared type and ``shape`` (by default its declared
    shape: dimension variables from ``dims``, other unknown dimensions, such as ``"?"``, 1)."""
    if arg.type_proto is None or arg.type_proto.WhichOneof("value") != "tensor_type":
        raise OnnxflowError(f"cannot generate input {arg.name!r} of type {arg.type}: pass --input")
    dtype = np_dtype(arg.type_proto.tensor_type.elem_type)
    if shape is None:
        shape = [
            d if isinstance(d, int) and d > 0 else dims.get(dimension_variable(d) or "", 1)
            for d in (arg.shape or [])
        ]
    if dtype == np.dtype(object):
        return rng.choice(np.array(["a", "b", "c"], dtype=object), size=shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def summarize(value: Any) -> str:
    """One line describing a value: dtype, shape and a few statistics."""
    if value is None:
        return "empty optional"
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (f", first: {summarize(value[0])}" if value else "")
    if isinstance(value, dict):
        return f"map of {len(value)} entries"
    arr = np.asarray(value)
    head = f"{arr.dtype} {list(arr.shape)}"
    if arr.size == 0:
        return f"{head} (empty)"
    if arr.dtype.kind in "fiub" or arr.dtype.name in ("bfloat16",) or arr.dtype.kind == "V":
        try:
            f = arr.astype(np.float64)
            return (
                f"{head} min={np.nanmin(f):.6g} max={np.nanmax(f):.6g} mean={np.nanmean(f):.6g}"
                f" first={np.array2string(arr.reshape(-1)[:4], separator=', ')}"
            )
        except (TypeError, ValueError):
            pass
    return f"{head} first={arr.reshape(-1)[:4].tolist()}"


def feeds_for(sess: InferenceSession, args: argparse.Namespace) -> dict[str, Any]:
    """Feeds from ``--input`` files; the other inputs generated from their declared types, each
    shown with the dimension values it was given and a summary of its values."""
    given = _pairs(args.input, "--input")
    known = {a.name for a in sess.get_inputs()} | {
        a.name for a in sess.get_overridable_initializers()
    }
    for name in given:
        if name not in known:
            raise OnnxflowError(f"--input {name}: the model has no input {name!r}")
    feeds = {name: _read_input(name, path) for name, path in given.items()}
    missing = [arg for arg in sess.get_inputs() if arg.name not in feeds]
    dims = _dims(args.dim, sess.get_inputs())
    shapes = _shapes(getattr(args, "shape", []), missing)
    rng = np.random.default_rng(args.seed)
    for arg in missing:
        feeds[arg.name] = generate_input(arg, dims, rng, shapes.get(arg.name))
        note = "\n  dimensions: from --shape" if arg.name in shapes else _dims_note(arg, dims)
        print(
            f"generated input {arg.name}: {arg.type} {list(feeds[arg.name].shape)}, random "
            f"(seed {args.seed}; pass --input {arg.name}=FILE to use your own)"
            f"{note}\n  values: {summarize(feeds[arg.name])}"
        )
    return feeds


def _dims(items: Iterable[str], inputs: Sequence[NodeArg]) -> dict[str, int]:
    """The ``--dim`` values, each checked to name a dimension variable of the inputs and to be a
    size."""
    variables = sorted({v for a in inputs for d in a.shape or [] if (v := dimension_variable(d))})
    dims = {}
    for name, value in _pairs(items, "--dim").items():
        if name not in variables:
            have = ", ".join(variables) if variables else "none"
            raise OnnxflowError(
                f"--dim {name}: the model's inputs have no dimension variable {name!r} "
                f"(they have: {have})"
            )
        if not value.isdigit():
            raise OnnxflowError(f"--dim {name}={value}: a dimension is a whole number >= 0")
        dims[name] = int(value)
    return dims


def _shapes(items: Iterable[str], missing: Sequence[NodeArg]) -> dict[str, list[int]]:
    """The ``--shape`` values, each checked against the declared shape of an input to generate:
    same rank, the same size where the model fixes one."""
    declared = {a.name: a.shape for a in missing}
    shapes = {}
    for name, text in _pairs(items, "--shape").items():
        if name not in declared:
            generated = ", ".join(declared) or "none"
            raise OnnxflowError(
                f"--shape {name}: no input {name!r} is generated (inputs to generate: {generated})"
            )
        shape = _sizes(f"--shape {name}={text}", text)
        if not _fits(shape, declared[name]):
            raise OnnxflowError(f"--shape {name}={text}: the model declares {declared[name]}")
        shapes[name] = shape
    return shapes


def _sizes(what: str, text: str) -> list[int]:
    """Comma-separated sizes, each a whole number."""
    parts = text.split(",") if text else []
    if not all(p.strip().isdigit() for p in parts):
        raise OnnxflowError(f"{what}: sizes are whole numbers, comma-separated")
    return [int(p) for p in parts]


def _fits(shape: list[int], declared: list[Any] | None) -> bool:
    """Whether ``shape`` has the declared rank and the sizes the declaration fixes."""
    if declared is None:
        return True
    fixed = all(s == d for s, d in zip(shape, declared) if isinstance(d, int) and d > 0)
    return len(shape) == len(declared) and fixed


def _dims_note(arg: NodeArg, dims: dict[str, int]) -> str:
    """What the generated shape took for each unknown dimension: ``--dim`` values, and the 1s
    given by default."""
    notes = []
    for d in arg.shape or []:
        if isinstance(d, int) and d > 0:
            continue
        name = dimension_variable(d)
        if name in dims:
            notes.append(f"{name}={dims[name]} (--dim)")
        elif name is not None:
            notes.append(f"{name}=1 (default; --dim {name}=N to change)")
        else:
            named = isinstance(d, str) and d
            notes.append(f"{d!r}=1 (not a dimension variable)" if named else "unnamed=1")
    return f"\n  dimensions: {'; '.join(dict.fromkeys(notes))}" if notes else ""
