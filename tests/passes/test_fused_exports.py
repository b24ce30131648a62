"""The norm and MatMul-bias fusions on real exports (tests/exporters/data, the transformer
optimizer's models in tests/microsoft/data): every output unchanged, bitwise with the NumPy
forms, within a bound with the compiled ones; the fused nodes there where the export writes
the patterns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxflow

TESTS = Path(__file__).parents[1]
EXPORTS = sorted(p.stem for p in (TESTS / "exporters" / "data").glob("*.onnx"))
OPTIMIZED = {  # model file -> feeds in transformer_inputs.npz
    "bert_optimized": "bert",
    "bert_mha_optimized": "bert",
    "gpt2_past_optimized": "gpt2",
    "llama_gqa": "llama_prompt",
}

#: Whole models with the compiled norms differ from the nodes as written by the norms' few
#: ulps (tests/native/test_native_fuse.py), carried through the layers after them.
MODEL_RTOL = 1e-4
MODEL_ATOL = 1e-5

#: The fused nodes each export must hold (the others: none needed). Of the six linear
#: layers' bias Adds, the pointwise regions take four (linear1's with its Relu, linear2's with
#: the residual Add); the two attention in-projections' stay for MatMulBias.
EXPECTED = {
    "transformer_torchscript_opset14": {"PrimitiveLayerNorm": 4, "MatMulBias": 2},
    "transformer_torchscript_default": {"MatMulBias": 2},
}


def _export_feeds(stem: str, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    with np.load(TESTS / "exporters" / "data" / f"{stem}.npz") as data:
        arrays = dict(data)
    names = [i.name for i in model.graph.input]
    return {n: arrays[f"in0_{k}"] for k, n in enumerate(names) if f"in0_{k}" in arrays}


def _optimized_feeds(case: str) -> dict[str, np.ndarray]:
    with np.load(TESTS / "microsoft" / "data" / "transformer_inputs.npz") as data:
        prefix = f"{case}."
        return {k[len(prefix) :]: data[k] for k in data.files if k.startswith(prefix)}


def _compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> str:
    """Run ``model`` four ways and compare; return the fused session's source."""
    data = model.SerializeToString()
    runs, source = {}, ""
    for kernels in ("numpy", "native"):
        for optimize in (True, False):
            opts = onnxflow.SessionOptions(kernels=kernels, optimize=optimize)
            session = onnxflow.InferenceSession(data, opts)
            runs[kernels, optimize] = session.run(None, feeds)
            if kernels == "native" and optimize:
                source = session.source()
    for a, b in zip(runs["numpy", True], runs["numpy", False], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(runs["native", True], runs["native", False], strict=True):
        np.testing.assert_allclose(a, b, rtol=MODEL_RTOL, atol=MODEL_ATOL)
    return source


@pytest.mark.parametrize("stem", EXPORTS)
def test_export_unchanged_by_the_fusions(stem):
    model = onnx.load(TESTS / "exporters" / "data" / f"{stem}.onnx")
    source = _compare(model, _export_feeds(stem, model))
    for op_type, count in EXPECTED.get(stem, {}).items():
        assert source.count(f"for {op_type} ") == count, op_type


@pytest.mark.parametrize("name", list(OPTIMIZED))
def test_optimized_model_unchanged_by_the_fusions(name):
    model = onnx.load(TESTS / "microsoft" / "data" / f"{name}.onnx")
    _compare(model, _optimized_feeds(OPTIMIZED[name]))
