"""``--custom-ops SPEC``: the Python functions of operators onnxflow lacks, for a command.

``SPEC`` is ``MODULE:NAME`` (``mypkg.ops:CUSTOM_OPS``, imported as Python imports it) or
``FILE.py:NAME`` (a script, loaded from its path), where ``NAME`` is a dict such as a session's
``custom_ops`` takes (:mod:`onnxflow.ops.custom`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def load_custom_ops(spec: str) -> Mapping[str, Any]:
    """The dict ``spec`` names; an ``argparse.ArgumentTypeError`` saying what is wrong."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise argparse.ArgumentTypeError(f"give MODULE:NAME or FILE.py:NAME, found {spec!r}")
    try:
        module = _module(where)
    except Exception as exc:  # the user's module failed to import: say which and why
        raise argparse.ArgumentTypeError(
            f"cannot import {where!r}: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, name, None)
    if not isinstance(found, Mapping):
        raise argparse.ArgumentTypeError(
            f"{where!r} has no dict {name!r} (found {type(found).__name__}); it maps "
            "'domain.OpType' to a function"
        )
    return found


def _module(where: str) -> Any:
    if not where.endswith(".py"):
        return importlib.import_module(where)
    path = Path(where)
    if not path.is_file():
        raise FileNotFoundError(f"no file {where}")
    spec = importlib.util.spec_from_file_location(f"onnxflow_custom_ops_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
