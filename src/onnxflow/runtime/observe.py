"""Watching a run: every node as it runs, and every iteration of every loop body.

An observed run passes events to :class:`Observer` objects:

- ``node_start`` / ``node_end``: a node of some graph is about to run / has run (with its input
  and output values and the seconds it took);
- ``scope_start`` / ``scope_end``: a control-flow node enters / leaves one run of a body: an
  iteration of a Loop, Scan or SequenceMap (the key is the iteration number, ``(batch, t)`` for
  Scan 8) or a branch of an If (the key is ``"then_branch"`` or ``"else_branch"``).

Every event carries the *scope*: the path from the main graph to the body the event happens in,
a tuple of ``(node key, iteration key)`` pairs; ``()`` is the main graph. A node's key is its name,
or its first output's name when it has none (unique, as names are assigned once).

Runs that nobody observes take none of this path: the executor checks once per graph run.
Observed loop bodies run node by node as written (no hoisting), so every value of every
iteration is seen. When no observer wants the events inside bodies (``body_events = False``),
control-flow nodes run their bodies unobserved, compiled as in a run nobody watches: the main
graph's node times are then those of an unobserved run.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from typing import Any

from onnxflow.compile.plan import NodeInfo
from onnxflow.ir import keys

Scope = tuple[tuple[str, Any], ...]


class Observer:
    """Base class of run observers: override the events you need; each does nothing here.

    An observer that sets ``node_events = False`` receives only run and scope events; the run
    then keeps its fast path (generated code, hoisted loop bodies).
    """

    node_events: bool = True
    #: False: only the main graph's events; bodies run as if nobody watched (same speed).
    body_events: bool = True

    def run_start(self) -> None:
        """A run begins."""

    def run_end(self) -> None:
        """A run ended (also when it failed)."""

    def node_start(self, scope: Scope, info: NodeInfo, inputs: Sequence[Any]) -> None:
        """``info``'s node is about to run on ``inputs`` in ``scope``."""

    def node_end(
        self,
        scope: Scope,
        info: NodeInfo,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        seconds: float,
    ) -> None:
        """``info``'s node ran in ``scope`` and produced ``outputs`` (one per node output)."""

    def scope_start(self, scope: Scope, total: int | None) -> None:
        """A body run begins; ``scope[-1]`` is (owner key, iteration); ``total`` if known."""

    def scope_inputs(self, scope: Scope, names: Sequence[str], values: Sequence[Any]) -> None:
        """The formal inputs of the body run just started (iteration number, states, ...)."""

    def scope_end(self, scope: Scope, seconds: float) -> None:
        """A body run ended."""


class Observation:
    """The observers of the current run and the scope the run is in."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        self.node_events = any(o.node_events for o in self.observers)
        self.body_events = any(o.body_events for o in self.observers)
        self.scope: Scope = ()
        self._starts: list[float] = []

    def enter(self, owner: str, key: Any, total: int | None = None) -> None:
        """Enter one run of ``owner``'s body (an iteration or a branch)."""
        self.scope = (*self.scope, (owner, key))
        self._starts.append(time.perf_counter())
        for o in self.observers:
            o.scope_start(self.scope, total)

    def inputs(self, names: Sequence[str], values: Sequence[Any]) -> None:
        """Tell observers the formal inputs of the body run just entered."""
        for o in self.observers:
            o.scope_inputs(self.scope, names, values)

    def leave(self) -> None:
        """Leave the innermost body run."""
        seconds = time.perf_counter() - self._starts.pop()
        for o in self.observers:
            o.scope_end(self.scope, seconds)
        self.scope = self.scope[:-1]


_CURRENT: contextvars.ContextVar[Observation | None] = contextvars.ContextVar(
    "onnxflow_observation", default=None
)
#: The ContextVar holding the observation of the run in progress (what
#: :func:`current_observation` reads).
OBSERVATION = _CURRENT


def current_observation() -> Observation | None:
    """The observation of the run in progress, or None when nobody watches."""
    return _CURRENT.get()


def observe(observers: Sequence[Observer]) -> contextvars.Token[Observation | None]:
    """Start observing the runs made in this context; undo with :func:`stop_observing`."""
    return _CURRENT.set(Observation(observers) if observers else None)


def stop_observing(token: contextvars.Token[Observation | None]) -> None:
    """Restore what was observed before :func:`observe`."""
    _CURRENT.reset(token)


def call_unobserved(fn: Callable[..., Any], inputs: Sequence[Any]) -> Any:
    """``fn(*inputs)`` with nobody observing the bodies it runs."""
    token = _CURRENT.set(None)
    try:
        return fn(*inputs)
    finally:
        _CURRENT.reset(token)


def node_key(info: NodeInfo) -> str:
    """How a node is addressed in scopes and traces: its name, else its first output's name."""
    return keys.node_key(info.name, info.outputs, info.op_type)


def run_in_scope(
    owner: str,
    key: Any,
    total: int | None,
    run: Callable[[Any], Any],
    args: Any,
    names: Sequence[str] | None = None,
) -> Any:
    """``run(args)`` as one run of ``owner``'s body: observers see the scope ``(owner, key)``
    (one of ``total``) entered before and left after, and, given ``names``, the body's formal
    inputs (the first ``len(names)`` of ``args``). Unobserved, just ``run(args)``."""
    observation = _CURRENT.get()
    if observation is None:
        return run(args)
    observation.enter(owner, key, total)
    try:
        if names is not None:
            observation.inputs(names, args[: len(names)])
        return run(args)
    finally:
        observation.leave()
