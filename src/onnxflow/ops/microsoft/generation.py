"""com.microsoft text generation loops: GreedySearch, BeamSearch and Sampling (version 1), for
decoder-only models (``model_type`` 0, GPT-2 style) as onnxruntime's ``convert_generation`` makes
them.

The ``decoder`` subgraph (``init_decoder`` for the first run, when given) compiles once and runs
once per generated token. Its inputs are ``input_ids, position_ids, attention_mask, past_0..``
and its outputs ``logits, present_0..``, each past ``(2, rows, heads, past_length, head_size)``:
the first run reads the whole prompt with empty pasts, each later one the last token with the
presents of the run before (reordered along the rows when beams are reordered). Without an
``attention_mask`` input the mask is 0 at the prompt's ``pad_token_id`` tokens, 1 elsewhere;
positions count the unmasked tokens. How the next token is picked lives in
:mod:`.generation_search`.

Each decoder run is one scope of the node for observers, keyed by the step, as a Loop iteration
is; ``RunOptions.terminate`` is honoured between steps. Encoder-decoder models (``model_type``
1, the ``encoder`` subgraph) and Sampling's ``custom`` mode are not supported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto, helper

from onnxflow.compile.compiler import NodeContext
from onnxflow.compile.plan import Subgraph
from onnxflow.errors import InputError
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.microsoft.generation_search import (
    Beam,
    Greedy,
    LogitsProcessors,
    Search,
    TopP,
    seeded,
)
from onnxflow.ops.registry import op
from onnxflow.runtime.context import cancelled, current_run_options
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.loop import BODY_ERRORS, iteration_error
from onnxflow.runtime.observe import Observation, current_observation
from onnxflow.traits import Traits

#: The decoder's inputs before its pasts, in order.
DECODER_INPUTS = ("input_ids", "position_ids", "attention_mask")


class GptDecoder:
    """A GPT-2 style decoder subgraph, compiled once, and the feeds of each of its runs."""

    def __init__(
        self, node: NodeContext, decoder: GraphProto, init_decoder: GraphProto | None
    ) -> None:
        self.label, self.key = node.describe(), node.key
        self.n_past = _check_decoder(node, decoder, "decoder")
        if init_decoder is not None and self.n_past != _check_decoder(
            node, init_decoder, "init_decoder"
        ):
            raise node.error("init_decoder and decoder have different numbers of pasts")
        self.main = node.subgraph(decoder)
        self.first = self.main if init_decoder is None else node.subgraph(init_decoder)
        #: element types of input_ids, position_ids, attention_mask and the pasts
        self.dtypes = [
            helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in decoder.input[:4]
        ]
        self.heads, self.head_size = _past_dims(node, decoder)

    def first_feeds(self, ids: np.ndarray, mask: np.ndarray) -> list[Any]:
        """The first run's feeds: the whole prompt, its positions and mask, empty pasts."""
        positions = np.where(mask > 0, np.cumsum(mask > 0, axis=1) - 1, 0)
        past = np.zeros((2, ids.shape[0], self.heads, 0, self.head_size))
        feeds = [ids, positions, mask, past]
        ids, positions, mask, past = [f.astype(t) for f, t in zip(feeds, self.dtypes, strict=True)]
        return [ids, positions, mask, *[past] * self.n_past]

    def next_feeds(
        self, feeds: list[Any], presents: Sequence[Any], rows: np.ndarray, tokens: np.ndarray
    ) -> list[Any]:
        """The next run's feeds: the new tokens, their positions, the grown mask, the presents
        of the rows continued."""
        mask = feeds[2][rows]
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), mask.dtype)], axis=1)
        positions = (np.sum(mask > 0, axis=1, keepdims=True) - 1).astype(feeds[1].dtype)
        pasts = [np.take(p, rows, axis=1) for p in presents]
        return [tokens[:, None].astype(feeds[0].dtype), positions, mask, *pasts]

    def run(
        self, step: int, feeds: list[Any], captured: Sequence[Any], total: int
    ) -> tuple[np.ndarray, list[Any]]:
        """Run decoding step ``step``: (the last position's logits, the presents)."""
        sub = self.first if step == 0 else self.main
        args = [*feeds, *sub.bind(captured)]
        observation = current_observation()
        try:
            if observation is None:
                outs = current_runner(sub.plan)(args)
            else:
                outs = _observed(observation, self.key, step, total, sub, args)
        except BODY_ERRORS as exc:
            raise iteration_error(self.label, step, exc) from exc
        return np.asarray(outs[0])[:, -1, :], list(outs[1:])


