"""The command line as a newcomer meets it: --version, --help, --dim checks, what generated
inputs are shown with, and what ``check`` calls an input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxflow
from onnxflow.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RNN = str(EXAMPLES / "rnn_scan.onnx")  # inputs X [S, B, 4] and H_0 [B, 8]


def test_version_names_onnxflow_and_what_it_runs_on(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"onnxflow {onnxflow.__version__} (numpy {np.__version__}, onnx ")


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "run a model on given or generated inputs" in out
    assert all(f"    {cmd} " in out for cmd in ("run", "check", "profile", "code"))


def test_a_dim_the_inputs_lack_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", RNN, "--dim", "S=5", "--dim", "batch=2"]) == 1
    err = capsys.readouterr().err
    assert "--dim batch: the model's inputs have no dimension variable 'batch'" in err
    assert "(they have: B, S)" in err


@pytest.mark.parametrize("value", ["x", "-1", "2.5"])
def test_a_dim_is_a_whole_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", RNN, "--dim", f"S={value}"]) == 1
    assert f"--dim S={value}: a dimension is a whole number" in capsys.readouterr().err


def test_generated_inputs_show_their_dimensions_and_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", RNN, "--dim", "S=5", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "generated input X: tensor(float) [5, 1, 4], random (seed 3;" in out
    assert "dimensions: S=5 (--dim); B=1 (default; --dim B=N to change)" in out
    x = np.random.default_rng(3)
    x.standard_normal((1, 8))  # H_0 comes first in the model's inputs
    first = x.standard_normal((5, 1, 4)).astype(np.float32).reshape(-1)[0]
    values = [line for line in out.splitlines() if line.startswith("  values: float32 [5, 1, 4]")]
    assert len(values) == 1 and f"first=[{first:.8f}"[:12] in values[0].replace(" ", "")


def test_unnamed_and_non_identifier_dims_are_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    assert main(["run", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "[1, 3, 1], random" in out
    assert "dimensions: '?'=1 (not a dimension variable); unnamed=1" in out


def _add_model(ir_version: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    args = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "xwy"]
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", args[:2], args[2:], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = ir_version
    return model


@pytest.mark.parametrize(
    ("ir_version", "said"),
    [
        (3, "1 initializers also listed as inputs (IR version 3 lists them all there)"),
        (8, "1 overridable initializers (inputs with a stored value, fed only to override it): w"),
    ],
)
def test_check_keeps_initializers_apart_from_inputs(
    ir_version: int, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx.save(_add_model(ir_version), tmp_path / "m.onnx")
    assert main(["check", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "  input x: tensor(float) [3]" in out and said in out
    assert "input w" not in out


def _question_mark_model(path: Path) -> str:
    """A Paddle-style input ``[?, 3, ?]``: sizes no ``--dim`` can name."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), path)
    return str(path)


def test_shape_gives_a_generated_input_its_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _question_mark_model(tmp_path / "m.onnx")
    assert main(["run", model, "--shape", "x=2,3,48"]) == 0
    out = capsys.readouterr().out
    assert "generated input x: tensor(float) [2, 3, 48], random" in out
    assert "dimensions: from --shape" in out and "output y: float32 [2, 3, 48]" in out


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("x=2,4,48", "--shape x=2,4,48: the model declares ['?', 3, '?']"),  # fixed 3
        ("x=2,3", "--shape x=2,3: the model declares"),  # rank
        ("x=2,a,4", "--shape x=2,a,4: sizes are whole numbers"),
        ("z=1", "--shape z: no input 'z' is generated (inputs to generate: x)"),
    ],
)
def test_a_shape_that_cannot_be_is_an_error(
    given: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _question_mark_model(tmp_path / "m.onnx")
    assert main(["run", model, "--shape", given]) == 1
    assert said in capsys.readouterr().err
