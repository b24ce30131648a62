"""Compiling a graph (and its subgraphs) into immutable plans.

Kernels are resolved by ``(domain, op_type, opset)`` here, attributes are decoded here, and the
names a subgraph reads from enclosing scopes (its captures) are found here and passed to the
node that owns the subgraph as extra inputs. The executor never looks at an op name.
"""

from __future__ import annotations

import functools
import inspect
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import FunctionProto, GraphProto, NodeProto, TypeProto, numpy_helper

from onnxflow.compile.attributes import decode_attribute
from onnxflow.compile.context import NodeContext
from onnxflow.compile.passes import graph_forms
from onnxflow.compile.passes.fold import fold, frozen, may_fold
from onnxflow.compile.passes.forms import FUSED_DOMAIN
from onnxflow.compile.passes.functions import expand_call, function_for, function_opsets
from onnxflow.compile.passes.half import widen_half
from onnxflow.compile.plan import (
    NONE_SLOT,
    TRASH_SLOT,
    NodeInfo,
    Plan,
    passthrough,
)
from onnxflow.errors import OnnxflowError, UnsupportedOperatorError, ValidationError, where
from onnxflow.ir.walk import scope_types
from onnxflow.ops.registry import REGISTRY, Kernel, Registry, normalize_domain
from onnxflow.traits import Built, Traits, bind_attributes
from onnxflow.values import tensor_to_array


@dataclass
class Compiler:
    """Compiles graphs of one model; collects every unsupported operator before failing."""

    functions: dict[tuple[str, str], FunctionProto] = field(default_factory=dict)
    registry: Registry = REGISTRY
    base_dir: str | None = None
    optimize: bool = True
    loop_condition: str = "spec"
    float16_rounding: str = "each_op"
    missing: list[tuple[str, str, int]] = field(default_factory=list)

    def compile_main(
        self, graph: GraphProto, opsets: dict[str, int], fixed_initializers: bool = False
    ) -> Plan:
        """Compile the main graph; raise UnsupportedOperatorError listing every missing op.

        Give the graph as shape inference returns it: kernels read the static types of their
        inputs from each scope's ``value_info``.

        With ``fixed_initializers``, graph inputs that have an initializer count as constants
        (for runs that do not override them), so what depends on them only can be folded.
        """
        if self.optimize:
            widened = widen_half(graph, opsets, each_op=self.float16_rounding == "each_op")
            if widened is not None:
                graph, opsets = widened, {**opsets, FUSED_DOMAIN: 1}
        builder = _GraphBuilder(self, graph, None, {})
        builder.fixed_initializers = fixed_initializers
        plan = builder.build(opsets)
        if self.missing:
            unique = sorted(set(self.missing))
            listed = ", ".join(f"{where('', op, dom, ver)}" for dom, op, ver in unique)
            raise UnsupportedOperatorError(
                f"the model uses {len(unique)} operator(s) onnxflow does not support: {listed}",
                unique,
            )
        return plan


