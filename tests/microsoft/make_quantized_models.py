"""Build the quantized models of ``test_quantized_models.py`` (run from the repository root:
``python tests/microsoft/make_quantized_models.py``).

A small float CNN and two small MLPs are written with ``onnx.helper`` (weights from a fixed
seed) and quantized with ``onnxruntime.quantization`` the ways its users do: static QOperator
(uint8 and int8 activations), static QDQ in the contrib domain (8-bit, 16-bit activations with
4-bit weights), dynamic, and the weight-only MatMulNBits quantizer (4 and 8 bits, several block
sizes, symmetric or not). The quantized models and one input per model go to
``tests/microsoft/data/quantized/``; the float models are not kept.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.matmul_nbits_quantizer import (
    DefaultWeightOnlyQuantConfig,
    HQQWeightOnlyQuantConfig,
    MatMulNBitsQuantizer,
)

OUT = Path(__file__).parent / "data" / "quantized"
RNG = np.random.default_rng(2024)
OPSET = 17


def _init(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def cnn() -> onnx.ModelProto:
    """Conv, Relu, residual Add, LeakyRelu, AveragePool, Sigmoid gate (Mul), Concat,
    GlobalAveragePool, Flatten, Gemm and Softmax on a (1, 3, 16, 16) image."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Add", ["c2", "r1"], ["res"]),
        n("LeakyRelu", ["res"], ["lr"], alpha=0.1),
        n("AveragePool", ["lr"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["pool", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
        n("Sigmoid", ["c3"], ["gate"]),
        n("Mul", ["pool", "gate"], ["gated"]),
        n("Concat", ["gated", "pool"], ["cat"], axis=1),
        n("GlobalAveragePool", ["cat"], ["gap"]),
        n("Flatten", ["gap"], ["flat"]),
        n("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inits = [
        _init("w1", 8, 3, 3, 3),
        _init("b1", 8, scale=0.1),
        _init("w2", 8, 8, 3, 3, scale=0.15),
        _init("b2", 8, scale=0.1),
        _init("w3", 8, 8, 3, 3, scale=0.15),
        _init("b3", 8, scale=0.1),
        _init("wf", 10, 16),
        _init("bf", 10, scale=0.1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])
    return _model(nodes, [x], [y], inits)


def mlp(k: int = 64, hidden: int = 128, out: int = 32) -> onnx.ModelProto:
    """MatMul + Add, Relu, MatMul + Add, Relu, MatMul on a (4, k) batch."""
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w1"], ["m1"]),
        n("Add", ["m1", "b1"], ["a1"]),
        n("Relu", ["a1"], ["r1"]),
        n("MatMul", ["r1", "w2"], ["m2"]),
        n("Add", ["m2", "b2"], ["a2"]),
        n("Relu", ["a2"], ["r2"]),
        n("MatMul", ["r2", "w3"], ["y"]),
    ]
    inits = [
        _init("w1", k, hidden, scale=0.15),
        _init("b1", hidden, scale=0.1),
        _init("w2", hidden, hidden, scale=0.1),
        _init("b2", hidden, scale=0.1),
        _init("w3", hidden, out, scale=0.1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, out])
    return _model(nodes, [x], [y], inits)


def gemm_mlp() -> onnx.ModelProto:
    """Gemm, Relu, Gemm on a (4, 32) batch: QOperator makes QGemm of these."""
    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
        n("Relu", ["g1"], ["r1"]),
        n("Gemm", ["r1", "w2", "b2"], ["y"], transB=1),
    ]
    inits = [
        _init("w1", 48, 32, scale=0.2),
        _init("b1", 48, scale=0.1),
        _init("w2", 16, 48, scale=0.2),
        _init("b2", 16, scale=0.1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    return _model(nodes, [x], [y], inits)


def embedding(vocab: int = 50, width: int = 64, out: int = 32) -> onnx.ModelProto:
    """Gather of token ids (2, 3) from an embedding table, then MatMul."""
    n = helper.make_node
    nodes = [n("Gather", ["table", "x"], ["e"]), n("MatMul", ["e", "w"], ["y"])]
    inits = [_init("table", vocab, width, scale=1.0), _init("w", width, out, scale=0.2)]
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, out])
    return _model(nodes, [x], [y], inits)


def lstm(width: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """A bidirectional LSTM over a (5, 2, width) sequence; the dynamic quantizer makes it a
    DynamicQuantizeLSTM."""
    node = helper.make_node(
        "LSTM",
        ["x", "w", "r", "b"],
        ["y", "y_h", "y_c"],
        hidden_size=hidden,
        direction="bidirectional",
    )
    inits = [
        _init("w", 2, 4 * hidden, width, scale=0.3),
        _init("r", 2, 4 * hidden, hidden, scale=0.3),
        _init("b", 2, 8 * hidden, scale=0.1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, width])
    shapes = {"y": [5, 2, 2, hidden], "y_h": [2, 2, hidden], "y_c": [2, 2, hidden]}
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, d) for o, d in shapes.items()]
    return _model([node], [x], outs, inits)


