"""Whole transformer models as onnxruntime's transformer optimizer and onnxruntime-genai's
model builder leave them, run in onnxflow and in onnxruntime and compared.

The models and their feeds are built by ``make_transformer_models.py`` (tiny, random
weights); each test first asserts the model holds the fused operators it is meant to test.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxflow

DATA = Path(__file__).parent / "data"

_LLAMA_OPS = {
    "GroupQueryAttention": 2,
    "SkipSimplifiedLayerNormalization": 4,
    "SimplifiedLayerNormalization": 1,
}

#: case -> (model file, feeds, the com.microsoft and onnxruntime-only operators it must hold)
CASES = {
    "bert": (
        "bert_optimized",
        "bert",
        {"Attention": 2, "EmbedLayerNormalization": 1, "SkipLayerNormalization": 4, "BiasGelu": 2},
    ),
    "bert_mha": (
        "bert_mha_optimized",
        "bert",
        {"MultiHeadAttention": 2, "EmbedLayerNormalization": 1, "SkipLayerNormalization": 4},
    ),
    "gpt2": (
        "gpt2_past_optimized",
        "gpt2",
        {"Attention": 2, "EmbedLayerNormalization": 1, "SkipLayerNormalization": 4, "FastGelu": 2},
    ),
    "llama_prompt": ("llama_gqa", "llama_prompt", _LLAMA_OPS),
    "llama_step": ("llama_gqa", "llama_step", _LLAMA_OPS),
}


def _feeds(case: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "transformer_inputs.npz") as data:
        prefix = f"{case}."
        return {k[len(prefix) :]: data[k] for k in data.files if k.startswith(prefix)}


@pytest.mark.parametrize("case", list(CASES))
def test_model_holds_the_fused_operators(case: str) -> None:
    name, _, expected = CASES[case]
    model = onnx.load(DATA / f"{name}.onnx")
    counts = collections.Counter(n.op_type for n in model.graph.node)
    assert {op: counts[op] for op in expected} == expected


@pytest.mark.parametrize("case", list(CASES))
def test_onnxflow_gives_onnxruntimes_outputs(case: str) -> None:
    name, feeds_of, _ = CASES[case]
    path = str(DATA / f"{name}.onnx")
    feeds = _feeds(feeds_of)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    theirs = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session = onnxflow.InferenceSession(path)
    expected = theirs.run(None, feeds)
    got = session.run(None, feeds)
    names = [o.name for o in theirs.get_outputs()]
    for name, a, b in zip(names, got, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)
