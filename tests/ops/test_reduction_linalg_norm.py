"""Reductions, linear algebra, normalization, attention and losses: beyond the node suite.

Identity elements of empty reductions for every dtype, noop_with_empty_axes on composite
reductions, dtypes kept for float16 and bfloat16, legacy versions (Gemm broadcast, BatchNorm
training outputs, Dropout masks), attention windows and GQA against small oracles, linear
attention state chaining, inputs never mutated, and clear errors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from op_testing import runner

import onnxflow
from onnxflow.errors import OnnxflowError
from onnxflow.ops.linalg import grouped_matmul

F16 = np.float16
F32 = np.float32
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(7)


run = runner(opset=25)


def randn(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


def axes(*values):
    return np.array(values, np.int64)


# -- Reductions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "dtype", "expected"),
    [
        ("ReduceMax", np.int32, np.iinfo(np.int32).min),
        ("ReduceMax", F32, -np.inf),
        ("ReduceMax", np.bool_, False),
        ("ReduceMin", np.uint8, 255),
        ("ReduceMin", F16, np.inf),
        ("ReduceProd", F32, 1),
        ("ReduceSum", np.int64, 0),
        ("ReduceLogSumExp", F32, -np.inf),
        ("ReduceLogSum", F32, -np.inf),
        ("ReduceL2", F32, 0),
    ],
)
def test_empty_set_reduces_to_the_identity_element(op, dtype, expected):
    y = run(op, [np.zeros((2, 0, 3), dtype), axes(1)], opset=20, keepdims=0)
    assert y.dtype == dtype and y.shape == (2, 3)
    assert np.all(y == np.asarray(expected, dtype))


def test_noop_with_empty_axes_still_applies_the_non_reduction_steps():
    x = randn(2, 3)
    assert np.allclose(run("ReduceSumSquare", [x], opset=18, noop_with_empty_axes=1), x * x)
    assert np.allclose(run("ReduceL1", [x, axes()], opset=18, noop_with_empty_axes=1), abs(x))
    assert run("ReduceSum", [x], opset=13, noop_with_empty_axes=1).shape == (2, 3)


def test_empty_axes_without_noop_reduce_everything():
    x = randn(2, 3)
    y = run("ReduceMean", [x, axes()], opset=18, keepdims=0)
    assert y.shape == () and np.isclose(y, x.mean())


def test_axes_attribute_in_early_versions():
    x = randn(2, 3, 4)
    y = run("ReduceSum", [x], opset=11, axes=[-1, 0], keepdims=0)
    assert np.allclose(y, x.sum(axis=(0, 2)), atol=1e-6)
    assert run("ReduceMax", [x], opset=13, axes=[1]).shape == (2, 1, 4)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_small_floats_keep_their_dtype_and_accumulate_wide(dtype):
    x = np.full((4096,), 1, dtype)
    y = run("ReduceSum", [x], opset=13, keepdims=0)
    assert y.dtype == dtype and float(y) == 4096
    assert run("ReduceMean", [x], opset=18).dtype == dtype


def test_reduce_log_sum_exp_is_stable_for_large_values():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], F32)
    y = run("ReduceLogSumExp", [x, axes(1)], opset=18, keepdims=0)
    assert np.isclose(y[0], 1000 + np.log(2)) and y[1] == -np.inf


def test_integer_sums_keep_the_integer_type():
    y = run("ReduceSum", [np.array([[1, 2], [3, 4]], np.int32), axes(0)], opset=13)
    assert y.dtype == np.int32 and y.tolist() == [[4, 6]]


def test_bad_axis_is_a_clear_error():
    with pytest.raises(OnnxflowError, match="axis 3 is out of range"):
        run("ReduceSum", [randn(2, 3), axes(3)], opset=13)


def test_reduction_does_not_mutate_its_input():
    x = randn(3, 4)
    before = x.copy()
    run("ReduceLogSumExp", [x, axes(1)], opset=18)
    run("ReduceL2", [x], opset=13, axes=[0])
    assert np.array_equal(x, before)


# -- Losses -------------------------------------------------------------------------------------


def test_nll_mean_ignores_ignored_targets_in_the_denominator():
    log_prob = np.log(np.full((3, 2), 0.5, F32))
    target = np.array([0, 1, -1], np.int64)
    y = run("NegativeLogLikelihoodLoss", [log_prob, target], opset=22, ignore_index=-1)
    assert np.isclose(y, np.log(2))


def test_nll_target_out_of_range_is_a_clear_error():
    with pytest.raises(OnnxflowError, match="outside"):
        run("NegativeLogLikelihoodLoss", [randn(2, 3), np.array([0, 3], np.int64)], opset=22)


def test_softmax_cross_entropy_returns_log_prob_in_the_input_dtype():
    scores = randn(2, 3, dtype=F16)
    loss, log_prob = run(
        "SoftmaxCrossEntropyLoss", [scores, np.array([0, 2], np.int32)], opset=13, n_out=2
    )
    assert loss.dtype == F16 and log_prob.dtype == F16 and loss.shape == ()
    assert np.allclose(np.exp(log_prob.astype(F32)).sum(axis=1), 1, atol=1e-3)


# -- Linear algebra -----------------------------------------------------------------------------


def test_matmul_keeps_bfloat16_and_returns_arrays_for_vectors():
    a, b = randn(2, 3, dtype=BF16), randn(3, 4, dtype=BF16)
    assert run("MatMul", [a, b], opset=13).dtype == BF16
    y = run("MatMul", [randn(3), randn(3)], opset=13)
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == F32


def test_gemm_version_6_needs_broadcast_for_a_vector_c():
    a, b, c = randn(2, 3), randn(3, 4), randn(4)
    y = run("Gemm", [a, b, c], opset=6, broadcast=1, alpha=2.0, beta=0.5)
    assert np.allclose(y, 2 * a @ b + 0.5 * c, atol=1e-5)
    with pytest.raises(OnnxflowError, match="broadcast=0 expects C of shape"):
        run("Gemm", [a, b, c], opset=6)


def test_gemm_optional_c_and_transposes():
    a, b = randn(3, 2), randn(4, 3)
    assert np.allclose(run("Gemm", [a, b], opset=13, transA=1, transB=1), a.T @ b.T, atol=1e-5)


def test_einsum_with_spaces_and_bfloat16():
    a, b = randn(2, 3, dtype=BF16), randn(3, 4, dtype=BF16)
    y = run("Einsum", [a, b], opset=12, equation="ij, jk -> ik")
    assert y.dtype == BF16 and y.shape == (2, 4)


def test_det_of_a_2d_matrix_is_a_0d_array():
    y = run("Det", [np.array([[2.0, 1.0], [1.0, 3.0]], F32)], opset=22)
    assert y.shape == () and np.isclose(y, 5)


# -- Normalization ------------------------------------------------------------------------------


def bn_inputs(dtype=F32):
    x = randn(4, 3, 2, 2, dtype=dtype)
    return [x, np.ones(3, dtype), np.zeros(3, dtype), np.zeros(3, dtype), np.ones(3, dtype)]


def test_batchnorm_9_computes_batch_statistics_when_training_outputs_are_listed():
    inputs = bn_inputs()
    y, mean, var, saved_mean, saved_var = run("BatchNormalization", inputs, opset=9, n_out=5)
    batch_mean = inputs[0].mean(axis=(0, 2, 3))
    assert np.allclose(saved_mean, batch_mean, atol=1e-6)
    assert np.allclose(mean, 0.1 * batch_mean, atol=1e-6)
    batch_var = inputs[0].var(axis=(0, 2, 3))
    assert np.allclose(saved_var, batch_var, atol=1e-5)
    assert np.allclose(var, 0.9 + 0.1 * batch_var, atol=1e-5)
    assert np.allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)


def test_batchnorm_6_in_test_mode_uses_the_given_statistics():
    inputs = bn_inputs()
    y = run("BatchNormalization", inputs, opset=6, is_test=1)
    assert np.allclose(y, inputs[0] / np.sqrt(1 + 1e-5), atol=1e-6)


def test_batchnorm_7_non_spatial_uses_per_feature_parameters():
    x = randn(4, 3, 2)
    ones, zeros = np.ones((3, 2), F32), np.zeros((3, 2), F32)
    y = run("BatchNormalization", [x, ones, zeros, zeros, ones], opset=7, spatial=0)
    assert np.allclose(y, x / np.sqrt(1 + 1e-5), atol=1e-6)


def test_batchnorm_training_keeps_float16_and_does_not_mutate_running_stats():
    inputs = bn_inputs(F16)
    before = [a.copy() for a in inputs]
    y, mean, var = run("BatchNormalization", inputs, opset=15, n_out=3, training_mode=1)
    assert y.dtype == F16 and mean.dtype == F16 and var.dtype == F16
    assert all(np.array_equal(a, b) for a, b in zip(inputs, before))


def test_layer_normalization_stashes_statistics_in_float32():
    x = randn(2, 3, 4, dtype=F16)
    y, mean, inv_std = run("LayerNormalization", [x, np.ones(4, F16)], opset=17, n_out=3, axis=-1)
    assert y.dtype == F16 and mean.dtype == F32 and inv_std.dtype == F32
    assert mean.shape == (2, 3, 1)


def test_group_normalization_18_takes_scale_per_group_and_21_per_channel():
    x = randn(2, 4, 3)
    per_group = run(
        "GroupNormalization", [x, np.array([1, 2], F32), np.zeros(2, F32)], opset=18, num_groups=2
    )
    per_channel = run(
        "GroupNormalization",
        [x, np.array([1, 1, 2, 2], F32), np.zeros(4, F32)],
        opset=21,
        num_groups=2,
    )
    assert np.allclose(per_group, per_channel, atol=1e-6)


def test_rms_normalization_output_takes_the_scale_dtype():
    y = run("RMSNormalization", [randn(2, 4, dtype=F16), np.ones(4, F32)], opset=23)
    assert y.dtype == F32


def test_lp_normalization_of_a_zero_vector_is_zero():
    y = run("LpNormalization", [np.array([[0.0, 0.0], [3.0, 4.0]], F32)], opset=22, p=2)
    assert np.allclose(y, [[0, 0], [0.6, 0.8]])


def test_lrn_matches_the_spec_window():
    x = randn(1, 5, 2, 2)
    y = run("LRN", [x], opset=13, size=3, alpha=0.5, beta=0.75, bias=2.0)
    square = x * x
    for c in range(5):
        window = square[:, max(0, c - 1) : min(5, c + 2)].sum(axis=1)
        assert np.allclose(y[:, c], x[:, c] / (2 + 0.5 / 3 * window) ** 0.75, atol=1e-6)


# -- Dropout ------------------------------------------------------------------------------------


def test_dropout_7_mask_has_the_data_type_and_10_is_boolean():
    x = randn(2, 3)
    y, mask = run("Dropout", [x], opset=7, n_out=2, ratio=0.3)
    assert y is not None and np.array_equal(y, x) and mask.dtype == F32 and np.all(mask == 1)
    _, mask = run("Dropout", [x], opset=10, n_out=2)
    assert mask.dtype == np.bool_ and mask.all()


def test_dropout_training_with_seed_is_repeatable_and_scales_kept_values():
    x = randn(50, 20)
    ratio, train = np.array(0.25, F32), np.array(True)
    y1, m1 = run("Dropout", [x, ratio, train], opset=13, n_out=2, seed=5)
    y2, m2 = run("Dropout", [x, ratio, train], opset=13, n_out=2, seed=5)
    assert np.array_equal(m1, m2) and np.array_equal(y1, y2)
    assert np.allclose(y1[m1], x[m1] / 0.75) and np.all(y1[~m1] == 0)
    assert 0.15 < 1 - m1.mean() < 0.35


def test_dropout_ratio_one_drops_everything():
    y = run("Dropout", [randn(3, 3), np.array(1.0, F32), np.array(True)], opset=22)
    assert np.all(y == 0)


# -- Attention ----------------------------------------------------------------------------------


def attention_oracle(q, k, v, allowed):
    """Plain softmax attention on 4D inputs with a boolean allowed-keys mask."""
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(allowed, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_attention_25_window_with_causal():
    q, k, v = randn(1, 2, 5, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 3)
    y = run("Attention", [q, k, v], opset=25, is_causal=1, left_window_size=1)
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    assert np.allclose(y, attention_oracle(q, k, v, (j <= i) & (j >= i - 1)), atol=1e-5)


def test_attention_gqa_equals_repeated_kv_heads():
    q, k, v = randn(2, 4, 3, 8), randn(2, 2, 3, 8), randn(2, 2, 3, 8)
    y = run("Attention", [q, k, v], opset=23)
    expected = attention_oracle(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), True)
    assert np.allclose(y, expected, atol=1e-5)


def test_attention_fully_masked_row_is_zero_and_inputs_unchanged():
    q, k, v = randn(1, 1, 2, 4), randn(1, 1, 2, 4), randn(1, 1, 2, 4)
    past_k, past_v = randn(1, 1, 1, 4), randn(1, 1, 1, 4)
    mask = np.array([[True, True, True], [False, False, False]])
    before = [a.copy() for a in (q, k, v, past_k, past_v)]
    y, present_k, _, probs = run(
        "Attention", [q, k, v, mask, past_k, past_v], opset=23, n_out=4, qk_matmul_output_mode=3
    )
    assert np.all(y[:, :, 1] == 0) and np.all(probs[:, :, 1] == 0)
    assert present_k.shape == (1, 1, 3, 4)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v, past_k, past_v), before))


def test_attention_3d_without_num_heads_is_a_clear_error():
    with pytest.raises(OnnxflowError, match="num_heads"):
        run("Attention", [randn(1, 2, 8), randn(1, 2, 8), randn(1, 2, 8)], opset=23)


def test_linear_attention_prefill_equals_token_by_token_decode():
    b, t, h, d = 1, 4, 2, 3
    q, k, v = randn(b, t, h * d), randn(b, t, h * d), randn(b, t, h * d)
    decay, beta = -abs(randn(b, t, h)), np.full((b, t, h), 0.5, F32)
    attrs = {"q_num_heads": h, "kv_num_heads": h, "update_rule": "gated_delta"}
    full, state = run("LinearAttention", [q, k, v, None, decay, beta], opset=27, n_out=2, **attrs)
    state_t = np.zeros((b, h, d, d), F32)
    for s in range(t):
        step = slice(s, s + 1)
        out, state_t = run(
            "LinearAttention",
            [q[:, step], k[:, step], v[:, step], state_t, decay[:, step], beta[:, step]],
            opset=27,
            n_out=2,
            **attrs,
        )
        assert np.allclose(out, full[:, step], atol=1e-5)
    assert np.allclose(state, state_t, atol=1e-5)


def test_rotary_embedding_preserves_norms_of_rotated_pairs():
    x = randn(1, 2, 3, 4)
    angles = RNG.uniform(0, 6, (8, 2)).astype(F32)
    pos = np.array([[0, 5, 7]], np.int64)
    y = run("RotaryEmbedding", [x, np.cos(angles), np.sin(angles), pos], opset=23)
    pair = lambda a: a[..., :2] ** 2 + a[..., 2:] ** 2  # noqa: E731
    assert np.allclose(pair(y), pair(x), atol=1e-5)


@pytest.mark.parametrize(
    ("dtype", "c_dtype"),
    [(F32, F32), (np.float64, np.float64), (np.int32, np.int32), (F32, np.float64)],
)
def test_gemm_scales_and_adds_over_its_product_without_touching_its_inputs(dtype, c_dtype):
    """alpha * A @ B + beta * C, updated over the product where the dtypes allow: the same
    result as the formula, in A's dtype, and A, B, C never written."""
    rng = np.random.default_rng(5)
    a, b = (rng.integers(-4, 5, s).astype(dtype) for s in ((3, 4), (4, 5)))
    c = rng.integers(-4, 5, (1, 5)).astype(c_dtype)
    kept = [v.copy() for v in (a, b, c)]
    for alpha, beta in [(1.0, 1.0), (2.0, 0.5), (0.5, 0.0)]:
        y = run("Gemm", [a, b, c], opset=13, alpha=alpha, beta=beta)
        want = alpha * (a.astype(np.float64) @ b) + beta * c.astype(np.float64)
        assert y.dtype == dtype and y.shape == (3, 5)
        np.testing.assert_allclose(y, want.astype(dtype), rtol=1e-6)
    for before, now in zip(kept, (a, b, c)):
        np.testing.assert_array_equal(before, now)


