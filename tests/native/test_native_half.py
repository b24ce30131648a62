"""Compiled float16 rounding and casts against their NumPy forms and NumPy's own casts, bit for
bit: every float16 value, its float32 neighbours and the ties between two float16 values, random
float32 bit patterns (NaNs with payloads among them), other dtypes, shapes and layouts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from native_forms import both_forms, node_forms
from onnx import TensorProto, helper

import onnxflow
from onnxflow.ops import cast, compiled
from onnxflow.ops.pass_made import FUSED_DOMAIN, HALF_ROUND
from onnxflow.ops.pass_made import half as pass_made

FORMS_TESTED = [("onnxflow.fused", "HalfRound"), ("onnxflow.fused", "HalfTable"), ("", "Cast")]

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT


def _every_half_bits() -> np.ndarray:
    """The float32 bits of every float16 value (NaNs with every payload, both signs)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    return halves.astype(np.float32).view(np.uint32)


def _hard_bits() -> np.ndarray:
    """float32 bit patterns where rounding to float16 can go wrong: every float16 value and its
    float32 neighbours two steps either side; the ties between two neighbouring float16 values
    and one step either side; the float32 subnormals' ends; random patterns over all 2**32,
    which hold NaNs with payloads (signalling and quiet) and values far beyond float16's range."""
    exact = _every_half_bits()
    finite = exact[(exact & 0x7FFFFFFF) < 0x7F800000].view(np.float32)
    ordered = np.unique(finite.astype(np.float64))
    ties = ((ordered[:-1] + ordered[1:]) / 2).astype(np.float32).view(np.uint32)
    near = [
        (b.astype(np.int64) + d)
        for b, ds in ((exact, (-2, -1, 1, 2)), (ties, (-1, 0, 1)))
        for d in ds
    ]
    rng = np.random.default_rng(16)
    random = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    nans = rng.integers(0x7F800001, 0x80000000, 1 << 12, dtype=np.uint64).astype(np.uint32)
    ends = np.array([1, 0x007FFFFF, 0x00800000, 0x33000000, 0x33000001, 0x337FFFFF], np.uint32)
    bits = np.concatenate([exact, *near, random, nans, nans | 0x80000000, ends, ends | 1 << 31])
    return (bits % (1 << 32)).astype(np.uint32)  # 0's and -0's neighbours wrap: patterns still


def _numpy_round(bits: np.ndarray) -> np.ndarray:
    """The float32 bits of NumPy's float16 rounding of ``bits``; NaN as it is (HalfRound keeps a
    NaN whole: its float16 payload would lose the low 13 bits)."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = bits.view(np.float32).astype(np.float16).astype(np.float32).view(np.uint32)
    return np.where((bits & 0x7FFFFFFF) > 0x7F800000, bits, rounded)


def test_half_round_is_numpys_rounding_bit_for_bit():
    bits = _hard_bits()
    (compiled,), (numpy_form,) = node_forms(
        HALF_ROUND, [bits.view(np.float32)], 1, domain=FUSED_DOMAIN
    )
    assert compiled.dtype == np.float32
    np.testing.assert_array_equal(compiled.view(np.uint32), numpy_form.view(np.uint32))
    np.testing.assert_array_equal(compiled.view(np.uint32), _numpy_round(bits))


def test_cast_to_float16_is_numpys_bit_for_bit():
    """NaN payloads as NumPy keeps them: shifted down 13 bits, a signalling NaN still
    signalling (F16C's conversion would quiet it), a payload only in the dropped bits made 1."""
    x = _hard_bits().view(np.float32)
    (compiled,), (numpy_form,) = node_forms("Cast", [x], 19, to=F16)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(np.float16).view(np.uint16)
    assert compiled.dtype == np.float16
    np.testing.assert_array_equal(compiled.view(np.uint16), expected)
    np.testing.assert_array_equal(compiled.view(np.uint16), numpy_form.view(np.uint16))


def test_cast_from_float16_is_exact_for_every_value():
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    (compiled,), (numpy_form,) = node_forms("Cast", [halves], 19, to=F32)
    assert compiled.dtype == np.float32
    np.testing.assert_array_equal(compiled.view(np.uint32), _every_half_bits())
    np.testing.assert_array_equal(compiled.view(np.uint32), numpy_form.view(np.uint32))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (2, 3, 33), (1, 3, 4, 4)])
def test_shapes(shape):
    x = (np.random.default_rng(2).standard_normal(shape) * 300).astype(np.float32)
    for op, inputs, opset, attrs in [
        (HALF_ROUND, [x], 1, {"domain": FUSED_DOMAIN}),
        ("Cast", [x], 13, {"to": F16}),
        ("Cast", [x.astype(np.float16)], 13, {"to": F32}),
    ]:
        (compiled,), (numpy_form,) = node_forms(op, inputs, opset, **attrs)
        assert compiled.shape == numpy_form.shape == shape
        assert compiled.dtype == numpy_form.dtype
        assert compiled.tobytes() == numpy_form.tobytes()