class _GraphBuilder:
    """Builds one Plan: assigns slots, resolves names, compiles each node."""

    def __init__(
        self,
        compiler: Compiler,
        graph: GraphProto,
        outer: frozenset[str] | None,
        outer_types: Mapping[str, TypeProto],
        outer_constants: Mapping[str, Any] | None = None,
    ) -> None:
        self.compiler = compiler
        self.graph = graph
        self.outer = outer
        #: The enclosing scopes' constants (with optimize): read here, they are constants of
        #: this graph too, so what reads only them folds here as well.
        self.outer_constants: Mapping[str, Any] = outer_constants or {}
        #: Types of the values this graph may read: its own declarations, then its enclosing
        #: scopes' (lexical scoping: a sibling graph's types never leak in).
        self.types: Mapping[str, TypeProto] = ChainMap(scope_types(graph), outer_types)
        self.slots: dict[str, int] = {}
        self.slot_names: list[str] = ["<none>", "<omitted>"]
        self.template: list[Any] = [None, None]
        self.constant_slots: set[int] = set()
        self.captures: list[str] = []
        self.input_slots: set[int] = set()
        self.fixed_initializers = False
        self.steps: list[tuple[Callable[..., Any], tuple[int, ...], Any]] = []
        self.traits: list[Traits] = []
        self.infos: list[NodeInfo] = []
        self.children: list[tuple[int, Plan]] = []

    # -- slots -------------------------------------------------------------------------------
    def _new_slot(self, name: str, value: Any = None) -> int:
        self.slots[name] = len(self.template)
        self.slot_names.append(name)
        self.template.append(value)
        return self.slots[name]

    def resolve(self, name: str) -> int:
        """Return the slot of a name read by a node, capturing it from an outer scope if needed."""
        if not name:
            return NONE_SLOT
        slot = self.slots.get(name)
        if slot is not None:
            return slot
        if self.outer is not None and name in self.outer:
            if name in self.outer_constants:
                slot = self._new_slot(name, self.outer_constants[name])
                self.constant_slots.add(slot)
                return slot
            self.captures.append(name)
            return self._new_slot(name)
        raise ValidationError(
            f"graph {self.graph.name!r}: name {name!r} is read but never defined "
            "(not a graph input, initializer, earlier node output or outer-scope value)"
        )

    def visible(self) -> frozenset[str]:
        """Names a subgraph compiled now may read from this scope and its enclosing ones."""
        return frozenset(self.slots) | (self.outer or frozenset())

    def visible_constants(self) -> Mapping[str, Any]:
        """The constants of this scope (never an input the caller may feed) and of its
        enclosing ones, by name, as a subgraph compiled now may read them."""
        own = {
            name: self.template[slot]
            for name, slot in self.slots.items()
            if slot in self.constant_slots and slot not in self.input_slots
        }
        return ChainMap(own, self.outer_constants) if self.outer_constants else own

    # -- what a NodeContext reads (BuildScope) ------------------------------------------------
    @property
    def optimize(self) -> bool:
        """Whether kernels may restructure work (SessionOptions' graph optimization)."""
        return self.compiler.optimize

    @property
    def loop_condition(self) -> str:
        """SessionOptions.loop_condition."""
        return self.compiler.loop_condition

    def constant(self, name: str) -> Any:
        """The value of ``name`` when it is a constant of this graph (never an input the
        caller may feed); None otherwise."""
        slot = self.slots.get(name)
        if slot is None or slot not in self.constant_slots or slot in self.input_slots:
            return None
        return self.template[slot]

    # -- build -------------------------------------------------------------------------------
    def build(self, opsets: dict[str, int]) -> Plan:
        inputs = [vi.name for vi in self.graph.input]
        self.input_slots = {self._new_slot(name) for name in inputs}
        for init in self.graph.initializer:
            value = tensor_to_array(init, self.compiler.base_dir)
            value.flags.writeable = False  # shared by every run: never handed out writable
            slot = self.slots.get(init.name)
            if slot is None:
                slot = self._new_slot(init.name, value)
            self.template[slot] = value
            self.constant_slots.add(slot)
        if self.fixed_initializers:
            self.input_slots -= self.constant_slots
        for init in self.graph.sparse_initializer:
            value = _sparse_to_dense(init)
            value.flags.writeable = False
            self.constant_slots.add(self._new_slot(init.values.name, value))
        nodes: Sequence[NodeProto] = self.graph.node
        if self.compiler.optimize:
            nodes, extra = graph_forms(self.graph, opsets)
            opsets = {**opsets, **extra}
        for node in nodes:
            self.compile_node(node, opsets)
        outputs = [vi.name for vi in self.graph.output]
        output_slots = tuple(self.resolve(name) for name in outputs)
        arg_slots = tuple(self.slots[n] for n in inputs) + tuple(
            self.slots[c] for c in self.captures
        )
        steps = _with_frees(self.steps, set(output_slots), len(self.template))
        return Plan(
            graph_name=self.graph.name,
            template=tuple(self.template),
            input_names=tuple(inputs),
            capture_names=tuple(self.captures),
            arg_slots=arg_slots,
            output_names=tuple(outputs),
            output_slots=output_slots,
            steps=steps,
            traits=tuple(self.traits),
            infos=tuple(self.infos),
            slot_names=tuple(self.slot_names),
            constant_slots=frozenset(self.constant_slots),
            children=tuple(self.children),
        )

    def compile_subgraph(
        self, graph: GraphProto, opsets: dict[str, int], declared: GraphProto | None = None
    ) -> Plan:
        types = self.types
        if declared is not None:
            types = ChainMap(scope_types(declared), types)
        constants = self.visible_constants() if self.compiler.optimize else None
        return _GraphBuilder(self.compiler, graph, self.visible(), types, constants).build(opsets)

    def compile_node(self, node: NodeProto, opsets: dict[str, int]) -> None:
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain)
        if opset is None:
            raise ValidationError(
                f"{where(node.name, node.op_type, domain, None)}: domain "
                f"{domain or 'ai.onnx'!r} is not in the opset imports {sorted(opsets)}"
            )
        try:
            kernel = self.compiler.registry.lookup(domain, node.op_type, opset)
            if kernel is None:
                self._expand_or_record(node, domain, opset, opsets)
                return
            fn, traits, ins, plans = self._bind(kernel, node, opset, opsets)
        except OnnxflowError:
            raise
        except Exception as exc:  # a kernel's preparation failed on this node's attributes
            raise ValidationError(
                f"{where(node.name, node.op_type, domain, opset)} in graph {self.graph.name!r}"
                f" cannot be compiled: {type(exc).__name__}: {exc}"
            ) from exc
        outs = self._define_outputs(node)
        multi = traits.several or returns_several(node, domain, opset)
        if self._fold(fn, traits, node, ins, outs, multi):
            return
        out: Any = outs if multi else outs[0]
        self.children.extend((len(self.steps), plan) for plan in plans)
        self.steps.append((fn, tuple(ins), out))
        self.traits.append(traits)
        self.infos.append(
            NodeInfo(node.name, node.op_type, domain, opset, tuple(node.input), tuple(node.output))
        )

    def _fold(
        self,
        fn: Callable[..., Any],
        traits: Traits,
        node: NodeProto,
        ins: list[int],
        outs: tuple[int, ...],
        multi: bool,
    ) -> bool:
        """Compute now a node that reads only this graph's constants (:mod:`.passes.fold`);
        False leaves it to run time."""
        constant = all(
            s == NONE_SLOT or (s in self.constant_slots and s not in self.input_slots) for s in ins
        )
        if not (self.compiler.optimize and may_fold(traits, node, constant)):
            return False
        values = fold(fn, [self.template[s] for s in ins], len(outs), multi)
        if values is None:
            return False
        for slot, value in zip(outs, values):
            if slot != TRASH_SLOT:
                self.template[slot] = frozen(value)
                self.constant_slots.add(slot)
        return True

    def _expand_or_record(
        self, node: NodeProto, domain: str, opset: int, opsets: dict[str, int]
    ) -> None:
        """Compile a function call as its body's nodes, or record the operator as missing."""
        compiler = self.compiler
        body = function_for(node, domain, opset, compiler.functions, self.types)
        if body is None:
            compiler.missing.append((domain, node.op_type, opset))
            self._define_outputs(node)
            return
        body_opsets = function_opsets(body, opsets)
        for inner in expand_call(node, body):
            self.compile_node(inner, body_opsets)

    def _bind(
        self, kernel: Kernel, node: NodeProto, opset: int, opsets: dict[str, int]
    ) -> tuple[Callable[..., Any], Traits, list[int], list[Plan]]:
        """Return the step function of a node, its traits, the slots it reads (captures last)
        and the plans of its subgraphs."""
        attrs = {a.name: decode_attribute(a) for a in node.attribute if not a.ref_attr_name}
        ins = [self.resolve(name) for name in node.input]
        if kernel.build:
            ctx = NodeContext(self, node, opset, opsets, kernel.traits)
            try:
                fn = kernel.fn(ctx, **attrs)
            except TypeError as exc:
                raise ctx.error(f"bad attributes {sorted(attrs)}: {exc}") from exc
            fn, traits = fn if isinstance(fn, Built) else (fn, kernel.traits)
            return fn, traits, ins + [self.resolve(name) for name in ctx.captures], ctx.plans
        if kernel.traits.passthrough and len(ins) == 1 and len(node.output) == 1:
            return passthrough, kernel.traits, ins, []
        fn = _bind_plain(kernel.fn, attrs, node, opset)
        return fn, bind_attributes(kernel.traits.replace(passthrough=False), attrs), ins, []

    def _define_outputs(self, node: NodeProto) -> tuple[int, ...]:
        slots = []
        for name in node.output:
            if not name:
                slots.append(TRASH_SLOT)
            elif name in self.slots:
                raise ValidationError(
                    f"{where(node.name, node.op_type, node.domain, None)} in graph "
                    f"{self.graph.name!r}: output {name!r} is already defined"
                )
            else:
                slots.append(self._new_slot(name))
        return tuple(slots) or (TRASH_SLOT,)


