"""The subgraphs a generation operator runs, and the feeds of each run, by ``model_type``.

- 0, decoder-only (GPT-2): the ``decoder`` takes ``input_ids, position_ids, attention_mask,
  past_0..`` and gives ``logits, present_0..``, each past ``(2, rows, heads, past_length,
  head_size)``. The first run (``init_decoder``'s when given) reads the whole prompt with empty
  pasts, each later one the last token with the presents of the run before. Without an
  ``attention_mask`` the mask is 0 at the prompt's pad tokens; positions count unmasked tokens.
- 1, encoder-decoder (T5, BART): the ``encoder`` runs once on ``encoder_input_ids,
  encoder_attention_mask`` and gives the cross-attention ``present_key_cross_i,
  present_value_cross_i``; the ``decoder`` takes ``input_ids, encoder_attention_mask,
  past_key_self_i, past_value_self_i.., past_key_cross_i, past_value_cross_i..`` and gives
  ``logits, present_key_self_i, present_value_self_i..``, each ``(rows, heads, length,
  head_size)``. Without an ``attention_mask`` the mask is 0 at the prompt's leading pad tokens
  only, as onnxruntime makes it. The sequences start at ``decoder_start_token_id``. A decoder
  whose ``input_ids`` are not declared ``(rows, 1)`` reads the whole sequence in every run, as
  onnxruntime feeds it.

Every run is a scope of the node for observers: the decoder's keyed by the step (each step is
an iteration of the loop engine, :func:`onnxflow.runtime.loop.iterate`), the encoder's by
``"encoder"``. Rows continued by beam search take the presents
of the rows they extend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import GraphProto, helper

from onnxflow.compile.context import NodeContext
from onnxflow.compile.plan import Subgraph
from onnxflow.errors import InputError
from onnxflow.runtime.executor import current_runner
from onnxflow.runtime.loop import BODY_ERRORS, iteration_error
from onnxflow.runtime.observe import current_observation, run_in_scope

Feeds = list[Any]


class Runs:
    """Runs a node's subgraphs: each decoding step's within the scope the loop engine made for
    the step, the encoder's as a scope of its own."""

    def __init__(self, node: NodeContext) -> None:
        self.label, self.key = node.describe(), node.key
        #: the pad token id: where the prompt's default attention mask may be 0
        self.pad = 0

    def call(self, sub: Subgraph, args: list[Any]) -> list[Any]:
        """Run ``sub`` on ``args`` (formal inputs then the node's captured values), telling the
        observers of the scope in progress its inputs."""
        observation = current_observation()
        if observation is not None:
            observation.inputs(sub.plan.input_names, args[: len(sub.plan.input_names)])
        return current_runner(sub.plan)(args)

    def call_once(self, sub: Subgraph, scope: str, args: list[Any]) -> list[Any]:
        """:meth:`call` as a scope of its own, keyed ``scope``, named in errors."""
        try:
            runner = current_runner(sub.plan)
            return run_in_scope(self.key, scope, 1, runner, args, sub.plan.input_names)
        except BODY_ERRORS as exc:
            raise iteration_error(self.label, scope, exc) from exc  # type: ignore[arg-type]

    def check_length(self, sequences: np.ndarray, max_length: int) -> None:
        """An InputError unless generation has room for a token."""
        if max_length <= sequences.shape[1]:
            raise InputError(
                f"{self.label}: max_length ({max_length}) must exceed the length the sequences "
                f"start with ({sequences.shape[1]})"
            )


def _dtype(value_info: Any) -> np.dtype:
    return helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)


def _known_dims(node: NodeContext, graph: GraphProto, index: int, rank: int) -> list[int]:
    """The declared dims of input ``index``, which must have rank ``rank``; 0 when unknown."""
    vi = graph.input[index]
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != rank:
        raise node.error(f"{graph.name!r} input {vi.name!r} must have rank {rank}")
    return [d.dim_value if d.HasField("dim_value") else 0 for d in dims]


