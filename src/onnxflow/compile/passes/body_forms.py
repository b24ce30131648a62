"""What a loop-body pass reads (:class:`BodyFacts`) and makes (:class:`BodyForms`).

A loop-body pass is a function ``(forms, facts) -> BodyForms | None``: the body as the passes
before it left it, and what is known about it, give new forms, or None when the pass changes
nothing. :data:`onnxflow.compile.passes.PIPELINE` lists them, in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from onnx import GraphProto

from onnxflow.ops.registry import Registry


@dataclass(frozen=True)
class BodyFacts:
    """What the passes may know about a loop body besides its graph."""

    #: The body inputs that take one element of a scanned sequence each iteration (none for Loop).
    element_inputs: tuple[str, ...]
    #: A value's static rank, when known.
    rank: Callable[[str], int | None]
    #: The ai.onnx opset of the loop node's scope.
    opset: int
    #: The kernels the compiler compiles with (what an op promises: ``traits_of``).
    registry: Registry


@dataclass(frozen=True)
class BodyForms:
    """A loop body split into what runs once and what runs each iteration.

    ``pre`` (None when nothing moved) runs once before the first iteration: its formal inputs
    are the whole scanned sequences, time first, under the body's element input names, and its
    outputs the ``invariants`` then the ``batched`` values (whole sequences). ``body`` runs each
    iteration: it takes the body's own inputs, then one row per batched value, then the
    invariants. ``opsets`` are the domains ``body`` uses beyond the loop node's (fused kernels').
    """

    body: GraphProto
    pre: GraphProto | None = None
    invariants: tuple[str, ...] = ()
    batched: tuple[str, ...] = ()
    opsets: Mapping[str, int] = field(default_factory=dict)


#: A loop-body pass: new forms, or None when it changes nothing.
BodyPass = Callable[[BodyForms, BodyFacts], "BodyForms | None"]
