"""Kernels of the nodes the compile passes make: Pointwise regions: a group of float32
elementwise nodes in one compiled pass
(:mod:`onnxflow.compile.passes.pointwise`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops.pass_made import (
    FUSED_DOMAIN,
    POINTWISE,
)
from onnxflow.ops.pass_made.body import body_call
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

_F32 = np.dtype(np.float32)


# -- pointwise regions ---------------------------------------------------------------------------
_POINTWISE = compiled.module("_pointwise")
#: Broadcast layouts by input shapes (:func:`_layout`), kept for the shapes seen last.
_LAYOUTS: dict[tuple[tuple[int, ...], ...], Any] = {}
_LAYOUTS_KEPT = 256


def _pointwise_compiled(
    node: Any, *, body: GraphProto, opcodes: list[str], operands: list[int]
) -> Callable[..., np.ndarray]:
    """The compiled form of :func:`pointwise`: the region's instructions in one pass over
    chunks of the output (:mod:`onnxflow.native._pointwise`); inputs that are not float32
    arrays, or broadcast in a way one pass does not read, run the nodes as written."""
    as_written = body_call(node, body)
    codes = [_POINTWISE.OPCODES.index(code) for code in opcodes]  # type: ignore[union-attr]
    program = np.array(
        [[c, *operands[3 * j : 3 * j + 3]] for j, c in enumerate(codes)], dtype=np.int32
    )
    run_program = _POINTWISE.run  # type: ignore[union-attr]

    def region(*args: Any) -> Any:
        if not all(a.__class__ is np.ndarray and a.dtype == _F32 for a in args):
            return as_written(*args)
        shapes = tuple(a.shape for a in args)
        layout = _LAYOUTS.get(shapes) or _layout(shapes)
        if layout is None:
            return as_written(*args)
        shape, inner, period = layout
        out = np.empty(shape, _F32)
        if out.size:
            flat = tuple(np.ascontiguousarray(a).reshape(-1) for a in args)
            run_program(program, flat, inner, period, out.reshape(-1))
        return out

    region.__name__ = region.__qualname__ = "pointwise_compiled"
    return region


def _layout(shapes: tuple[tuple[int, ...], ...]) -> Any:
    """The output shape of inputs of ``shapes`` broadcast together and, per input, the
    ``inner`` and ``period`` by which element i of the output reads element (i // inner) %
    period of it; None when an input's dims that are not 1 do not form one run of the output's
    dims (one pass reads it as a chunked gather only then). Kept in :data:`_LAYOUTS`."""
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    inner, period = [], []
    for shape in shapes:
        dims = (1,) * (len(out) - len(shape)) + tuple(shape)
        spread = [d for d, size in enumerate(dims) if size != 1]
        if not spread:
            inner.append(max(1, math.prod(out)))
            period.append(1)
            continue
        lo, hi = spread[0], spread[-1]
        if dims[lo : hi + 1] != out[lo : hi + 1]:
            return None
        inner.append(math.prod(out[hi + 1 :]))
        period.append(math.prod(out[lo : hi + 1]))
    layout = (out, np.array(inner, np.int64), np.array(period, np.int64))
    if len(_LAYOUTS) >= _LAYOUTS_KEPT:
        _LAYOUTS.clear()
    _LAYOUTS[shapes] = layout
    return layout


@op(
    POINTWISE,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(
        static_shape=True,
        fresh=True,
        native=native_form(_pointwise_compiled if _POINTWISE is not None else None),
    ),
)
def pointwise(
    node: Any, *, body: GraphProto, opcodes: list[str], operands: list[int]
) -> Callable[..., Any]:
    """A group of float32 elementwise nodes (see :mod:`~onnxflow.compile.passes.pointwise`):
    this NumPy form runs them as written (``body``); ``opcodes`` and ``operands`` are the
    program its compiled form runs."""
    return body_call(node, body)
