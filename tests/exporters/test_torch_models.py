"""Models exported from PyTorch 2.13 run in onnxflow and give PyTorch's own answers.

The models, their input sets and PyTorch's outputs are stored in ``data/`` by
``make_torch_models.py`` (torch is not a test dependency). A name reads
``<model>_<exporter>_<opset>``: ``dynamo`` is ``torch.onnx.export(..., dynamo=True)``,
``torchscript`` is ``dynamo=False``; ``default`` is the exporter's own opset (20 for both).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxflow
from onnxflow.cli import count_ops

DATA = Path(__file__).parent / "data"
DEFAULT_OPSET = 20

# model -> the operators it is here to exercise, and how many of each the export holds.
MODELS = {
    "cond_linear": {"If": 1},  # torch.cond
    "nested_cond": {"If": 2},  # torch.cond inside a torch.cond branch
    "while_doubling": {"Loop": 1},  # torch.while_loop, condition on the carried tensor
    "while_counter": {"Loop": 1},  # torch.while_loop, bound captured from the inputs
    "scan_cumulative": {"Scan": 1},  # torch._higher_order_ops.scan
    "scan_rnn_cell": {"Scan": 1},  # scan, dim=1, reverse=True, weights captured
    "scan_two_carries": {"Scan": 1},  # two carries, two scanned inputs, two stacked outputs
    "cond_in_scan": {"Scan": 1, "If": 1},  # torch.cond inside the scan's step
    "scripted_loops": {"Loop": 3, "If": 1},  # torch.jit.script: for + break, while, list append
    "lstm": {"LSTM": 2},
    "gru": {"GRU": 2},
    "transformer": {"Softmax": 2},  # TransformerEncoder, 2 layers, d_model 16
}

CASES = [
    "cond_linear_dynamo_default",
    "cond_linear_dynamo_opset17",
    "nested_cond_dynamo_default",
    "nested_cond_dynamo_opset18",
    "while_doubling_dynamo_default",
    "while_doubling_dynamo_opset17",
    "while_counter_dynamo_default",
    "while_counter_dynamo_opset18",
    "scan_cumulative_dynamo_default",
    "scan_cumulative_dynamo_opset17",
    "scan_rnn_cell_dynamo_default",
    "scan_rnn_cell_dynamo_opset17",
    "scan_two_carries_dynamo_default",
    "scan_two_carries_dynamo_opset18",
    "cond_in_scan_dynamo_default",
    "cond_in_scan_dynamo_opset17",
    "lstm_dynamo_default",
    "lstm_dynamo_opset17",
    "gru_dynamo_default",
    "gru_dynamo_opset17",
    "transformer_dynamo_default",
    "transformer_dynamo_opset17",
    "scripted_loops_torchscript_default",
    "scripted_loops_torchscript_opset13",
    "lstm_torchscript_default",
    "lstm_torchscript_opset13",
    "gru_torchscript_default",
    "gru_torchscript_opset13",
    "transformer_torchscript_default",
    "transformer_torchscript_opset14",
]


def _input_sets(name: str) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """The stored (inputs, PyTorch outputs) pairs of a case."""
    with np.load(DATA / f"{name}.npz") as archive:
        arrays = dict(archive)
    sets = []
    k = 0
    while f"in{k}_0" in arrays:
        inputs = [arrays[f"in{k}_{i}"] for i in range(len(arrays)) if f"in{k}_{i}" in arrays]
        outputs = [arrays[f"out{k}_{j}"] for j in range(len(arrays)) if f"out{k}_{j}" in arrays]
        sets.append((inputs, outputs))
        k += 1
    return sets


def _model_of(name: str) -> str:
    return next(m for m in sorted(MODELS, key=len, reverse=True) if name.startswith(m + "_"))


@pytest.mark.parametrize("name", CASES)
def test_exported_model_matches_pytorch(name: str) -> None:
    model = onnx.load(DATA / f"{name}.onnx")
    counts = count_ops(model.graph)
    for op_type, count in MODELS[_model_of(name)].items():
        assert counts[op_type] == count, f"the export should hold {count} {op_type}"
    opset_tag = name.rsplit("_", 1)[1]
    opset = DEFAULT_OPSET if opset_tag == "default" else int(opset_tag.removeprefix("opset"))
    assert {o.domain: o.version for o in model.opset_import}[""] == opset

    sess = onnxflow.InferenceSession(model)
    names = [a.name for a in sess.get_inputs()]
    for k, (inputs, expected) in enumerate(_input_sets(name)):
        found = sess.run(None, dict(zip(names, inputs, strict=True)))
        assert len(found) == len(expected)
        for j, (y, want) in enumerate(zip(found, expected, strict=True)):
            where = f"input set {k}, output {j}"
            assert y.dtype == want.dtype, f"{where}: dtype {y.dtype}, expected {want.dtype}"
            assert y.shape == want.shape, f"{where}: shape {y.shape}, expected {want.shape}"
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=where)


def test_every_stored_model_is_a_case() -> None:
    stored = {p.stem for p in DATA.glob("*.onnx") if _is_torch_case(p.stem)}
    assert stored == set(CASES)


def _is_torch_case(stem: str) -> bool:
    return "_dynamo_" in stem or "_torchscript_" in stem
