"""onnxflow's compiled kernels: the hot loops of some kernels, built ahead of time (Cython).

Each module here (``_math``, ...) is a Cython extension built by the package's build
(``setup.py``); none imports anything else from onnxflow. The kernels in :mod:`onnxflow.ops`
declare a compiled form where they are registered (:attr:`onnxflow.traits.Traits.native`); the
spec logic (layouts, attributes, validation) stays there, only the loop lives here.

A module that was not built (a source checkout never installed) is None from :func:`module`:
the kernels then declare no compiled form and run their NumPy form.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Every compiled module this package builds (``setup.py`` compiles ``native/<name>.pyx``).
MODULES: tuple[str, ...] = (
    "_arrays", "_conv", "_half", "_linalg", "_math", "_pointwise", "_quant", "_rnn", "_trees"
)  # fmt: skip

_LOADED: dict[str, ModuleType | None] = {}


def module(name: str) -> ModuleType | None:
    """The compiled module ``name`` (one of :data:`MODULES`), or None when it was not built."""
    if name not in _LOADED:
        try:
            _LOADED[name] = importlib.import_module(f"{__name__}.{name}")
        except ImportError:
            _LOADED[name] = None
    return _LOADED[name]


def built() -> list[str]:
    """The names of the compiled modules that import."""
    return [name for name in MODULES if module(name) is not None]
