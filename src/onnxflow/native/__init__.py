"""onnxflow's compiled kernels: the hot loops of some kernels, built ahead of time (Cython).

Each module here (``_math``, ...) is a Cython extension built by the package's build
(``setup.py``); none imports anything else from onnxflow. The kernels in :mod:`onnxflow.ops`
declare a compiled form where they are registered (:attr:`onnxflow.traits.Traits.native`); the
spec logic (layouts, attributes, validation) stays there, only the loop lives here.

A module that was not built (a source checkout never installed) is None from :func:`module`:
the kernels then declare no compiled form and run their NumPy form. A kernel module that reads
a compiled module only when its kernels run takes it from :func:`deferred`: loaded the first
time one of its names is read, so a session whose kernels never call it does not load it.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

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


class _Deferred(ModuleType):
    """A built compiled module not loaded yet (:func:`deferred`): the first read of a name it
    lacks loads the module and copies its names in, so every later read is a plain module
    attribute read, as fast as the module's own."""

    def __getattr__(self, attribute: str) -> Any:
        loaded = importlib.import_module(self.__name__)
        self.__dict__.update(loaded.__dict__)
        return getattr(loaded, attribute)


def deferred(name: str) -> ModuleType | None:
    """The compiled module ``name`` (one of :data:`MODULES`) as a stand-in that loads it the
    first time one of its names is read; None when it was not built (no file to load). The
    module already loaded is returned as it is."""
    if _LOADED.get(name) is not None:
        return _LOADED[name]
    full = f"{__name__}.{name}"
    if name in _LOADED or importlib.util.find_spec(full) is None:
        return None
    return _Deferred(full)
