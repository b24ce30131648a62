"""Compiling a graph (and its subgraphs) into immutable plans.

Every scope compiled here goes through the pass pipeline (:data:`onnxflow.compile.passes.
PIPELINE`): the model passes on the main graph, the graph passes on each graph before its
nodes compile, the node passes on each node, and the loop-body passes on each loop body a
kernel asks for (:meth:`_GraphBuilder.loop_body_forms`). Kernels are resolved by ``(domain,
op_type, opset)`` here, attributes are decoded here, and the names a subgraph reads from
enclosing scopes (its captures) are found here and passed to the node that owns the subgraph as
extra inputs. The executor never looks at an op name.
"""

from __future__ import annotations

import functools
import inspect
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import FunctionProto, GraphProto, NodeProto, TensorProto, TypeProto, numpy_helper

from onnxflow.compile.attributes import decode_attribute
from onnxflow.compile.context import NodeContext
from onnxflow.compile.passes import graph_forms, loop_body_forms, model_forms, node_rewrite
from onnxflow.compile.passes.body_forms import BodyFacts, BodyForms
from onnxflow.compile.passes.fold import frozen
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.compile.passes.half import types_agree
from onnxflow.compile.passes.model_facts import ModelFacts
from onnxflow.compile.passes.node_site import Computed, Inlined, NodeSite, NodeStep
from onnxflow.compile.plan import (
    NONE_SLOT,
    TRASH_SLOT,
    NodeInfo,
    Plan,
    out_slots,
    passthrough,
)
from onnxflow.errors import (
    OnnxflowError,
    ResourceError,
    UnsupportedOperatorError,
    ValidationError,
    where,
)
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.schemas import op_schema
from onnxflow.ir.walk import scope_types
from onnxflow.ops.registry import REGISTRY, Kernel, Registry
from onnxflow.traits import Built, Traits, bind_attributes, chosen
from onnxflow.values import tensor_to_array


