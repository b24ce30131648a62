"""A loop whose carried values grow cannot outgrow memory: it fails with a ResourceError naming
the loop, the value and the bytes, at the first check where the growth cannot fit (see
onnxflow.runtime.growth), instead of running until an allocation fails somewhere."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from model_builders import I64, B, F, const, model, vi
from onnx import ModelProto, helper

import onnxflow
from onnxflow.runtime import growth

ROW = 1 << 18  # float32 elements appended per iteration: 1 MiB


def _seq_vi(name: str) -> object:
    return helper.make_tensor_sequence_value_info(name, F, None)


def _sequence_loop(trips: int | None, with_cond: bool, keep_size: bool = False) -> ModelProto:
    """The probe of issue 31: a Loop appending a fresh tensor to a loop-carried sequence every
    iteration, ConcatFromSequence after it. ``keep_size``: each iteration erases one element
    again (a sequence that does not grow)."""
    nodes = [
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("Add", ["x", "zero"], ["row"]),  # a new array each iteration
        helper.make_node("SequenceInsert", ["s", "row"], ["grown" if keep_size else "s_out"]),
    ]
    if keep_size:
        nodes.append(helper.make_node("SequenceErase", ["grown"], ["s_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [vi("i", I64, []), vi("c", B, []), _seq_vi("s")],
        [vi("c_out", B, []), _seq_vi("s_out")],
        [const("zero", np.float32(0))],
    )
    loop_inputs = ["M" if trips is not None else "", "C" if with_cond else "", "s0"]
    graph_nodes = [
        helper.make_node("SequenceConstruct", ["x"], ["s0"]),
        helper.make_node("Loop", loop_inputs, ["s_final"], name="grow", body=body),
        helper.make_node("ConcatFromSequence", ["s_final"], ["y"], axis=0),
    ]
    inits = [const("C", np.bool_(True))]
    if trips is not None:
        inits.append(const("M", np.int64(trips)))
    return model(graph_nodes, [vi("x", F, [ROW])], [vi("y", F, None)], inits)


def _tensor_loop(trips: int) -> ModelProto:
    """A Loop concatenating a row to a loop-carried tensor every iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Concat", ["t", "x"], ["t_out"], axis=0),
        ],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("t", F, None)],
        [vi("c_out", B, []), vi("t_out", F, None)],
    )
    node = helper.make_node("Loop", ["M", "", "x"], ["t_final"], name="widen", body=body)
    return model([node], [vi("x", F, [ROW])], [vi("t_final", F, None)], [const("M", trips)])


def _run(m: ModelProto) -> list[np.ndarray]:
    return onnxflow.InferenceSession(m).run(None, {"x": np.ones(ROW, np.float32)})


def test_a_sequence_that_cannot_fit_fails_at_the_first_iteration() -> None:
    """10**9 iterations of 1 MiB each: refused after the first, not when memory runs out."""
    with pytest.raises(onnxflow.ResourceError) as info:
        _run(_sequence_loop(10**9, with_cond=False))
    message = str(info.value)
    assert "Loop 'grow'" in message and "loop-carried value 's_out'" in message
    assert f"grows by {4 * ROW} bytes per iteration" in message
    assert f"at iteration 1 of {10**9}" in message
    assert f"need {4 * ROW * (10**9 - 1)} bytes more" in message


def test_an_observed_run_steps_through_the_loop_and_is_refused_the_same_way() -> None:
    session = onnxflow.InferenceSession(_sequence_loop(10**9, with_cond=False))
    with pytest.raises(onnxflow.ResourceError, match=f"at iteration 1 of {10**9}"):
        session.run(None, {"x": np.ones(ROW, np.float32)}, intermediate=True)


def test_a_tensor_that_grows_is_refused_the_same_way() -> None:
    with pytest.raises(onnxflow.ResourceError, match="Loop 'widen'.*'t_out' grows by 1048576"):
        _run(_tensor_loop(10**9))


def test_a_growing_loop_that_fits_runs() -> None:
    (y,) = _run(_sequence_loop(5, with_cond=False))
    assert y.shape == (6 * ROW,)


def test_a_loop_with_only_a_condition_stops_once_its_values_exceed_the_memory_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No trip count: nothing to project, so the loop is stopped once what it carries is more
    than the memory left (here a pretend 8 MiB)."""
    monkeypatch.setattr(growth, "WATCH_BYTES", 0)
    monkeypatch.setattr(growth, "available_memory", lambda: 8 * 4 * ROW)
    with pytest.raises(onnxflow.ResourceError) as info:
        _run(_sequence_loop(None, with_cond=True))
    message = str(info.value)
    assert "Loop 'grow'" in message and "'s_out' has grown to" in message
    assert "by iteration 8 " in message  # 9 elements of 1 MiB: over 8 MiB
    assert "no known number of iterations" in message


def test_a_trip_count_with_a_condition_is_only_an_upper_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """M = 10**9 with a condition: the condition may end the loop first, so the values are
    measured, not projected; 5 iterations under 8 MiB run."""
    monkeypatch.setattr(growth, "WATCH_BYTES", 0)
    monkeypatch.setattr(growth, "available_memory", lambda: 8 * 4 * ROW)
    m = _sequence_loop(10**9, with_cond=True)
    body = m.graph.node[1].attribute[0].g
    body.node[0].CopyFrom(helper.make_node("Less", ["i", "four"], ["c_out"]))
    body.initializer.append(const("four", np.int64(4)))
    (y,) = _run(m)
    assert y.shape == (6 * ROW,)


def test_values_that_keep_their_size_are_looked_at_rarely(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sequence that does not grow over 5000 iterations: checked after iteration 1, then
    with gaps of 2, 4, 8... iterations up to 1024, never refused, whatever the memory."""
    calls = []
    check = growth.Growth.check
    monkeypatch.setattr(
        growth.Growth, "check", lambda self, i, s: calls.append(i) or check(self, i, s)
    )
    monkeypatch.setattr(growth, "WATCH_BYTES", 0)
    monkeypatch.setattr(growth, "available_memory", lambda: 0)
    (y,) = _run(_sequence_loop(5000, with_cond=False, keep_size=True))
    assert y.shape == (ROW,)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert calls[0] == 1 and gaps == [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024, 1024]


def test_address_space_limit_stops_a_growing_loop_in_a_subprocess(tmp_path: Path) -> None:
    """Under RLIMIT_AS (``ulimit -v``), a while loop appending 1 MiB per iteration fails as a
    ResourceError naming the loop, not as a MemoryError of whichever kernel allocated last;
    and available_memory() is at most what the limit leaves."""
    path = tmp_path / "grow.onnx"
    path.write_bytes(_sequence_loop(None, with_cond=True).SerializeToString())
    script = textwrap.dedent(f"""
        import resource, numpy as np, onnxflow
        from onnxflow.resources import available_memory
        session = onnxflow.InferenceSession({str(path)!r})
        with open("/proc/self/status") as f:
            used = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (used + (400 << 20), resource.RLIM_INFINITY))
        assert available_memory() <= 400 << 20, available_memory()
        try:
            session.run(None, {{"x": np.ones({ROW}, np.float32)}})
        except onnxflow.ResourceError as exc:
            print("ResourceError:", exc)
        except Exception as exc:
            print("other:", type(exc).__name__, exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ResourceError: Loop 'grow'"), done.stdout
    assert "'s_out' has grown to" in done.stdout
