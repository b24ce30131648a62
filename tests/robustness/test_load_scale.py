"""Load time grows linearly with the model: validating and compiling a node chain four times
as long takes about four times as long (a ratio of CPU times, so it holds on a busy machine)."""

from __future__ import annotations

import time

import numpy as np
from onnx import ModelProto, TensorProto, helper

import onnxflow
from onnxflow.ir.validate import validate_model


def _chain(n: int) -> ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _best_cpu_seconds(fn, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def test_validation_is_linear_in_the_node_count() -> None:
    small, large = _chain(10_000), _chain(40_000)
    t_small = _best_cpu_seconds(lambda: validate_model(small, run_checker=False))
    t_large = _best_cpu_seconds(lambda: validate_model(large, run_checker=False))
    assert t_large / max(t_small, 1e-3) < 8, (t_small, t_large)  # linear ~4, quadratic ~16


def test_a_long_chain_loads_and_runs() -> None:
    small, large = _chain(5_000), _chain(20_000)
    t_small = _best_cpu_seconds(lambda: onnxflow.InferenceSession(small), repeats=1)
    t_large = _best_cpu_seconds(lambda: onnxflow.InferenceSession(large), repeats=1)
    assert t_large / max(t_small, 1e-3) < 8, (t_small, t_large)
    x = np.array([-1.0], np.float32)
    (y,) = onnxflow.InferenceSession(large).run(None, {"v0": x})
    assert y.tolist() == [0.0]
