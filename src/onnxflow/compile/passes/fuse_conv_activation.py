"""Graph pass: a Relu or HardSigmoid right after a float32 Conv runs in the Conv's own pass.

Conv nets (PP-OCR, MobileNets) follow most convolutions with a Relu, and their squeeze-excite
blocks end in ``Conv -> HardSigmoid``; once the BatchNormalizations are folded
(:mod:`.fold_batch_norm`) the activation reads the Conv's output alone. Run as two nodes, the
activation is one more call and one more pass over the output. The pass writes the pair as a
``ConvActivation`` node, which is onnxruntime's ``FusedConv`` under the fused domain: its NumPy
form runs the Conv's kernel then the activation's default-domain kernel (the two nodes as
written), its compiled form applies the activation to each float32 output as the loop or the
bias pass makes it (:mod:`onnxflow.ops.conv_direct`), computing what the activation's kernel
computes (other dtypes run the NumPy form).

It applies when the activation is the Conv's output's one reader (no other node, subgraph or
graph output), a Relu with no attributes or a HardSigmoid whose beta is
not -0.0 (there alone could the two compute zeros of different signs). Runs that observe every
value no longer see the Conv's own output; ``SessionOptions(optimize=False)`` keeps the nodes
as written.
"""

from __future__ import annotations

import math
from collections import Counter

from onnx import NodeProto, TensorProto, helper, numpy_helper

from onnxflow.compile.passes.fold_batch_norm import constant_tensors
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import CONV_ACTIVATION, FUSED_DOMAIN

#: The activations fused, with their attributes and defaults in FusedConv's
#: ``activation_params`` order.
ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
}
_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE)


def fuse_conv_activation(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each fusable chain Conv [-> Add bias] [-> activation] as
    one ``ConvActivation`` node, or None if there is none."""
    nodes = view.nodes
    if not any(is_onnx_op(n, "Conv") for n in nodes):
        return None
    reads = view.reads()
    readers: dict[str, list[NodeProto]] = {}
    for n in nodes:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    tensors = _with_reshaped(view, constant_tensors(view.graph, view.constants(), view.nodes))
    replaced: dict[int, list[NodeProto]] = {}
    for conv in nodes:
        chain = _chain(conv, _Reads(reads, readers), tensors)
        if chain is not None:
            members, fused = chain
            replaced.update({id(m): [] for m in members[:-1]})
            replaced[id(members[-1])] = [fused]
    if not replaced:
        return None
    return [m for n in nodes for m in replaced.get(id(n), [n])]


class _Reads:
    """Who reads each value: how many times, and which nodes."""

    def __init__(self, count: Counter[str], readers: dict[str, list[NodeProto]]) -> None:
        self.count, self.readers = count, readers

    def only(self, value: str) -> NodeProto | None:
        """The one node reading ``value`` once (nothing else, no graph output), or None."""
        found = self.readers.get(value, [])
        return found[0] if self.count[value] == 1 and len(found) == 1 else None


def _chain(
    conv: NodeProto, reads: _Reads, tensors: dict[str, TensorProto]
) -> tuple[list[NodeProto], NodeProto] | None:
    """The nodes of the chain starting at ``conv`` and the node replacing them, or None when
    nothing follows the Conv that fuses."""
    if not is_onnx_op(conv, "Conv") or len(conv.output) != 1 or not conv.output[0]:
        return None
    members, bias = [conv], None
    after = reads.only(conv.output[0])
    if after is not None and _bias_of(conv, after, tensors) is not None:
        bias = _bias_of(conv, after, tensors)
        members.append(after)
        after = reads.only(after.output[0])
    params = None if after is None else _params(after)
    if params is not None and after is not None:
        members.append(after)
    if len(members) == 1:
        return None
    return members, _fused(conv, members[-1], bias, params)


def _bias_of(conv: NodeProto, add: NodeProto, tensors: dict[str, TensorProto]) -> str | None:
    """The constant ``add`` adds to the bias-less Conv's output, when it is one float32 or
    float64 value per output channel (added after the sum, as the Conv adds its bias), else
    None. float16 is left out: its Conv rounds once, after its own bias."""
    if not is_onnx_op(add, "Add") or len(add.input) != 2 or add.input[0] != conv.output[0]:
        return None
    if (len(conv.input) > 2 and conv.input[2]) or len(conv.input) < 2:
        return None
    weight, bias = tensors.get(conv.input[1]), tensors.get(add.input[1])
    if weight is None or bias is None or bias.data_type not in _FLOATS:
        return None
    rank, dims = len(weight.dims), list(bias.dims)
    if len(dims) > rank or len(dims) < rank - 1 or rank < 3:
        return None
    dims = [1] * (rank - len(dims)) + dims
    return add.input[1] if dims[1] == weight.dims[0] == math.prod(dims) else None


def _with_reshaped(view: GraphView, tensors: dict[str, TensorProto]) -> dict[str, TensorProto]:
    """``tensors`` and, for each Reshape of one of them by a constant shape (how Paddle writes
    a bias (1, M, 1, 1)), a tensor of its type and output dims (its values are not needed)."""
    found = dict(tensors)
    for node in view.nodes:
        if not is_onnx_op(node, "Reshape") or len(node.input) != 2 or len(node.output) != 1:
            continue
        data, shape = tensors.get(node.input[0]), tensors.get(node.input[1])
        if data is None or shape is None or any(a.name == "allowzero" for a in node.attribute):
            continue
        dims = _reshaped(list(data.dims), numpy_helper.to_array(shape).tolist())
        if dims is not None:
            found[node.output[0]] = TensorProto(data_type=data.data_type, dims=dims)
    return found


def _reshaped(dims: list[int], shape: list[int]) -> list[int] | None:
    """The dims Reshape gives ``dims`` by ``shape`` (0 copies, -1 infers), or None."""
    out = [dims[i] if v == 0 and i < len(dims) else v for i, v in enumerate(shape)]
    known = math.prod(v for v in out if v != -1)
    if out.count(-1) > 1 or any(v < -1 for v in out) or known == 0:
        return None
    if -1 in out:
        out[out.index(-1)] = math.prod(dims) // known
    return out if math.prod(out) == math.prod(dims) else None


def _params(act: NodeProto) -> list[float] | None:
    """The ``activation_params`` of a fusable activation node, or None when it is not one."""
    fused = next((name for name in ACTIVATIONS if is_onnx_op(act, name)), None)
    if fused is None or len(act.input) != 1 or len(act.output) != 1 or not act.output[0]:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in act.attribute}
    names = ACTIVATIONS[fused]
    if set(attrs) - {name for name, _ in names}:
        return None
    params = [float(attrs.get(name, default)) for name, default in names]
    if fused == "HardSigmoid" and math.copysign(1.0, params[1]) < 0:
        return None
    return params


def _fused(
    conv: NodeProto, last: NodeProto, bias: str | None, params: list[float] | None
) -> NodeProto:
    """The ``ConvActivation`` node: the Conv's inputs (with ``bias`` as B) and attributes,
    the activation (when ``params`` is not None) of ``last``, and ``last``'s output."""
    inputs = list(conv.input) if bias is None else [*conv.input[:2], bias]
    fused = helper.make_node(
        CONV_ACTIVATION,
        inputs,
        [last.output[0]],
        name=f"{conv.name or conv.output[0]}/{last.op_type}",
        domain=FUSED_DOMAIN,
    )
    fused.attribute.extend(a for a in conv.attribute)
    if params is not None:
        fused.attribute.append(helper.make_attribute("activation", last.op_type))
    if params:
        fused.attribute.append(helper.make_attribute("activation_params", params))
    return fused
