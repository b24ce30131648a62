"""com.microsoft operators that skl2onnx's default conversions emit.

MurmurHash3-1 (FeatureHasher), Solve-1 (GaussianProcessClassifier), Tokenizer-1 (between
StringNormalizer and TfIdfVectorizer in every TfidfVectorizer and CountVectorizer pipeline).

Tokenizer patterns are RE2 syntax; they run on Python's ``re`` with RE2's matching rules:
ASCII-only ``\\w``, ``\\d``, ``\\s``, ``\\b``; ``.`` also matches a newline; leftmost-longest
matches; ``\\z`` and POSIX classes such as ``[[:alpha:]]`` translated.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator

import numpy as np

from onnxflow.compile.compiler import NodeContext
from onnxflow.ops.registry import op

MS_DOMAIN = "com.microsoft"

_START_TEXT, _END_TEXT = "\x02", "\x03"
_FLAGS = re.ASCII | re.DOTALL

_POSIX_RANGES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_POSIX_CLASS = re.compile(r"\[:(\^?)([a-z]+):\]")
_NEGATED_POSIX_ONLY = re.compile(r"\[\[:\^([a-z]+):\]\]")
_GLOBAL_FLAGS = re.compile(r"\(\?[a-zA-Z]+\)")
_UNTAKEN = re.compile(b"\x00+")

#: Patterns whose leftmost-first match is also the longest (checked on random patterns and
#: strings): no alternation or group, only single-character atoms (a literal, a class, ``.``),
#: each with an optional greedy quantifier, and zero-width assertions such as ``\\b``.
_LITERAL = r"(?:[^\\\[\](){}|?*+^$.]|\\[^a-zA-Z0-9])"
_ATOM = r"(?:\[\^?\]?(?:\\.|[^\]\\])*\]|\\[dDsSwW]|\.|" + _LITERAL + ")"
_QUANTIFIER = r"(?:[*+?]|\{\d+(?:,\d*)?\})"
_GREEDY_IS_LONGEST = re.compile(rf"(?:{_ATOM}{_QUANTIFIER}?|\\[bBAZ]|[\^$])+")


def _re2_to_python(pattern: str) -> str:
    """Spell an RE2 pattern for ``re``: ``\\z`` as ``\\Z`` and POSIX classes as ASCII ranges."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        negated_only = None if in_class else _NEGATED_POSIX_ONLY.match(pattern, i)
        posix = _POSIX_CLASS.match(pattern, i) if in_class else None
        if negated_only:
            out.append(f"[^{_posix_ranges(negated_only.group(1))}]")
            i = negated_only.end()
        elif posix:
            if posix.group(1):
                raise ValueError(
                    f"negated POSIX class {posix.group()!r} is only supported as a whole "
                    f"bracket expression such as [[:^alpha:]], found in {pattern!r}"
                )
            out.append(_posix_ranges(posix.group(2)))
            i = posix.end()
        elif pattern[i] == "\\":
            escape = pattern[i : i + 2]
            out.append("\\Z" if escape == "\\z" and not in_class else escape)
            i += 2
        else:
            if pattern[i] == "[" and not in_class:
                in_class = True
                start = i + 1 + (pattern[i + 1 : i + 2] == "^")
                if pattern[start : start + 1] == "]":  # a leading ']' is a literal member
                    out.append(pattern[i:start])
                    i = start
            elif pattern[i] == "]" and in_class:
                in_class = False
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _posix_ranges(name: str) -> str:
    if name not in _POSIX_RANGES:
        raise ValueError(f"unknown POSIX class [:{name}:], expected one of {sorted(_POSIX_RANGES)}")
    return _POSIX_RANGES[name]


class _Pattern:
    """An RE2 pattern that finds leftmost-longest, non-overlapping, non-empty matches."""

    def __init__(self, pattern: str) -> None:
        python = _re2_to_python(pattern)
        self.regex = re.compile(python, _FLAGS)
        flags = _GLOBAL_FLAGS.match(python)
        self.flags, self.body = (flags.group(), python[flags.end() :]) if flags else ("", python)
        self.greedy_is_longest = _GREEDY_IS_LONGEST.fullmatch(self.body) is not None

    def spans(self, s: str) -> Iterator[tuple[int, int]]:
        """Yield the (start, end) of each match, scanning left to right."""
        pos = 0
        while pos <= len(s):
            m = self.regex.search(s, pos)
            if m is None:
                return
            start, end = m.span()
            if not self.greedy_is_longest:
                end = next((e for e in range(len(s), end, -1) if self._ends_at(s, start, e)), end)
            if end > start:
                yield start, end
            pos = max(end, start + 1)

    def _ends_at(self, s: str, start: int, end: int) -> bool:
        return _followed_by(self.flags, self.body, len(s) - end).match(s, start) is not None


