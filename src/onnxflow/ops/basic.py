"""Identity and constants: Identity, Constant, ConstantOfShape."""

from __future__ import annotations

from typing import Any

from onnxflow.ops.registry import op


@op("Identity", 1, 13, 14, 16, 19, 21, 23, 24, 25)
def identity(x: Any) -> Any:
    """Return the input unchanged (tensors, sequences and optionals alike)."""
    return x
