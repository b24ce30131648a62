"""Build the transformer models of ``test_optimizer_models.py`` into ``data/``.

Each is a tiny random-initialized model (2 layers, hidden <= 64, vocabulary 100), small enough
to commit:

- ``bert_optimized.onnx``: transformers' BertModel exported by ``torch.onnx.export`` and fused
  by ``onnxruntime.transformers.optimizer.optimize_model(model_type="bert")`` (Attention,
  EmbedLayerNormalization, SkipLayerNormalization, BiasGelu); ``bert_mha_optimized.onnx`` the
  same export fused with ``use_multi_head_attention`` (MultiHeadAttention on separate Q, K, V).
- ``gpt2_past_optimized.onnx``: a GPT-2 written as transformers 4.x wrote it (Conv1D layers,
  a boolean causal buffer, a stacked (2, B, N, P, H) past per layer), exported and fused with
  ``model_type="gpt2"`` into Attention with past and present, FastGelu, SkipLayerNormalization.
  (transformers 5's GPT-2 exports a graph the optimizer no longer fuses.)
- ``llama_gqa.onnx``: transformers' LlamaForCausalLM laid out as onnxruntime-genai's model
  builder lays it out (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization,
  GroupQueryAttention with rotary inside, seqlens_k from the attention mask), its random
  weights copied in, checked here against the torch model's logits. (The model builder is not
  installed here, and the optimizer fuses no attention into an exported LLaMA.)

``transformer_inputs.npz`` holds the feeds, keyed ``<case>.<input name>``. Run from the
repository root: ``python tests/microsoft/make_transformer_models.py`` (needs torch and
transformers; the tests do not).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model
from torch import nn

DATA = Path(__file__).parent / "data"
VOCAB = 100
FEEDS: dict[str, np.ndarray] = {}


def _optimized(
    module: nn.Module,
    args: tuple,
    names: tuple[list[str], list[str]],
    dynamic: dict,
    fusion: tuple[str, int, int],
    variants: dict[str, dict[str, bool]],
) -> dict[str, onnx.ModelProto]:
    """``module`` exported by TorchScript (``names``: its inputs' and outputs') and fused by
    onnxruntime's transformer optimizer (``fusion``: model_type, num_heads, hidden_size) once
    per variant, a name and the FusionOptions it sets."""
    model_type, heads, hidden = fusion
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "model.onnx")
        torch.onnx.export(
            module, args, path, input_names=names[0], output_names=names[1],
            dynamic_axes=dynamic, opset_version=17, dynamo=False,
        )  # fmt: skip
        fused = {}
        for name, settings in variants.items():
            options = FusionOptions(model_type)
            for key, value in settings.items():
                setattr(options, key, value)
            fused[name] = optimize_model(
                path, model_type=model_type, num_heads=heads, hidden_size=hidden,
                optimization_options=options,
            ).model  # fmt: skip
        return fused


# -- BERT --------------------------------------------------------------------------------------


class _Bert(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> tuple:
        out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        return out.last_hidden_state, out.pooler_output


def bert() -> dict[str, onnx.ModelProto]:
    """BERT fused by the optimizer into Attention and, asked to, into MultiHeadAttention;
    feeds with batch 1 padded after 5 tokens, two segments."""
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=2,
    )
    config._attn_implementation = "eager"
    model = _Bert(transformers.BertModel(config).eval())
    ids = torch.randint(0, VOCAB, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    types = torch.zeros(2, 8, dtype=torch.int64)
    types[:, 4:] = 1
    names = ["input_ids", "attention_mask", "token_type_ids"]
    FEEDS.update({f"bert.{n}": t.numpy() for n, t in zip(names, (ids, mask, types))})
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
    outputs = ["last_hidden_state", "pooler_output"]
    variants = {"bert_optimized": {}, "bert_mha_optimized": {"use_multi_head_attention": True}}
    return _optimized(
        model, (ids, mask, types), (names, outputs), dynamic, ("bert", 4, 32), variants
    )


# -- GPT-2 with past ---------------------------------------------------------------------------

D, N, LAYERS, MAX_POS = 32, 4, 2, 64


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class _Conv1D(nn.Module):
    """GPT-2's linear layer: ``addmm`` on the flattened rows (a Gemm between Reshapes)."""

    def __init__(self, nx: int, nf: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.2)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = (*x.size()[:-1], self.nf)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = _Conv1D(D, 3 * D), _Conv1D(D, D)
        self.c_fc, self.mlp_proj = _Conv1D(D, 4 * D), _Conv1D(4 * D, D)
        causal = torch.tril(torch.ones(MAX_POS, MAX_POS, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, MAX_POS, MAX_POS))
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def _heads(self, x: torch.Tensor, key: bool = False) -> torch.Tensor:
        x = x.view((*x.size()[:-1], N, D // N))
        return x.permute(0, 2, 3, 1) if key else x.permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, past: torch.Tensor, mask: torch.Tensor) -> tuple:
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = self._heads(q), self._heads(k, True), self._heads(v)
        k = torch.cat((past[0].transpose(-2, -1), k), dim=-1)
        v = torch.cat((past[1], v), dim=-2)
        present = torch.stack((k.transpose(-2, -1), v))
        w = torch.matmul(q, k)
        w = w / (float(v.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)
        w = torch.where(self.bias[:, :, ns - nd : ns, :ns], w, self.masked_bias.to(w.dtype))
        w = nn.functional.softmax(w + mask, dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        x = x + self.c_proj(a.view((*a.size()[:-2], D)))
        return x + self.mlp_proj(_gelu_new(self.c_fc(self.ln_2(x)))), present


class _Gpt2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(MAX_POS, D)
        self.h = nn.ModuleList(_Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, *past) -> tuple:
        x = self.wte(ids) + self.wpe(pos)
        m = mask.view(ids.size(0), -1)[:, None, None, :]
        m = (1.0 - m) * -10000.0
        presents = []
        for block, layer_past in zip(self.h, past, strict=True):
            x, present = block(x, layer_past, m)
            presents.append(present)
        return (self.ln_f(x) @ self.wte.weight.t(), *presents)


def gpt2() -> dict[str, onnx.ModelProto]:
    """GPT-2 with past fused by the optimizer; feeds of 3 new tokens after 4 cached."""
    b, s, p = 2, 3, 4
    ids = torch.randint(0, VOCAB, (b, s))
    pos = torch.arange(p, p + s).expand(b, s)
    mask = torch.ones(b, p + s)
    mask[1, 0] = 0  # batch 1's first cached token is padding
    past = [torch.randn(2, b, N, p, D // N) for _ in range(LAYERS)]
    names = ["input_ids", "position_ids", "attention_mask"] + [f"past_{i}" for i in range(LAYERS)]
    outputs = ["logits"] + [f"present_{i}" for i in range(LAYERS)]
    FEEDS.update({f"gpt2.{n}": t.numpy() for n, t in zip(names, (ids, pos, mask, *past))})
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names[:2]}
    dynamic["attention_mask"] = {0: "batch", 1: "total"}
    dynamic.update({f"past_{i}": {1: "batch", 3: "past"} for i in range(LAYERS)})
    dynamic.update({f"present_{i}": {1: "batch", 3: "total"} for i in range(LAYERS)})
    args = (ids, pos, mask, *past)
    variants = {"gpt2_past_optimized": {}}
    return _optimized(_Gpt2().eval(), args, (names, outputs), dynamic, ("gpt2", N, D), variants)


# -- LLaMA in the model builder's layout -------------------------------------------------------

L_HIDDEN, L_HEADS, L_KV, L_HEAD, L_FF = 64, 4, 2, 16, 128


class _Builder:
    """Nodes and initializers of a graph being written, in the model builder's naming."""

    def __init__(self, state: dict[str, np.ndarray], eps: float) -> None:
        self.state, self.eps = state, eps
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def torch_weight(self, key: str, transpose: bool = True) -> str:
        """The torch weight ``key`` (a Linear's transposed for MatMul) as an initializer."""
        value = self.state[key]
        return self.weight(key, (value.T if transpose else value).astype(np.float32))

    def node(self, op: str, ins: list[str], outs: list[str], domain: str = "", **attrs) -> None:
        name = outs[0] or op
        self.nodes.append(helper.make_node(op, ins, outs, name=name, domain=domain, **attrs))

    def skip_norm(self, x: str, residual: str, gamma_key: str, outs: list[str]) -> None:
        gamma = self.torch_weight(gamma_key, transpose=False)
        self.node(
            "SkipSimplifiedLayerNormalization",
            [x, residual, gamma],
            outs,
            domain="com.microsoft",
            epsilon=self.eps,
        )


def _llama_inputs(g: _Builder, theta: float) -> None:
    """Embeddings, rotary caches and GroupQueryAttention's seqlens_k and total length."""
    inv_freq = 1.0 / theta ** (np.arange(0, L_HEAD, 2) / L_HEAD)
    angles = np.arange(MAX_POS)[:, None] * inv_freq
    g.weight("cos_cache", np.cos(angles).astype(np.float32))
    g.weight("sin_cache", np.sin(angles).astype(np.float32))
    g.weight("one", np.array([1], np.int64))
    g.node("Gather", [g.torch_weight("model.embed_tokens.weight", False), "input_ids"], ["x0"])
    g.node("ReduceSum", ["attention_mask", "one"], ["kept"], keepdims=0)
    g.node("Sub", ["kept", "one"], ["kept_1"])
    g.node("Cast", ["kept_1"], ["seqlens_k"], to=TensorProto.INT32)
    g.node("Shape", ["attention_mask"], ["mask_shape"], start=1)
    g.node("Cast", ["mask_shape"], ["total_1d"], to=TensorProto.INT32)
    g.node("Squeeze", ["total_1d"], ["total_sequence_length"])


def _llama_layer(g: _Builder, i: int, x: str, residual: str) -> tuple[str, str]:
    """Decoder layer ``i`` on the previous layer's output ``x`` and ``residual`` (the first
    layer: the embeddings, no residual); return its MLP output and residual."""
    pre = f"model.layers.{i}."
    if i == 0:
        gamma = g.torch_weight(pre + "input_layernorm.weight", False)
        g.node("SimplifiedLayerNormalization", [x, gamma], ["h0"], epsilon=g.eps, axis=-1)
        residual = x
    else:
        g.skip_norm(x, residual, pre + "input_layernorm.weight", [f"h{i}", "", "", f"r{i}"])
        residual = f"r{i}"
    for p in "qkv":
        g.node("MatMul", [f"h{i}", g.torch_weight(pre + f"self_attn.{p}_proj.weight")], [f"{p}{i}"])
    cache = [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
    g.node(
        "GroupQueryAttention",
        [
            f"q{i}",
            f"k{i}",
            f"v{i}",
            *cache,
            "seqlens_k",
            "total_sequence_length",
            "cos_cache",
            "sin_cache",
        ],
        [f"attn{i}", f"present.{i}.key", f"present.{i}.value"],
        domain="com.microsoft",
        num_heads=L_HEADS,
        kv_num_heads=L_KV,
        do_rotary=1,
        rotary_interleaved=0,
    )
    g.node("MatMul", [f"attn{i}", g.torch_weight(pre + "self_attn.o_proj.weight")], [f"o{i}"])
    g.skip_norm(
        f"o{i}", residual, pre + "post_attention_layernorm.weight", [f"m{i}", "", "", f"ra{i}"]
    )
    for p in ("gate", "up"):
        g.node("MatMul", [f"m{i}", g.torch_weight(pre + f"mlp.{p}_proj.weight")], [f"{p}{i}"])
    g.node("Sigmoid", [f"gate{i}"], [f"sig{i}"])
    g.node("Mul", [f"gate{i}", f"sig{i}"], [f"silu{i}"])
    g.node("Mul", [f"silu{i}", f"up{i}"], [f"act{i}"])
    g.node("MatMul", [f"act{i}", g.torch_weight(pre + "mlp.down_proj.weight")], [f"mlp{i}"])
    return f"mlp{i}", f"ra{i}"


def _llama_graph(state: dict[str, np.ndarray], eps: float, theta: float) -> onnx.ModelProto:
    """The decoder as the model builder writes it, over ``state`` (the torch weights)."""
    g = _Builder(state, eps)
    _llama_inputs(g, theta)
    x, residual = "x0", ""
    for i in range(LAYERS):
        x, residual = _llama_layer(g, i, x, residual)
    g.skip_norm(x, residual, "model.norm.weight", ["final", "", "", ""])
    g.node("MatMul", ["final", g.torch_weight("lm_head.weight")], ["logits"])
    return _llama_model(g.nodes, g.inits)


def _llama_model(nodes: list, inits: list) -> onnx.ModelProto:
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    cache = ["batch", L_KV, "past", L_HEAD]
    inputs = [
        helper.make_tensor_value_info("input_ids", i64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch", "sequence", VOCAB])]
    for i in range(LAYERS):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", f32, cache))
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kv}", f32, ["batch", L_KV, "total", L_HEAD]
                )
            )
    graph = helper.make_graph(nodes, "llama", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def llama() -> dict[str, onnx.ModelProto]:
    """LLaMA in the builder's layout; feeds of a 5-token prompt and of the next token after
    it (batch 1 with two trailing masked positions)."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=L_HIDDEN,
        intermediate_size=L_FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=L_HEADS,
        num_key_value_heads=L_KV,
        max_position_embeddings=MAX_POS,
        tie_word_embeddings=False,
    )
    torch_model = transformers.LlamaForCausalLM(config).eval()
    state = {k: v.detach().numpy() for k, v in torch_model.state_dict().items()}
    theta = config.rope_parameters["rope_theta"]
    model = _llama_graph(state, config.rms_norm_eps, theta)
    ids = torch.randint(0, VOCAB, (2, 5))
    prompt = {"input_ids": ids.numpy(), "attention_mask": np.ones((2, 5), np.int64)}
    empty = np.zeros((2, L_KV, 0, L_HEAD), np.float32)
    prompt.update(
        {f"past_key_values.{i}.{kv}": empty for i in range(LAYERS) for kv in ("key", "value")}
    )
    got = ort.InferenceSession(model.SerializeToString()).run(None, prompt)
    with torch.no_grad():
        expected = torch_model(input_ids=ids).logits.numpy()
    np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-4)  # the layout is right
    FEEDS.update({f"llama_prompt.{n}": v for n, v in prompt.items()})
    step = {
        "input_ids": np.array([[7], [42]], np.int64),
        "attention_mask": np.array([[1] * 6, [1] * 4 + [0, 0]], np.int64),
    }
    step.update(
        {
            f"past_key_values.{i}.{kv}": got[1 + 2 * i + j]
            for i in range(LAYERS)
            for j, kv in enumerate(("key", "value"))
        }
    )
    FEEDS.update({f"llama_step.{n}": v for n, v in step.items()})
    return {"llama_gqa": model}


def main() -> None:
    """Write the models and their feeds into ``data/``."""
    torch.manual_seed(0)
    DATA.mkdir(exist_ok=True)
    for build in (bert, gpt2, llama):
        for name, model in build().items():
            onnx.save(model, DATA / f"{name}.onnx")
    np.savez_compressed(DATA / "transformer_inputs.npz", **FEEDS)


if __name__ == "__main__":
    main()
