"""Names for the values a rewrite adds to a graph."""

from __future__ import annotations


def fresh_name(base: str, used: set[str]) -> str:
    """``base``, or ``base`` with a number after it, not in ``used`` (added to it)."""
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name
