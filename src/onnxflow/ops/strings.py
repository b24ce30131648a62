"""String tensors: StringNormalizer, StringConcat, StringSplit, RegexFullMatch.

String tensors are object arrays of ``str``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import re2

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op

_CASE_CHANGES = {"NONE": None, "LOWER": str.lower, "UPPER": str.upper}


def _strings(x: np.ndarray, what: str) -> np.ndarray:
    """Return ``x`` as an object array of str, rejecting non-string tensors."""
    if x.dtype.kind not in "OU":
        raise TypeError(f"{what} expects a string tensor, found dtype {x.dtype}")
    return x.astype(object, copy=False)


@op("StringNormalizer", 10)
def string_normalizer(
    x: np.ndarray,
    *,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str = "",
    stopwords: list[str] | None = None,
) -> np.ndarray:
    """Drop ``stopwords`` from a [C] or [1, C] tensor, then lower- or uppercase what is left.

    Case changes use Python's locale-independent ``str.lower``/``str.upper`` whatever ``locale``
    says. If every element is dropped the result is a single empty string, shaped [1] or [1, 1].
    """
    if case_change_action not in _CASE_CHANGES:
        raise ValueError(
            f"StringNormalizer case_change_action must be one of {sorted(_CASE_CHANGES)}, "
            f"found {case_change_action!r}"
        )
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise ValueError(f"StringNormalizer expects shape [C] or [1, C], found {list(x.shape)}")
    words = list(_strings(x, "StringNormalizer").reshape(-1))
    if stopwords:
        fold = (lambda s: s) if is_case_sensitive else str.lower
        stop = {fold(w) for w in stopwords}
        words = [w for w in words if fold(w) not in stop]
    change = _CASE_CHANGES[case_change_action]
    if change is not None:
        words = [change(w) for w in words]
    out = np.array(words or [""], dtype=object)
    return out.reshape(1, -1) if x.ndim == 2 else out


@op("StringConcat", 20)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Concatenate two string tensors elementwise, with broadcasting."""
    joined = np.add(_strings(x, "StringConcat"), _strings(y, "StringConcat"), dtype=object)
    return np.asarray(joined, dtype=object)


@op("StringSplit", 20)
def string_split(
    x: np.ndarray, *, delimiter: str = "", maxsplit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split each string on ``delimiter`` (whitespace runs when empty), at most ``maxsplit`` times.

    Returns the substrings, padded with "" along a new last axis to the longest split, and the
    int64 count of substrings of each element.
    """
    parts = [
        s.split(delimiter or None, -1 if maxsplit is None else maxsplit)
        for s in _strings(x, "StringSplit").reshape(-1)
    ]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = int(counts.max(initial=0))
    out = np.full((len(parts), width), "", dtype=object)
    for row, p in zip(out, parts):
        row[: len(p)] = p
    return out.reshape((*x.shape, width)), counts


@op("RegexFullMatch", 20, build=True)
def regex_full_match(node: NodeContext, *, pattern: str = "") -> Callable[[np.ndarray], np.ndarray]:
    """Return, elementwise, whether the whole string matches the RE2 ``pattern``, run on RE2
    itself (google-re2) with its default options: the spec's syntax and meaning, in time
    linear in the text whatever the pattern."""
    options = re2.Options()
    options.log_errors = False
    try:
        regex = re2.compile(pattern, options)
    except re2.error as exc:
        message = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc.args[0]
        raise node.error(f"cannot compile pattern {pattern!r}: {message}") from exc

    def full_match(x: np.ndarray) -> np.ndarray:
        strings = _strings(x, "RegexFullMatch").reshape(-1)
        matches = [regex.fullmatch(s) is not None for s in strings]
        return np.array(matches, dtype=bool).reshape(x.shape)

    return full_match
