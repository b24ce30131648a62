"""Edits of a session's own copy of the model: initializers replaced by the values the
options add, and the model as the load-time folding leaves it (``optimized_model_filepath``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper

from onnxflow.errors import InvalidArgument, OnnxflowWarning
from onnxflow.ir.inference import infer_types
from onnxflow.ir.walk import subgraph_reads
from onnxflow.values import np_dtype


def replace_initializers(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> None:
    """Put ``values`` in place of the main graph's initializers of those names (the session's
    own copy of the model), each of the element type the model gives it; a name the model has
    no initializer for warns that it is unused."""
    if not values:
        return
    stored = {t.name: t for t in model.graph.initializer}
    for name, value in values.items():
        if name not in stored:
            warnings.warn(
                f"SessionOptions.add_initializer: the model has no initializer {name!r}; the "
                f"value is unused (initializers: {sorted(stored)[:10]})",
                OnnxflowWarning,
                stacklevel=4,
            )
            continue
        expected = np_dtype(stored[name].data_type)
        if value.dtype != expected:
            raise InvalidArgument(
                f"SessionOptions.add_initializer: {name!r} is {expected} in the model, the "
                f"value given is {value.dtype}"
            )
        stored[name].CopyFrom(onnx.numpy_helper.from_array(value, name))


def folded_model(model: onnx.ModelProto, plan: Any) -> onnx.ModelProto:
    """``model`` with the main graph's nodes that the compiled ``plan`` computed once at load
    time (their outputs all constant tensors) replaced by initializers holding their values,
    the initializers no node reads any more dropped, and the types shape inference finds.

    onnxflow's other passes (fusions, loop hoisting, float16 widening) rewrite the plan, not
    an ONNX graph, and are not in it; nor are folded values inside subgraphs.
    """
    folded = {
        plan.slot_names[slot]: plan.template[slot]
        for slot in plan.constant_slots
        if isinstance(plan.template[slot], np.ndarray)
    }
    kept = [n for n in model.graph.node if not _computed(n, folded)]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(kept)
    initializers = _initializers(model, kept, folded)
    del result.graph.initializer[:]
    result.graph.initializer.extend(initializers)
    del result.graph.value_info[:]
    return infer_types(result)


def _initializers(
    model: onnx.ModelProto, kept: list[onnx.NodeProto], folded: dict[str, np.ndarray]
) -> list[onnx.TensorProto]:
    """The initializers the ``kept`` nodes, their subgraphs or the graph's outputs read: the
    model's own (all those listed as inputs too) and the folded values, as declared."""
    graph = model.graph
    reads = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    reads |= subgraph_reads(kept)
    inputs = {vi.name for vi in graph.input}
    found = [t for t in graph.initializer if t.name in reads or t.name in inputs]
    return found + _folded_initializers(model, folded, reads)


def _folded_initializers(
    model: onnx.ModelProto, folded: dict[str, np.ndarray], reads: set[str]
) -> list[onnx.TensorProto]:
    """The folded values that are read (``reads``) after their nodes are dropped, each of the
    element type the model declares or shape inference finds for it."""
    dropped = {o for n in model.graph.node if _computed(n, folded) for o in n.output}
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in _typed(model)}
    found = []
    for name in sorted(dropped & reads):
        value, elem = folded[name], declared.get(name, 0)
        value = value.astype(np_dtype(elem), copy=False) if elem else value
        found.append(onnx.numpy_helper.from_array(value, name))
    return found


def _computed(node: onnx.NodeProto, folded: dict[str, np.ndarray]) -> bool:
    """Whether the plan computed every output of ``node`` at load time."""
    return all(o in folded for o in node.output if o)


def _typed(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The main graph's declared and inferred tensor types."""
    inferred = infer_types(model).graph
    found = [*inferred.input, *inferred.output, *inferred.value_info]
    return [vi for vi in found if vi.type.HasField("tensor_type")]
