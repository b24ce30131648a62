"""Hypothesis: random Scan configurations and random Loop (M, cond) modes against the spec oracles.

Examples are bounded and derandomized, so the suite is fast and every run checks the same cases.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_builders import I64, B, const, model, vi
from onnx import TensorProto, helper

import onnxflow
from oracles import loop_oracle, scan_oracle

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]
SCAN_OPSETS = [9, 11, 16, 19, 21, 23, 24, 25]
LOOP_OPSETS = [9, 11, 13, 16, 19, 21, 23, 24, 25]
BOUNDED = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def scan_configs(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 3))
    m = draw(st.integers(1, 3))
    k = draw(st.integers(0 if n else 1, 3))
    elem = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    rank = len(elem) + 1
    axis = st.integers(-rank, rank - 1)
    return {
        "n": n,
        "m": m,
        "k": k,
        "elem": elem,
        "length": draw(st.sampled_from([0, 1, 2, 5])),
        "dtype": draw(st.sampled_from(DTYPES)),
        "in_axes": draw(st.lists(axis, min_size=m, max_size=m)),
        "in_dirs": draw(st.lists(st.integers(0, 1), min_size=m, max_size=m)),
        "out_axes": draw(st.lists(axis, min_size=k, max_size=k)),
        "out_dirs": draw(st.lists(st.integers(0, 1), min_size=k, max_size=k)),
        "opset": draw(st.sampled_from(SCAN_OPSETS)),
        "seed": draw(st.integers(0, 2**16)),
    }


def scan_body(n: int, m: int, k: int, elem: tuple[int, ...], dtype: type):
    """Body graph and its Python twin: s_j' = s_j + x_(j%m); y_q = x_(q%m) * c_q - base_q,
    where base_q is s'_(q%n), or x_0 without states, and c_q = q + 2."""
    nodes, inits = [], []
    for j in range(n):
        nodes.append(helper.make_node("Add", [f"s{j}", f"x{j % m}"], [f"s{j}_out"]))
    for q in range(k):
        inits.append(const(f"c{q}", np.array(q + 2, dtype=dtype)))
        base = f"s{q % n}_out" if n else "x0"
        nodes.append(helper.make_node("Mul", [f"x{q % m}", f"c{q}"], [f"t{q}"]))
        nodes.append(helper.make_node("Sub", [f"t{q}", base], [f"y{q}"]))
    graph = helper.make_graph(
        nodes,
        "body",
        [vi(f"s{j}", dtype, elem) for j in range(n)] + [vi(f"x{i}", dtype, elem) for i in range(m)],
        [vi(f"s{j}_out", dtype, elem) for j in range(n)]
        + [vi(f"y{q}", dtype, elem) for q in range(k)],
        inits,
    )

    def python_body(*args):
        states, xs = args[:n], args[n:]
        new = [states[j] + xs[j % m] for j in range(n)]
        ys = [xs[q % m] * dtype(q + 2) - (new[q % n] if n else xs[0]) for q in range(k)]
        return new + ys

    return graph, python_body


@BOUNDED
@given(scan_configs())
def test_scan_matches_the_oracle(c: dict) -> None:
    n, m, k, elem, dtype = c["n"], c["m"], c["k"], c["elem"], c["dtype"]
    rng = np.random.default_rng(c["seed"])
    body, python_body = scan_body(n, m, k, elem, dtype)
    inits = [rng.integers(-4, 5, size=elem).astype(dtype) for _ in range(n)]
    xs = []
    for axis in c["in_axes"]:
        shape = list(elem)
        shape.insert(axis % (len(elem) + 1), c["length"])
        xs.append(rng.integers(-4, 5, size=shape).astype(dtype))
    attrs = {"scan_input_axes": c["in_axes"], "scan_input_directions": c["in_dirs"]}
    if k:
        attrs |= {"scan_output_axes": c["out_axes"], "scan_output_directions": c["out_dirs"]}
    node = helper.make_node(
        "Scan",
        [f"init{j}" for j in range(n)] + [f"X{i}" for i in range(m)],
        [f"final{j}" for j in range(n)] + [f"Y{q}" for q in range(k)],
        body=body,
        num_scan_inputs=m,
        **attrs,
    )
    sess = onnxflow.InferenceSession(
        model(
            [node],
            [vi(f"init{j}", dtype) for j in range(n)] + [vi(f"X{i}", dtype) for i in range(m)],
            [vi(f"final{j}", dtype) for j in range(n)] + [vi(f"Y{q}", dtype) for q in range(k)],
            opset=c["opset"],
        )
    )
    feeds = {f"init{j}": v for j, v in enumerate(inits)} | {f"X{i}": v for i, v in enumerate(xs)}
    got = sess.run(None, feeds)
    want = scan_oracle(
        python_body,
        n,
        inits,
        xs,
        c["in_axes"],
        c["in_dirs"],
        c["out_axes"],
        c["out_dirs"],
        [(elem, np.dtype(dtype))] * k,
    )
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@st.composite
def loop_configs(draw: st.DrawFn) -> dict:
    trip = draw(st.none() | st.integers(0, 6))
    cond = draw(st.booleans()) if trip is None else draw(st.none() | st.booleans())
    opset = draw(st.sampled_from(LOOP_OPSETS))
    return {
        "trip": trip,
        "cond": cond,
        "limit": draw(st.integers(-1, 7)),
        # Loop 1 needs a loop-carried value; every Loop needs an output
        "n": (n := draw(st.integers(1 if opset < 11 else 0, 2))),
        "k": draw(st.integers(0 if n else 1, 2)),
        "elem": tuple(draw(st.lists(st.integers(1, 3), max_size=2))),
        "dtype": draw(st.sampled_from(DTYPES)),
        "opset": opset,
        "fed": draw(st.booleans()),  # M and cond as fed inputs rather than initializers
        "seed": draw(st.integers(0, 2**16)),
    }


