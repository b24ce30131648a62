"""The values a generated integer input can take without failing the model, read from its
graph: the range of the axis a Gather indexes with it.

An integer input that reaches a ``Gather``'s indices in the main graph, directly or through
ops that keep its values (``Cast``, ``Reshape``, ``Unsqueeze``, ``Squeeze``, ``Flatten``,
``Identity``), must lie in ``[0, size - 1]``, where ``size`` is the gathered axis's size: known
when the data is an initializer or a ``Constant``, or its shape is static in the model's
``value_info`` or in what onnx's shape inference finds (run only when needed). An input that
reaches several Gathers takes the smallest range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import onnx
from onnx import helper

#: Ops whose first output holds their first input's values (rearranged or retyped).
KEEP_VALUES = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"})


@dataclass(frozen=True)
class IndexRange:
    """Indices in ``[0, size - 1]``, and why: the Gather, its data and the axis."""

    size: int
    why: str


def gather_ranges(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, IndexRange]:
    """For each input of ``names`` that reaches a Gather's indices along an axis of known size,
    the range of that axis (the smallest, when it reaches several)."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            consumers[name].append((node, position))
    shapes = _Shapes(model)
    found = {}
    for name in names:
        ranges = list(_ranges_of(name, consumers, shapes))
        if ranges:
            found[name] = min(ranges, key=lambda r: r.size)
    return found


def _ranges_of(
    name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]], shapes: _Shapes
) -> Iterator[IndexRange]:
    """The ranges of the Gathers that ``name``'s values reach as indices."""
    todo, seen = [name], {name}
    while todo:
        for node, position in consumers.get(todo.pop(), ()):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in KEEP_VALUES and position == 0:
                todo.extend(o for o in node.output[:1] if o not in seen)
                seen.update(node.output[:1])
            elif node.op_type == "Gather" and position == 1:
                found = _gathered_axis(node, shapes)
                if found is not None:
                    yield found


def _gathered_axis(node: onnx.NodeProto, shapes: _Shapes) -> IndexRange | None:
    """The range of the axis ``node`` (a Gather) indexes, when its size is known."""
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
    shape = shapes.of(node.input[0])
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    size = shape[axis]
    if size is None or size <= 0:
        return None
    where = f"Gather {node.name!r}" if node.name else f"the Gather giving {node.output[0]!r}"
    why = f"indices of {where} along axis {axis} of {node.input[0]!r} (size {size})"
    return IndexRange(size, why)


class _Shapes:
    """The static shapes of a graph's values (None for an unknown dimension): initializers and
    Constants first, then the declared ``value_info``, inputs and outputs, then, once asked
    for a value none of these gives, onnx's shape inference."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        graph = model.graph
        self.stored = {t.name: list(t.dims) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.stored[node.output[0]] = list(node.attribute[0].t.dims)
        self.declared = _declared([*graph.value_info, *graph.input, *graph.output])
        self.inferred: dict[str, list[int | None]] | None = None

    def of(self, name: str) -> list[int | None] | None:
        """``name``'s shape, or None when unknown."""
        for known in (self.stored, self.declared):
            if name in known:
                return known[name]
        if self.inferred is None:
            self.inferred = self._infer()
        return self.inferred.get(name)

    def _infer(self) -> dict[str, list[int | None]]:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model)
        except Exception:  # inference refuses the model (too large, invalid): no sizes
            return {}
        return _declared(inferred.graph.value_info)


def _declared(infos: Iterable[onnx.ValueInfoProto]) -> dict[str, list[int | None]]:
    """The ranked tensor shapes among ``infos``, with None for each dimension not a number."""
    shapes = {}
    for info in infos:
        if info.type.WhichOneof("value") != "tensor_type":
            continue
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            dims = tensor.shape.dim
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return shapes