@pytest.mark.parametrize(
    ("dtype", "to"),
    [
        (np.float64, F16),  # rounded once from float64, by the NumPy form
        (np.int32, F16),
        (np.float16, F16),
        (np.float32, F32),
        (np.float64, F32),
        (np.int64, F32),
        (np.float16, TensorProto.FLOAT16),
        (np.float16, TensorProto.DOUBLE),
        (np.float32, TensorProto.BFLOAT16),
    ],
)
def test_other_casts_are_the_numpy_forms(dtype, to):
    x = (np.random.default_rng(3).standard_normal(50) * 1000).astype(dtype)
    (compiled,), (numpy_form,) = node_forms("Cast", [x], 21, to=to)
    assert compiled.dtype == numpy_form.dtype
    assert compiled.tobytes() == numpy_form.tobytes()


def test_half_round_of_other_dtypes_is_the_numpy_form():
    x = np.random.default_rng(4).standard_normal(64) * 7e4
    np.testing.assert_array_equal(pass_made._half_round_compiled(x), pass_made.half_round(x))
    y = (x / 100).astype(np.float16)
    np.testing.assert_array_equal(pass_made._half_round_compiled(y), pass_made.half_round(y))


def test_strided_and_read_only_inputs():
    """A transposed or read-only input is read as its values; the in-place form copies it."""
    x = (np.random.default_rng(5).standard_normal((40, 30)) * 1e3).astype(np.float32)
    expected = pass_made.half_round(x.T)
    np.testing.assert_array_equal(pass_made._half_round_compiled(x.T), expected)
    np.testing.assert_array_equal(pass_made._half_round_compiled_over_x(x.T), expected)
    frozen = x.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(
        pass_made._half_round_compiled_over_x(frozen), pass_made.half_round(x)
    )
    np.testing.assert_array_equal(frozen, x)
    h = x.astype(np.float16)
    np.testing.assert_array_equal(cast._from_half(h.T), h.T.astype(np.float32))
    np.testing.assert_array_equal(cast._to_half(x.T), x.T.astype(np.float16))


def test_in_place_form_writes_over_its_input():
    x = (np.random.default_rng(6).standard_normal(1000) * 1e3).astype(np.float32)
    expected = pass_made.half_round(x)
    y = x.copy()
    assert pass_made._half_round_compiled_over_x(y) is y
    np.testing.assert_array_equal(y, expected)


