"""The runs being compared: onnxflow (traced), onnxruntime and onnx.reference (on an exposed copy).

Each runner returns records shaped like :class:`onnxflow.observers.Trace`'s: scope -> {name: value},
where a scope is ``()`` for the main graph and ``((loop key, iteration),)`` inside a body.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxflow.compare.expose import Exposed, expose
from onnxflow.errors import OnnxflowError
from onnxflow.observers import Trace
from onnxflow.options import SessionOptions
from onnxflow.session import InferenceSession

Records = dict[tuple[Any, ...], dict[str, Any]]


def run_onnxflow(model: onnx.ModelProto, feeds: dict[str, Any]) -> Records:
    """Every value onnxflow computes, main graph and bodies, per iteration (unoptimised plan)."""
    trace = Trace(main=True)
    sess = InferenceSession(model, sess_options=SessionOptions(optimize=False))
    sess.run(None, feeds, observers=[trace])
    return trace.records


def run_onnxruntime(exposed: Exposed, feeds: dict[str, Any]) -> Records:
    """Every exposed value, as onnxruntime computes it."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise OnnxflowError(
            "--against onnxruntime needs onnxruntime: pip install onnxruntime"
        ) from exc
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = onnxruntime.InferenceSession(
            exposed.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, _only_inputs(feeds, [i.name for i in sess.get_inputs()]))
    except Exception as exc:  # onnxruntime's own exception types
        raise OnnxflowError(f"onnxruntime could not run the model: {exc}") from exc
    return _unstack(exposed, dict(zip(names, values, strict=True)))


def run_reference(exposed: Exposed, feeds: dict[str, Any]) -> Records:
    """Every exposed value, as onnx.reference.ReferenceEvaluator computes it."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(exposed.model)
        names = list(evaluator.output_names)
        values = evaluator.run(None, _only_inputs(feeds, list(evaluator.input_names)))
    except Exception as exc:  # the evaluator raises whatever its kernels raise
        raise OnnxflowError(f"onnx.reference could not run the model: {exc}") from exc
    outputs = dict(zip(names, values, strict=True))
    _restack(exposed, outputs)
    return _unstack(exposed, outputs)


def exposed_copy(model: onnx.ModelProto) -> Exposed:
    """The model with its values exposed as outputs (see :mod:`onnxflow.compare.expose`)."""
    return expose(model)


def _restack(exposed: Exposed, outputs: dict[str, Any]) -> None:
    """Undo onnx.reference's Loop stacking, ``np.vstack`` of the iterations' values: [N, 1] for
    0-d values, [N * d0, ...] for 2-d and up; the iteration count N is read from a 0-d or 1-d
    value of the same Loop (a value without one is dropped: not compared)."""
    counts = {
        key: np.asarray(outputs[name]).shape[0]
        for name, (key, rank) in exposed.ranks.items()
        if rank in (0, 1) and name in outputs
    }
    for name, (key, rank) in exposed.ranks.items():
        value = outputs.get(name)
        if not isinstance(value, np.ndarray) or rank == 1:
            continue
        if rank == 0 and value.shape[1:] == (1,):
            outputs[name] = value.reshape(-1)
        elif rank >= 2 and counts.get(key) and value.shape[0] % counts[key] == 0:
            outputs[name] = value.reshape(counts[key], -1, *value.shape[1:])
        elif rank >= 2:
            del outputs[name]


def _only_inputs(feeds: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: v for n, v in feeds.items() if n in names}


def _unstack(exposed: Exposed, outputs: dict[str, Any]) -> Records:
    """Main-graph values under ``()``; stacked body values split per iteration."""
    stacked = set(exposed.stacked.values())
    records: Records = {(): {n: v for n, v in outputs.items() if n not in stacked}}
    for (key, name), output in exposed.stacked.items():
        values = np.asarray(outputs[output])
        for i in range(values.shape[0] if values.ndim else 0):
            records.setdefault(((key, i),), {})[name] = values[i]
    return records
