"""What an exported module calls for an op that has no plain NumPy form: onnxflow's kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper

from onnxflow.errors import UnsupportedOperatorError
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY


def kernel(domain: str, op_type: str, since_version: int, **attrs: Any) -> Callable[..., Any]:
    """onnxflow's kernel of ``op_type`` (``domain``, ``since_version``) with ``attrs`` bound.

    A plain kernel is called directly; a builder kernel (one compiled per node) is run as a
    one-node model by onnxflow, compiled once per input signature.
    """
    load_all()
    found = REGISTRY.lookup(domain, op_type, since_version)
    if found is None:
        raise UnsupportedOperatorError(
            f"{domain or 'ai.onnx'}::{op_type} version {since_version}: onnxflow has no kernel",
            [(domain, op_type, since_version)],
        )
    if not found.build:
        return functools.partial(found.fn, **attrs)
    return functools.partial(_one_node, domain, op_type, since_version, _Frozen(attrs))


class _Frozen(dict):
    """Attributes as a hashable key for the one-node session cache."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(repr(sorted(self.items(), key=lambda kv: kv[0])))


def _one_node(domain: str, op_type: str, since: int, attrs: _Frozen, *inputs: Any) -> Any:
    """Run one node of a builder kernel's op on ``inputs`` through an onnxflow session."""
    signature = tuple(None if x is None else (np.asarray(x).dtype, np.ndim(x)) for x in inputs)
    session = _session(domain, op_type, since, attrs, signature)
    feeds = {f"in{i}": np.asarray(x) for i, x in enumerate(inputs) if x is not None}
    outs = session.run(None, feeds)
    return outs[0] if len(outs) == 1 else tuple(outs)


@functools.lru_cache(maxsize=256)
def _session(
    domain: str, op_type: str, since: int, attrs: _Frozen, signature: tuple[Any, ...]
) -> Any:
    from onnxflow.session import InferenceSession

    names = [f"in{i}" if s is not None else "" for i, s in enumerate(signature)]
    schema_outputs = _output_count(domain, op_type, since)
    outputs = [f"out{i}" for i in range(schema_outputs)]
    node = helper.make_node(op_type, names, outputs, domain=domain, **dict(attrs))
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(s[0]), [None] * s[1])
        for n, s in zip(names, signature, strict=True)
        if s is not None
    ]
    graph = helper.make_graph(
        [node], "one_node", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs]
    )
    opsets = [helper.make_opsetid(domain, since)]
    if domain:
        opsets.append(helper.make_opsetid("", 21))
    model = helper.make_model(graph, opset_imports=opsets)
    return InferenceSession(model.SerializeToString(), check=False)


def _output_count(domain: str, op_type: str, since: int) -> int:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, since, domain)
    except onnx.defs.SchemaError:
        return 1
    return len(schema.outputs)
