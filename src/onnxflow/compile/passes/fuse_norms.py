"""Graph pass: LayerNorm and RMSNorm written as primitives become one node each.

torch.onnx's TorchScript exporter before opset 17, and many Hugging Face exports, write
LayerNorm over the last axis as ``ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) ->
Sqrt -> Div -> Mul(gamma) -> Add(beta)`` and LLaMA-style RMSNorm as ``Pow(2) -> ReduceMean ->
Add(eps) -> Sqrt -> Reciprocal -> Mul -> Mul(weight)``: nine and seven nodes, each a full pass
over the activation and most a full-size array. The pass makes each chain one node,
``PrimitiveLayerNorm`` or ``PrimitiveRMSNorm``
(:func:`onnxflow.ops.pass_made.norms.primitive_layer_norm`), whose NumPy form runs the nodes
as written (its ``body``) and whose compiled form normalizes each row in double and rounds once.

Variants taken: ``Mul(d, d)`` for the square, ``Mul(d, Reciprocal(s))`` or ``Mul(d, Div(1, s))``
for the division, either operand order of the commutative ops, gamma and beta each optional, and
a ``Cast`` to float32 before an RMSNorm's weight. Only when both ReduceMeans reduce the last
axis (``axes=[-1]``, kept), the exponent, epsilon, gamma and beta are float32 constants
(initializers or Constant nodes; gamma and beta at most 1-D), and every value inside the chain
is read by the chain alone. The input's type is checked at run time.
"""

from __future__ import annotations

from collections.abc import Callable

from onnx import NodeProto, TensorProto, helper

from onnxflow.compile.passes.chains import Chains, Found, body, outside_inputs, replace_chains
from onnxflow.compile.passes.graph_view import GraphView
from onnxflow.ir.domains import is_onnx_op
from onnxflow.ops.pass_made import FUSED_DOMAIN, PRIMITIVE_LAYER_NORM, PRIMITIVE_RMS_NORM


def fuse_norms(view: GraphView) -> list[NodeProto] | None:
    """The nodes of the graph with each LayerNorm or RMSNorm chain as one node, or None when
    there is none."""
    if not any(is_onnx_op(n, "ReduceMean") for n in view.nodes):
        return None
    return replace_chains(view, lambda walk, node: _layer_norm(walk, node) or _rms_norm(walk, node))


def _last_axis_mean(walk: Chains, node: NodeProto | None) -> bool:
    """Whether ``node`` is a ReduceMean over the last axis that keeps it."""
    if node is None or not is_onnx_op(node, "ReduceMean"):
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("keepdims", 1) != 1:
        return False
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = walk.const(node.input[1])
        axes = None if value is None else value.reshape(-1).tolist()
    return axes is not None and list(axes) == [-1]


def _square(walk: Chains, node: NodeProto | None, x: str) -> bool:
    """Whether ``node`` squares ``x``: ``Pow(x, 2)`` or ``Mul(x, x)``."""
    if node is None:
        return False
    if is_onnx_op(node, "Mul"):
        return list(node.input) == [x, x]
    return (
        is_onnx_op(node, "Pow")
        and list(node.input[:1]) == [x]
        and walk.scalar(node.input[1], 2.0) is not None
    )


def _root(walk: Chains, mean: NodeProto) -> tuple[list[NodeProto], str, float] | None:
    """From ``mean`` (the mean of the squares), ``Add(eps) -> Sqrt``: the nodes, the root's
    output and epsilon."""
    add = walk.sole(mean.output[0], "Add")
    eps = None if add is None else walk.other(add, mean.output[0])
    epsilon = None if eps is None else walk.scalar(eps)
    sqrt = None if add is None else walk.sole(add.output[0], "Sqrt")
    if add is None or epsilon is None or sqrt is None:
        return None
    return [add, sqrt], sqrt.output[0], epsilon


def _divided(walk: Chains, d: str, s: str) -> list[NodeProto] | None:
    """The nodes dividing ``d`` by ``s`` (the root): ``Div(d, s)``, or ``Mul(d, r)`` with ``r``
    ``Reciprocal(s)`` or ``Div(1, s)``."""
    readers = walk.readers.get(s, [])
    if len(readers) != 1:
        return None
    node = readers[0]
    if is_onnx_op(node, "Div") and list(node.input) == [d, s]:
        return [node]
    one = is_onnx_op(node, "Div") and list(node.input[1:]) == [s]
    if one and walk.scalar(node.input[0], 1.0) is None:
        return None
    if not (one or is_onnx_op(node, "Reciprocal")):
        return None
    mul = walk.sole(node.output[0], "Mul")
    if mul is None or walk.other(mul, node.output[0]) != d:
        return None
    return [node, mul]


