"""What a builder kernel sees of its node at compile time: :class:`NodeContext`.

Kernels (``ops/``) import this module, never the compiler: the compiler's graph builder
implements :class:`BuildScope`, and each node it compiles with a builder kernel gets a
:class:`NodeContext` over it.
"""

from __future__ import annotations

import os
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from onnx import GraphProto, NodeProto, TypeProto

from onnxflow.compile.passes.body_forms import BodyForms
from onnxflow.compile.plan import Plan, Subgraph
from onnxflow.errors import ValidationError, where
from onnxflow.ir.dims import static_shape
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.keys import node_key
from onnxflow.ir.walk import scope_types
from onnxflow.traits import NONE, Traits


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity here (macOS, Windows)
        return max(1, os.cpu_count() or 1)


class BuildScope(Protocol):
    """The scope a node is compiled in, as its :class:`NodeContext` reads it."""

    graph: GraphProto
    #: The static types of the values this scope may read (its own, then its enclosing ones').
    types: Mapping[str, TypeProto]

    @property
    def optimize(self) -> bool:
        """Whether kernels may restructure work."""

    @property
    def loop_condition(self) -> str:
        """SessionOptions.loop_condition."""

    @property
    def threads(self) -> int:
        """SessionOptions.intra_op_num_threads."""

    def constant(self, name: str) -> Any:
        """The value of ``name`` when it is a constant of this scope (None otherwise)."""

    def compile_subgraph(
        self, graph: GraphProto, opsets: dict[str, int], declared: GraphProto | None = None
    ) -> Plan:
        """Compile a subgraph of this scope into its plan."""

    def compile_later(
        self, graph: GraphProto, opsets: dict[str, int], declared: GraphProto | None = None
    ) -> Callable[[], Plan]:
        """What compiles a subgraph of this scope, as it would compile now, when called."""

    def loop_body_forms(
        self, graph: GraphProto, element_inputs: Sequence[str], opsets: dict[str, int]
    ) -> BodyForms | None:
        """A loop body as the pipeline's loop-body passes rewrite it (None: unchanged)."""


