"""onnxflow's diagnostics: the ``onnxflow`` logger, with onnxruntime's severities mapped onto
:mod:`logging` levels.

onnxruntime counts severities 0 verbose, 1 info, 2 warning, 3 error, 4 fatal; here they are
``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` and ``CRITICAL``. The process default is the level of
the ``onnxflow`` logger (:func:`set_severity`, which ``set_default_logger_severity`` is), and
until someone sets one, the effective level logging gives it (the root logger's: WARNING, 2, as
in onnxruntime, unless the application says otherwise); a session or a run with a
``log_severity_level`` of its own logs through a :class:`SeverityLog` that applies that level
instead, as onnxruntime's per-session loggers do (-1: the default).

What a session logs: at INFO, what it loaded and how long loading, validating and compiling
took; at DEBUG (verbose), the plan it compiled. Where the records go is the application's
choice, as for any library: importing onnxflow adds a ``NullHandler`` to its logger and sets
no level, so ``logging.basicConfig(level=logging.INFO)`` shows them on stderr, and a level
set on ``logging.getLogger("onnxflow")`` before or after the import is kept.
Things a caller should change are Python warnings (:mod:`warnings`), not log records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from onnxflow.errors import InputError

#: The ``onnxflow`` logger: every diagnostic of the package goes through it or its children.
logger = logging.getLogger("onnxflow")
# A library leaves output and level to the application (logging's HOWTO, "Configuring
# Logging for a Library"): a NullHandler, no level. Unset, the logger's effective level is the
# root logger's: WARNING (onnxruntime's default severity, 2) until the application says else.
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())

#: onnxruntime's severities as logging levels.
SEVERITY_LEVELS: Mapping[int, int] = {
    0: logging.DEBUG,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.CRITICAL,
}

#: A severity of -1 defers to the process default (onnxruntime's meaning for sessions and runs).
DEFAULT = -1


def level_of(severity: int) -> int:
    """The logging level of an onnxruntime severity (``NOTSET`` for -1, the default)."""
    if severity == DEFAULT:
        return logging.NOTSET
    if isinstance(severity, bool) or severity not in SEVERITY_LEVELS:
        raise InputError(
            "log_severity_level must be -1 (the default) or one of 0 verbose, 1 info, "
            f"2 warning, 3 error, 4 fatal; found {severity!r}"
        )
    return SEVERITY_LEVELS[severity]


def severity_of(level: int) -> int:
    """The onnxruntime severity of a logging level (the nearest one at or below it)."""
    return max((s for s, lv in SEVERITY_LEVELS.items() if lv <= level), default=0)


def set_severity(severity: int) -> None:
    """Set the process's default severity: the ``onnxflow`` logger's level."""
    if severity == DEFAULT:
        raise InputError("the default severity must be one of 0 .. 4, found -1")
    logger.setLevel(level_of(severity))


def get_severity() -> int:
    """The process's default severity: that of the ``onnxflow`` logger's effective level (its
    own once set, else its ancestors': 2, warning, under logging's defaults)."""
    return severity_of(logger.getEffectiveLevel())


def show_on_stderr(name: str = "onnxflow", level: int = logging.INFO) -> logging.Handler:
    """Show the records of logger ``name`` from ``level`` up on stderr, one message a line: for
    onnxflow's own commands, which are applications. Calling it again changes nothing."""
    target = logging.getLogger(name)
    for handler in target.handlers:
        if getattr(handler, "onnxflow_stderr", False):
            return handler
    handler = logging.StreamHandler()  # the stderr of the moment
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.onnxflow_stderr = True  # type: ignore[attr-defined]
    target.addHandler(handler)
    target.setLevel(level)
    target.propagate = False  # shown once, not again by the application's root handlers
    return handler


#: The level names ``--log-level`` takes, and onnxruntime's severities as text.
LEVEL_NAMES: Mapping[str, int] = {
    **{name: getattr(logging, name.upper()) for name in ("debug", "info", "warning", "error")},
    "critical": logging.CRITICAL,
    **{str(severity): level for severity, level in SEVERITY_LEVELS.items()},
}


def parse_level(text: str) -> int:
    """The logging level named by ``text``: ``debug`` .. ``critical`` (any case), or an
    onnxruntime severity ``0`` .. ``4``; an :class:`InputError` listing them otherwise."""
    level = LEVEL_NAMES.get(text.strip().lower())
    if level is None:
        names = ", ".join(n for n in LEVEL_NAMES if not n.isdigit())
        raise InputError(f"unknown log level {text!r}: give one of {names}, or 0 .. 4")
    return level


@contextmanager
def logging_to_stderr(level: int) -> Iterator[logging.Handler]:
    """While the block runs, show the ``onnxflow`` logger's records from ``level`` up on
    stderr, as ``LEVEL name: message``; then put its level, handlers and propagation back (a
    command run in-process, as the tests do, leaves the logger as it found it)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # shown once, not again by a root handler
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


class SeverityLog(logging.LoggerAdapter):
    """Logs through ``logger`` at an onnxruntime severity of its own (-1: the logger's own
    level), naming what it logs for (a session's ``logid``) in each record's ``logid``."""

    def __init__(self, severity: int = DEFAULT, logid: str = "", base: logging.Logger = logger):
        super().__init__(base, {"logid": logid})
        self.level = level_of(severity)
        self.logid = logid

    def isEnabledFor(self, level: int) -> bool:  # logging's own name for it
        """Whether a record at ``level`` would be logged."""
        if self.level:
            return level >= self.level and not self.logger.disabled
        return self.logger.isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        """Prefix the message with the log id, as onnxruntime does."""
        kwargs.setdefault("extra", {}).update(self.extra)
        return (f"[{self.logid}] {msg}" if self.logid else msg), kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Log at ``level`` if this log's own severity lets it through (the logger's level
        does not filter again when the severity is the log's own)."""
        if not self.isEnabledFor(level):
            return
        msg, kwargs = self.process(msg, kwargs)
        if not self.level:
            self.logger.log(level, msg, *args, stacklevel=2, **kwargs)
            return
        path, line, func, _ = self.logger.findCaller(stacklevel=2)
        record = self.logger.makeRecord(
            self.logger.name, level, path, line, msg, args, kwargs.get("exc_info"), func,
            kwargs.get("extra"),
        )  # fmt: skip
        self.logger.handle(record)
