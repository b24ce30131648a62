"""Conv against a direct convolution written from the operator's definition.

The kernel builds its GEMM columns straight from the unpadded input (zero where a window reaches
into the padding), in one chunk or in chunks of output rows; every geometry here is checked
against the oracle below, which pads explicitly and sums each window.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnxflow.ops import conv_paths, im2col
from onnxflow.ops.conv import conv
from onnxflow.ops.window_geometry import spatial_geometry


def _direct(x, w, b, group, strides, dilations, pads, auto_pad) -> np.ndarray:
    """Y[n, m, o...] = sum over the group's channels and kernel offsets of Xpad * W (+ B)."""
    n, _, *spatial = x.shape
    m, cg, *kernel = w.shape
    out, begin, end = spatial_geometry(spatial, kernel, strides, dilations, pads, auto_pad)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *zip(begin, end)])
    y = np.zeros((n, m, *out))
    per_group = m // group
    for o in itertools.product(*(range(v) for v in out)):
        window = tuple(
            slice(p * s, p * s + (k - 1) * d + 1, d)
            for p, s, k, d in zip(o, strides, kernel, dilations)
        )
        patch = xp[(slice(None), slice(None), *window)]  # (n, c, *kernel)
        for j in range(m):
            g = j // per_group
            y[(slice(None), j, *o)] = (patch[:, g * cg : (g + 1) * cg] * w[j]).reshape(n, -1).sum(1)
    if b is not None:
        y += b.reshape(-1, *[1] * len(out))
    return y


CASES = [
    # (x shape, w shape, group, strides, dilations, pads, auto_pad)
    ((1, 3, 9, 8), (4, 3, 3, 3), 1, [1, 1], [1, 1], [1, 1, 1, 1], "NOTSET"),
    ((2, 4, 10, 7), (6, 2, 3, 2), 2, [2, 1], [1, 2], [0, 2, 3, 1], "NOTSET"),
    ((1, 2, 11), (3, 2, 4), 1, [3], [2], [4, 5], "NOTSET"),  # windows only in the padding
    ((1, 3, 5, 6, 4), (2, 3, 2, 3, 2), 1, [1, 2, 1], [1, 1, 2], [1, 0, 1, 0, 2, 1], "NOTSET"),
    ((1, 4, 7, 7), (4, 1, 3, 3), 4, [2, 2], [1, 1], None, "SAME_UPPER"),  # depthwise
    ((2, 3, 8, 5), (5, 3, 2, 3), 1, [2, 3], [1, 1], None, "SAME_LOWER"),
    ((1, 3, 9, 9), (2, 3, 3, 3), 1, [2, 2], [2, 1], None, "VALID"),
    ((1, 6, 5, 5), (4, 6, 1, 1), 1, [1, 1], [1, 1], [0, 0, 0, 0], "NOTSET"),  # pointwise
    ((1, 2, 4, 4), (3, 2, 5, 5), 1, [1, 1], [1, 1], [2, 2, 2, 2], "NOTSET"),  # kernel > input
    ((2, 5, 9, 7), (2, 5, 3, 2), 1, [1, 1], [2, 3], [1, 0, 2, 3], "NOTSET"),  # by taps
    ((1, 6, 6, 8), (3, 6, 3, 3), 1, [1, 1], [1, 1], None, "SAME_LOWER"),  # by taps
    ((1, 4, 7, 6), (2, 4, 2, 3), 1, [1, 1], [1, 1], [0, 0, 0, 0], "NOTSET"),  # by taps
    ((1, 6, 4, 4), (2, 6, 5, 5), 1, [1, 1], [1, 1], [2, 1, 2, 3], "NOTSET"),  # by taps, k > x
]


