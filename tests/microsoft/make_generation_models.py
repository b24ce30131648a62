"""Build the generation models of test_generation.py (run from the repository root):

    python tests/microsoft/make_generation_models.py

A tiny GPT-2 (transformers' GPT2LMHeadModel, random weights, 2 layers, hidden 32, vocabulary 96)
is exported with past state in the layout onnxruntime's GPT-2 tools use (inputs ``input_ids,
position_ids, attention_mask, past_0..``, each past ``(2, batch, heads, past_len, head_size)``;
outputs ``logits, present_0..``), unfused: plain onnx operators, no Attention or
LayerNormalization contrib ops. (onnxruntime's own Gpt2Helper.export_onnx no longer runs on the
installed transformers, whose GPT-2 takes a Cache object, so :class:`PastDecoder` spells the same
forward pass over the model's weights.) onnxruntime's ``convert_generation`` then wraps it into
GreedySearch, BeamSearch and Sampling models. Needs torch and transformers; the tests need neither.

An encoder-decoder (``model_type`` 1) in the layout onnxruntime's T5 tools use: a tiny random
transformer of its own (:class:`Seq2Seq`: learned positions, 2 layers, hidden 32, vocabulary 80,
pad 0, eos 1), whose encoder gives the cross-attention keys and values of each decoder layer and
whose decoder takes ``input_ids (batch, 1), encoder_attention_mask``, self and cross pasts, is
wrapped by ``convert_generation --model_type t5`` into a BeamSearch model (the only search it
makes for T5).

Two edits make the converted models valid ONNX for onnxflow (onnxruntime runs them either way):
convert_generation does not import the com.microsoft domain its node uses (onnx's checker refuses
that too), and the decoder's inputs ``input_ids`` and ``attention_mask``, names onnxruntime
requires, redefine the main graph's inputs of the same names, which onnxflow's validator
refuses as a subgraph redefining an enclosing scope's value: the main graph's inputs become
``prompt_ids`` and ``prompt_mask``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnxruntime.transformers.convert_generation import (
    GenerationType,
    convert_generation_model,
    parse_arguments,
)
from transformers import GPT2Config, GPT2LMHeadModel, T5Config

DATA = Path(__file__).parent / "data"
VOCAB, EOS = 96, 95

#: model file -> (generation type, extra convert_generation arguments)
MODELS = {
    "gpt2_greedy.onnx": (GenerationType.GREEDYSEARCH, []),
    "gpt2_greedy_masks.onnx": (
        GenerationType.GREEDYSEARCH,
        [
            "--vocab_mask",
            "--prefix_vocab_mask",
            "--custom_attention_mask",
            "--no_repeat_ngram_size",
            "2",
        ],
    ),
    "gpt2_beam.onnx": (
        GenerationType.BEAMSEARCH,
        ["--output_sequences_scores", "--output_token_scores", "--custom_attention_mask"],
    ),
    "gpt2_beam_ngram.onnx": (
        GenerationType.BEAMSEARCH,
        [
            "--output_sequences_scores",
            "--early_stopping",
            "--no_repeat_ngram_size",
            "2",
            "--vocab_mask",
        ],
    ),
    "gpt2_sampling.onnx": (
        GenerationType.SAMPLING,
        ["--top_p", "0.01", "--custom_attention_mask", "--seed"],
    ),
}


class PastDecoder(torch.nn.Module):
    """GPT-2's forward pass with the past state as stacked (key, value) tensors per layer."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        super().__init__()
        self.model = model
        self.heads = model.config.n_head

    def attend(self, block, x, past, mask):
        """One attention layer: new (key, value) appended to ``past``; returns (out, present)."""
        b, s, h = x.shape
        q, k, v = block.attn.c_attn(block.ln_1(x)).split(h, dim=2)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        k = torch.cat([past[0], split(k)], dim=2)
        v = torch.cat([past[1], split(v)], dim=2)
        w = split(q) @ k.transpose(-1, -2) / (h // self.heads) ** 0.5
        w = torch.softmax(w + mask, dim=-1)
        out = (w @ v).transpose(1, 2).reshape(b, s, h)
        return block.attn.c_proj(out), torch.stack([k, v])

    def forward(self, input_ids, position_ids, attention_mask, *past):
        """Logits of every position and each layer's present state."""
        t = self.model.transformer
        x = t.wte(input_ids.long()) + t.wpe(position_ids.long())
        s, total = input_ids.shape[1], attention_mask.shape[1]
        causal = torch.ones(total, total, dtype=torch.bool).tril()[total - s :]
        allowed = causal[None, None] & (attention_mask[:, None, None, :] > 0)
        mask = (~allowed).to(x.dtype) * -10000.0
        presents = []
        for block, p in zip(t.h, past, strict=True):
            a, present = self.attend(block, x, p, mask)
            x = x + a
            x = x + block.mlp(block.ln_2(x))
            presents.append(present)
        return (self.model.lm_head(t.ln_f(x)), *presents)


def export_decoder(model: GPT2LMHeadModel, path: Path) -> None:
    """Export :class:`PastDecoder` with dynamic batch, sequence and past lengths."""
    c = model.config
    n, head = c.n_layer, c.n_embd // c.n_head
    past = [torch.zeros(2, 1, c.n_head, 1, head) for _ in range(n)]
    ids = torch.zeros(1, 1, dtype=torch.int32)
    args = (ids, ids.clone(), torch.ones(1, 2, dtype=torch.int32), *past)
    past_names = [f"past_{i}" for i in range(n)]
    present_names = [f"present_{i}" for i in range(n)]
    axes = {
        "input_ids": {0: "batch", 1: "seq"},
        "position_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "logits": {0: "batch", 1: "seq"},
    }
    axes |= {name: {1: "batch", 3: "past"} for name in past_names}
    axes |= {name: {1: "batch", 3: "total"} for name in present_names}
    torch.onnx.export(
        PastDecoder(model),
        args,
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=["input_ids", "position_ids", "attention_mask", *past_names],
        output_names=["logits", *present_names],
        dynamic_axes=axes,
    )


def tiny_gpt2(folder: Path) -> Path:
    """Save a random tiny GPT-2 to ``folder``; export its decoder with past; return the path."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=EOS,
        eos_token_id=EOS,
        initializer_range=0.3,
    )
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    decoder = folder / "decoder.onnx"
    export_decoder(model, decoder)
    return decoder


def convert(folder: Path, decoder: Path, name: str, kind: GenerationType, extra: list[str]) -> None:
    """Wrap ``decoder`` into a generation model ``DATA/name`` (no separate init decoder)."""
    args = parse_arguments(
        [
            "-m",
            str(folder),
            "--decoder_onnx",
            str(decoder),
            "--output",
            str(DATA / name),
            "-dsgd",
            "--num_beams",
            "1" if kind != GenerationType.BEAMSEARCH else "4",
            *extra,
        ]
    )
    convert_generation_model(args, kind)
    onnx.save(valid(onnx.load(DATA / name)), DATA / name)


#: main graph inputs renamed so that the decoder's own do not redefine them
RENAMED = {"input_ids": "prompt_ids", "attention_mask": "prompt_mask"}


def valid(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` importing com.microsoft, its main graph inputs renamed by RENAMED."""
    model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    for vi in model.graph.input:
        vi.name = RENAMED.get(vi.name, vi.name)
    for node in model.graph.node:
        node.input[:] = [RENAMED.get(i, i) for i in node.input]
    return model


T5_VOCAB, T5_HIDDEN, T5_HEADS, T5_LAYERS = 80, 32, 2, 2
T5_HEAD = T5_HIDDEN // T5_HEADS


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-1, -2) / T5_HEAD**0.5 + bias, dim=-1) @ v


