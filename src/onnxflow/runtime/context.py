"""The state of the run in progress, visible to long-running kernels (loops) without threading
it through every call: whether the caller asked to terminate.

The test of that request is written once, here (:data:`STOP_REQUESTED`): generated code embeds
its text before every step and loop iteration, the interpreter and the loop engine call
:func:`stop_requested`, made from the same text.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from onnxflow.errors import CancelledError

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("onnxflow_run_options", default=None)
#: The ContextVar holding the current run's options (what :func:`current_run_options` reads).
RUN_OPTIONS = _CURRENT


#: Whether the caller asked the run to stop, as the source of an expression over ``options``
#: (the run's RunOptions, or None when it has none).
STOP_REQUESTED = "options is not None and options.terminate"

#: :data:`STOP_REQUESTED` as a function of the run's options.
stop_requested: Callable[[Any], bool] = eval(f"lambda options: {STOP_REQUESTED}")


def set_run_options(options: Any) -> contextvars.Token[Any]:
    """Make ``options`` (a RunOptions or None) the current run's options."""
    return _CURRENT.set(options)


def reset_run_options(token: contextvars.Token[Any]) -> None:
    """Restore the run options that were current before :func:`set_run_options`."""
    _CURRENT.reset(token)


def current_run_options() -> Any:
    """Return the current run's options, or None outside a run."""
    return _CURRENT.get()


def cancelled(where: str) -> CancelledError:
    """The one error of a run that RunOptions.terminate stopped; ``where`` says where, as in
    "in graph 'g' before Neg 'n3'" (a loop adds its node and iteration)."""
    return CancelledError(f"run terminated by RunOptions.terminate {where}".rstrip())


def before_step(graph_name: str, info: Any) -> str:
    """Where a run stopped: in graph ``graph_name`` before the step of ``info`` (a NodeInfo),
    for :func:`cancelled`."""
    return f"in graph {graph_name!r} before {info.op_type} {info.name!r}"
