"""Checking a model against the ONNX IR rules a runtime relies on.

Checked here, with messages that name the graph, node, op and opset: opset imports resolve every
node's domain; names are assigned once (SSA), also across scopes (a subgraph may read but never
redefine an enclosing scope's name); every name read is defined before it is read (a name defined
by a later node means the node list is not topologically sorted); graph outputs are defined.
Everything else the ONNX checker knows is left to ``onnx.checker``.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnx.checker
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto

from onnxflow.errors import ValidationError, where
from onnxflow.ops.registry import normalize_domain

#: Newest IR version whose rules onnxflow follows.
MAX_IR_VERSION = onnx.IR_VERSION

#: Checker complaints about models that run correctly and that onnxruntime accepts, and whose
#: substance this module checks itself: a graph input or output declared without a shape (rank
#: unknown); a graph output that is not produced by a node of that graph but is one of its
#: inputs or, in a subgraph, an outer-scope value (defined-ness is checked above).
_BENIGN_CHECKER_COMPLAINTS = (
    "Field 'shape' of 'type' is required but missing",
    "is not an output of any node in graph",
)


def validate_model(model: ModelProto, run_checker: bool = True) -> None:
    """Raise ValidationError listing every IR rule the model breaks."""
    problems: list[str] = []
    if model.ir_version > MAX_IR_VERSION:
        problems.append(
            f"model IR version {model.ir_version} is newer than supported ({MAX_IR_VERSION})"
        )
    opsets = opset_map(model.opset_import)
    newest = onnx.defs.onnx_opset_version()
    if opsets.get("", 0) > newest:
        problems.append(
            f"model imports opset {opsets['']} of ai.onnx; newest supported is {newest}"
        )
    _check_graph(model.graph, opsets, frozenset(), problems)
    for fn in model.functions:
        fn_opsets = opset_map(fn.opset_import)
        for node in fn.node:
            _check_node_domain(node, fn_opsets, f"function {fn.name!r}", problems)
    if problems:
        raise ValidationError(_join(problems))
    if run_checker:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            if not any(benign in str(exc) for benign in _BENIGN_CHECKER_COMPLAINTS):
                raise ValidationError(f"the ONNX checker rejects the model: {exc}") from exc


def opset_map(imports: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    """Return ``{domain: version}`` from opset imports, with ``ai.onnx`` spelled ``""``."""
    return {normalize_domain(o.domain): o.version for o in imports}


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def _check_node_domain(
    node: NodeProto, opsets: dict[str, int], graph: str, problems: list[str]
) -> None:
    domain = normalize_domain(node.domain)
    if domain not in opsets:
        problems.append(
            f"{where(node.name, node.op_type, domain, None)} in {graph}: domain "
            f"{domain or 'ai.onnx'!r} is not imported (opset imports: {sorted(opsets)})"
        )


def _subgraphs(node: NodeProto) -> Iterable[tuple[str, GraphProto]]:
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                yield a.name, g


def _check_graph(
    graph: GraphProto, opsets: dict[str, int], outer: frozenset[str], problems: list[str]
) -> None:
    label = f"graph {graph.name!r}"
    defined: set[str] = set()
    producers = {o: n for n in graph.node for o in n.output if o}

    def define(name: str, what: str) -> None:
        if not name:
            return
        if name in outer:
            problems.append(f"{label}: {what} redefines {name!r} from an enclosing scope")
        elif name in defined:
            problems.append(f"{label}: {what} assigns {name!r}, which is already defined")
        defined.add(name)

    for vi in graph.input:
        define(vi.name, "graph input")
    inputs = {vi.name for vi in graph.input}
    for t in graph.initializer:
        if t.name not in inputs:
            define(t.name, "initializer")
    for t in graph.sparse_initializer:
        define(t.values.name, "sparse initializer")
    for node in graph.node:
        desc = where(
            node.name,
            node.op_type,
            normalize_domain(node.domain),
            opsets.get(normalize_domain(node.domain)),
        )
        _check_node_domain(node, opsets, label, problems)
        for name in node.input:
            if name and name not in defined and name not in outer:
                later = producers.get(name)
                if later is not None:
                    problems.append(
                        f"{label}: nodes are not topologically sorted: {desc} reads {name!r}, "
                        f"which is produced later by "
                        f"{where(later.name, later.op_type, later.domain, None)}"
                    )
                else:
                    problems.append(f"{label}: {desc} reads {name!r}, which is never defined")
        visible = outer | defined
        for _, sub in _subgraphs(node):
            _check_graph(sub, opsets, frozenset(visible), problems)
        for name in node.output:
            define(name, f"output of {desc}")
    for vi in graph.output:
        if vi.name not in defined and vi.name not in outer:
            problems.append(f"{label}: graph output {vi.name!r} is never defined")