def _heads(t: torch.Tensor) -> torch.Tensor:
    b, s, _ = t.shape
    return t.view(b, s, T5_HEADS, T5_HEAD).transpose(1, 2)


def _merge(t: torch.Tensor) -> torch.Tensor:
    b, _, s, _ = t.shape
    return t.transpose(1, 2).reshape(b, s, T5_HIDDEN)


class Layer(torch.nn.Module):
    """Self-attention (and cross-attention in the decoder) and a small MLP."""

    def __init__(self, cross: bool) -> None:
        super().__init__()
        h = T5_HIDDEN
        self.qkv, self.out, self.norm = (
            torch.nn.Linear(h, 3 * h),
            torch.nn.Linear(h, h),
            torch.nn.LayerNorm(h),
        )
        self.mlp = torch.nn.Sequential(
            torch.nn.LayerNorm(h),
            torch.nn.Linear(h, 2 * h),
            torch.nn.Tanh(),
            torch.nn.Linear(2 * h, h),
        )
        if cross:
            self.q, self.kv, self.cross_out = (
                torch.nn.Linear(h, h),
                torch.nn.Linear(h, 2 * h),
                torch.nn.Linear(h, h),
            )


class Seq2Seq(torch.nn.Module):
    """The weights of the tiny encoder-decoder."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.pos = (
            torch.nn.Embedding(T5_VOCAB, T5_HIDDEN),
            torch.nn.Embedding(64, T5_HIDDEN),
        )
        self.enc = torch.nn.ModuleList([Layer(False) for _ in range(T5_LAYERS)])
        self.dec = torch.nn.ModuleList([Layer(True) for _ in range(T5_LAYERS)])
        self.final, self.head = torch.nn.LayerNorm(T5_HIDDEN), torch.nn.Linear(T5_HIDDEN, T5_VOCAB)
        for module in self.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(module.weight, std=0.3)


class Encoder(torch.nn.Module):
    """encoder_input_ids, encoder_attention_mask -> each decoder layer's cross keys, values."""

    def __init__(self, m: Seq2Seq) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = self.m
        x = m.embed(ids.long()) + m.pos(torch.arange(ids.shape[1]))
        bias = (1 - mask[:, None, None, :].float()) * -10000.0
        for layer in m.enc:
            q, k, v = layer.qkv(layer.norm(x)).split(T5_HIDDEN, dim=2)
            x = x + layer.out(_merge(_attend(_heads(q), _heads(k), _heads(v), bias)))
            x = x + layer.mlp(x)
        return tuple(t for layer in m.dec for t in map(_heads, layer.kv(x).split(T5_HIDDEN, dim=2)))


