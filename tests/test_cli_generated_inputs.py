"""Generated inputs the model can take: ``--value`` and ``--range``, integer inputs that index a
Gather drawn from the gathered axis's range, a length scalar named as a dimension variable, and
what an error says when the run's inputs were generated; the CLI's errors on misspelled names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxflow.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RNN = str(EXAMPLES / "rnn_scan.onnx")  # inputs X [S, B, 4] and H_0 [B, 8]


def _save(tmp_path: Path, nodes: list, inputs: list, outputs: list, inits: list = ()) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _embedding(tmp_path: Path) -> str:
    """ids (int32 [B, 16]) -> Cast -> Unsqueeze -> Gather into a 3-row initializer, and pos
    (int64 [6]) -> Gather along axis 1 of Relu(table [2, 4]): a size known from inference."""
    emb = numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), "emb")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["ids64", "axes"], ["ids3"]),
        helper.make_node("Gather", ["emb", "ids3"], ["y"], name="lookup"),
        helper.make_node("Relu", ["table"], ["t"]),
        helper.make_node("Gather", ["t", "pos"], ["z"], axis=1, name="by_pos"),
    ]
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT32, ["B", 16]),
        helper.make_tensor_value_info("table", TensorProto.FLOAT, [2, 4]),
        helper.make_tensor_value_info("pos", TensorProto.INT64, [6]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "yz"]
    return _save(tmp_path, nodes, inputs, outputs, [emb, axes])


def _saved(tmp_path: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.load(p) for p in (tmp_path / "values").glob("*.npy")}


def test_integer_inputs_indexing_a_gather_draw_from_its_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _embedding(tmp_path)
    for seed in range(5):  # 0..9 would miss the 3 rows (or the 4 columns) at every seed
        argv = ["run", model, "--seed", str(seed), "--intermediate", str(tmp_path / "values")]
        assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "random in [0, 2] (seed 4): indices of Gather 'lookup' along axis 0 of 'emb'" in out
    assert "random in [0, 3] (seed 4): indices of Gather 'by_pos' along axis 1 of 't'" in out
    values = _saved(tmp_path)
    assert np.isin(values["ids"], [0, 1, 2]).all() and np.isin(values["pos"], range(4)).all()


def test_value_fills_and_range_bounds_a_generated_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _embedding(tmp_path)
    argv = ["run", model, "--value", "ids=2", "--dim", "B=2", "--range", "table=5,6"]
    assert main([*argv, "--range", "pos=1,2", "--intermediate", str(tmp_path / "values")]) == 0
    out = capsys.readouterr().out
    assert "generated input ids: tensor(int32) [2, 16], filled with 2 (--value)" in out
    assert "random in [5.0, 6.0] (uniform; --range; seed 0)" in out
    assert "random in [1, 2] (both ends included; --range; seed 0)" in out
    values = _saved(tmp_path)
    assert values["ids"].dtype == np.int32 and (values["ids"] == 2).all()
    assert ((values["table"] >= 5) & (values["table"] <= 6)).all()
    assert set(np.unique(values["pos"])) <= {1, 2}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--value", "ids=1.5"], "--value ids=1.5: '1.5' is not a whole number that int32 holds"),
        (["--value", "ids=x"], "--value ids=x: 'x' is not a number"),
        (["--range", "pos=3"], "--range pos=3: a range is LO,HI"),
        (["--range", "pos=3,1"], "--range pos=3,1: LO is above HI"),
        (["--value", "pos=1", "--range", "pos=0,1"], "give one or the other"),
        (["--value", "idz=1"], "--value idz: the model has no input 'idz'; its inputs are"),
    ],
)
def test_a_value_or_range_that_cannot_be_is_an_error(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", _embedding(tmp_path), *argv]) == 1
    assert said in capsys.readouterr().err


def test_a_length_scalar_named_as_a_dimension_takes_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # attention_mask [B, total_seq] + Range(0, TotalSeq): the two agree only when the scalar is
    # the mask's length, as total_sequence_length must be past + current in a decoder.
    nodes = [
        helper.make_node("Constant", [], ["zero"], value_int=0),
        helper.make_node("Constant", [], ["one"], value_int=1),
        helper.make_node("Range", ["zero", "TotalSeq", "one"], ["positions"]),
        helper.make_node("Add", ["attention_mask", "positions"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "total_seq"]),
        helper.make_tensor_value_info("TotalSeq", TensorProto.INT64, []),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.INT64, None)]
    model = _save(tmp_path, nodes, inputs, outputs)
    assert main(["run", model, "--dim", "total_seq=7"]) == 0
    out = capsys.readouterr().out
    assert (
        "generated input TotalSeq: tensor(int64) [], filled with 7: the size of dimension " in out
    )
    assert "output y: int64 [1, 7]" in out


def test_an_error_with_generated_inputs_says_so_and_how_to_give_real_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    model = _save(tmp_path, nodes, inputs, outputs)
    for command in ("run", "profile", "code", "compare"):
        assert main([command, model]) in (1, 2)
        err = capsys.readouterr().err
        assert "Reshape" in err, command
        assert "note: the run's inputs x, shape were generated" in err, command
        assert "--input NAME=FILE" in err and "--value NAME=SCALAR" in err, command
        assert "--range NAME=LO,HI" in err, command
    np.save(tmp_path / "shape.npy", np.array([3, 2]))
    assert main(["run", model, "--input", f"shape={tmp_path / 'shape.npy'}"]) == 0
    assert main(["run", model, "--input", "x=missing.npy"]) == 1
    assert "note:" not in capsys.readouterr().err  # no run happened: nothing to blame


def test_a_misspelled_input_is_named_with_the_models_inputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", RNN, "--input", "x=x.npy"]) == 1
    err = capsys.readouterr().err
    assert "--input x: the model has no input 'x'; its inputs are ['H_0', 'X']" in err


def test_the_dim_error_points_to_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", RNN, "--dim", "T=3"]) == 1
    err = capsys.readouterr().err
    assert "(they have: B, S)" in err and "use --shape NAME=D0,D1,..." in err