# -- GroupedMatMul (opset 29; onnx 1.23 cannot load such a model, so the kernel is called) -----


def _grouped_oracle(x, weights, group_indices, bias=None):
    """The spec's definition, one row and selection at a time."""
    m, s = group_indices.shape
    out = np.zeros((m, s, weights.shape[2]), np.float64)
    for i in range(m):
        for j in range(s):
            g = group_indices[i, j]
            out[i, j] = x[i].astype(np.float64) @ weights[g].astype(np.float64)
            if bias is not None:
                out[i, j] += bias[g]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize(
    ("m", "s"), [(6, 2), (5, 1), (0, 2), (3, 0)], ids=["top2", "top1", "no_tokens", "no_picks"]
)
def test_grouped_matmul_is_each_row_times_its_selected_groups(
    dtype: type, index_dtype: type, with_bias: bool, m: int, s: int
) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, 4)).astype(dtype)
    weights = rng.standard_normal((3, 4, 5)).astype(dtype)
    groups = rng.integers(0, 3, (m, s)).astype(index_dtype)  # group 2 may go unused
    bias = rng.standard_normal((3, 5)).astype(dtype) if with_bias else None
    y = grouped_matmul(x, weights, groups, bias)
    assert (y.shape, y.dtype) == ((m, s, 5), np.dtype(dtype))
    tol = 1e-6 if dtype in (np.float32, np.float64) else 3e-2
    expected = _grouped_oracle(x, weights, groups, bias)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("bad", [3, -1])
