"""Kernels of the nodes the compile passes make: LayerNorm and RMSNorm written as primitives, as one
node (:mod:`onnxflow.compile.passes.fuse_norms`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops.pass_made import (
    FUSED_DOMAIN,
    PRIMITIVE_LAYER_NORM,
    PRIMITIVE_RMS_NORM,
)
from onnxflow.ops.pass_made.body import body_call, body_call_later
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

_F32 = np.dtype(np.float32)


# -- LayerNorm and RMSNorm written as primitives -----------------------------------------------
_MATH = compiled.module("_math")
_NONE = np.zeros(0, np.float32)


def norm_rows(
    x: np.ndarray,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    epsilon: float,
    centered: bool,
) -> np.ndarray | None:
    """LayerNorm (``centered``) or RMSNorm of float32 ``x`` over its last axis, times ``gamma``
    and plus ``beta`` (None: none), computed in double and rounded once
    (``onnxflow.native._math.norm_f32``, LayerNormalization's and RMSNormalization's own
    compiled loop, with gamma 1 when there is none); None when the inputs are not float32 arrays
    whose gamma and beta give one value per column or one in all (the caller then runs the
    nodes as written). The one entry point of the fused norms' compiled forms."""
    if x.__class__ is not np.ndarray or x.dtype != _F32 or x.ndim == 0 or x.size == 0:
        return None
    cols = x.shape[-1]
    params = [_columns(p, cols) for p in (gamma, beta)]
    if any(p is None for p in params):
        return None
    out = np.empty(x.shape, _F32)
    rows = np.ascontiguousarray(x).reshape(-1, cols)
    gamma_row = params[0] if params[0].size else np.ones(cols, _F32)
    beta_row = params[1] if params[1].size else None
    _MATH.norm_f32(  # type: ignore[union-attr]
        rows.reshape(-1),
        None,
        None,
        gamma_row,
        beta_row,
        out.reshape(-1),
        None,
        None,
        None,
        epsilon,
        not centered,
    )
    return out


def _columns(p: np.ndarray | None, cols: int) -> np.ndarray | None:
    """``p`` as one contiguous float32 value per column (empty for None), or None when it is
    not a float32 array of at most one dim holding one value or ``cols``."""
    if p is None:
        return _NONE
    if p.__class__ is not np.ndarray or p.dtype != _F32 or p.ndim > 1 or p.size not in (1, cols):
        return None
    if p.ndim == 1 and p.size == cols and p.flags.c_contiguous:
        return p
    return np.ascontiguousarray(np.broadcast_to(p.reshape(-1), (cols,)))


def _norm_compiled(centered: bool) -> Callable[..., Callable[..., Any]]:
    """The compiled form of a fused norm: :func:`norm_rows`, else the nodes as written
    (compiled the first time they run)."""

    def build(
        node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
    ) -> Callable[..., Any]:
        as_written = body_call_later(node, body)

        def norm(*args: Any) -> Any:
            gamma = args[1] if scaled else None
            beta = args[1 + scaled] if shifted else None
            out = norm_rows(args[0], gamma, beta, epsilon, centered)
            return as_written(*args) if out is None else out

        norm.__name__ = norm.__qualname__ = "norm_compiled"
        return norm

    return build


def _norm_traits(centered: bool) -> Traits:
    compiled_form = _norm_compiled(centered) if _MATH is not None else None
    return Traits(static_shape=True, fresh=True, native=native_form(compiled_form))


@op(PRIMITIVE_LAYER_NORM, 1, domain=FUSED_DOMAIN, build=True, traits=_norm_traits(True))
def primitive_layer_norm(
    node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
) -> Callable[..., Any]:
    """LayerNorm over the last axis written as primitives (see
    :mod:`~onnxflow.compile.passes.fuse_norms`): this NumPy form runs the nodes as written
    (``body``); inputs: x, gamma when ``scaled``, beta when ``shifted``, then the chain's other
    constants."""
    return body_call(node, body)


@op(PRIMITIVE_RMS_NORM, 1, domain=FUSED_DOMAIN, build=True, traits=_norm_traits(False))
def primitive_rms_norm(
    node: Any, *, body: GraphProto, epsilon: float, scaled: int = 0, shifted: int = 0
) -> Callable[..., Any]:
    """RMSNorm over the last axis written as primitives (see
    :mod:`~onnxflow.compile.passes.fuse_norms`): this NumPy form runs the nodes as written
    (``body``); inputs: x, the weight when ``scaled``, then the chain's other constants."""
    return body_call(node, body)