@dataclass
class Compiler:
    """Compiles graphs of one model; collects every unsupported operator before failing."""

    functions: dict[tuple[str, str], FunctionProto] = field(default_factory=dict)
    registry: Registry = REGISTRY
    optimize: bool = True
    loop_condition: str = "spec"
    float16_rounding: str = "each_op"
    #: SessionOptions.kernels: ``"native"`` binds a kernel's compiled form where it has one.
    kernels: str = "native"
    #: SessionOptions.intra_op_num_threads: the most threads a compiled kernel may run on
    #: (0: as many as the process may use).
    threads: int = 0
    missing: list[tuple[str, str, int]] = field(default_factory=list)
    #: The last main graph whose types strict inference checked, and the answer: a session
    #: compiling its graph twice checks it once.
    _checked: tuple[GraphProto, bool] | None = field(default=None, init=False, repr=False)

    def compile_main(
        self, graph: GraphProto, opsets: dict[str, int], fixed_initializers: bool = False
    ) -> Plan:
        """Compile the main graph; raise UnsupportedOperatorError listing every missing op.

        Give the graph as shape inference returns it: kernels read the static types of their
        inputs from each scope's ``value_info``.

        With ``fixed_initializers``, graph inputs that have an initializer count as constants
        (for runs that do not override them), so what depends on them only can be folded.
        """
        facts = ModelFacts(
            opsets, self.registry, self.float16_rounding, lambda: self._types_agree(graph, opsets)
        )
        graph, made = model_forms(graph, facts, self.optimize)
        opsets = {**opsets, **made}
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

    def _types_agree(self, graph: GraphProto, opsets: dict[str, int]) -> bool:
        """:func:`.passes.half.types_agree` of the main ``graph``, checked once per graph."""
        if self._checked is None or self._checked[0] is not graph:
            self._checked = (graph, types_agree(graph, opsets))
        return self._checked[1]


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
        self.own_types = scope_types(graph)
        self.types: Mapping[str, TypeProto] = ChainMap(self.own_types, outer_types)
        self.slots: dict[str, int] = {}
        #: The initializers not decoded yet, by name: each is decoded when a node first reads
        #: it (:meth:`_decode`), and one that nothing reads never is.
        self.pending: dict[str, TensorProto] = {}
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
        if name in self.pending:
            return self._decode(name)
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
        return frozenset(self.slots).union(self.pending, self.outer or ())

    def visible_constants(self) -> Mapping[str, Any]:
        """The constants of this scope (never an input the caller may feed) and of its
        enclosing ones, by name, as a subgraph compiled now may read them (an initializer
        decoded when one does)."""
        own = _Constants(self)
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

    @property
    def threads(self) -> int:
        """SessionOptions.intra_op_num_threads."""
        return self.compiler.threads

    def constant(self, name: str) -> Any:
        """The value of ``name`` when it is a constant of this graph (never an input the
        caller may feed); None otherwise."""
        slot = self.slots.get(name)
        if slot is None and name in self.pending:
            slot = self._decode(name)
        if slot is None or slot not in self.constant_slots or slot in self.input_slots:
            return None
        return self.template[slot]

    def _decode(self, name: str) -> int:
        """Decode the pending initializer ``name`` into its slot (a constant); return the
        slot."""
        tensor = self.pending.pop(name)
        value = decode_initializer(tensor, self.graph.name)
        value.flags.writeable = False  # shared by every run: never handed out writable
        slot = self.slots.get(name)
        if slot is None:
            slot = self._new_slot(name, value)
        self.template[slot] = value
        self.constant_slots.add(slot)
        return slot

    # -- build -------------------------------------------------------------------------------
    def build(self, opsets: dict[str, int]) -> Plan:
        inputs = [vi.name for vi in self.graph.input]
        self.input_slots = {self._new_slot(name) for name in inputs}
        self.pending = dict(self.own_types.initializers())
        for name in inputs:  # an initializer fed like an input: its default, decoded now
            if name in self.pending:
                self._decode(name)
        if self.fixed_initializers:
            self.input_slots -= self.constant_slots
        for init in self.graph.sparse_initializer:
            value = _sparse_to_dense(init)
            value.flags.writeable = False
            self.constant_slots.add(self._new_slot(init.values.name, value))
        view = GraphView(
            self.graph, self.graph.node, opsets, self.compiler.registry, self.outer is None
        )
        nodes, made = graph_forms(view, self.compiler.optimize)
        opsets = {**opsets, **made}
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
        """Compile ``graph``, a subgraph of a node of this scope, into its plan: it reads this
        scope's names and types (``declared``'s declarations first, when given)."""
        return self.compile_later(graph, opsets, declared)()

    def compile_later(
        self, graph: GraphProto, opsets: dict[str, int], declared: GraphProto | None = None
    ) -> Callable[[], Plan]:
        """What compiles ``graph`` as :meth:`compile_subgraph` would now, when called: the
        scope it may read is taken now, as the node that owns it sees it."""
        types = self.types
        if declared is not None:
            types = ChainMap(scope_types(declared), types)
        constants = self.visible_constants() if self.compiler.optimize else None
        compiler, visible = self.compiler, self.visible()
        return lambda: _GraphBuilder(compiler, graph, visible, types, constants).build(opsets)

    def loop_body_forms(
        self, graph: GraphProto, element_inputs: Sequence[str], opsets: dict[str, int]
    ) -> BodyForms | None:
        """``graph``, the body of a loop node of this scope, as the pipeline's loop-body passes
        rewrite it (None when none changes it). ``element_inputs``: the body inputs that take
        one element of a scanned sequence (none for Loop)."""
        types = ChainMap(scope_types(graph), self.types)
        facts = BodyFacts(
            tuple(element_inputs), functools.partial(_rank, types), opsets.get("", 0),
            self.compiler.registry,
        )  # fmt: skip
        return loop_body_forms(graph, facts, self.compiler.optimize)

    def compile_node(self, node: NodeProto, opsets: dict[str, int]) -> None:
        """Compile ``node`` as the node passes leave it: a step, constants, or other nodes."""
        site = self._site(node, opsets)
        try:
            if site.kernel is None:
                self._compile_rewritten(site, node_rewrite(site, self.compiler.optimize))
                return
            fn, traits, ins, plans = self._bind(site.kernel, node, site.opset, opsets)
            several = traits.several or outputs_several(node, site.schema)
            step = NodeStep(fn, traits, self._constant_args(ins), max(len(node.output), 1), several)
            rewrite = node_rewrite(replace(site, step=step), self.compiler.optimize)
        except OnnxflowError:
            raise
        except MemoryError as exc:
            raise ResourceError(
                f"{where(node.name, node.op_type, site.domain, site.opset)} in graph "
                f"{self.graph.name!r}: out of memory while building its step"
            ) from exc
        except Exception as exc:  # a kernel's preparation failed on this node's attributes
            raise ValidationError(
                f"{where(node.name, node.op_type, site.domain, site.opset)} in graph "
                f"{self.graph.name!r} cannot be compiled: {type(exc).__name__}: {exc}"
            ) from exc
        if rewrite is not None:  # the subgraphs compiled for its kernel are not needed
            self._compile_rewritten(site, rewrite)
            return
        outs = self._define_outputs(node)
        self.children.extend((len(self.steps), plan) for plan in plans)
        self.steps.append((fn, tuple(ins), outs if several else outs[0]))
        self.traits.append(traits)
        ins_out = (tuple(node.input), tuple(node.output))
        self.infos.append(NodeInfo(node.name, node.op_type, site.domain, site.opset, *ins_out))

    def _site(self, node: NodeProto, opsets: dict[str, int]) -> NodeSite:
        """``node`` with its operator resolved: its schema looked up once, then its kernel."""
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain)
        if opset is None:
            raise ValidationError(
                f"{where(node.name, node.op_type, domain, None)}: domain "
                f"{domain or 'ai.onnx'!r} is not in the opset imports {sorted(opsets)}"
            )
        schema = op_schema(domain, node.op_type, opset)
        kernel = self.compiler.registry.lookup(domain, node.op_type, opset)  # reads that schema
        return NodeSite(
            node, domain, opset, opsets, schema, kernel, self.types, self.compiler.functions
        )

    def _constant_args(self, ins: list[int]) -> list[Any] | None:
        """The values a node reads when each is omitted or a constant of this graph (never an
        input the caller may feed), else None."""
        constant = all(
            s == NONE_SLOT or (s in self.constant_slots and s not in self.input_slots) for s in ins
        )
        return [self.template[s] for s in ins] if constant else None

    def _compile_rewritten(self, site: NodeSite, rewrite: Inlined | Computed | None) -> None:
        """Compile what a node pass made of ``site``'s node: its nodes, or its values as
        constants; with no kernel and no pass serving it, record its operator as missing."""
        if isinstance(rewrite, Inlined):
            for inner in rewrite.nodes:
                self.compile_node(inner, rewrite.opsets)
            return
        outs = self._define_outputs(site.node)
        if rewrite is None:
            self.compiler.missing.append((site.domain, site.node.op_type, site.opset))
            return
        for slot, value in zip(outs, rewrite.values):
            if slot != TRASH_SLOT:
                self.template[slot] = frozen(value)
                self.constant_slots.add(slot)

    def _bind(
        self, kernel: Kernel, node: NodeProto, opset: int, opsets: dict[str, int]
    ) -> tuple[Callable[..., Any], Traits, list[int], list[Plan]]:
        """Return the step function of a node, its traits, the slots it reads (captures last)
        and the plans of its subgraphs."""
        attrs = {a.name: decode_attribute(a) for a in node.attribute if not a.ref_attr_name}
        ins = [self.resolve(name) for name in node.input]
        form, traits = chosen(kernel.traits, kernel.fn, self.compiler.kernels == "native")
        if kernel.build:
            ctx = NodeContext(self, node, opset, opsets, traits)
            try:
                fn = form(ctx, **attrs)
            except TypeError as exc:
                raise ctx.error(f"bad attributes {sorted(attrs)}: {exc}") from exc
            fn, traits = fn if isinstance(fn, Built) else (fn, traits)
            return fn, traits, ins + [self.resolve(name) for name in ctx.captures], ctx.plans
        if traits.passthrough and len(ins) == 1 and len(node.output) == 1:
            return passthrough, traits, ins, []
        fn = _bind_kernel_attributes(form, attrs, node, opset)
        fn = self._prepared(kernel, ins, attrs) or fn
        return fn, bind_attributes(traits.replace(passthrough=False), attrs), ins, []

    def _prepared(
        self, kernel: Kernel, ins: list[int], attrs: dict[str, Any]
    ) -> Callable[..., Any] | None:
        """The node's compiled form made for its constant inputs (:attr:`Native.prepare`), or
        None: the session runs NumPy forms, the kernel prepares nothing, or not for these."""
        native = kernel.traits.native
        if self.compiler.kernels != "native" or native is None or native.prepare is None:
            return None
        constants = tuple(
            self.template[s] if s in self.constant_slots and s not in self.input_slots else None
            for s in ins
        )
        return native.prepare(constants, **attrs)

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


