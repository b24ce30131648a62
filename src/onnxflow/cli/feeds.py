"""The feeds of a command's run: read from ``--input`` files or generated from the model's
declared types (``--dim``, ``--shape``, ``--seed``, ``--value``, ``--range``, and the ranges
the graph implies), one-line summaries of values, and the note an error gains when the run's
inputs were generated."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from onnxflow.cli.index_ranges import gather_ranges
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
    *,
    bounds: tuple[float, float] | None = None,
) -> np.ndarray:
    """Return random values of an input's declared type and ``shape`` (by default its declared
    shape: dimension variables from ``dims``, other unknown dimensions, such as ``"?"``, 1).
    Integers are drawn from ``bounds`` (both ends included; by default 0 to 9), floats
    uniformly between them (by default from a standard normal)."""
    dtype = _tensor_dtype(arg)
    shape = _declared_shape(arg, dims) if shape is None else shape
    if dtype == np.dtype(object):
        return rng.choice(np.array(["a", "b", "c"], dtype=object), size=shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        low, high = bounds or (0, 9)
        return rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dtype)
    if bounds is not None:
        return rng.uniform(bounds[0], bounds[1], size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _tensor_dtype(arg: NodeArg) -> np.dtype:
    """The element type of a tensor input; an error for other inputs."""
    if arg.type_proto is None or arg.type_proto.WhichOneof("value") != "tensor_type":
        raise OnnxflowError(f"cannot generate input {arg.name!r} of type {arg.type}: pass --input")
    return np_dtype(arg.type_proto.tensor_type.elem_type)


def _declared_shape(arg: NodeArg, dims: dict[str, int]) -> list[int]:
    """The input's declared shape, each unknown dimension from ``dims`` or 1."""
    return [
        d if isinstance(d, int) and d > 0 else dims.get(dimension_variable(d) or "", 1)
        for d in (arg.shape or [])
    ]


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


@dataclass(frozen=True)
class _Choice:
    """How to generate one input: filled with ``fill``, else drawn from ``bounds`` (else the
    default draw), and what the user is told of it."""

    fill: Any = None
    bounds: tuple[float, float] | None = None
    how: str = ""


def feeds_for(sess: InferenceSession, args: argparse.Namespace) -> dict[str, Any]:
    """Feeds from ``--input`` files; the other inputs generated from their declared types
    (``--value``, ``--range``, and the ranges the graph implies: see :func:`_choices`), each
    shown with the dimension values it was given and a summary of its values. Records the
    names generated in ``args.generated_inputs``, for :func:`generated_note`."""
    given = _pairs(args.input, "--input")
    _check_inputs(given, "--input", sess)
    feeds = {name: _read_input(name, path) for name, path in given.items()}
    missing = [arg for arg in sess.get_inputs() if arg.name not in feeds]
    dims = _dims(args.dim, sess.get_inputs())
    shapes = _shapes(getattr(args, "shape", []), missing)
    choices = _choices(args, sess, missing, dims)
    rng = np.random.default_rng(args.seed)
    for arg in missing:
        choice = choices.get(arg.name, _Choice())
        shape = shapes.get(arg.name)
        if choice.fill is not None:
            shape = _declared_shape(arg, dims) if shape is None else shape
            feeds[arg.name] = np.full(shape, choice.fill, _tensor_dtype(arg))
        else:
            feeds[arg.name] = generate_input(arg, dims, rng, shape, bounds=choice.bounds)
        how = (
            choice.how or f"random (seed {args.seed}; pass --input {arg.name}=FILE to use your own)"
        )
        note = "\n  dimensions: from --shape" if arg.name in shapes else _dims_note(arg, dims)
        print(
            f"generated input {arg.name}: {arg.type} {list(feeds[arg.name].shape)}, {how}"
            f"{note}\n  values: {summarize(feeds[arg.name])}"
        )
    args.generated_inputs = tuple(a.name for a in missing)  # for generated_note
    return feeds


def _check_inputs(given: dict[str, str], flag: str, sess: InferenceSession) -> None:
    """Raise for a name of ``given`` that is no input of the model, naming its inputs."""
    inputs = [a.name for a in sess.get_inputs()]
    overridable = [a.name for a in sess.get_overridable_initializers()]
    for name in given:
        if name not in inputs and name not in overridable:
            also = f" and overridable initializers {overridable}" if overridable else ""
            raise OnnxflowError(
                f"{flag} {name}: the model has no input {name!r}; its inputs are {inputs}{also}"
            )


def _choices(
    args: argparse.Namespace, sess: InferenceSession, missing: Sequence[NodeArg], dims: dict
) -> dict[str, _Choice]:
    """How each input to generate is made: ``--value`` fills it, ``--range`` bounds it; else an
    integer input that indexes a Gather draws from the gathered axis's range
    (:mod:`onnxflow.cli.index_ranges`), and an integer scalar named as a dimension variable
    (``total_sequence_length``) takes that dimension's value."""
    values = _pairs(getattr(args, "value", []), "--value")
    ranges = _pairs(getattr(args, "range", []), "--range")
    by_name = {a.name: a for a in missing}
    for flag, items in (("--value", values), ("--range", ranges)):
        _check_generated(flag, items, by_name, sess)
    both = sorted(set(values) & set(ranges))
    if both:
        raise OnnxflowError(f"--value {both[0]} and --range {both[0]}: give one or the other")
    choices = {n: _value_choice(by_name[n], text) for n, text in values.items()}
    choices |= {n: _range_choice(by_name[n], text, args.seed) for n, text in ranges.items()}
    integers = [a for a in missing if a.name not in choices and _is_integer(a)]
    choices |= _implied_choices(integers, sess, dims, args.seed)
    return choices


