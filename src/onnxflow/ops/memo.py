"""What a stateful kernel form keeps between calls (:class:`Memo`), such as a transform of the
weights it was given last (:class:`WeightMemo`).

A node whose weights are the same constant arrays at every run prepares them (transposes,
dequantizes, unblocks them) once. The plan's stateless form takes no memo and prepares them at
every call; each generated function makes its own memo through the kernel's
``Traits(stateful=...)``. Values are never written in place, so the same array object holds the
same data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Memo(Generic[T]):
    """What a kernel keeps between calls: one value in ``kept`` (None at first), replaced
    whole, never changed in place, so that concurrent runs each read a consistent one. Each
    stateful form owns its memo; what the value holds and when it is used are the kernel's."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: T | None = None


class WeightMemo(Memo[tuple[tuple[Any, ...], T]]):
    """The value made from the arrays a kernel was given last, while the same objects come
    back: ``kept`` is ``(key, value)``."""

    __slots__ = ()

    def get(self, key: tuple[Any, ...], make: Callable[[], T]) -> T:
        """The value made for ``key`` (the same objects, in order, as last time), else
        ``make()``'s, kept for the next call."""
        kept = self.kept
        if kept is not None and all(a is b for a, b in zip(kept[0], key)):
            return kept[1]
        made = make()
        self.kept = (key, made)
        return made
