"""Scan 8 against the spec oracle on generated configurations, plus named Scan cases.

Scan 9..25 meets its oracle on generated configurations in
tests/robustness/test_control_flow_properties.py (Hypothesis: states, scan inputs, axes,
directions, dtypes, lengths including 0).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.values import elem_type_of
from oracles import scan8_oracle

ELEM = (2, 3)
DTYPES = [np.float32, np.float64, np.int64, np.int32]


def _vi(name: str, dtype: type, shape: list | None) -> object:
    return helper.make_tensor_value_info(name, elem_type_of(np.dtype(dtype)), shape)


def _body(n: int, m: int, k: int, dtype: type):
    """Body graph and its Python twin: s_j' = s_j + x_(j%m); y_k = x_(k%m) * (k+2) + (s_0|x_0)."""
    nodes, inits = [], []
    for j in range(n):
        nodes.append(helper.make_node("Add", [f"s{j}", f"x{j % m}"], [f"s{j}_out"]))
    for q in range(k):
        c = numpy_helper.from_array(np.array(q + 2, dtype=dtype), f"c{q}")
        inits.append(c)
        nodes.append(helper.make_node("Mul", [f"x{q % m}", f"c{q}"], [f"t{q}"]))
        nodes.append(helper.make_node("Add", [f"t{q}", "s0" if n else "x0"], [f"y{q}"]))
    graph = helper.make_graph(
        nodes,
        "body",
        [_vi(f"s{j}", dtype, list(ELEM)) for j in range(n)]
        + [_vi(f"x{i}", dtype, list(ELEM)) for i in range(m)],
        [_vi(f"s{j}_out", dtype, list(ELEM)) for j in range(n)]
        + [_vi(f"y{q}", dtype, list(ELEM)) for q in range(k)],
        inits,
    )

    def python_body(*args):
        states, xs = args[:n], args[n:]
        outs = [states[j] + xs[j % m] for j in range(n)]
        base = states[0] if n else xs[0]
        outs += [xs[q % m] * dtype(q + 2) + base for q in range(k)]
        return outs

    return graph, python_body


