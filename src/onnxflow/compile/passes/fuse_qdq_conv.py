"""Graph pass: a statically quantized convolution written in QDQ form,
``QuantizeLinear(Conv(DequantizeLinear(x_q), DequantizeLinear(w_q)[, DequantizeLinear(b_q)]))``,
becomes one node, ``QDQConv``.

onnxruntime's quantizer (``quantize_static``, QDQ format) writes every convolution so, and
runs it as an integer kernel; run as written, each is a float convolution of dequantized
values between two passes over the activation. The fused node's NumPy form runs the nodes as
written (its ``body``), so ``kernels="numpy"`` gives the float graph's values bit for bit. Its
compiled form (:func:`onnxflow.ops.pass_made.qdq_conv.qdq_conv`) computes what QLinearConv
computes: the exact integer sum ``acc = sum (x_q - zx)(w_q - zw)``, plus the int32 bias,
scaled by ``sx * sw / sy`` and rounded once.

**Where the two differ, and by how much.** The float graph rounds each dequantized value,
each product and each partial sum to float32 (in its convolution's order), then divides by
``sy`` and rounds to an integer; the integer path's only rounding before that is its scale.
Both approximate the same real number ``r = (acc * sx * sw + b) / sy``. For output channel c,
with ``K`` terms per sum (``w[c].size``), ``S_c = max|x - zx| * sx * sw_c * sum|w[c] - zw_c|
+ |b_c|`` bounds the sum of the magnitudes of the terms, and any float32 summation order
(recursive, blocked, pairwise; with or without FMA) puts the float graph within
``gamma(K + 4) * S_c / sy`` of ``r``; the integer path's float32 tail is within
``gamma(5) * S_c / sy``, and a bias scale other than ``sx * sw_c`` moves the float graph by
``|b_c| * |sb_c - sx * sw_c| / sy`` more (``gamma(n) = n u / (1 - n u)``, ``u = 2**-24``). When
that total ``E_c`` is below 1 for every channel, the two values before rounding are less than
one step apart, so the two results differ by at most one quantization step, and only at
outputs whose float value lies within ``E_c`` of a rounding tie (``k + 1/2``): there the
float graph's own rounding error decides the side, and either side is as faithful to ``r``.
The compiled form computes ``E_c`` from the constant weights (once per weight) and runs the
float graph as written wherever the bound is not below 1, or a layout is not one the integer
kernels take. The float graph's convolution must sum its products (no Winograd or FFT): the
onnxflow Conv kernels do.

Only pointwise convolutions of :data:`MIN_WEIGHTS` weights or more are fused: on the others
the float graph (its Conv's direct loops, its Q -> DQ pairs as FakeQuantize) is as fast or
faster than the int16 kernel here, and the exact float graph is kept where nothing is gained.
Measured whole (one thread, the machine loaded, medians): a QDQ 1x1 convolution of 64 to 256
channels on 56 x 56, 1.62 ms against 1.93 ms as written; ppocr_cls_qdq has no convolution
this large and is unchanged; ppocr_det quantized QDQ, 13 of 62 convolutions fused, 88.4 ms
against 88.9 ms.

Matched: ONNX-domain nodes only; the Conv's output read only by the QuantizeLinear, the
QuantizeLinear with a given 8-bit zero point and no attributes but ``axis``/``saturate``, the
dequantizations with no attributes but ``axis``, W (and B) constants. The rewrite runs on
the main graph only, before :mod:`.fuse_qdq` (which would take the QuantizeLinear into a
FakeQuantize pair). A DequantizeLinear read by the Conv alone goes into the node; one read
elsewhere too stays for its other readers.
"""

from __future__ import annotations

from collections import Counter

from onnx import GraphProto, NodeProto, TensorProto, helper

from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import FUSED_DOMAIN, QDQ_CONV

