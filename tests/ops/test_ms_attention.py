"""com.microsoft attention operators against onnxruntime (ops/microsoft/attention.py and the
modules it draws on: scaled_dot_product, kv_cache, group_query, attention_window)."""

from __future__ import annotations

import numpy as np
import pytest
from ort_compare import assert_matches, ms_model, run_both

import onnxflow

RNG = np.random.default_rng(18)
B, S, D, N = 2, 4, 16, 2  # batch, sequence, hidden, heads: head size 8


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# -- Attention ---------------------------------------------------------------------------------


def _packed(sizes: tuple[int, int, int] = (D, D, D)) -> list[np.ndarray]:
    """Input, packed weights and bias of an Attention node."""
    return [_f32(B, S, D), _f32(D, sum(sizes)) / 4, _f32(sum(sizes))]


MASKS = {
    "key_lengths": np.array([4, 2], np.int32),
    "ends_then_starts": np.array([4, 3, 0, 1], np.int32),
    "raw_2d": np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.int32),
    "raw_3d": RNG.integers(0, 2, (B, S, S)).astype(np.int32) | np.eye(S, dtype=np.int32),
}


@pytest.mark.parametrize("mask", [None, *MASKS], ids=str)
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks_as_bert_and_gpt2_give_them(mask: str | None, unidirectional: int) -> None:
    index = None if mask is None else MASKS[mask]
    model = ms_model("Attention", [*_packed(), index], num_heads=N, unidirectional=unidirectional)
    assert_matches(*model)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_attention_with_and_without_its_bias(bias: bool) -> None:
    x, w, b = _packed()
    assert_matches(*ms_model("Attention", [x, w, b if bias else None], num_heads=N))


def test_attention_v_hidden_size_differs_by_qkv_hidden_sizes() -> None:
    sizes = (D, D, 2 * D)
    assert_matches(*ms_model("Attention", _packed(sizes), num_heads=N, qkv_hidden_sizes=sizes))


@pytest.mark.parametrize("scale", [0.5, 2.0])
@pytest.mark.parametrize("mask_filter_value", [-10000.0, -3.0])
def test_attention_scale_and_mask_filter_value(scale: float, mask_filter_value: float) -> None:
    inputs = [*_packed(), MASKS["raw_2d"]]
    model = ms_model(
        "Attention", inputs, num_heads=N, scale=scale, mask_filter_value=mask_filter_value
    )
    assert_matches(*model)


