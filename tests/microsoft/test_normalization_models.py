"""Models fused by onnxruntime's transformer optimizer (attention fusion off) run in onnxflow as
in onnxruntime: the embedding, skip and simplified layer normalizations, the default-domain
LayerNormalization and SimplifiedLayerNormalization under opset 14, BiasGelu and FastGelu.
Built by make_normalization_models.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxflow

DATA = Path(__file__).parent / "data"
VOCAB = 50

#: model -> the operators its fusion made, which the test relies on it holding
FUSED = {
    "bert_embed_opt.onnx": {
        ("com.microsoft", "EmbedLayerNormalization"),
        ("com.microsoft", "SkipLayerNormalization"),
        ("com.microsoft", "BiasGelu"),
    },
    "decoder_norms_opt.onnx": {
        ("", "SimplifiedLayerNormalization"),
        ("", "LayerNormalization"),
        ("com.microsoft", "FastGelu"),
        ("com.microsoft", "SkipLayerNormalization"),
        ("com.microsoft", "SkipSimplifiedLayerNormalization"),
    },
}


def _feeds(model: onnx.ModelProto, batch: int, sequence: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + sequence)
    feeds = {}
    for vi in model.graph.input:
        high = 2 if vi.name == "token_type_ids" else VOCAB
        feeds[vi.name] = rng.integers(0, high, (batch, sequence)).astype(np.int64)
    return feeds


@pytest.mark.parametrize("name", FUSED)
@pytest.mark.parametrize("batch, sequence", [(2, 8), (1, 3), (3, 16)])
def test_fused_model_matches_onnxruntime(name: str, batch: int, sequence: int) -> None:
    path = DATA / name
    model = onnx.load(path)
    assert FUSED[name] <= {(n.domain, n.op_type) for n in model.graph.node}
    assert {o.domain: o.version for o in model.opset_import}[""] == 14
    feeds = _feeds(model, batch, sequence)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxflow.InferenceSession(str(path)).run(None, feeds)
    assert ours[0].shape == (batch, sequence, 32) and ours[0].dtype == np.float32
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
