"""Graph pass: the scaled-dot-product attention core written as primitives becomes one node.

torch.onnx (TorchScript and dynamo) and the hand-written stand-ins write attention as
``MatMul(Q, K^T) -> Div or Mul by a scalar -> Add(mask) -> Softmax(last axis) -> MatMul(., V)``;
the TorchScript export of ``scaled_dot_product_attention`` scales Q and K^T each by the square
root of the scale before the product instead, and both exporters guard the probabilities of a
fully masked row with ``Where(IsNaN(p), 0, p)``. Five to eight small steps per layer, each a
kernel call on a tensor of a few hundred values when decoding one token. The pass makes each
chain one ``ScaledDotProductAttention`` node
(:func:`onnxflow.ops.pass_made.attention.scaled_dot_product_attention`), whose NumPy form runs
the same NumPy operations in the same order (so the same bits) without the steps between them,
and the nodes as written (its ``body``) for any input it does not take.

Taken: ``Mul(x, c)`` of Q or K^T (either operand order) by a float32 scalar constant, read by
the first MatMul alone; the scores divided or multiplied by a float32 scalar constant; an
``Add`` of a mask (any value, either operand order); ``Softmax`` over axis -1 (opset 13 on);
``IsNaN`` and ``Where(isnan, c, p)`` with c a float32 scalar constant. Only when every value
inside the chain is read by the chain alone. The Transposes making Q, K^T and V (the head
split, K's transpose after the Concat of past keys) and the one of the context (the head
merge) join the chain when the chain alone reads their values: the node transposes as they
do, a view. Grouped-query head repetition (an Expand of K and V) is left outside: the node
reads K and V as the graph makes them.
"""

from __future__ import annotations

from onnx import NodeProto, helper

from onnxflow.compile.passes.chains import Chains, Found, body, outside_inputs, replace_chains
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import ATTENTION_ROLES, FUSED_DOMAIN, SCALED_DOT_PRODUCT_ATTENTION

#: The doc string of a fused node's body, the chain as written, which the pass leaves so.
BODY_DOC = "the nodes a ScaledDotProductAttention node stands for, as written"
#: The first opset whose Softmax normalizes along one axis (earlier: coerced to 2-D).
_SOFTMAX_AXIS_OPSET = 13


def fuse_attention(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each attention core as one node, or None when there is
    none."""
    if view.graph.doc_string == BODY_DOC or view.opset() < _SOFTMAX_AXIS_OPSET:
        return None
    if not any(is_onnx_op(n, "Softmax") for n in view.nodes):
        return None
    return replace_chains(view, _attention_at)


def _attention_at(walk: Chains, node: NodeProto) -> Found | None:
    """The attention core whose Softmax is ``node``, or None."""
    return _attention(walk, node) if is_onnx_op(node, "Softmax") else None


class _Match:
    """The chain as it is found, node by node, and the value of each role."""

    def __init__(self) -> None:
        self.before: list[NodeProto] = []  # the nodes before the Softmax, last first
        self.after: list[NodeProto] = []  # the Softmax and the nodes after it, in order
        self.roles: dict[str, str] = {}
        self.divide = 0


def _attention(walk: Chains, softmax: NodeProto) -> tuple[list[NodeProto], NodeProto] | None:
    """The attention chain around ``softmax``, as one node."""
    if not _last_axis(softmax):
        return None
    found = _Match()
    found.after.append(softmax)
    if not _scores(walk, softmax.input[0], found) or not _context(walk, softmax, found):
        return None
    perms = _transposes(walk, found)
    chain = [*reversed(found.before), *found.after]
    if not walk.closed(chain):
        return None
    roles = found.roles
    inputs = outside_inputs(chain, [roles[r] for r in ("q", "k", "v") if r in roles])
    if len(inputs) != len(set(inputs)) or any(roles[r] not in inputs for r in roles):
        return None
    last = chain[-1]
    written = body(chain, inputs, f"attention_{last.output[0]}")
    written.doc_string = BODY_DOC  # type: ignore[attr-defined]
    node = helper.make_node(
        SCALED_DOT_PRODUCT_ATTENTION,
        inputs,
        [last.output[0]],
        name=last.name or last.output[0],
        domain=FUSED_DOMAIN,
        body=written,
        slots=[inputs.index(roles[r]) if r in roles else -1 for r in ATTENTION_ROLES],
        divide=found.divide,
        **perms,
    )
    return chain, node


def _perm(node: NodeProto | None) -> list[int] | None:
    """The ``perm`` of ``node`` when it is a Transpose that names one."""
    if node is None or not is_onnx_op(node, "Transpose"):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return list(attrs["perm"]) if set(attrs) == {"perm"} else None


def _transposes(walk: Chains, found: _Match) -> dict[str, list[int]]:
    """Take into the chain the Transposes making Q, K^T and V and the one of the output (each
    a view, as the Transpose kernel gives, read by the chain alone); their perms by role."""
    perms: dict[str, list[int]] = {}
    for role in ("q", "k", "v"):
        node = walk.producer.get(found.roles[role])
        perm = _perm(node)
        if perm is not None and walk.reads[found.roles[role]] == 1:
            found.before.append(node)  # type: ignore[arg-type]
            found.roles[role] = node.input[0]  # type: ignore[union-attr]
            perms[f"perm_{role}"] = perm
    out = found.after[-1].output[0]
    node = walk.sole(out, "Transpose")
    perm = _perm(node)
    if perm is not None and walk.reads[out] == 1:
        found.after.append(node)  # type: ignore[arg-type]
        perms["perm_out"] = perm
    return perms


def _last_axis(softmax: NodeProto) -> bool:
    """Whether ``softmax`` normalizes along the last axis (-1, the default from opset 13)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in softmax.attribute}
    return set(attrs) <= {"axis"} and attrs.get("axis", -1) == -1 and len(softmax.input) == 1