def _observed(
    observation: Observation, key: str, step: int, total: int, sub: Subgraph, args: list[Any]
) -> list[Any]:
    """Run ``sub`` as one scope of the node (keyed by the step) for the run's observers."""
    observation.enter(key, step, total)
    try:
        observation.inputs(sub.plan.input_names, args[: len(sub.plan.input_names)])
        return current_runner(sub.plan)(args)
    finally:
        observation.leave()


def _check_decoder(node: NodeContext, graph: GraphProto, which: str) -> int:
    """Return the number of past inputs after checking the GPT-2 decoder convention."""
    n_in, n_out = len(graph.input), len(graph.output)
    if n_in < 4 or n_out != n_in - 2:
        raise node.error(
            f"{which} has {n_in} inputs and {n_out} outputs, expected (input_ids, position_ids, "
            "attention_mask, past_0..past_{n-1}) and (logits, present_0..present_{n-1})"
        )
    return n_in - 3


def _past_dims(node: NodeContext, graph: GraphProto) -> tuple[int, int]:
    """(heads, head_size) from the declared shape of the decoder's first past input."""
    dims = graph.input[3].type.tensor_type.shape.dim
    if len(dims) != 5 or not dims[2].HasField("dim_value") or not dims[4].HasField("dim_value"):
        raise node.error(
            f"decoder input {graph.input[3].name!r} must be declared (2, batch, heads, "
            "past_length, head_size) with heads and head_size known"
        )
    return dims[2].dim_value, dims[4].dim_value


def _check_model_type(node: NodeContext, model_type: int, encoder: GraphProto | None) -> None:
    if model_type != 0 or encoder is not None:
        raise node.error(
            f"model_type {model_type} (encoder-decoder) is not supported; only decoder-only "
            "models (model_type 0, GPT-2 style) run"
        )


def _scalar(value: Any, default: Any, what: str) -> Any:
    """The one value of an optional shape-(1) input, or ``default`` when omitted."""
    if value is None:
        return default
    arr = np.asarray(value)
    if arr.size != 1:
        raise InputError(f"{what} must hold one value, found shape {arr.shape}")
    return arr.reshape(-1)[0].item()