class NodeContext:
    """What a builder kernel may know and do about its node at compile time."""

    def __init__(
        self,
        scope: BuildScope,
        node: NodeProto,
        opset: int,
        opsets: dict[str, int],
        traits: Traits = NONE,
    ) -> None:
        self._scope = scope
        #: The traits the kernel is registered with; a builder refines them in its Built.
        self.traits = traits
        self.name = node.name
        self.op_type = node.op_type
        self.domain = normalize_domain(node.domain)
        self.opset = opset
        self.opsets = opsets
        self.inputs = tuple(node.input)
        self.outputs = tuple(node.output)
        self.captures: list[str] = []
        #: The plans of the subgraphs compiled for this node.
        self.plans: list[Plan] = []

    @property
    def key(self) -> str:
        """How observers and traces address this node: its name, else its first output's."""
        return node_key(self.name, self.outputs, self.op_type)

    @property
    def n_inputs(self) -> int:
        """Number of inputs the node lists (omitted ones as ``""`` included)."""
        return len(self.inputs)

    @property
    def n_outputs(self) -> int:
        """Number of outputs the node lists (omitted ones as ``""`` included)."""
        return len(self.outputs)

    def constant(self, i: int) -> Any:
        """Input ``i``'s value when it is a constant of this node's graph (an initializer or a
        folded value no feed may replace), else None (fed at run time, or omitted)."""
        name = self.inputs[i] if i < len(self.inputs) else ""
        return self._scope.constant(name) if name else None

    def input_type(self, i: int) -> TypeProto | None:
        """Return the statically known type of input ``i``, if shape inference found one."""
        if i >= len(self.inputs) or not self.inputs[i]:
            return None
        return self._scope.types.get(self.inputs[i])

    def input_shape(self, i: int) -> tuple[int | str | None, ...] | None:
        """Return input ``i``'s static shape (dims int, dimension variable or None), if known:
        a ``dim_param`` that is not an identifier (``"?"``) relates to nothing and reads None.

        From the value when the input is a constant of this graph, else from shape inference.
        """
        name = self.inputs[i] if i < len(self.inputs) else ""
        if name:
            value = self._scope.constant(name)
            if value is not None:
                return value.shape if isinstance(value, np.ndarray) else None
        tp = self.input_type(i)
        return None if tp is None else static_shape(tp)

    def value_type(self, name: str) -> TypeProto | None:
        """Return the statically known type of a value in this node's scope, if inference found
        one."""
        return self._scope.types.get(name)

    def opset_of(self, domain: str) -> int:
        """Return the opset this node's scope imports for ``domain`` (0 when not imported)."""
        return self.opsets.get(normalize_domain(domain), 0)

    @property
    def optimize(self) -> bool:
        """Whether kernels may restructure work (e.g. hoist loop-invariant nodes out of bodies)."""
        return self._scope.optimize

    @property
    def loop_condition(self) -> str:
        """SessionOptions.loop_condition: ``"spec"`` or ``"always"``."""
        return self._scope.loop_condition

    @property
    def threads(self) -> int:
        """The most threads a compiled kernel of this node may run on: the session's
        ``intra_op_num_threads``; 0 (its default) leaves it to the kernel, within the CPUs
        this process may use (:func:`usable_cpus`) and those the machine's load leaves idle."""
        return max(0, int(getattr(self._scope, "threads", 0) or 0))

    @property
    def graph(self) -> GraphProto:
        """The graph this node is in, for a kernel whose meaning depends on its siblings (the
        block size of NCHWc weights is the whole model's)."""
        return self._scope.graph

    def describe(self) -> str:
        """Return the standard description used at the start of error messages."""
        return where(self.name, self.op_type, self.domain, self.opset)

    def error(self, message: str) -> ValidationError:
        """Return a validation error about this node."""
        return ValidationError(f"{self.describe()}: {message}")

    def types_in(self, graph: GraphProto) -> Mapping[str, TypeProto]:
        """The static types of the values a subgraph of this node may read: its own
        declarations, then this node's scope's."""
        return ChainMap(scope_types(graph), self._scope.types)

    def subgraph(
        self,
        graph: GraphProto,
        extra_opsets: dict[str, int] | None = None,
        *,
        declared: GraphProto | None = None,
    ) -> Subgraph:
        """Compile a subgraph attribute once; its outer-scope reads become this node's captures.

        ``extra_opsets``: domains the subgraph may use beyond the node's (a rewrite's own);
        ``declared``: the graph whose declarations type the values (by default ``graph``; for
        a rewrite of a body, the body as written, whose values keep their names and types).
        """
        opsets = {**self.opsets, **extra_opsets} if extra_opsets else self.opsets
        plan = self._scope.compile_subgraph(graph, opsets, declared)
        self.plans.append(plan)
        positions = []
        for name in plan.capture_names:
            if name not in self.captures:
                self.captures.append(name)
            positions.append(self.captures.index(name))
        return Subgraph(plan, tuple(positions))

    def loop_body_forms(self, graph: GraphProto, element_inputs: Sequence[str]) -> BodyForms | None:
        """``graph``, this node's loop body, as the compile pipeline's loop-body passes rewrite
        it (:mod:`onnxflow.compile.passes`), or None when none changes it (or the session does
        not optimize). ``element_inputs``: the body inputs that take one element of a scanned
        sequence each iteration (none for Loop)."""
        return self._scope.loop_body_forms(graph, element_inputs, self.opsets)

    def subgraph_later(self, graph: GraphProto) -> Callable[[], Subgraph]:
        """What compiles ``graph``, a subgraph attribute, when called, as :meth:`subgraph`
        would now; it may read only outer-scope values this node already captures (those of
        the other subgraphs compiled for it)."""
        compile_plan, captures = self._scope.compile_later(graph, self.opsets), self.captures

        def compiled() -> Subgraph:
            plan = compile_plan()
            return Subgraph(plan, tuple(captures.index(name) for name in plan.capture_names))

        return compiled
