"""onnxruntime's module functions, on the CPU: the device, the providers (the CPU only) and
the process's default logger severity; and how a session reads the providers it is given."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxflow.errors import InvalidArgument
from onnxflow.logs import set_severity

CPU = "CPUExecutionProvider"


def get_device() -> str:
    """The device onnxflow computes on: ``"CPU"``."""
    return "CPU"


def get_available_providers() -> list[str]:
    """The execution providers onnxflow offers: the CPU only."""
    return [CPU]


def get_all_providers() -> list[str]:
    """Every provider onnxflow knows of: the CPU only."""
    return [CPU]


def set_default_logger_severity(severity: int) -> None:
    """Set the process's default severity (0 verbose, 1 info, 2 warning, 3 error, 4 fatal):
    the level of the ``onnxflow`` logger (see :mod:`onnxflow.logs`), and the level at or
    above which sessions whose ``log_severity_level`` is -1 do not show their warnings."""
    set_severity(severity)


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accept a default verbosity (an integer): as in onnxruntime's release builds, where it
    applies to debug logging only, it changes nothing."""
    if isinstance(verbosity, bool) or not isinstance(verbosity, (int, np.integer)):
        raise InvalidArgument(f"verbosity must be an integer, found {verbosity!r}")


def check_providers(providers: Sequence[Any] | None, *, stacklevel: int = 4) -> list[str]:
    """The providers a session uses (always the CPU); every other provider asked for warns as
    onnxruntime warns of a provider it does not have (whatever the log severity, as there),
    and the session falls back to the CPU."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or ()]
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgument(f"a provider is a name or (name, options), found {name!r}")
        if name != CPU:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{CPU}'",
                UserWarning,
                stacklevel=stacklevel,
            )
    return [CPU]


def cpu_options(providers: Sequence[Any] | None, provider_options: Any) -> dict[str, str]:
    """The CPU provider's options, from ``(name, options)`` in ``providers`` or from
    ``provider_options`` (one dict per provider), as strings."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or ()]
    given: dict[str, Any] = {}
    for i, p in enumerate(providers or ()):
        if isinstance(p, (tuple, list)) and p[0] == CPU:
            given = dict(p[1])
        elif provider_options and i < len(provider_options) and names[i] == CPU:
            given = dict(provider_options[i])
    return {str(k): str(v) for k, v in given.items()}
