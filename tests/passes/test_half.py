"""float16 in float32 (compile/passes/half.py): float16 values are held in float32 and each
op's result rounded to float16 by HalfRound, which equals NumPy's cast to float16 bit for bit;
a model gives the results it gives computed in float16 op by op, with its declared types."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.compile.passes import half_tables
from onnxflow.ops.pass_made.half import half_round

H, F, D, I64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
RNG = np.random.default_rng(11)


def _edge_values() -> np.ndarray:
    halves = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    mids = ((halves[:-1].astype(np.float64) + halves[1:]) / 2).astype(np.float32)
    payload_nans = np.array([0x7F800001, 0xFF800001, 0x7FC00001, 0x7F801234], np.uint32)
    spread = RNG.standard_normal(20000) * 10.0 ** RNG.integers(-9, 6, 20000)
    return np.concatenate(
        [
            halves, -halves, mids, -mids, np.nextafter(mids, np.float32(np.inf)),
            np.nextafter(mids, np.float32(-np.inf)), payload_nans.view(np.float32),
            np.array([0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, -1e30, 1e-30], np.float32),
            spread.astype(np.float32),
        ]
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_half_round_is_the_cast_to_float16_bit_for_bit(dtype: type) -> None:
    with np.errstate(invalid="ignore"):  # widening signalling NaNs quiets them
        x = _edge_values().astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = half_round(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]
    assert half_round(np.array(1.00048828125, np.float32)).shape == ()  # 0-d stays 0-d


def _model(cast_from_double: bool = False) -> object:
    """Conv -> Add(Constant) -> Relu -> Mul(initializer) -> Reshape -> MatMul, in float16, with
    a float32 output cast from the float16 value and a float16 output."""
    w = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16)
    scale = RNG.standard_normal((1, 4, 1, 1)).astype(np.float16)
    m = (RNG.standard_normal((64, 5)) * 0.2).astype(np.float16)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "Constant", [], ["bias"],
            value=numpy_helper.from_array(np.array(0.1, np.float16)),
        ),
        helper.make_node("Add", ["c", "bias"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["s0"]),
        helper.make_node("Div", ["s0", "scale"], ["s1"]),
        helper.make_node("HardSigmoid", ["s1"], ["s2"]),
        helper.make_node(
            "BatchNormalization", ["s2", "bn_s", "bn_b", "bn_m", "bn_v"], ["s3"]
        ),
        helper.make_node("Mul", ["s3", "s0"], ["s"]),
        helper.make_node("Reshape", ["s", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
        helper.make_node("Cast", ["y"], ["y32"], to=F),
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", H, [2, 3, 4, 4])]
    if cast_from_double:  # a double input cast to float16 rounds once, from double
        nodes[0:0] = [helper.make_node("Cast", ["xd"], ["x"], to=H)]
        inputs = [helper.make_tensor_value_info("xd", D, [2, 3, 4, 4])]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(scale, "scale"),
        numpy_helper.from_array(m, "m"),
        numpy_helper.from_array(np.array([2, 64], np.int64), "flat"),
        *(
            numpy_helper.from_array((RNG.random(4) + 0.5).astype(np.float16), f"bn_{p}")
            for p in "sbmv"
        ),
    ]
    outputs = [
        helper.make_tensor_value_info("y", H, None),
        helper.make_tensor_value_info("y32", F, None),
    ]
    graph = helper.make_graph(nodes, "half", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _sessions(
    model: object, kernels: str = "native"
) -> tuple[onnxflow.InferenceSession, onnxflow.InferenceSession]:
    wide = onnxflow.SessionOptions(kernels=kernels)
    plain = onnxflow.SessionOptions(optimize=False, kernels=kernels)
    return onnxflow.InferenceSession(model, wide), onnxflow.InferenceSession(model, plain)


@pytest.mark.parametrize("cast_from_double", [False, True])
def test_a_float16_model_gives_its_op_by_op_float16_results(cast_from_double: bool) -> None:
    wide, plain = _sessions(_model(cast_from_double))
    ops = [info.op_type for info in wide.plan.infos]
    assert "HalfRound" in ops and "HalfRound" not in [i.op_type for i in plain.plan.infos]
    after = [ops[k + 1] for k, op in enumerate(ops[:-1]) if op in ("Relu", "Reshape")]
    assert "HalfRound" not in after  # selecting ops keep float16 values: no rounding
    x = (RNG.standard_normal((2, 3, 4, 4)) * 3).astype(np.float16)
    feeds = {"xd": x.astype(np.float64) + 1e-4} if cast_from_double else {"x": x}
    got, want = wide.run(None, feeds), plain.run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert got[0].dtype == np.float16 and got[1].dtype == np.float32


def test_float16_branches_and_loop_states_are_rounded_too() -> None:
    step = np.array(0.1, np.float16)
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v", "k"], ["vk"]),
            helper.make_node("Add", ["vk", "d"], ["v_out"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", H, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", H, None),
            helper.make_tensor_value_info("vk", H, None),
        ],
        [
            numpy_helper.from_array(np.array(1.37, np.float16), "k"),
            numpy_helper.from_array(step, "d"),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "v0"], ["v", "trail"], body=body)],
        "g",
        [
            helper.make_tensor_value_info("M", I64, []),
            helper.make_tensor_value_info("v0", H, [3]),
        ],
        [
            helper.make_tensor_value_info("v", H, None),
            helper.make_tensor_value_info("trail", H, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    wide, plain = _sessions(model)
    feeds = {"M": np.array(7, np.int64), "v0": np.array([0.3, -2.1, 5.5], np.float16)}
    for g, w in zip(wide.run(None, feeds), plain.run(None, feeds)):
        assert g.dtype == np.float16
        np.testing.assert_array_equal(g, w)


def test_models_without_float16_and_passed_through_outputs_are_left_alone() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", H, [2])],
        [helper.make_tensor_value_info("y", H, None), helper.make_tensor_value_info("x", H, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    sess = onnxflow.InferenceSession(model)  # x is both input and output: no float32 copy
    assert [i.op_type for i in sess.plan.infos] == ["Relu"]
    x = np.array([-1.5, 2.25], np.float16)
    y, echo = sess.run(None, {"x": x})
    assert y.dtype == echo.dtype == np.float16
    np.testing.assert_array_equal(y, [0, 2.25])
    float_model = _model()
    for t in float_model.graph.initializer:
        if t.data_type == H:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    assert "HalfRound" not in [
        i.op_type for i in onnxflow.InferenceSession(_as_float(float_model)).plan.infos
    ]


def _as_float(model: object) -> object:
    """``model`` with every float16 type and tensor made float32."""
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.type.tensor_type.elem_type == H:
            vi.type.tensor_type.elem_type = F
    for node in model.graph.node:
        for a in node.attribute:
            if a.type == a.TENSOR and a.t.data_type == H:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32)))
    return model


@pytest.mark.parametrize("op", ["HardSigmoid", "HardSwish"])
def test_float16_hard_activations_compute_in_float32_and_round_once(op: str) -> None:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", H, [4096])],
        [helper.make_tensor_value_info("y", H, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    x = (RNG.standard_normal(4096) * 4).astype(np.float16)
    w = x.astype(np.float32)
    gate = np.clip(w * np.float32(0.2 if op == "HardSigmoid" else 1 / 6) + np.float32(0.5), 0, 1)
    want = (gate if op == "HardSigmoid" else w * gate).astype(np.float16)
    for sess in _sessions(model):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_intermediate_values_of_a_float16_model_are_float16_under_their_own_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the float16 tables pass hides the values inside a table, as any fusion hides its own
    monkeypatch.setattr(half_tables, "MIN_NODES", 1 << 20)
    wide, plain = _sessions(_model())
    x = (RNG.standard_normal((2, 3, 4, 4)) * 3).astype(np.float16)
    got = wide.run(None, {"x": x}, intermediate=True)
    want = plain.run(None, {"x": x}, intermediate=True)
    assert set(got) == set(want)  # no value the pass made, none of the model's lost
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value)


def _cancelling_model(cast_between: bool) -> object:
    """y = (x + 1000) - 1000 and z = (x * x) / x in float16; with ``cast_between``, the sum
    is cast to float16 explicitly before the subtraction."""
    c = numpy_helper.from_array(np.array(1000, np.float16), "c")
    nodes = [helper.make_node("Add", ["x", "c"], ["a"])]
    if cast_between:
        nodes.append(helper.make_node("Cast", ["a"], ["a16"], to=H))
    nodes += [
        helper.make_node("Sub", ["a16" if cast_between else "a", "c"], ["y"]),
        helper.make_node("Mul", ["x", "x"], ["m"]),
        helper.make_node("Div", ["m", "x"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cancel",
        [helper.make_tensor_value_info("x", H, [5])],
        [helper.make_tensor_value_info(n, H, [5]) for n in ("y", "z")],
        [c],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cast_between", [False, True])
def test_float16_rounding_outputs_computes_in_float32_between_ops(cast_between: bool) -> None:
    """``float16_rounding="outputs"``: no rounding between ops (onnxruntime's CPU results: x
    comes back from x + 1000 - 1000), except where the model casts to float16; the default
    rounds every op's result, as the types say."""
    model = _cancelling_model(cast_between)
    x = np.array([0.1, 0.3, 1.7, 3.14159, -2.5], np.float16)
    x32 = x.astype(np.float32)
    outputs = onnxflow.InferenceSession(
        model, onnxflow.SessionOptions(float16_rounding="outputs")
    ).run(None, {"x": x})
    each_op = onnxflow.InferenceSession(model).run(None, {"x": x})
    added = x32 + 1000
    if cast_between:
        added = added.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(outputs[0], (added - 1000).astype(np.float16))
    np.testing.assert_array_equal(outputs[1], (x32 * x32 / x32).astype(np.float16))
    spec = ((x + np.float16(1000)) - np.float16(1000)).astype(np.float16)
    np.testing.assert_array_equal(each_op[0], spec)
    assert all(o.dtype == np.float16 for o in [*outputs, *each_op])
    if not cast_between:
        assert not np.array_equal(outputs[0], each_op[0])  # the two modes differ here


