"""Model pass: float16 values are kept in float32, each op's result rounded to float16.

NumPy has no float16 arithmetic of its own: each float16 ufunc converts element by element,
about 4 ns an element against 0.1 in float32, and a cast each way costs 1-1.5 ns. So the
float16 tensors of a graph are held as float32 arrays whose values are all float16 values: every
op computes in float32 on them (as NumPy's float16 loops and onnxruntime's CPU kernels do), and
a ``HalfRound`` node rounds its result to the nearest float16, ties to even, overflow to
infinity, as a cast to float16 would, in three float32 passes
(:func:`onnxflow.ops.pass_made.half.half_round`), or one compiled pass (``native/_half``).
Results are those of computing each op in float32 and rounding it to float16.

The rewrite, on the shape-inferred main graph and every subgraph:

- float16 initializers and Constant values become float32 (exactly); type declarations of
  float16 tensors become float32, and ``dtype``-like attributes asking for float16 ask for
  float32;
- ``Cast(to=FLOAT16)`` and ``CastLike`` to a float16 tensor become ``HalfRound`` of their input
  (rounded once from the input's own type); every other node output declared float16 is
  rounded by a ``HalfRound`` after the node, unless the node only selects values of its inputs
  (the ``selects`` trait: Reshape, Gather, Concat, Max, Relu...);
- a float16 LayerNormalization (float32 statistics) computes in float32 with the roundings of
  its function body: its normalized value, times the scale, plus the bias, each rounded; a
  float16 Softmax over the last axis likewise, each step of its float16 computation rounded;
- the main graph's float16 inputs are cast to float32 as the run starts, and its float16
  outputs cast back (exactly) at its end, so callers feed and get float16 as declared.

With ``SessionOptions(float16_rounding="outputs")`` the op results are not rounded: float16
values are computed in float32 from op to op, as onnxruntime computes them on CPU, and only the
model's casts to float16 and the main graph's outputs round.

The pass leaves a model alone when it has no float16 tensor, when some node output has no
inferred type (it could not tell what to round), or when float16 occurs in a sequence, map,
optional or sparse tensor. ``SessionOptions(optimize=False)`` computes in float16 as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import (
    AttributeProto,
    GraphProto,
    NodeProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
    helper,
    numpy_helper,
)

from onnxflow.compile.passes.model_facts import ModelFacts
from onnxflow.compile.passes.op_traits import traits_of
from onnxflow.ir.domains import is_onnx_op, normalize_domain
from onnxflow.ir.names import fresh_name
from onnxflow.ir.walk import subgraphs
from onnxflow.ops.pass_made import FUSED_DOMAIN, HALF_ROUND
from onnxflow.ops.registry import Registry
from onnxflow.traits import Traits

HALF, FLOAT, I64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.INT64
_DTYPE_ATTRIBUTES = ("dtype", "output_dtype")


@dataclass(frozen=True)
class _Rewrite:
    """What every step of one model's rewrite reads: the names in use (new ones are added),
    the float16 inputs of every scope, whether each op's result is rounded, and the model's
    opsets by normalized domain with the registry (which kernel serves a node)."""

    names: set[str]
    half_inputs: set[str]
    each_op: bool
    opsets: dict[str, int]
    registry: Registry


def widen(graph: GraphProto, facts: ModelFacts) -> GraphProto | None:
    """The pass: :func:`widen_half` of the main ``graph``, rounding each op's result unless
    ``SessionOptions.float16_rounding`` is ``"outputs"``."""
    each_op = facts.float16_rounding == "each_op"
    return widen_half(graph, facts.opsets, facts.registry, each_op, facts.types_agree)


def widen_half(
    graph: GraphProto,
    opsets: Mapping[str, int],
    registry: Registry,
    each_op: bool = True,
    agree: Callable[[], bool] | None = None,
) -> GraphProto | None:
    """The main ``graph`` (of a model importing ``opsets``, run by ``registry``'s kernels)
    with its float16 values held in float32 as described above, or None when the pass leaves it
    alone. Without ``each_op``, op results are not rounded
    (``SessionOptions.float16_rounding="outputs"``): only casts to float16 and the graph's
    outputs are. ``agree`` tells whether :func:`types_agree` holds for the graph (checked here
    when not given)."""
    if not _uses_half(graph) or not _typed(graph) or not _outputs_made_by_nodes(graph):
        return None
    if not (types_agree(graph, opsets) if agree is None else agree()):
        return None
    new = GraphProto()
    new.CopyFrom(graph)
    names = _all_names(new)
    renames: dict[str, str] = {}
    for vi in [*new.input, *new.output]:
        if _is_half(vi.type):
            renames[vi.name] = fresh_name(f"{vi.name}__float32", names)
            new.value_info.append(_widened_info(vi, renames[vi.name]))
    imports = {normalize_domain(d): v for d, v in opsets.items()}
    _widen_graph(new, _Rewrite(names, _half_names(new), each_op, imports, registry), top=True)
    _rename(new, renames)
    entry = [
        helper.make_node("Cast", [vi.name], [renames[vi.name]], to=FLOAT)
        for vi in new.input
        if vi.name in renames
    ]
    exits = [
        helper.make_node("Cast", [renames[vi.name]], [vi.name], to=HALF)
        for vi in new.output
        if vi.name in renames
    ]
    nodes = [*entry, *new.node, *exits]
    del new.node[:]
    new.node.extend(nodes)
    return new


def types_agree(graph: GraphProto, opsets: Mapping[str, int]) -> bool:
    """Whether strict shape inference finds the declared and inferred types of ``graph`` in
    agreement: the pass reads which values are float16 from them, so they must be right."""
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception:  # any disagreement (or an op inference cannot type)
        return False
    return True


def _half_names(graph: GraphProto) -> set[str]:
    """Every name declared float16 in ``graph`` or its subgraphs (values, inputs, outputs,
    initializers), as shape inference typed them."""
    found: set[str] = set()
    for g in _graphs(graph):
        found.update(vi.name for vi in [*g.input, *g.output, *g.value_info] if _is_half(vi.type))
        found.update(t.name for t in g.initializer if t.data_type == HALF)
    return found


def _outputs_made_by_nodes(graph: GraphProto) -> bool:
    """Whether each float16 output of the main graph is made by one of its nodes (not an input
    or initializer passed through), so that it can be cast back at the end."""
    made = {o for n in graph.node for o in n.output}
    return all(vi.name in made for vi in graph.output if _is_half(vi.type))


def _widened_info(vi: ValueInfoProto, name: str) -> ValueInfoProto:
    wide = ValueInfoProto()
    wide.CopyFrom(vi)
    wide.name = name
    wide.type.tensor_type.elem_type = FLOAT
    return wide


def _uses_half(graph: GraphProto) -> bool:
    """Whether any tensor of ``graph`` or its subgraphs is float16."""
    for g in _graphs(graph):
        if any(t.data_type == HALF for t in g.initializer):
            return True
        if any(_is_half(vi.type) for vi in [*g.input, *g.output, *g.value_info]):
            return True
        for node in g.node:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR and a.t.data_type == HALF:
                    return True
                if a.name in ("to", *_DTYPE_ATTRIBUTES) and a.i == HALF:
                    return True
    return False


def _typed(graph: GraphProto) -> bool:
    """Whether every node output has an inferred tensor type and no float16 hides in another
    kind of type (sequence, map, optional) or in a sparse tensor."""
    for g in _graphs(graph):
        if any(t.values.data_type == HALF for t in g.sparse_initializer):
            return False
        types = {vi.name: vi.type for vi in [*g.input, *g.output, *g.value_info]}
        types.update((t.name, _tensor_type(t.data_type)) for t in g.initializer)
        for vi_type in types.values():
            if vi_type.WhichOneof("value") != "tensor_type" and "elem_type: 10" in str(vi_type):
                return False
        for node in g.node:
            for o in node.output:
                if o and (o not in types or types[o].WhichOneof("value") is None):
                    return False
    return True


def _tensor_type(elem_type: int) -> TypeProto:
    t = TypeProto()
    t.tensor_type.elem_type = elem_type
    return t


def _is_half(t: TypeProto) -> bool:
    return t.WhichOneof("value") == "tensor_type" and t.tensor_type.elem_type == HALF


def _graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """``graph`` and all its subgraphs, nested too."""
    yield graph
    for node in graph.node:
        for g in subgraphs(node):
            yield from _graphs(g)


def _all_names(graph: GraphProto) -> set[str]:
    names: set[str] = set()
    for g in _graphs(graph):
        names.update(vi.name for vi in [*g.input, *g.output, *g.value_info])
        names.update(t.name for t in g.initializer)
        names.update(o for n in g.node for o in [*n.input, *n.output] if o)
    return names


def _widen_graph(graph: GraphProto, rewrite: _Rewrite, top: bool = False) -> None:
    """Rewrite ``graph`` in place: float16 storage to float32, rounding after each op. The main
    graph (``top``) keeps its inputs, outputs and the initializers fed like inputs as they are."""
    declared = [*graph.value_info, *graph.output, *(() if top else graph.input)]
    half_values = {vi.name for vi in declared if _is_half(vi.type)}
    fed = {vi.name for vi in graph.input} if top else set()
    for t in graph.initializer:
        if t.data_type == HALF and t.name not in fed:
            t.CopyFrom(_widened_tensor(t))
    for vi in [*graph.value_info, *(() if top else (*graph.input, *graph.output))]:
        if _is_half(vi.type):
            vi.type.tensor_type.elem_type = FLOAT
    nodes: list[NodeProto] = []
    for node in graph.node:
        nodes.extend(_widen_node(node, half_values, rewrite))
    del graph.node[:]
    graph.node.extend(nodes)
    _declare_unrounded(graph)


def _declare_unrounded(graph: GraphProto) -> None:
    """Declare the unrounded results the HalfRound nodes read as float32 tensors of their
    rounded values' shapes, so that the passes after this one know their types (the pointwise
    regions take only values known to be float32)."""
    declared = {vi.name: vi for vi in [*graph.input, *graph.value_info, *graph.output]}
    for node in graph.node:
        if node.op_type != HALF_ROUND or node.domain != FUSED_DOMAIN:
            continue
        raw, out = node.input[0], declared.get(node.output[0])
        if raw in declared or out is None or not out.type.HasField("tensor_type"):
            continue
        info = ValueInfoProto()
        info.CopyFrom(out)
        info.name = raw
        info.type.tensor_type.elem_type = FLOAT
        graph.value_info.append(info)
        declared[raw] = info


def _widen_node(node: NodeProto, half_values: set[str], rewrite: _Rewrite) -> list[NodeProto]:
    """``node`` rewritten for float32 storage, followed (``each_op``) by the rounding of its
    float16 outputs."""
    for g in subgraphs(node):
        _widen_graph(g, rewrite)
    if _to_half(node, half_values):  # rounded once, from the input's own type
        return [helper.make_node(HALF_ROUND, [node.input[0]], list(node.output), name=node.name,
                                 domain=FUSED_DOMAIN)]  # fmt: skip
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR and a.t.data_type == HALF:
            a.t.CopyFrom(_widened_tensor(a.t))
        elif a.name in _DTYPE_ATTRIBUTES and a.type == AttributeProto.INT and a.i == HALF:
            a.i = FLOAT
    spelled_out = _rounded_steps(node, half_values, rewrite)
    if spelled_out is not None:
        return spelled_out
    before = []
    if not _same_in_float32(node, rewrite):  # computed in float16 as written
        for k, name in enumerate(node.input):
            if name in rewrite.half_inputs:  # it gets real float16 inputs
                narrow = fresh_name(f"{name}__float16", rewrite.names)
                before.append(helper.make_node("Cast", [name], [narrow], to=HALF))
                node.input[k] = narrow
    rounds = _rounds(node, half_values, rewrite) if rewrite.each_op else []
    return [*before, node, *rounds]


def _rounds(node: NodeProto, half_values: set[str], rewrite: _Rewrite) -> list[NodeProto]:
    """The HalfRound nodes of ``node``'s float16 outputs, which it now writes unrounded."""
    if _selects(node, rewrite):
        return []
    rounds = []
    for k, out in enumerate(node.output):
        if out in half_values:
            raw = fresh_name(f"{out}__unrounded", rewrite.names)
            node.output[k] = raw
            rounds.append(helper.make_node(HALF_ROUND, [raw], [out], domain=FUSED_DOMAIN))
    return rounds