def _check_generated(
    flag: str, items: dict[str, str], by_name: dict[str, NodeArg], sess: InferenceSession
) -> None:
    """Raise for a name of ``items`` that is no input to generate."""
    _check_inputs(items, flag, sess)
    for name in items:
        if name not in by_name:
            raise OnnxflowError(f"{flag} {name}: input {name!r} is given by --input")


def _is_integer(arg: NodeArg) -> bool:
    tp = arg.type_proto
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return False
    return np.issubdtype(np_dtype(tp.tensor_type.elem_type), np.integer)


def _value_choice(arg: NodeArg, text: str) -> _Choice:
    """``--value NAME=SCALAR``: the input filled with that value."""
    value = _scalar(f"--value {arg.name}={text}", text, _tensor_dtype(arg))
    return _Choice(fill=value, how=f"filled with {text} (--value)")


def _range_choice(arg: NodeArg, text: str, seed: int) -> _Choice:
    """``--range NAME=LO,HI``: the input drawn from LO to HI."""
    what = f"--range {arg.name}={text}"
    dtype = _tensor_dtype(arg)
    if dtype == np.bool_ or dtype == np.dtype(object):
        raise OnnxflowError(f"{what}: input {arg.name!r} is {arg.type}, not numbers")
    low_text, sep, high_text = text.partition(",")
    if not sep:
        raise OnnxflowError(f"{what}: a range is LO,HI")
    low, high = (_scalar(what, t.strip(), dtype) for t in (low_text, high_text))
    if low > high:
        raise OnnxflowError(f"{what}: LO is above HI")
    ends = "both ends included" if np.issubdtype(dtype, np.integer) else "uniform"
    return _Choice(
        bounds=(low, high), how=f"random in [{low}, {high}] ({ends}; --range; seed {seed})"
    )


def _implied_choices(
    integers: Sequence[NodeArg], sess: InferenceSession, dims: dict[str, int], seed: int
) -> dict[str, _Choice]:
    """The choices the graph implies for integer inputs: Gather ranges, dimension sizes."""
    choices = {}
    for name, found in gather_ranges(sess.model, [a.name for a in integers]).items():
        choices[name] = _Choice(
            bounds=(0, found.size - 1),
            how=f"random in [0, {found.size - 1}] (seed {seed}): {found.why}; "
            f"--range {name}=LO,HI or --value {name}=N to change",
        )
    variables = {
        _plain(v): v
        for a in sess.get_inputs()
        for d in a.shape or []
        if (v := dimension_variable(d))
    }
    for arg in integers:
        variable = variables.get(_plain(arg.name))
        if arg.name not in choices and variable and len(arg.shape or []) <= 1:
            size = dims.get(variable, 1)
            choices[arg.name] = _Choice(
                fill=size,
                how=f"filled with {size}: the size of dimension {variable} of the inputs "
                f"(--dim {variable}=N to change it, --value {arg.name}=N to set this input)",
            )
    return choices


def _plain(name: str) -> str:
    """A name without case or separators, to match ``total_sequence_length`` with
    ``TotalSequenceLength``."""
    return "".join(c for c in name.lower() if c.isalnum())


def _scalar(what: str, text: str, dtype: np.dtype) -> Any:
    """``text`` as one value of ``dtype``; an error naming ``what`` when it is not one."""
    if dtype == np.dtype(object):
        return text
    if dtype == np.bool_:
        words = {"true": True, "1": True, "false": False, "0": False}
        if text.lower() not in words:
            raise OnnxflowError(f"{what}: a bool is true, false, 1 or 0")
        return words[text.lower()]
    try:
        number = float(text)
    except ValueError:
        raise OnnxflowError(f"{what}: {text!r} is not a number") from None
    if not np.issubdtype(dtype, np.integer):
        return number
    info = np.iinfo(dtype)
    if not number.is_integer() or not info.min <= number <= info.max:
        raise OnnxflowError(
            f"{what}: {text!r} is not a whole number that {dtype} holds ({info.min} to {info.max})"
        )
    return int(number)


def generated_note(args: argparse.Namespace) -> str:
    """What an error of a command whose run had generated inputs adds (empty when none was):
    that they were generated, and how to give real ones."""
    generated = getattr(args, "generated_inputs", ())
    if not generated:
        return ""
    return (
        f"\nnote: the run's inputs {', '.join(generated)} were generated (random values of "
        "their declared types), which the model may not accept: give real ones with "
        "--input NAME=FILE (.npy or .pb), a fixed value with --value NAME=SCALAR, or a range "
        "with --range NAME=LO,HI"
    )


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
                f"(they have: {have}); to give the sizes of one input, among them those "
                "--dim cannot name ('?', unnamed), use --shape NAME=D0,D1,..."
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