@functools.lru_cache(maxsize=256)
def _followed_by(flags: str, body: str, tail: int) -> re.Pattern[str]:
    """Compile ``body`` constrained to end exactly ``tail`` characters before the string's end."""
    return re.compile(f"{flags}(?:{body})(?=[\\s\\S]{{{tail}}}\\Z)", _FLAGS)


def _token_splitter(tokenexp: _Pattern, mincharnum: int) -> Callable[[str], list[str]]:
    def split(s: str) -> list[str]:
        tokens = (s[a:b] for a, b in tokenexp.spans(s))
        return [t for t in tokens if len(t) >= mincharnum]

    return split


def _separator_splitter(separators: list[_Pattern], mincharnum: int) -> Callable[[str], list[str]]:
    def split(s: str) -> list[str]:
        taken = bytearray(len(s))
        for separator in separators:  # an earlier separator wins where matches overlap
            for a, b in separator.spans(s):
                if not any(taken[a:b]):
                    taken[a:b] = b"\x01" * (b - a)
        runs = (m.span() for m in _UNTAKEN.finditer(taken))
        return [s[a:b] for a, b in runs if b - a >= mincharnum]

    return split


def _compile(node: NodeContext, what: str, pattern: str) -> _Pattern:
    try:
        return _Pattern(pattern)
    except (re.error, ValueError) as exc:
        raise node.error(f"cannot compile {what} {pattern!r}: {exc}") from exc