def _rounded_steps(
    node: NodeProto, half_values: set[str], rewrite: _Rewrite
) -> list[NodeProto] | None:
    """The float32 nodes computing ``node`` with the roundings its float16 computation makes
    between its steps (``each_op``: a float16 LayerNormalization or Softmax), or None."""
    if not rewrite.each_op:
        return None
    if _half_layer_norm(node, rewrite):
        return _layer_norm_rounded(node, half_values, rewrite)
    if _half_softmax(node, rewrite):
        return _softmax_rounded(node, rewrite)
    return None


def _half_layer_norm(node: NodeProto, rewrite: _Rewrite) -> bool:
    """Whether ``node`` is a LayerNormalization of float16 input with float32 statistics
    (``stash_type`` 1, the default) and a float16 result."""
    if not is_onnx_op(node, "LayerNormalization") or node.input[0] not in rewrite.half_inputs:
        return False
    return all(a.i == FLOAT for a in node.attribute if a.name == "stash_type")


def _layer_norm_rounded(
    node: NodeProto, half_values: set[str], rewrite: _Rewrite
) -> list[NodeProto]:
    """A float16 LayerNormalization as its function body computes it, in float32 with the
    three roundings the body makes: the normalized value (computed in float32) cast to float16,
    times the scale, plus the bias, each rounded (a float16 product or sum of float16 values is
    the float32 one rounded once). The node normalizes with a scale of ones (exact); Mean and
    InvStdDev stay its float32 outputs. Computing it in float16 as written gives the same bits
    with slow float16 loops."""
    x, scale, *rest = node.input
    bias = rest[0] if rest else ""
    fresh = [fresh_name(f"{node.output[0]}__{part}", rewrite.names) for part in _LN_PARTS]
    shape, ones, normalized, rounded, scaled, scaled_rounded, shifted = fresh
    y = node.output[0]
    made = [
        helper.make_node("Shape", [scale], [shape]),
        helper.make_node(
            "ConstantOfShape", [shape], [ones], value=helper.make_tensor("one", FLOAT, [1], [1.0])
        ),
    ]
    node.input[:] = [x, ones]
    node.output[0] = normalized
    made.append(node)
    made.append(helper.make_node(HALF_ROUND, [normalized], [rounded], domain=FUSED_DOMAIN))
    made.append(helper.make_node("Mul", [rounded, scale], [scaled]))
    if not bias:
        return [*made, helper.make_node(HALF_ROUND, [scaled], [y], domain=FUSED_DOMAIN)]
    made.append(helper.make_node(HALF_ROUND, [scaled], [scaled_rounded], domain=FUSED_DOMAIN))
    made.append(helper.make_node("Add", [scaled_rounded, bias], [shifted]))
    return [*made, helper.make_node(HALF_ROUND, [shifted], [y], domain=FUSED_DOMAIN)]


