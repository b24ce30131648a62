"""The real-model tier of the bench: models nobody here wrote, made the way users make them.

    python -m onnxflow.bench --zoo                     # every zoo model that can be made here
    python -m onnxflow.bench --zoo --only ppocr_cls    # one model (names or prefixes)
    python -m onnxflow.bench --zoo --list              # the models, their kinds and sizes
    python -m onnxflow.bench --zoo --threads 1         # every engine on one intra-op thread

Each engine runs each model in a process of its own (:mod:`.engine`): it builds its session,
runs once (the warm-up, whose outputs are checked against onnxruntime's), then times steady
runs. The engines take turns, in two rounds in opposite order, so a slow spell of the machine
falls on more than one of them; the time is the median over both rounds' samples. Because no two
engines share a process, onnxruntime's spinning threads and OpenBLAS's threads never compete
for the two cores within one measurement. onnx.reference gets one short round, reported as
ref/flow. Every engine process runs without the OpenBLAS pin (:mod:`onnxflow.bench.process`),
and each reports its session creation and first run, the "first run" columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from onnxflow.bench.zoo import builders, models, transformer
from onnxflow.bench.zoo.sources import Built, Code, Source, Wheel, model_path

Feeds = Callable[[], dict[str, np.ndarray]]


@dataclass(frozen=True)
class ZooModel:
    """A zoo model: its name, kind, where it comes from, and the feeds it is timed on."""

    name: str
    kind: str
    source: Source
    feeds: Feeds
    size: str
    tolerance: tuple[float, float] = (1e-3, 1e-4)
    #: "ci": small enough for CI's smoke run; "rows": its feeds are rows (axis 0 of every feed,
    #: ROWS of them), so ``at_rows`` can time it at other row counts.
    tags: tuple[str, ...] = field(default=())
    #: SessionOptions fields onnxflow's session is made with (the other engines have none),
    #: and ``("steps", N)``: every engine times a generation loop of N calls (engine.generation).
    options: tuple[tuple[str, object], ...] = ()

    def path(self) -> str:
        """The model file, made on first use (may raise sources.Unavailable); ``at_rows``'s
        ``name@rows`` is the same file as ``name``."""
        return str(model_path(self.name.partition("@")[0], self.source))


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _vad_feeds() -> dict[str, np.ndarray]:
    return {
        "input": (_rng().standard_normal((1, 512)) * 0.1).astype(np.float32),
        "state": np.zeros((2, 1, 128), np.float32),
        "sr": np.array(16000, np.int64),
    }


def _image(h: int, w: int) -> Feeds:
    return lambda: {"x": _rng().random((1, 3, h, w), dtype=np.float32)}


def _magika_feeds() -> dict[str, np.ndarray]:
    return {"bytes": _rng().integers(0, 257, (1, 2048)).astype(np.int32)}


#: The rows a tree model is timed on, unless the bench is asked for others (``--rows``).
ROWS = 1000


def _tree_feeds(name: str = "input", rows: int = ROWS) -> dict[str, np.ndarray]:
    return {name: _rng().standard_normal((rows, builders.TREE_FEATURES)).astype(np.float32)}


def _tokens() -> dict[str, np.ndarray]:
    ids = _rng().integers(0, builders.HF_SIZES["tiny"]["vocab"], (1, builders.SEQUENCE))
    return {"input_ids": ids.astype(np.int64), "attention_mask": np.ones_like(ids, np.int64)}


def _hf(arch: str, size: str, exporter: str) -> ZooModel:
    short = {"torchscript": "ts", "dynamo": "dynamo"}[exporter]
    dims = builders.HF_SIZES[size]
    return ZooModel(
        f"{arch}_{size}_{short}",
        "transformer",
        Built(builders.hf_transformer(arch, size, exporter)),
        _tokens,
        f"{dims['layers']} layers x {dims['hidden']}, {builders.SEQUENCE} tokens, {exporter}",
        tolerance=(1e-3, 1e-3),
    )


def _half(feeds: Feeds) -> Feeds:
    return lambda: {
        k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds().items()
    }


#: Tokens the generation-loop row generates per timed call.
GENERATED = 16
_SILERO = "silero-vad", "6.2.3"
_RAPIDOCR = "rapidocr-onnxruntime", "1.4.4"
_CLS = Wheel(*_RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
_CLS_FEEDS = _image(48, 192)


def _cls_path() -> str:
    return str(model_path("ppocr_cls", _CLS))


def _gpt2_tiny_path() -> str:
    return str(model_path("gpt2_tiny_ts", BY_NAME["gpt2_tiny_ts"].source))


def _bert_tiny_path() -> str:
    return str(model_path("bert_tiny_ts", BY_NAME["bert_tiny_ts"].source))


def _crnn_path() -> str:
    return str(model_path("crnn_standin", Built(builders.crnn)))


def _crnn_feeds() -> dict[str, np.ndarray]:
    return {"x": _rng().random((1, 1, *builders.CRNN_IMAGE), dtype=np.float32)}


def _cls_fp16(name: str, rounding: str) -> ZooModel:
    """PP-OCR cls in float16, run with ``SessionOptions.float16_rounding=rounding``."""
    size = "1x3x48x192, float16" + ("" if rounding == "each_op" else f", {rounding!r} rounding")
    return ZooModel(
        name,
        "float16",
        Built(builders.float16_of(_cls_path)),
        _half(_CLS_FEEDS),
        size,
        tolerance=(2e-2, 2e-2),
        options=(("float16_rounding", rounding),),
    )


ZOO: tuple[ZooModel, ...] = (
    ZooModel(
        "silero_vad",
        "streaming",
        Wheel(*_SILERO, "silero_vad/data/silero_vad.onnx"),
        _vad_feeds,
        "512 samples, 16 kHz (If on the rate)",
    ),
    ZooModel(
        "silero_vad_op15",
        "streaming",
        Wheel(*_SILERO, "silero_vad/data/silero_vad_16k_op15.onnx"),
        _vad_feeds,
        "512 samples, 16 kHz",
    ),
    ZooModel(
        "ppocr_det",
        "conv",
        Wheel(*_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
        _image(480, 480),
        "1x3x480x480",
    ),
    ZooModel(
        "ppocr_rec",
        "conv",
        Wheel(*_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
        _image(48, 320),
        "1x3x48x320",
    ),
    ZooModel("ppocr_cls", "conv", _CLS, _CLS_FEEDS, "1x3x48x192"),
    ZooModel(
        "magika",
        "conv",
        Wheel("magika", "1.0.3", "magika/models/standard_v3_3/model.onnx"),
        _magika_feeds,
        "1x2048 bytes",
    ),
    _cls_fp16("ppocr_cls_fp16", "each_op"),
    _cls_fp16("ppocr_cls_fp16_f32", "outputs"),
    ZooModel(
        "ppocr_cls_qdq",
        "quantized",
        Built(builders.quantized_of(_cls_path, "qdq", _CLS_FEEDS)),
        _CLS_FEEDS,
        "1x3x48x192, static QDQ u8/s8",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "ppocr_cls_dynamic",
        "quantized",
        Built(builders.quantized_of(_cls_path, "dynamic", _CLS_FEEDS)),
        _CLS_FEEDS,
        "1x3x48x192, dynamic s8",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "lightgbm_3class",
        "trees",
        Built(builders.lightgbm_classifier),
        _tree_feeds,
        "100 trees x 3 classes, 1000 rows",
        tags=("rows",),
    ),
    ZooModel(
        "xgboost_3class",
        "trees",
        Built(builders.xgboost_classifier),
        _tree_feeds,
        "100 trees x 3 classes, 1000 rows",
        tags=("rows",),
    ),
    ZooModel(
        "catboost_3class",
        "trees",
        Built(builders.catboost_classifier),
        partial(_tree_feeds, "features"),
        "100 trees x 3 classes, 1000 rows, catboost's exporter",
        tags=("rows",),
    ),
    _hf("bert", "tiny", "torchscript"),
    _hf("bert", "tiny", "dynamo"),
    _hf("gpt2", "tiny", "torchscript"),
    _hf("gpt2", "tiny", "dynamo"),
    _hf("bert", "base", "torchscript"),
    _hf("gpt2", "base", "dynamo"),
    ZooModel(
        "gpt2_tiny_ts_fp16",
        "float16",
        Built(builders.float16_of(_gpt2_tiny_path)),
        _tokens,
        f"gpt2_tiny_ts in float16 (onnxconverter-common), {builders.SEQUENCE} tokens",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "sklearn_forest_pipeline",
        "trees",
        Built(builders.forest_pipeline),
        _tree_feeds,
        "StandardScaler + 100 trees depth 10 x 3 classes, 1000 rows, skl2onnx (ZipMap)",
        tags=("rows",),
    ),
    ZooModel(
        "xgboost_regressor",
        "trees",
        Built(builders.xgboost_regressor),
        _tree_feeds,
        "100 trees depth 6, 1000 rows",
        tags=("rows",),
    ),
    ZooModel(
        "ppocr_cls_qop",
        "quantized",
        Built(builders.quantized_of(_cls_path, "qoperator", _CLS_FEEDS)),
        _CLS_FEEDS,
        "1x3x48x192, static QOperator u8/s8 (QLinearConv)",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "ppocr_cls_ort_fused",
        "conv",
        Built(builders.ort_optimized_of(_cls_path)),
        _CLS_FEEDS,
        "1x3x48x192, saved by onnxruntime at ORT_ENABLE_EXTENDED (FusedConv)",
    ),
    ZooModel(
        "crnn_dynamic",
        "quantized",
        Built(builders.quantized_of(_crnn_path, "dynamic", _crnn_feeds)),
        _crnn_feeds,
        "1x1x32x128 text line, torch CRNN (3 convs, BiLSTM), dynamic s8 (ConvInteger, "
        "DynamicQuantizeLSTM)",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "bert_tiny_nbits",
        "quantized",
        Built(builders.nbits_of(_bert_tiny_path)),
        _tokens,
        f"bert_tiny_ts with 4-bit weights (12 MatMulNBits, blocks of 32), {builders.SEQUENCE} "
        "tokens",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "transformer_standin_past",
        "transformer",
        Code(transformer.transformer_standin_past),
        transformer.transformer_standin_past_feeds,
        f"in code: one decode step, 1 token after {transformer.PAST} cached (past key/values)",
    ),
    ZooModel(
        "transformer_standin_generate",
        "transformer",
        Code(transformer.transformer_standin_past),
        transformer.transformer_standin_past_feeds,
        f"in code: a greedy generation loop of {GENERATED} tokens after {transformer.PAST} "
        "cached, present key/values fed back as past",
        options=(("steps", GENERATED),),
    ),
    ZooModel(
        "transformer_standin_fp16",
        "float16",
        Code(transformer.transformer_standin_fp16),
        transformer.transformer_standin_feeds,
        "in code: the transformer stand-in in float16",
        tolerance=(2e-2, 2e-2),
    ),
    ZooModel(
        "streaming_standin",
        "streaming",
        Code(models.streaming_standin),
        models.streaming_standin_feeds,
        "in code: Conv1d 64 taps, If, LSTM",
        tags=("ci",),
    ),
    ZooModel(
        "transformer_standin",
        "transformer",
        Code(transformer.transformer_standin),
        transformer.transformer_standin_feeds,
        f"in code: {transformer.LAYERS} layers x {transformer.HIDDEN}, dynamic shapes",
        tags=("ci",),
    ),
)

BY_NAME = {m.name: m for m in ZOO}


def at_rows(model: ZooModel, rows: int) -> ZooModel:
    """``model`` timed on ``rows`` rows: its feeds' first axis cycled to that length (the
    first ROWS rows repeat), its name suffixed ``@rows``. Only for models tagged "rows"."""
    if "rows" not in model.tags:
        raise ValueError(f"zoo model {model.name!r} has no rows axis (tags {model.tags})")
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")

    def feeds() -> dict[str, np.ndarray]:
        return {k: np.take(v, np.arange(rows) % len(v), axis=0) for k, v in model.feeds().items()}

    size = model.size.replace(f"{ROWS} rows", f"{rows:,} row" + ("s" if rows > 1 else ""))
    return replace(model, name=f"{model.name}@{rows}", feeds=feeds, size=size)
