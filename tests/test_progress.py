"""``onnxflow run``'s progress line: shown for any run longer than its delay, with or without
loops (the bar over loop iterations is tested in test_cli_examples.py)."""

from __future__ import annotations

import functools
import io
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxflow.cli import Progress, commands, main


def _drawn(stream: io.StringIO) -> list[str]:
    return [line.replace("\033[K", "") for line in stream.getvalue().split("\r") if line]


def test_a_run_without_loops_shows_the_time_elapsed() -> None:
    stream = io.StringIO()
    progress = Progress(stream, delay=0.0, tick=0.01)
    progress.run_start()
    time.sleep(0.2)  # the run: the thread redraws every tick meanwhile
    progress.run_end()
    lines = _drawn(stream)
    assert len(lines) >= 2 and all(line.startswith("running ") for line in lines)
    assert lines[-1].endswith(" s\n")
    assert float(lines[-1].split()[1]) >= 0.2


def test_a_short_run_shows_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(stream, delay=10.0, tick=0.01)
    progress.run_start()
    time.sleep(0.05)
    progress.scope_start((("loop", 0),), 3)
    progress.run_end()
    assert stream.getvalue() == ""


def test_the_thread_ends_with_the_run() -> None:
    progress = Progress(io.StringIO(), delay=10.0, tick=0.01)
    progress.run_start()
    ticker = progress._ticker
    progress.run_end()
    assert ticker is not None and not ticker.is_alive()


def _slow_matmuls(tmp_path: Path, n: int = 12, size: int = 500) -> Path:
    """A chain of float64 matrix products with no loop in it (a few hundred ms)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((size, size)) / size**0.5, "w")
    nodes = [helper.make_node("MatMul", [f"x{i}", "w"], [f"x{i + 1}"]) for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x0", TensorProto.DOUBLE, [size, size])],
        [helper.make_tensor_value_info(f"x{n}", TensorProto.DOUBLE, [size, size])],
        [w],
    )
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path


def test_cli_run_shows_progress_without_loops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # redrawn every 5 ms rather than 100: a faster machine still draws before the run ends
    monkeypatch.setattr(commands, "Progress", functools.partial(Progress, tick=0.005))
    assert main(["run", str(_slow_matmuls(tmp_path)), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "running " in err and err.endswith(" s\033[K\n")
