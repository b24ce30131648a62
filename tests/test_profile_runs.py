"""onnxflow profile over warm-up and timed runs (issue 32): per-node medians of the samples the
runs recorded, shapes in the table and the trace, and an observing cost given with its noise.
No wall-clock assertion: the structure is checked, and medians against the recorded samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import onnxflow
from onnxflow.cli import main
from onnxflow.cli.commands import observing_cost
from onnxflow.observers import Profiler

RNN = Path(__file__).resolve().parents[1] / "examples" / "rnn_scan.onnx"


def _feeds() -> dict[str, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((6, 2, 4)).astype(np.float32)
    return {"X": x, "H_0": np.zeros((2, 8), np.float32)}


@pytest.mark.parametrize("bodies", [False, True])
def test_medians_come_from_one_sample_per_run(bodies: bool) -> None:
    sess, profiler = onnxflow.InferenceSession(RNN), Profiler(bodies=bodies)
    for _ in range(3):
        sess.run(None, _feeds(), observers=[profiler])
    assert len(profiler.run_seconds) == 3
    assert all(len(samples) == 3 for samples in profiler.node_samples.values())
    for op, key, median, calls in profiler.median_nodes(100):
        assert median == np.median(profiler.node_samples[(op, key)])
        assert calls == profiler.by_node[(op, key)][1] / 3
    for op, median, _ in profiler.median_ops(100):
        assert median == np.median(profiler.op_samples[op])
    # the Scan reads the state H_0 then the sequence X; gives the last state then all of them
    assert profiler.shapes[("Scan", "rnn")] == ([[2, 8], [6, 2, 4]], [[2, 8], [6, 2, 8]])
    scans = [e for e in profiler.events if e["name"] == "Scan rnn"]
    assert [e["args"]["run"] for e in scans] == [0, 1, 2]
    assert scans[0]["args"]["input_shapes"] == [[2, 8], [6, 2, 4]]
    assert "[2,8], [6,2,4] -> [2,8], [6,2,8]" in profiler.report()
    if bodies:
        matmul = next(k for k in profiler.shapes if k[0] == "MatMul")
        assert profiler.median_nodes(100) and profiler.shapes[matmul][1] == [[2, 8]]


def test_cli_profile_warms_up_then_times_runs(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "trace.json"
    args = ["profile", str(RNN), "--dim", "S=5", "--dim", "B=2", "--warmup", "1", "--runs", "3"]
    assert main([*args, "--trace", str(trace), "--no-bodies"]) == 0
    out = capsys.readouterr().out
    assert "3 runs after 1 warm-up: median" in out and "unobserved" in out
    assert "Scan rnn" in out and "[2,8], [5,2,4] -> [2,8], [5,2,8]" in out
    events = json.loads(trace.read_text())["traceEvents"]
    scans = [e for e in events if e["name"] == "Scan rnn"]  # the warm-up runs are not in it
    assert [e["args"]["run"] for e in scans] == [0, 1, 2]
    assert scans[0]["args"]["output_shapes"] == [[2, 8], [5, 2, 8]]
    assert main([*args, "--bodies"]) == 0
    out = capsys.readouterr().out
    assert "3 more runs, observed inside bodies: median" in out and "observing costs" in out
    with pytest.raises(SystemExit):
        main(["profile", str(RNN), "--runs", "0"])


def test_observing_cost_is_signed_with_its_noise_never_a_clamped_zero() -> None:
    plain, observed = [0.010, 0.012, 0.011], [0.009, 0.010, 0.0095]  # the observed ran faster
    text = observing_cost(plain, observed)
    assert "observing costs -1.50 ms" in text and "0.00 ms" not in text
    assert "interquartile range of the two: 1.00 ms" in text and "more than the noise" in text
    text = observing_cost([0.010, 0.014, 0.012], [0.0125, 0.013, 0.0135])
    assert "observing costs +1.00 ms" in text and "2.00 ms; within the noise" in text
