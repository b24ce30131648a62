"""Loop-body pass: moving work out of loop bodies, once, at compile time.

A body node whose inputs never change across iterations (outer-scope values, body initializers,
constants, and what is computed from those alone) is *invariant*: it runs once before the first
iteration instead of every time. In a Scan, a node that maps each scan element independently
(elementwise arithmetic, ``MatMul`` of an element by an invariant matrix, ...) is *batchable*:
it runs once over the whole sequence and each iteration reads its row ``t``. The spec's RNN input
projection ``X_t · Wᵀ`` becomes one matrix product.

The split is expressed as two graphs (:class:`~onnxflow.compile.passes.body_forms.BodyForms`):
``pre`` (formal inputs: the whole scan sequences, time first, under the body's element input
names) computing the invariant and batched values, and the remaining ``body`` taking, after the
original inputs, one input per batched value (its row) and per invariant value. The pre-graph
runs only when the loop runs at least once, so a node that would fail is never run by a loop of
zero iterations.

What may move is what the kernels' traits promise: ``pure`` (never a random draw), and for
batching ``elementwise`` or ``rows`` (row-independent). Only ai.onnx nodes move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from onnx import AttributeProto, GraphProto, NodeProto, TypeProto, ValueInfoProto, helper

from onnxflow.compile.passes.body_forms import BodyFacts, BodyForms
from onnxflow.compile.passes.op_traits import traits_of
from onnxflow.ir.walk import subgraph_reads
from onnxflow.ops.registry import Registry
from onnxflow.traits import Traits


def hoist(forms: BodyForms, facts: BodyFacts) -> BodyForms | None:
    """The pass: ``forms.body`` split by :func:`split_body`, or None when nothing can move.

    It splits the body as written, so it runs before any other loop-body pass.
    """
    return split_body(forms.body, facts.element_inputs, facts.rank, facts.opset, facts.registry)


def split_body(
    body: GraphProto,
    element_inputs: Sequence[str],
    rank: Callable[[str], int | None],
    opset: int,
    registry: Registry,
) -> BodyForms | None:
    """Split ``body`` or return None when nothing can move.

    ``element_inputs`` are the body inputs that take one element of a scanned sequence (none for
    Loop); ``rank`` gives a value's static rank when known; ``opset`` is the ai.onnx opset;
    ``registry`` holds the kernels whose traits say what may move.
    """
    onnx_opset = {"": opset}  # the scope as far as hoisting reads it: ai.onnx nodes only
    local = {vi.name for vi in body.input} | {o for n in body.node for o in n.output}
    fixed = {t.name for t in body.initializer}
    element = {name: rank(name) for name in element_inputs}
    invariant: set[str] = set()
    batched: dict[str, int] = {}
    moved: list[NodeProto] = []
    for node in body.node:
        traits = traits_of(node, onnx_opset, registry)
        kind = _classify(node, traits, local, fixed | invariant, element | batched, rank)
        if kind is None:
            continue
        moved.append(node)
        outs = [o for o in node.output if o]
        if kind == -1:
            invariant.update(outs)
        else:
            batched.update(dict.fromkeys(outs, kind))
    if not moved:
        return None
    return _rewrite(body, moved, element_inputs, invariant, list(batched))


def _classify(
    node: NodeProto,
    traits: Traits | None,
    local: set[str],
    invariant: set[str],
    sequence: dict[str, int | None],
    rank: Callable[[str], int | None],
) -> int | None:
    """-1 for an invariant node, the output rank for a batchable node, None to keep it.

    What a node may do is what its kernel's ``traits`` promise (:mod:`onnxflow.traits`; None:
    no kernel serves it here): a pure kernel whose inputs never change is invariant; an
    ``elementwise`` one, or one that maps ``rows`` of input 0 independently, can run over the
    whole sequence at once.
    """
    if not _movable(node, traits):
        return None
    ins = [i for i in node.input if i]
    if all(i in invariant or i not in local for i in ins):
        return -1
    if not ins or any(i not in sequence and i in local and i not in invariant for i in ins):
        return None
    return _batched_rank(node, traits, ins, sequence, rank)


def _movable(node: NodeProto, traits: Traits | None) -> bool:
    """Whether a kernel serves ``node``, is pure (random draws differ per iteration) and the
    node holds no subgraph: only then may it leave the body."""
    if traits is None or not traits.pure:
        return False
    return not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _batched_rank(
    node: NodeProto,
    traits: Traits,
    ins: list[str],
    sequence: dict[str, int | None],
    rank: Callable[[str], int | None],
) -> int | None:
    """The per-element output rank of a node run over whole sequences, or None if it can't."""
    ranks = _operand_ranks(ins, sequence, rank)
    if ranks is None:
        return None
    r, others = ranks
    if traits.elementwise and len(node.output) == 1:
        return r if all(o <= r for o in others) else None
    if traits.rows is not None and node.input[0] in sequence and len(others) == len(ins) - 1:
        return traits.rows(r, others)
    return None


def _operand_ranks(
    ins: list[str], sequence: dict[str, int | None], rank: Callable[[str], int | None]
) -> tuple[int, tuple[int, ...]] | None:
    """The one element rank of the sequence operands and the ranks of the others, or None
    when the sequence operands differ in rank or a rank is unknown."""
    seq_ranks = {sequence[i] for i in ins if i in sequence}
    others = [rank(i) for i in ins if i not in sequence]
    if len(seq_ranks) != 1 or None in seq_ranks or None in others:
        return None
    (r,) = seq_ranks
    return r, tuple(others)  # type: ignore[return-value,arg-type]


def _rewrite(
    body: GraphProto,
    moved: list[NodeProto],
    element_inputs: Sequence[str],
    invariant: set[str],
    batched: list[str],
) -> BodyForms | None:
    """The body split into the pre-plan of the ``moved`` nodes and the rest, which reads the
    invariant and batched values it needs as extra inputs; None when it needs none."""
    moved_ids = {id(n) for n in moved}
    kept = [n for n in body.node if id(n) not in moved_ids]
    needed = _read_by(kept, body)
    inv_out = tuple(sorted(invariant & needed))
    bat_out = tuple(n for n in batched if n in needed)
    if not inv_out and not bat_out:
        return None
    pre = _pre_graph(body, moved, element_inputs, (*inv_out, *bat_out))
    rest = helper.make_graph(
        kept,
        body.name,
        [*body.input, *(_untyped(n) for n in (*bat_out, *inv_out))],
        list(body.output),
        [t for t in body.initializer if t.name in needed],
    )
    return BodyForms(rest, pre, inv_out, bat_out)


def _read_by(kept: list[NodeProto], body: GraphProto) -> set[str]:
    """The values the ``kept`` nodes read (their subgraphs too) and the body's outputs."""
    needed = {i for n in kept for i in n.input if i} | {vi.name for vi in body.output}
    return needed | subgraph_reads(kept)


def _pre_graph(
    body: GraphProto, moved: list[NodeProto], element_inputs: Sequence[str], outputs: tuple
) -> GraphProto:
    """The graph of the ``moved`` nodes, over whole sequences under the element input names."""
    inits = {t.name: t for t in body.initializer}
    pre_reads = sorted({i for n in moved for i in n.input if i} & inits.keys())
    return helper.make_graph(
        moved,
        f"{body.name}.pre",
        [_untyped(vi.name) for vi in body.input if vi.name in element_inputs],
        [_untyped(n) for n in outputs],
        [inits[n] for n in pre_reads],
    )


def _untyped(name: str) -> ValueInfoProto:
    """A value info with no type: the split graphs are compiled, never type-checked."""
    return helper.make_value_info(name, TypeProto())
