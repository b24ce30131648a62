"""onnxflow.export.export_python: the exported module agrees with the session."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from onnxflow import InferenceSession
from onnxflow.export import export_python

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "exporters" / "data"


def _exported(model: Path, tmp_path: Path):
    path = export_python(model, tmp_path / "model.py")
    spec = importlib.util.spec_from_file_location("exported_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _agree(model: Path, module, feeds: dict) -> None:
    expected = InferenceSession(str(model)).run(None, feeds)
    got = module.run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_loop_trip_count_example(tmp_path: Path) -> None:
    model = ROOT / "examples" / "loop_trip_count.onnx"
    path, module = _exported(model, tmp_path)
    assert path.with_suffix(".npz").exists()
    _agree(model, module, {"b": np.array(7, np.int32)})


@pytest.mark.parametrize(
    "name",
    [
        "scripted_loops_torchscript_default",
        "while_counter_dynamo_default",
        "cond_linear_dynamo_default",
        "nested_cond_dynamo_default",
        "lstm_torchscript_default",
    ],
)
def test_torch_exported(name: str, tmp_path: Path) -> None:
    model = DATA / f"{name}.onnx"
    _, module = _exported(model, tmp_path)
    session = InferenceSession(str(model))
    with np.load(DATA / f"{name}.npz") as archive:
        names = [i.name for i in session.get_inputs()]
        feeds = {n: archive[f"in0_{k}"] for k, n in enumerate(names)}
    _agree(model, module, feeds)


def test_module_imports_only_numpy_and_onnxflow(tmp_path: Path) -> None:
    path, _ = _exported(DATA / "cond_linear_dynamo_default.onnx", tmp_path)
    imports = re.findall(r"^(?:from|import) (\w+)", path.read_text(), re.M)
    assert set(imports) <= {"numpy", "onnxflow", "pathlib"}


def test_cli_writes_module_and_weights(tmp_path: Path, capsys) -> None:
    from onnxflow.cli import main

    out = tmp_path / "model.py"
    assert (
        main(["export-python", str(ROOT / "examples" / "loop_trip_count.onnx"), "-o", str(out)])
        == 0
    )
    assert out.exists() and out.with_suffix(".npz").exists()
    assert "plain NumPy" in capsys.readouterr().out
