"""NumPy's floating-point error state around a run: silent, as IEEE 754 computes.

Runs compute as IEEE 754 does, silently: the spec defines log(0) = -inf, 1/0 = inf, 0/0 and
sqrt(-1) = NaN, overflow to inf (in Exp, Pow, casts...), and a run must not warn about results
it was asked for. Kernels that treat a case as an error (integer division by zero) set their
own state inside. One state per run, not per kernel. A run sets NumPy's error state to ignore
everything and gives the caller's back when it ends, as ``np.errstate(all="ignore")`` does,
through the context variable NumPy 2 keeps that state in: one ``set`` and one ``reset``
(0.1 us) instead of building an ``errstate`` (1.1 us, a tenth of a small tree model's run).
Where NumPy keeps it elsewhere, ``np.errstate`` itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: How NumPy computes inside a run.
IEEE = {"all": "ignore"}

try:  # NumPy >= 2.0: the error state is a context variable holding an extobj
    from numpy._core._multiarray_umath import _make_extobj
    from numpy._core._ufunc_config import _extobj_contextvar

    _SILENT = _make_extobj(**IEEE)

    def silence() -> Any:
        """Make NumPy silent on floating-point errors; give :func:`restore` what it returns."""
        return _extobj_contextvar.set(_SILENT)

    def restore(token: Any) -> None:
        """Give back the error state :func:`silence` replaced."""
        _extobj_contextvar.reset(token)

except (ImportError, AttributeError, TypeError):  # another NumPy: its own errstate

    def silence() -> Any:
        """Make NumPy silent on floating-point errors; give :func:`restore` what it returns."""
        state = np.errstate(**IEEE)
        state.__enter__()
        return state

    def restore(token: Any) -> None:
        """Give back the error state :func:`silence` replaced."""
        token.__exit__(None, None, None)