def _scores(walk: Chains, value: str, found: _Match) -> bool:
    """Walk up from the Softmax's input: the optional mask Add, the optional scaling, the
    product of Q and K^T and the optional scalings of Q and K^T."""
    node = walk.producer.get(value)
    if node is not None and is_onnx_op(node, "Add") and len(node.input) == 2:
        chain_side = _scaled_or_product(walk, node)
        if chain_side is None:
            return False
        found.before.append(node)
        found.roles["mask"] = walk.other(node, chain_side) or ""
        node = walk.producer.get(chain_side)
    if node is not None and _scalar_op(walk, node, ("Div", "Mul")) is not None:
        found.before.append(node)
        found.roles["scale"], first = _scalar_op(walk, node, ("Div", "Mul"))  # type: ignore[misc]
        found.divide = int(is_onnx_op(node, "Div"))
        node = walk.producer.get(first)
    if node is None or not is_onnx_op(node, "MatMul") or len(node.input) != 2:
        return False
    found.before.append(node)
    for role, operand in zip(("q", "k"), node.input):
        found.roles[role] = _unscaled(walk, operand, role, found)
    return True


def _scaled_or_product(walk: Chains, add: NodeProto) -> str | None:
    """The input of the mask ``add`` that the chain makes: a scaling or a MatMul's product
    (the first when both are)."""
    for name in add.input:
        node = walk.producer.get(name)
        if node is not None and (
            is_onnx_op(node, "MatMul") or _scalar_op(walk, node, ("Div", "Mul")) is not None
        ):
            return name
    return None


def _scalar_op(walk: Chains, node: NodeProto, op_types: tuple[str, ...]) -> tuple[str, str] | None:
    """``(constant, other input)`` when ``node`` is one of ``op_types`` applying a float32
    scalar constant (the divisor of a Div, either operand of a Mul) to a value that is not one."""
    if not any(is_onnx_op(node, t) for t in op_types) or len(node.input) != 2:
        return None
    a, b = node.input
    if walk.scalar(b) is not None and walk.scalar(a) is None:
        return b, a
    if is_onnx_op(node, "Mul") and walk.scalar(a) is not None and walk.scalar(b) is None:
        return a, b
    return None


def _unscaled(walk: Chains, operand: str, role: str, found: _Match) -> str:
    """``operand`` of the product (Q or K^T), or what a scalar Mul read by the product alone
    scaled to make it (that Mul joining the chain and its constant ``role``'s scale)."""
    node = walk.producer.get(operand)
    scaled = None if node is None else _scalar_op(walk, node, ("Mul",))
    if node is None or scaled is None or walk.reads[operand] != 1:
        return operand
    found.before.append(node)
    found.roles[f"{role}_scale"] = scaled[0]
    return scaled[1]


def _context(walk: Chains, softmax: NodeProto, found: _Match) -> bool:
    """Walk down from the Softmax: the optional ``Where(IsNaN(p), c, p)`` guard, then the
    MatMul by V."""
    p = softmax.output[0]
    readers = walk.readers.get(p, [])
    isnan = next((n for n in readers if is_onnx_op(n, "IsNaN")), None)
    if isnan is not None and len(readers) == 2:
        where = walk.sole(isnan.output[0], "Where")
        ins = [] if where is None else list(where.input)
        if where is None or len(ins) != 3 or ins[0] != isnan.output[0] or ins[2] != p:
            return False
        if walk.scalar(ins[1]) is None or where not in readers:
            return False
        found.after.extend([isnan, where])
        found.roles["fill"] = ins[1]
        p = where.output[0]
    matmul = walk.sole(p, "MatMul")
    if matmul is None or len(matmul.input) != 2 or matmul.input[0] != p:
        return False
    found.after.append(matmul)
    found.roles["v"] = matmul.input[1]
    return True