@pytest.mark.parametrize("seed", range(24))
def test_scan8_matches_oracle(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n, m, k = int(rng.integers(0, 3)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
    dtype = DTYPES[seed % len(DTYPES)]
    batch, max_len = int(rng.integers(1, 4)), int(rng.choice([0, 1, 4]))
    lens = None if seed % 3 == 0 else [int(v) for v in rng.integers(0, max_len + 1, size=batch)]
    dirs = [int(rng.integers(0, 2)) for _ in range(m)]
    body, python_body = _body(n, m, k, dtype)
    inits = [rng.integers(-5, 6, size=(batch, *ELEM)).astype(dtype) for _ in range(n)]
    xs = [rng.integers(-5, 6, size=(batch, max_len, *ELEM)).astype(dtype) for _ in range(m)]
    node = helper.make_node(
        "Scan",
        ["lens" if lens is not None else ""]
        + [f"init{j}" for j in range(n)]
        + [f"X{i}" for i in range(m)],
        [f"final{j}" for j in range(n)] + [f"Y{q}" for q in range(k)],
        body=body,
        num_scan_inputs=m,
        directions=dirs,
    )
    inputs = [_vi("lens", np.int64, [batch])] if lens is not None else []
    graph = helper.make_graph(
        [node],
        "scan8",
        inputs
        + [_vi(f"init{j}", dtype, None) for j in range(n)]
        + [_vi(f"X{i}", dtype, None) for i in range(m)],
        [_vi(f"final{j}", dtype, None) for j in range(n)]
        + [_vi(f"Y{q}", dtype, None) for q in range(k)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 3
    feeds = {f"init{j}": v for j, v in enumerate(inits)} | {f"X{i}": v for i, v in enumerate(xs)}
    if lens is not None:
        feeds["lens"] = np.array(lens, dtype=np.int64)
    got = onnxflow.InferenceSession(model).run(None, feeds)
    want = scan8_oracle(python_body, n, lens, inits, xs, dirs)
    if max_len == 0 or (lens is not None and max(lens) == 0):
        want = want[:n] + [np.zeros((batch, max_len, *ELEM), dtype=dtype)] * k
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _identity_scan(elem_type: int, opset: int = 16):
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["s_out"]),
            helper.make_node("Identity", ["x"], ["y"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("s", elem_type, [2]),
            helper.make_tensor_value_info("x", elem_type, [2]),
        ],
        [
            helper.make_tensor_value_info("s_out", elem_type, [2]),
            helper.make_tensor_value_info("y", elem_type, [2]),
        ],
    )
    node = helper.make_node(
        "Scan", ["s0", "X"], ["s", "Y"], body=body, num_scan_inputs=1, scan_output_directions=[1]
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("s0", elem_type, [2]),
            helper.make_tensor_value_info("X", elem_type, [None, 2]),
        ],
        [
            helper.make_tensor_value_info("s", elem_type, [2]),
            helper.make_tensor_value_info("Y", elem_type, [None, 2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("elem_type", "values"),
    [
        (TensorProto.STRING, np.array([["a", "b"], ["c", "d"], ["e", "f"]], dtype=object)),
        (TensorProto.BOOL, np.array([[True, False], [False, False], [True, True]])),
    ],
)
def test_scan_string_and_bool_elements(elem_type: int, values: np.ndarray) -> None:
    sess = onnxflow.InferenceSession(_identity_scan(elem_type))
    s, y = sess.run(None, {"s0": values[0], "X": values})
    np.testing.assert_array_equal(s, values[-1])
    np.testing.assert_array_equal(y, values[::-1])


def test_zero_length_sequence_keeps_states_and_types() -> None:
    sess = onnxflow.InferenceSession(_identity_scan(TensorProto.FLOAT))
    init = np.array([1.0, 2.0], dtype=np.float32)
    s, y = sess.run(None, {"s0": init, "X": np.zeros((0, 2), np.float32)})
    np.testing.assert_array_equal(s, init)
    assert y.shape == (0, 2) and y.dtype == np.float32


def test_scan_inputs_of_different_lengths_is_an_error() -> None:
    body, _ = _body(0, 2, 1, np.float32)
    node = helper.make_node("Scan", ["A", "B"], ["Y"], body=body, num_scan_inputs=2)
    graph = helper.make_graph(
        [node],
        "g",
        [_vi("A", np.float32, None), _vi("B", np.float32, None)],
        [_vi("Y", np.float32, None)],
    )
    sess = onnxflow.InferenceSession(helper.make_model(graph))
    with pytest.raises(onnxflow.RuntimeFailure, match=r"sequence length 3.*has 2"):
        sess.run(None, {"A": np.zeros((2, 2, 3), np.float32), "B": np.zeros((3, 2, 3), np.float32)})


@pytest.mark.parametrize("m", [0, 3])
def test_num_scan_inputs_out_of_range_fails_at_load(m: int) -> None:
    body, _ = _body(1, 1, 0, np.float32)
    node = helper.make_node("Scan", ["S", "A"], ["S2"], body=body, num_scan_inputs=m)
    graph = helper.make_graph(
        [node],
        "g",
        [_vi("S", np.float32, None), _vi("A", np.float32, None)],
        [_vi("S2", np.float32, None)],
    )
    with pytest.raises(onnxflow.ValidationError, match="num_scan_inputs"):
        onnxflow.InferenceSession(helper.make_model(graph), check=False)


def test_body_arity_mismatch_names_expected_and_found() -> None:
    body, _ = _body(1, 1, 0, np.float32)  # 2 body inputs
    node = helper.make_node("Scan", ["S", "T", "A"], ["S2", "T2"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [node],
        "g",
        [_vi(n, np.float32, None) for n in "STA"],
        [_vi("S2", np.float32, None), _vi("T2", np.float32, None)],
    )
    with pytest.raises(onnxflow.ValidationError, match="body has 2 inputs, expected 2 states"):
        onnxflow.InferenceSession(helper.make_model(graph), check=False)


@pytest.mark.parametrize(
    ("opset", "attribute", "values"),
    [
        (11, "scan_input_directions", [0, 2]),
        (11, "scan_input_directions", [-1, 0]),
        (11, "scan_output_directions", [0, 0, 1, 2]),
        (8, "directions", [1, 3]),
    ],
)
def test_a_direction_other_than_0_or_1_fails_at_load(
    opset: int, attribute: str, values: list[int]
) -> None:
    body, _ = _body(1, 2, len(values) if attribute == "scan_output_directions" else 1, np.float32)
    k = len(body.output) - 1
    inputs = ["", "S", "A", "B"] if opset == 8 else ["S", "A", "B"]
    node = helper.make_node(
        "Scan", inputs, ["S2", *(f"Y{q}" for q in range(k))], body=body, num_scan_inputs=2,
        **{attribute: values},
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [_vi(n, np.float32, None) for n in "SAB"],
        [_vi("S2", np.float32, None), *(_vi(f"Y{q}", np.float32, None) for q in range(k))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    index = next(i for i, v in enumerate(values) if v not in (0, 1))
    expected = rf"{attribute}\[{index}\] is {values[index]}, expected 0 \(forward\) or 1"
    with pytest.raises(onnxflow.ValidationError, match=expected):
        onnxflow.InferenceSession(model, check=False)
