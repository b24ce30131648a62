"""Gradient (domain ``ai.onnx.preview.training``, version 1): reverse-mode differentiation.

The node names, by attributes, the tensors ``xs`` to differentiate against, the constants ``zs``
and the tensor ``y``; its inputs are the values of xs then zs at which to differentiate. At compile
time the kernel takes from its own graph the nodes that compute ``y`` from ``xs`` and ``zs`` (every
other value they read, e.g. initializers, is a constant) and compiles them as a subgraph; each run
evaluates that forward subgraph on the inputs, then walks it backwards from the seed ``ones(y)``,
so a non-scalar ``y`` is differentiated as ``sum(y)``. Gradients reaching an input through NumPy
broadcasting are summed over the broadcast axes. Each output is dy/dx in x's dtype.

Differentiable ops (default domain), one backward rule each in ``_RULES``: Add, Sub, Mul, Div,
Neg, Identity, MatMul, Gemm, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Pow (exponent constant),
ReduceSum, ReduceMean (axes as attribute or input), Transpose, Reshape, Flatten, Squeeze,
Unsqueeze, Expand. Any other op between xs and y is a compile-time error naming it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto, NodeProto, helper

from onnxflow.compile.attributes import decode_attribute
from onnxflow.compile.context import NodeContext
from onnxflow.ir.domains import is_default_domain
from onnxflow.ops.registry import op
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.observe import run_in_scope

TRAINING_DOMAIN = "ai.onnx.preview.training"
Grads = tuple[Any, ...]


def _matmul(g: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray) -> Grads:
    """dA = g @ B^T, dB = A^T @ g, with 1-D operands promoted to matrices as MatMul does."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    g2 = g[..., None] if b.ndim == 1 else g
    g2 = np.expand_dims(g2, -2) if a.ndim == 1 else g2
    da = g2 @ np.swapaxes(b2, -1, -2)
    db = np.swapaxes(a2, -1, -2) @ g2
    return (da[..., 0, :] if a.ndim == 1 else da), (db[..., 0] if b.ndim == 1 else db)


def _gemm(
    g: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray, c: Any = None, *,
    alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0,
) -> Grads:  # fmt: skip
    """Y = alpha * A' @ B' + beta * C, with A' = A^T when transA, B' = B^T when transB."""
    da = alpha * g @ (b if transB else b.T)
    db = alpha * (a if transA else a.T) @ g
    return (da.T if transA else da), (db.T if transB else db), beta * g


def _reduce(
    g: np.ndarray, y: np.ndarray, x: np.ndarray, axes_input: Any = None, *,
    axes: list[int] | None = None, keepdims: int = 1, noop_with_empty_axes: int = 0,
    mean: bool = False,
) -> Grads:  # fmt: skip
    """Spread g back over the reduced axes (divided by their size for a mean)."""
    axes = axes if axes_input is None else np.asarray(axes_input).tolist()
    if not axes and noop_with_empty_axes:
        return (g,)
    reduced = sorted(a % x.ndim for a in axes) if axes else list(range(x.ndim))
    if not keepdims:
        g = np.expand_dims(g, tuple(reduced))
    g = np.broadcast_to(g, x.shape)
    return (g / max(1, int(np.prod([x.shape[a] for a in reduced]))) if mean else g,)


def _transpose(g: np.ndarray, y: np.ndarray, x: np.ndarray, *, perm: Any = None) -> Grads:
    """Transpose g back by the inverse permutation."""
    return (g.transpose() if perm is None else g.transpose(np.argsort(perm)),)


def _reshape(g: np.ndarray, y: np.ndarray, x: np.ndarray, *_shape: Any, **_attrs: Any) -> Grads:
    """Reshape-like ops move no element: g takes x's shape back, whatever the attributes."""
    return (g.reshape(x.shape),)


# op type -> (backward rule, indices of the inputs it differentiates). A rule takes the output
# gradient, the output value and the input values (plus the node's attributes, bound at compile
# time) and returns each input's gradient, shaped like the output where broadcasting applied.
_RULES: dict[str, tuple[Callable[..., Grads], tuple[int, ...]]] = {
    "Add": (lambda g, y, a, b: (g, g), (0, 1)),
    "Sub": (lambda g, y, a, b: (g, -g), (0, 1)),
    "Mul": (lambda g, y, a, b: (g * b, g * a), (0, 1)),
    "Div": (lambda g, y, a, b: (g / b, -g * y / b), (0, 1)),
    "Neg": (lambda g, y, x: (-g,), (0,)),
    "Identity": (lambda g, y, x: (g,), (0,)),
    "MatMul": (_matmul, (0, 1)),
    "Gemm": (_gemm, (0, 1, 2)),
    "Relu": (lambda g, y, x: (g * (x > 0),), (0,)),
    "Sigmoid": (lambda g, y, x: (g * y * (1 - y),), (0,)),
    "Tanh": (lambda g, y, x: (g * (1 - y * y),), (0,)),
    "Exp": (lambda g, y, x: (g * y,), (0,)),
    "Log": (lambda g, y, x: (g / x,), (0,)),
    "Sqrt": (lambda g, y, x: (g / (2 * y),), (0,)),
    "Pow": (lambda g, y, x, e: (g * e * x ** (e - 1),), (0,)),
    "ReduceSum": (_reduce, (0,)),
    "ReduceMean": (functools.partial(_reduce, mean=True), (0,)),
    "Transpose": (_transpose, (0,)),
    "Reshape": (_reshape, (0,)),
    "Flatten": (_reshape, (0,)),
    "Squeeze": (_reshape, (0,)),
    "Unsqueeze": (_reshape, (0,)),
    "Expand": (lambda g, y, x, shape: (g,), (0,)),
}


