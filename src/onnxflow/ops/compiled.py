"""How kernels call their compiled forms (:mod:`onnxflow.native`): the shared glue.

A compiled loop takes contiguous one-dimensional buffers of one dtype; the kernel's compiled
form (declared with :func:`onnxflow.traits.native_form` where the kernel is registered) keeps the
spec logic and calls the loop through these helpers. Inputs the loop was not written for (other
dtypes) go to the kernel's NumPy form, so a compiled form gives a result for every input its
kernel accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from onnxflow import native

#: A compiled elementwise loop: ``loop(x, out)`` over contiguous one-dimensional buffers.
Loop = Callable[[np.ndarray, np.ndarray], Any]


def module(name: str) -> ModuleType | None:
    """The compiled module ``name`` (:data:`onnxflow.native.MODULES`), or None if not built."""
    return native.module(name)


def deferred(name: str) -> ModuleType | None:
    """:func:`module`, loaded the first time one of its names is read (for a kernel module
    that calls it only when its kernels run: :func:`onnxflow.native.deferred`)."""
    return native.deferred(name)


def unary(
    fallback: Callable[..., np.ndarray], loops: Mapping[Any, Loop], name: str
) -> Callable[..., np.ndarray] | None:
    """An elementwise kernel's compiled form: ``loops[x.dtype](x, out)`` into a new array of
    x's shape and dtype for the dtypes ``loops`` names, ``fallback(x, **attrs)`` for others.
    None when ``loops`` is empty (its module not built). ``name`` names the form in the code
    ``onnxflow code`` prints."""
    if not loops:
        return None
    by_dtype = {np.dtype(dt): loop for dt, loop in loops.items()}

    def form(x: np.ndarray, **attrs: Any) -> np.ndarray:
        loop = by_dtype.get(x.dtype)
        if loop is None:
            return fallback(x, **attrs)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty(x.shape, x.dtype)
        loop(flat, out.reshape(-1))
        return out

    form.__name__ = form.__qualname__ = name
    form.__doc__ = f"{name}: the compiled loop for {sorted(str(d) for d in by_dtype)}, else NumPy."
    return form


def loops(mod: ModuleType | None, **by_dtype: str) -> dict[Any, Loop]:
    """``{dtype: mod.<function>}`` from ``float32="erf_f32"``-style pairs; empty when ``mod`` is
    None (not built)."""
    if mod is None:
        return {}
    return {np.dtype(dt): getattr(mod, fn) for dt, fn in by_dtype.items()}


def when(mod: ModuleType | None, form: Callable[..., Any]) -> Callable[..., Any] | None:
    """``form`` when ``mod`` (the compiled module it calls) was built, else None."""
    return None if mod is None else form


def elementwise(x: np.ndarray, fill: Callable[[np.ndarray, np.ndarray], Any]) -> np.ndarray:
    """A new array of x's shape and dtype, ``fill(x_flat, out_flat)`` over contiguous
    one-dimensional views."""
    out = np.empty(x.shape, x.dtype)
    fill(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def row_vector(x: np.ndarray, v: np.ndarray | None) -> bool:
    """Whether ``v`` is absent or a float32 vector over x's last axis (a bias a row loop
    takes)."""
    return v is None or (v.dtype == np.float32 and x.ndim >= 1 and v.shape == x.shape[-1:])


def flat32(v: np.ndarray | None) -> np.ndarray | None:
    """``v`` as a contiguous one-dimensional float32 buffer (None stays None)."""
    return None if v is None else np.ascontiguousarray(v, np.float32).reshape(-1)
