"""Kernels, organised by family.

Every module below this package registers its kernels with :func:`onnxflow.ops.registry.op` when
imported, so adding a family is adding a module (and running tools/kernel_index.py, which
records the module's operators in :mod:`onnxflow.ops.kernel_index`). The registry imports a
family the first time one of its operators is looked up; :func:`load_all` imports every family,
for what lists them all (the ``check`` report, the contrib report, tests).
"""

from __future__ import annotations

import importlib
import pkgutil

from onnxflow.ops.registry import REGISTRY, op

__all__ = ["REGISTRY", "load_all", "op"]

_loaded = False


def load_all() -> None:
    """Import every kernel module once."""
    global _loaded
    if _loaded:
        return
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        importlib.import_module(info.name)
    _loaded = True
