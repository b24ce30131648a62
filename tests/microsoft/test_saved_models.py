"""Models onnxruntime optimized and saved (SessionOptions.optimized_model_filepath) at the
basic, extended and all levels run in onnxflow as their originals run in onnxruntime: a
ResNet-style CNN, a MobileNet-style one, an MLP and a one-layer BERT stand-in. Built by
make_saved_models.py; the "all" level's NCHWc weights are blocked by 16 (AVX-512): the
ResNet's shapes tell it, the MobileNet's fit 8 as well."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxflow
from onnxflow.ops.microsoft.nchwc import machine_block_size, model_block_size

DATA = Path(__file__).parent / "data" / "saved"
MS, NCHWC = "com.microsoft", "com.microsoft.nchwc"
#: The block size of the machine that saved the "all" models.
SAVED_BLOCK = 16

#: (model, level) -> the fused operators the saved model must hold
FUSED = {
    ("resnet", "basic"): set(),
    ("resnet", "extended"): {(MS, "FusedConv")},
    ("resnet", "all-no-nchwc"): {(MS, "FusedConv")},
    ("resnet", "all"): {
        (NCHWC, op) for op in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Upsample")
    }
    | {(NCHWC, "ReorderOutput")},
    ("mobilenet", "basic"): set(),
    ("mobilenet", "extended"): {(MS, "FusedConv")},
    ("mobilenet", "all"): {
        (NCHWC, op) for op in ("ReorderInput", "Conv", "Upsample", "MaxPool", "ReorderOutput")
    },
    ("mlp", "basic"): set(),
    ("mlp", "extended"): {(MS, "FusedGemm"), (MS, "FusedMatMul")},
    ("mlp", "all"): {(MS, "FusedGemm"), (MS, "FusedMatMul")},
    ("bert", "all"): {(MS, "FusedMatMul"), (MS, "BiasGelu")},
}


def _feeds(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    feeds = {}
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:  # BERT: (batch, 8) tokens
            value = rng.integers(0, 50, (batch, 8))
            feeds[vi.name] = np.ones_like(value) if vi.name == "attention_mask" else value
        else:
            shape = [batch, *(d.dim_value for d in dims[1:])]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _run_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


@pytest.mark.parametrize("name, level", FUSED, ids=[f"{n}_{lv}" for n, lv in FUSED])
def test_saved_model_holds_its_fusions(name: str, level: str) -> None:
    ops = {(n.domain, n.op_type) for n in onnx.load(DATA / f"{name}_{level}.onnx").graph.node}
    custom = {(d, op) for d, op in ops if d in (MS, NCHWC)}
    assert FUSED[name, level] <= custom
    if not FUSED[name, level]:
        assert not custom, f"the basic level fuses nothing onnxruntime-specific: {custom}"


def test_fused_conv_takes_the_residual_as_z_without_nchwc() -> None:
    model = onnx.load(DATA / "resnet_all-no-nchwc.onnx")
    with_z = [n for n in model.graph.node if n.op_type == "FusedConv" and len(n.input) == 4]
    assert len(with_z) == 1 and with_z[0].input[3]


@pytest.mark.parametrize("name, level", FUSED, ids=[f"{n}_{lv}" for n, lv in FUSED])
@pytest.mark.parametrize("batch", [1, 3])
def test_saved_model_matches_the_original_in_onnxruntime(name, level, batch) -> None:
    if (name, level) == ("mobilenet", "all") and machine_block_size() != SAVED_BLOCK:
        pytest.skip(
            f"weights blocked by {SAVED_BLOCK}; this machine blocks by {machine_block_size()}, "
            "so onnxflow, like onnxruntime, reads them as that"
        )
    original = DATA / f"{name}.onnx"
    feeds = _feeds(onnx.load(original), batch)
    theirs = _run_ort(original, feeds)
    ours = onnxflow.InferenceSession(str(DATA / f"{name}_{level}.onnx")).run(None, feeds)
    assert ours[0].shape == theirs[0].shape and ours[0].dtype == theirs[0].dtype
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-5)


def test_block_size_is_told_by_the_resnets_weights() -> None:
    assert model_block_size(onnx.load(DATA / "resnet_all.onnx").graph, 8) == SAVED_BLOCK
    assert model_block_size(onnx.load(DATA / "mobilenet_all.onnx").graph, 8) == 8


@pytest.mark.skipif(
    machine_block_size() != SAVED_BLOCK,
    reason=f"onnxruntime reads the weights blocked by {SAVED_BLOCK} with this machine's block",
)
@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_nchwc_model_matches_onnxruntime_running_it(name: str) -> None:
    """The saved NCHWc model itself, in onnxruntime."""
    path = DATA / f"{name}_all.onnx"
    feeds = _feeds(onnx.load(path), 2)
    ours = onnxflow.InferenceSession(str(path)).run(None, feeds)
    np.testing.assert_allclose(ours[0], _run_ort(path, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 3])
def test_quantized_model_runs_its_max_pool_channels_last_as_onnxruntime(batch: int) -> None:
    """A uint8 QDQ ResNet saved at the all level: QLinearConv and the other QOperator kernels
    around an NhwcMaxPool; onnxruntime runs the original with the same integer kernels."""
    saved = onnx.load(DATA / "resnet_qdq_all.onnx")
    assert (MS, "NhwcMaxPool") in {(n.domain, n.op_type) for n in saved.graph.node}
    feeds = _feeds(saved, batch)
    original = str(DATA / "resnet_qdq.onnx")
    theirs = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxflow.InferenceSession(saved).run(None, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=1e-6)
