"""Build the small models of test_saved_models.py and save each as onnxruntime optimizes it at
the basic, extended and all levels (SessionOptions.optimized_model_filepath), into
data/saved/<name>_<level>.onnx, beside the original data/saved/<name>.onnx.

Run with ``python tests/microsoft/make_saved_models.py`` (needs torch and transformers for the
BERT stand-in). The "all" level's NCHWc weights are blocked for this machine's block size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).parent / "data" / "saved"
LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class Graph:
    """Nodes and random initializers of one model being built."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def weight(self, name: str, shape, scale: float = 0.2) -> str:
        return self.const(name, self.rng.standard_normal(shape) * scale)

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, stride=1, group=1, bias=True):
        ins = [x, self.weight(name + "_w", (cout, cin // group, k, k))]
        if bias:
            ins.append(self.weight(name + "_b", (cout,)))
        return self.node("Conv", ins, name, pads=[k // 2] * 4, strides=[stride] * 2, group=group)

    def batch_norm(self, x: str, c: int, name: str) -> str:
        scale = self.const(name + "_s", self.rng.random(c) + 0.5)
        bias, mean = self.weight(name + "_b", (c,)), self.weight(name + "_m", (c,), 0.1)
        var = self.const(name + "_v", self.rng.random(c) + 0.5)
        return self.node("BatchNormalization", [x, scale, bias, mean, var], name)

    def model(self, name: str, inputs, output: str, rank: int) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [None] * rank)],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.checker.check_model(model)
        return model


def resnet() -> onnx.ModelProto:
    """Conv+BN+Relu from 12 NCHW channels (fewer than a block of 16, not a multiple of 8:
    saved by 16, the weights tell it on any machine), MaxPool, a residual block (Add+Relu),
    AveragePool, nearest upsampling, 20 channels (padded to a block) through Sigmoid, a 3x3
    conv over them, GlobalAveragePool and a Gemm."""
    g = Graph(1)
    h = g.node("Relu", [g.batch_norm(g.conv("x", 12, 16, 3, "c1", bias=False), 16, "bn1")], "r1")
    h = g.node("MaxPool", [h], "mp", kernel_shape=[2, 2], strides=[2, 2])
    a = g.node("Relu", [g.batch_norm(g.conv(h, 16, 16, 3, "c2"), 16, "bn2")], "r2")
    a = g.batch_norm(g.conv(a, 16, 16, 3, "c3"), 16, "bn3")
    h = g.node("Relu", [g.node("Add", [a, h], "add")], "r3")
    h = g.node("AveragePool", [h], "ap", kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2])
    scales = g.const("up_scales", [1, 1, 2, 2])
    h = g.node(
        "Resize",
        [h, "", scales],
        "up",
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    h = g.node("Sigmoid", [g.conv(h, 16, 20, 1, "c4")], "sg")
    h = g.conv(h, 20, 16, 3, "c5", stride=2)
    h = g.node("Flatten", [g.node("GlobalAveragePool", [h], "gap")], "fl")
    y = g.node("Gemm", [h, g.weight("fc_w", (10, 16)), g.weight("fc_b", (10,))], "y", transB=1)
    return g.model("resnet", [("x", ["N", 12, 16, 16])], y, 2)


def mobilenet() -> onnx.ModelProto:
    """Channels-last input, HardSwish, depthwise and pointwise convs with Clip(0, 6),
    LeakyRelu, Tanh and HardSigmoid, linear upsampling, GlobalMaxPool, channels-last output."""
    g = Graph(2)
    h = g.node("Transpose", ["x"], "nchw", perm=[0, 3, 1, 2])
    h = g.node("HardSwish", [g.conv(h, 16, 16, 3, "c1", stride=2)], "hs")
    lo, hi = g.const("lo", 0.0), g.const("hi", 6.0)
    h = g.node("Clip", [g.conv(h, 16, 16, 3, "dw1", group=16), lo, hi], "cl1")
    h = g.node("Clip", [g.conv(h, 16, 32, 1, "pw1"), lo, hi], "cl2")
    h = g.node("LeakyRelu", [g.conv(h, 32, 32, 3, "dw2", stride=2, group=32)], "lr", alpha=0.1)
    h = g.node("Tanh", [g.conv(h, 32, 24, 1, "pw2")], "th")
    h = g.node("HardSigmoid", [g.conv(h, 24, 24, 3, "c3")], "hsg", alpha=0.25, beta=0.4)
    scales = g.const("up_scales", [1, 1, 2, 2])
    h = g.node(
        "Resize", [h, "", scales], "up", mode="linear", coordinate_transformation_mode="half_pixel"
    )
    h = g.node("MaxPool", [g.conv(h, 24, 16, 3, "c4")], "mp", kernel_shape=[3, 3], pads=[1] * 4)
    y = g.node("Transpose", [h], "y", perm=[0, 2, 3, 1])
    return g.model("mobilenet", [("x", ["N", 16, 16, 16])], y, 4)


def mlp() -> onnx.ModelProto:
    """Gemm+Relu, Gemm+Tanh, MatMul+Add+Sigmoid, a MatMul scaled by 2 and MatMuls of
    transposed activations (last two axes, then batch axes)."""
    g = Graph(3)
    h = g.node(
        "Relu",
        [g.node("Gemm", ["x", g.weight("w1", (32, 20)), g.weight("b1", (32,))], "g1", transB=1)],
        "r1",
    )
    h = g.node(
        "Tanh", [g.node("Gemm", [h, g.weight("w2", (32, 32)), g.weight("b2", (32,))], "g2")], "t2"
    )
    h = g.node("MatMul", [h, g.weight("w3", (32, 16))], "m3")
    h = g.node("Sigmoid", [g.node("Add", [h, g.weight("b3", (16,))], "a3")], "s3")
    h = g.node(
        "Mul", [g.node("MatMul", [h, g.weight("w4", (16, 16))], "m4"), g.const("two", 2.0)], "sc"
    )
    shape = g.node("Constant", [], "shape", value=numpy_helper.from_array(np.array([-1, 4, 4])))
    h = g.node("Reshape", [h, shape], "cube")
    h = g.node(
        "MatMul", [g.node("Transpose", [h], "tr", perm=[0, 2, 1]), g.weight("w5", (4, 4))], "m5"
    )
    h = g.node(
        "MatMul", [g.node("Transpose", [h], "tb", perm=[1, 0, 2]), g.weight("w6", (4, 3))], "m6"
    )
    return g.model("mlp", [("x", ["N", 20])], h, 3)


def bert() -> onnx.ModelProto:
    """A one-layer BERT stand-in exported from transformers (attention, BiasGelu, scaled
    FusedMatMul after onnxruntime's fusions)."""
    import io

    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )

    class Last(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(config).eval()

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(0, 50, (2, 8))
    buffer = io.BytesIO()
    torch.onnx.export(
        Last().eval(),
        (ids, torch.ones_like(ids)),
        buffer,
        input_names=["input_ids", "attention_mask"],
        output_names=["hidden"],
        dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}},
        opset_version=17,
        dynamo=False,
    )
    return onnx.load_from_string(buffer.getvalue())


def quantized_resnet() -> onnx.ModelProto:
    """The ResNet at the basic level (BatchNormalization folded) quantized to uint8 QDQ by
    onnxruntime.quantization, calibrated on four random images: saved at the all level, its
    MaxPool runs on uint8 channels-last as NhwcMaxPool between QLinearConvs."""
    import tempfile

    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(4)
            self.feeds = iter(
                {"x": rng.standard_normal((1, 12, 16, 16)).astype(np.float32)} for _ in range(4)
            )

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "quantized.onnx"
        quantize_static(
            OUT / "resnet_basic.onnx",
            out,
            Images(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QUInt8,
        )
        return onnx.load(out)


def save(name: str, model: onnx.ModelProto, levels=LEVELS, disabled=()) -> None:
    """Save ``model`` and its optimized forms, named ``<name>_<level>``; ``disabled`` names
    graph transformers onnxruntime must not run (where a machine lacks them)."""
    onnx.save(model, OUT / f"{name}.onnx")
    for level, value in levels.items():
        options = ort.SessionOptions()
        options.graph_optimization_level = value
        options.optimized_model_filepath = str(OUT / f"{name}_{level}.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(
            model.SerializeToString(),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(disabled),
        )


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, build in [("resnet", resnet), ("mobilenet", mobilenet), ("mlp", mlp)]:
        save(name, build())
    # The "all" level where the NCHWc transformer does not run: the residual Add+Relu goes into
    # FusedConv's Z input instead of the NCHWc Conv's Sum.
    no_nchwc = {"all-no-nchwc": LEVELS["all"]}
    save("resnet", resnet(), no_nchwc, disabled=["NchwcTransformer"])
    save("resnet_qdq", quantized_resnet(), {"all": LEVELS["all"]})
    save("bert", bert(), {"all": LEVELS["all"]})
