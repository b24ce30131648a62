"""Batch scoring beyond one process: a session shipped to Dask workers, mapped over blocks.

The session travels pickled (by its model's bytes, see ``InferenceSession.__reduce__``) to two
worker processes of a local cluster; each block is scored there and the assembled result must
equal one direct run over the whole array.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import onnxflow

da = pytest.importorskip("dask.array", reason="dask[array,distributed] is a test dependency")
distributed = pytest.importorskip(
    "dask.distributed", reason="dask[array,distributed] is a test dependency"
)
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx is a test dependency")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    """Two single-threaded worker processes with small memory limits; closed after the tests."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit="400MiB",
            dashboard_address=":0",  # any free port: two test runs at once must not collide
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def _knn_session() -> tuple[onnxflow.InferenceSession, object]:
    """A scikit-learn KNN regressor converted by skl2onnx (its distances are a Scan)."""
    from sklearn.neighbors import KNeighborsRegressor

    rng = np.random.default_rng(0)
    x = rng.random((200, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0])).astype(np.float32)
    est = KNeighborsRegressor(n_neighbors=3).fit(x, y)
    onx = skl2onnx.to_onnx(est, x[:1], target_opset={"": 18, "ai.onnx.ml": 1})
    return onnxflow.InferenceSession(onx), est  # built from a ModelProto: no file to reload


def _predict(block: np.ndarray, sess: onnxflow.InferenceSession) -> np.ndarray:
    distributed.get_worker()  # raises unless this block is scored on a worker
    (pred,) = sess.run(None, {"X": block})
    return pred


def _where(block: np.ndarray, sess: onnxflow.InferenceSession) -> np.ndarray:
    """The worker process and the session object that scored this block."""
    return np.array([[os.getpid(), id(sess)]], np.int64)


def test_knn_scored_over_blocks_on_worker_processes_matches_one_direct_run(
    client: distributed.Client,
) -> None:
    sess, est = _knn_session()
    queries = np.random.default_rng(1).random((4000, 4)).astype(np.float32)
    x = da.from_array(queries, chunks=(500, 4))
    shipped = client.scatter(sess, broadcast=True)  # pickled once, unpickled once per worker
    pred = x.map_blocks(_predict, shipped, chunks=(x.chunks[0], (1,)), dtype=np.float32)
    (direct,) = sess.run(None, {"X": queries})
    np.testing.assert_allclose(pred.compute(), direct, rtol=1e-6, atol=0)
    np.testing.assert_allclose(direct[:, 0], est.predict(queries), rtol=1e-5, atol=1e-5)

    where = x.map_blocks(_where, shipped, chunks=((1,) * x.numblocks[0], (2,)), dtype=np.int64)
    pids, sessions = where.compute().T
    workers = set(client.run(os.getpid).values())
    assert len(workers) == 2 and os.getpid() not in workers
    assert set(pids) <= workers
    assert len(set(zip(pids, sessions))) == len(set(pids)), "one session per worker process"


def _rnn(x: np.ndarray, h0: np.ndarray, sess: onnxflow.InferenceSession) -> np.ndarray:
    distributed.get_worker()
    (y,) = sess.run(["Y"], {"X": x, "H_0": h0[0]})
    return y


def test_spec_rnn_scan_mapped_over_batch_blocks_matches_one_direct_run(
    client: distributed.Client,
) -> None:
    sess = onnxflow.InferenceSession(EXAMPLES / "rnn_scan.onnx")
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((6, 64, 4)).astype(np.float32)  # (sequence, batch, features)
    h0 = rng.standard_normal((64, 8)).astype(np.float32)
    # Blocks split the batch only: each Scan needs its whole sequence.
    x = da.from_array(xs, chunks=(6, 16, 4))
    h = da.from_array(h0[None], chunks=(1, 16, 8))  # aligned with x's blocks: (0, j, 0)
    # The session passed as is is pickled with the task graph (unpickled once per block).
    y = da.map_blocks(
        _rnn, x, h, sess=sess, chunks=(x.chunks[0], x.chunks[1], (8,)), dtype=xs.dtype
    )
    (direct,) = sess.run(["Y"], {"X": xs, "H_0": h0})
    np.testing.assert_allclose(y.compute(), direct, rtol=1e-6, atol=1e-7)
