"""Build the models of test_normalization_models.py (run from the repository root):

    python tests/microsoft/make_normalization_models.py

Two tiny transformer stand-ins (random weights, hidden 32), exported by torch at opset 14 and
fused by onnxruntime's ``optimize_model``, with attention fusion off so that only the
normalization and activation fusions apply (Attention is another family's):

- ``bert_embed_opt.onnx`` (model_type bert): word + segment + position embeddings and LayerNorm
  -> EmbedLayerNormalization; one self-attention block and an erf-GELU MLP, residual LayerNorms
  -> SkipLayerNormalization, GELU -> BiasGelu;
- ``decoder_norms_opt.onnx`` (model_type gpt2): an RMS norm of the embeddings ->
  SimplifiedLayerNormalization (default domain, opset 14), two tanh-GELU MLP blocks with a
  LayerNorm before and an RMS norm after each residual sum -> FastGelu, SkipLayerNormalization,
  SkipSimplifiedLayerNormalization, and a LayerNormalization (default domain, opset 14) left
  where no residual sum precedes it.

Needs torch; the tests need neither torch nor transformers.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

DATA = Path(__file__).parent / "data"
HIDDEN, HEADS, VOCAB, POSITIONS = 32, 2, 50, 16


class SelfAttention(torch.nn.Module):
    """BERT's self-attention block: q, k, v projections of x, softmax attention, the output
    projection added to x and layer-normalized."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
        self.norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (HEADS, HIDDEN // HEADS)).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS)
        context = (torch.softmax(scores, -1) @ v).transpose(1, 2).flatten(2)
        return self.norm(x + self.o(context))


class BertStandIn(torch.nn.Module):
    """Embeddings as BERT spells them (position ids sliced from a buffer), one encoder layer."""

    def __init__(self) -> None:
        super().__init__()
        self.word = torch.nn.Embedding(VOCAB, HIDDEN)
        self.position = torch.nn.Embedding(POSITIONS, HIDDEN)
        self.segment = torch.nn.Embedding(2, HIDDEN)
        self.register_buffer("position_ids", torch.arange(POSITIONS).unsqueeze(0))
        self.norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        self.attention = SelfAttention()
        self.up, self.down = torch.nn.Linear(HIDDEN, 64), torch.nn.Linear(64, HIDDEN)
        self.out_norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word(input_ids) + self.segment(token_type_ids) + self.position(positions)
        x = self.attention(self.norm(x))
        return self.out_norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


class RMSNorm(torch.nn.Module):
    """LLaMA's RMS norm."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(HIDDEN) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class DecoderBlock(torch.nn.Module):
    """LayerNorm, a tanh-GELU MLP added back, an RMS-normed projection added back."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.up, self.down = torch.nn.Linear(HIDDEN, 64), torch.nn.Linear(64, HIDDEN)
        self.rms, self.proj = RMSNorm(), torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gelu = torch.nn.functional.gelu(self.up(self.norm(x)), approximate="tanh")
        x = x + self.down(gelu)
        return x + self.proj(self.rms(x))


class DecoderStandIn(torch.nn.Module):
    """Embeddings, an RMS norm, two decoder blocks, a final LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.word = torch.nn.Embedding(VOCAB, HIDDEN)
        self.rms = RMSNorm()
        self.blocks = torch.nn.ModuleList([DecoderBlock(), DecoderBlock()])
        self.final = torch.nn.LayerNorm(HIDDEN)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.rms(self.word(input_ids))
        for block in self.blocks:
            x = block(x)
        return self.final(x)


def _build(
    module: torch.nn.Module, inputs: dict[str, torch.Tensor], model_type: str, name: str
) -> None:
    """Export ``module`` at opset 14 with dynamic batch and sequence, fuse, save as ``name``."""
    with tempfile.TemporaryDirectory() as tmp:
        exported = str(Path(tmp) / "exported.onnx")
        torch.onnx.export(
            module.eval(),
            tuple(inputs.values()),
            exported,
            input_names=list(inputs),
            output_names=["hidden"],
            opset_version=14,
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in inputs},
            dynamo=False,
        )
        options = FusionOptions(model_type)
        options.enable_attention = False
        fused = optimize_model(
            exported,
            model_type=model_type,
            num_heads=HEADS,
            hidden_size=HIDDEN,
            optimization_options=options,
        )
    fused.save_model_to_file(str(DATA / name))
    print(name, sorted({n.op_type for n in fused.model.graph.node if n.domain}))


def main() -> None:
    torch.manual_seed(18)
    DATA.mkdir(exist_ok=True)
    ids = torch.randint(0, VOCAB, (2, 8))
    segments = torch.zeros(2, 8, dtype=torch.int64)
    _build(
        BertStandIn(), {"input_ids": ids, "token_type_ids": segments}, "bert", "bert_embed_opt.onnx"
    )
    _build(DecoderStandIn(), {"input_ids": ids}, "gpt2", "decoder_norms_opt.onnx")


if __name__ == "__main__":
    main()