def test_float16_rounding_must_be_a_known_mode() -> None:
    with pytest.raises(onnxflow.OnnxflowError, match="float16_rounding"):
        onnxflow.SessionOptions(float16_rounding="never")


@pytest.mark.parametrize("over", [False, True])
def test_half_round_of_normal_range_values_is_the_cast_bit_for_bit(over: bool) -> None:
    """Arrays with no value outside float16's normal range take Veltkamp's split: every tie,
    near-tie and kept-bit pattern of every exponent, both signs, rounds as the cast does."""
    exps = np.arange(113, 143, dtype=np.uint32)  # 2**-14 .. 2**15
    mant = np.arange(1 << 10, dtype=np.uint32) << np.uint32(13)
    lows = np.array([0, 1, 0x0800, 0x0FFF, 0x1000, 0x1001, 0x17FF, 0x1FFF], np.uint32)
    bits = ((exps[:, None, None] << np.uint32(23)) | mant[None, :, None] | lows).ravel()
    x = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    x = np.concatenate([x[np.abs(x) < 65520], np.zeros(3, np.float32), [np.float32(-0.0)]])
    want = x.astype(np.float16).astype(np.float32)
    got = half_round(x.copy(), over=over)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("over", [False, True])
def test_half_round_below_float16s_normal_range_is_the_cast_bit_for_bit(over: bool) -> None:
    """Arrays with values below 2**-14 but none past 65504 take Veltkamp's split and fix their
    small values by adding and subtracting 0.75: every float16 subnormal, every midpoint
    between two (the ties), their float32 neighbours, float32 subnormals and signed zeros
    round as the cast does."""
    halves = np.arange(0, 0x0401, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = (halves[:-1] + halves[1:]) / 2
    steps = np.concatenate([halves, mids]).astype(np.float32)
    near = [np.nextafter(steps, np.float32(np.inf)), np.nextafter(steps, np.float32(-np.inf))]
    f32_subnormals = np.array([1e-45, 3e-39, 1.1e-38, 6e-8, 2.9e-8, 3e-8], np.float32)
    normal = RNG.standard_normal(500).astype(np.float32) * 100
    x = np.concatenate([steps, *near, f32_subnormals, normal, [np.float32(-0.0)]])
    x = np.concatenate([x, -x])
    want = x.astype(np.float16).astype(np.float32)
    got = half_round(x.copy(), over=over)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(
    ("bias", "axis", "stats"), [(True, -1, False), (False, -1, False), (True, 1, True)]
)
def test_float16_layer_norm_rounds_as_its_function_body(bias: bool, axis: int, stats: bool) -> None:
    """A float16 LayerNormalization computes in float32 with the three roundings of its body
    (normalized, times scale, plus bias), the bits it gives computed in float16 as written; its
    Mean and InvStdDev outputs stay float32."""
    shape = (2, 6, 40)
    inits = [
        numpy_helper.from_array((RNG.standard_normal(shape[axis:]) * 2).astype(np.float16), "s")
    ]
    if bias:
        inits.append(
            numpy_helper.from_array(RNG.standard_normal(shape[axis:]).astype(np.float16), "b")
        )
    outs = ["y", "mean", "inv"] if stats else ["y"]
    node = helper.make_node(
        "LayerNormalization", ["x", "s", *(["b"] if bias else [])], outs, axis=axis
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", H, shape)],
        [helper.make_tensor_value_info(o, H if o == "y" else F, None) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # the NumPy forms: the compiled LayerNormalization the float32 path takes otherwise has
    # its own bound (tests/native/test_native_math.py), and its float32 Mean may differ
    wide, plain = _sessions(model, kernels="numpy")
    assert "HalfRound" in [i.op_type for i in wide.plan.infos]
    assert "Cast" not in [i.op_type for i in wide.plan.infos][1:-1]  # no float16 narrowing
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float16)
    for got, want in zip(wide.run(None, {"x": x}), plain.run(None, {"x": x}), strict=True):
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    ("shape", "axis", "opset"),
    [((2, 4, 33, 200), -1, 17), ((3, 130), -1, 18), ((5, 7, 9), 0, 13), ((2, 6, 64, 64), -1, 21)],
)
def test_float16_softmax_rounds_each_step(shape: tuple[int, ...], axis: int, opset: int) -> None:
    """A float16 Softmax computes in float32 with each step of its float16 computation rounded:
    the bits it gives computed in float16 as written."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
        "g",
        [helper.make_tensor_value_info("x", H, shape)],
        [helper.make_tensor_value_info("y", H, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    wide, plain = _sessions(model)
    narrowed = "Cast" in [i.op_type for i in wide.plan.infos][1:-1]
    assert narrowed == (axis != -1)  # another axis: computed in float16 as written
    for scale in (1, 4, 30):
        x = (RNG.standard_normal(shape) * scale).astype(np.float16)
        x.flat[:3] = [-np.inf, 65504, np.nan]
        got, want = wide.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
        assert got.dtype == want.dtype == np.float16
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("to", [F, D, TensorProto.BOOL, TensorProto.INT32, TensorProto.STRING])
def test_float16_shape_and_exact_casts_read_the_float32_value(to: int) -> None:
    """Shape reads no values and a Cast to float32, float64 or bool gives the same result from
    the float32 copy: neither gets a float16 copy made first; other casts still do."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Shape", ["r"], ["s"]),
            helper.make_node("Cast", ["r"], ["c"], to=to),
        ],
        "g",
        [helper.make_tensor_value_info("x", H, [3, 50])],
        [
            helper.make_tensor_value_info("s", I64, None),
            helper.make_tensor_value_info("c", to, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    wide, plain = _sessions(model)
    casts = [i.op_type for i in wide.plan.infos].count("Cast")
    assert casts == (2 if to in (F, D, TensorProto.BOOL) else 3)  # entry, the node (+ narrowing)
    x = (RNG.standard_normal((3, 50)) * 300).astype(np.float16)
    x.flat[:4] = [0, -0.0, np.inf, np.nan]
    for got, want in zip(wide.run(None, {"x": x}), plain.run(None, {"x": x}), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
