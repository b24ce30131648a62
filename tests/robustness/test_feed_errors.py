"""Feeds that do not match the model: an InputError naming the input, expected versus found."""

from __future__ import annotations

import numpy as np
import pytest
from model_builders import I64, B, F, model, vi
from onnx import helper, parser

import onnxflow

MODEL = """
<ir_version: 10, opset_import: ["" : 21]>
g (float[N, 3] X, float[N, 3] Y, int64[2] K) => (float[N, 3] Z) {
    Z = Add(X, Y)
}
"""


@pytest.fixture(scope="module")
def sess() -> onnxflow.InferenceSession:
    return onnxflow.InferenceSession(parser.parse_model(MODEL))


def feeds(**over):
    base = {
        "X": np.zeros((2, 3), np.float32),
        "Y": np.ones((2, 3), np.float32),
        "K": np.array([1, 2], np.int64),
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


CASES = {
    "missing_input": (
        feeds(Y=None),
        r"input 'Y' \(tensor\(float\), shape \['N', 3\]\) is required",
    ),
    "unknown_input_name": (
        feeds(Q=np.zeros(1)),
        r"unknown input name\(s\) \['Q'\].*\['X', 'Y', 'K'\]",
    ),
    "wrong_dtype": (
        feeds(X=np.zeros((2, 3), np.float64)),
        r"input 'X': expected dtype tensor\(float\), found tensor\(double\)",
    ),
    "wrong_rank": (
        feeds(X=np.zeros((2, 3, 1), np.float32)),
        r"input 'X': expected rank 2 \(shape \['N', 3\]\), found rank 3",
    ),
    "static_dim_mismatch": (
        feeds(X=np.zeros((2, 4), np.float32)),
        r"input 'X': dimension 1 expected 3, found 4",
    ),
    "static_dim_mismatch_1d": (
        feeds(K=np.zeros(3, np.int64)),
        r"input 'K': dimension 0 expected 2, found 3",
    ),
    "dim_param_bound_inconsistently": (
        feeds(Y=np.ones((5, 3), np.float32)),
        r"input 'Y': dimension 0 is 'N'=5, but input 'X' bound 'N'=2",
    ),
    "none_for_a_tensor": (feeds(K=[None]), r"input 'K'"),
    "object_that_is_no_array": (
        feeds(K=object()),
        r"input 'K': expected tensor\(int64\) as a numpy array, found object",
    ),
    "ragged_list": (feeds(K=[[1], [2, 3]]), r"input 'K': cannot make an array"),
    "float_list_for_int_input": (feeds(K=[1.5, 2.0]), r"input 'K': expected dtype tensor\(int64\)"),
    "int_list_out_of_range": (feeds(K=[2**70, 1]), r"input 'K'"),
    "strings_for_floats": (
        feeds(X=[["a", "b", "c"]]),
        r"input 'X': expected dtype tensor\(float\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_feed_is_an_input_error(sess: onnxflow.InferenceSession, case: str) -> None:
    bad, message = CASES[case]
    with pytest.raises(onnxflow.InputError, match=message):
        sess.run(None, bad)


def test_unknown_output_name(sess: onnxflow.InferenceSession) -> None:
    with pytest.raises(onnxflow.InputError, match=r"unknown output name\(s\) \['W'\].*\['Z'\]"):
        sess.run(["Z", "W"], feeds())


def test_output_names_as_one_string_is_refused(sess: onnxflow.InferenceSession) -> None:
    with pytest.raises(onnxflow.InputError, match="list of names"):
        sess.run("Z", feeds())


def test_feeds_that_are_no_mapping_and_bad_run_options(sess: onnxflow.InferenceSession) -> None:
    with pytest.raises(onnxflow.InputError, match="mapping"):
        sess.run(None, [np.zeros((2, 3), np.float32)])  # type: ignore[arg-type]
    with pytest.raises(onnxflow.InputError, match="RunOptions"):
        sess.run(None, feeds(), run_options=3)  # type: ignore[arg-type]


def test_exact_python_values_are_converted(sess: onnxflow.InferenceSession) -> None:
    (z,) = sess.run(None, feeds(X=[[1, 2, 3]], Y=[[0.5, 0.5, 0.5]], K=(1, 2)))
    np.testing.assert_array_equal(z, [[1.5, 2.5, 3.5]])
    assert z.dtype == np.float32


def test_every_input_error_is_an_onnxflow_error() -> None:
    assert issubclass(onnxflow.InputError, onnxflow.OnnxflowError)


def test_sequence_and_optional_inputs_are_checked() -> None:
    seq_type = helper.make_tensor_sequence_value_info("S", F, None)
    opt = helper.make_value_info(
        "O", helper.make_optional_type_proto(helper.make_tensor_type_proto(I64, [2]))
    )
    m = model(
        [
            helper.make_node("SequenceLength", ["S"], ["n"]),
            helper.make_node("OptionalHasElement", ["O"], ["has"]),
        ],
        [seq_type, opt],
        [vi("n", I64, []), vi("has", B, [])],
        opset=18,
    )
    sess = onnxflow.InferenceSession(m)
    n, has = sess.run(None, {"S": [np.zeros(2, np.float32)] * 3, "O": None})
    assert n == 3 and not has
    with pytest.raises(
        onnxflow.InputError, match=r"input 'S': expected seq\(tensor\(float\)\) as a list"
    ):
        sess.run(None, {"S": np.zeros(2, np.float32), "O": None})
    with pytest.raises(onnxflow.InputError, match=r"input 'O': dimension 0 expected 2, found 3"):
        sess.run(None, {"S": [], "O": np.zeros(3, np.int64)})


def test_a_symbol_repeated_within_one_input_must_agree() -> None:
    sess = onnxflow.InferenceSession(
        parser.parse_model(
            """
            <ir_version: 10, opset_import: ["" : 21]>
            g (float[N, N] S, float[M] V) => (float[N, N] T) { T = Identity(S) }
            """
        )
    )
    v = np.zeros(4, np.float32)
    np.testing.assert_array_equal(
        sess.run(None, {"S": np.eye(2, dtype=np.float32), "V": v})[0], np.eye(2)
    )
    with pytest.raises(
        onnxflow.InputError, match=r"input 'S': dimension 1 is 'N'=3, but input 'S' bound 'N'=2"
    ):
        sess.run(None, {"S": np.zeros((2, 3), np.float32), "V": v})


def test_a_dtype_equal_to_but_not_the_builtin_one_is_accepted(
    sess: onnxflow.InferenceSession,
) -> None:
    """The fast check wants the builtin dtype object; an equal one takes the general check."""
    x = np.zeros((2, 3), np.dtype("<f4", metadata={"k": 1}))
    assert x.dtype == np.float32 and x.dtype is not np.dtype(np.float32)
    (z,) = sess.run(None, feeds(X=x))
    np.testing.assert_array_equal(z, np.ones((2, 3)))


STRINGS = """
<ir_version: 10, opset_import: ["" : 21]>
g (string[N] S) => (string[N] T) {
    T = StringNormalizer <case_change_action = "UPPER"> (S)
}
"""


@pytest.mark.parametrize(
    "feed",
    [
        np.array(["ab", b"cd"], dtype=object),
        np.array([b"ab", b"cd"]),
        np.array(["ab", "cd"]),
        ["ab", b"cd"],
    ],
    ids=["bytes_in_object_array", "numpy_bytes_array", "numpy_unicode_array", "list"],
)
def test_string_feeds_take_bytes_as_utf8(feed) -> None:
    sess = onnxflow.InferenceSession(parser.parse_model(STRINGS))
    (out,) = sess.run(None, {"S": feed})
    assert out.dtype == object and out.tolist() == ["AB", "CD"]


@pytest.mark.parametrize(
    "feed, message",
    [
        (np.array(["ok", b"\xff"], dtype=object), r"element \[1\] is bytes that are not UTF-8"),
        (np.array(["ok", 3], dtype=object), r"elements to be str, found int 3 at element \[1\]"),
        (np.array(["ok", None], dtype=object), r"found NoneType None at element \[1\]"),
    ],
    ids=["not_utf8", "int", "none"],
)
def test_string_feed_elements_that_are_not_text_are_input_errors(feed, message) -> None:
    sess = onnxflow.InferenceSession(parser.parse_model(STRINGS))
    with pytest.raises(onnxflow.InputError, match=message):
        sess.run(None, {"S": feed})


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_an_ndarray_subclass_reaches_no_kernel() -> None:
    sess = onnxflow.InferenceSession(
        parser.parse_model(
            """
            <ir_version: 10, opset_import: ["" : 13]>
            g (float[2, 2] X) => (float Y) { Y = ReduceSum <keepdims = 0> (X) }
            """
        )
    )
    (out,) = sess.run(None, {"X": np.matrix([[1, 2], [3, 4]], dtype=np.float32)})
    assert out.__class__ is np.ndarray and out.shape == () and out == 10
