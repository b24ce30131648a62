"""How GreedySearch, BeamSearch and Sampling pick the next token from a decoder's logits.

Each search is a :class:`Search`: given the last position's logits of every row (a row is one
sequence of one batch entry, ``batch * num_beams`` rows for BeamSearch) and the sequences so
far, it returns which rows continue (the beam each new row extends), the token each appends,
and whether every batch entry is finished. :class:`LogitsProcessors` applies the schema's
filters in onnxruntime's order (repetition penalty, no-repeat n-grams, vocab_mask,
prefix_vocab_mask, min_length); a filtered token's score becomes the lowest float.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from onnxflow.errors import InputError

#: The score a filtered token gets.
LOWEST = np.finfo(np.float32).min

Step = tuple[np.ndarray, np.ndarray, bool]


class Search(Protocol):
    """A decoding strategy: one :meth:`step` per decoder run."""

    def step(self, logits: np.ndarray, sequences: np.ndarray, first: bool) -> Step:
        """(rows continued, tokens appended, all finished) from ``logits`` (rows, vocab)."""


@dataclass(frozen=True)
class LogitsProcessors:
    """The logits filters of the generation operators' inputs and attributes."""

    eos: int
    min_length: int = 0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    vocab_mask: np.ndarray | None = None
    #: (batch, vocab), applied to the first generated token only.
    prefix_vocab_mask: np.ndarray | None = None
    #: rows per batch entry (num_beams), to find a row's prefix_vocab_mask.
    rows_per_entry: int = 1

    def apply(self, scores: np.ndarray, sequences: np.ndarray, first: bool) -> np.ndarray:
        """Filter ``scores`` (rows, vocab) in place given ``sequences`` (rows, length)."""
        if self.repetition_penalty != 1.0:
            _repetition_penalty(scores, sequences, self.repetition_penalty)
        if self.no_repeat_ngram_size > 0:
            _no_repeat_ngram(scores, sequences, self.no_repeat_ngram_size)
        if self.vocab_mask is not None:
            scores[:, np.reshape(self.vocab_mask, -1)[: scores.shape[1]] == 0] = LOWEST
        if first and self.prefix_vocab_mask is not None:
            entries = np.reshape(self.prefix_vocab_mask, (-1, np.shape(self.prefix_vocab_mask)[-1]))
            rows = np.repeat(entries, self.rows_per_entry, axis=0)
            scores[rows[:, : scores.shape[1]] == 0] = LOWEST
        if sequences.shape[1] < self.min_length and 0 <= self.eos < scores.shape[1]:
            scores[:, self.eos] = LOWEST
        return scores


def _repetition_penalty(scores: np.ndarray, sequences: np.ndarray, penalty: float) -> None:
    """Each token already in a row's sequence: a negative score times, a positive one over,
    ``penalty``."""
    for row, seq in zip(scores, sequences, strict=True):
        seen = np.unique(seq)
        seen = seen[(seen >= 0) & (seen < row.shape[0])]
        s = row[seen]
        row[seen] = np.where(s < 0, s * np.float32(penalty), s / np.float32(penalty))


def _no_repeat_ngram(scores: np.ndarray, sequences: np.ndarray, n: int) -> None:
    """Block every token that would repeat an n-gram already in the row's sequence."""
    length = sequences.shape[1]
    if n > length:
        return
    for row, seq in zip(scores, sequences, strict=True):
        tail = seq[length - n + 1 :]
        for j in range(length - n + 1):
            if np.array_equal(seq[j : j + n - 1], tail) and 0 <= seq[j + n - 1] < row.shape[0]:
                row[seq[j + n - 1]] = LOWEST


@dataclass
class Greedy:
    """GreedySearch: the best token of each row; a finished row appends ``pad``."""

    processors: LogitsProcessors
    pad: int
    rows: int
    done: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.done = np.zeros(self.rows, dtype=bool)

    def choose(self, scores: np.ndarray) -> np.ndarray:
        """The token of each row from its processed scores."""
        return np.argmax(scores, axis=1)

    def step(self, logits: np.ndarray, sequences: np.ndarray, first: bool) -> Step:
        """Append each row's choice; a row is done once it produced eos."""
        scores = self.processors.apply(logits.astype(np.float32), sequences, first)
        tokens = self.choose(scores).astype(sequences.dtype)
        tokens[self.done] = self.pad
        self.done |= tokens == self.processors.eos
        return np.arange(self.rows), tokens, bool(self.done.all())


