"""Loop-carried values that grow: refused as soon as they are known not to fit.

A loop whose carried values grow every iteration (a sequence appended to, a tensor
concatenated to) would otherwise run until the process hits its memory limit, and the error
would name whichever kernel allocated last. :class:`Growth` looks at the carried values' sizes
now and then, never at their data (a sequence counts as its length times the mean size of its
first and last elements; one array appended again and again counts each time, as
concatenating the sequence would take it), and refuses, naming the loop, the value and the
bytes:

- when the loop's number of iterations is known (a trip count with no condition, a Scan): at
  the first check where the growth per iteration since the last check, times the iterations
  left, is more than the memory available;
- when it is not (a condition ends the loop, or only the caller's terminate does; a trip count
  with a condition is only an upper bound, which the condition may cut short): when the
  carried values take more than the memory left. They could not be held twice over, and
  nothing says the loop stops before an allocation fails; a loop that would have stopped in
  the remaining half is refused too, which is the price of naming the loop rather than a
  kernel.

The first check comes after iteration 1 for a loop with a known count over :data:`SHORT`,
after iteration :data:`FIRST_CHECK` for any other (a loop shorter than that is never looked
at: what it carries grew by at most that many of its own iterations' allocations, each of
which fit; and an inner loop of a few iterations costs nothing more). The next ones come with
gaps of 2, 4, 8, ... iterations while the values do not grow (at most :data:`MAX_INTERVAL`),
and after every iteration while they do. A run's :class:`Growth` is made at its first check.
The memory available (:func:`~onnxflow.resources.available_memory`, a few file reads) is read
only when the bytes in question pass :data:`WATCH_BYTES`, and again only once what the loop
took since the last reading could have used it up.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.errors import ResourceError
from onnxflow.resources import available_memory

#: The number of iterations of a loop that runs until its condition or terminate stops it.
FOREVER = sys.maxsize
#: The first check of a loop that may run few iterations comes after this many.
FIRST_CHECK = 8
#: Loops with a known count above this are checked after iteration 1 already.
SHORT = 64
#: The most iterations between two checks of values that do not grow.
MAX_INTERVAL = 1024
#: Bytes below which growth is never compared with the memory available.
WATCH_BYTES = 1 << 26


def size_of(value: Any) -> int:
    """The bytes a carried value takes, from sizes only: an array's, a sequence's length times
    the mean of its first and last elements' (0 for what holds no arrays)."""
    if value.__class__ is np.ndarray:
        return value.nbytes
    if value.__class__ is list and value:
        return len(value) * ((size_of(value[0]) + size_of(value[-1])) // 2)
    return 0


def first_check(stop: int, use_cond: bool) -> int:
    """The iteration after which a run of ``stop`` iterations first looks at its values."""
    return 1 if not use_cond and SHORT < stop < FOREVER else FIRST_CHECK


@dataclass(frozen=True)
class Watch:
    """What a loop's runs share to watch their carried values: the loop, the values' names
    and whether the runs end by a condition (then their count is not known)."""

    label: str
    names: tuple[str, ...]
    use_cond: bool

    def check(
        self, growth: Growth | None, i: int, stop: int, initial: Sequence[Any], now: Sequence[Any]
    ) -> tuple[Growth, int]:
        """Look at the values ``now`` carried out of iteration ``i - 1`` (the run's first look
        makes its Growth, from the ``initial`` values); return it and the next check's
        iteration."""
        if growth is None:
            known = not self.use_cond and stop != FOREVER
            growth = Growth(self.label, self.names, initial, stop, known)
        return growth, growth.check(i, now)


class Growth:
    """Watches one run of a loop's carried values; :meth:`check` refuses growth that cannot
    fit (see the module's docstring)."""

    __slots__ = ("_i", "_room", "_sizes", "_step", "known", "label", "names", "stop")

    def __init__(
        self, label: str, names: Sequence[str], states: Sequence[Any], stop: int, known: bool
    ) -> None:
        """``states``: the values carried into iteration 0; ``stop``: the iterations to run,
        exactly when ``known``, else an upper bound."""
        self.label, self.names, self.stop, self.known = label, names, stop, known
        self._i = 0
        self._sizes = [size_of(v) for v in states]
        self._step = 1
        #: (memory available when last read, the carried bytes then).
        self._room: tuple[int, int] | None = None

    def check(self, i: int, states: Sequence[Any]) -> int:
        """Look at the values carried out of iteration ``i - 1``; return the iteration of the
        next look."""
        sizes = [size_of(v) for v in states]
        total, before = sum(sizes), sum(self._sizes)
        if total > before:
            self._step = 1
            need = (total - before) * (self.stop - i) // (i - self._i) if self.known else total
            if need > WATCH_BYTES and need > self._left(total):
                self._room = None  # read again: memory may have been freed meanwhile
                available = self._left(total)
                if need > available:
                    raise self._refusal(i, sizes, need, total, available)
        else:
            self._step = min(2 * self._step, MAX_INTERVAL)
        self._i, self._sizes = i, sizes
        return i + self._step

    def _left(self, total: int) -> int:
        """The memory left now: the last reading less what the loop took since, read again
        when that estimate runs out."""
        if self._room is not None:
            available, then = self._room
            return available - (total - then)
        self._room = (available_memory(), total)
        return self._room[0]

    def _refusal(
        self, i: int, sizes: list[int], need: int, total: int, available: int
    ) -> ResourceError:
        """The error naming the loop, the value that grew most and the bytes."""
        grown = [now - was for now, was in zip(sizes, self._sizes)]
        k = max(range(len(sizes)), key=grown.__getitem__)
        value = f"loop-carried value {self.names[k]!r}" if k < len(self.names) else "a value"
        if self.known:
            per = (sum(sizes) - sum(self._sizes)) // (i - self._i)
            return ResourceError(
                f"{self.label}: {value} grows by {grown[k] // (i - self._i)} bytes per "
                f"iteration (all loop-carried values: {per}); at iteration {i} of {self.stop}, "
                f"the {self.stop - i} iterations left need {need} bytes more, more than the "
                f"{available} bytes of memory available"
            )
        return ResourceError(
            f"{self.label}: {value} has grown to {sizes[k]} bytes by iteration {i} (all "
            f"loop-carried values: {total} bytes), more than the {available} bytes of memory "
            "left; the loop has no known number of iterations (a condition ends it), so it is "
            "stopped now rather than when an allocation fails"
        )
