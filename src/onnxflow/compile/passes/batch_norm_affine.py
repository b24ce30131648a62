"""Model pass: a BatchNormalization between elementwise nodes becomes its scale and shift.

In inference, BatchNormalization is ``y = x * a + shift`` per channel, ``a = scale / sqrt(var +
epsilon)`` and ``shift = bias - mean * a`` (its kernel computes it so, with the factor and shift
made once from constant parameters). After a Conv the fold pass moves it into the Conv's weights
(:mod:`.fold_batch_norm`); where it cannot, between a float16 model's roundings (Conv ->
HalfRound -> BatchNormalization -> HalfRound -> Relu, each op rounded to float16) say, it is a
node of its own, two passes over the activation, between nodes that the pointwise regions would
otherwise join (:mod:`.pointwise`). This pass writes it as a ``Mul`` by ``a`` and an ``Add`` of
``shift``, new float32 initializers of shape ``[C, 1, ...]`` made by the kernel's own
:func:`onnxflow.ops._common.factor_and_shift`: the same float32 operations as the kernel's,
so the same bits, and two instructions a region can take.

It applies to a BatchNormalization of the main graph in inference mode (as the fold pass reads
it) whose four parameters are float32 constants (initializers the caller cannot override, or
Constant nodes' tensors, as the fold pass reads them, or such a constant rounded by a
HalfRound), one value per channel, whose input is
declared float32 with a known rank of at least 2, not known to be smaller than a region
(:data:`.pointwise.MIN_ELEMENTS`), not made by a Conv (the fold pass folds
such a pair, or has its reasons to leave it), and which has an elementwise neighbour a
region takes (its input made by, or its output read only by, a node whose kernel declares a
pointwise instruction). ``SessionOptions(optimize=False)`` keeps it.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from onnx import GraphProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from onnxflow.compile.passes.fold_batch_norm import constant_tensors, inference_mode
from onnxflow.compile.passes.graph_view import value_reads
from onnxflow.compile.passes.model_facts import ModelFacts
from onnxflow.compile.passes.op_traits import traits_of
from onnxflow.compile.passes.pointwise import MIN_ELEMENTS
from onnxflow.ir.domains import is_onnx_op, normalize_domain
from onnxflow.ir.names import fresh_name
from onnxflow.ops._common import factor_and_shift
from onnxflow.ops.pass_made import FUSED_DOMAIN, HALF_ROUND


def batch_norm_affine(graph: GraphProto, facts: ModelFacts) -> GraphProto | None:
    """The main ``graph`` with each BatchNormalization the pass takes as a Mul and an Add, or
    None when it takes none."""
    if not any(is_onnx_op(n, "BatchNormalization") for n in graph.node):
        return None
    opsets = {normalize_domain(d): v for d, v in facts.opsets.items()}
    opsets.setdefault(normalize_domain(FUSED_DOMAIN), 1)  # the HalfRound nodes of the passes
    if opsets.get("", 0) < 7:
        return None
    site = _Site(graph, facts, opsets)
    taken = [n for n in graph.node if site.takes(n)]
    if not taken:
        return None
    new = GraphProto()
    new.CopyFrom(graph)
    names = site.names
    rewritten = {id(n): _affine_nodes(n, site, new, names) for n in taken}
    nodes = [m for n in graph.node for m in rewritten.get(id(n), [n])]
    del new.node[:]
    new.node.extend(nodes)
    return new


class _Site:
    """What the pass reads of the main graph: its float32 constants, declared types, who makes
    and reads each value, and which nodes a pointwise region takes."""

    def __init__(self, graph: GraphProto, facts: ModelFacts, opsets: dict[str, int]) -> None:
        constants = {t.name for t in graph.initializer} - {vi.name for vi in graph.input}
        found = constant_tensors(graph, constants, graph.node)
        self.tensors = {k: t for k, t in found.items() if t.data_type == TensorProto.FLOAT}
        self.declared = {vi.name: vi for vi in [*graph.input, *graph.value_info, *graph.output]}
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.readers: dict[str, list[NodeProto]] = {}
        for n in graph.node:
            for name in dict.fromkeys(n.input):
                self.readers.setdefault(name, []).append(n)
        self.reads: Counter[str] = value_reads(graph.node, graph.output)
        self.names = {*self.declared, *self.producer, *(t.name for t in graph.initializer)}
        self.facts, self.opsets = facts, opsets

    def pointwise(self, node: NodeProto | None) -> bool:
        """Whether ``node``'s kernel declares a pointwise region instruction."""
        if node is None:
            return False
        traits = traits_of(node, self.opsets, self.facts.registry)
        return traits is not None and traits.pointwise is not None

    def parameter(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a float32 constant, or a float16 model's constant
        rounded by a HalfRound (:mod:`.half` rounds Constant nodes' results too): its values
        as a cast to float16 and back gives them, which is what HalfRound computes."""
        tensor = self.tensors.get(name)
        if tensor is not None:
            return numpy_helper.to_array(tensor)
        node = self.producer.get(name)
        if node is None or node.op_type != HALF_ROUND or node.domain != FUSED_DOMAIN:
            return None
        tensor = self.tensors.get(node.input[0])
        if tensor is None:
            return None
        return numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)

    def small(self, name: str) -> bool:
        """Whether ``name`` is declared with fewer elements than a region takes
        (:data:`.pointwise.MIN_ELEMENTS`): the two nodes would cost more than the one."""
        dims = self.declared[name].type.tensor_type.shape.dim
        known = [d.dim_value for d in dims if d.HasField("dim_value")]
        return len(known) == len(dims) and math.prod(known) < MIN_ELEMENTS

    def rank(self, name: str) -> int | None:
        """The rank ``name`` is declared float32 with, else None."""
        vi = self.declared.get(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            return None
        tt = vi.type.tensor_type
        if tt.elem_type != TensorProto.FLOAT or not tt.HasField("shape"):
            return None
        return len(tt.shape.dim)

    def takes(self, bn: NodeProto) -> bool:
        """Whether the pass rewrites ``bn`` (see the module)."""
        if not is_onnx_op(bn, "BatchNormalization") or not inference_mode(bn):
            return False
        return self._operands_fit(bn) and self._beside_a_region(bn)

    def _operands_fit(self, bn: NodeProto) -> bool:
        """Whether X is float32 of rank 2 or more, not known to be small, and the four
        parameters are constants of one value per channel."""
        rank = self.rank(bn.input[0])
        if rank is None or rank < 2 or self.small(bn.input[0]):
            return False
        params = [self.parameter(p) for p in bn.input[1:5]]
        if any(p is None or p.ndim != 1 for p in params):
            return False
        return len({p.shape for p in params}) == 1  # type: ignore[union-attr]

    def _beside_a_region(self, bn: NodeProto) -> bool:
        """Whether X is made by a node a region takes, or Y read only by one; not when a Conv
        makes X (the fold pass's to fold or to leave)."""
        maker = self.producer.get(bn.input[0])
        if maker is not None and is_onnx_op(maker, "Conv"):
            return False
        out = bn.output[0]
        readers = self.readers.get(out, [])
        read_by_region = len(readers) == 1 == self.reads[out] and self.pointwise(readers[0])
        return read_by_region or self.pointwise(maker)


def _affine_nodes(
    bn: NodeProto, site: _Site, graph: GraphProto, names: set[str]
) -> list[NodeProto]:
    """The Mul and Add computing ``bn``; their constants and the Mul's result are declared in
    ``graph``."""
    scale, bias, mean, var = (site.parameter(p) for p in bn.input[1:5])
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    a, shift = factor_and_shift(scale, bias, mean, var, np.float32(epsilon))
    tail = (1,) * (site.rank(bn.input[0]) - 2)  # type: ignore[operator]
    out = bn.output[0]
    a_name, shift_name = (fresh_name(f"{out}/{w}", names) for w in ("factor", "shift"))
    scaled = fresh_name(f"{out}/scaled", names)
    for name, value in ((a_name, a), (shift_name, shift)):
        graph.initializer.append(numpy_helper.from_array(value.reshape(-1, *tail), name))
    info = ValueInfoProto()
    info.CopyFrom(site.declared[bn.input[0]])
    info.name = scaled
    graph.value_info.append(info)
    base = bn.name or out
    return [
        helper.make_node("Mul", [bn.input[0], a_name], [scaled], name=f"{base}/scale"),
        helper.make_node("Add", [scaled, shift_name], [out], name=f"{base}/shift"),
    ]
