"""Text vectorizing: TfIdfVectorizer.

The n-gram pool is turned into a lookup table once, at compile time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onnxflow.compile.context import NodeContext
from onnxflow.ops.registry import op

_MODES = ("TF", "IDF", "TFIDF")


def _pool_table(pool: list, ngram_counts: list[int], ngram_indexes: list[int]) -> dict[tuple, int]:
    """Map each pooled n-gram (a tuple of tokens) to its position among all pooled n-grams."""
    bounds = [*ngram_counts, len(pool)]
    grams: list[tuple] = []
    for n, (start, end) in enumerate(itertools.pairwise(bounds), start=1):
        if start > end or (end - start) % n:
            raise ValueError(
                f"pool[{start}:{end}] cannot hold whole {n}-grams "
                f"(ngram_counts {ngram_counts}, pool size {len(pool)})"
            )
        grams += [tuple(pool[i : i + n]) for i in range(start, end, n)]
    if len(grams) != len(ngram_indexes):
        raise ValueError(
            f"the pool holds {len(grams)} n-grams but ngram_indexes has "
            f"{len(ngram_indexes)} entries"
        )
    return {gram: i for i, gram in enumerate(grams)}


@op("TfIdfVectorizer", 9, build=True)
def tfidf_vectorizer(
    node: NodeContext,
    *,
    mode: str,
    min_gram_length: int,
    max_gram_length: int,
    max_skip_count: int,
    ngram_counts: list[int],
    ngram_indexes: list[int],
    pool_int64s: list[int] | None = None,
    pool_strings: list[str] | None = None,
    weights: list[float] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Count pooled n-grams (with up to ``max_skip_count`` skipped tokens) in each row of X."""
    if mode not in _MODES:
        raise node.error(f"mode must be one of {list(_MODES)}, found {mode!r}")
    if (pool_int64s is None) == (pool_strings is None):
        raise node.error("exactly one of pool_int64s and pool_strings must be set")
    pool = pool_int64s if pool_int64s is not None else pool_strings
    try:
        table = _pool_table(pool, ngram_counts, ngram_indexes)
    except ValueError as exc:
        raise node.error(str(exc)) from exc
    scale = np.ones(len(ngram_indexes)) if weights is None else np.asarray(weights)
    shapes = [
        (n, skip + 1)
        for n in range(max(min_gram_length, 1), max_gram_length + 1)
        for skip in range(max_skip_count + 1 if n > 1 else 1)
    ]
    columns = np.asarray(ngram_indexes, dtype=np.int64)
    width = int(columns.max(initial=-1)) + 1
    return _Vectorizer(table, shapes, columns, width, mode, scale, pool_strings is not None)


@dataclass(frozen=True)
class _Vectorizer:
    """A compiled TfIdfVectorizer: the pooled n-grams and where their counts go."""

    table: dict[tuple, int]  # pooled n-gram -> its position among the pooled n-grams
    shapes: list[tuple[int, int]]  # (n, step between tokens) of every n-gram counted
    columns: np.ndarray  # output column of each pooled n-gram
    width: int  # output columns
    mode: str
    scale: np.ndarray  # weight of each pooled n-gram
    strings: bool  # whether the tokens are strings

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.ndim not in (1, 2):
            raise ValueError(f"TfIdfVectorizer expects a [C] or [N, C] input, found {x.shape}")
        if (x.dtype == object) != self.strings:
            raise TypeError(f"input dtype {x.dtype} does not match the pool's token type")
        rows = (x.reshape(1, -1) if x.ndim == 1 else x).tolist()
        counts = _count_ngrams(rows, self.table, self.shapes, len(self.columns))
        if self.mode == "IDF":
            counts = np.minimum(counts, 1)
        if self.mode != "TF":
            counts = counts * self.scale
        y = np.zeros((len(rows), self.width), dtype=np.float32)
        y[:, self.columns] = counts
        return y.reshape(*x.shape[:-1], self.width)


def _count_ngrams(
    rows: list[list], table: dict[tuple, int], shapes: list[tuple[int, int]], size: int
) -> np.ndarray:
    """Count, per row, each pooled n-gram over every (length, stride) in ``shapes``."""
    counts = np.zeros((len(rows), size))
    for r, row in enumerate(rows):
        for n, step in shapes:
            for start in range(len(row) - (n - 1) * step):
                hit = table.get(tuple(row[start : start + (n - 1) * step + 1 : step]))
                if hit is not None:
                    counts[r, hit] += 1
    return counts