@pytest.mark.parametrize("path", [None, "rows", "taps", "filled"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_conv_matches_a_direct_convolution(case, path, monkeypatch) -> None:
    """By default these small cases gather their columns with one remembered index; ``rows``:
    the columns are built one output row at a time; ``taps``: every 2-D stride-1 case whose
    channels allow it sums one product per kernel tap, however small; ``filled``: the columns
    are filled tap by tap in one chunk, as for larger images."""
    if path == "rows":
        monkeypatch.setattr(conv_paths, "_CHUNK_BYTES", 1)
    if path == "taps":
        monkeypatch.setattr(conv_paths, "TAP_PRODUCTS_MIN_POSITIONS", 0)
    if path == "filled":
        monkeypatch.setattr(im2col, "GATHER_COLUMNS", 0)
    conv_paths._geometry.cache_clear()  # the path is decided once per shapes: decide anew
    xs, ws, group, strides, dilations, pads, auto_pad = case
    rng = np.random.default_rng(len(xs) + ws[0])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    before = x.copy()
    y = conv(
        x, w, b, auto_pad=auto_pad, dilations=dilations, group=group, pads=pads, strides=strides
    )
    want = _direct(x, w, b, group, strides, dilations, pads, auto_pad)
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(x, before)  # the input is never written
    conv_paths._geometry.cache_clear()  # no decision made under the patch outlives it


def test_negative_pads_are_refused() -> None:
    x = np.zeros((1, 1, 5, 5), np.float32)
    w = np.zeros((1, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match="pads must be non-negative"):
        conv(x, w, pads=[-1, 0, 0, 0])


def test_long_kernels_take_strided_columns_equal_to_the_tap_by_tap_ones() -> None:
    """Beyond a few taps, im2col copies one strided view of the padded input; the columns
    (and so the convolution) equal those filled one tap at a time, chunk offsets included."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        nd = int(rng.integers(1, 3))
        kernel = [int(rng.integers(1, 7)) for _ in range(nd)]
        size = [int(rng.integers(max(kernel), 20)) for _ in range(nd)]
        strides = [int(rng.integers(1, 4)) for _ in range(nd)]
        dilations = [int(rng.integers(1, 3)) for _ in range(nd)]
        begin = [int(rng.integers(0, 3)) for _ in range(nd)]
        end = [int(rng.integers(0, 3)) for _ in range(nd)]
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        out = [(n + b + e - x) // s + 1 for n, b, e, x, s in zip(size, begin, end, extent, strides)]
        if min(out) < 1:
            continue
        x = rng.standard_normal((3, *size)).astype(np.float32)
        row0 = int(rng.integers(0, out[0]))
        rows = [out[0] - row0, *out[1:]]
        taps = np.empty((3, int(np.prod(kernel)), *rows), np.float32)
        for t, index in enumerate(np.ndindex(*kernel)):
            im2col._window(
                taps[:, t], x, index, rows, strides, dilations, begin, [row0] + [0] * (nd - 1)
            )
        strided = im2col._strided_columns(x, kernel, rows, strides, dilations, begin, row0)
        np.testing.assert_array_equal(strided, taps.reshape(strided.shape))
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize(
    ("kernel", "strides", "dilations", "pads"),
    [
        ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
        ((5, 5), (2, 1), (1, 1), (2, 2, 2, 2)),
        ((3, 3), (1, 2), (2, 1), (0, 1, 2, 0)),
        ((7,), (3,), (1,), (3, 0)),
    ],
)
@pytest.mark.parametrize("blocks", ["whole", "one channel at a time"])
def test_depthwise_convolution_weighs_its_windows_like_the_oracle(
    n: int, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple, blocks: str, monkeypatch
) -> None:
    """One filter per channel runs as copied windows and one batched product, in blocks of
    channels; it agrees with a sliding-window oracle for strides, dilations and uneven pads."""
    if blocks != "whole":
        monkeypatch.setattr(conv_paths, "_DEPTHWISE_CHUNK_BYTES", 1)
    rng = np.random.default_rng(4)
    c = 6
    x = rng.standard_normal((n, c, *[11] * len(kernel))).astype(np.float32)
    w = rng.standard_normal((c, 1, *kernel)).astype(np.float32)
    got = conv(x, w, group=c, strides=list(strides), dilations=list(dilations), pads=list(pads))
    # an oracle: pad, take every window with NumPy's sliding view, weight and sum it
    nd = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0), *zip(pads[:nd], pads[nd:])])
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    views = np.lib.stride_tricks.sliding_window_view(xp, extent, axis=tuple(range(2, 2 + nd)))
    views = views[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    views = views[(..., *(slice(None, None, d) for d in dilations))]  # the taps of each window
    spec = "ncxyij,cij->ncxy" if nd == 2 else "ncxi,ci->ncx"
    want = np.einsum(spec, views, w[:, 0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
