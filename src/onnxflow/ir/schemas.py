"""The onnx schema of an operator at an opset, looked up once per ``(domain, op, opset)``.

The registry resolves a node's kernel through its schema's ``since_version`` and the compiler
reads the same schema's output count: both ask here, so onnx is asked once.
"""

from __future__ import annotations

import functools

import onnx.defs

from onnxflow.ir.domains import normalize_domain


@functools.lru_cache(maxsize=4096)
def op_schema(domain: str, op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    """The schema of ``op_type`` in force at ``opset`` of ``domain``, or None if onnx has none."""
    try:
        return onnx.defs.get_schema(op_type, opset, normalize_domain(domain))
    except onnx.defs.SchemaError:
        return None
