"""How a node is addressed in scopes, traces and comparisons: one rule for every layer."""

from __future__ import annotations

from collections.abc import Iterable


def node_key(name: str, outputs: Iterable[str], op_type: str) -> str:
    """A node's key: its name, else its first non-empty output's name, else its op type
    (names are assigned once, so a named output is unique)."""
    return name or next((o for o in outputs if o), op_type)