@pytest.mark.parametrize("mask", [None, "past_key_lengths", "past_raw_2d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_past_is_stacked_before_and_present_returned(
    mask: str | None, unidirectional: int
) -> None:
    past = _f32(2, B, N, 3, D // N)
    masks = {
        "past_key_lengths": np.array([7, 5], np.int32),
        "past_raw_2d": np.array([[1] * 7, [0, 1, 1, 1, 1, 1, 0]], np.int32),
    }
    index = masks.get(mask)
    inputs = [*_packed(), index, past]
    assert_matches(*ms_model("Attention", inputs, 2, num_heads=N, unidirectional=unidirectional))


@pytest.mark.parametrize("shape", [(B, N, S, S), (1, 1, S, S), (B, 1, S, S)])
def test_attention_bias_broadcasts_over_batch_and_heads(shape: tuple[int, ...]) -> None:
    inputs = [*_packed(), MASKS["key_lengths"], None, _f32(*shape)]
    assert_matches(*ms_model("Attention", inputs, num_heads=N))


def _typed(model: tuple, elem: int = 1) -> tuple:
    """A one-node model whose outputs are typed (onnxruntime cannot infer a qk output's)."""
    for out in model[0].graph.output:
        out.type.tensor_type.elem_type = elem
    return model


def _ours(op: str, inputs: list[np.ndarray | None], n_out: int = 1, **attrs: object) -> list:
    """onnxflow's float outputs of a one-node model (no onnxruntime to compare with)."""
    model, feeds = ms_model(op, inputs, n_out, **attrs)
    for out in model.graph.output:
        out.type.tensor_type.elem_type = 1
    return onnxflow.InferenceSession(model).run(None, feeds)


def test_attention_megatron_mask_reads_the_rows_of_this_call() -> None:
    """A (B, 1, M, M) mask (onnxruntime's CPU kernel refuses it) is read at the rows of the
    queries after the past, and the first T keys: the same as that block as a 3-D mask."""
    megatron = RNG.integers(0, 2, (B, 1, 9, 9)).astype(np.int32) | np.eye(9, dtype=np.int32)
    inputs = [*_packed(), megatron, _f32(2, B, N, 3, D // N)]
    got = _ours("Attention", inputs, num_heads=N)[0]
    inputs[3] = megatron[:, 0, 3:7, :7]
    np.testing.assert_array_equal(got, _ours("Attention", inputs, num_heads=N)[0])


def test_attention_refuses_weights_not_split_by_its_qkv_hidden_sizes() -> None:
    with pytest.raises(onnxflow.OnnxflowError, match="qkv_hidden_sizes"):
        _ours("Attention", _packed(), num_heads=N, qkv_hidden_sizes=[D, D, 2 * D])


# -- MultiHeadAttention ------------------------------------------------------------------------

L = 5  # key/value sequence length of cross attention
H = D // N


def _heads(x: np.ndarray) -> np.ndarray:
    """(B, S, D) as (B, N, S, H)."""
    return x.reshape(x.shape[0], x.shape[1], N, H).transpose(0, 2, 1, 3)


def _mha_forms(form: str) -> list[np.ndarray | None]:
    """query, key, value of MultiHeadAttention in one of its input forms."""
    q, k, v = _f32(B, S, D), _f32(B, L, D), _f32(B, L, D)
    if form == "separate":
        return [q, k, v]
    if form == "packed_kv":
        return [q, np.stack([k.reshape(B, L, N, H), v.reshape(B, L, N, H)], axis=3), None]
    if form == "packed_qkv":
        k, v = _f32(B, S, D), _f32(B, S, D)
        parts = [x.reshape(B, S, N, H) for x in (q, k, v)]
        return [np.stack(parts, axis=3), None, None]
    return [q, _heads(k), _heads(v)]  # "bnsh_kv": cross attention on projected keys


@pytest.mark.parametrize("form", ["separate", "bnsh_kv"])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
def test_mha_input_forms(form: str, bias: bool) -> None:
    """Separate Q, K, V and cross attention on keys and values already (B, N, L, H), whose
    part of the bias onnxruntime ignores."""
    inputs = [*_mha_forms(form), _f32(3 * D) if bias else None]
    assert_matches(*ms_model("MultiHeadAttention", inputs, num_heads=N))


@pytest.mark.parametrize("form", ["packed_kv", "packed_qkv"])
def test_mha_packed_forms_mean_their_parts(form: str) -> None:
    """Packed KV (B, L, N, 2, H) and packed QKV (B, S, N, 3, H), which onnxruntime runs on
    CUDA only, give the same as the separate tensors they pack."""
    packed = _mha_forms(form)
    bias = _f32(3 * D)
    if form == "packed_kv":
        q, kv = packed[0], packed[1]
        separate = [q, kv[:, :, :, 0].reshape(B, L, D), kv[:, :, :, 1].reshape(B, L, D)]
    else:
        separate = [packed[0][:, :, :, i].reshape(B, S, D) for i in range(3)]
    got = _ours("MultiHeadAttention", [*packed, bias], num_heads=N)[0]
    expected = _ours("MultiHeadAttention", [*separate, bias], num_heads=N)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


KEY_PADDING = {
    "key_lengths": np.array([5, 3], np.int32),
    "raw_2d": np.array([[1, 1, 1, 1, 1], [1, 0, 1, 1, 0]], np.int32),
    "raw_3d": RNG.integers(0, 2, (B, S, L)).astype(np.int32),
}


@pytest.mark.parametrize("mask", list(KEY_PADDING))
@pytest.mark.parametrize("mask_filter_value", [-10000.0, -2.0])
def test_mha_key_padding_mask_forms(mask: str, mask_filter_value: float) -> None:
    inputs = [*_mha_forms("separate"), _f32(3 * D), KEY_PADDING[mask]]
    model = ms_model("MultiHeadAttention", inputs, num_heads=N, mask_filter_value=mask_filter_value)
    assert_matches(*model)


@pytest.mark.parametrize("shape", [(B, N, S, L), (1, N, S, L), (B, 1, S, L), (1, 1, S, L)])
def test_mha_attention_bias_broadcasts(shape: tuple[int, ...]) -> None:
    inputs = [*_mha_forms("separate"), None, None, _f32(*shape)]
    assert_matches(*ms_model("MultiHeadAttention", inputs, num_heads=N))


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("mask", [None, "key_lengths"])
def test_mha_past_and_present_of_a_decoder_step(unidirectional: int, mask: str | None) -> None:
    q, k, v = _f32(B, S, D), _f32(B, S, D), _f32(B, S, D)
    past = 3
    lengths = {"key_lengths": np.array([7, 5], np.int32)}.get(mask)
    inputs = [q, k, v, _f32(3 * D), lengths, None, _f32(B, N, past, H), _f32(B, N, past, H)]
    model = ms_model("MultiHeadAttention", inputs, 3, num_heads=N, unidirectional=unidirectional)
    assert_matches(*model)


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("beams", [None, 1, 2], ids=["no_beams", "one_beam", "two_beams"])
def test_mha_shared_buffer_and_cache_indirection(unidirectional: int, beams: int | None) -> None:
    """With past_sequence_length the past is the first rows of a buffer the new keys and
    values are written into; with cache_indirection (batch, beams, max) each beam reads each
    cached position from the beam named there."""
    max_len, past = 8, 3
    q, k, v = _f32(B, 1, D), _f32(B, 1, D), _f32(B, 1, D)
    inputs = [q, k, v, _f32(3 * D), None, None, _f32(B, N, max_len, H), _f32(B, N, max_len, H)]
    inputs.append(np.array([past], np.int32))
    if beams is not None:
        inputs.append(RNG.integers(0, beams, (B // beams, beams, max_len)).astype(np.int32))
    model = _typed(
        ms_model("MultiHeadAttention", inputs, 3, num_heads=N, unidirectional=unidirectional)
    )
    assert_matches(*model)


@pytest.mark.parametrize("scale", [0.25, 3.0])
def test_mha_scale(scale: float) -> None:
    assert_matches(
        *ms_model("MultiHeadAttention", _mha_forms("separate"), num_heads=N, scale=scale)
    )


# -- RotaryEmbedding ---------------------------------------------------------------------------

MAX_POS = 16


def _caches(half: int, dtype: type = np.float32) -> list[np.ndarray]:
    """cos and sin caches (MAX_POS, half) of the usual inverse-frequency angles."""
    freq = 1.0 / (10000 ** (np.arange(half) / half))
    angles = np.arange(MAX_POS)[:, np.newaxis] * freq
    return [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]


POSITIONS = {
    "offset": np.array([3], np.int64),
    "ids_2d": RNG.integers(0, MAX_POS, (B, S)).astype(np.int64),
}


@pytest.mark.parametrize("positions", list(POSITIONS))
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
def test_rotary_embedding_positions_and_layouts(
    positions: str, interleaved: int, layout: str
) -> None:
    x = _f32(B, S, D) if layout == "bsd" else _f32(B, N, S, H)
    inputs = [x, POSITIONS[positions], *_caches(H // 2)]
    model = ms_model("RotaryEmbedding", inputs, interleaved=interleaved)
    assert_matches(*model)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_of_part_of_each_head(interleaved: int) -> None:
    inputs = [_f32(B, S, D), POSITIONS["ids_2d"], *_caches(H // 4)]
    model = ms_model(
        "RotaryEmbedding", inputs, interleaved=interleaved, num_heads=N, rotary_embedding_dim=H // 2
    )
    assert_matches(*model)


def test_rotary_embedding_float16() -> None:
    x = _f32(B, S, D).astype(np.float16)
    inputs = [x, POSITIONS["offset"], *_caches(H // 2, np.float16)]
    assert_matches(*ms_model("RotaryEmbedding", inputs, num_heads=N), rtol=1e-3, atol=1e-3)


# -- GroupQueryAttention -----------------------------------------------------------------------

KV = 1  # kv heads: each serves N / KV query heads
GH = 16  # onnxruntime's rotary needs a head size that is a multiple of 16


def _gqa_step(step: str, dtype: type = np.float32) -> list[np.ndarray | None]:
    """query, key, value, past_key, past_value, seqlens_k, total_sequence_length of a step:
    a first prompt (batch 1 right-padded) into no cache or a shared buffer, the next token, a
    two-token continuation, or the next token into a shared buffer longer than the sequence."""
    s, past, lengths = {
        "prompt": (S, None, [S, 2]),
        "prompt_shared_buffer": (S, 8, [S, 2]),
        "next_token": (1, 5, [6, 4]),
        "two_tokens": (2, 5, [7]),  # onnxruntime takes several new tokens in a batch of one
        "shared_buffer": (1, 8, [6, 4]),
    }[step]
    b = len(lengths)
    caches = [None, None] if past is None else [_f32(b, KV, past, GH), _f32(b, KV, past, GH)]
    inputs = [_f32(b, s, N * GH), _f32(b, s, KV * GH), _f32(b, s, KV * GH), *caches]
    inputs = [x if x is None else x.astype(dtype) for x in inputs]
    seqlens = np.array(lengths, np.int32) - 1
    return [*inputs, seqlens, np.array(max(lengths), np.int32)]


def _gqa(inputs: list[np.ndarray | None], rtol: float = 1e-5, **attrs: object) -> None:
    model = ms_model("GroupQueryAttention", inputs, 3, num_heads=N, kv_num_heads=KV, **attrs)
    assert_matches(*model, rtol=rtol, atol=rtol)


STEPS = ["prompt", "prompt_shared_buffer", "next_token", "two_tokens", "shared_buffer"]


@pytest.mark.parametrize("step", STEPS)
def test_gqa_cache_steps(step: str) -> None:
    _gqa(_gqa_step(step))


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("interleaved", [0, 1])
def test_gqa_rotary_at_each_batchs_positions(step: str, interleaved: int) -> None:
    inputs = [*_gqa_step(step), *_caches(GH // 2)]
    _gqa(inputs, do_rotary=1, rotary_interleaved=interleaved)


@pytest.mark.parametrize("step", ["prompt", "next_token"])
def test_gqa_packed_qkv_with_key_and_value_omitted(step: str) -> None:
    q, k, v, *rest = _gqa_step(step)
    _gqa([np.concatenate([q, k, v], axis=2), None, None, *rest])


@pytest.mark.parametrize("step", ["prompt", "two_tokens"])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_gqa_local_window(step: str, window: int) -> None:
    _gqa(_gqa_step(step), local_window_size=window)


@pytest.mark.parametrize("step", ["prompt", "next_token"])
@pytest.mark.parametrize(
    "attrs",
    [{"softcap": 2.0}, {"smooth_softmax": 1}, {"scale": 0.5}, {"softcap": 1.0, "scale": 3.0}],
    ids=str,
)
def test_gqa_softcap_smooth_softmax_scale(step: str, attrs: dict) -> None:
    _gqa(_gqa_step(step), **attrs)


@pytest.mark.parametrize("step", ["prompt", "next_token"])
def test_gqa_head_sink_joins_the_softmax_denominator(step: str) -> None:
    inputs = [*_gqa_step(step), None, None, None, None, _f32(N)]
    _gqa(inputs)


@pytest.mark.parametrize("step", ["prompt", "next_token", "shared_buffer"])
def test_gqa_attention_bias(step: str) -> None:
    inputs = _gqa_step(step)
    s, total = inputs[0].shape[1], int(inputs[6])
    _gqa([*inputs, None, None, None, _f32(1, N, s, total)])


def test_gqa_bidirectional_prompt() -> None:
    _gqa(_gqa_step("prompt"), causal=0)


def test_gqa_rotary_at_given_position_ids() -> None:
    inputs = _gqa_step("next_token")
    _gqa([*inputs, *_caches(GH // 2), np.array([[9], [2]], np.int64)], do_rotary=1)


@pytest.mark.parametrize("step", STEPS)
def test_gqa_float16(step: str) -> None:
    inputs = [*_gqa_step(step, np.float16), *_caches(GH // 2, np.float16)]
    _gqa(inputs, rtol=2e-3, do_rotary=1)


@pytest.mark.parametrize("mask", [None, "raw_2d"])
def test_mha_qk_output_is_the_scores_before_softmax(mask: str | None) -> None:
    inputs = [*_mha_forms("separate"), None, KEY_PADDING.get(mask) if mask else None]
    inputs.append(_f32(1, N, S, L))
    model = _typed(ms_model("MultiHeadAttention", inputs, 4, num_heads=N))
    assert_matches(*model, rtol=1e-4, atol=1e-3)  # scores near -10000 keep 1e-7 relative


@pytest.mark.parametrize("step", ["prompt", "next_token"])
@pytest.mark.parametrize("qk_output", [1, 2])
def test_gqa_qk_output_before_or_after_softmax(step: str, qk_output: int) -> None:
    attrs = {"num_heads": N, "kv_num_heads": KV, "qk_output": qk_output, "softcap": 2.0}
    model = _typed(ms_model("GroupQueryAttention", _gqa_step(step), 4, **attrs))
    assert_matches(*model)


def _quantized_cache(
    step: str, quant_type: str, bits: int
) -> tuple[list[np.ndarray | None], np.ndarray]:
    """A step's inputs with its cache quantized (int8, or int4 pairs in uint8) and its scale."""
    inputs = _gqa_step(step)
    if quant_type == "PER_TENSOR":
        scale = np.array([0.05 if bits == 8 else 0.4], np.float32)
    else:
        scale = (RNG.random((1, KV, 1, GH)) * 0.04 + 0.02 * (1 if bits == 8 else 8)).astype(
            np.float32
        )
    for i in (3, 4):
        if inputs[i] is not None:
            shape = inputs[i].shape
            if bits == 8:
                inputs[i] = RNG.integers(-128, 128, shape).astype(np.int8)
            else:
                inputs[i] = RNG.integers(0, 256, (*shape[:-1], shape[-1] // 2)).astype(np.uint8)
    return inputs, scale


@pytest.mark.parametrize("step", ["prompt", "next_token", "shared_buffer"])
@pytest.mark.parametrize("quant_type", ["PER_TENSOR", "PER_CHANNEL"])
@pytest.mark.parametrize("bits", [8, 4])
def test_gqa_quantized_cache(step: str, quant_type: str, bits: int) -> None:
    """The cache holds int8, or int4 pairs packed into uint8, times a scale per tensor or per
    channel; the new keys and values are quantized into it and attention reads it back."""
    inputs, scale = _quantized_cache(step, quant_type, bits)
    if inputs[3] is None:  # a prompt into an empty quantized cache
        cache_type = np.int8 if bits == 8 else np.uint8
        inputs[3] = inputs[4] = np.zeros((B, KV, 0, GH * bits // 8), cache_type)
    inputs = [*inputs, None, None, None, None, None, scale, scale]
    attrs = {"k_quant_type": quant_type, "v_quant_type": quant_type, "kv_cache_bit_width": bits}
    elem = 3 if bits == 8 else 2
    model = ms_model("GroupQueryAttention", inputs, 3, num_heads=N, kv_num_heads=KV, **attrs)
    for out, kind in zip(model[0].graph.output, (1, elem, elem), strict=True):
        out.type.tensor_type.elem_type = kind
    assert_matches(*model, rtol=1e-4, atol=1e-4)


WINDOW, CAPACITY = 3, 4


def _window_step(step: str) -> tuple[list[np.ndarray | None], list[int]]:
    """Inputs of a step into window caches of CAPACITY rows (WINDOW keys seen), and the number
    of keys each batch holds after it: a prompt longer than the capacity, the next token
    (batch 0 past the capacity, batch 1 within it), two tokens, or a step evicting."""
    s, totals = {
        "long_prompt": (6, [6]),
        "next_token": (1, [7, 4]),
        "two_tokens": (2, [9]),
        "evicting_token": (1, [5, 6]),
    }[step]
    b = len(totals)
    caches = [_f32(b, KV, CAPACITY, GH), _f32(b, KV, CAPACITY, GH)]
    inputs = [_f32(b, s, N * GH), _f32(b, s, KV * GH), _f32(b, s, KV * GH), *caches]
    return [*inputs, np.array(totals, np.int32) - 1, np.array(max(totals), np.int32)], totals


@pytest.mark.parametrize("step", ["long_prompt", "next_token", "two_tokens", "evicting_token"])
@pytest.mark.parametrize("rotary", [0, 1])
def test_gqa_sliding_window_cache(step: str, rotary: int) -> None:
    """The cache keeps each batch's latest positions from row 0 (how many: the schema's
    L(T)); the rows after them are unspecified, so only the resident ones are compared."""
    inputs, totals = _window_step(step)
    if rotary:
        inputs += [*_caches(GH // 2)]
    attrs = {"sliding_window_cache": 1, "local_window_size": WINDOW, "do_rotary": rotary}
    model, feeds = _typed(
        ms_model("GroupQueryAttention", inputs, 3, num_heads=N, kv_num_heads=KV, **attrs)
    )
    ours, theirs = run_both(model, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    freed = CAPACITY - WINDOW + 1
    for b, total in enumerate(totals):
        kept = total if total <= CAPACITY else total - freed * -(-(total - CAPACITY) // freed)
        for i in (1, 2):
            np.testing.assert_allclose(ours[i][b, :, :kept], theirs[i][b, :, :kept], rtol=1e-5)


@pytest.mark.parametrize(
    "op, inputs, attrs, named",
    [
        ("Attention", _packed(), {"num_heads": N, "do_rotary": 1}, "do_rotary"),
        ("GroupQueryAttention", _gqa_step("prompt"), {"k_quant_type": "PER_TENSOR"}, "k_scale"),
        ("GroupQueryAttention", _gqa_step("prompt"), {"sliding_window_cache": 1}, "past_key"),
    ],
    ids=["attention_do_rotary", "gqa_quantized_cache_without_scale", "gqa_window_without_cache"],
)
def test_options_not_run_are_refused_by_name(
    op: str, inputs: list, attrs: dict, named: str
) -> None:
    if op == "GroupQueryAttention":
        attrs = {"num_heads": N, "kv_num_heads": KV, **attrs}
    with pytest.raises(onnxflow.OnnxflowError, match=named):
        _ours(op, inputs, **attrs)


# -- QAttention --------------------------------------------------------------------------------


def _quantized(weight_type: type, per_column: bool) -> list[np.ndarray]:
    """input, weight, bias, input_scale, weight_scale, mask_index, input and weight zero
    points of a QAttention node."""
    x = RNG.integers(0, 256, (B, S, D)).astype(np.uint8)
    info = np.iinfo(weight_type)
    w = RNG.integers(info.min, info.max + 1, (D, 3 * D)).astype(weight_type)
    columns = 3 * D if per_column else 1
    w_scale = (RNG.random(columns) * 0.01 + 0.001).astype(np.float32)
    w_zero = RNG.integers(info.min // 4 + info.max // 4, info.max // 2, columns).astype(weight_type)
    x_scale, x_zero = np.array(0.02, np.float32), np.array(128, np.uint8)
    return [x, w, _f32(3 * D), x_scale, w_scale, MASKS["key_lengths"], x_zero, w_zero]


@pytest.mark.parametrize("weight_type", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_qattention_weights_per_tensor_and_per_column(
    weight_type: type, per_column: bool, unidirectional: int
) -> None:
    inputs = _quantized(weight_type, per_column)
    model = ms_model("QAttention", inputs, num_heads=N, unidirectional=unidirectional)
    assert_matches(*model, rtol=1e-4, atol=1e-4)


def test_qattention_zero_points_omitted_and_past_given() -> None:
    inputs = _quantized(np.uint8, False)[:6]
    past = _f32(2, B, N, 3, H)
    inputs[5] = np.array([7, 5], np.int32)
    model = ms_model("QAttention", [*inputs, None, None, past], 2, num_heads=N)
    assert_matches(*model, rtol=1e-4, atol=1e-4)


def test_gqa_refuses_seqlens_shorter_than_the_new_tokens() -> None:
    inputs = _gqa_step("two_tokens")
    inputs[5] = np.array([0], np.int32)  # one key in all after two new tokens
    with pytest.raises(onnxflow.OnnxflowError, match="seqlens_k"):
        _ours("GroupQueryAttention", inputs, 3, num_heads=N, kv_num_heads=KV)
