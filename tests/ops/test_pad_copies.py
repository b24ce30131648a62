"""Pad's reflect, edge and wrap modes by gathers: np.pad's result, with the crop, the per-axis
checks and the gathers' positions worked out once per input shape (a streaming model pads each
chunk the same way)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxflow.ops import shape

CASES = [
    ((1, 512), [0, 64, 0, 0]),  # a stream's chunk, padded before on the last axis
    ((1, 512), [0, 64, 0, 64]),
    ((3, 5, 7), [1, 0, 2, 0, 3, 1]),
    ((3, 5, 7), [-1, 2, 0, 1, -2, 3]),  # cropped, then padded
    ((4, 6), [0, 6, 0, 0]),  # a reflection longer than the axis allows: np.pad's own way
    ((4, 6), [0, 0, 0, 0]),  # nothing to add: a copy
]


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("dims, pads", CASES)
def test_pad_by_gathers_is_np_pad(dims, pads, mode):
    """The kernel's result is np.pad's of the cropped input, a new array, on every call."""
    x = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
    p = np.array(pads, np.int64)
    rank = len(dims)
    begin, end = pads[:rank], pads[rank:]
    crop = tuple(slice(-min(b, 0), n + min(e, 0)) for n, b, e in zip(dims, begin, end))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    want = np.pad(x[crop], widths, mode=mode)
    for _ in range(3):
        got = shape.pad(x, p, mode=mode)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
        assert not np.shares_memory(got, x)


def test_pad_works_out_its_gathers_once_per_shape(monkeypatch):
    """Chunk after chunk of one shape, the positions to gather are looked up once; a new shape
    looks its own up."""
    looked_up = []
    index = shape._pad_index
    monkeypatch.setattr(shape, "_pad_index", lambda *args: looked_up.append(args) or index(*args))
    shape._copies.cache_clear()
    p = np.array([0, 64, 0, 0], np.int64)
    for n in (512, 512, 512, 256, 512):
        x = np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)
        assert shape.pad(x, p, mode="reflect").shape == (1, n + 64)
    assert looked_up == [(512, 64, 0, "reflect"), (256, 64, 0, "reflect")]
    shape._copies.cache_clear()