def _prompt(
    label: str, input_ids: Any, attention_mask: Any, pad: int, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """The prompt (batch, length) and its attention mask, checked against ``max_length``."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise InputError(f"{label}: input_ids must be (batch, length), found shape {ids.shape}")
    if max_length <= ids.shape[1]:
        raise InputError(
            f"{label}: max_length ({max_length}) must exceed the prompt length ({ids.shape[1]})"
        )
    if attention_mask is None:
        return ids, (ids != pad).astype(np.int32)
    mask = np.asarray(attention_mask)
    if mask.shape != ids.shape:
        raise InputError(
            f"{label}: attention_mask has shape {mask.shape}, expected input_ids' {ids.shape}"
        )
    return ids, mask


def decode(
    decoder: GptDecoder,
    search: Search,
    ids: np.ndarray,
    mask: np.ndarray,
    max_length: int,
    captured: Sequence[Any],
    vocab_size: int = -1,
) -> np.ndarray:
    """Run the decoder until ``search`` finishes every row or the sequences reach
    ``max_length``; return the sequences (rows, length). Only the first ``vocab_size`` logits
    count (all when -1)."""
    options = current_run_options()
    sequences, feeds = ids, decoder.first_feeds(ids, mask)
    total = max_length - ids.shape[1]
    for step in range(total):
        if options is not None and options.terminate:
            raise cancelled(f"in {decoder.label} before decoding step {step}")
        logits, presents = decoder.run(step, feeds, captured, total)
        if vocab_size > 0:
            logits = logits[:, :vocab_size]
        rows, tokens, finished = search.step(logits, sequences, step == 0)
        sequences = np.concatenate([sequences[rows], tokens[:, None]], axis=1)
        if finished:
            break
        feeds = decoder.next_feeds(feeds, presents, rows, tokens)
    return sequences


def _processors(
    eos: int, args: dict[str, Any], no_repeat_ngram_size: int, beams: int = 1
) -> LogitsProcessors:
    """The logits filters from the node's optional inputs (``args`` by schema name)."""
    return LogitsProcessors(
        eos=eos,
        min_length=int(_scalar(args.get("min_length"), 0, "min_length")),
        repetition_penalty=float(
            _scalar(args.get("repetition_penalty"), 1.0, "repetition_penalty")
        ),
        no_repeat_ngram_size=no_repeat_ngram_size,
        vocab_mask=args.get("vocab_mask"),
        prefix_vocab_mask=args.get("prefix_vocab_mask"),
        rows_per_entry=beams,
    )


def _driver(
    node: NodeContext, schema_inputs: Sequence[str], make: Callable[..., Any]
) -> Callable[..., Any]:
    """The node's callable: split its inputs by schema name from the captured values, then
    ``make(args, captured)``."""
    n = node.n_inputs
    names = schema_inputs[:n]

    def run(*values: Any) -> Any:
        args = {k: v for k, v in zip(names, values[:n], strict=True) if v is not None}
        return make(args, values[n:])

    return run


GREEDY_INPUTS = (
    "input_ids",
    "max_length",
    "min_length",
    "repetition_penalty",
    "vocab_mask",
    "prefix_vocab_mask",
    "attention_mask",
)
SAMPLING_INPUTS = (*GREEDY_INPUTS, "presence_mask", "seed")
BEAM_INPUTS = (
    "input_ids",
    "max_length",
    "min_length",
    "num_beams",
    "num_return_sequences",
    "length_penalty",
    "repetition_penalty",
    "vocab_mask",
    "prefix_vocab_mask",
    "attention_mask",
    "decoder_input_ids",
    "logits_processor",
)


def _setup(label: str, args: dict[str, Any], pad: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(prompt, attention mask, max_length) of one call."""
    if "max_length" not in args:
        raise InputError(f"{label}: max_length is required")
    max_length = int(_scalar(args["max_length"], None, f"{label}: max_length"))
    ids, mask = _prompt(label, args["input_ids"], args.get("attention_mask"), pad, max_length)
    return ids, mask, max_length


def _padded(sequences: np.ndarray, length: int, pad: int) -> np.ndarray:
    """``sequences`` (rows, n) padded with ``pad`` to (rows, length)."""
    out = np.full((sequences.shape[0], length), pad, dtype=sequences.dtype)
    out[:, : sequences.shape[1]] = sequences
    return out


@op("GreedySearch", 1, domain=MS_DOMAIN, build=True)
def greedy_search(
    node: NodeContext,
    *,
    decoder: GraphProto,
    eos_token_id: int,
    pad_token_id: int,
    init_decoder: GraphProto | None = None,
    encoder: GraphProto | None = None,
    model_type: int = 0,
    no_repeat_ngram_size: int = 0,
    decoder_start_token_id: int = -1,
    vocab_size: int = -1,
) -> Callable[..., Any]:
    """Compile the decoder once; each call appends the best token until eos or max_length."""
    _check_model_type(node, model_type, encoder)
    dec, label = GptDecoder(node, decoder, init_decoder), node.describe()

    def make(args: dict[str, Any], captured: Sequence[Any]) -> np.ndarray:
        ids, mask, max_length = _setup(label, args, pad_token_id)
        search = Greedy(
            _processors(eos_token_id, args, no_repeat_ngram_size), pad_token_id, ids.shape[0]
        )
        return _padded(
            decode(dec, search, ids, mask, max_length, captured, vocab_size),
            max_length,
            pad_token_id,
        )

    return _driver(node, GREEDY_INPUTS, make)


@op("Sampling", 1, domain=MS_DOMAIN, build=True, traits=Traits(pure=False))
def sampling(
    node: NodeContext,
    *,
    decoder: GraphProto,
    eos_token_id: int,
    pad_token_id: int,
    init_decoder: GraphProto | None = None,
    encoder: GraphProto | None = None,
    model_type: int = 0,
    no_repeat_ngram_size: int = 0,
    decoder_start_token_id: int = -1,
    vocab_size: int = -1,
    temperature: float = 1.0,
    top_p: float = 0.0,
    filter_value: float = -1e20,
    min_tokens_to_keep: int = 0,
    presence_penalty: float = 0.0,
    custom: int = 0,
) -> Callable[..., Any]:
    """Compile the decoder once; each call draws every token from the top_p nucleus."""
    _check_model_type(node, model_type, encoder)
    if custom:
        raise node.error("custom sampling (custom=1) is not supported")
    if node.n_outputs > 1 and node.outputs[1]:
        raise node.error("the filtered_logits output (for debugging) is not supported")
    dec, label = GptDecoder(node, decoder, init_decoder), node.describe()
    nucleus = top_p if 0.0 < top_p < 1.0 else 1.0

    def make(args: dict[str, Any], captured: Sequence[Any]) -> np.ndarray:
        ids, mask, max_length = _setup(label, args, pad_token_id)
        search = TopP(
            _processors(eos_token_id, args, no_repeat_ngram_size),
            pad_token_id,
            ids.shape[0],
            rng=seeded(args.get("seed")),
            temperature=temperature,
            top_p=nucleus,
            filter_value=filter_value,
            min_tokens_to_keep=max(min_tokens_to_keep, 1),
        )
        return _padded(
            decode(dec, search, ids, mask, max_length, captured, vocab_size),
            max_length,
            pad_token_id,
        )

    return _driver(node, SAMPLING_INPUTS, make)


@op("BeamSearch", 1, domain=MS_DOMAIN, build=True)
def beam_search(
    node: NodeContext,
    *,
    decoder: GraphProto,
    eos_token_id: int,
    pad_token_id: int,
    init_decoder: GraphProto | None = None,
    encoder: GraphProto | None = None,
    model_type: int = 0,
    no_repeat_ngram_size: int = 0,
    decoder_start_token_id: int = -1,
    early_stopping: int = 0,
    vocab_size: int = -1,
) -> Callable[..., Any]:
    """Compile the decoder once; each call keeps the num_beams best sequences per entry and
    returns the num_return_sequences best finished ones."""
    _check_model_type(node, model_type, encoder)
    dec, label = GptDecoder(node, decoder, init_decoder), node.describe()
    n_out = node.n_outputs

    def make(args: dict[str, Any], captured: Sequence[Any]) -> tuple[Any, ...]:
        ids, mask, max_length = _setup(label, args, pad_token_id)
        if _scalar(args.get("logits_processor"), 0, f"{label}: logits_processor"):
            raise InputError(f"{label}: logits_processor (Whisper's) is not supported")
        beams = int(_scalar(args.get("num_beams"), 1, f"{label}: num_beams"))
        returned = int(_scalar(args.get("num_return_sequences"), 1, "num_return_sequences"))
        if not 1 <= returned <= beams:
            raise InputError(
                f"{label}: num_return_sequences ({returned}) must be in 1..num_beams ({beams})"
            )
        search = Beam(
            _processors(eos_token_id, args, no_repeat_ngram_size, beams),
            pad_token_id,
            ids.shape[0],
            beams,
            length_penalty=float(_scalar(args.get("length_penalty"), 1.0, "length_penalty")),
            early_stopping=bool(early_stopping),
            keep_scores=n_out > 2,
        )
        rows = np.repeat(ids, beams, axis=0), np.repeat(mask, beams, axis=0)
        seqs = decode(dec, search, *rows, max_length, captured, vocab_size)
        sequences, scores = search.finish(seqs, returned, max_length)
        outs = (sequences, scores, _scores_output(search, max_length - ids.shape[1]))
        return outs[:n_out] if n_out > 1 else sequences

    return _driver(node, BEAM_INPUTS, make)


def _scores_output(search: Beam, steps: int) -> np.ndarray | None:
    """BeamSearch's ``scores``: each step's processed scores (steps, batch, beams, vocab)."""
    if not search.history:
        return None
    out = np.zeros((steps, *search.history[0].shape), dtype=np.float32)
    out[: len(search.history)] = search.history
    return out
