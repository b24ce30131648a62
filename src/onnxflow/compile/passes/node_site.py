"""What a node pass reads (:class:`NodeSite`) and makes (:class:`Inlined`, :class:`Computed`).

A node pass runs on each node as the compiler meets it, first before its kernel is bound (only
when no kernel serves it: :attr:`NodeSite.kernel` is None) and again once its step is bound
(:attr:`NodeSite.step`). It returns what the node becomes, or None to leave it to the passes
after it and then to the compiler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx.defs
from onnx import FunctionProto, NodeProto, TypeProto

from onnxflow.ops.registry import Kernel
from onnxflow.traits import Traits


@dataclass(frozen=True)
class NodeStep:
    """A node's bound step: its function and traits, and what folding it would need."""

    fn: Callable[..., Any]
    traits: Traits
    #: The values of the inputs it reads when every one is omitted or a constant of its
    #: graph; None when one is not.
    constant_args: Sequence[Any] | None
    n_outputs: int
    #: The function returns a tuple of outputs.
    several: bool


@dataclass(frozen=True)
class NodeSite:
    """One node where the compiler meets it: its operator resolved once (schema, kernel), the
    scope's opsets, value types and model-local functions, and its step once bound."""

    node: NodeProto
    domain: str
    opset: int
    opsets: Mapping[str, int]
    schema: onnx.defs.OpSchema | None
    kernel: Kernel | None
    types: Mapping[str, TypeProto]
    functions: Mapping[tuple[str, str], FunctionProto]
    step: NodeStep | None = None


@dataclass(frozen=True)
class Inlined:
    """The node is compiled as these ``nodes`` instead, under ``opsets``."""

    nodes: Sequence[NodeProto]
    opsets: dict[str, int]


@dataclass(frozen=True)
class Computed:
    """The node's outputs are these values, computed now: constants of the plan."""

    values: tuple[Any, ...]


#: A node pass: what the node becomes, or None when the pass leaves it.
NodePass = Callable[[NodeSite], "Inlined | Computed | None"]
