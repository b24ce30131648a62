"""What loops collect and test: scan outputs stacked per iteration (or listed, for
SequenceMap), typed empties, conditions and trip counts."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, ValueInfoProto

from onnxflow.resources import available_memory
from onnxflow.runtime.context import current_run_options
from onnxflow.values import np_dtype


def as_bool(value: Any, what: str) -> bool:
    """Return the truth of a one-element boolean tensor (a condition)."""
    return bool(_only_element(value, what))


def as_count(value: Any, what: str) -> int:
    """Return the integer in a one-element tensor (a trip count)."""
    return int(_only_element(value, what))


def _only_element(value: Any, what: str) -> Any:
    """The single element of a tensor; ``what`` names it when it has another size."""
    if value.__class__ is np.ndarray and value.ndim == 0:
        return value
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{what} must hold exactly one element, found shape {list(arr.shape)}")
    return arr.reshape(-1)[0]


def empty_element(vi: ValueInfoProto) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one iteration's output as declared by a body output.

    Used when a loop runs zero times: dimensions that are not statically known count as 0
    (the result is empty either way); an undeclared element type defaults to float.
    """
    tt = vi.type.tensor_type
    dtype = np_dtype(tt.elem_type or TensorProto.FLOAT)
    if not tt.HasField("shape"):
        return (), dtype
    dims = tuple(d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim)
    return dims, dtype


def pad_stacked(stacks: list[np.ndarray], steps: int, empty: np.ndarray) -> np.ndarray:
    """Scan 8's scan output, [batch, steps, ...]: each batch entry's stacked rows, zeros past
    them; the element shape and dtype of the first entry with rows, else ``empty``'s."""
    full = next((r for r in stacks if r.shape[0]), empty)
    out = np.zeros((len(stacks), steps, *full.shape[1:]), dtype=full.dtype)
    for b, rows in enumerate(stacks):
        if rows.shape[0]:
            out[b, : rows.shape[0]] = rows
    return out


#: The condition input every Loop iteration receives: one shared read-only value.
TRUE = np.array(True)
TRUE.flags.writeable = False

#: Largest buffer a Stacker allocates for a number of iterations that is only an upper bound.
BOUND_BYTES = 1 << 26


def scan_output_limit() -> int:
    """The most bytes one stacked scan output may take: the current run's
    ``RunOptions.max_scan_output_bytes`` when set, else the memory available now."""
    limit = _limit_set()
    return available_memory() if limit is None else limit


def _limit_set() -> int | None:
    limit = getattr(current_run_options(), "max_scan_output_bytes", None)
    return None if limit is None else int(limit)


class Stacker:
    """Collects one tensor per iteration into a stacked array (new axis 0).

    When the number of iterations is known the buffer is allocated after the first iteration and
    written in place; otherwise elements are kept and stacked at the end. Every element must have
    the first one's shape and dtype.
    """

    def __init__(self, what: str, count: int | None = None, *, at_most: bool = False) -> None:
        """``count``: the number of iterations; with ``at_most``, only a limit (a Loop's M, which
        a condition or a cancellation may cut short), and the buffer is made only if it stays
        under BOUND_BYTES."""
        self.what = what
        self.count = count
        self.at_most = at_most
        self.n = 0
        self.shape: tuple[int, ...] | None = None
        self.dtype: np.dtype | None = None
        self.buffer: np.ndarray | None = None
        self.items: list[np.ndarray] = []
        #: Rows collected as a list before the memory they stand for is checked again.
        self._check_at = 0

    def add(self, value: Any) -> None:
        """Append one iteration's value."""
        if value.__class__ is not np.ndarray:
            value = np.asarray(value)
        if self.n and value.shape == self.shape and value.dtype is self.dtype:
            if self.buffer is not None:
                self.buffer[self.n] = value
            else:
                self._keep(value)
            self.n += 1
            return
        if self.shape is None:
            self._first(value)
        elif value.shape != self.shape or value.dtype != self.dtype:
            raise ValueError(
                f"{self.what} changes across iterations: iteration 0 gave shape "
                f"{list(self.shape)} {self.dtype}, iteration {self.n} gave shape "
                f"{list(value.shape)} {value.dtype}; scan outputs must keep shape and dtype"
            )
        if self.buffer is not None:
            self.buffer[self.n] = value
        else:
            self._keep(value)
        self.n += 1

    def _first(self, value: np.ndarray) -> None:
        """Take the first element's shape and dtype; make the buffer when the count is known,
        refusing one larger than the limit (:func:`scan_output_limit`) before more iterations
        run."""
        self.shape, self.dtype = value.shape, value.dtype
        row = max(value.nbytes, 1)
        limit = _limit_set()
        watch = BOUND_BYTES if limit is None or limit > BOUND_BYTES else limit  # checked past it
        if self.count is not None and self.count * row <= watch:  # the common case: no list
            self.buffer = np.empty((self.count, *value.shape), dtype=value.dtype)
            return
        self._check_at = max(watch // row, 1)
        if self.count is not None:
            if self.at_most:  # a limit the loop may not reach: rows are listed and counted
                self.count = None
            else:
                self._refuse_beyond(self.count, row)
        if self.count is not None:
            self.buffer = np.empty((self.count, *value.shape), dtype=value.dtype)

    def _keep(self, value: np.ndarray) -> None:
        """List one more row, checking now and then what all rows so far would take stacked
        (the same array repeated takes no memory until then, so a loop that runs for ever would
        never fail otherwise)."""
        if self.n >= self._check_at:
            row = max(value.nbytes, 1)
            self._refuse_beyond(self.n + 1, row)
            self._check_at = max(self.n + 1, scan_output_limit() // row)
        self.items.append(value)

    def _refuse_beyond(self, rows: int, row: int) -> None:
        limit = scan_output_limit()
        if rows * row > limit:
            raise MemoryError(
                f"{self.what}: {rows} iterations of {row}-byte elements take {rows * row} bytes "
                f"stacked, more than the limit of {limit} (RunOptions.max_scan_output_bytes; by "
                "default the memory available)"
            )

    def result(self, declared: ValueInfoProto) -> np.ndarray:
        """Return the stacked values; an empty array of the declared type after no iterations."""
        if self.n == 0:
            shape, dtype = empty_element(declared)
            return np.empty((0, *shape), dtype=dtype)
        if self.buffer is not None:
            if self.n == self.count:
                return self.buffer
            part = self.buffer[: self.n]
            return part.copy() if 2 * self.n < self.count else part  # do not hold a big buffer
        if self.dtype.kind == "O":  # type: ignore[union-attr]
            return np.stack(self.items)
        return np.array(self.items, dtype=self.dtype)  # in C: 5-12x faster than np.stack


class Lister:
    """Collects one value of any kind per iteration into a list (SequenceMap's outputs).

    It offers a loop what a :class:`Stacker` does, but never a buffer to write rows into.
    """

    buffer = None

    def __init__(self) -> None:
        self.n = 0
        self.items: list[Any] = []

    def add(self, value: Any) -> None:
        """Append one iteration's value."""
        del self.items[self.n :]  # a generated loop sets n itself before adding
        self.items.append(value)
        self.n = len(self.items)
