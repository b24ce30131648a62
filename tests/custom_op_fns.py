"""Functions of custom operators for tests/test_custom_ops.py, at module level so that they
pickle and that an exported module imports them back."""

from __future__ import annotations

import numpy as np


def scale(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """``com.example.Scale``: x times ``alpha``, plus one."""
    return (x * np.float32(alpha) + np.float32(1)).astype(x.dtype)


def split_signs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``com.example.SplitSigns``: the positive and the negative parts of x."""
    return np.maximum(x, 0), np.minimum(x, 0)


#: What ``--custom-ops custom_op_fns:CUSTOM_OPS`` gives a command.
CUSTOM_OPS = {"com.example.Scale": scale, "com.example.SplitSigns": split_signs}