#: The names of the values a float16 LayerNormalization is computed through.
_LN_PARTS = ("scale_shape", "ones", "normalized", "rounded", "scaled", "scaled_rounded", "shifted")


def _half_softmax(node: NodeProto, rewrite: _Rewrite) -> bool:
    """Whether ``node`` is a Softmax (13 on: over one axis) over the last axis of a float16
    input. (Over another axis NumPy's float16 sum adds row by row, rounding each partial sum.)"""
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    return (
        is_onnx_op(node, "Softmax")
        and axis == -1
        and rewrite.opsets.get("", 0) >= 13
        and node.input[0] in rewrite.half_inputs
    )


def _softmax_rounded(node: NodeProto, rewrite: _Rewrite) -> list[NodeProto]:
    """A float16 Softmax as its kernel computes it in float16, ``e = exp(x - max(x))`` then
    ``e / sum(e)``, in float32 with each step's result rounded: a float16 difference, exp,
    sum or quotient is NumPy's float32 one rounded once (its float16 sum accumulates in float32
    as its float32 sum does, along the last axis). The maximum selects: no rounding."""
    axis = -1
    parts = ("axes", "max", "shifted", "shifted_rounded", "exp", "exp_rounded", "sum")
    axes, top, shifted, shifted_r, exp, exp_r, total = (
        fresh_name(f"{node.output[0]}__{part}", rewrite.names) for part in parts
    )
    total_r, quotient = (fresh_name(f"{node.output[0]}__{p}", rewrite.names) for p in ("sr", "q"))
    x = node.input[0]
    made = [
        helper.make_node("Constant", [], [axes], value=helper.make_tensor("a", I64, [1], [axis]))
    ]
    if rewrite.opsets.get("", 0) >= 18:
        made.append(helper.make_node("ReduceMax", [x, axes], [top], keepdims=1))
    else:
        made.append(helper.make_node("ReduceMax", [x], [top], axes=[axis], keepdims=1))
    made += [
        helper.make_node("Sub", [x, top], [shifted]),
        _round(shifted, shifted_r),
        helper.make_node("Exp", [shifted_r], [exp]),
        _round(exp, exp_r),
        helper.make_node("ReduceSum", [exp_r, axes], [total], keepdims=1),
        _round(total, total_r),
        helper.make_node("Div", [exp_r, total_r], [quotient]),
        _round(quotient, node.output[0]),
    ]
    return made


