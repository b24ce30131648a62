"""com.microsoft operators that skl2onnx's default conversions emit.

MurmurHash3-1 (FeatureHasher), Solve-1 (GaussianProcessClassifier), Tokenizer-1 (between
StringNormalizer and TfIdfVectorizer in every TfidfVectorizer and CountVectorizer pipeline).

Tokenizer patterns are RE2 syntax and run on RE2 (google-re2), as in onnxruntime: linear time
whatever the pattern, leftmost-longest matches, ``.`` also matching a newline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import re2

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op

MS_DOMAIN = "com.microsoft"

_START_TEXT, _END_TEXT = "\x02", "\x03"
_UNTAKEN = re.compile(b"\x00+")


def _tokenizer_options() -> re2.Options:
    """RE2 as onnxruntime's Tokenizer runs it: leftmost-longest matches, ``.`` matching a
    newline too, errors raised rather than logged."""
    options = re2.Options()
    options.longest_match = True
    options.dot_nl = True
    options.log_errors = False
    return options


class _Pattern:
    """An RE2 pattern that finds leftmost-longest, non-overlapping, non-empty matches, in time
    linear in the text (RE2 never backtracks)."""

    def __init__(self, pattern: str) -> None:
        self.regex = re2.compile(pattern, _tokenizer_options())

    def spans(self, s: str) -> Iterator[tuple[int, int]]:
        """Yield the (start, end) of each match, scanning left to right."""
        pos = 0
        while pos <= len(s):
            m = self.regex.search(s, pos)
            if m is None:
                return
            start, end = m.span()
            if end > start:
                yield start, end
            pos = max(end, start + 1)


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
    except re2.error as exc:
        message = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc.args[0]
        raise node.error(f"cannot compile {what} {pattern!r}: {message}") from exc


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