def loop_body(n: int, k: int, elem: tuple[int, ...], dtype: type):
    """cond' = i < limit (an outer value); v_j' = v_j + i; y_q = i + (q + 1)."""
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [
        helper.make_node("Less", ["i", "limit"], ["cond_out"]),
        helper.make_node("Cast", ["i"], ["ic"], to=to),
    ]
    nodes += [helper.make_node("Add", [f"v{j}", "ic"], [f"v{j}_out"]) for j in range(n)]
    nodes += [helper.make_node("Add", ["ic", f"c{q}"], [f"y{q}"]) for q in range(k)]
    graph = helper.make_graph(
        nodes,
        "body",
        [vi("i", I64, []), vi("cond_in", B, [])] + [vi(f"v{j}", dtype, elem) for j in range(n)],
        [vi("cond_out", B, [])]
        + [vi(f"v{j}_out", dtype, elem) for j in range(n)]
        + [vi(f"y{q}", dtype, elem) for q in range(k)],
        [const(f"c{q}", np.full(elem, q + 1, dtype)) for q in range(k)],
    )
    return graph


@BOUNDED
@given(loop_configs())
def test_loop_matches_the_oracle(c: dict) -> None:
    trip, cond, n, k, elem, dtype = c["trip"], c["cond"], c["n"], c["k"], c["elem"], c["dtype"]
    rng = np.random.default_rng(c["seed"])
    inits = [rng.integers(-4, 5, size=elem).astype(dtype) for _ in range(n)]
    control = {}
    if trip is not None:
        control["M"] = np.array(trip, np.int64)
    if cond is not None:
        control["cond"] = np.array(cond)
    node = helper.make_node(
        "Loop",
        ["M" if trip is not None else "", "cond" if cond is not None else ""]
        + [f"v{j}_init" for j in range(n)],
        [f"v{j}_final" for j in range(n)] + [f"y{q}_all" for q in range(k)],
        body=loop_body(n, k, elem, dtype),
    )
    control_types = {"M": (I64, []), "cond": (TensorProto.BOOL, [])}
    fed = [vi(name, *control_types[name]) for name in control] if c["fed"] else []
    stored = [] if c["fed"] else [const(name, v) for name, v in control.items()]
    sess = onnxflow.InferenceSession(
        model(
            [node],
            fed + [vi(f"v{j}_init", dtype, elem) for j in range(n)],
            [vi(f"v{j}_final", dtype, elem) for j in range(n)]
            + [vi(f"y{q}_all", dtype, None) for q in range(k)],
            [const("limit", np.int64(c["limit"])), *stored],
            opset=c["opset"],
        )
    )
    feeds = {f"v{j}_init": v for j, v in enumerate(inits)} | (control if c["fed"] else {})
    got = sess.run(None, feeds)

    def python_body(i, cond_in, *states):
        ic = dtype(i)
        return [
            np.bool_(i < c["limit"]),
            *(s + ic for s in states),
            *(ic + np.full(elem, q + 1, dtype) for q in range(k)),
        ]

    states, scans = loop_oracle(python_body, trip, cond, inits)
    want = list(states)
    for q in range(k):
        want.append(np.stack(scans[q]) if scans else np.empty((0, *elem), dtype))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype) and g.shape == np.shape(w)
        np.testing.assert_array_equal(g, w)