def _bind_plain(
    fn: Callable[..., Any], attrs: dict[str, Any], node: NodeProto, opset: int
) -> Callable[..., Any]:
    if not attrs:
        return fn
    try:
        inspect.signature(fn).bind_partial(**attrs)
    except TypeError as exc:
        raise ValidationError(
            f"{where(node.name, node.op_type, node.domain, opset)}: unexpected attribute(s) "
            f"{sorted(attrs)}: {exc}"
        ) from exc
    return functools.partial(fn, **attrs)


def returns_several(node: NodeProto, domain: str, opset: int) -> bool:
    """Whether the kernel of ``node`` returns a tuple of outputs: the node lists several, or
    its schema allows several (a node listing fewer takes the first ones)."""
    if len(node.output) > 1:
        return True
    try:
        return onnx.defs.get_schema(node.op_type, opset, domain).max_output > 1
    except onnx.defs.SchemaError:
        return False


def _with_frees(
    steps: Iterable[tuple[Any, tuple[int, ...], Any]], keep: set[int], n_slots: int
) -> tuple[tuple[Any, ...], ...]:
    """Attach to each step the slots whose value is not needed after it."""
    steps = list(steps)
    last: dict[int, int] = {}
    for i, (_, ins, out) in enumerate(steps):
        for s in (out,) if out.__class__ is int else out:
            last.setdefault(s, i)
            last[s] = max(last[s], i)
        for s in ins:
            last[s] = i
    frees: list[list[int]] = [[] for _ in steps]
    for slot, i in last.items():
        if slot not in keep and slot not in (NONE_SLOT, TRASH_SLOT) and slot < n_slots:
            frees[i].append(slot)
    return tuple((fn, ins, out, tuple(frees[i])) for i, (fn, ins, out) in enumerate(steps))


def _sparse_to_dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), tuple(sparse.dims))
    dense.reshape(-1)[indices] = values
    return dense