def _affine(walk: Chains, value: str, op_type: str) -> tuple[NodeProto, str] | None:
    """The one ``op_type`` node (Mul or Add) applying a float32 constant of at most one dim to
    ``value``, and that constant's name."""
    node = walk.sole(value, op_type)
    other = None if node is None else walk.other(node, value)
    if other is None or other == value or walk.f32(other) is None:
        return None
    return node, other  # type: ignore[return-value]


def _layer_norm(walk: Chains, mean: NodeProto) -> Found | None:
    """The LayerNorm chain starting at ``mean`` (``ReduceMean(x)``), as one node."""
    if not _last_axis_mean(walk, mean):
        return None
    x = mean.input[0]
    sub = walk.sole(mean.output[0], "Sub")
    if sub is None or list(sub.input) != [x, mean.output[0]] or walk.declared_other(x):
        return None
    d = sub.output[0]
    square = next((n for n in walk.readers.get(d, []) if _square(walk, n, d)), None)
    var = None if square is None else walk.sole(square.output[0], "ReduceMean")
    if square is None or not _last_axis_mean(walk, var):
        return None
    root = _root(walk, var)  # type: ignore[arg-type]
    divide = None if root is None else _divided(walk, d, root[1])
    if root is None or divide is None:
        return None
    chain = [mean, sub, square, var, *root[0], *divide]  # type: ignore[list-item]
    return _with_affine(walk, chain, x, root[2], PRIMITIVE_LAYER_NORM)


def _rms_norm(walk: Chains, square: NodeProto) -> Found | None:
    """The RMSNorm chain starting at ``square`` (``Pow(x, 2)`` or ``Mul(x, x)``), as one node."""
    x = square.input[0] if square.input else ""
    if not x or not _square(walk, square, x) or walk.declared_other(x):
        return None
    mean = walk.sole(square.output[0], "ReduceMean")
    if not _last_axis_mean(walk, mean):
        return None
    root = _root(walk, mean)  # type: ignore[arg-type]
    divide = None if root is None else _divided(walk, x, root[1])
    if root is None or divide is None:
        return None
    chain = [square, mean, *root[0], *divide]  # type: ignore[list-item]
    cast = walk.sole(chain[-1].output[0], "Cast")
    if cast is not None and _casts_to_float(cast):
        chain.append(cast)
    return _with_affine(walk, chain, x, root[2], PRIMITIVE_RMS_NORM)


def _casts_to_float(cast: NodeProto) -> bool:
    """Whether ``cast`` converts to float32 (a no-op on the float32 values it fuses over)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in cast.attribute}
    return attrs.get("to") == TensorProto.FLOAT and set(attrs) <= {"to", "saturate"}


def _with_affine(
    walk: Chains, chain: list[NodeProto], x: str, epsilon: float, op_type: str
) -> Found | None:
    """``chain`` (normalizing ``x``) with the scale and shift after it, as one node: its
    inputs are x, then gamma and beta when there, then the other constants the nodes read."""
    params: list[str] = []
    flags = {"scaled": 0, "shifted": 0}
    steps: list[tuple[str, str, Callable[[], bool]]] = [
        ("Mul", "scaled", lambda: True),
        ("Add", "shifted", lambda: op_type == PRIMITIVE_LAYER_NORM),
    ]
    for op_name, flag, allowed in steps:
        found = _affine(walk, chain[-1].output[0], op_name) if allowed() else None
        if found is None:
            break
        chain.append(found[0])
        params.append(found[1])
        flags[flag] = 1
    if not walk.closed(chain):
        return None
    inputs = outside_inputs(chain, [x, *params])
    last = chain[-1]
    node = helper.make_node(
        op_type,
        inputs,
        [last.output[0]],
        name=last.name or last.output[0],
        domain=FUSED_DOMAIN,
        body=body(chain, inputs, f"{op_type}_{last.output[0]}"),
        epsilon=epsilon,
        **flags,
    )
    return chain, node