class Decoder(torch.nn.Module):
    """input_ids, encoder_attention_mask, self pasts, cross pasts -> logits, self presents."""

    def __init__(self, m: Seq2Seq) -> None:
        super().__init__()
        self.m = m

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        m, n = self.m, 2 * T5_LAYERS
        selfs, cross = past[:n], past[n:]
        s, p = ids.shape[1], selfs[0].shape[2]
        x = m.embed(ids.long()) + m.pos(torch.arange(s) + p)
        causal = torch.ones(p + s, p + s, dtype=torch.bool).tril()[p:]
        self_bias = (~causal).float()[None, None] * -10000.0
        cross_bias = (1 - mask[:, None, None, :].float()) * -10000.0
        presents = []
        for i, layer in enumerate(m.dec):
            q, k, v = layer.qkv(layer.norm(x)).split(T5_HIDDEN, dim=2)
            k, v = (torch.cat([selfs[2 * i + j], _heads(t)], dim=2) for j, t in enumerate((k, v)))
            presents += [k, v]
            x = x + layer.out(_merge(_attend(_heads(q), k, v, self_bias)))
            ck, cv = cross[2 * i], cross[2 * i + 1]
            x = x + layer.cross_out(_merge(_attend(_heads(layer.q(x)), ck, cv, cross_bias)))
            x = x + layer.mlp(x)
        return (m.head(m.final(x)), *presents)


def _kv_names(kind: str, which: str) -> list[str]:
    return [f"{kind}_{kv}_{which}_{i}" for i in range(T5_LAYERS) for kv in ("key", "value")]


