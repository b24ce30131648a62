"""Handing a run's results to the caller: never memory it must not share.

A returned array never shares memory with a feed, a stored constant or another returned value.
Most results are fresh arrays made by this run's kernels (feeds reach kernels as read-only
views and constants are read-only), which are handed out as they are; the others are copied.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


class Detacher:
    """Detaches the results of runs over plans whose constants are ``constants``."""

    def __init__(self, constants: Iterable[Any]) -> None:
        self._constant_roots = roots(constants)

    def __call__(self, values: list[Any], feeds: Iterable[Any]) -> list[Any]:
        """``values``, each copied that shares memory with one of ``feeds``, a constant or an
        earlier value."""
        if all_fresh(values):  # made by this run's kernels, each once: nothing to copy
            return values
        protected = roots(feeds) | self._constant_roots
        returned: set[int] = set()
        return [_detach(v, protected, returned) for v in values]


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
        return [_detach(v, protected, returned) for v in value]
    if isinstance(value, dict):
        return {k: _detach(v, protected, returned) for k, v in value.items()}
    return value