def _round(source: str, target: str) -> NodeProto:
    return helper.make_node(HALF_ROUND, [source], [target], domain=FUSED_DOMAIN)


def _promises(node: NodeProto, promise: Callable[[Traits], bool], rewrite: _Rewrite) -> bool:
    """Whether the kernel serving the node at the model's opset makes the ``promise``."""
    traits = traits_of(node, rewrite.opsets, rewrite.registry)
    return traits is not None and promise(traits)


def _selects(node: NodeProto, rewrite: _Rewrite) -> bool:
    """Whether the op only selects values of its inputs (:attr:`Traits.selects`): float16
    inputs make float16 outputs, no rounding needed."""
    return _promises(node, lambda t: t.selects, rewrite)


def _same_in_float32(node: NodeProto, rewrite: _Rewrite) -> bool:
    """Whether the op, given float32 inputs holding float16 values, computes what it computes
    on float16 inputs before rounding: a single NumPy ufunc (whose float16 loops compute in
    float32 and round), an op that rounds once (:attr:`Traits.rounds_once`), one that only
    selects, one that reads only its input's shape (:attr:`Traits.from_shape`: Shape, Size),
    a Cast that widens exactly (:func:`_exact_cast`), or a node with subgraphs (rewritten
    themselves)."""
    if any(True for _ in subgraphs(node)) or _exact_cast(node):
        return True
    return _promises(
        node, lambda t: t.ufunc is not None or t.rounds_once or t.selects or t.from_shape, rewrite
    )