def _half_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A small float16 model (Conv, Add, Mul, Sigmoid, Div, Softmax, a Cast to float32 and
    back) whose intermediate results the half pass rounds, in place where they die."""
    rng = np.random.default_rng(7)
    w = helper.make_tensor(
        "w", F16, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float16).tobytes(), raw=True
    )
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "x0"], ["a"]),
        helper.make_node("Div", ["a", "m"], ["d"]),
        helper.make_node("Cast", ["d"], ["d32"], to=F32),
        helper.make_node("Softmax", ["d32"], ["p32"], axis=1),
        helper.make_node("Cast", ["p32"], ["y"], to=F16),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [
            helper.make_tensor_value_info("x", F16, [1, 3, 8, 8]),
            helper.make_tensor_value_info("x0", F16, [1, 1, 8, 8]),
        ],
        [helper.make_tensor_value_info("y", F16, [1, 4, 8, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": rng.standard_normal((1, 3, 8, 8)).astype(np.float16),
        "x0": rng.standard_normal((1, 1, 8, 8)).astype(np.float16),
    }
    return model, feeds


@pytest.mark.parametrize("rounding", ["each_op", "outputs"])
def test_float16_model_both_forms(rounding):
    model, feeds = _half_model()
    (compiled,), (numpy_form,) = both_forms(model, feeds, float16_rounding=rounding)
    assert compiled.dtype == np.float16
    assert compiled.tobytes() == numpy_form.tobytes()
    code = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "_half_round_compiled" in code and "Cast_to_float16_compiled" in code


@pytest.mark.parametrize("portable", [False, True])
def test_both_loop_forms_are_numpys_bits(portable):
    """The integer form (every CPU) and the F16C form (x86-64 with it), at every offset of the
    8-wide blocks: the F16C loop's scalar tail runs the integer form."""
    loops = compiled.module("_half")
    bits = _hard_bits()
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for start in (0, 1, 5):
        x = bits[start:].view(np.float32)
        rounded, narrowed = np.empty_like(x), np.empty(x.size, np.uint16)
        loops.round_f32(x, rounded, portable)
        loops.f32_to_f16(x, narrowed, portable)
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(narrowed, x.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(rounded.view(np.uint32), _numpy_round(bits[start:]))
        widened = np.empty(halves.size - start, np.float32)
        loops.f16_to_f32(halves[start:], widened, portable)
        want = halves[start:].view(np.float16).astype(np.float32)
        np.testing.assert_array_equal(widened.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("portable", [False, True])
def test_table_lookup_loop_reads_each_float16_values_entry(portable):
    """Both loop forms at every offset of the 8-wide blocks, with tables of float32 values and
    of float16 bits: the entry of each float16 value's bits (signalling NaNs aside, which the
    F16C form refuses), and False as soon as an element
    is not a float16 value (a float32 between two, beyond the range, a NaN payload float16
    has no room for)."""
    loops = compiled.module("_half")
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    signalling = ((halves & 0x7C00) == 0x7C00) & ((halves & 0x3FF) != 0) & ((halves & 0x200) == 0)
    rng = np.random.default_rng(3)
    table = rng.standard_normal(1 << 16).astype(np.float32)
    bits = halves[~signalling][rng.integers(0, (~signalling).sum(), (1 << 16) + 1)]
    not_half = np.array([0x3DCCCCCD, 0x477FF000, 0x7FC00001], np.uint32).view(np.float32)
    for start in (0, 1, 5):
        h = halves[~signalling][start:]
        x = h.view(np.float16).astype(np.float32)
        out, out16 = np.empty_like(x), np.empty_like(x)
        assert loops.lookup_f32(x, table, out, portable)
        np.testing.assert_array_equal(out.view(np.uint32), table[h].view(np.uint32))
        assert loops.lookup_f16(x, bits, out16, portable)  # entries of float16 bits, widened
        want16 = bits[h].view(np.float16).astype(np.float32)
        np.testing.assert_array_equal(out16.view(np.uint32), want16.view(np.uint32))
        for bad in not_half:
            for at in (0, x.size // 2, x.size - 1):
                y = x.copy()
                y[at] = bad
                assert not loops.lookup_f32(y, table, out, portable)
                assert not loops.lookup_f16(y, bits, out16, portable)


def _table_model() -> onnx.ModelProto:
    """float16 GELU in its tanh form, written out: a chain the float16 tables pass makes one
    HalfTable node."""
    consts = {"three": 3.0, "c": 0.044715, "k": 0.7978845608, "one": 1.0, "half": 0.5}
    nodes = [
        helper.make_node("Constant", [], [n], value=helper.make_tensor(n, F16, [], [v]))
        for n, v in consts.items()
    ]
    nodes += [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "c"], ["cc"]),
        helper.make_node("Add", ["x", "cc"], ["inner"]),
        helper.make_node("Mul", ["inner", "k"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["tm"]),
        helper.make_node("Mul", ["tm", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", F16, [1, None])],
        [helper.make_tensor_value_info("y", F16, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_half_table_both_forms_for_every_float16_value():
    model = _table_model()
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, -1)
    (compiled_y,), (numpy_y,) = both_forms(model, {"x": x})
    assert compiled_y.dtype == np.float16
    assert compiled_y.tobytes() == numpy_y.tobytes()
    code = onnxflow.InferenceSession(model.SerializeToString()).source()
    assert "table_lookup" in code


def test_round_over_and_into_are_numpys_bits_and_refuse_other_arrays():
    """The one-call forms HalfRound binds: any shape of C-contiguous float32 (writeable where
    written), NumPy's rounding bit for bit; other arrays left untouched, False."""
    loops = compiled.module("_half")
    bits = _hard_bits()
    x = bits[: (bits.size // 12) * 12].view(np.float32).reshape(3, 4, -1)
    want = _numpy_round(x.reshape(-1).view(np.uint32)).reshape(x.shape)
    out = np.empty_like(x)
    assert loops.round_into(x, out)
    np.testing.assert_array_equal(out.view(np.uint32), want)
    over = x.copy()
    assert loops.round_over(over)
    np.testing.assert_array_equal(over.view(np.uint32), want)
    frozen = x.copy()
    frozen.flags.writeable = False
    with np.errstate(invalid="ignore"):  # widening signalling NaNs quiets them
        wide = x.astype(np.float64)
    for other in (wide, x[:, :, ::2], frozen, x.astype(">f4"), np.float32(1.5)):
        kept = np.array(other, copy=True)
        assert not loops.round_over(other)
        np.testing.assert_array_equal(np.asarray(other), kept)
    assert not loops.round_into(x, np.empty(x.size - 1, np.float32))
    assert not loops.round_into(x, frozen)


def test_cast_to_its_own_type_is_the_input_in_both_forms():
    """Cast's compiled form to float32 or float16 gives an input already of that type back
    as it is (what the NumPy form's convert returns), the others converted as before."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for source, to in [(np.float32, F32), (np.float16, F16), (np.float64, F32), (np.int64, F16)]:
        data = x.astype(source)
        (compiled,), (numpy_form,) = node_forms("Cast", [data], 19, to=to)
        assert compiled.dtype == numpy_form.dtype and compiled.tobytes() == numpy_form.tobytes()