def _fit(grad: Any, like: np.ndarray) -> np.ndarray:
    """Sum a gradient over the axes broadcasting added to ``like``; give it like's shape, dtype."""
    grad = np.asarray(grad)
    if grad.shape != like.shape:
        grad = grad.sum(axis=tuple(range(grad.ndim - like.ndim)))
        stretched = tuple(i for i, n in enumerate(like.shape) if n == 1 and grad.shape[i] != 1)
        grad = grad.sum(axis=stretched, keepdims=True).reshape(like.shape)
    return grad.astype(like.dtype, copy=False) if like.dtype.kind in "fc" else grad


def _forward_nodes(graph: GraphProto, y: str, leaves: set[str]) -> list[NodeProto]:
    """Return, in graph order, the nodes that ``y`` depends on without passing a leaf."""
    producer = {out: i for i, n in enumerate(graph.node) for out in n.output if out}
    picked: set[int] = set()
    stack = [y]
    while stack:
        name = stack.pop()
        i = producer.get(name)
        if name in leaves or i is None or i in picked:
            continue
        picked.add(i)
        stack.extend(graph.node[i].input)
    return [graph.node[i] for i in sorted(picked)]


def _backward_steps(
    node: NodeContext, forward: list[NodeProto], xs: Sequence[str]
) -> list[tuple[Callable[..., Grads], NodeProto, list[int]]]:
    """Bind a rule to each forward node that depends on xs; refuse what cannot be differentiated."""
    active, steps = set(xs), []
    for n in forward:
        wanted = [i for i, name in enumerate(n.input) if name in active]
        if not wanted:
            continue
        active.update(n.output)
        default_domain = is_default_domain(n.domain)
        rule, differentiable = _RULES.get(n.op_type, (None, ())) if default_domain else (None, ())
        what = f"{n.op_type} node {n.name or n.output[0]!r} (between xs and y)"
        if rule is None:
            raise node.error(f"cannot differentiate {what}; supported ops: {', '.join(_RULES)}")
        if not set(wanted) <= set(differentiable):
            raise node.error(
                f"{what}: inputs {wanted} depend on xs, only inputs {list(differentiable)} may"
            )
        attrs = {a.name: decode_attribute(a) for a in n.attribute}
        try:
            inspect.signature(rule).bind_partial(**attrs)
        except TypeError as exc:
            raise node.error(f"{what}: unsupported attribute(s) {sorted(attrs)}") from exc
        steps.append((functools.partial(rule, **attrs), n, wanted))
    return steps


def _backprop(
    steps: list[tuple[Callable[..., Grads], NodeProto, list[int]]], values: dict[str, Any], y: str
) -> dict[str, np.ndarray]:
    """Return d(sum y)/dv for every value v the steps reach, walking them backwards."""
    grads = {y: np.ones_like(values[y])}
    for rule, n, wanted in reversed(steps):
        g = grads.get(n.output[0])
        if g is None:
            continue
        ins = [values.get(v) if v else None for v in n.input]
        dx = rule(g, values[n.output[0]], *ins)
        for i in wanted:
            d = _fit(dx[i], ins[i])
            grads[n.input[i]] = grads[n.input[i]] + d if n.input[i] in grads else d
    return grads


@op("Gradient", 1, domain=TRAINING_DOMAIN, build=True)
def gradient(
    node: NodeContext, *, xs: list[str], y: str, zs: list[str] | None = None
) -> Callable[..., tuple[np.ndarray, ...]]:
    """Compile the forward computation of y from xs and zs; return the callable giving dy/dxs."""
    leaves = [*xs, *(zs or [])]
    if node.n_inputs != len(leaves):
        raise node.error(f"expected {len(leaves)} inputs (xs then zs), found {node.n_inputs}")
    if node.n_outputs > len(xs):
        raise node.error(f"expected at most {len(xs)} outputs (one per xs), found {node.n_outputs}")
    forward = _forward_nodes(node.graph, y, set(leaves))
    steps = _backward_steps(node, forward, xs)
    needed = list(dict.fromkeys([y, *(v for _, n, _ in steps for v in [*n.input, *n.output])]))
    needed = [v for v in needed if v and v not in leaves]
    sub = node.subgraph(
        helper.make_graph(
            forward,
            f"{node.key}_forward",
            [helper.make_empty_tensor_value_info(v) for v in leaves],
            [helper.make_empty_tensor_value_info(v) for v in needed],
        )
    )
    key, n_in = node.key, len(leaves)

    def run(*args: Any) -> tuple[np.ndarray, ...]:
        inputs, captured = list(args[:n_in]), sub.bind(args[n_in:])
        outs = run_in_scope(key, "forward", 1, current_runner(sub.plan), inputs + captured)
        values = dict(zip(leaves, inputs, strict=True)) | dict(zip(needed, outs, strict=True))
        grads = _backprop(steps, values, y)
        return tuple(np.array(grads[x]) if x in grads else np.zeros_like(values[x]) for x in xs)

    return run
