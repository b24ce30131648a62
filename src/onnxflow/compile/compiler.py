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
    Subgraph,
    passthrough,
)
from onnxflow.errors import OnnxflowError, UnsupportedOperatorError, ValidationError, where
from onnxflow.ir.dims import static_shape
from onnxflow.ir.walk import scope_types
from onnxflow.ops.registry import REGISTRY, Kernel, Registry, normalize_domain
from onnxflow.traits import NONE, Built, Traits, bind_attributes
from onnxflow.values import tensor_to_array


class NodeContext:
    """What a builder kernel may know and do about its node at compile time."""

    def __init__(
        self,
        builder: _GraphBuilder,
        node: NodeProto,
        opset: int,
        opsets: dict[str, int],
        traits: Traits = NONE,
    ) -> None:
        self._builder = builder
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
        return self.name or next((o for o in self.outputs if o), self.op_type)

    @property
    def n_inputs(self) -> int:
        """Number of inputs the node lists (omitted ones as ``""`` included)."""
        return len(self.inputs)

    @property
    def n_outputs(self) -> int:
        """Number of outputs the node lists (omitted ones as ``""`` included)."""
        return len(self.outputs)

    def input_type(self, i: int) -> TypeProto | None:
        """Return the statically known type of input ``i``, if shape inference found one."""
        if i >= len(self.inputs) or not self.inputs[i]:
            return None
        return self._builder.types.get(self.inputs[i])

    def input_shape(self, i: int) -> tuple[int | str | None, ...] | None:
        """Return input ``i``'s static shape (dims int, dimension variable or None), if known:
        a ``dim_param`` that is not an identifier (``"?"``) relates to nothing and reads None.

        From the value when the input is a constant of this graph, else from shape inference.
        """
        name = self.inputs[i] if i < len(self.inputs) else ""
        slot = self._builder.slots.get(name) if name else None
        b = self._builder
        if slot is not None and slot in b.constant_slots and slot not in b.input_slots:
            value = b.template[slot]
            return value.shape if isinstance(value, np.ndarray) else None
        tp = self.input_type(i)
        return None if tp is None else static_shape(tp)

    def value_type(self, name: str) -> TypeProto | None:
        """Return the statically known type of a value in this node's scope, if inference found
        one."""
        return self._builder.types.get(name)

    def opset_of(self, domain: str) -> int:
        """Return the opset this node's scope imports for ``domain`` (0 when not imported)."""
        return self.opsets.get(normalize_domain(domain), 0)

    @property
    def optimize(self) -> bool:
        """Whether kernels may restructure work (e.g. hoist loop-invariant nodes out of bodies)."""
        return self._builder.compiler.optimize

    @property
    def loop_condition(self) -> str:
        """SessionOptions.loop_condition: ``"spec"`` or ``"always"``."""
        return self._builder.compiler.loop_condition

    @property
    def graph(self) -> GraphProto:
        """The graph this node is in, for a kernel whose meaning depends on its siblings (the
        block size of NCHWc weights is the whole model's)."""
        return self._builder.graph

    def describe(self) -> str:
        """Return the standard description used at the start of error messages."""
        return where(self.name, self.op_type, self.domain, self.opset)

    def error(self, message: str) -> ValidationError:
        """Return a validation error about this node."""
        return ValidationError(f"{self.describe()}: {message}")

    def types_in(self, graph: GraphProto) -> Mapping[str, TypeProto]:
        """The static types of the values a subgraph of this node may read: its own
        declarations, then this node's scope's."""
        return ChainMap(scope_types(graph), self._builder.types)

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
        plan = self._builder.compile_subgraph(graph, opsets, declared)
        self.plans.append(plan)
        positions = []
        for name in plan.capture_names:
            if name not in self.captures:
                self.captures.append(name)
            positions.append(self.captures.index(name))
        return Subgraph(plan, tuple(positions))


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
