"""Handing a run's results to the caller: never memory it must not share.

A returned array never shares memory with a feed, a stored constant or another returned value.
Most results are fresh arrays made by this run's kernels (feeds reach kernels as read-only
views and constants are read-only), which are handed out as they are; the others are copied.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from onnxflow.compile.plan import Plan, out_slots


class Detacher:
    """Detaches the results of runs over plans whose constants are ``constants``."""

    def __init__(self, constants: Iterable[Any]) -> None:
        self._constant_roots = roots(constants)

    def __call__(
        self, values: list[Any], feeds: Iterable[Any], made: frozenset[int] = frozenset()
    ) -> list[Any]:
        """``values``, each copied that shares memory with one of ``feeds``, a constant or an
        earlier value; ``made``: the positions whose value a kernel promised new this run
        (:func:`made_outputs`), handed out as they are."""
        if all_fresh(values):  # made by this run's kernels, each once: nothing to copy
            return values
        if made and _fresh_or_made(values, made):  # ZipMap's new rows: nothing to look at
            return values
        if _fresh_or_maps(values):  # ZipMap's rows beside fresh arrays: new dicts, no lookup
            return [list(map(dict.copy, v)) if v.__class__ is list else v for v in values]
        protected = roots(feeds) | self._constant_roots
        returned: set[int] = set()
        return [_detach(v, protected, returned) for v in values]


class DeclaredShapes:
    """Says once per output (through the ``say`` given to :meth:`seen`) when a run's output
    contradicts the static sizes its graph output declares, in onnxruntime's words
    (onnxruntime's ``VerifyOutputSizes`` logs a warning on every run).

    A run's check (see ``InferenceSession._execute``) is a set lookup per output that declares
    a size: ``checks`` holds, per such output, the shapes already found to fit (up to
    :data:`KNOWN_SHAPES`); only a shape not among them calls :meth:`seen`. An output said
    once is not checked again."""

    def __init__(self, names: Sequence[str], declared: Sequence[Sequence[Any] | None]) -> None:
        sizes = [_static_sizes(shape) for shape in declared]
        #: The outputs still checked: (position, the shapes known to fit).
        self.checks: tuple[tuple[int, set], ...] = tuple(
            (i, {s} if None not in s else set()) for i, s in enumerate(sizes) if s is not None
        )
        self._declared = dict(enumerate(zip(names, sizes)))
        self._lock = threading.Lock()

    def seen(self, values: Sequence[Any], say: Callable[[str], None]) -> None:
        """Check the shapes of ``values`` not known to fit: remember those that fit, and say,
        once per output, that one contradicts its declared sizes (the session passes ``say``
        here, so that this object holds no reference to it)."""
        for i, known in self.checks:
            shape = getattr(values[i], "shape", None)
            if shape in known:
                continue
            name, sizes = self._declared[i]
            if shape is None or _fits(shape, sizes):
                if len(known) < KNOWN_SHAPES:
                    known.add(shape)
            else:
                self._contradicted(i, name, sizes, shape, say)

    def _contradicted(
        self, index: int, name: str, sizes: tuple, shape: tuple, say: Callable[[str], None]
    ) -> None:
        with self._lock:
            if all(i != index for i, _ in self.checks):
                return  # another thread said it
            self.checks = tuple(c for c in self.checks if c[0] != index)
        say(
            f"Expected shape from model of {_braces(sizes)} does not match actual shape of "
            f"{_braces(shape)} for output {name} (said once per session and output)"
        )


#: How many fitting shapes an output with unknown dimensions remembers; past them, a new
#: shape is checked on every run it comes back.
KNOWN_SHAPES = 64


def _static_sizes(shape: Sequence[Any] | None) -> tuple[int | None, ...] | None:
    """A declared shape's sizes, None for each unknown one (a dim_param, none, or a negative
    dim_value); None when it fixes no size."""
    if shape is None:
        return None
    sizes = tuple(
        d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else None for d in shape
    )  # a negative dim_value (exporters write -1) fixes nothing, as in onnxruntime
    return sizes if any(d is not None for d in sizes) or not sizes else None


def _fits(shape: tuple, sizes: tuple) -> bool:
    """Whether ``shape`` has the rank of ``sizes`` and each size they fix."""
    return len(shape) == len(sizes) and all(d is None or d == n for d, n in zip(sizes, shape))


def _braces(shape: Sequence[int | None]) -> str:
    """A shape as onnxruntime prints one: ``{2,3}``, -1 for an unknown size."""
    return "{" + ",".join(str(-1 if d is None else d) for d in shape) + "}"


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def roots(values: Iterable[Any]) -> set[int]:
    """Ids of the arrays owning the memory of every array in ``values`` (nested lists too)."""
    ids: set[int] = set()
    for v in values:
        if isinstance(v, np.ndarray):
            ids.add(id(_root(v)))
        elif isinstance(v, (list, tuple)):
            ids |= roots(v)
        elif isinstance(v, dict):
            ids |= roots(v.values())
    return ids


def all_fresh(values: list[Any]) -> bool:
    """Whether every value is an array owning writable memory, and no two are the same array.

    Such an array was made by a kernel of this run: feeds reach kernels as read-only views and
    constants are read-only. Returned once, it may be handed out as it is.
    """
    for v in values:
        if v.__class__ is not np.ndarray or v.base is not None or not v.flags.writeable:
            return False
    if len(values) < 3:  # no set for the usual one or two outputs
        return len(values) < 2 or values[0] is not values[1]
    return len({id(v) for v in values}) == len(values)


def _detach(value: Any, protected: set[int], returned: set[int]) -> Any:
    """Copy an output whose memory a caller must not share.

    That is memory of a feed or a stored constant (``protected``), read-only memory (constants
    of subgraphs and kernels, which later runs reuse; views of feeds) and memory already
    returned by this run.
    """
    if isinstance(value, np.ndarray):
        root = _root(value)
        if (
            id(root) in protected
            or id(root) in returned
            or not value.flags.writeable
            or not root.flags.writeable
        ):
            value = value.copy()
            root = value
        returned.add(id(root))
        return value
    if isinstance(value, list):
        if _scalar_maps(value):  # ZipMap's rows: new dicts, nothing in them to detach
            return list(map(dict.copy, value))
        return [_detach(v, protected, returned) for v in value]
    if isinstance(value, dict):
        return {k: _detach(v, protected, returned) for k, v in value.items()}
    return value


#: Values with no memory to detach: immutable Python scalars.
_SCALARS = frozenset({float, int, str, bool})


def _scalar_maps(value: list[Any]) -> bool:
    """Whether ``value`` is a non-empty list of dicts whose values are all Python scalars
    (told by C-level passes over the values' types, not one call per value)."""
    if not value or set(map(type, value)) != {dict}:
        return False
    return set(map(type, chain.from_iterable(map(dict.values, value)))) <= _SCALARS


def made_outputs(plan: Plan) -> frozenset[int]:
    """The positions of ``plan``'s outputs that a step whose kernel promises a new result
    (:attr:`Traits.fresh <onnxflow.traits.Traits.fresh>`) writes, each the only output of
    its slot: a run's value there is new, referred to by nothing else."""
    fresh = {
        slot
        for (_, _, out, _), traits in zip(plan.steps, plan.traits)
        if traits.fresh
        for slot in out_slots(out)
    }
    slots = plan.output_slots
    return frozenset(i for i, s in enumerate(slots) if s in fresh and slots.count(s) == 1)


def _fresh_or_made(values: list[Any], made: frozenset[int]) -> bool:
    """Whether each value is a fresh array (see :func:`all_fresh`) or, not an array, at a
    position in ``made``, and no two are the same object (arrays are checked whatever the
    kernel promised: a step computing in place returns its input's array)."""
    for i, v in enumerate(values):
        if v.__class__ is np.ndarray:
            if v.base is not None or not v.flags.writeable:
                return False
        elif i not in made:
            return False
    return len(values) < 2 or len({id(v) for v in values}) == len(values)


def _fresh_or_maps(values: list[Any]) -> bool:
    """Whether each value is a fresh array (see :func:`all_fresh`) or a list of maps of
    Python scalars, and at least one is such a list."""
    arrays = [v for v in values if v.__class__ is not list]
    if len(arrays) == len(values) or not all_fresh(arrays):
        return False
    return all(_scalar_maps(v) for v in values if v.__class__ is list)