def test_grouped_matmul_index_outside_the_groups_is_an_error(bad: int) -> None:
    x, weights = np.ones((2, 4), np.float32), np.ones((3, 4, 5), np.float32)
    with pytest.raises(ValueError, match=rf"group index {bad} is outside \[0, 3\)"):
        grouped_matmul(x, weights, np.array([[0], [bad]], np.int64))


@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 5), (2, 4, 3, 5)])
@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batchnorm_with_constant_parameters_gives_the_fed_parameters_bits(shape, opset):
    """Constant scale, bias, mean and var: their factor and shift are made once at compile
    time; Y has the bits of the same node fed them at run time, and X dies into Y (in place)
    or is kept, as the graph needs."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    params = [rng.uniform(0.5, 2.0, 4).astype(np.float32) for _ in range(4)]
    names = ["scale", "bias", "mean", "var"]
    nodes = [
        helper.make_node("Neg", ["x"], ["t"]),  # t dies at the BatchNormalization: in place
        helper.make_node("BatchNormalization", ["t", *names], ["y"], epsilon=1e-3),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    inits = [numpy_helper.from_array(p, n) for p, n in zip(params, names)]
    fed = inputs + [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in names]
    constant = helper.make_model(
        helper.make_graph(nodes, "g", inputs, out, inits),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    fed_model = helper.make_model(
        helper.make_graph(nodes, "g", fed, out), opset_imports=[helper.make_opsetid("", opset)]
    )
    ours = onnxflow.InferenceSession(constant).run(None, {"x": x})[0]
    feeds = {"x": x, **dict(zip(names, params))}
    theirs = onnxflow.InferenceSession(fed_model).run(None, feeds)[0]
    assert ours.tobytes() == theirs.tobytes()
    a = params[0] / np.sqrt(params[3] + np.float32(1e-3))
    expected = -x * a.reshape(-1, *[1] * (x.ndim - 2))
    expected += (params[1] - params[2] * a).reshape(-1, *[1] * (x.ndim - 2))
    np.testing.assert_array_equal(ours, expected)
