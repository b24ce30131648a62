"""What an exported module calls for an op that has no plain NumPy form: onnxflow's kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto, helper, numpy_helper

from onnxflow.errors import UnsupportedOperatorError
from onnxflow.ops.registry import REGISTRY
from onnxflow.runtime.stacking import pad_stacked


def kernel(
    domain: str,
    op_type: str,
    since_version: int,
    _outputs: int = 0,
    _omitted: tuple[int, ...] = (),
    **attrs: Any,
) -> Callable[..., Any]:
    """onnxflow's kernel of ``op_type`` (``domain``, ``since_version``) with ``attrs`` bound.

    A plain kernel is called directly; a builder kernel (one compiled per node) is run as a
    one-node model by onnxflow, compiled once per input signature. ``_outputs`` (for a node of
    an operator that may have several outputs) is how many outputs the node lists, and
    ``_omitted`` the positions among them it leaves empty: the one-node model lists exactly
    those, since a kernel may compute differently with more (BatchNormalization 7-13 takes
    the batch's statistics when it has its training outputs). The result is then a tuple of
    ``_outputs`` values, None at the omitted positions.
    """
    found = _lookup(domain, op_type, since_version)
    if found is None:
        raise UnsupportedOperatorError(
            f"{domain or 'ai.onnx'}::{op_type} version {since_version}: onnxflow has no kernel",
            [(domain, op_type, since_version)],
        )
    if not found.build:
        return functools.partial(found.fn, **attrs)
    node = (domain, op_type, since_version, _outputs, tuple(_omitted))
    return functools.partial(_one_node, node, _Frozen(attrs))


@functools.cache
def _lookup(domain: str, op_type: str, since_version: int) -> Any:
    """The registry's kernel, looked up once: the module calls ``kernel`` on every run, and in
    every iteration of a loop body."""
    return REGISTRY.lookup(domain, op_type, since_version)


def padded(rows: list[list[np.ndarray]], steps: int, empty: np.ndarray) -> np.ndarray:
    """Scan 8's scan output: each batch entry's rows stacked and padded with zeros to
    ``steps``, as the kernel pads them; ``empty`` (no rows: its dtype and element shape) when
    no entry has any. (Modules exported since write ``onnx_padded`` into themselves; this
    serves those exported before.)"""
    return pad_stacked([np.stack(entry) if entry else empty for entry in rows], steps, empty)


def subgraph(stored: np.ndarray) -> GraphProto:
    """A subgraph attribute the exported module keeps serialized in its weights (the same
    object for the same bytes, so the kernel built on it is reused)."""
    return _parse(stored.tobytes())


@functools.lru_cache(maxsize=32)
def _parse(data: bytes) -> GraphProto:
    graph = GraphProto()
    graph.ParseFromString(data)
    return graph


def _attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes as make_node takes them: an array as a tensor attribute (make_node
    would read it as a list of numbers)."""
    return {
        k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()
    }


class _Frozen(dict):
    """Attributes as a hashable key for the one-node session cache (a subgraph by identity)."""

    def __hash__(self) -> int:  # type: ignore[override]
        key = [(k, id(v) if isinstance(v, GraphProto) else repr(v)) for k, v in self.items()]
        return hash(tuple(sorted(key)))


def _one_node(node: _NodeKey, attrs: _Frozen, *inputs: Any) -> Any:
    """Run one node of a builder kernel's op (``(domain, op_type, since, outputs, omitted)``)
    on ``inputs`` through an onnxflow session."""
    signature = tuple(_signature(x) for x in inputs)
    session = _session(node, attrs, signature)
    feeds = {
        f"in{i}": x if isinstance(x, list) else np.asarray(x)
        for i, x in enumerate(inputs)
        if x is not None
    }
    outs = iter(session.run(None, feeds))
    count, omitted = node[3], node[4]
    if not count:
        return next(outs)
    return tuple(None if k in omitted else next(outs) for k in range(count))


def _signature(value: Any) -> tuple[Any, int, bool] | None:
    """What the one-node model declares for an input: element dtype, rank, and whether it is
    a sequence (its elements' dtype and rank; float32 scalars for an empty one); None for an
    omitted input."""
    if value is None:
        return None
    if isinstance(value, list):
        first = np.asarray(value[0]) if value else np.zeros((), np.float32)
        return first.dtype, first.ndim, True
    return np.asarray(value).dtype, np.ndim(value), False


def _value_info(name: str, signature: tuple[Any, int, bool]) -> Any:
    dtype, rank, sequence = signature
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    if sequence:
        return helper.make_tensor_sequence_value_info(name, elem, [None] * rank)
    return helper.make_tensor_value_info(name, elem, [None] * rank)


#: A builder kernel's node as the exported module calls it: domain, op type, since version,
#: the number of outputs it lists (0: one, returned bare) and the positions left empty.
_NodeKey = tuple[str, str, int, int, tuple[int, ...]]


@functools.lru_cache(maxsize=256)
def _session(node_key: _NodeKey, attrs: _Frozen, signature: tuple[Any, ...]) -> Any:
    from onnxflow.session import InferenceSession

    domain, op_type, since, count, omitted = node_key
    names = [f"in{i}" if s is not None else "" for i, s in enumerate(signature)]
    node_outputs = [f"out{i}" if i not in omitted else "" for i in range(max(count, 1))]
    outputs = [o for o in node_outputs if o]
    node = helper.make_node(op_type, names, node_outputs, domain=domain, **_attributes(attrs))
    inputs = [_value_info(n, s) for n, s in zip(names, signature, strict=True) if s is not None]
    graph = helper.make_graph(
        [node], "one_node", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs]
    )
    opsets = [helper.make_opsetid(domain, since)]
    if domain:
        opsets.append(helper.make_opsetid("", 21))
    model = helper.make_model(graph, opset_imports=opsets)
    return InferenceSession(model.SerializeToString(), check=False)
