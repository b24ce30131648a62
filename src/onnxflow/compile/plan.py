"""The immutable execution plan a graph compiles into.

A plan holds value slots (a frame is a list indexed by slot), the constants that fill a fresh
frame, and one step per node. Slot 0 always holds ``None`` and stands for an omitted optional
input; slot 1 receives omitted outputs. A step is a plain tuple so the executor's loop stays tight:

``(fn, input_slots, output_slot_or_slots, slots_to_free)``

where the third field is an ``int`` for a single-output node and a tuple otherwise: read it
with :func:`out_slots` and :func:`returns_one`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from onnxflow.traits import Traits

NONE_SLOT = 0
TRASH_SLOT = 1


def passthrough(value: Any) -> Any:
    """The step function of a kernel registered as passthrough: its output is its input."""
    return value


def many(result: Any, n: int) -> tuple[Any, ...]:
    """Return exactly ``n`` outputs from a kernel result (a tuple, or one value)."""
    if result.__class__ is tuple:
        if len(result) == n:
            return result
        return (result + (None,) * n)[:n]
    return (result, *((None,) * (n - 1)))


def out_slots(out: int | tuple[int, ...]) -> tuple[int, ...]:
    """The slots a step writes, from its third field (one slot, or a tuple of slots)."""
    return (out,) if out.__class__ is int else out  # type: ignore[return-value]


def returns_one(out: int | tuple[int, ...]) -> bool:
    """Whether a step's kernel returns its one output itself (its third field is one slot)
    rather than a tuple for :func:`many` to spread over the slots."""
    return out.__class__ is int


def out_values(result: Any, out: int | tuple[int, ...]) -> tuple[Any, ...]:
    """A step's kernel ``result`` as one value per slot of :func:`out_slots`."""
    return (result,) if out.__class__ is int else many(result, len(out))  # type: ignore[arg-type]


@dataclass(frozen=True)
class NodeInfo:
    """What error messages, traces and profiles say about one step."""

    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Plan:
    """A compiled graph: run it with :func:`onnxflow.runtime.executor.execute`.

    ``arg_slots`` are filled from the call's arguments: the graph's formal inputs first, then the
    values captured from enclosing scopes (``capture_names``), in that order. A plan is
    immutable and compared by identity: what is made from it to run it (generated functions)
    is cached outside it, by the runtime.
    """

    graph_name: str
    template: tuple[Any, ...]
    input_names: tuple[str, ...]
    capture_names: tuple[str, ...]
    arg_slots: tuple[int, ...]
    output_names: tuple[str, ...]
    output_slots: tuple[int, ...]
    steps: tuple[tuple[Any, ...], ...]
    #: What each step's kernel promises (:class:`~onnxflow.traits.Traits`), step by step.
    traits: tuple[Traits, ...]
    infos: tuple[NodeInfo, ...]
    slot_names: tuple[str, ...]
    constant_slots: frozenset[int] = field(default_factory=frozenset)
    #: The subgraphs compiled for the steps, as (step index, plan): a loop's body (and the
    #: forms the passes made of it), both branches of an If.
    children: tuple[tuple[int, Plan], ...] = ()

    @property
    def n_inputs(self) -> int:
        """Number of formal inputs (captures not included)."""
        return len(self.input_names)


@dataclass(frozen=True)
class Subgraph:
    """A compiled subgraph and where its captures sit in the owning node's captured values."""

    plan: Plan
    positions: tuple[int, ...]

    def bind(self, captured: tuple[Any, ...] | list[Any]) -> list[Any]:
        """Pick this subgraph's captured values out of the owning node's captured values."""
        return [captured[i] for i in self.positions]


@dataclass(frozen=True)
class Layout:
    """Where a body plan's per-iteration values sit among its arguments and outputs.

    Arguments: ``(i, cond)`` first when ``counter`` (Loop), then ``n_states`` loop-carried
    values, then ``n_indexed`` values read as row ``i`` of a sequence (Scan's elements, batched
    rows, SequenceMap's inputs), then values fixed for the whole loop. Outputs: the condition
    first when ``counter``, then the new loop-carried values, then one value per scan output.
    """

    counter: bool
    n_states: int
    n_indexed: int


@dataclass(frozen=True, eq=False)
class LoopPlan:
    """What the runtime's one loop engine (:mod:`onnxflow.runtime.loop`) needs to run the
    iterations of a Loop, Scan or SequenceMap node.

    ``body`` runs each iteration after the passes moved work out of it into ``pre`` (run once
    before the first iteration, on the whole scanned sequences: its first ``n_invariants``
    outputs are fixed values, the others whole sequences read a row per iteration); ``plain``
    is the body as written, which observed runs step through node by node. ``body.plan``'s
    arguments follow ``layout`` (with ``pre``'s rows after the node's own indexed values, and
    its invariants before the captures).
    """

    label: str
    key: str
    layout: Layout
    body: Subgraph
    pre: Subgraph | None = None
    n_invariants: int = 0
    #: What compiles the body as written, when the passes changed it (None: ``body`` is it).
    compile_as_written: Callable[[], Subgraph] | None = None

    @functools.cached_property
    def plain(self) -> Subgraph:
        """The body as written, node by node: what runs watched by node observers, who see
        every node of every iteration as the model has it.

        When the passes changed the body it is compiled here, once, at the first observed run:
        observed runs are rare, and compiling it with the loop would double the compile time of
        every loop whose body the passes change.
        """
        if self.compile_as_written is None:
            return self.body
        with _COMPILING:
            if "plain" not in self.__dict__:
                self.__dict__["plain"] = self.compile_as_written()
            return self.__dict__["plain"]


#: Held while a loop's body as written compiles: two runs observed at once compile it once.
_COMPILING = threading.Lock()
