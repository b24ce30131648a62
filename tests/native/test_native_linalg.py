"""MatMul's and MatMulBias's compiled glue (onnxflow.native._linalg) against their NumPy forms:
the same np.dot, so the same bits; what the glue does not take goes to the NumPy form."""

from __future__ import annotations

import numpy as np
import pytest
from native_forms import both_forms, node_forms
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.native import module
from onnxflow.ops.linalg import matmul
from onnxflow.ops.pass_made.matmul_bias import matmul_bias

FORMS_TESTED = [("", "MatMul"), ("onnxflow.fused", "MatMulBias")]

_LINALG = module("_linalg")


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return (
        got.shape == want.shape
        and got.dtype == want.dtype
        and np.array_equal(got.view(np.uint8), want.view(np.uint8))
    )


def _recording(fn):
    """``fn`` and the list of the argument tuples it was called with."""
    seen = []

    def fallback(*args):
        seen.append(args)
        return fn(*args)

    return fallback, seen


SHAPES = [
    ((1, 1, 64), (64, 64)),  # a decoder step
    ((2, 3, 5, 8), (8, 7)),
    ((6, 8), (8, 3)),
    ((1, 8), (8, 1)),
    ((0, 4, 8), (8, 5)),  # empty
    ((3, 0), (0, 4)),  # a product over nothing
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_matmul_rows_are_the_numpy_forms(a_shape, b_shape, dtype):
    rng = np.random.default_rng(len(a_shape))
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    fallback, seen = _recording(matmul)
    assert _same(_LINALG.MatMul(fallback)(a, b), matmul(a, b)) and seen == []
    (compiled,), (numpy_form,) = node_forms("MatMul", [a, b], 13)
    assert _same(compiled, numpy_form)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.ones(4, np.float32), np.ones((4, 5), np.float32)),  # a vector A
        (np.ones((3, 4), np.float32), np.ones(4, np.float32)),  # a vector B
        (np.ones((3, 4), np.int32), np.ones((4, 5), np.int32)),  # not BLAS
        (np.ones((3, 4), np.float16), np.ones((4, 5), np.float16)),
        (np.ones((3, 4), np.float32), np.ones((4, 5), np.float64)),  # two dtypes
        (np.ones((3, 4), ">f4"), np.ones((4, 5), ">f4")),  # swapped bytes
        (np.ones((3, 4), np.float32).view(np.matrix), np.ones((4, 5), np.float32)),  # subclass
    ],
)
def test_matmul_others_go_to_the_numpy_form(a, b):
    fallback, seen = _recording(matmul)
    got = _LINALG.MatMul(fallback)(a, b)
    assert len(seen) == 1 and seen[0][0] is a and seen[0][1] is b
    np.testing.assert_array_equal(got, matmul(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((1, 4, 1, 16), (1, 4, 16, 33)),
        ((2, 3, 4), (2, 4, 5)),
        ((3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
    ],
)
def test_matmul_of_stacks_is_the_numpy_forms_np_matmul(a_shape, b_shape, dtype):
    rng = np.random.default_rng(len(a_shape) + len(b_shape))
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    fallback, seen = _recording(matmul)
    assert _same(_LINALG.MatMul(fallback)(a, b), matmul(a, b)) and seen == []


def test_matmul_mismatched_dims_raise_np_matmuls_error():
    """The error the NumPy form raises (np.matmul's), for stacks and matrices alike."""
    a, b = np.ones((2, 3, 4), np.float32), np.ones((5, 6), np.float32)
    with pytest.raises(ValueError) as numpy_error:
        matmul(a, b)
    with pytest.raises(ValueError) as compiled_error:
        _LINALG.MatMul(matmul)(a, b)
    assert str(compiled_error.value) == str(numpy_error.value)


def test_matmul_of_distinct_but_equal_dtype_objects_goes_to_the_numpy_form():
    """The NumPy form's fast path asks for one dtype object (``a.dtype is b.dtype``)."""
    a = np.ones((2, 3, 4), np.float32)
    b = np.ones((4, 5), np.dtype("float32", metadata={"k": 1}))
    fallback, seen = _recording(matmul)
    np.testing.assert_array_equal(_LINALG.MatMul(fallback)(a, b), matmul(a, b))
    assert len(seen) == 1


@pytest.mark.parametrize("bias_shape", [(64,), (1,), ()])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((1, 1, 64), (64, 64)), ((5, 64), (64, 64))])
def test_matmul_bias_is_the_numpy_forms(a_shape, b_shape, bias_shape):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    bias = rng.standard_normal(bias_shape).astype(np.float32)
    fallback, seen = _recording(matmul_bias)
    run = _LINALG.MatMulBias(fallback)
    assert _same(run(a, b, bias), matmul_bias(a, b, bias)) and seen == []
    if bias.ndim:
        strided = bias[::-1]
        assert _same(run(a, b, strided), matmul_bias(a, b, strided))


@pytest.mark.parametrize(
    ("a", "b", "bias"),
    [
        (np.ones((2, 4), np.float64), np.ones((4, 3)), np.ones(3, np.float32)),  # a float64 product
        (np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones(3)),  # a float64 bias
        (np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((1, 3), np.float32)),
        (np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones(2, np.float32)),
        (np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), 1.5),  # not an array
        (np.ones((2, 2, 4), np.float32), np.ones((2, 4, 3), np.float32), np.ones(3, np.float32)),
        (np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones(3, ">f4")),
    ],
)
def test_matmul_bias_others_go_to_the_numpy_form(a, b, bias):
    fallback, seen = _recording(lambda *args: np.add(matmul(*args[:2]), args[2]))
    try:
        want = np.add(matmul(a, b), bias)
    except ValueError:
        with pytest.raises(ValueError):
            _LINALG.MatMulBias(fallback)(a, b, bias)
    else:
        np.testing.assert_array_equal(_LINALG.MatMulBias(fallback)(a, b, bias), want)
    assert len(seen) == 1


def test_matmul_bias_model_forms_agree():
    """A MatMul and the Add of its constant bias, fused: both forms of the fused node."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    c = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "c"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, c],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    for shape in ((1, 1, 16), (3, 16), (16,)):
        x = rng.standard_normal(shape).astype(np.float32)
        (compiled,), (numpy_form,) = both_forms(model, {"x": x})
        assert _same(compiled, numpy_form)


def test_the_code_legend_names_the_compiled_class():
    """``onnxflow code`` names a compiled class's instance by its module and class."""
    rng = np.random.default_rng(6)
    model, _ = node_model_of_matmul(rng)
    source = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "# MatMul: onnxflow.native._linalg.MatMul, for MatMul" in source


def node_model_of_matmul(rng):
    from native_forms import node_model

    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    return node_model("MatMul", [a, b], 13)
