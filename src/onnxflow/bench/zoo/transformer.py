"""A GPT-2-like decoder built in code, written the way torch.onnx writes one with a dynamic
batch and sequence: every Reshape target made from ``Shape -> Gather -> Unsqueeze -> Concat``,
a causal mask made from the sequence length (ConstantOfShape, Trilu, Where), the padding mask
from ``attention_mask``, LayerNormalization, attention as MatMul -> scale -> mask -> Softmax ->
MatMul, and GELU in both forms (tanh with ``Pow(x, 3)`` in layer 0, Erf in layer 1).

It needs no network and no torch: the tests check it against onnxruntime, and it is the zoo's
``transformer_standin`` row.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
VOCAB, HIDDEN, HEADS, LAYERS, SEQUENCE = 96, 64, 4, 2, 24


def _node(op: str, inputs: list[str], output: str, **attrs: object) -> NodeProto:
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def _dims(prefix: str, source: str) -> list[NodeProto]:
    """``{prefix}_b`` and ``{prefix}_s``: the batch and sequence of ``source`` as 1-D tensors."""
    return [
        _node("Shape", [source], f"{prefix}_shape"),
        _node("Gather", [f"{prefix}_shape", "c0"], f"{prefix}_b0", axis=0),
        _node("Gather", [f"{prefix}_shape", "c1"], f"{prefix}_s0", axis=0),
        _node("Unsqueeze", [f"{prefix}_b0", "c0_1d"], f"{prefix}_b"),
        _node("Unsqueeze", [f"{prefix}_s0", "c0_1d"], f"{prefix}_s"),
    ]


def _embed() -> list[NodeProto]:
    """Token and position embeddings, and the additive (B, 1, S, S) attention mask."""
    return [
        _node("Gather", ["wte", "input_ids"], "tokens"),
        *_dims("in", "input_ids"),
        _node("Range", ["c0", "in_s0", "c1"], "positions"),
        _node("Gather", ["wpe", "positions"], "places"),
        _node("Add", ["tokens", "places"], "h0"),
        _node("Concat", ["in_s", "in_s"], "square", axis=0),
        _node("ConstantOfShape", ["square"], "ones", value=numpy_helper.from_array(
            np.array([1], np.int64))),
        _node("Trilu", ["ones"], "lower", upper=0),
        _node("Cast", ["lower"], "causal", to=TensorProto.BOOL),
        _node("Where", ["causal", "f0", "fneg"], "causal_add"),
        _node("Cast", ["attention_mask"], "pad_f", to=F),
        _node("Sub", ["f1", "pad_f"], "pad_off"),
        _node("Mul", ["pad_off", "fneg"], "pad_neg"),
        _node("Unsqueeze", ["pad_neg", "c12"], "pad_add"),
        _node("Add", ["causal_add", "pad_add"], "mask"),
    ]  # fmt: skip


def _heads(p: str, x: str, out: str, perm: list[int]) -> list[NodeProto]:
    """``x`` (B, S, H) as (B, heads, S, d) transposed by ``perm``, its shape read from x."""
    return [
        *_dims(f"{p}_{out}", x),
        _node("Concat", [f"{p}_{out}_b", f"{p}_{out}_s", "heads", "head_dim"], f"{p}_{out}_t",
              axis=0),
        _node("Reshape", [x, f"{p}_{out}_t"], f"{p}_{out}_r"),
        _node("Transpose", [f"{p}_{out}_r"], out, perm=perm),
    ]  # fmt: skip


def _attention(p: str, x: str) -> list[NodeProto]:
    """Pre-LN self-attention of layer ``p`` on ``x``; returns x + attention in ``{p}_att``."""
    nodes = [_node("LayerNormalization", [x, f"{p}_ln1_g", f"{p}_ln1_b"], f"{p}_ln1", axis=-1)]
    for t in "qkv":
        nodes += [
            _node("MatMul", [f"{p}_ln1", f"{p}_w{t}"], f"{p}_{t}m"),
            _node("Add", [f"{p}_{t}m", f"{p}_b{t}"], f"{p}_{t}"),
        ]
    nodes += _heads(p, f"{p}_q", f"{p}_Q", [0, 2, 1, 3])
    nodes += _heads(p, f"{p}_k", f"{p}_K", [0, 2, 3, 1])
    nodes += _heads(p, f"{p}_v", f"{p}_V", [0, 2, 1, 3])
    nodes += [
        _node("MatMul", [f"{p}_Q", f"{p}_K"], f"{p}_scores"),
        _node("Div", [f"{p}_scores", "scale"], f"{p}_scaled"),
        _node("Add", [f"{p}_scaled", "mask"], f"{p}_masked"),
        _node("Softmax", [f"{p}_masked"], f"{p}_probs", axis=-1),
        _node("MatMul", [f"{p}_probs", f"{p}_V"], f"{p}_ctx"),
        _node("Transpose", [f"{p}_ctx"], f"{p}_ctx_t", perm=[0, 2, 1, 3]),
        *_dims(f"{p}_o", x),
        _node("Concat", [f"{p}_o_b", f"{p}_o_s", "hidden"], f"{p}_o_t", axis=0),
        _node("Reshape", [f"{p}_ctx_t", f"{p}_o_t"], f"{p}_merged"),
        _node("MatMul", [f"{p}_merged", f"{p}_wo"], f"{p}_om"),
        _node("Add", [f"{p}_om", f"{p}_bo"], f"{p}_o"),
        _node("Add", [x, f"{p}_o"], f"{p}_att"),
    ]
    return nodes


def _gelu(p: str, x: str, form: str) -> list[NodeProto]:
    """GELU of ``x`` into ``{p}_gelu``: the tanh form (GPT-2's) or the Erf form (BERT's)."""
    if form == "erf":
        return [
            _node("Div", [x, "sqrt2"], f"{p}_gd"),
            _node("Erf", [f"{p}_gd"], f"{p}_ge"),
            _node("Add", [f"{p}_ge", "f1"], f"{p}_ga"),
            _node("Mul", [x, f"{p}_ga"], f"{p}_gm"),
            _node("Mul", [f"{p}_gm", "half"], f"{p}_gelu"),
        ]
    return [
        _node("Pow", [x, "three"], f"{p}_cube"),
        _node("Mul", [f"{p}_cube", "gelu_c"], f"{p}_cc"),
        _node("Add", [x, f"{p}_cc"], f"{p}_inner"),
        _node("Mul", [f"{p}_inner", "sqrt_2_pi"], f"{p}_arg"),
        _node("Tanh", [f"{p}_arg"], f"{p}_tanh"),
        _node("Add", [f"{p}_tanh", "f1"], f"{p}_t1"),
        _node("Mul", [x, f"{p}_t1"], f"{p}_tm"),
        _node("Mul", [f"{p}_tm", "half"], f"{p}_gelu"),
    ]


def _layer(i: int, x: str) -> tuple[list[NodeProto], str]:
    """Layer ``i`` on ``x``: attention, then the MLP; returns its nodes and its output."""
    p = f"l{i}"
    nodes = _attention(p, x)
    nodes += [
        _node("LayerNormalization", [f"{p}_att", f"{p}_ln2_g", f"{p}_ln2_b"], f"{p}_ln2",
              axis=-1),
        _node("MatMul", [f"{p}_ln2", f"{p}_w1"], f"{p}_f1m"),
        _node("Add", [f"{p}_f1m", f"{p}_b1"], f"{p}_f1"),
        *_gelu(p, f"{p}_f1", "tanh" if i % 2 == 0 else "erf"),
        _node("MatMul", [f"{p}_gelu", f"{p}_w2"], f"{p}_f2m"),
        _node("Add", [f"{p}_f2m", f"{p}_b2"], f"{p}_f2"),
        _node("Add", [f"{p}_att", f"{p}_f2"], f"{p}_out"),
    ]  # fmt: skip
    return nodes, f"{p}_out"


def _weights(rng: np.random.Generator) -> list[TensorProto]:
    """Every layer's weights, random but fixed."""
    shapes = {"ln1_g": (HIDDEN,), "ln1_b": (HIDDEN,), "ln2_g": (HIDDEN,), "ln2_b": (HIDDEN,)}
    for t in "qkvo":
        shapes |= {f"w{t}": (HIDDEN, HIDDEN), f"b{t}": (HIDDEN,)}
    shapes |= {"w1": (HIDDEN, 4 * HIDDEN), "b1": (4 * HIDDEN,), "w2": (4 * HIDDEN, HIDDEN)}
    shapes |= {"b2": (HIDDEN,)}
    out = []
    for i in range(LAYERS):
        for name, shape in shapes.items():
            value = rng.standard_normal(shape) * (0.02 if name[0] == "b" else 0.2)
            value += 1.0 if name.endswith("_g") else 0.0
            out.append(numpy_helper.from_array(value.astype(np.float32), f"l{i}_{name}"))
    return out