@dataclass
class TopP(Greedy):
    """Sampling (not custom): temperature, then nucleus filtering, then one random draw."""

    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    temperature: float = 1.0
    top_p: float = 1.0
    filter_value: float = -np.inf
    min_tokens_to_keep: int = 1

    def choose(self, scores: np.ndarray) -> np.ndarray:
        """A token drawn from each row's distribution over the tokens top_p keeps."""
        if self.temperature != 1.0:
            scores = scores / np.float32(self.temperature)
        scores = top_p_filter(scores, self.top_p, self.filter_value, self.min_tokens_to_keep)
        probs = _softmax(scores.astype(np.float64))
        draws = self.rng.random((scores.shape[0], 1))
        picked = (np.cumsum(probs, axis=1) < draws).sum(axis=1)
        return np.minimum(picked, scores.shape[1] - 1)


def top_p_filter(scores: np.ndarray, top_p: float, filter_value: float, keep: int) -> np.ndarray:
    """``scores`` with every token outside the smallest most-probable set whose probabilities
    reach ``top_p`` set to ``filter_value`` (at least ``keep`` tokens stay)."""
    if top_p >= 1.0:
        return scores
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=1)
    cumulative = np.cumsum(_softmax(ranked), axis=1)
    drop = np.zeros_like(cumulative, dtype=bool)
    drop[:, 1:] = cumulative[:, :-1] > top_p  # the token crossing top_p stays
    drop[:, :keep] = False
    out = scores.copy()
    np.put_along_axis(out, order, np.where(drop, np.float32(filter_value), ranked), axis=1)
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Log of the softmax over the last axis, in float32."""
    x = x.astype(np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@dataclass
class Hypotheses:
    """The finished sequences of one batch entry: the ``beams`` best by length-penalized score."""

    beams: int
    length_penalty: float
    early_stopping: bool
    kept: list[tuple[float, np.ndarray]] = field(default_factory=list)

    def worst(self) -> float:
        """The lowest kept score (+inf while fewer than ``beams`` are kept)."""
        return min(s for s, _ in self.kept) if len(self.kept) >= self.beams else np.inf

    def add(self, sequence: np.ndarray, sum_logprobs: float) -> None:
        """Keep ``sequence`` if it is among the best ``beams``."""
        score = sum_logprobs / (sequence.shape[0] ** self.length_penalty)
        if len(self.kept) < self.beams or score > self.worst():
            self.kept.append((score, sequence))
            if len(self.kept) > self.beams:
                self.kept.remove(min(self.kept, key=lambda k: k[0]))

    def is_done(self, best_sum_logprobs: float, length: int) -> bool:
        """Whether no running beam can beat the kept ones any more."""
        if len(self.kept) < self.beams:
            return False
        if self.early_stopping:
            return True
        return self.worst() >= best_sum_logprobs / (length**self.length_penalty)

    def best(self, n: int) -> list[tuple[float, np.ndarray]]:
        """The ``n`` best, best first."""
        return sorted(self.kept, key=lambda k: -k[0])[:n]


@dataclass
class Beam:
    """BeamSearch over ``batch`` entries of ``beams`` rows each, with per-entry hypotheses."""

    processors: LogitsProcessors
    pad: int
    batch: int
    beams: int
    length_penalty: float = 1.0
    early_stopping: bool = False
    keep_scores: bool = False
    scores: np.ndarray = field(init=False)
    done: np.ndarray = field(init=False)
    hyps: list[Hypotheses] = field(init=False)
    history: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = np.full((self.batch, self.beams), -1e9, dtype=np.float32)
        self.scores[:, 0] = 0.0  # the first step picks from one beam per entry
        self.scores = self.scores.reshape(-1)
        self.done = np.zeros(self.batch, dtype=bool)
        self.hyps = [
            Hypotheses(self.beams, self.length_penalty, self.early_stopping)
            for _ in range(self.batch)
        ]

    def step(self, logits: np.ndarray, sequences: np.ndarray, first: bool) -> Step:
        """The best ``beams`` continuations of each entry; eos ones become hypotheses."""
        scores = self.processors.apply(log_softmax(logits), sequences, first)
        scores = scores + self.scores[:, None]
        if self.keep_scores:
            self.history.append(scores.reshape(self.batch, self.beams, -1))
        vocab = scores.shape[1]
        flat = scores.reshape(self.batch, -1)
        top = np.argsort(-flat, axis=1, kind="stable")[:, : 2 * self.beams]
        top_scores = np.take_along_axis(flat, top, axis=1)
        keep = np.zeros(self.batch * self.beams, dtype=np.int64)
        tokens = np.full(self.batch * self.beams, self.pad, dtype=sequences.dtype)
        new_scores = np.zeros(self.batch * self.beams, dtype=np.float32)
        for b in range(self.batch):
            rows = slice(b * self.beams, (b + 1) * self.beams)
            if self.done[b]:
                keep[rows] = b * self.beams
                continue
            picked = self._entry(b, top[b] // vocab, top[b] % vocab, top_scores[b], sequences)
            keep[rows], tokens[rows], new_scores[rows] = picked
            best = float(top_scores[b].max())
            self.done[b] = self.hyps[b].is_done(best, sequences.shape[1])
        self.scores = new_scores
        return keep, tokens, bool(self.done.all())

    def _entry(
        self, b: int, beam: np.ndarray, token: np.ndarray, score: np.ndarray, seqs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Entry ``b``'s next beams from its 2*beams candidates, best first."""
        rows, toks, scores = [], [], []
        for rank, (k, t, s) in enumerate(zip(beam, token, score, strict=True)):
            row = b * self.beams + int(k)
            if int(t) == self.processors.eos:
                if rank < self.beams:
                    self.hyps[b].add(seqs[row].copy(), float(s))
                continue
            rows.append(row)
            toks.append(t)
            scores.append(s)
            if len(rows) == self.beams:
                break
        return np.array(rows), np.array(toks), np.array(scores, dtype=np.float32)

    def finish(self, sequences: np.ndarray, n: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(the ``n`` best sequences of each entry, padded to ``length``, and their scores);
        the beams still running count as finished."""
        for b in range(self.batch):
            if not self.done[b]:
                for k in range(self.beams):
                    row = b * self.beams + k
                    self.hyps[b].add(sequences[row], float(self.scores[row]))
        out = np.full((self.batch, n, length), self.pad, dtype=sequences.dtype)
        out_scores = np.zeros((self.batch, n), dtype=np.float32)
        for b, hyps in enumerate(self.hyps):
            for i, (score, seq) in enumerate(hyps.best(n)):
                out[b, i, : seq.shape[0]] = seq
                out_scores[b, i] = score
        return out, out_scores


def seeded(seed: Any) -> np.random.Generator:
    """The generator of a Sampling run: seeded by the ``seed`` input when given and not 0."""
    value = 0 if seed is None else int(np.asarray(seed).reshape(-1)[0])
    return np.random.default_rng(value if value else None)


def refuse_presence_penalty(label: str, presence_mask: Any, presence_penalty: float) -> None:
    """An InputError naming ``presence_mask`` when Sampling is given one with a non-zero
    ``presence_penalty`` attribute.

    The schema calls the mask a "presence penalty mask" (batch, vocab) and the attribute a
    "presence penalty for custom sampling", and says no more. onnxruntime's CPU kernel (1.32,
    custom=0) adds its processor only when the mask is given and skips it when the penalty is
    0: those cases are the runs without either, as onnxflow runs them. Otherwise it lowers one
    score, token 0 of the first row, by ``presence_penalty * sum(presence_mask)`` from the
    second step on, which is not a per-token penalty; rather than copy that or guess the
    intended rule, onnxflow refuses the pair.
    """
    if presence_mask is not None and presence_penalty != 0.0:
        raise InputError(
            f"{label}: presence_mask with presence_penalty {presence_penalty} is not supported "
            "(onnxruntime's CPU kernel applies the penalty to one score only, not per token); "
            "omit presence_mask or set presence_penalty to 0"
        )