class _Constants(Mapping[str, Any]):
    """A scope's constants by name as its subgraphs see them (:meth:`_GraphBuilder.constant`):
    an initializer is decoded only when a subgraph reads it."""

    def __init__(self, scope: _GraphBuilder) -> None:
        self.scope = scope

    def __getitem__(self, name: str) -> Any:
        value = self.scope.constant(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.scope.constant(name) is not None

    def __iter__(self) -> Iterator[str]:
        scope = self.scope
        return iter([*filter(self.__contains__, scope.slots), *scope.pending])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def decode_initializer(tensor: TensorProto, graph: str) -> np.ndarray:
    """The array ``tensor``, an initializer of ``graph``, holds; ResourceError naming it when
    it does not fit in memory."""
    try:
        return tensor_to_array(tensor)
    except MemoryError as exc:
        raise ResourceError(
            f"graph {graph!r}: out of memory decoding initializer {tensor.name!r} "
            f"(dims {list(tensor.dims)}) while building the plan"
        ) from exc


def _bind_kernel_attributes(
    fn: Callable[..., Any], attrs: dict[str, Any], node: NodeProto, opset: int
) -> Callable[..., Any]:
    """A non-builder kernel with the node's attributes bound (checked against its signature)."""
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
    its schema at ``opset`` allows several (a node listing fewer takes the first ones)."""
    return outputs_several(node, op_schema(domain, node.op_type, opset))


def outputs_several(node: NodeProto, schema: onnx.defs.OpSchema | None) -> bool:
    """:func:`returns_several` of ``node`` given its operator's ``schema`` (None: onnx has
    none)."""
    return len(node.output) > 1 or (schema is not None and schema.max_output > 1)


def _rank(types: Mapping[str, TypeProto], name: str) -> int | None:
    """The static rank of the tensor ``name`` in ``types``, when known."""
    tp = types.get(name)
    if tp is None or not tp.tensor_type.HasField("shape"):
        return None
    return len(tp.tensor_type.shape.dim)


def _with_frees(
    steps: Iterable[tuple[Any, tuple[int, ...], Any]], keep: set[int], n_slots: int
) -> tuple[tuple[Any, ...], ...]:
    """Attach to each step the slots whose value is not needed after it."""
    steps = list(steps)
    last: dict[int, int] = {}
    for i, (_, ins, out) in enumerate(steps):
        for s in out_slots(out):
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
