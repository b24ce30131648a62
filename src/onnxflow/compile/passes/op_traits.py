"""What a pass knows of an op: its kernel's promises, read from the compiler's registry."""

from __future__ import annotations

from collections.abc import Mapping

from onnx import NodeProto

from onnxflow.ir.domains import normalize_domain
from onnxflow.ops.registry import Registry
from onnxflow.traits import Traits


def traits_of(node: NodeProto, opsets: Mapping[str, int], registry: Registry) -> Traits | None:
    """The traits (:class:`~onnxflow.traits.Traits`) ``registry``'s kernel for ``node`` is
    registered with, at the opset its scope imports (``opsets``, by normalized domain); None
    when the scope does not import the node's domain or no kernel serves the node (a function
    call, which the compiler expands)."""
    opset = opsets.get(normalize_domain(node.domain))
    if opset is None:
        return None
    kernel = registry.lookup(node.domain, node.op_type, opset)
    return None if kernel is None else kernel.traits
