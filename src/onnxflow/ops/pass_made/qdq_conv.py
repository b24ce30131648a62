"""Kernels of the nodes the compile passes make: Quantized convolutions in QDQ form as one node
(:mod:`onnxflow.compile.passes.fuse_qdq_conv`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import integer_gemm as ig
from onnxflow.ops.pass_made import (
    FUSED_DOMAIN,
    QDQ_CONV,
    QDQ_ROLES,
)
from onnxflow.ops.pass_made.body import body_call, body_call_later
from onnxflow.ops.registry import op
from onnxflow.traits import Traits, native_form

_F32 = np.dtype(np.float32)


# -- quantized convolutions in QDQ form ----------------------------------------------------------
#: The unit roundoff of float32.
_U = 2.0**-24
#: Roundings besides the sum's K: x's and w's dequantization, the bias add, the division by
#: y's scale (the float graph's); the integer path's float32 scale and tail (5) -- see
#: :mod:`~onnxflow.compile.passes.fuse_qdq_conv`.
_EXTRA_ROUNDINGS = 4 + 5


def qdq_conv_bound(
    x: np.ndarray,
    sx: np.ndarray,
    zx: np.ndarray,
    w: np.ndarray,
    sw: np.ndarray,
    zw: np.ndarray,
    b: np.ndarray | None,
    sb: np.ndarray | None,
    sy: np.ndarray,
) -> np.ndarray:
    """Per output channel, ``E_c``: how far (in steps of ``sy``) the float graph's value before
    rounding may lie from the integer path's (:mod:`~onnxflow.compile.passes.fuse_qdq_conv`)."""
    m = w.shape[0]
    n = w[0].size + _EXTRA_ROUNDINGS
    gamma = n * _U / (1 - n * _U)
    scale_x = abs(float(sx.reshape(())))
    scale_w = np.abs(np.broadcast_to(sw.astype(np.float64).reshape(-1), (m,)))
    shifted = w.reshape(m, -1).astype(np.float64) - zw.astype(np.float64).reshape(-1, 1)
    terms = ig.reach(x, zx) * scale_x * scale_w * np.abs(shifted).sum(axis=1)
    if b is not None and sb is not None:
        bias = np.abs(b.astype(np.float64))
        b_scale = np.broadcast_to(sb.astype(np.float64).reshape(-1), (m,))
        terms = terms + bias * np.maximum(np.abs(b_scale), scale_x * scale_w)
        mismatch = bias * np.abs(b_scale - scale_x * scale_w)
    else:
        mismatch = np.zeros(m)
    return (gamma * terms + mismatch) / abs(float(sy.reshape(())))


def _qdq_conv_fits(roles: dict[str, Any], weight_axis: int) -> bool:
    """Whether the integer path takes these values: 8-bit X and W with their zero points'
    types, per-tensor X and Y parameters, W's per tensor or per output channel, an int32 bias
    of zero point 0 with its scale per tensor or per channel."""
    x, w, b = roles["x"], roles["w"], roles["b"]
    m = w.shape[0] if w.ndim else 0
    if not _qdq_types_fit(roles) or w.ndim != x.ndim:
        return False
    if any(roles[k].size != 1 for k in ("sx", "zx", "sy", "zy")):
        return False
    if roles["sw"].size != 1 and (weight_axis not in (0, -w.ndim) or roles["sw"].shape != (m,)):
        return False
    if (
        roles["zw"].shape != roles["sw"].shape
        or roles["sx"].dtype != _F32
        or roles["sy"].dtype != _F32
    ):
        return False
    return b is None or _qdq_bias_fits(b, roles["sb"], roles["zb"], m)


def _qdq_types_fit(roles: dict[str, Any]) -> bool:
    """Whether X, W and Y are 8-bit, X and W of their zero points' types."""
    x, w, zx, zw, zy = (roles[k] for k in ("x", "w", "zx", "zw", "zy"))
    if x.dtype not in ig.BYTES or w.dtype not in ig.BYTES or zy.dtype not in ig.BYTES:
        return False
    return zx.dtype == x.dtype and zw.dtype == w.dtype


def _qdq_bias_fits(b: np.ndarray, sb: np.ndarray, zb: np.ndarray | None, m: int) -> bool:
    if b.dtype != np.int32 or b.shape != (m,) or sb.size not in (1, m):
        return False
    return zb is None or not np.any(zb)


def _qdq_conv_compiled(
    node: Any,
    *,
    body: GraphProto,
    slots: list[int],
    weight_axis: int = 1,
    **conv: Any,
) -> Callable[..., np.ndarray]:
    """QDQConv's compiled form: QLinearConv's integer convolution where the values fit and the
    bound :func:`qdq_conv_bound` is below one step for every channel (at most one step from
    the float graph then, at its ties); else the nodes as written."""
    from onnxflow.ops.conv import qlinear_conv_compiled

    as_written = body_call_later(node, body)  # compiled the first time it runs
    within = _QdqBound()

    def integer(*args: Any) -> Any:
        roles = {r: (args[k] if k >= 0 else None) for r, k in zip(QDQ_ROLES, slots)}
        if not all(a is None or a.__class__ is np.ndarray for a in roles.values()):
            return as_written(*args)
        if not _qdq_conv_fits(roles, weight_axis) or not within(roles):
            return as_written(*args)
        x, sx, zx, w, sw, zw, b, _, _, sy, zy = roles.values()
        return qlinear_conv_compiled(x, sx, zx, w, sw, zw, sy, zy, b, **conv)

    integer.__name__ = integer.__qualname__ = "qdq_conv_compiled"
    return integer


class _QdqBound:
    """Whether :func:`qdq_conv_bound` is below 1 for every channel: one node's answer, kept
    for its constant W and the parameters' values (computed again when they change)."""

    _NAMES = ("sx", "zx", "sw", "zw", "b", "sb", "sy")

    def __init__(self) -> None:
        self.kept: tuple[np.ndarray, tuple[Any, ...], bool] | None = None

    def __call__(self, roles: dict[str, Any]) -> bool:
        w = roles["w"]
        key = (roles["x"].dtype.char, *(ig.by_value(roles[k]) for k in self._NAMES))
        kept = self.kept
        if kept is not None and kept[0] is w and kept[1] == key and not w.flags.writeable:
            return kept[2]
        args = (roles[k] for k in ("x", "sx", "zx", "w", "sw", "zw", "b", "sb", "sy"))
        answer = bool(np.all(qdq_conv_bound(*args) < 1.0))
        self.kept = (w, key, answer)
        return answer


@op(
    QDQ_CONV,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(fresh=True, native=native_form(ig.QUANT and _qdq_conv_compiled)),
)
def qdq_conv(
    node: Any, *, body: GraphProto, slots: list[int], weight_axis: int = 1, **conv: Any
) -> Callable[..., Any]:
    """A quantized convolution in QDQ form (see :mod:`~onnxflow.compile.passes.fuse_qdq_conv`):
    this NumPy form runs its nodes as written (``body``); ``slots`` say which input is which
    (:data:`QDQ_ROLES`), ``weight_axis`` is W's DequantizeLinear axis, the rest the Conv's
    attributes, for the compiled form."""
    return body_call(node, body)
