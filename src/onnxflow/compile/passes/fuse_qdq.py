"""Graph pass: a QuantizeLinear read only by a DequantizeLinear with the same scale and zero
point becomes one node, ``FakeQuantize``.

Statically quantized (QDQ) models hold such a pair on every activation: onnxruntime folds the
pairs into integer kernels; run as written, each pair makes an 8-bit tensor and reads it back,
two passes and two allocations over the activation. The fused kernel
(:func:`onnxflow.ops.pass_made.quantize.fake_quantize`) rounds, clamps and scales back in one
float32 buffer, with the same result: ``k = clamp(rint(x / s) + z)`` is an exact small integer
in float32, and ``(k - z) * s`` is rounded once, as DequantizeLinear rounds it. Inputs that are
not float32 with an 8-bit zero point run the two kernels as written.

The 8-bit value itself is no longer made: a run that asks for every value (``intermediate``,
observers) sees the pair as one node. Runs with ``SessionOptions(optimize=False)`` keep the
pair.
"""

from __future__ import annotations

from collections import Counter

from onnx import NodeProto, helper

from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import FAKE_QUANTIZE, FUSED_DOMAIN


def fuse_qdq(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each fusable QuantizeLinear -> DequantizeLinear pair as one
    node, or None if there is none."""
    nodes = view.nodes
    if not any(n.op_type == "DequantizeLinear" for n in nodes):
        return None
    reads = view.reads()
    producer = {o: n for n in nodes for o in n.output if o}
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for node in nodes:
        q = _pair(node, producer, reads)
        if q is not None:
            fused[id(node)] = _fused_node(q, node)
            dropped.add(id(q))
    if not fused:
        return None
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def _attrs(node: NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pair(dq: NodeProto, producer: dict[str, NodeProto], reads: Counter[str]) -> NodeProto | None:
    """The QuantizeLinear that ``dq`` alone reads, with the same scale, zero point and axis,
    per tensor or per axis (no blocks, no output type or precision of its own)."""
    if not is_onnx_op(dq, "DequantizeLinear") or len(dq.input) < 2:
        return None
    q = producer.get(dq.input[0])
    if q is None or not is_onnx_op(q, "QuantizeLinear") or reads[dq.input[0]] != 1:
        return None
    if list(q.input[1:3]) != list(dq.input[1:3]) or len(q.input) < 3 or not q.input[2]:
        return None  # the zero point sets the 8-bit type: it must be given
    qa, da = _attrs(q), _attrs(dq)
    if set(qa) - {"axis", "saturate"} or set(da) - {"axis"}:
        return None
    return q if qa.get("axis", 1) == da.get("axis", 1) else None


def _fused_node(q: NodeProto, dq: NodeProto) -> NodeProto:
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    return helper.make_node(
        FAKE_QUANTIZE,
        list(q.input[:3]),
        list(dq.output),
        name=dq.name or q.name,
        domain=FUSED_DOMAIN,
        axis=axis,
    )
