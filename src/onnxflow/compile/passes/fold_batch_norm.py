"""Graph pass: a BatchNormalization in inference mode right after a Conv is folded into the
Conv's weights and bias.

Conv nets exported for inference (PP-OCR, MobileNets, ResNets) hold a BatchNormalization
after nearly every Conv: one more pass over every activation. Its inference form is an affine
map per channel, ``y = x * a + (bias - mean * a)`` with ``a = scale / sqrt(var + epsilon)``
(which is how the BatchNormalization kernel computes it too), so it can be moved into the
Conv: ``W' = W * a`` per output channel and ``B' = B * a + (bias - mean * a)``.

The pass writes this as a ``FoldBatchNorm`` node
(:func:`onnxflow.ops.pass_made.kernels.fold_batch_norm`) computing ``W'`` and ``B'`` from the
constants, then the Conv reading them and writing the
BatchNormalization's output. The fold node reads only initializers, so the compiler's constant
folding computes it once, when the session is created; the run does one Conv. Results differ
from the two nodes' only by rounding (the products are summed in another order, as onnxruntime's
own fold does).

It applies when the Conv's weight is a float32 or float64 constant (an initializer the
caller cannot override, or a Constant node's tensor), the Conv's output is read by the
BatchNormalization alone, the BatchNormalization runs in inference mode (opset 7 and later: no
``is_test``; ``spatial`` 1; ``training_mode`` 0; one output) and its four parameters (and the
Conv's bias) are such constants of the weight's channel count. Runs that observe every value
(``intermediate``, observers) no longer see the Conv's own output;
``SessionOptions(optimize=False)`` keeps the nodes as written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, helper

from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ir.names import fresh_name
from onnxflow.ops.pass_made import FOLD_BATCH_NORM, FUSED_DOMAIN

_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE)


def fold_batch_norm(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each foldable Conv -> BatchNormalization pair as a
    ``FoldBatchNorm`` node and one Conv, or None if there is none."""
    nodes = view.nodes
    if view.opset() < 7 or not any(is_onnx_op(n, "BatchNormalization") for n in nodes):
        return None
    reads = view.reads()
    producer = {o: n for n in nodes for o in n.output if o}
    tensors = constant_tensors(view.graph, view.constants(), nodes)
    names = view.names()
    replaced: dict[int, list[NodeProto]] = {}
    for bn in nodes:
        conv = _pair(bn, producer, reads, tensors)
        if conv is not None:
            replaced[id(conv)] = []
            replaced[id(bn)] = _folded(conv, bn, names)
    if not replaced:
        return None
    return [m for n in nodes for m in replaced.get(id(n), [n])]


def constant_tensors(
    graph: GraphProto, constants: set[str], nodes: Sequence[NodeProto]
) -> dict[str, TensorProto]:
    """The dense initializers of ``graph`` among ``constants`` (those the caller cannot
    override) and the outputs of ``nodes`` that are Constant nodes holding a tensor (as Paddle
    exports its weights), by name."""
    tensors = {t.name: t for t in graph.initializer if t.name in constants}
    for node in nodes:
        if is_onnx_op(node, "Constant") and len(node.attribute) == 1 and node.output:
            attr = node.attribute[0]
            if attr.name == "value" and attr.type == AttributeProto.TENSOR:
                tensors[node.output[0]] = attr.t
    return tensors


def _pair(
    bn: NodeProto,
    producer: dict[str, NodeProto],
    reads: Counter[str],
    tensors: dict[str, TensorProto],
) -> NodeProto | None:
    """The Conv whose output only ``bn`` reads, when the pair folds (see the module)."""
    if not is_onnx_op(bn, "BatchNormalization") or not inference_mode(bn):
        return None
    conv = producer.get(bn.input[0])
    if conv is None or not is_onnx_op(conv, "Conv") or reads[bn.input[0]] != 1:
        return None
    return conv if _constant_parameters(conv, bn, tensors) else None


def _constant_parameters(conv: NodeProto, bn: NodeProto, tensors: dict[str, TensorProto]) -> bool:
    """Whether the Conv's float weight, its bias if any and the four statistics are constants,
    one value per output channel."""
    if len(conv.input) < 2 or conv.input[1] not in tensors:
        return False
    weight = tensors[conv.input[1]]
    if weight.data_type not in _FLOATS or len(weight.dims) < 3:
        return False
    params = [i for i in conv.input[2:3] if i] + list(bn.input[1:5])
    channels = [weight.dims[0]]
    return all(p in tensors and list(tensors[p].dims) == channels for p in params)


def inference_mode(bn: NodeProto) -> bool:
    """Whether the BatchNormalization computes with its given statistics, one output."""
    attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
    if set(attrs) - {"epsilon", "momentum", "spatial", "training_mode"}:
        return False  # is_test, consumed_inputs: opset 6 and older
    if attrs.get("spatial", 1) != 1 or attrs.get("training_mode", 0) != 0:
        return False
    return len(bn.input) == 5 and bool(bn.output[0]) and not any(bn.output[1:])


def _folded(conv: NodeProto, bn: NodeProto, names: set[str]) -> list[NodeProto]:
    """The fold node, then the Conv reading its weight and bias and writing ``bn``'s output."""
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    base = bn.output[0]
    weight, bias = fresh_name(f"{base}/folded_W", names), fresh_name(f"{base}/folded_B", names)
    bias_in = conv.input[2] if len(conv.input) > 2 else ""
    fold = helper.make_node(
        FOLD_BATCH_NORM,
        [conv.input[1], bias_in, *bn.input[1:5]],
        [weight, bias],
        name=f"{bn.name or base}/fold",
        domain=FUSED_DOMAIN,
        epsilon=epsilon,
    )
    new_conv = NodeProto()
    new_conv.CopyFrom(conv)
    del new_conv.input[:], new_conv.output[:]
    new_conv.input.extend([conv.input[0], weight, bias])
    new_conv.output.append(base)
    return [fold, new_conv]
