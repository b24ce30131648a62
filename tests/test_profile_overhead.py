"""Profiles time the model, not the observing: ``Profiler(bodies=False)`` (what ``onnxflow
profile`` runs first) lets loop bodies run as compiled, so the spec RNN's Scan takes in a
profile what it takes in a run nobody watches. (Observed node by node, it took 18x longer,
all of it charged to the Scan.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import onnxflow
from onnxflow.cli import main
from onnxflow.observers import Profiler
from onnxflow.runtime.lower import lowered

RNN = Path(__file__).resolve().parents[1] / "examples" / "rnn_scan.onnx"


def _feeds(steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "X": rng.standard_normal((steps, 2, 4)).astype(np.float32),
        "H_0": np.zeros((2, 8), np.float32),
    }


def _cpu_seconds(call: Callable[[], object], repeats: int = 3) -> float:
    """The least CPU time of ``repeats`` calls (CPU time: a busy machine does not inflate it)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


def test_a_profiled_run_takes_the_compiled_loop() -> None:
    sess = onnxflow.InferenceSession(RNN)
    profiler = Profiler(bodies=False)
    sess.run(None, _feeds(50), observers=[profiler])
    bodies = [child for _, child in sess.plan.children]
    drivers = [key for body in bodies for key in lowered(body).variants if key.loop]
    assert drivers, "the Scan ran its body step by step, not as its generated loop"
    assert [(op, key, calls) for op, key, _, calls in profiler.top_nodes()] == [("Scan", "rnn", 1)]
    assert not [e for e in profiler.events if e["cat"] == "iteration"]


def test_profile_times_match_an_unobserved_run() -> None:
    sess = onnxflow.InferenceSession(RNN)
    feeds = _feeds(3000)
    sess.run(None, feeds)  # both made their generated functions before timing
    sess.run(None, feeds, observers=[Profiler(bodies=False)])
    plain = _cpu_seconds(lambda: sess.run(None, feeds))
    profiled = _cpu_seconds(lambda: sess.run(None, feeds, observers=[Profiler(bodies=False)]))
    observed = _cpu_seconds(lambda: sess.run(None, feeds, observers=[Profiler()]), repeats=1)
    assert profiled < 2 * plain + 0.005  # the same code runs: the ratio is about 1
    assert observed > 3 * profiled  # node by node it is another thing (about 18x here)


def test_profiled_node_times_add_up_to_the_run() -> None:
    sess = onnxflow.InferenceSession(RNN)
    feeds = _feeds(3000)
    sess.run(None, feeds)
    profiler = Profiler(bodies=False)
    start = time.perf_counter()
    sess.run(None, feeds, observers=[profiler])
    run = time.perf_counter() - start
    (_, _, seconds, calls), *_ = profiler.top_nodes()
    assert calls == 1 and seconds > 0
    # the Scan's wall time lies within the run's wall time (CPU time would not hold on a busy
    # machine, where a wall clock runs on while the process waits for a core)
    assert seconds <= run


def test_cli_profile_times_the_compiled_run_and_observes_bodies_on_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["profile", str(RNN), "--dim", "S=20", "--dim", "B=2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "runs after 2 warm-up:" in out and "unobserved" in out and "Scan rnn" in out
    assert "Add" not in out and "observed inside bodies" not in out
    assert main([*args, "--bodies"]) == 0
    out = capsys.readouterr().out
    assert "more runs, observed inside bodies" in out and "observing costs" in out
    assert "Add" in out and "Tanh" in out


def test_a_main_graph_profile_stays_so_beside_an_observer_of_bodies() -> None:
    from onnxflow.observers import Trace

    sess = onnxflow.InferenceSession(RNN)
    profiler, trace = Profiler(bodies=False), Trace()
    sess.run(None, _feeds(5), observers=[profiler, trace])
    assert trace.iterations_of("rnn") == list(range(5))  # the bodies were observed, for Trace
    assert [(op, calls) for op, _, _, calls in profiler.top_nodes()] == [("Scan", 1)]
    assert [e["name"] for e in profiler.events] == ["Scan rnn"]
