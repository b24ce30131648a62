"""Kernels of the nodes the compile passes make: Pointwise regions: a group of float32
elementwise nodes in one compiled pass
(:mod:`onnxflow.compile.passes.pointwise`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops.pass_made import (
    FUSED_DOMAIN,
    POINTWISE,
)
from onnxflow.ops.pass_made.body import body_call, body_call_later
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

# -- pointwise regions ---------------------------------------------------------------------------
_POINTWISE = compiled.module("_pointwise")


def _pointwise_compiled(
    node: Any, *, body: GraphProto, opcodes: list[str], operands: list[int]
) -> Callable[..., np.ndarray]:
    """The compiled form of :func:`pointwise`: the region's instructions in one pass over
    chunks of the output, its call (the dtype and layout tests, the broadcast, the output)
    in C too (:class:`onnxflow.native._pointwise.Region`); inputs that are not float32 arrays,
    or broadcast in a way one pass does not read, run the nodes as written (compiled the first
    time they run: most sessions never run them)."""
    as_written = body_call_later(node, body)
    codes = [_POINTWISE.OPCODES.index(code) for code in opcodes]  # type: ignore[union-attr]
    program = np.array(
        [[c, *operands[3 * j : 3 * j + 3]] for j, c in enumerate(codes)], dtype=np.int32
    )
    return _POINTWISE.Region(program, as_written)  # type: ignore[union-attr]


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
