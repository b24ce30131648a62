"""Node pass: a node that reads only constants is computed once, at compile time.

The compiler meets the nodes in order and runs :func:`fold_constants` on each bound one: when
it :func:`may_fold`, it is computed with :func:`fold` and its outputs are kept,
:func:`frozen`, as constants of the plan, so the nodes after it that read only them fold in
turn. A node may fold when its kernel
is ``pure`` (:class:`onnxflow.traits.Traits`: random draws differ per run), it holds no
subgraph, and every input it reads is a constant of its own graph. A result over
:data:`FOLD_LIMIT_BYTES`, or a failure, leaves the node to run time, where its error is
reported as any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto

from onnxflow.compile.passes.node_site import Computed, NodeSite
from onnxflow.compile.plan import many
from onnxflow.traits import Traits

#: A constant node whose output is larger than this is computed at run time instead.
FOLD_LIMIT_BYTES = 256 * 2**20


def fold_constants(site: NodeSite) -> Computed | None:
    """The pass: the bound node's outputs computed now, or None to leave it to run time."""
    step = site.step
    if step is None or not may_fold(step.traits, site.node, step.constant_args is not None):
        return None
    values = fold(step.fn, step.constant_args or (), step.n_outputs, step.several)
    return None if values is None else Computed(values)


def may_fold(traits: Traits, node: NodeProto, inputs_constant: bool) -> bool:
    """Whether ``node``, run by a kernel with ``traits``, may be computed at compile time when
    ``inputs_constant`` (every input it reads is omitted or a constant of its graph)."""
    return (
        inputs_constant
        and traits.pure
        and not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)
    )


def fold(
    fn: Callable[..., Any], args: Sequence[Any], n_outputs: int, multi: bool
) -> tuple[Any, ...] | None:
    """The ``n_outputs`` values of the step ``fn(*args)`` computed now; None leaves the node
    (and its error) to run time. ``multi``: the kernel returns a tuple of outputs."""
    try:
        with np.errstate(all="ignore"):
            result = fn(*args)
    except Exception:
        return None
    values = many(result, n_outputs) if multi else (result,)
    if any(isinstance(v, np.ndarray) and v.nbytes > FOLD_LIMIT_BYTES for v in values):
        return None
    return values


def frozen(value: Any) -> Any:
    """Mark arrays (also inside sequences) read-only: constants are shared by every run."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, list):
        for v in value:
            frozen(v)
    return value
