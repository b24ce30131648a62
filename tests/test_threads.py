"""One thread budget: ``intra_op_num_threads`` and the default bound of a loaded machine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import onnxflow
from onnxflow.cli.parser import _parser
from onnxflow.ort_api import session_api, threads
from onnxflow.spec_models import rnn_scan


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The 1-minute load average the session sees (set the list's item), on 2 CPUs."""
    value = [0.0]
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (value[0], 0.0, 0.0))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "_reading", [float("-inf"), 0])
    monkeypatch.setattr(threads, "LOAD_TTL", -1.0)  # read the load on every call
    monkeypatch.setattr(threads, "own_load", lambda now: 0.0)  # all of it from other processes
    monkeypatch.setattr(threads, "machine_busy", lambda: None)  # the load average's reading
    return value


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The BLAS bounds the runs asked for, in order."""
    asked: list[int] = []

    @contextmanager
    def limit(cls: type, n: int) -> Iterator[None]:
        asked.append(n)
        yield

    monkeypatch.setattr(threads.BlasThreads, "limit", classmethod(limit))
    return asked


def _session(n: int = 0) -> onnxflow.InferenceSession:
    options = onnxflow.SessionOptions()
    options.intra_op_num_threads = n
    return onnxflow.InferenceSession(rnn_scan(8, 4, 0), options)


FEEDS = {"H_0": np.zeros((1, 8), np.float32), "X": np.ones((3, 1, 4), np.float32)}


def test_the_default_gives_blas_the_idle_cores(load: list[float], monkeypatch) -> None:
    assert threads.default_threads() == 0  # all idle: BLAS's own default
    load[0] = 0.9
    assert threads.default_threads() == 0
    load[0] = 1.2
    assert threads.default_threads() == 1
    load[0] = 7.0
    assert threads.default_threads() == 1  # at least one
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    load[0] = 3.5
    assert threads.default_threads() == 5


def test_the_processs_own_load_leaves_its_cores_to_it(monkeypatch) -> None:
    """A process that kept one core busy for minutes makes a load of 1 on its own: the default
    does not count it, and gives BLAS the cores again; other work's load still counts."""
    clock, cpu = [1000.0], [0.0]
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(threads.time, "process_time", lambda: cpu[0])
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "_reading", [float("-inf"), 0])
    monkeypatch.setattr(threads, "_own", [clock[0], cpu[0], 0.0, None])
    monkeypatch.setattr(threads, "machine_busy", lambda: None)  # the load average's reading
    load = [1.0]
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    for _ in range(300):  # five minutes of readings, one core busy all the time
        clock[0] += 1.01
        cpu[0] += 1.01
        assert threads.default_threads() in (0, 1)
    assert threads.own_load(clock[0]) == pytest.approx(1.0, abs=0.01)
    assert threads.default_threads() == 0  # the load is its own: BLAS's default
    load[0] = 2.0  # and another process's busy core
    clock[0] += 1.01
    cpu[0] += 1.01
    assert threads.default_threads() == 1


def test_the_cores_other_processes_keep_busy_bound_blas(monkeypatch, tmp_path) -> None:
    """Where /proc/stat can be read, the machine's busy time less the process's own over the
    last second decides: the process alone busy leaves BLAS its default, another busy core
    one thread."""
    clock, cpu = [1000.0], [0.0]
    stat = tmp_path / "stat"
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(threads.time, "process_time", lambda: cpu[0])
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (9.0, 0.0, 0.0))  # not read
    monkeypatch.setattr(threads, "PROC_STAT", str(stat))
    monkeypatch.setattr(threads, "_TICKS", 100)
    monkeypatch.setattr(threads, "_reading", [float("-inf"), 0])

    def machine(busy_seconds: float) -> None:  # user, nice, system, idle, iowait, irq, ...
        ticks = int(busy_seconds * 100)
        stat.write_text(f"cpu  {ticks} 0 0 5000 0 0 0 0 0 0\ncpu0 0 0 0 0\n")

    machine(100.0)
    monkeypatch.setattr(threads, "_own", [clock[0], cpu[0], 0.0, threads.machine_busy()])
    clock[0] += 2.0
    cpu[0] += 2.0  # this process kept one core busy
    machine(102.0)  # and nothing else ran
    assert threads.default_threads() == 0
    clock[0] += 2.0
    cpu[0] += 2.0
    machine(106.0)  # another process kept the other core busy
    assert threads.default_threads() == 1
    stat.write_text("no numbers here\n")  # unreadable: the load average (9) less its own
    clock[0] += 2.0
    assert threads.default_threads() == 1


def test_a_small_model_never_pays_for_the_default_bound(load: list[float], bounds: list[int]):
    load[0] = 5.0
    sess = _session()
    for _ in range(4):
        sess.run(None, FEEDS)
    assert bounds == []  # no threadpoolctl call (and so no scan of the libraries)


def test_a_heavy_model_takes_one_blas_thread_while_loaded(
    load: list[float], bounds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_api, "HEAVY_RUN_NS", 0)  # every run counts as heavy
    load[0] = 5.0
    sess = _session()
    first = sess.run(None, FEEDS)
    sess.run(None, FEEDS)
    assert bounds == []  # the first two runs are never bounded by the default
    third = sess.run(None, FEEDS)
    assert bounds == [1]
    for a, b in zip(first, third, strict=True):
        np.testing.assert_array_equal(a, b)
    load[0] = 0.5
    sess.run(None, FEEDS)
    assert bounds == [1]  # quiet again: BLAS's own default


def test_an_explicit_count_bounds_every_run(load: list[float], bounds: list[int]) -> None:
    sess = _session(3)
    sess.run(None, FEEDS)
    sess.run(None, FEEDS)
    assert bounds == [3, 3]


@pytest.mark.parametrize("command", ["run", "profile", "code", "compare"])
def test_the_cli_commands_that_run_a_model_take_threads(command: str) -> None:
    assert _parser().parse_args([command, "m.onnx", "--threads", "2"]).threads == 2
    assert _parser().parse_args([command, "m.onnx"]).threads == 0
    with pytest.raises(SystemExit):
        _parser().parse_args([command, "m.onnx", "--threads", "-1"])


def test_the_cli_bounds_blas_for_the_whole_command(bounds: list[int], tmp_path) -> None:
    import onnx

    from onnxflow.cli import main

    path = tmp_path / "rnn.onnx"
    onnx.save(rnn_scan(8, 4, 0), path)
    assert main(["run", str(path), "--dim", "S=3", "--threads", "1", "--no-progress"]) == 0
    assert bounds[0] == 1
