"""Models quantized by ``onnxruntime.quantization`` (built by ``make_quantized_models.py``), run
in onnxflow and in onnxruntime.

Each model is checked for the contrib operators its quantization mode emits, then compared with
onnxruntime:

- QOperator models compute in integers from the first QuantizeLinear to the last
  DequantizeLinear, and both runtimes requantize in the same float32 arithmetic, rounding half
  to even. Every value the model computes is exposed and must equal onnxruntime's: the codes
  exactly, so the dequantized floats too.
- Dynamic models quantize each MatMul's input at run time from a float value both runtimes
  compute alike, then multiply integers exactly: every value must match as well. The LSTM's
  gates go through sigmoid and tanh, which each runtime computes its own way, so its states
  agree to float32 rounding (the next step quantizes them; at these sizes no code moves).
- Weight-only (MatMulNBits) models quantize nothing at run time: every value agrees to float32
  rounding (the runtimes sum the products in different orders).
- QDQ models run float operators (Conv, MatMul, AveragePool...) between quantizations. Their
  float sums differ from onnxruntime's in the last bits, and a sum within that distance of a
  rounding boundary takes the neighbouring code: an AveragePool of four codes lands exactly on
  half a step a quarter of the time. Later operators then see one code changed at a few places.
  Only the outputs are compared, within one quantization step of the scale each is dequantized
  with.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import onnxflow

DATA = Path(__file__).parent / "data" / "quantized"
INPUTS = dict(np.load(DATA / "inputs.npz"))
MS = "com.microsoft"

_CNN_QOP = {
    "QLinearAdd": 1,
    "QLinearLeakyRelu": 1,
    "QLinearAveragePool": 1,
    "QLinearSigmoid": 1,
    "QLinearMul": 1,
    "QLinearConcat": 1,
    "QLinearGlobalAveragePool": 1,
    "QGemm": 1,
    "QLinearSoftmax": 1,
}
_NBITS = {"MatMulNBits": 3}
#: model -> the contrib operators it holds, with their counts
CONTRIB: dict[str, dict[str, int]] = {
    "cnn_qop_u8": _CNN_QOP,
    "cnn_qop_u8s8": _CNN_QOP,
    "cnn_qop_s8_per_channel": _CNN_QOP,
    "cnn_qop_u8_ort_channels_last": dict(_CNN_QOP, QLinearConv=3),
    "gemm_qop_u8": {"QGemm": 2},
    "cnn_qdq_contrib_s8": {"QuantizeLinear": 14, "DequantizeLinear": 22},
    "cnn_qdq_contrib_s8_ort_fused": {
        "QuantizeLinear": 8,
        "DequantizeLinear": 17,
        "QLinearLeakyRelu": 1,
        "QLinearSigmoid": 1,
        "QLinearGlobalAveragePool": 1,
        "QGemm": 1,
        "QLinearSoftmax": 1,
    },
    "mlp_qdq_contrib_a16w4": {"QuantizeLinear": 6, "DequantizeLinear": 11},
    "mlp_qdq_contrib_a16w4_per_channel": {"QuantizeLinear": 6, "DequantizeLinear": 11},
    "lstm_dynamic_s8": {"DynamicQuantizeLSTM": 1},
    "lstm_dynamic_u8_per_channel": {"DynamicQuantizeLSTM": 1},
    "mlp_dynamic_u8": {},
    "mlp_dynamic_s8_per_channel": {},
    "mlp_dynamic_u8_ort_fused": {"DynamicQuantizeMatMul": 3},
    "mlp_nbits4_b16_asym": _NBITS,
    "mlp_nbits4_b32_sym": _NBITS,
    "mlp_nbits4_b64_asym": _NBITS,
    "mlp_nbits8_b32_asym": _NBITS,
    "mlp_hqq4_b32": _NBITS,
    "embed_nbits4_asym": {"GatherBlockQuantized": 1, "MatMulNBits": 1},
    "embed_nbits4_sym": {"GatherBlockQuantized": 1, "MatMulNBits": 1},
}
#: compared at the outputs only, within one quantization step
QDQ = {name for name in CONTRIB if "_qdq_" in name}
#: compared value by value to float32 rounding
WEIGHT_ONLY = {name for name in CONTRIB if "nbits" in name or "hqq" in name}
#: compared value by value, floats to float32 rounding of tanh and sigmoid
RECURRENT = {name for name in CONTRIB if name.startswith("lstm")}


def _contrib_ops(model: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node if n.domain == MS))


def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _every_value(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with every node output a graph output, typed as onnxruntime computes it."""
    shown = {o.name for o in model.graph.output}
    extra = [o for n in model.graph.node for o in n.output if o and o not in shown]
    untyped = onnx.ModelProto()
    untyped.CopyFrom(model)
    untyped.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in extra)
    values = _run_ort(untyped, feeds)[len(model.graph.output) :]
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    typed.graph.output.extend(
        helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(v.dtype), None)
        for o, v in zip(extra, values, strict=True)
    )
    return typed


def _output_step(model: onnx.ModelProto, output: str) -> float:
    """The quantization step of a QDQ model's output: the scale of the DequantizeLinear that
    makes it."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    (node,) = [n for n in model.graph.node if output in n.output]
    assert node.op_type == "DequantizeLinear", f"{output} is made by {node.op_type}"
    return float(np.max(constants[node.input[1]]))


@pytest.mark.parametrize("name", sorted(CONTRIB))
def test_model_holds_the_contrib_ops_of_its_mode(name: str) -> None:
    assert _contrib_ops(onnx.load(DATA / f"{name}.onnx")) == CONTRIB[name]


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[tuple]:
    """(name, onnxflow's value, onnxruntime's value) of each graph output."""
    theirs = _run_ort(model, feeds)
    ours = onnxflow.InferenceSession(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    return list(zip(names, [np.asarray(a) for a in ours], theirs, strict=True))


@pytest.mark.parametrize("name", sorted(set(CONTRIB) - QDQ))
def test_model_matches_onnxruntime_value_by_value(name: str) -> None:
    feeds = {"x": INPUTS[name]}
    model = _every_value(onnx.load(DATA / f"{name}.onnx"), feeds)
    for value, ours, theirs in _run_both(model, feeds):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), value
        if name in WEIGHT_ONLY and ours.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4, err_msg=value)
        elif name in RECURRENT and ours.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=value)
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=value)


@pytest.mark.parametrize("name", sorted(QDQ))
def test_qdq_model_outputs_within_one_quantization_step(name: str) -> None:
    model, feeds = onnx.load(DATA / f"{name}.onnx"), {"x": INPUTS[name]}
    for value, ours, theirs in _run_both(model, feeds):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), value
        step = _output_step(model, value)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=step * 1.001, err_msg=value)
        assert np.mean(ours == theirs) > 0.5, f"{value}: most values should agree exactly"