#: The types a Cast of a float16 value gives the same result in from float32: the value
#: exactly, or whether it is nonzero (NumPy's float16 casts to integers go through float32 in
#: scalar code, its float32 ones through SIMD loops: out-of-range values may differ).
_EXACT_CAST_TYPES = (FLOAT, TensorProto.DOUBLE, TensorProto.BOOL)


def _exact_cast(node: NodeProto) -> bool:
    """Whether ``node`` is a Cast to float32, float64 or bool: from a float16 value held in
    float32 it gives what it gives from the float16 value."""
    return is_onnx_op(node, "Cast") and any(
        a.name == "to" and a.i in _EXACT_CAST_TYPES for a in node.attribute
    )


def _to_half(node: NodeProto, half_values: set[str]) -> bool:
    """Whether ``node`` is a Cast to float16, or a CastLike whose output is float16."""
    if is_onnx_op(node, "Cast"):
        return any(a.name == "to" and a.i == HALF for a in node.attribute)
    return is_onnx_op(node, "CastLike") and node.output[0] in half_values


def _widened_tensor(t: TensorProto) -> TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)


def _rename(graph: GraphProto, renames: dict[str, str], top: bool = True) -> None:
    """Rename the values ``graph``'s nodes read and write, and those its subgraphs read from
    it; a subgraph's own inputs, initializers and node outputs shadow the names (the main
    graph's inputs and outputs keep theirs)."""
    if not top:
        renames = _unshadowed(graph, renames)
        if not renames:
            return
        for vi in graph.output:
            vi.name = renames.get(vi.name, vi.name)
    for node in graph.node:
        node.input[:] = [renames.get(i, i) for i in node.input]
        if top:
            node.output[:] = [renames.get(o, o) for o in node.output]
        for g in subgraphs(node):
            _rename(g, renames, top=False)


def _unshadowed(graph: GraphProto, renames: dict[str, str]) -> dict[str, str]:
    """The ``renames`` a subgraph still reads from outside: less the names its own inputs,
    initializers and node outputs shadow."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    return {k: v for k, v in renames.items() if k not in local}