class _Batches(CalibrationDataReader):
    """A few random batches for the static quantizer's calibration."""

    def __init__(self, name: str, shape: tuple[int, ...], count: int = 8) -> None:
        self._feeds = iter(
            [{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(count)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def _static(model: onnx.ModelProto, shape: tuple[int, ...], **options) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(model, src)
        quantize_static(src, dst, _Batches("x", shape), **options)
        return onnx.load(dst)


def _dynamic(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(model, src)
        quantize_dynamic(src, dst, **options)
        return onnx.load(dst)


def _nbits(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    quantizer = MatMulNBitsQuantizer(model, **options)
    quantizer.process()
    return quantizer.model.model


def _nbits_with_gather(model: onnx.ModelProto, is_symmetric: bool) -> onnx.ModelProto:
    """MatMul to MatMulNBits and Gather to GatherBlockQuantized (uint4 codes with zero
    points, or int4 symmetric), blocks of 32 along the embedding width."""
    config = DefaultWeightOnlyQuantConfig(
        block_size=32,
        is_symmetric=is_symmetric,
        op_types_to_quantize=("MatMul", "Gather"),
        quant_axes=(("Gather", 1), ("MatMul", 0)),
    )
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def _ort_optimized(model: onnx.ModelProto, level: str) -> onnx.ModelProto:
    """``model`` as onnxruntime saves it after its graph optimizations at ``level``
    (``extended`` fuses the dynamic quantizer's MatMulInteger chains into DynamicQuantizeMatMul
    and QDQ groups into QLinear operators; ``all`` also moves QLinearConv to channels last)."""
    levels = {
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = levels[level]
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


CNN = (1, 3, 16, 16)
MLP = (4, 64)
TOKENS = (2, 3)
QOP = dict(quant_format=QuantFormat.QOperator)
QDQ_CONTRIB = dict(quant_format=QuantFormat.QDQ, extra_options={"UseQDQContribOps": True})

#: name -> (build the quantized model, the input's shape)
MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], tuple[int, ...]]] = {
    "cnn_qop_u8": (
        lambda: _static(
            cnn(), CNN, activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8, **QOP
        ),
        CNN,
    ),
    "cnn_qop_s8_per_channel": (
        lambda: _static(
            cnn(),
            CNN,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            **QOP,
        ),
        CNN,
    ),
    "cnn_qop_u8s8": (
        lambda: _static(
            cnn(), CNN, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, **QOP
        ),
        CNN,
    ),
    "gemm_qop_u8": (
        lambda: _static(
            gemm_mlp(),
            (4, 32),
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            **QOP,
        ),
        (4, 32),
    ),
    "cnn_qdq_contrib_s8": (
        lambda: _static(
            cnn(), CNN, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, **QDQ_CONTRIB
        ),
        CNN,
    ),
    "mlp_qdq_contrib_a16w4": (
        lambda: _static(
            mlp(),
            MLP,
            activation_type=QuantType.QUInt16,
            weight_type=QuantType.QInt4,
            **QDQ_CONTRIB,
        ),
        MLP,
    ),
    "mlp_qdq_contrib_a16w4_per_channel": (
        lambda: _static(
            mlp(),
            MLP,
            activation_type=QuantType.QUInt16,
            weight_type=QuantType.QInt4,
            per_channel=True,
            **QDQ_CONTRIB,
        ),
        MLP,
    ),
    "lstm_dynamic_s8": (lambda: _dynamic(lstm(), weight_type=QuantType.QInt8), (5, 2, 8)),
    "lstm_dynamic_u8_per_channel": (
        lambda: _dynamic(lstm(), weight_type=QuantType.QUInt8, per_channel=True),
        (5, 2, 8),
    ),
    "mlp_dynamic_u8": (lambda: _dynamic(mlp(), weight_type=QuantType.QUInt8), MLP),
    "mlp_dynamic_s8_per_channel": (
        lambda: _dynamic(mlp(), weight_type=QuantType.QInt8, per_channel=True),
        MLP,
    ),
    "mlp_dynamic_u8_ort_fused": (
        lambda: _ort_optimized(_dynamic(mlp(), weight_type=QuantType.QUInt8), "extended"),
        MLP,
    ),
    "cnn_qdq_contrib_s8_ort_fused": (
        lambda: _ort_optimized(MODELS["cnn_qdq_contrib_s8"][0](), "extended"),
        CNN,
    ),
    "cnn_qop_u8_ort_channels_last": (
        lambda: _ort_optimized(MODELS["cnn_qop_u8"][0](), "all"),
        CNN,
    ),
    "mlp_nbits4_b16_asym": (lambda: _nbits(mlp(), block_size=16, is_symmetric=False), MLP),
    "mlp_nbits4_b32_sym": (lambda: _nbits(mlp(), block_size=32, is_symmetric=True), MLP),
    "mlp_nbits4_b64_asym": (lambda: _nbits(mlp(), block_size=64, is_symmetric=False), MLP),
    "mlp_nbits8_b32_asym": (lambda: _nbits(mlp(), bits=8, block_size=32, is_symmetric=False), MLP),
    "mlp_hqq4_b32": (
        lambda: _nbits(mlp(), algo_config=HQQWeightOnlyQuantConfig(block_size=32)),
        MLP,
    ),
    "embed_nbits4_asym": (lambda: _nbits_with_gather(embedding(), False), TOKENS),
    "embed_nbits4_sym": (lambda: _nbits_with_gather(embedding(), True), TOKENS),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    inputs = {}
    for name, (build, shape) in MODELS.items():
        onnx.save(build(), OUT / f"{name}.onnx")
        if shape is TOKENS:
            inputs[name] = RNG.integers(0, 50, size=shape)
        else:
            inputs[name] = RNG.standard_normal(shape).astype(np.float32)
    np.savez_compressed(OUT / "inputs.npz", **inputs)


if __name__ == "__main__":
    main()
