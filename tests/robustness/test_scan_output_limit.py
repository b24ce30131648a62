"""A loop's stacked scan output cannot outgrow memory: it fails, naming the loop, the output and
the bytes, as soon as it is known not to fit (RunOptions.max_scan_output_bytes, by default the
memory available)."""

from __future__ import annotations

import numpy as np
import pytest
from model_builders import I64, B, F, const, model, vi
from onnx import helper

import onnxflow

X0 = np.ones(4, np.float32)


def _loop(trips: int, with_cond: bool, stop_after: int | None = None) -> onnxflow.InferenceSession:
    """A Loop of ``trips`` whose scan output is the same loop-invariant value every time; its
    body condition turns false after ``stop_after`` iterations (never, when None)."""
    nodes = [helper.make_node("Identity", ["x"], ["row"])]
    if stop_after is None:
        nodes.append(helper.make_node("Identity", ["c"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Less", ["i", "last"], ["c_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [vi("i", I64, []), vi("c", B, [])],
        [vi("c_out", B, []), vi("row", F, [4])],
        [const("last", np.int64(stop_after or 0))],
    )
    inputs = ["M", "C" if with_cond else ""]
    node = helper.make_node("Loop", inputs, ["rows"], name="L", body=body)
    inits = [const("M", np.int64(trips)), const("C", np.bool_(True))]
    return onnxflow.InferenceSession(model([node], [vi("x", F, [4])], [vi("rows", F, None)], inits))


def test_a_known_trip_count_that_cannot_fit_fails_at_the_first_iteration() -> None:
    """10**12 iterations of 16 bytes, 16 TB: refused before a second iteration runs."""
    with pytest.raises(onnxflow.RuntimeFailure) as info:
        _loop(10**12, with_cond=False).run(None, {"x": X0})
    message = str(info.value.__cause__)
    assert "Loop 'L'" in message and "scan output 0" in message
    assert "take 16000000000000 bytes" in message  # 10**12 rows of 16 bytes


def test_rows_listed_under_a_condition_stop_at_the_set_limit() -> None:
    options = onnxflow.RunOptions()
    options.max_scan_output_bytes = 1 << 20
    with pytest.raises(onnxflow.RuntimeFailure, match="more than the limit of 1048576"):
        _loop(10**12, with_cond=True).run(None, {"x": X0}, options)


def test_a_large_limit_under_a_condition_that_stops_early_is_no_error() -> None:
    (rows,) = _loop(2**63 - 1, with_cond=True, stop_after=3).run(None, {"x": X0})
    assert rows.shape == (4, 4)  # iterations 0..3: the condition is read after each


def test_a_count_under_the_set_limit_runs() -> None:
    options = onnxflow.RunOptions()
    options.max_scan_output_bytes = 16 * 1000
    (rows,) = _loop(1000, with_cond=False).run(None, {"x": X0}, options)
    assert rows.shape == (1000, 4) and (rows == 1).all()
    options.max_scan_output_bytes = 16 * 999
    with pytest.raises(onnxflow.RuntimeFailure, match="1000 iterations of 16-byte elements"):
        _loop(1000, with_cond=False).run(None, {"x": X0}, options)