def _constants() -> list[TensorProto]:
    def f(name: str, v: float) -> TensorProto:
        return numpy_helper.from_array(np.array(v, np.float32), name)

    def i(name: str, v: list[int] | int) -> TensorProto:
        return numpy_helper.from_array(np.array(v, np.int64), name)

    return [
        i("c0", 0), i("c1", 1), i("c0_1d", [0]), i("c12", [1, 2]), i("heads", [HEADS]),
        i("head_dim", [HIDDEN // HEADS]), i("hidden", [HIDDEN]), f("f0", 0.0), f("f1", 1.0),
        f("fneg", -10000.0), f("half", 0.5), f("three", 3.0), f("gelu_c", 0.044715),
        f("sqrt_2_pi", math.sqrt(2 / math.pi)), f("sqrt2", math.sqrt(2)),
        f("scale", math.sqrt(HIDDEN // HEADS)),
    ]  # fmt: skip


def transformer_standin() -> onnx.ModelProto:
    """The decoder: embeddings, two layers, a final LayerNormalization, tied output logits."""
    nodes, x = _embed(), "h0"
    for i in range(LAYERS):
        more, x = _layer(i, x)
        nodes += more
    nodes += [
        _node("LayerNormalization", [x, "lnf_g", "lnf_b"], "final", axis=-1),
        _node("Transpose", ["wte"], "wte_t", perm=[1, 0]),
        _node("MatMul", ["final", "wte_t"], "logits"),
    ]
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array((rng.standard_normal((VOCAB, HIDDEN)) * 0.3).astype(np.float32),
                                "wte"),
        numpy_helper.from_array((rng.standard_normal((64, HIDDEN)) * 0.1).astype(np.float32),
                                "wpe"),
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "lnf_g"),
        numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "lnf_b"),
        *_weights(rng), *_constants(),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "transformer_standin",
        [
            helper.make_tensor_value_info("input_ids", I64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", I64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("logits", F, ["batch", "sequence", VOCAB])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def transformer_standin_feeds(batch: int = 1, sequence: int = SEQUENCE) -> dict[str, np.ndarray]:
    """Random tokens, the last quarter of the first row padded."""
    rng = np.random.default_rng(0)
    mask = np.ones((batch, sequence), np.int64)
    mask[0, sequence - sequence // 4 :] = 0
    ids = rng.integers(0, VOCAB, (batch, sequence)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` in float16 throughout, as converters write it: every float initializer, input
    and output, and every Cast to float, in float16 (no Cast left at the edges)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == F:
            half = numpy_helper.to_array(tensor).astype(np.float16)
            graph.initializer[i].CopyFrom(numpy_helper.from_array(half, tensor.name))
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == F:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == F:
                attr.i = TensorProto.FLOAT16
    return out


def transformer_standin_fp16() -> onnx.ModelProto:
    """The decoder in float16 (:func:`to_float16`), as GPT-2 is shipped for smaller files."""
    return to_float16(transformer_standin())


#: Tokens already in the cache when the stand-in with past key/values takes its next token.
PAST = 32


def _embed_with_past() -> list[NodeProto]:
    """:func:`_embed` for a step after ``past_len`` cached tokens: positions from past_len on,
    and a causal mask of (new tokens) x (all tokens), shifted by past_len."""
    nodes = [
        _node("Shape", ["past_key_0"], "past_shape"),
        _node("Gather", ["past_shape", "c2"], "past_len", axis=0),
        _node("Shape", ["attention_mask"], "mask_shape"),
        _node("Gather", ["mask_shape", "c1"], "total_len", axis=0),
        _node("Unsqueeze", ["total_len", "c0_1d"], "total_1d"),
    ]
    for node in _embed():
        if node.op_type == "Range":
            node.input[:] = ["past_len", "total_len", "c1"]
        elif node.op_type == "Concat":
            node.input[:] = ["in_s", "total_1d"]
        elif node.op_type == "Trilu":
            node.input[:] = ["ones", "past_len"]
        nodes.append(node)
    return nodes


def _cached(p: str, i: int, node: NodeProto) -> list[NodeProto]:
    """The heads' Transpose ``node`` of K or V in layer ``p``, with the cache: the new keys
    (values) appended to ``past_key_i`` (``past_value_i``) as ``present_*``."""
    kind = {f"{p}_K": "key", f"{p}_V": "value"}.get(node.output[0])
    if kind is None:
        return [node]
    final = node.output[0]
    node.output[0] = node.name = f"{final}_new"
    node.attribute[0].ints[:] = [0, 2, 1, 3]  # (B, heads, S, d), the cache's layout
    present = f"present_{kind}_{i}"
    nodes = [node, _node("Concat", [f"past_{kind}_{i}", f"{final}_new"], present, axis=2)]
    perm = [0, 1, 3, 2] if kind == "key" else [0, 1, 2, 3]
    return [*nodes, _node("Transpose", [present], final, perm=perm)]


def transformer_standin_past() -> onnx.ModelProto:
    """The decoder as generation runs it: one step with past key/values in, present out."""
    model = transformer_standin()
    nodes = _embed_with_past()
    embed_outputs = {o for n in _embed() for o in n.output}
    for node in model.graph.node:
        if node.output[0] not in embed_outputs:
            layer = node.output[0].split("_")[0]
            i = int(layer[1:]) if layer[:1] == "l" and layer[1:].isdigit() else -1
            nodes += _cached(layer, i, node) if i >= 0 else [node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.append(numpy_helper.from_array(np.array(2, np.int64), "c2"))
    cache = ["batch", HEADS, "past", HIDDEN // HEADS]
    grown = ["batch", HEADS, "total", HIDDEN // HEADS]
    for i in range(LAYERS):
        for kind in ("key", "value"):
            model.graph.input.append(helper.make_tensor_value_info(f"past_{kind}_{i}", F, cache))
            model.graph.output.append(
                helper.make_tensor_value_info(f"present_{kind}_{i}", F, grown)
            )
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "total"
    return model


def transformer_standin_past_feeds() -> dict[str, np.ndarray]:
    """One new token after :data:`PAST` cached ones (a random cache), no padding."""
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, VOCAB, (1, 1)).astype(np.int64),
        "attention_mask": np.ones((1, PAST + 1), np.int64),
    }
    for i in range(LAYERS):
        for kind in ("key", "value"):
            cache = rng.standard_normal((1, HEADS, PAST, HIDDEN // HEADS)) * 0.5
            feeds[f"past_{kind}_{i}"] = cache.astype(np.float32)
    return feeds
