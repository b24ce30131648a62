"""RunOptions.terminate stops a run within one node or one loop iteration; Ctrl-C works too."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
from model_builders import F, chain, const, counter_body, model, unbounded_loop, vi
from onnx import helper

import onnxflow
from onnxflow.runtime.context import current_run_options

X0 = np.zeros(1, np.float32)


class CountingOptions(onnxflow.RunOptions):
    """RunOptions that count how often ``terminate`` is read and turn it on at read ``flip_at``."""

    def __init__(self, flip_at: int | None = None) -> None:
        self.reads = 0
        self.flip_at = flip_at
        super().__init__()

    @property
    def terminate(self) -> bool:
        self.reads += 1
        return self.flip_at is not None and self.reads >= self.flip_at

    @terminate.setter
    def terminate(self, value: bool) -> None:
        pass


class WatchedOptions(onnxflow.RunOptions):
    """RunOptions that count the reads of ``terminate`` made after it was set: a run that stops
    at its first check after the flag reads it once, however long that took on a busy
    machine (so no test here asserts seconds)."""

    def __init__(self) -> None:
        self._flag = False
        self.reads_after = 0
        super().__init__()

    @property
    def terminate(self) -> bool:
        if self._flag:
            self.reads_after += 1
        return self._flag

    @terminate.setter
    def terminate(self, value: bool) -> None:
        self._flag = bool(value)


def run_in_thread(fn, *args) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``fn(*args)`` in a daemon thread; the dict receives its result or exception."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn(*args)
        except BaseException as exc:
            outcome["error"] = exc
        outcome["end"] = time.monotonic()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


def loop_of(trips: int, body_nodes: int = 2) -> onnxflow.InferenceSession:
    extra = [helper.make_node("Neg", ["x_out"], [f"n{k}"]) for k in range(body_nodes - 2)]
    body = counter_body(extra)
    node = helper.make_node("Loop", ["M", "", "x0"], ["xf"], name="loop", body=body)
    m = model([node], [vi("x0", F, [1])], [vi("xf", F, [1])], [const("M", np.int64(trips))])
    return onnxflow.InferenceSession(m)


def test_terminate_set_before_the_run_cancels_it() -> None:
    options = onnxflow.RunOptions()
    options.terminate = True
    with pytest.raises(onnxflow.CancelledError, match="terminated by RunOptions.terminate"):
        onnxflow.InferenceSession(chain(3)).run(None, {"X": np.ones(64, np.float32)}, options)
    options.terminate = False
    (y,) = onnxflow.InferenceSession(chain(3)).run(None, {"X": np.ones(64, np.float32)}, options)
    np.testing.assert_array_equal(y, -np.ones(64, np.float32))


def test_terminate_is_read_before_every_node() -> None:
    options = CountingOptions()
    onnxflow.InferenceSession(chain(50)).run(None, {"X": np.ones(64, np.float32)}, options)
    assert options.reads >= 50


def test_terminate_is_read_every_loop_iteration() -> None:
    options = CountingOptions()
    (xf,) = loop_of(7).run(None, {"x0": X0}, options)
    assert xf == 7
    assert options.reads >= 7 + 1


@pytest.mark.parametrize("flip_at", [1, 2, 17, 40])
def test_chain_stops_at_the_first_check_after_terminate(flip_at: int) -> None:
    options = CountingOptions(flip_at)
    with pytest.raises(onnxflow.CancelledError, match=r"terminated .* graph 'g' before") as info:
        onnxflow.InferenceSession(chain(50)).run(None, {"X": np.ones(64, np.float32)}, options)
    stopped_before = int(re.search(r"Neg 'neg(\d+)'", str(info.value)).group(1))
    assert stopped_before < flip_at  # at most one node per read of terminate ran
    assert options.reads <= flip_at + 1


@pytest.mark.parametrize("flip_at", [3, 10])
def test_loop_stops_at_the_first_check_after_terminate(flip_at: int) -> None:
    options = CountingOptions(flip_at)
    with pytest.raises(onnxflow.CancelledError, match="terminated"):
        loop_of(1000).run(None, {"x0": X0}, options)
    assert options.reads <= flip_at + 2  # the iteration's check raised; no more iterations ran


def test_unbounded_loop_runs_until_another_thread_terminates_it() -> None:
    sess = onnxflow.InferenceSession(unbounded_loop())
    options = WatchedOptions()
    thread, outcome = run_in_thread(sess.run, None, {"x0": X0}, options)
    time.sleep(0.3)
    assert thread.is_alive(), f"the unbounded loop ended by itself: {outcome}"
    options.terminate = True
    thread.join(timeout=10)
    assert not thread.is_alive(), "the loop did not stop after terminate was set"
    error = outcome.get("error")
    assert isinstance(error, onnxflow.CancelledError), outcome
    assert "'counter'" in str(error) or "Loop 'loop'" in str(error)
    assert options.reads_after == 1  # stopped at the first check after the flag


def test_long_chain_stops_within_one_node() -> None:
    """5000 nodes of ~1 ms each; terminate set from another thread stops the run at the next
    node (or pointwise region of at most MAX_NODES of them), long before its end."""
    sess = onnxflow.InferenceSession(chain(5000, 1 << 18))
    x = np.ones(1 << 18, np.float32)
    options = WatchedOptions()
    thread, outcome = run_in_thread(sess.run, None, {"X": x}, options)
    time.sleep(0.05)
    options.terminate = True
    thread.join(timeout=60)
    error = outcome.get("error")
    assert isinstance(error, onnxflow.CancelledError), outcome
    assert options.reads_after == 1
    stopped_before = int(re.search(r"(Neg|Pointwise) 'neg(\d+)'", str(error)).group(2))
    assert stopped_before < 4999


def test_long_scan_stops_within_one_iteration() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s_out"])],
        "body",
        [vi("s", F, []), vi("x", F, [])],
        [vi("s_out", F, [])],
    )
    node = helper.make_node("Scan", ["s0", "X"], ["sf"], name="scan", body=body, num_scan_inputs=1)
    sess = onnxflow.InferenceSession(
        model([node], [vi("s0", F, []), vi("X", F, [None])], [vi("sf", F, [])])
    )
    options = WatchedOptions()
    feeds = {"s0": np.float32(0), "X": np.ones(50_000_000, np.float32)}
    thread, outcome = run_in_thread(sess.run, None, feeds, options)
    time.sleep(0.2)
    options.terminate = True
    thread.join(timeout=60)
    error = outcome.get("error")
    assert isinstance(error, onnxflow.CancelledError), outcome
    assert "Scan 'scan'" in str(error) or "graph 'body'" in str(error)
    assert options.reads_after == 1


def test_terminating_one_run_leaves_a_concurrent_run_alone() -> None:
    sess = onnxflow.InferenceSession(unbounded_loop())
    bounded = loop_of(20_000)
    stop, keep = onnxflow.RunOptions(), onnxflow.RunOptions()
    t1, cancelled = run_in_thread(sess.run, None, {"x0": X0}, stop)
    t2, finished = run_in_thread(bounded.run, None, {"x0": X0}, keep)
    time.sleep(0.1)
    stop.terminate = True
    t1.join(timeout=10)
    t2.join(timeout=60)
    assert isinstance(cancelled.get("error"), onnxflow.CancelledError), cancelled
    assert "error" not in finished, finished
    assert finished["result"][0] == 20_000


def test_ctrl_c_interrupts_a_long_loop() -> None:
    """SIGINT to the own process surfaces as KeyboardInterrupt within a loop iteration or so."""
    assert threading.current_thread() is threading.main_thread()
    sess = onnxflow.InferenceSession(unbounded_loop())
    guard = onnxflow.RunOptions()  # ends the test instead of hanging if the interrupt is lost
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    rescue = threading.Timer(10.0, setattr, (guard, "terminate", True))
    try:
        interrupt.start()
        rescue.start()
        with pytest.raises(KeyboardInterrupt):
            sess.run(None, {"x0": X0}, guard)
    finally:
        interrupt.cancel()
        rescue.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not guard.terminate  # the interrupt stopped it, not the rescue timer
    assert current_run_options() is None  # the run's options were reset on the way out
    (y,) = onnxflow.InferenceSession(chain(3)).run(None, {"X": np.ones(64, np.float32)})
    np.testing.assert_array_equal(y, -np.ones(64, np.float32))
