"""One session, many threads at once; a session pickles by its model and runs in other processes."""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from model_builders import I64, B, F, const, model, vi
from onnx import helper

import onnxflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
THREADS = 8


def mixed_model() -> onnx.ModelProto:
    """MatMul with a constant, a Loop summing rows, an If on the sign of the sum, a Scan."""
    loop_body = helper.make_graph(
        [
            helper.make_node("Gather", ["H", "i"], ["row"], axis=0),
            helper.make_node("Add", ["acc", "row"], ["acc_out"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "loop_body",
        [vi("i", I64, []), vi("c", B, []), vi("acc", F, [4])],
        [vi("c_out", B, []), vi("acc_out", F, [4])],
    )
    scan_body = helper.make_graph(
        [helper.make_node("Mul", ["s", "x"], ["s_out"]), helper.make_node("Neg", ["x"], ["y"])],
        "scan_body",
        [vi("s", F, [4]), vi("x", F, [4])],
        [vi("s_out", F, [4]), vi("y", F, [4])],
    )
    then = helper.make_graph(
        [helper.make_node("Relu", ["total"], ["r"])], "then", [], [vi("r", F, [4])]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["total"], ["a"])], "else", [], [vi("a", F, [4])]
    )
    scan = helper.make_node(
        "Scan", ["ones", "H"], ["prod", "negH"], body=scan_body, num_scan_inputs=1
    )
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["H"]),
        helper.make_node("Shape", ["X"], ["shape"], start=0, end=1),
        helper.make_node("Squeeze", ["shape"], ["rows"]),
        helper.make_node("Loop", ["rows", "", "zeros"], ["total"], body=loop_body),
        helper.make_node("ReduceSum", ["total"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["picked"], then_branch=then, else_branch=other),
        scan,
    ]
    rng = np.random.default_rng(0)
    inits = [
        const("W", rng.standard_normal((3, 4)).astype(np.float32)),
        const("zeros", np.zeros(4, np.float32)),
        const("ones", np.ones(4, np.float32)),
        const("zero", np.float32(0)),
    ]
    outputs = [vi("total", F, [4]), vi("picked", F, [4]), vi("prod", F, [4]), vi("negH", F, None)]
    return model(nodes, [vi("X", F, ["N", 3])], outputs, inits)


def reference(x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    h = x @ w
    total = h.sum(axis=0, dtype=np.float32) if len(h) else np.zeros(4, np.float32)
    picked = np.maximum(total, 0) if total.sum() > 0 else np.abs(total)
    return [total, picked, np.prod(h, axis=0), -h]


def feeds_for(k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + k)
    return {"X": rng.standard_normal((k % 5 + 1, 3)).astype(np.float32)}


def assert_close(got: list[Any], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_one_session_many_threads() -> None:
    m = mixed_model()
    w = onnx.numpy_helper.to_array(m.graph.initializer[0])
    sess = onnxflow.InferenceSession(m)  # fresh: the first runs race to prepare the plan
    start = threading.Barrier(THREADS)

    def work(t: int) -> int:
        start.wait()
        for k in range(t, t + 40):
            feeds = feeds_for(k)
            assert_close(sess.run(None, feeds), reference(feeds["X"], w))
        return t

    with ThreadPoolExecutor(THREADS) as pool:
        assert sorted(pool.map(work, range(THREADS))) == list(range(THREADS))


def test_many_threads_on_the_bundled_examples() -> None:
    sess = onnxflow.InferenceSession(EXAMPLES / "loop_trip_count.onnx")
    start = threading.Barrier(THREADS)

    def work(t: int) -> list[tuple[int, int]]:
        start.wait()
        results = []
        for b in range(t * 10, t * 10 + 10):
            b_final, _ = sess.run(None, {"b": np.array(b, np.int32)})
            results.append((b, int(b_final)))
        return results

    with ThreadPoolExecutor(THREADS) as pool:
        results = [r for rs in pool.map(work, range(THREADS)) for r in rs]
    single = onnxflow.InferenceSession(EXAMPLES / "loop_trip_count.onnx")
    for b, got in results:
        assert got == int(single.run(None, {"b": np.array(b, np.int32)})[0])


def test_pickle_round_trip_from_every_kind_of_source(tmp_path: Path) -> None:
    m = mixed_model()
    path = tmp_path / "mixed.onnx"
    onnx.save_model(m, path)
    feeds = feeds_for(3)
    want = onnxflow.InferenceSession(m).run(None, feeds)
    for source in (m, m.SerializeToString(), path, str(path)):
        clone = pickle.loads(pickle.dumps(onnxflow.InferenceSession(source)))
        assert_close(clone.run(None, feeds), want)


def test_the_session_owns_its_model_whatever_the_caller_does_after() -> None:
    m = mixed_model()
    sess = onnxflow.InferenceSession(m)
    feeds = feeds_for(3)
    want = sess.run(None, feeds)
    m.graph.input[0].name = "renamed"  # the caller edits its proto after making the session
    del m.graph.node[:]
    assert sess.model.graph.input[0].name != "renamed" and len(sess.model.graph.node) > 0
    clone = pickle.loads(pickle.dumps(sess))
    assert_close(clone.run(None, feeds), want)


def test_pickle_carries_external_data_and_the_check_flag(tmp_path: Path) -> None:
    directory = tmp_path / "m"
    directory.mkdir()
    onnx.save_model(
        mixed_model(), directory / "model.onnx", save_as_external_data=True, size_threshold=0
    )
    sess = onnxflow.InferenceSession(directory / "model.onnx", check=False)
    data = pickle.dumps(sess)
    shutil.rmtree(directory)  # the pickle holds the model itself, not a path to it
    clone = pickle.loads(data)
    feeds = feeds_for(2)
    assert_close(clone.run(None, feeds), sess.run(None, feeds))
    assert clone._check is False


def _run(sess: onnxflow.InferenceSession, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return sess.run(None, feeds)


def test_session_runs_in_a_process_pool() -> None:
    m = mixed_model()
    w = onnx.numpy_helper.to_array(m.graph.initializer[0])
    sess = onnxflow.InferenceSession(m)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        jobs = [(k, pool.submit(_run, sess, feeds_for(k))) for k in range(6)]
        for k, job in jobs:
            assert_close(job.result(timeout=120), reference(feeds_for(k)["X"], w))
