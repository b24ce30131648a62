"""``onnxflow check``: a model's header, inputs, outputs and operators, each operator with what
runs it, and the problems creating a session finds."""

from __future__ import annotations

import argparse
import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx
from onnx import GraphProto

from onnxflow.errors import OnnxflowError
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.load import load_model
from onnxflow.ir.walk import subgraphs
from onnxflow.ops.custom import CustomOp, parse_custom_ops
from onnxflow.ops.registry import REGISTRY, schema_since_version
from onnxflow.session import InferenceSession
from onnxflow.values import NodeArg


def count_ops(graph: GraphProto, counts: Counter[str] | None = None) -> Counter[str]:
    """Count operators by ``domain.op_type``, including the nodes inside subgraphs."""
    counts = Counter() if counts is None else counts
    for node in graph.node:
        counts[f"{node.domain}.{node.op_type}" if node.domain else node.op_type] += 1
        for g in subgraphs(node):
            count_ops(g, counts)
    return counts


@dataclass(frozen=True)
class OpUse:
    """An operator a model uses, at the opset its scope imports, and what runs it."""

    domain: str
    op_type: str
    opset: int
    count: int
    #: How onnxflow resolves it: ``kernel since N``, an expansion, or ``not supported ...``.
    resolution: str
    #: A default-domain operator onnx has no schema for at this opset: only onnxruntime's own
    #: registrations define it (LayerNormalization below 17, SimplifiedLayerNormalization).
    onnxruntime_only: bool = False

    @property
    def name(self) -> str:
        """``op_type``, prefixed by its domain unless that is the default one."""
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type

    @property
    def where(self) -> str:
        """The domain and opset the operator is resolved at."""
        return f"ai.onnx opset {self.opset}" if not self.domain else f"opset {self.opset}"


def operator_uses(
    model: onnx.ModelProto, custom: Mapping[tuple[str, str], CustomOp] | None = None
) -> list[OpUse]:
    """Every operator ``model`` uses (subgraphs and model-local functions included), each with
    the kernel version it resolves to, most used first; ``custom``: the operators the user gives
    as Python functions (:func:`onnxflow.ops.custom.parse_custom_ops`)."""
    local = {(normalize_domain(f.domain), f.name) for f in model.functions}
    counts: Counter[tuple[str, str, int]] = Counter()
    scopes = [(model.graph.node, model.opset_import)]
    scopes += [(f.node, f.opset_import) for f in model.functions]
    for nodes, imports in scopes:
        opsets = {normalize_domain(o.domain): o.version for o in imports}
        for graph in _graphs(onnx.GraphProto(node=nodes)):
            for node in graph.node:
                domain = normalize_domain(node.domain)
                counts[domain, node.op_type, opsets.get(domain, 0)] += 1
    custom = custom or {}
    uses = [
        OpUse(domain, op_type, opset, n, _by_user(custom[domain, op_type]))
        if (domain, op_type) in custom
        else _resolve(domain, op_type, opset, n, (domain, op_type) in local)
        for (domain, op_type, opset), n in counts.items()
    ]
    return sorted(uses, key=lambda u: (-u.count, u.name, u.opset))


def _by_user(op: CustomOp) -> str:
    """How ``check`` says a user's function runs an operator."""
    return f"provided by the user: {op.label} (custom_ops[{op.key!r}])"


def _graphs(graph: GraphProto) -> Iterable[GraphProto]:
    """``graph`` and every subgraph nested in it."""
    yield graph
    for node in graph.node:
        for g in subgraphs(node):
            yield from _graphs(g)


def _resolve(domain: str, op_type: str, opset: int, count: int, local: bool) -> OpUse:
    """How onnxflow runs ``op_type`` of ``domain`` at ``opset`` (the registry's own lookup)."""
    use = functools.partial(OpUse, domain, op_type, opset, count)
    if local:
        return use("model-local function (expanded)")
    kernel = REGISTRY.lookup(domain, op_type, opset)
    since = schema_since_version(domain, op_type, opset)
    if since is None and domain in ("", "ai.onnx.ml"):
        no_schema = f"onnx has no schema for it at opset {opset}"
        if kernel is not None and domain == "":
            return use(f"onnxruntime's default-domain registration, kernel since {kernel.since}"
                       f" ({no_schema})", onnxruntime_only=True)  # fmt: skip
        return use(f"not supported ({no_schema})")
    if kernel is not None:
        return use(f"kernel since {kernel.since}")
    registered = REGISTRY.versions(domain, op_type)
    if since is not None and _has_function(domain, op_type, opset):
        return use(f"expanded from onnx's function body (schema since {since})")
    if since is not None and registered:
        return use(f"not supported (no kernel for schema since {since}; kernels since "
                   f"{', '.join(map(str, registered))})")  # fmt: skip
    return use("not supported")


def _has_function(domain: str, op_type: str, opset: int) -> bool:
    schema = onnx.defs.get_schema(op_type, opset, domain)
    return bool(schema.has_function or schema.has_context_dependent_function)


def _print_operators(
    model: onnx.ModelProto, custom: Mapping[tuple[str, str], CustomOp] | None = None
) -> None:
    uses = operator_uses(model, custom)
    print(f"  {sum(u.count for u in uses)} nodes (subgraphs included):")
    for u in uses:
        print(f"    {u.name}: {u.count} ({u.where}) -> {u.resolution}")
    flagged = [u for u in uses if u.onnxruntime_only]
    if flagged:
        print("  default-domain operators that only onnxruntime defines (onnx has no schema for")
        print("  them at the model's opset; runtimes that follow onnx will reject the model):")
        for u in flagged:
            print(f"    {u.name} ({u.where})")


def _print_inputs(model: onnx.ModelProto) -> None:
    """The inputs to feed; graph inputs that have an initializer are counted apart: before IR 4
    every initializer is listed as an input, from IR 4 such an input is a default to override."""
    stored = {t.name for t in model.graph.initializer} | {
        t.values.name for t in model.graph.sparse_initializer
    }
    with_value = []
    for vi in model.graph.input:
        arg = NodeArg.from_value_info(vi)
        if arg.name in stored:
            with_value.append(arg.name)
        else:
            print(f"  input {arg.name}: {arg.type} {arg.shape}")
    if not with_value:
        return
    if model.ir_version < 4:
        print(f"  {len(with_value)} initializers also listed as inputs (IR version "
              f"{model.ir_version} lists them all there): stored values, not inputs to "
              "feed")  # fmt: skip
    else:
        names = ", ".join(with_value[:5]) + (", ..." if len(with_value) > 5 else "")
        print(f"  {len(with_value)} overridable initializers (inputs with a stored value, fed "
              f"only to override it): {names}")  # fmt: skip


def check_command(args: argparse.Namespace) -> int:
    """``onnxflow check``: print the report; 0 when a session can be made, else 1."""
    model = load_model(args.model)
    print(f"model: {args.model}")
    print(
        f"  IR version {model.ir_version}; producer {model.producer_name or '?'} "
        f"{model.producer_version}".rstrip()
    )
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"  opsets: {opsets}")
    _print_inputs(model)
    for vi in model.graph.output:
        arg = NodeArg.from_value_info(vi)
        print(f"  output {arg.name}: {arg.type} {arg.shape}")
    custom = parse_custom_ops(getattr(args, "custom_ops", None))
    _print_operators(model, custom)
    try:
        InferenceSession(model, custom_ops=getattr(args, "custom_ops", None))
    except OnnxflowError as exc:
        print(f"problems found:\n  {exc}")
        return 1
    print("problems found: none")
    return 0
