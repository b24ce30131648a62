"""Kernels of the nodes the compile passes make: the scaled-dot-product attention core written
as primitives, as one node (:mod:`onnxflow.compile.passes.fuse_attention`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops.linalg import matmul
from onnxflow.ops.pass_made import FUSED_DOMAIN, SCALED_DOT_PRODUCT_ATTENTION
from onnxflow.ops.pass_made.body import body_call_later
from onnxflow.ops.registry import REGISTRY, op
from onnxflow.traits import Built, Traits, native_form

_F32 = np.dtype(np.float32)
#: The Softmax version whose kernel the fused node calls (the pass takes opset 13 on, where
#: every Softmax up to now normalizes along one axis).
_SOFTMAX_SINCE = 13


def _softmax_forms() -> tuple[Callable[..., np.ndarray], Callable[..., np.ndarray] | None]:
    """The registered Softmax kernel's NumPy form and its compiled form (None: not built): the
    functions a Softmax node runs, so the fused node's scores normalize to the same bits."""
    kernel = REGISTRY.lookup("", "Softmax", _SOFTMAX_SINCE)
    if kernel is None or kernel.build:
        raise RuntimeError("ScaledDotProductAttention needs Softmax 13's plain kernel")
    native = kernel.traits.native
    return kernel.fn, None if native is None else native.fn


_SOFTMAX, _SOFTMAX_NATIVE = _softmax_forms()


#: Scores of at least this many elements are scaled and masked in their own array: below it,
#: NumPy's checks of an output operand cost more (about 1 us a call) than a new array.
IN_PLACE = 1 << 14


def _scaled_masked(s: np.ndarray, scale: Any, scaling: Any, mask: Any) -> np.ndarray:
    """``Add(Div or Mul(s, scale), mask)`` (each when not None) as their kernels compute them,
    in the array of ``s`` (fresh) when it is large and the sum has its shape."""
    if s.size < IN_PLACE:
        s = s if scale is None else scaling(s, scale)
        return s if mask is None else np.add(s, mask)
    if scale is not None:
        scaling(s, scale, out=s)
    if mask is None:
        return s
    try:
        return np.add(s, mask, out=s)
    except ValueError:  # the mask broadcasts the scores to more or longer dims
        return np.add(s, mask)


#: The perms of the Transposes of Q, K^T, V and the output the node makes (None: none).
Perms = tuple[Any, Any, Any, Any]


def _attention(
    softmax: Callable[..., np.ndarray],
    as_written: Callable[..., Any],
    slots: list[int],
    divide: int,
    perms: Perms,
) -> Callable[..., Any]:
    """The fused node's function: the chain's NumPy operations in the order its nodes make
    them (Softmax through ``softmax``, each Transpose as its kernel's view), on float32
    arrays Q, K^T, V and mask; else ``as_written``."""
    iq, ik, iv, im, iqs, iks, isc, ifill = slots
    pq, pk, pv, po = perms
    scaling = np.divide if divide else np.multiply

    def attention(*args: Any) -> Any:
        q, k, v = args[iq], args[ik], args[iv]
        mask = args[im] if im >= 0 else q
        if not (
            q.__class__ is k.__class__ is v.__class__ is mask.__class__ is np.ndarray
            and q.dtype == k.dtype == v.dtype == mask.dtype == _F32
        ):
            return as_written(*args)
        if pq is not None:
            q = np.transpose(q, pq)
        if pk is not None:
            k = np.transpose(k, pk)
        if pv is not None:
            v = np.transpose(v, pv)
        if iqs >= 0:
            q = np.multiply(q, args[iqs])
        if iks >= 0:
            k = np.multiply(k, args[iks])
        s = matmul(q, k)
        if isc >= 0 or im >= 0:
            s = _scaled_masked(
                s, args[isc] if isc >= 0 else None, scaling, args[im] if im >= 0 else None
            )
        p = softmax(s, axis=-1)
        if ifill >= 0:
            p = np.where(np.isnan(p), args[ifill], p)
        return matmul(p, v) if po is None else np.transpose(matmul(p, v), po)

    return attention


def _build(softmax: Callable[..., np.ndarray] | None, name: str) -> Callable[..., Any] | None:
    """The kernel of the fused node with Softmax's form ``softmax`` (None: none), named
    ``name`` where the plan shows it."""
    if softmax is None:
        return None

    def build(
        node: Any, *, body: GraphProto, slots: list[int], divide: int = 0, **perms: Any
    ) -> Built:
        found = tuple(perms.get(f"perm_{r}") for r in ("q", "k", "v", "out"))
        as_written = body_call_later(node, body)  # compiled the first time it runs
        run = _attention(softmax, as_written, list(slots), divide, found)  # type: ignore[arg-type]
        run.__name__ = run.__qualname__ = name
        # a transposed output is a view of the product: not fresh
        return Built(run, node.traits.replace(fresh=found[3] is None))

    return build


_NUMPY_FORM = _build(_SOFTMAX, "attention")


@op(
    SCALED_DOT_PRODUCT_ATTENTION,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(
        static_shape=True,
        fresh=True,
        native=native_form(_build(_SOFTMAX_NATIVE, "attention_compiled_softmax")),
    ),
)
def scaled_dot_product_attention(
    node: Any, *, body: GraphProto, slots: list[int], divide: int = 0, **perms: list[int]
) -> Built:
    """``MatMul(Q, K^T) -> Div or Mul(scale) -> Add(mask) -> Softmax -> MatMul(., V)`` (see
    :mod:`~onnxflow.compile.passes.fuse_attention`), each step optional but the products and
    Softmax: the same NumPy operations in the same order on float32 inputs, the NumPy form of
    Softmax here and its compiled form in the compiled form; other inputs run the nodes as
    written (``body``). ``slots``: the input index of each role (``q``, ``k``, ``v``, ``mask``,
    ``q_scale``, ``k_scale``, ``scale``, ``fill``), -1 when absent; ``divide``: the scores are
    divided by ``scale`` (else multiplied); ``perm_q``, ``perm_k``, ``perm_v``, ``perm_out``:
    the perms of the Transposes of Q, K^T, V and the output the node makes, when it does."""
    return _NUMPY_FORM(node, body=body, slots=slots, divide=divide, **perms)  # type: ignore[misc]
