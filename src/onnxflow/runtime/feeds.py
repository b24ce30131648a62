"""Binding a run's feeds to the plan's arguments.

Each graph input gets one :class:`InputCheck`, made once per session from its declaration: the
dtype, rank, fixed dimensions and dimension variables an array must have. Its ``fast`` test
passes a well-formed array with a few comparisons; when it fails, or the feed is not a plain
array, the general path converts what it may (Python scalars and lists, strings, optionals,
sequences, maps) and the same check says what is wrong.

A dimension variable is one value across the model (IR: "the same name denotes the same
value"), so the feeds of one run must agree on it. Only a C identifier names a variable: a
``dim_param`` such as ``"?"`` or ``"batch size"`` relates to nothing and matches any size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnxflow.errors import InputError
from onnxflow.ir.dims import dimension_variable
from onnxflow.values import NodeArg, np_dtype, type_shape, type_str, value_type_str

#: Where a run's feeds bound each dimension variable: variable -> (input name, size).
Dims = dict[str, tuple[str, int]]

_MISSING = object()


class InputCheck:
    """What an array fed for one tensor input must be, and the two ways to test it."""

    def __init__(self, arg: NodeArg) -> None:
        self.arg = arg
        tp = arg.type_proto
        is_tensor = tp is not None and tp.WhichOneof("value") == "tensor_type"
        elem = tp.tensor_type.elem_type if is_tensor else 0  # type: ignore[union-attr]
        #: The dtype an array must have (None: not a tensor, or any element type).
        self.dtype = np_dtype(elem) if elem else None
        shape = arg.shape
        self.rank = None if shape is None else len(shape)
        self.fixed = [(a, d) for a, d in enumerate(shape or ()) if isinstance(d, int) and d > 0]
        self.variables = [
            (a, v) for a, d in enumerate(shape or ()) if (v := dimension_variable(d)) is not None
        ]
        #: ``fast(array, dims) -> bool``, or None when only the general path can bind the input
        #: (strings too: their elements must be checked to be str).
        self.fast = self._fast() if self.dtype not in (None, _TEXT) else None

    def _fast(self) -> Callable[[np.ndarray, Dims], bool]:
        """The fast test, specialised to what the declaration fixes: an array passes when its
        dtype is the very dtype object expected (NumPy's builtin dtypes are singletons) and its
        shape passes :meth:`check_shape`, whose bindings it records the same way."""
        dtype, rank, fixed = self.dtype, self.rank, self.fixed
        if rank is None:
            return lambda v, dims: v.dtype is dtype
        if not self.variables and len(fixed) == rank:
            shape = tuple(d for _, d in fixed)
            return lambda v, dims: v.dtype is dtype and v.shape == shape
        if not self.variables:
            return lambda v, dims: (
                v.dtype is dtype and v.ndim == rank and all(v.shape[a] == d for a, d in fixed)
            )
        return self._fast_with_variables

    def _fast_with_variables(self, v: np.ndarray, dims: Dims) -> bool:
        shape = v.shape
        if v.dtype is not self.dtype or len(shape) != self.rank:
            return False
        for axis, d in self.fixed:
            if shape[axis] != d:
                return False
        name = self.arg.name
        for axis, variable in self.variables:  # one at a time: a variable may repeat in an input
            seen = dims.get(variable)
            if seen is not None and seen[1] != shape[axis]:
                return False
            dims[variable] = (name, shape[axis])
        return True

    def check_shape(self, shape: tuple[int, ...], dims: Dims) -> None:
        """Raise an InputError naming the first way ``shape`` breaks the declaration; record
        the sizes of its dimension variables in ``dims``."""
        arg = self.arg
        if len(shape) != self.rank:
            raise InputError(
                f"input {arg.name!r}: expected rank {self.rank} (shape {arg.shape}), found "
                f"rank {len(shape)} (shape {list(shape)})"
            )
        for axis, want in self.fixed:
            if shape[axis] != want:
                raise InputError(
                    f"input {arg.name!r}: dimension {axis} expected {want}, found {shape[axis]} "
                    f"(shape {list(shape)}, declared {arg.shape})"
                )
        for axis, variable in self.variables:
            got, seen = shape[axis], dims.get(variable)
            if seen is not None and seen[1] != got:
                raise InputError(
                    f"input {arg.name!r}: dimension {axis} is {variable!r}={got}, but input "
                    f"{seen[0]!r} bound {variable!r}={seen[1]}"
                )
            dims[variable] = (arg.name, got)

    def check(self, value: Any, dims: Dims) -> Any:
        """The value to bind for ``value``, converted as the declaration allows, or an
        InputError saying why it does not fit."""
        arg = self.arg
        kind = arg.type_proto.WhichOneof("value") if arg.type_proto is not None else None
        if kind == "optional_type":
            if value is None:
                return None
            inner = arg.type_proto.optional_type.elem_type  # type: ignore[union-attr]
            element = NodeArg(arg.name, type_str(inner), type_shape(inner), inner)
            return InputCheck(element).check(value, dims)
        if kind == "sequence_type":
            return list(_expect(arg, value, (list, tuple), "a list"))
        if kind == "map_type":
            return _expect(arg, value, Mapping, "a dict")
        if kind != "tensor_type":
            return value
        value = self._as_array(value)
        if self.rank is not None:
            self.check_shape(value.shape, dims)
        return value

    def _as_array(self, value: Any) -> np.ndarray:
        """``value`` as an array of the declared dtype (a plain ndarray, not a subclass such as
        ``np.matrix`` whose kernels would keep its own rules)."""
        arg, expected = self.arg, self.dtype
        if not isinstance(value, np.ndarray):
            value = _to_array(arg, value, expected)
        elif value.__class__ is not np.ndarray:
            value = np.asarray(value)
        if expected == _TEXT and value.dtype.kind in "OSU":
            return _text(arg, value)
        if expected is None or value.dtype == expected:
            return value
        raise InputError(
            f"input {arg.name!r}: expected dtype {arg.type}, found {value_type_str(value)} "
            f"(numpy {value.dtype})"
        )


_TEXT = np.dtype(object)


def _text(arg: NodeArg, value: np.ndarray) -> np.ndarray:
    """A string feed as an object array of ``str``: ``bytes`` elements (and NumPy ``S``
    arrays) are decoded as UTF-8, as onnxruntime takes them; anything else is an InputError
    naming the element."""
    flat = value.reshape(-1).tolist()
    if value.dtype == _TEXT and all(s.__class__ is str for s in flat):
        return value
    for i, s in enumerate(flat):
        if isinstance(s, bytes):
            try:
                flat[i] = s.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"input {arg.name!r}: element {_index(value, i)} is bytes that are not "
                    f"UTF-8 ({exc.reason} at byte {exc.start}); string tensors hold UTF-8 text"
                ) from None
        elif not isinstance(s, str):
            raise InputError(
                f"input {arg.name!r}: expected {arg.type} elements to be str, found "
                f"{type(s).__name__} {s!r} at element {_index(value, i)}"
            )
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(value.shape)


def _index(value: np.ndarray, i: int) -> list[int]:
    return [int(k) for k in np.unravel_index(i, value.shape)] if value.ndim else []


class FeedBinder:
    """Turns a run's feeds into the plan's input arguments, in the order of ``inputs``.

    Feeds become read-only views, so kernels cannot write a caller's array. A graph input with
    an initializer (``defaults``) may be left out; an optional one left out binds None.
    """

    def __init__(
        self, inputs: Sequence[NodeArg], feedable: Sequence[NodeArg], defaults: Mapping[str, Any]
    ) -> None:
        self.checks = [InputCheck(a) for a in inputs]
        self.names = frozenset(a.name for a in inputs)
        self.feedable = [a.name for a in feedable]
        self.defaults = dict(defaults)
        pairs = [(c.arg.name, c.fast) for c in self.checks]
        #: (name, fast test) per input when every input has one; else nothing to try
        self._fast_pairs = pairs if all(f is not None for _, f in pairs) else []

    def bind(self, feeds: Mapping[str, Any]) -> list[Any]:
        """The arguments for ``feeds``, or an InputError naming the feed that is wrong."""
        if self._fast_pairs and feeds.__class__ is dict and len(feeds) == len(self._fast_pairs):
            args = self._bind_arrays(feeds)  # type: ignore[arg-type]
            if args is not None:
                return args
        if not feeds.keys() <= self.names:
            unknown = [n for n in feeds if n not in self.names]
            raise InputError(
                f"unknown input name(s) {unknown}; the model's inputs are {self.feedable}"
            )
        dims: Dims = {}
        return [self._bind_one(check, feeds, dims) for check in self.checks]

    def _bind_arrays(self, feeds: dict[str, Any]) -> list[Any] | None:
        """The common case in one pass: every input fed an array that its fast test passes.
        None when one is not (the general path then says what is wrong)."""
        dims: Dims = {}
        args = []
        for name, fast in self._fast_pairs:
            value = feeds.get(name)
            if value.__class__ is not np.ndarray or not fast(value, dims):
                return None
            args.append(read_only(value))
        return args

    def _bind_one(self, check: InputCheck, feeds: Mapping[str, Any], dims: Dims) -> Any:
        arg = check.arg
        value = feeds.get(arg.name, _MISSING)
        if value is not _MISSING:
            fast = check.fast
            if fast is not None and value.__class__ is np.ndarray and fast(value, dims):
                return read_only(value)
            return read_only(check.check(value, dims))
        if arg.name in self.defaults:
            return self.defaults[arg.name]
        if arg.type.startswith("optional("):
            return None
        raise InputError(
            f"input {arg.name!r} ({arg.type}, shape {arg.shape}) is required but was "
            f"not fed; fed: {sorted(feeds)}"
        )


def read_only(value: Any) -> Any:
    """A read-only view of a feed (nested in lists and dicts too): kernels cannot write it."""
    if isinstance(value, np.ndarray):
        view = value.view()
        view.setflags(write=False)  # 0.1 us less than setting flags.writeable
        return view
    if isinstance(value, list):
        return [read_only(v) for v in value]
    if isinstance(value, dict):
        return {k: read_only(v) for k, v in value.items()}
    return value


def _describe(value: Any) -> str:
    return value_type_str(value) if value is not None else "None"


def _expect(arg: NodeArg, value: Any, kinds: Any, as_what: str) -> Any:
    """``value`` when it is one of ``kinds``, else an InputError."""
    if not isinstance(value, kinds):
        raise InputError(
            f"input {arg.name!r}: expected {arg.type} as {as_what}, found {_describe(value)}"
        )
    return value


#: Python scalars and lists may be fed for a tensor input; their values must fit its dtype.
_CONVERTIBLE_KINDS = {"b": "b", "i": "iuf", "u": "iuf", "f": "f"}


def _to_array(arg: NodeArg, value: Any, expected: np.dtype | None) -> np.ndarray:
    """Make an array of a feed given as a Python scalar, list or tuple, refusing lossy casts."""
    if not isinstance(value, (list, tuple, int, float, bool, str, np.generic)):
        raise InputError(
            f"input {arg.name!r}: expected {arg.type} as a numpy array, found {_describe(value)}"
        )
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"input {arg.name!r}: cannot make an array of the given {type(value).__name__}: {exc}"
        ) from exc
    if expected is None or arr.dtype == expected:
        return arr
    if expected == np.dtype(object) and (arr.dtype.kind == "U" or arr.size == 0):
        return arr.astype(object)
    if arr.size == 0 and arr.dtype == np.float64:  # an empty list has no element type
        return arr.astype(expected)
    if expected.kind in _CONVERTIBLE_KINDS.get(arr.dtype.kind, ""):
        converted = arr.astype(expected)
        if np.array_equal(converted.astype(arr.dtype), arr) or expected.kind == "f":
            return converted
    raise InputError(
        f"input {arg.name!r}: expected dtype {arg.type}, found {type(value).__name__} of "
        f"numpy {arr.dtype} values that do not convert exactly"
    )
