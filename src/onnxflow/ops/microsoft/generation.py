"""com.microsoft text generation loops: GreedySearch, BeamSearch and Sampling (version 1), as
onnxruntime's ``convert_generation`` makes them, for decoder-only models (``model_type`` 0,
GPT-2) and encoder-decoders (``model_type`` 1, T5 and BART style).

The subgraphs compile once (:mod:`.generation_decoders`: what each run is fed); the decoder
runs once per generated token until every sequence has produced ``eos_token_id`` or the
sequences reach ``max_length``; how the next token is picked (logits filters, greedy argmax,
beams, top-p draws) lives in :mod:`.generation_search`. The decoding steps are iterations of the
runtime's loop engine (:func:`onnxflow.runtime.loop.iterate`): each is a scope of the node for
observers, as a Loop iteration is, and ``RunOptions.terminate`` is honoured between steps.
Sequences that end early are padded with ``pad_token_id`` to ``max_length``.

Not supported (refused when the model loads or runs): Sampling's ``custom`` mode and its
``filtered_logits`` output, BeamSearch's Whisper ``logits_processor`` and its
``decoder_input_ids``, and the legacy
encoder subgraph that also runs the first decoder step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.errors import InputError
from onnxflow.ops.microsoft import MS_DOMAIN
from onnxflow.ops.microsoft.generation_decoders import EncoderDecoder, GptDecoder, make_decoder
from onnxflow.ops.microsoft.generation_search import (
    Beam,
    Greedy,
    LogitsProcessors,
    Search,
    TopP,
    refuse_presence_penalty,
    seeded,
)
from onnxflow.ops.registry import op
from onnxflow.runtime.loop import Iterations, iterate
from onnxflow.traits import Traits


def _scalar(value: Any, default: Any, what: str) -> Any:
    """The one value of an optional shape-(1) input, or ``default`` when omitted."""
    if value is None:
        return default
    arr = np.asarray(value)
    if arr.size != 1:
        raise InputError(f"{what} must hold one value, found shape {arr.shape}")
    return arr.reshape(-1)[0].item()


def _prompt(label: str, input_ids: Any, attention_mask: Any) -> tuple[np.ndarray, Any]:
    """The prompt (batch, length) and its attention mask (None when not given)."""
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise InputError(f"{label}: input_ids must be (batch, length), found shape {ids.shape}")
    if attention_mask is None:
        return ids, None
    mask = np.asarray(attention_mask)
    if mask.shape != ids.shape:
        raise InputError(
            f"{label}: attention_mask has shape {mask.shape}, expected input_ids' {ids.shape}"
        )
    return ids, mask


def decode(
    decoder: GptDecoder | EncoderDecoder,
    search: Search,
    prompt: tuple[np.ndarray, np.ndarray | None],
    max_length: int,
    captured: Sequence[Any],
    vocab_size: int = -1,
) -> np.ndarray:
    """Run the decoder until ``search`` finishes every row or the sequences reach
    ``max_length``; return the sequences (rows, length). ``prompt``: the rows' input_ids and
    attention mask (None: the decoder's default). Only the first
    ``vocab_size`` logits count (all when -1)."""
    sequences, feeds = decoder.start(*prompt, captured, max_length)
    total = max_length - sequences.shape[1]
    made = [sequences, feeds]  # the sequences so far, the next step's feeds

    def step(i: int) -> bool:
        sequences, feeds = made
        logits, presents = decoder.run(i, feeds, captured)
        if vocab_size > 0:
            logits = logits[:, :vocab_size]
        rows, tokens, finished = search.step(logits, sequences, i == 0)
        made[0] = np.concatenate([sequences[rows], tokens[:, None]], axis=1)
        if not finished:
            made[1] = decoder.next_feeds(feeds, presents, rows, tokens)
        return not finished

    iterate(Iterations(decoder.label, decoder.key, total), total, step)
    return made[0]


def _processors(
    eos: int, args: dict[str, Any], no_repeat_ngram_size: int, beams: int = 1
) -> LogitsProcessors:
    """The logits filters from the node's optional inputs (``args`` by schema name)."""
    penalty = float(_scalar(args.get("repetition_penalty"), 1.0, "repetition_penalty"))
    if not penalty > 0.0:  # the schema: "Accepts value > 0.0"; NaN too is refused
        raise InputError(f"repetition_penalty must be greater than 0, found {penalty}")
    return LogitsProcessors(
        eos=eos,
        min_length=int(_scalar(args.get("min_length"), 0, "min_length")),
        repetition_penalty=penalty,
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


def _setup(
    label: str, args: dict[str, Any], beams: int = 1
) -> tuple[tuple[np.ndarray, np.ndarray | None], int]:
    """((input_ids, attention mask) of each row, max_length) of one call."""
    if "max_length" not in args:
        raise InputError(f"{label}: max_length is required")
    max_length = int(_scalar(args["max_length"], None, f"{label}: max_length"))
    ids, mask = _prompt(label, args["input_ids"], args.get("attention_mask"))
    if "decoder_input_ids" in args:  # onnxruntime ignores them with a T5 encoder
        raise InputError(f"{label}: decoder_input_ids are not supported")
    rows = np.repeat(ids, beams, axis=0), None if mask is None else np.repeat(mask, beams, axis=0)
    return rows, max_length


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
    dec = make_decoder(
        node, model_type, decoder, init_decoder, encoder, decoder_start_token_id, pad_token_id
    )
    label = node.describe()

    def make(args: dict[str, Any], captured: Sequence[Any]) -> np.ndarray:
        prompt, max_length = _setup(label, args)
        processors = _processors(eos_token_id, args, no_repeat_ngram_size)
        search = Greedy(processors, pad_token_id, prompt[0].shape[0])
        sequences = decode(dec, search, prompt, max_length, captured, vocab_size)
        return _padded(sequences, max_length, pad_token_id)

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
    if custom:
        raise node.error("custom sampling (custom=1) is not supported")
    if node.n_outputs > 1 and node.outputs[1]:
        raise node.error("the filtered_logits output (for debugging) is not supported")
    dec = make_decoder(
        node, model_type, decoder, init_decoder, encoder, decoder_start_token_id, pad_token_id
    )
    label = node.describe()
    nucleus = top_p if 0.0 < top_p < 1.0 else 1.0

    def make(args: dict[str, Any], captured: Sequence[Any]) -> np.ndarray:
        prompt, max_length = _setup(label, args)
        refuse_presence_penalty(label, args.get("presence_mask"), presence_penalty)
        search = TopP(
            _processors(eos_token_id, args, no_repeat_ngram_size),
            pad_token_id,
            prompt[0].shape[0],
            rng=seeded(args.get("seed")),
            temperature=temperature,
            top_p=nucleus,
            filter_value=filter_value,
            min_tokens_to_keep=max(min_tokens_to_keep, 1),
        )
        sequences = decode(dec, search, prompt, max_length, captured, vocab_size)
        return _padded(sequences, max_length, pad_token_id)

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
    dec = make_decoder(
        node, model_type, decoder, init_decoder, encoder, decoder_start_token_id, pad_token_id
    )
    label, n_out = node.describe(), node.n_outputs

    def make(args: dict[str, Any], captured: Sequence[Any]) -> tuple[Any, ...]:
        if _scalar(args.get("logits_processor"), 0, f"{label}: logits_processor"):
            raise InputError(f"{label}: logits_processor (Whisper's) is not supported")
        beams = int(_scalar(args.get("num_beams"), 1, f"{label}: num_beams"))
        returned = int(_scalar(args.get("num_return_sequences"), 1, "num_return_sequences"))
        if not 1 <= returned <= beams:
            raise InputError(
                f"{label}: num_return_sequences ({returned}) must be in 1..num_beams ({beams})"
            )
        prompt, max_length = _setup(label, args, beams)
        search = Beam(
            _processors(eos_token_id, args, no_repeat_ngram_size, beams),
            pad_token_id,
            prompt[0].shape[0] // beams,
            beams,
            length_penalty=float(_scalar(args.get("length_penalty"), 1.0, "length_penalty")),
            early_stopping=bool(early_stopping),
            keep_scores=n_out > 2,
        )
        seqs = decode(dec, search, prompt, max_length, captured, vocab_size)
        sequences, scores = search.finish(seqs, returned, max_length)
        steps = max_length - seqs.shape[1] + len(search.history)
        outs = (sequences, scores, _scores_output(search, steps))
        return outs[:n_out] if n_out > 1 else sequences

    return _driver(node, BEAM_INPUTS, make)


def _scores_output(search: Beam, steps: int) -> np.ndarray | None:
    """BeamSearch's ``scores``: each step's processed scores (steps, batch, beams, vocab)."""
    if not search.history:
        return None
    out = np.zeros((steps, *search.history[0].shape), dtype=np.float32)
    out[: len(search.history)] = search.history
    return out