#: Pointwise convolutions with fewer weights (output times input channels) stay as written:
#: measured (one thread, AVX-512), the integer path's packing and requantizing cost about as
#: much as the float graph's convolution and FakeQuantize below this (128 x 128 channels on
#: 8 x 8: 54 us against 41 us; 200 x 96 on 12 x 12: 85 against 83); above it the integer
#: path is 1.3 to 1.9 times faster (64 x 128 on 28 x 28: 131 against 172 us; 256 x 64 on
#: 56 x 56: 850 against 1613 us). Convolutions with a spatial kernel, strides or groups are
#: slower on the integer path (im2col in int16, no direct loop): 64 x 64 x 3 x 3 on 56 x 56,
#: 6.1 ms against 5.1 ms; depthwise 5 x 5, 92 against 64 us.
MIN_WEIGHTS = 128 * 128
#: The Conv attributes the fused node carries.
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def fuse_qdq_conv(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the main graph with each fusable quantized convolution as one ``QDQConv``
    node, or None if there is none."""
    if not view.main or not any(is_onnx_op(n, "Conv") for n in view.nodes):
        return None
    groups = _groups(view)
    if not groups:
        return None
    reads = view.reads()
    readers = Counter(i for n in view.nodes for i in set(n.input) if i)
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for conv, q, dqs in groups:
        fused[id(q)] = _fused_node(view.graph, conv, q, dqs)
        dropped.add(id(conv))
        dropped.update(id(d) for d in dqs if d is not None and _only_reader(d, readers, reads))
    return [fused.get(id(n), n) for n in view.nodes if id(n) not in dropped]


def _groups(view: GraphView) -> list[Group]:
    """The quantized convolutions of the graph that the integer kernel runs faster."""
    reads = view.reads()
    producer = {o: n for n in view.nodes for o in n.output if o}
    constants = view.constants()
    dims = {t.name: list(t.dims) for t in view.graph.initializer}
    found = []
    for node in view.nodes:
        group = _group(node, producer, reads, constants)
        if group is not None and pays(group[0], dims.get(group[2][1].input[0], [])):  # type: ignore[union-attr]
            found.append(group)
    return found


def pays(conv: NodeProto, w_dims: list[int]) -> bool:
    """Whether the integer kernel is faster than the float graph for this Conv: a pointwise
    (1x1, stride 1, unpadded, one group) convolution of at least :data:`MIN_WEIGHTS` weights,
    which the int16 kernel runs without gathering columns."""
    attrs = _attrs(conv)
    if len(w_dims) < 3 or attrs.get("group", 1) != 1 or any(d != 1 for d in w_dims[2:]):
        return False
    if any(v != 1 for v in attrs.get("strides", [])) or any(attrs.get("pads", [])):  # type: ignore[attr-defined]
        return False
    return (
        attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", b"VALID")
        and w_dims[0] * w_dims[1] >= MIN_WEIGHTS
    )


def _only_reader(dq: NodeProto, readers: Counter[str], reads: Counter[str]) -> bool:
    """Whether the Conv alone reads ``dq``'s output (once, no graph output, no subgraph)."""
    return reads[dq.output[0]] == 1 and readers[dq.output[0]] == 1


def _attrs(node: NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


Group = tuple[NodeProto, NodeProto, list[NodeProto | None]]


def _group(
    q: NodeProto, producer: dict[str, NodeProto], reads: Counter[str], constants: set[str]
) -> Group | None:
    """``(conv, q, [dq_x, dq_w, dq_b or None])`` when ``q`` ends a quantized convolution."""
    if not _quantizer(q):
        return None
    conv = producer.get(q.input[0])
    if conv is None or not is_onnx_op(conv, "Conv") or reads[q.input[0]] != 1:
        return None
    if len(conv.input) < 2 or set(_attrs(conv)) - set(CONV_ATTRIBUTES):
        return None
    dqs = [_dequantized(producer.get(name)) for name in conv.input]
    if dqs[0] is None or dqs[1] is None or dqs[1].input[0] not in constants:
        return None
    if len(dqs) > 2 and (dqs[2] is None or dqs[2].input[0] not in constants):
        return None
    return conv, q, [*dqs, None][:3]


def _quantizer(q: NodeProto) -> bool:
    """Whether ``q`` is a QuantizeLinear with its zero point given and no attribute but
    ``axis`` and ``saturate``."""
    if not is_onnx_op(q, "QuantizeLinear") or len(q.input) < 3 or not q.input[2]:
        return False
    return not set(_attrs(q)) - {"axis", "saturate"}


def _dequantized(dq: NodeProto | None) -> NodeProto | None:
    """``dq`` if it is a DequantizeLinear with its zero point given and no attribute but
    ``axis``."""
    if dq is None or not is_onnx_op(dq, "DequantizeLinear") or len(dq.input) < 3:
        return None
    return dq if dq.input[2] and not set(_attrs(dq)) - {"axis"} else None


def _fused_node(
    graph: GraphProto, conv: NodeProto, q: NodeProto, dqs: list[NodeProto | None]
) -> NodeProto:
    """The ``QDQConv`` node: its inputs the group's outside values, ``slots`` where each role
    is among them (-1: absent), ``weight_axis`` the axis of W's scale, ``body`` the group as
    written, and the Conv's attributes."""
    by_role = [*_roles(dqs[0]), *_roles(dqs[1]), *_roles(dqs[2]), q.input[1], q.input[2]]
    inputs = list(dict.fromkeys(name for name in by_role if name))
    slots = [inputs.index(name) if name else -1 for name in by_role]
    members = [d for d in dqs if d is not None]
    axis = _attrs(dqs[1]).get("axis", 1)  # type: ignore[union-attr]
    return helper.make_node(
        QDQ_CONV,
        inputs,
        list(q.output),
        name=q.name or conv.name,
        domain=FUSED_DOMAIN,
        body=_body(graph, [*members, conv, q], inputs),
        slots=slots,
        weight_axis=int(axis),  # type: ignore[call-overload]
        **_attrs(conv),  # type: ignore[arg-type]
    )


def _roles(dq: NodeProto | None) -> list[str]:
    if dq is None:
        return ["", "", ""]
    return [*dq.input, "", ""][:3]


def _body(graph: GraphProto, members: list[NodeProto], inputs: list[str]) -> GraphProto:
    """The group as written, its inner values renamed (a kept DequantizeLinear's output is
    still made outside), its inputs typed from the graph's initializers where known."""
    inner = {o: f"{o}/qdq_conv" for n in members[:-1] for o in n.output}
    nodes = []
    for n in members:
        copy = NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [inner.get(i, i) for i in n.input]
        copy.output[:] = [inner.get(o, o) for o in n.output]
        nodes.append(copy)
    types = {t.name: t.data_type for t in graph.initializer}
    types.update({vi.name: vi.type.tensor_type.elem_type for vi in graph.input})
    types.update({vi.name: vi.type.tensor_type.elem_type for vi in graph.value_info})
    for dq in members[:-2]:  # an 8-bit input has its zero point's type
        types.setdefault(dq.input[0], types.get(dq.input[2], TensorProto.UNDEFINED))
    zero_point = members[-1].input[2]
    return helper.make_graph(
        nodes,
        f"qdq_conv_{members[-1].name or members[-1].output[0]}",
        [helper.make_tensor_value_info(n, types.get(n, 0), None) for n in inputs],
        [helper.make_tensor_value_info(members[-1].output[0], types.get(zero_point, 0), None)],
    )