def export_seq2seq(folder: Path) -> tuple[Path, Path]:
    """Export the encoder and decoder of :class:`Seq2Seq` and save its T5Config to ``folder``."""
    m = Seq2Seq().eval()
    ids, mask = torch.ones(1, 3, dtype=torch.int32), torch.ones(1, 3, dtype=torch.int32)
    enc_in, cross = ["encoder_input_ids", "encoder_attention_mask"], _kv_names("present", "cross")
    axes = {n: {0: "batch", 1: "enc"} for n in enc_in} | {n: {0: "batch", 2: "enc"} for n in cross}
    encoder, decoder = folder / "encoder.onnx", folder / "decoder.onnx"
    torch.onnx.export(
        Encoder(m),
        (ids, mask),
        str(encoder),
        dynamo=False,
        opset_version=17,
        input_names=enc_in,
        output_names=cross,
        dynamic_axes=axes,
    )
    self_past, cross_past = _kv_names("past", "self"), _kv_names("past", "cross")
    presents = _kv_names("present", "self")
    past = [
        torch.zeros(1, T5_HEADS, n, T5_HEAD) for n in [2] * len(self_past) + [3] * len(cross_past)
    ]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "encoder_attention_mask": {0: "batch", 1: "enc"}}
    axes |= {"logits": {0: "batch", 1: "seq"}} | {n: {0: "batch", 2: "past"} for n in self_past}
    axes |= {n: {0: "batch", 2: "enc"} for n in cross_past} | {
        n: {0: "batch", 2: "total"} for n in presents
    }
    torch.onnx.export(
        Decoder(m),
        (torch.ones(1, 1, dtype=torch.int32), mask, *past),
        str(decoder),
        dynamo=False,
        opset_version=17,
        input_names=["input_ids", "encoder_attention_mask", *self_past, *cross_past],
        output_names=["logits", *presents],
        dynamic_axes=axes,
    )
    T5Config(
        vocab_size=T5_VOCAB,
        d_model=T5_HIDDEN,
        d_kv=T5_HEAD,
        num_heads=T5_HEADS,
        num_layers=T5_LAYERS,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    ).save_pretrained(folder)
    return encoder, decoder


def seq2seq_beam(folder: Path) -> None:
    """t5_beam.onnx: BeamSearch over :class:`Seq2Seq`; its decoder declares input_ids (batch, 1),
    as a T5 export does (the decoder itself takes any length)."""
    encoder, decoder = export_seq2seq(folder)
    path = DATA / "t5_beam.onnx"
    args = parse_arguments(
        [
            "-m",
            str(folder),
            "--model_type",
            "t5",
            "--decoder_onnx",
            str(decoder),
            "--encoder_decoder_init_onnx",
            str(encoder),
            "--output",
            str(path),
            "--output_sequences_scores",
            "--vocab_mask",
        ]
    )
    convert_generation_model(args, GenerationType.BEAMSEARCH)
    model = valid(onnx.load(path))
    graph = next(a.g for a in model.graph.node[0].attribute if a.name == "decoder")
    graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(model, path)


def inputs() -> None:
    """Prompts: batch 1, and batch 2 left-padded with an attention mask."""
    rng = np.random.default_rng(0)
    one = rng.integers(0, VOCAB - 1, (1, 5), dtype=np.int32)
    two = rng.integers(0, VOCAB - 1, (2, 6), dtype=np.int32)
    mask = np.ones_like(two)
    two[1, :2], mask[1, :2] = EOS, 0
    np.savez(DATA / "gpt2_prompts.npz", one=one, two=two, two_mask=mask)


def main() -> None:
    """Build every model of MODELS and the prompts."""
    DATA.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        decoder = tiny_gpt2(folder)
        for name, (kind, extra) in MODELS.items():
            convert(folder, decoder, name, kind, extra)
    with tempfile.TemporaryDirectory() as tmp:
        seq2seq_beam(Path(tmp))
    inputs()


if __name__ == "__main__":
    main()
