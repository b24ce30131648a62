"""Graph pass: a MatMul whose one reader is the Add of a constant bias becomes one node,
``MatMulBias``.

Every linear layer of a transformer export (torch.onnx writes ``nn.Linear`` on a 3-D input as
``MatMul`` then ``Add(bias)``) makes the product, then a second full-size array for the sum.
The fused kernel (:func:`onnxflow.ops.pass_made.matmul_bias.matmul_bias`) adds the bias into the
product's own fresh array: one allocation and one pass fewer, with the same values
(``np.add(y, b, out=y)`` computes what ``np.add(y, b)`` does, and addition is commutative in
IEEE arithmetic, so either operand order of the Add gives them).

Only when the bias is a float32 constant (initializer or Constant node) of at most one dim,
so that it never widens the product; other inputs run the two kernels as written.
"""

from __future__ import annotations

from onnx import NodeProto, helper

from onnxflow.compile.passes.chains import Chains
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import FUSED_DOMAIN, MATMUL_BIAS


def fuse_matmul_bias(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each MatMul -> Add(bias) pair as one node, or None when
    there is none."""
    if not any(is_onnx_op(n, "MatMul") for n in view.nodes):
        return None
    walk = Chains(view)
    fused: dict[int, NodeProto] = {}
    dropped: set[int] = set()
    for node in view.nodes:
        pair = _pair(walk, node)
        if pair is not None:
            add, bias = pair
            fused[id(add)] = helper.make_node(
                MATMUL_BIAS,
                [*node.input, bias],
                list(add.output),
                name=add.name or node.name,
                domain=FUSED_DOMAIN,
            )
            dropped.add(id(node))
    if not fused:
        return None
    return [fused.get(id(n), n) for n in view.nodes if id(n) not in dropped]


def _pair(walk: Chains, matmul: NodeProto) -> tuple[NodeProto, str] | None:
    """The Add alone reading ``matmul``'s product, and the constant bias it adds."""
    if not is_onnx_op(matmul, "MatMul") or len(matmul.input) != 2:
        return None
    y = matmul.output[0]
    add = walk.sole(y, "Add")
    bias = None if add is None else walk.other(add, y)
    if add is None or bias is None or bias == y or walk.reads[y] != 1:
        return None
    return (add, bias) if walk.f32(bias) is not None else None
