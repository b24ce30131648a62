"""Sequences, optionals, strings, random generators, TfIdfVectorizer, ImageDecoder and the
training-preview optimizers: what the node suite does not pin down.

Random kernels are checked by property (shape, dtype, range, moments, seed reproducibility), the
rest by named scenarios, untouched inputs and clear errors.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from op_testing import f32, runner, session, strings

import onnxflow
from onnxflow.errors import OnnxflowError

TRAINING = "ai.onnx.preview.training"

run = runner(opset=21)


def i64(value):
    return np.array(value, dtype=np.int64)


# -- sequences ----------------------------------------------------------------------------------


def test_sequence_insert_negative_position_leaves_input_untouched():
    seq = [f32(1), f32(2)]
    out = run("SequenceInsert", [seq, f32(9), i64(-1)])
    assert [a.tolist() for a in out] == [[1], [9], [2]]
    assert [a.tolist() for a in seq] == [[1], [2]]


def test_sequence_insert_without_position_appends():
    out = run("SequenceInsert", [[f32(1)], f32(2)])
    assert [a.tolist() for a in out] == [[1], [2]]


def test_sequence_insert_rejects_other_dtype():
    with pytest.raises(OnnxflowError, match="dtype"):
        run("SequenceInsert", [[f32(1)], i64([2])])


def test_sequence_at_negative_and_out_of_range():
    seq = [f32(1), f32(2), f32(3)]
    assert run("SequenceAt", [seq, i64(-3)]).tolist() == [1]
    with pytest.raises(OnnxflowError, match=r"position 3 is out of range \[-3, 2\]"):
        run("SequenceAt", [seq, i64(3)])


def test_sequence_erase_default_last_and_empty_error():
    seq = [f32(1), f32(2)]
    assert [a.tolist() for a in run("SequenceErase", [seq])] == [[1]]
    assert len(seq) == 2
    with pytest.raises(OnnxflowError, match="empty sequence"):
        run("SequenceErase", [[]])


def test_sequence_length_is_int64_scalar():
    out = run("SequenceLength", [[f32(1), f32(2)]])
    assert out.dtype == np.int64 and out.shape == () and out == 2


def test_sequence_empty_and_construct():
    assert run("SequenceEmpty", [], dtype=TensorProto.INT64) == []
    with pytest.raises(OnnxflowError, match="dtype"):
        run("SequenceConstruct", [f32(1), i64([1])])


def test_split_to_sequence_scalar_split_leaves_a_short_last_chunk():
    out = run("SplitToSequence", [np.arange(5, dtype=np.float32), i64(2)])
    assert [a.tolist() for a in out] == [[0, 1], [2, 3], [4]]


def test_split_to_sequence_without_split_drops_axis_when_not_keepdims():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run("SplitToSequence", [x], axis=-1, keepdims=0)
    assert [a.shape for a in out] == [(2,)] * 3
    assert out[2].tolist() == [2, 5]


def test_split_to_sequence_lengths_must_sum_to_axis():
    with pytest.raises(OnnxflowError, match="sums to 4, expected the axis length 5"):
        run("SplitToSequence", [np.zeros(5, np.float32), i64([1, 3])])


def test_concat_from_sequence_new_axis_at_end():
    out = run("ConcatFromSequence", [[f32(1, 2), f32(3, 4)]], axis=-1, new_axis=1)
    assert out.tolist() == [[1, 3], [2, 4]]


def test_concat_from_sequence_empty_is_an_error():
    with pytest.raises(OnnxflowError, match="non-empty sequence"):
        run("ConcatFromSequence", [[]], axis=0)


# -- optionals ----------------------------------------------------------------------------------


def _empty_optional_then(op: str, opset: int = 18):
    tensor = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Optional", [], ["opt"], type=tensor),
        helper.make_node(op, ["opt"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnxflow.InferenceSession(model).run(None, {})[0]


def test_empty_optional_has_no_element():
    out = _empty_optional_then("OptionalHasElement")
    assert out.dtype == np.bool_ and out.shape == () and not out


def test_get_element_of_empty_optional_names_the_input():
    with pytest.raises(OnnxflowError, match="'opt' is an empty optional"):
        _empty_optional_then("OptionalGetElement")


def test_optional_wraps_and_get_element_passes_plain_values_through():
    x = f32(1, 2)
    assert run("Optional", [x], opset=15).tolist() == [1, 2]
    assert run("OptionalGetElement", [x], opset=18).tolist() == [1, 2]
    assert run("OptionalHasElement", [[x]], opset=18)


# -- strings ------------------------------------------------------------------------------------


def test_string_normalizer_drops_stopwords_case_insensitively():
    x = np.array([["Monday", "tuesday", "MONDAY"]], dtype=object)
    out = run("StringNormalizer", [x], stopwords=["monday"], case_change_action="UPPER")
    assert out.tolist() == [["TUESDAY"]]


def test_string_normalizer_all_dropped_keeps_rank():
    x = np.array([["a", "A"]], dtype=object)
    out = run("StringNormalizer", [x], stopwords=["a"])
    assert out.shape == (1, 1) and out[0, 0] == ""


@pytest.mark.parametrize(
    ("x", "attrs", "message"),
    [
        (np.array([["a"], ["b"]], dtype=object), {}, r"\[C\] or \[1, C\]"),
        (strings("a"), {"case_change_action": "TITLE"}, "case_change_action"),
    ],
)
def test_string_normalizer_errors(x, attrs, message):
    with pytest.raises(OnnxflowError, match=message):
        run("StringNormalizer", [x], **attrs)


def test_string_concat_of_scalars_is_a_scalar_tensor():
    out = run("StringConcat", [np.array("ab", dtype=object), np.array("cd", dtype=object)])
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == object
    assert out[()] == "abcd"


def test_string_split_maxsplit_zero_and_empty_strings():
    out, counts = run("StringSplit", [strings("a,b", "")], n_out=2, delimiter=",", maxsplit=0)
    assert out.tolist() == [["a,b"], [""]] and counts.tolist() == [1, 1]
    out, counts = run("StringSplit", [strings("", "  ")], n_out=2)
    assert out.shape == (2, 0) and counts.tolist() == [0, 0]


def test_regex_perl_classes_are_ascii_as_in_re2():
    out = run("RegexFullMatch", [strings("abc_1", "caf\u00e9")], pattern=r"\w+")
    assert out.dtype == np.bool_ and out.tolist() == [True, False]


def test_regex_end_of_text_escape():
    out = run("RegexFullMatch", [strings("ab", "ab\\z")], pattern=r"ab\z|ab\\z")
    assert out.tolist() == [True, True]


def test_regex_runs_re2_features_python_re_lacks():
    """RE2 syntax, as the spec says: POSIX classes, Unicode classes, quoted literals."""
    texts = strings("abc", "ab1", "\u0661\u0662", "a.b")
    for pattern, expected in [
        ("[[:alpha:]]+", [True, False, False, False]),
        (r"\pN+", [False, False, True, False]),
        (r"\Qa.b\E", [False, False, False, True]),
    ]:
        assert run("RegexFullMatch", [texts], pattern=pattern).tolist() == expected


def test_regex_catastrophic_backtracking_pattern_answers_at_once():
    """``(a+)+$`` on 'a' * 34 + 'b' takes a backtracking engine 2**34 steps; RE2 is linear."""
    out = run("RegexFullMatch", [strings("a" * 34 + "b", "a" * 34)], pattern="(a+)+$")
    assert out.tolist() == [False, True]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("[[:nope:]]+", "invalid character class range: \\[:nope:\\]"), ("(ab", "missing \\)")],
)
def test_regex_bad_patterns_are_errors_naming_the_fault(pattern, message):
    with pytest.raises(OnnxflowError, match="cannot compile pattern .*" + message):
        run("RegexFullMatch", [strings("ab")], pattern=pattern)


# -- random generators --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elem", "dtype"),
    [
        (TensorProto.FLOAT, np.float32),
        (TensorProto.DOUBLE, np.float64),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.BFLOAT16, np.dtype("bfloat16")),
    ],
)
def test_random_normal_shape_dtype_and_moments(elem, dtype):
    out = run("RandomNormal", [], opset=22, shape=[200, 100], dtype=elem, mean=2.0, scale=3.0)
    assert out.shape == (200, 100) and out.dtype == dtype
    values = out.astype(np.float64)
    assert abs(values.mean() - 2.0) < 0.1 and abs(values.std() - 3.0) < 0.1


def test_random_uniform_range_and_mean():
    out = run("RandomUniform", [], shape=[10000], low=-1.0, high=3.0)
    assert out.dtype == np.float32 and out.min() >= -1 and out.max() <= 3
    assert abs(out.mean() - 1.0) < 0.05


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_seeded_generators_repeat_and_unseeded_do_not(op):
    sess, _ = session(op, [], 21, shape=[50], seed=3.0)
    assert np.array_equal(sess.run(None, {})[0], sess.run(None, {})[0])
    other = run(op, [], shape=[50], seed=4.0)
    assert not np.array_equal(sess.run(None, {})[0], other)
    sess, _ = session(op, [], 21, shape=[50])
    assert not np.array_equal(sess.run(None, {})[0], sess.run(None, {})[0])


def test_like_generators_follow_input_shape_and_dtype():
    x = np.zeros((3, 4), dtype=np.float64)
    assert run("RandomUniformLike", [x]).dtype == np.float64
    out = run("RandomNormalLike", [x], dtype=TensorProto.FLOAT16)
    assert out.shape == (3, 4) and out.dtype == np.float16
    with pytest.raises(OnnxflowError, match="found dtype int64"):
        run("RandomUniformLike", [i64([1, 2])])


def test_bernoulli_extremes_and_mean():
    p = np.array([0.0, 1.0] * 5, dtype=np.float32)
    out = run("Bernoulli", [p], opset=22, dtype=TensorProto.BOOL)
    assert out.dtype == np.bool_ and out.tolist() == [False, True] * 5
    p = np.full(20000, 0.3)
    out = run("Bernoulli", [p], seed=1.0)
    assert out.dtype == np.float64 and set(np.unique(out)) <= {0.0, 1.0}
    assert abs(out.mean() - 0.3) < 0.02


def test_multinomial_draws_follow_softmax():
    with np.errstate(divide="ignore"):  # log(0) = -inf: a class never drawn
        logits = np.log(np.array([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32))
    out = run("Multinomial", [logits], sample_size=5000, seed=7.0)
    assert out.shape == (2, 5000) and out.dtype == np.int32
    assert abs((out[0] == 1).mean() - 0.8) < 0.03 and not (out[0] == 2).any()
    assert (out[1] == 0).all()
    out = run("Multinomial", [logits], dtype=TensorProto.INT64)
    assert out.shape == (2, 1) and out.dtype == np.int64


# -- TfIdfVectorizer ----------------------------------------------------------------------------

_TFIDF = dict(
    min_gram_length=1,
    max_gram_length=2,
    max_skip_count=1,
    ngram_counts=[0, 2],
    ngram_indexes=[2, 0, 1],
    pool_strings=["a", "b", "a", "b"],
    weights=[0.5, 2.0, 3.0],
)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # a: 2, b: 2, (a, b): 1 without skip + 2 with one skip; columns are [b, ab, a]
        ("TF", [2, 3, 2]),
        ("IDF", [2.0, 3.0, 0.5]),
        ("TFIDF", [4.0, 9.0, 1.0]),
    ],
)
def test_tfidf_modes_with_string_pool(mode, expected):
    x = np.array([["a", "a", "b", "b"]], dtype=object)
    out = run("TfIdfVectorizer", [x], mode=mode, **_TFIDF)
    assert out.dtype == np.float32 and out.tolist() == [expected]


def test_tfidf_counts_unigrams_once_and_skips_below_min_length():
    x = np.array([7, 7, 8], dtype=np.int32)
    attrs = dict(max_skip_count=3, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2])
    attrs["pool_int64s"] = [7, 8, 7, 8]
    out = run("TfIdfVectorizer", [x], mode="TF", min_gram_length=1, max_gram_length=2, **attrs)
    assert out.tolist() == [2, 1, 2]
    out = run("TfIdfVectorizer", [x], mode="TF", min_gram_length=2, max_gram_length=2, **attrs)
    assert out.tolist() == [0, 0, 2]


def test_tfidf_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(3, 12)).astype(np.int64)
    attrs = dict(
        mode="TFIDF",
        min_gram_length=1,
        max_gram_length=3,
        max_skip_count=2,
        ngram_counts=[0, 3, 7],
        ngram_indexes=[5, 4, 3, 2, 1, 0, 7],
        pool_int64s=[0, 1, 3, 0, 1, 2, 2, 1, 3, 3, 0, 1, 2],
        weights=[1.5, 2.0, 0.5, 1.0, 3.0, 0.25, 4.0],
    )
    sess, feeds = session("TfIdfVectorizer", [x], opset=9, **attrs)
    graph = helper.make_graph(
        [helper.make_node("TfIdfVectorizer", ["in0"], ["out0"], **attrs)],
        "g",
        [helper.make_tensor_value_info("in0", TensorProto.INT64, x.shape)],
        [helper.make_tensor_value_info("out0", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 8
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"in0": x})[0]
    np.testing.assert_allclose(sess.run(None, feeds)[0], expected)


# -- ImageDecoder -------------------------------------------------------------------------------


def test_image_decoder_without_pillow_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(OnnxflowError, match=r"pip install onnxflow\[image\]"):
        run("ImageDecoder", [np.zeros(4, np.uint8)], opset=20)


def test_image_decoder_round_trip_and_garbage():
    image = pytest.importorskip("PIL.Image")
    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    buffer = io.BytesIO()
    image.fromarray(pixels).save(buffer, format="PNG")
    data = np.frombuffer(buffer.getvalue(), dtype=np.uint8)
    assert np.array_equal(run("ImageDecoder", [data], opset=20), pixels)
    bgr = run("ImageDecoder", [data], opset=20, pixel_format="BGR")
    assert np.array_equal(bgr, pixels[:, :, ::-1])
    garbage = run("ImageDecoder", [np.arange(10, dtype=np.uint8)], opset=20)
    assert garbage.shape == (0, 0, 3) and garbage.dtype == np.uint8


# -- training-preview optimizers ----------------------------------------------------------------


def test_adagrad_two_tensors_keep_their_dtype():
    r, t = np.array(0.1, np.float64), i64(2)
    x1, g1, h1 = np.array([1.0]), np.array([-1.0]), np.array([0.5])
    x2, g2, h2 = np.array([1.0, 2.0]), np.array([0.5, -3.0]), np.array([1.0, 2.0])
    outs = run(
        "Adagrad",
        [r, t, x1, x2, g1, g2, h1, h2],
        n_out=4,
        domain=TRAINING,
        decay_factor=0.5,
        norm_coefficient=0.01,
    )
    rate = 0.1 / (1 + 2 * 0.5)
    for x, g, h, x_new, h_new in zip((x1, x2), (g1, g2), (h1, h2), outs[:2], outs[2:]):
        g_reg = 0.01 * x + g
        np.testing.assert_allclose(h_new, h + g_reg**2)
        np.testing.assert_allclose(x_new, x - rate * g_reg / (np.sqrt(h + g_reg**2) + 1e-6))
        assert x_new.dtype == np.float64


def test_adam_applies_bias_correction_after_first_step():
    r, t = np.array(0.1, np.float32), i64(3)
    x, g, v, h = f32(1.0), f32(-1.0), f32(0.5), f32(0.25)
    x_new, v_new, h_new = run("Adam", [r, t, x, g, v, h], n_out=3, domain=TRAINING)
    v_ref, h_ref = 0.9 * 0.5 + 0.1 * -1.0, 0.999 * 0.25 + 0.001
    rate = 0.1 * np.sqrt(1 - 0.999**3) / (1 - 0.9**3)
    np.testing.assert_allclose(v_new, [v_ref], rtol=1e-6)
    np.testing.assert_allclose(h_new, [h_ref], rtol=1e-6)
    np.testing.assert_allclose(x_new, [1 - rate * v_ref / (np.sqrt(h_ref) + 1e-6)], rtol=1e-6)
    assert x_new.dtype == np.float32


def test_nesterov_momentum_uses_beta_after_first_step():
    r, t = np.array(0.1, np.float32), i64(1)
    x, g, v = f32(1.0), f32(2.0), f32(0.5)
    attrs = dict(alpha=0.9, beta=0.5, mode="nesterov", norm_coefficient=0.0)
    x_new, v_new = run("Momentum", [r, t, x, g, v], n_out=2, domain=TRAINING, **attrs)
    v_ref = 0.9 * 0.5 + 0.5 * 2.0
    np.testing.assert_allclose(v_new, [v_ref], rtol=1e-6)
    np.testing.assert_allclose(x_new, [1 - 0.1 * (2.0 + 0.9 * v_ref)], rtol=1e-6)


def test_optimizer_inputs_must_come_in_whole_groups():
    r, t = np.array(0.1, np.float32), i64(0)
    with pytest.raises(OnnxflowError, match="3 groups of n tensors"):
        run("Adagrad", [r, t, f32(1), f32(1)], n_out=2, domain=TRAINING)