class GptDecoder(Runs):
    """model_type 0: the decoder (and init_decoder) subgraphs of a GPT-2 style model."""

    def __init__(
        self, node: NodeContext, decoder: GraphProto, init_decoder: GraphProto | None
    ) -> None:
        super().__init__(node)
        self.n_past = _check_gpt(node, decoder, "decoder")
        if init_decoder is not None and self.n_past != _check_gpt(
            node, init_decoder, "init_decoder"
        ):
            raise node.error("init_decoder and decoder have different numbers of pasts")
        self.main = node.subgraph(decoder)
        self.first = self.main if init_decoder is None else node.subgraph(init_decoder)
        #: element types of input_ids, position_ids, attention_mask and the pasts
        self.dtypes = [_dtype(i) for i in decoder.input[:4]]
        dims = _known_dims(node, decoder, 3, 5)
        if not dims[2] or not dims[4]:
            raise node.error("the decoder's pasts must declare their heads and head size")
        self.heads, self.head_size = dims[2], dims[4]

    def start(
        self,
        ids: np.ndarray,
        mask: np.ndarray | None,
        captured: Sequence[Any],
        length: int,
    ) -> tuple[np.ndarray, Feeds]:
        """(the sequences, the first run's feeds): the whole prompt, its positions and mask,
        empty pasts."""
        self.check_length(ids, length)
        if mask is None:
            mask = (ids != self.pad).astype(np.int32)
        positions = np.where(mask > 0, np.cumsum(mask > 0, axis=1) - 1, 0)
        past = np.zeros((2, ids.shape[0], self.heads, 0, self.head_size))
        feeds = [ids, positions, mask, past]
        ids, positions, mask, past = [f.astype(t) for f, t in zip(feeds, self.dtypes, strict=True)]
        return ids, [ids, positions, mask, *[past] * self.n_past]

    def next_feeds(
        self, feeds: Feeds, presents: Sequence[Any], rows: np.ndarray, tokens: np.ndarray
    ) -> Feeds:
        """The new tokens, their positions, the grown mask, the presents of the rows kept."""
        mask = feeds[2][rows]
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), mask.dtype)], axis=1)
        positions = (np.sum(mask > 0, axis=1, keepdims=True) - 1).astype(feeds[1].dtype)
        pasts = [np.take(p, rows, axis=1) for p in presents]
        return [tokens[:, None].astype(feeds[0].dtype), positions, mask, *pasts]

    def run(self, step: int, feeds: Feeds, captured: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
        """Decoding step ``step``: (the last position's logits, the presents)."""
        sub = self.first if step == 0 else self.main
        outs = self.call(sub, [*feeds, *sub.bind(captured)])
        return np.asarray(outs[0])[:, -1, :], list(outs[1:])


def _check_gpt(node: NodeContext, graph: GraphProto, which: str) -> int:
    """The number of pasts, after checking the GPT-2 decoder's arity."""
    n_in, n_out = len(graph.input), len(graph.output)
    if n_in < 4 or n_out != n_in - 2:
        raise node.error(
            f"{which} has {n_in} inputs and {n_out} outputs, expected (input_ids, position_ids, "
            "attention_mask, past_0..past_{n-1}) and (logits, present_0..present_{n-1})"
        )
    return n_in - 3


class EncoderDecoder(Runs):
    """model_type 1: an encoder run once, then a decoder with self and cross pasts."""

    def __init__(
        self, node: NodeContext, encoder: GraphProto, decoder: GraphProto, start_token: int
    ) -> None:
        super().__init__(node)
        n_in, n_out = len(decoder.input), len(decoder.output)
        layers = (n_out - 1) // 2
        if n_out < 3 or n_out % 2 == 0 or n_in != 2 + 4 * layers:
            raise node.error(
                f"decoder has {n_in} inputs and {n_out} outputs, expected (input_ids, "
                "encoder_attention_mask, 2 self and 2 cross pasts a layer) and (logits, 2 self "
                "presents a layer)"
            )
        if len(encoder.input) != 2 or len(encoder.output) != 2 * layers:
            raise node.error(
                f"encoder has {len(encoder.input)} inputs and {len(encoder.output)} outputs, "
                f"expected (encoder_input_ids, encoder_attention_mask) and the {2 * layers} "
                "cross-attention presents (the legacy encoder running the first decoder step "
                "is not supported)"
            )
        if start_token < 0:
            raise node.error("decoder_start_token_id must be given for model_type 1")
        self.encoder, self.decoder = node.subgraph(encoder), node.subgraph(decoder)
        self.layers, self.start_token = layers, start_token
        self.enc_dtypes = [_dtype(i) for i in encoder.input]
        self.dec_dtypes = [_dtype(i) for i in decoder.input[:3]]
        self.self_dims = _known_dims(node, decoder, 2, 4)
        #: input_ids not declared (rows, 1): each run reads the whole sequence, as onnxruntime
        #: then does (the presents are still fed back as pasts)
        self.whole = _known_dims(node, decoder, 0, 2)[1] != 1

    def start(
        self,
        ids: np.ndarray,
        mask: np.ndarray | None,
        captured: Sequence[Any],
        length: int,
    ) -> tuple[np.ndarray, Feeds]:
        """(the sequences, the first run's feeds): the encoder runs here."""
        if mask is None:  # onnxruntime masks the leading pad tokens only
            mask = (np.cumsum(ids != self.pad, axis=1) > 0).astype(np.int32)
        ids, mask = ids.astype(self.enc_dtypes[0]), mask.astype(self.enc_dtypes[1])
        cross = self.call_once(self.encoder, "encoder", [ids, mask, *self.encoder.bind(captured)])
        rows = ids.shape[0]
        sequences = np.full((rows, 1), self.start_token, ids.dtype)
        self.check_length(sequences, length)
        _, heads, _, size = self.self_dims
        if not heads or not size:
            heads, size = np.shape(cross[0])[1], np.shape(cross[0])[3]
        past = np.zeros((rows, heads, 0, size), self.dec_dtypes[2])
        self_pasts = [past] * (2 * self.layers)
        return sequences, [sequences.astype(self.dec_dtypes[0]), mask, *self_pasts, *cross]

    def next_feeds(
        self, feeds: Feeds, presents: Sequence[Any], rows: np.ndarray, tokens: np.ndarray
    ) -> Feeds:
        """The new tokens, the encoder mask, the self presents and cross pasts of the rows
        kept."""
        cross = feeds[2 + 2 * self.layers :]
        kept = [np.take(p, rows, axis=0) for p in (*presents, *cross)]
        ids = tokens[:, None].astype(feeds[0].dtype)
        if self.whole:
            ids = np.concatenate([feeds[0][rows], ids], axis=1)
        return [ids, feeds[1][rows], *kept]

    def run(self, step: int, feeds: Feeds, captured: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
        """Decoding step ``step``: (the last position's logits, the self presents)."""
        outs = self.call(self.decoder, [*feeds, *self.decoder.bind(captured)])
        return np.asarray(outs[0])[:, -1, :], list(outs[1:])


def make_decoder(
    node: NodeContext,
    model_type: int,
    decoder: GraphProto,
    init_decoder: GraphProto | None,
    encoder: GraphProto | None,
    decoder_start_token_id: int,
    pad_token_id: int,
) -> GptDecoder | EncoderDecoder:
    """The subgraphs of a generation node, compiled once."""
    made: GptDecoder | EncoderDecoder | None = None
    if model_type == 0 and encoder is None:
        made = GptDecoder(node, decoder, init_decoder)
    if model_type == 1 and encoder is not None:
        made = EncoderDecoder(node, encoder, decoder, decoder_start_token_id)
    if made is not None:
        made.pad = pad_token_id
        return made
    raise node.error(
        f"model_type {model_type} with{'' if encoder is not None else 'out'} an encoder is not "
        "supported: 0 (decoder-only, no encoder) and 1 (encoder-decoder) are"
    )
