"""Builders of zoo models made the way users make them. Each imports its framework when it runs
(lightgbm, xgboost, catboost, onnxmltools, scikit-learn, skl2onnx, onnxruntime.quantization,
onnxruntime's optimizer, onnxconverter-common, torch, transformers):
none of them is a dependency of onnxflow, and a missing one makes the model unavailable, not
the bench fail.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

#: Rows and features of the tree models' training data (a fixed synthetic problem).
TREE_ROWS, TREE_FEATURES = 2000, 20


def _tree_data(classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((TREE_ROWS, TREE_FEATURES)).astype(np.float32)
    score = x[:, :3] @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3 * x[:, 3] * x[:, 4]
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return x, y


def lightgbm_classifier(target: Path, classes: int = 3, trees: int = 100) -> None:
    """A lightgbm multiclass classifier converted by onnxmltools (probabilities as a tensor)."""
    import lightgbm
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _tree_data(classes)
    model = lightgbm.LGBMClassifier(n_estimators=trees, num_leaves=31, verbose=-1).fit(x, y)
    onx = convert_lightgbm(
        model,
        initial_types=[("input", FloatTensorType([None, TREE_FEATURES]))],
        zipmap=False,
        target_opset=15,
    )
    onnx.save(onx, target)


def xgboost_classifier(target: Path, classes: int = 3, trees: int = 100) -> None:
    """An xgboost multiclass classifier converted by onnxmltools."""
    import xgboost
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _tree_data(classes)
    model = xgboost.XGBClassifier(n_estimators=trees, max_depth=6).fit(x, y)
    onx = convert_xgboost(
        model,
        initial_types=[("input", FloatTensorType([None, TREE_FEATURES]))],
        target_opset=15,
    )
    onnx.save(onx, target)


def xgboost_regressor(target: Path, trees: int = 100) -> None:
    """An xgboost regressor converted by onnxmltools (a TreeEnsembleRegressor)."""
    import xgboost
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, _ = _tree_data(3)
    y = x[:, :3] @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3 * x[:, 3] * x[:, 4]
    model = xgboost.XGBRegressor(n_estimators=trees, max_depth=6).fit(x, y)
    onx = convert_xgboost(
        model,
        initial_types=[("input", FloatTensorType([None, TREE_FEATURES]))],
        target_opset=15,
    )
    onnx.save(onx, target)


def forest_pipeline(target: Path, classes: int = 3, trees: int = 100) -> None:
    """A scikit-learn pipeline, StandardScaler then RandomForestClassifier, converted by
    skl2onnx with its defaults (labels, and probabilities through a ZipMap)."""
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _tree_data(classes)
    forest = RandomForestClassifier(n_estimators=trees, max_depth=10, random_state=0)
    pipe = make_pipeline(StandardScaler(), forest).fit(x, y)
    onx = to_onnx(pipe, x[:1], target_opset={"": 18, "ai.onnx.ml": 3})
    onx.graph.input[0].name = "input"  # skl2onnx names it X; the feeds say input
    for node in onx.graph.node:
        node.input[:] = ["input" if i == "X" else i for i in node.input]
    onnx.save(onx, target)


def ort_optimized_of(base: Callable[[], Path]) -> Callable[[Path], None]:
    """A builder of ``base``'s model as onnxruntime saves it after its extended optimizations
    (``optimized_model_filepath`` at ``ORT_ENABLE_EXTENDED``): Conv with its activation fused
    into ``com.microsoft`` ``FusedConv``, as users ship "ort-optimized" models."""

    def build(target: Path) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(target)
        ort.InferenceSession(str(base()), so, providers=["CPUExecutionProvider"])

    return build


def catboost_classifier(target: Path, classes: int = 3, trees: int = 100) -> None:
    """A catboost multiclass classifier saved by catboost's own ONNX exporter (oblivious trees
    as a TreeEnsembleClassifier, a ZipMap of probabilities)."""
    import catboost

    x, y = _tree_data(classes)
    with tempfile.TemporaryDirectory() as logs:  # catboost's training logs, else ./catboost_info
        model = catboost.CatBoostClassifier(
            iterations=trees,
            depth=6,
            loss_function="MultiClass",
            verbose=False,
            random_seed=0,
            train_dir=logs,
        ).fit(x, y)
    model.save_model(str(target), format="onnx")


def float16_of(base: Callable[[], Path]) -> Callable[[Path], None]:
    """A builder of ``base``'s model in float16 throughout (onnxconverter-common, inputs and
    outputs too), as users make fp16 models for smaller files."""

    def build(target: Path) -> None:
        from onnxconverter_common import float16

        model = onnx.load(base())
        onnx.save(float16.convert_float_to_float16(model, keep_io_types=False), target)

    return build


def quantized_of(
    base: Callable[[], Path], mode: str, feeds: Callable[[], dict]
) -> Callable[[Path], None]:
    """A builder of ``base``'s model quantized by onnxruntime.quantization: ``"dynamic"``
    (MatMulInteger / ConvInteger, int8 weights), ``"qdq"`` (static QuantizeLinear /
    DequantizeLinear pairs) or ``"qoperator"`` (static, QLinearConv and the other QLinear*
    operators), the static ones calibrated on four draws of ``feeds``."""

    def build(target: Path) -> None:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_dynamic,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        prepared = target.with_suffix(".pre.onnx")
        quant_pre_process(str(base()), str(prepared), skip_symbolic_shape=True)
        if mode == "dynamic":
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
            return

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.left = [feeds() for _ in range(4)]

            def get_next(self) -> dict | None:
                return self.left.pop() if self.left else None

        quantize_static(
            str(prepared),
            str(target),
            Reader(),
            quant_format=QuantFormat.QOperator if mode == "qoperator" else QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )

    return build


#: Sizes of the Hugging Face architectures: a small one and a realistic one.
HF_SIZES = {
    "tiny": {"hidden": 128, "layers": 2, "heads": 2, "vocab": 1000},
    "base": {"hidden": 768, "layers": 12, "heads": 12, "vocab": 30522},
}
#: Tokens per sequence fed to the transformer models.
SEQUENCE = 128


def hf_transformer(arch: str, size: str, exporter: str) -> Callable[[Path], None]:
    """A builder of a Hugging Face ``arch`` ("bert" or "gpt2") from a random-init config of
    ``size``, exported by torch.onnx with ``exporter`` ("torchscript" or "dynamo")."""

    def build(target: Path) -> None:
        import torch

        torch.manual_seed(0)
        model, names, outputs = _hf_model(arch, HF_SIZES[size])
        ids = torch.randint(0, HF_SIZES[size]["vocab"], (1, SEQUENCE))
        args = (ids, torch.ones_like(ids))
        dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
        with torch.no_grad():
            torch.onnx.export(
                model,
                args,
                str(target),
                input_names=names,
                output_names=outputs,
                dynamic_axes=dynamic,
                opset_version=18,
                dynamo=exporter == "dynamo",
            )
        onnx.save(onnx.load(str(target)), str(target))  # one file, external data read in

    return build


def _hf_model(arch: str, size: dict) -> tuple[object, list[str], list[str]]:
    import transformers

    h, layers, heads, vocab = size["hidden"], size["layers"], size["heads"], size["vocab"]
    names = ["input_ids", "attention_mask"]
    if arch == "bert":
        config = transformers.BertConfig(
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * h,
            vocab_size=vocab,
        )
        model = transformers.BertModel(config, add_pooling_layer=False).eval()
        return _one_tensor_module(model, "last_hidden_state"), names, ["last_hidden_state"]
    config = transformers.GPT2Config(n_embd=h, n_layer=layers, n_head=heads, vocab_size=vocab)
    model = transformers.GPT2LMHeadModel(config).eval()
    return _one_tensor_module(model, "logits", use_cache=False), names, ["logits"]


def _one_tensor_module(model: object, output: str, **kwargs: object) -> object:
    """``model`` as a module returning its one tensor ``output`` (exporters want tensors)."""
    import torch

    class OneTensor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            result = self.inner(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            return getattr(result, output)

    return OneTensor().eval()


def nbits_of(base: Callable[[], Path]) -> Callable[[Path], None]:
    """A builder of ``base``'s model with its MatMuls' constant weights in 4 bits, blocks of
    32 (onnxruntime's MatMulNBitsQuantizer: ``MatMulNBits`` nodes), as users shrink LLMs."""

    def build(target: Path) -> None:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(onnx.load(base()), bits=4, block_size=32)
        quantizer.process()
        quantizer.model.save_model_to_file(str(target), use_external_data_format=False)

    return build


#: The CRNN stand-in's input: one grey text line, height and width.
CRNN_IMAGE = (32, 128)


def crnn(target: Path) -> None:
    """A CRNN text recognizer (three conv blocks to a height of 1, a bidirectional LSTM over
    the 32 columns, a linear layer to 37 classes), random-init in torch, exported by
    torch.onnx (opset 17, an ONNX LSTM)."""
    import torch
    from torch import nn

    class Crnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            blocks = []
            for c_in, c_out, pool in ((1, 32, (2, 2)), (32, 64, (2, 2)), (64, 128, (8, 1))):
                blocks += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(pool)]
            self.features = nn.Sequential(*blocks)
            self.rnn = nn.LSTM(128, 96, bidirectional=True)
            self.classes = nn.Linear(192, 37)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            columns = self.features(x).squeeze(2).permute(2, 0, 1)  # [W, N, C]
            return self.classes(self.rnn(columns)[0])

    torch.manual_seed(0)
    with torch.no_grad():
        torch.onnx.export(
            Crnn().eval(), (torch.rand(1, 1, *CRNN_IMAGE),), str(target), input_names=["x"],
            output_names=["logits"], opset_version=17, dynamo=False,
        )  # fmt: skip
