"""Models exported by skl2onnx that use Scan: run them, and run the CLI on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnxflow
from onnxflow.cli import count_ops, main

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is a test dependency")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx is a test dependency")


def _knn_model(opset: int):
    from sklearn.neighbors import KNeighborsRegressor

    rng = np.random.default_rng(0)
    x = rng.random((60, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0])).astype(np.float32)
    est = KNeighborsRegressor(n_neighbors=3).fit(x, y)
    onx = skl2onnx.to_onnx(est, x[:1], target_opset={"": opset, "ai.onnx.ml": 1})
    return est, onx, rng.random((7, 4)).astype(np.float32)


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_knn_regressor_scan_matches_sklearn(opset: int) -> None:
    est, onx, queries = _knn_model(opset)
    assert count_ops(onx.graph)["Scan"] == 1, "the exported model should compute distances by Scan"
    sess = onnxflow.InferenceSession(onx)
    (pred,) = sess.run(None, {sess.get_inputs()[0].name: queries})
    np.testing.assert_allclose(pred.reshape(-1), est.predict(queries), rtol=1e-5, atol=1e-5)


def test_cli_check_and_run_on_a_skl2onnx_scan_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, onx, queries = _knn_model(18)
    path = tmp_path / "knn.onnx"
    path.write_bytes(onx.SerializeToString())
    assert main(["check", str(path)]) == 0
    report = capsys.readouterr().out
    assert "Scan: 1" in report and "problems found: none" in report
    name = onnxflow.InferenceSession(onx).get_inputs()[0].name
    np.save(tmp_path / "x.npy", queries)
    out_dir = tmp_path / "out"
    assert (
        main(
            [
                "run",
                str(path),
                "--input",
                f"{name}=" + str(tmp_path / "x.npy"),
                "--output-dir",
                str(out_dir),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "output variable: float32 [7, 1]" in printed
    assert (out_dir / "variable.npy").exists()