@op("Tokenizer", 1, domain=MS_DOMAIN, build=True)
def tokenizer(
    node: NodeContext,
    *,
    mark: int,
    mincharnum: int,
    pad_value: str,
    separators: list[str] | None = None,
    tokenexp: str | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Split each string of a [C] or [N, C] tensor into tokens along a new last axis.

    ``tokenexp`` keeps the matches of one pattern; ``separators`` (patterns, earlier ones winning
    where matches overlap; matches of length 0 separate nothing) keeps what lies between their
    matches, and ``[""]`` keeps each character. Tokens shorter than ``mincharnum`` characters
    are dropped. Each row is ``[STX] tokens [ETX]`` (markers only if ``mark``), then
    ``pad_value`` up to the longest row; if no string yields a token, the new axis has length 0.
    An empty input gives [0] or [N, 0].
    """
    if mincharnum < 1:
        raise node.error(f"mincharnum must be at least 1, found {mincharnum}")
    if (separators is None) == (tokenexp is None):
        raise node.error("exactly one of the attributes 'separators' and 'tokenexp' must be set")
    if separators == [""]:
        if mincharnum > 1:
            raise node.error(f"character tokenization needs mincharnum 1, found {mincharnum}")
        split: Callable[[str], list[str]] = list
    elif separators is not None:
        if not separators or "" in separators:
            raise node.error(
                f"separators must be non-empty patterns, or [''] alone, found {separators!r}"
            )
        patterns = [_compile(node, "separator", s) for s in separators]
        split = _separator_splitter(patterns, mincharnum)
    else:
        split = _token_splitter(_compile(node, "tokenexp", tokenexp or ""), mincharnum)

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim not in (1, 2) or x.dtype != object:
            raise TypeError(
                f"Tokenizer expects a [C] or [N, C] string tensor, found {x.dtype} {list(x.shape)}"
            )
        if x.size == 0:
            return np.empty(x.shape[:1] + (0,) * (x.ndim - 1), dtype=object)
        rows = [split(s) for s in x.reshape(-1).tolist()]
        return _padded(rows, x.shape, bool(mark), pad_value)

    return run


def _padded(rows: list[list[str]], shape: tuple[int, ...], mark: bool, pad: str) -> np.ndarray:
    """Lay rows of tokens out as [*shape, D], each marked if asked, then padded."""
    longest = max(len(r) for r in rows)
    if longest == 0:
        return np.empty((*shape, 0), dtype=object)
    out = np.full((len(rows), longest + 2 * mark), pad, dtype=object)
    for row, tokens in zip(out, rows):
        marked = [_START_TEXT, *tokens, _END_TEXT] if mark else tokens
        row[: len(marked)] = marked
    return out.reshape((*shape, out.shape[1]))


# -- MurmurHash3 -------------------------------------------------------------------------------

_MURMUR_C1, _MURMUR_C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
_HASHABLE = {"int32", "uint32", "int64", "uint64", "float32", "float64"}


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _scramble(k: np.ndarray) -> np.ndarray:
    return _rotl(k * _MURMUR_C1, 15) * _MURMUR_C2


def _murmur3_x86_32(keys: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """Hash byte strings laid out as rows of little-endian uint32 words (zero past each length)."""
    h = np.full(len(keys), seed & 0xFFFFFFFF, dtype=np.uint32)
    full_blocks = lengths // 4
    for j in range(keys.shape[1]):
        mixed = _rotl(h ^ _scramble(keys[:, j]), 13) * np.uint32(5) + np.uint32(0xE6546B64)
        tail = h ^ _scramble(keys[:, j])
        h = np.where(j < full_blocks, mixed, np.where(j * 4 < lengths, tail, h))
    h ^= lengths.astype(np.uint32)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = (h ^ (h >> np.uint32(shift))) * np.uint32(factor)
    return h ^ (h >> np.uint32(16))


def _key_words(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return each element's bytes (UTF-8 for strings) as rows of uint32 words, and byte counts."""
    if x.dtype == object:
        encoded = [s.encode("utf-8") for s in x.reshape(-1).tolist()]
        lengths = np.array([len(b) for b in encoded], dtype=np.int64)
        width = -(-int(lengths.max(initial=0)) // 4) * 4
        raw = np.array([b.ljust(width, b"\0") for b in encoded], dtype=f"S{max(width, 1)}")
        data = np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(len(encoded), -1)[:, :width]
    else:
        data = x.astype(x.dtype.newbyteorder("<")).reshape(-1, 1).view(np.uint8)
        lengths = np.full(len(data), x.dtype.itemsize, dtype=np.int64)
    return np.ascontiguousarray(data).view("<u4"), lengths


@op("MurmurHash3", 1, domain=MS_DOMAIN)
def murmur_hash3(x: np.ndarray, *, positive: int = 1, seed: int = 0) -> np.ndarray:
    """MurmurHash3_x86_32 of each element's bytes: UTF-8 for strings, little-endian for numbers.

    The result is uint32 if ``positive`` else the same bits as int32.
    """
    if x.dtype != object and x.dtype.name not in _HASHABLE:
        raise TypeError(f"MurmurHash3 hashes {sorted(_HASHABLE)} or strings, found {x.dtype}")
    if x.size == 0:
        return np.zeros(x.shape, dtype=np.uint32 if positive else np.int32)
    words, lengths = _key_words(x)
    hashed = _murmur3_x86_32(words, lengths, seed).reshape(x.shape)
    return hashed if positive else hashed.view(np.int32)


# -- Solve -------------------------------------------------------------------------------------


@op("Solve", 1, domain=MS_DOMAIN)
def solve(a: np.ndarray, y: np.ndarray, *, lower: int = 0, transposed: int = 0) -> np.ndarray:
    """Return X with A X = Y (A' X = Y if ``transposed``), as ``scipy.linalg.solve`` does.

    skl2onnx defines this operator after ``scipy.linalg.solve``, which reads ``lower`` only for
    symmetric matrices: a general A is solved whatever ``lower`` says.
    """
    if a.ndim != 2 or a.shape[0] != a.shape[1] or y.ndim not in (1, 2) or len(y) != len(a):
        raise ValueError(
            f"Solve expects a square A [n, n] and Y [n] or [n, k], found A {list(a.shape)} and "
            f"Y {list(y.shape)}"
        )
    matrix = a.T if transposed else a
    return (
        np.linalg.solve(matrix, y if y.ndim == 2 else y[:, None])
        .reshape(y.shape)
        .astype(np.result_type(a, y), copy=False)
    )
