"""Kernel fast paths give exactly what the plain NumPy call gives.

- binary ufunc nodes keep a repeated broadcast operand widened (``_widening``): same values,
  dtypes and shapes on every call, whichever side is narrow, and never for the wrong object;
- MatMul sends stacked activations by one matrix to a single BLAS product;
- ``out=...`` keeps 0-d results arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import runner

from onnxflow.ops import elementwise
from onnxflow.ops.elementwise import _widening

RNG = np.random.default_rng(3)
needs_array_out = pytest.mark.skipif(
    not elementwise.ARRAY_OUT, reason="_widening is only used with NumPy >= 2.3 (ufunc out=...)"
)
run = runner(opset=21)


@needs_array_out
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.less, np.maximum])
@pytest.mark.parametrize(
    ("wide_shape", "narrow_shape"),
    [((8, 128), (128,)), ((1, 5), (5,)), ((3, 4), (1, 4)), ((6,), ())],
)
def test_widened_operand_gives_the_broadcast_result(ufunc, wide_shape, narrow_shape) -> None:
    kernel = _widening(ufunc)
    narrow = RNG.standard_normal(narrow_shape).astype(np.float32)
    for call in range(4):  # the second sighting widens; later calls use the widened copy
        wide = RNG.standard_normal(wide_shape).astype(np.float32)
        for a, b in ((wide, narrow), (narrow, wide)):
            got, want = kernel(a, b), ufunc(a, b)
            assert got.__class__ is np.ndarray and got.shape == want.shape, call
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@needs_array_out
def test_widening_is_kept_per_object_and_shape() -> None:
    kernel = _widening(np.add)
    bias = np.arange(4, dtype=np.float32)
    x = np.ones((2, 4), np.float32)
    kernel(x, bias)
    kernel(x, bias)
    side, narrow, other, wide = _memo(kernel)
    assert (
        side == 1
        and narrow is bias
        and other == (2, 4)
        and wide.shape == (2, 4)
        and not wide.flags.writeable
    )
    other_bias = bias + 10  # same shape, another object: never combined with the kept copy
    np.testing.assert_array_equal(kernel(x, other_bias), x + other_bias)
    taller = np.ones((3, 4), np.float32)  # same object, another shape
    np.testing.assert_array_equal(kernel(taller, bias), taller + bias)
    both = kernel(np.ones((3, 1), np.float32), bias)  # both operands broadcast
    np.testing.assert_array_equal(both, np.ones((3, 1), np.float32) + bias)


@needs_array_out
def test_large_outputs_keep_nothing() -> None:
    kernel = _widening(np.add)
    bias = np.ones(elementwise.WIDEN_LIMIT + 1, np.float32)
    x = np.ones((2, bias.size), np.float32)
    for _ in range(3):
        kernel(x, bias)
    assert _memo(kernel) is None


def _memo(kernel):
    cells = {
        name: cell.cell_contents
        for name, cell in zip(kernel.__code__.co_freevars, kernel.__closure__)
    }
    return cells["memo"].kept


def test_bias_node_across_runs_matches_numpy() -> None:
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(run("Add", [x, b]), x + b)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((5, 3, 4), (4, 6)),
        ((2, 0, 4), (4, 3)),
        ((2, 3, 0), (0, 5)),
        ((1, 4), (4, 2)),
        ((2, 2, 3, 4), (4, 1)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_stacked_matmul_matches_numpy(a_shape, b_shape, dtype) -> None:
    a = RNG.standard_normal(a_shape).astype(dtype)
    b = RNG.standard_normal(b_shape).astype(dtype)
    got = run("MatMul", [a, b])
    assert got.dtype == np.dtype(dtype) and got.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_stacked_matmul_of_a_transposed_view() -> None:
    a = RNG.standard_normal((4, 3, 5)).astype(np.float32).transpose(1, 0, 2)  # not contiguous
    b = RNG.standard_normal((5, 2)).astype(np.float32)
    np.testing.assert_allclose(run("MatMul", [a, b]), np.matmul(a, b), rtol=1e-5)


def test_matmul_shape_mismatch_is_an_error() -> None:
    with pytest.raises(Exception, match="MatMul"):
        run("MatMul", [np.ones((2, 3, 4), np.float32), np.ones((5, 2), np.float32)])


@pytest.mark.parametrize("op", ["Add", "Mul", "Greater"])
def test_zero_d_results_are_arrays(op: str) -> None:
    got = run(op, [np.array(3, np.int32), np.array(5, np.int32)])
    assert got.__class__ is np.ndarray and got.shape == ()


@needs_array_out
@pytest.mark.parametrize(
    ("x_shape", "c_shape", "widens"),
    [
        ([2, 3], [3], True),
        ([2, 3], [], False),
        ([2, 3], [2, 3], False),
        (["N", 3], ["N", 3], False),
    ],
)
def test_only_nodes_that_may_broadcast_get_the_widening_kernel(x_shape, c_shape, widens) -> None:
    from onnx import TensorProto, helper

    import onnxflow

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, c_shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    sess = onnxflow.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    )
    (traits,) = sess.plan.traits
    assert (traits.stateful is not None) is widens  # the widening form, made per runner
    assert traits.widens is widens
    x = np.ones([2, 3], np.float32)
    c = np.full([d if isinstance(d, int) else 2 for d in c_shape], 2, np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, {"x": x, "c": c})[0], x + c)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("ties", [False, True])
def test_top_k_selection_matches_a_stable_sort(largest: int, ties: bool) -> None:
    rng = np.random.default_rng(11 + largest + 2 * ties)
    for _ in range(50):
        rows, n = int(rng.integers(1, 5)), int(rng.integers(8, 80))
        if ties:  # few distinct values: the k-th value repeats inside and across the boundary
            x = rng.integers(0, 4, (rows, n)).astype(np.float32)
        else:
            x = rng.random((rows, n)).astype(np.float32)
        k = int(rng.integers(1, n // 4))
        values, indices = run("TopK", [x, np.array([k], np.int64)], n_out=2, largest=largest)
        want = np.argsort(-x if largest else x, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(indices, want)
        np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis=-1))


@pytest.mark.parametrize("shape", [(500, 20), (3, 4, 5), (2, 1), (7, 1, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_row_sums_of_squares(shape, dtype, keepdims) -> None:
    x = RNG.standard_normal(shape).astype(dtype)
    for data in (x, np.asfortranarray(x)):
        got = run("ReduceSumSquare", [data, np.array([-1], np.int64)], keepdims=keepdims)
        want = np.einsum("...i,...i->...", x.astype(np.float64), x.astype(np.float64))
        want = want[..., None] if keepdims else want
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("exponent", [3, 4, -2, -3, -4])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_small_integer_powers_round_once(exponent, dtype) -> None:
    # Pow by a small integer is taken as products in float64 rounded once, which is the
    # correctly rounded power of x (NumPy's float32 power is not, and is 40x slower when x < 0).
    x = RNG.standard_normal(4096).astype(dtype)
    x[:7] = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e4, -1e4]
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), float(exponent)).astype(dtype)
    for y in (np.array(exponent, np.float32), np.array(exponent, np.int64)):
        got = run("Pow", [x, y])
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_clip_over_a_dying_intermediate_gives_numpys_clip() -> None:
    from onnx import TensorProto, helper, numpy_helper

    import onnxflow

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["doubled"]),
            helper.make_node("Clip", ["doubled", "lo", "hi"], ["y"]),
            helper.make_node("Clip", ["y", "", "hi2"], ["z"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(1.5, np.float32), "hi"),
            numpy_helper.from_array(np.array(0.5, np.float32), "hi2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    before = x.copy()
    for _ in range(2):
        (z,) = onnxflow.InferenceSession(model).run(None, {"x": x})
        np.testing.assert_array_equal(z, np.minimum(np.clip(x + x, -1.0, 1.5), 0.5))
    np.testing.assert_array_equal(x, before)  # the feed itself is never written
