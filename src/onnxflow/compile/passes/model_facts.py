"""What a model pass reads besides the main graph: :class:`ModelFacts`.

A model pass is a function ``(graph, facts) -> GraphProto | None``: the main graph, with its
subgraphs, rewritten as a whole (a value renamed in the main graph is renamed where its
subgraphs read it), or None when the pass changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from onnx import GraphProto

from onnxflow.ops.registry import Registry


@dataclass(frozen=True)
class ModelFacts:
    """The model's opset imports, the kernels the compiler compiles with, the session's
    options the passes read, and whether strict shape inference agrees with the graph's types
    (asked only by a pass that reads them; the compiler checks it at most once)."""

    opsets: Mapping[str, int]
    registry: Registry
    #: SessionOptions.float16_rounding: ``"each_op"`` or ``"outputs"``.
    float16_rounding: str
    types_agree: Callable[[], bool]


#: A model pass: the main graph rewritten, or None when the pass changes nothing.
ModelPass = Callable[[GraphProto, ModelFacts], "GraphProto | None"]
