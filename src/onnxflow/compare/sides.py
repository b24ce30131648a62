"""The runs being compared: onnxflow (traced), onnxruntime and onnx.reference (on an exposed copy).

Each runner returns records shaped like :class:`onnxflow.observers.Trace`'s: scope -> {name: value},
where a scope is ``()`` for the main graph and ``((loop key, iteration),)`` inside a body.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxflow.compare.expose import Exposed, Step, branch_flag, expose
from onnxflow.errors import OnnxflowError
from onnxflow.observers import Trace
from onnxflow.ops.custom import CustomOps, parse_custom_ops
from onnxflow.options import SessionOptions
from onnxflow.session import InferenceSession

Records = dict[tuple[Any, ...], dict[str, Any]]


def run_onnxflow(
    model: onnx.ModelProto, feeds: dict[str, Any], custom_ops: CustomOps | None = None
) -> Records:
    """Every value onnxflow computes, main graph and bodies, per iteration (unoptimised plan),
    with the user's functions of ``custom_ops``."""
    trace = Trace(main=True)
    options = SessionOptions(optimize=False)
    sess = InferenceSession(model, sess_options=options, custom_ops=custom_ops)
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
    options.log_severity_level = 4  # a refusal is reported by compare, not logged by onnxruntime
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


def run_reference(
    exposed: Exposed, feeds: dict[str, Any], custom_ops: CustomOps | None = None
) -> Records:
    """Every exposed value, as onnx.reference.ReferenceEvaluator computes it (the operators of
    ``custom_ops`` by the user's functions, as its ``new_ops``)."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(exposed.model, new_ops=reference_ops(custom_ops) or None)
        names = list(evaluator.output_names)
        values = evaluator.run(None, _only_inputs(feeds, list(evaluator.input_names)))
    except Exception as exc:  # the evaluator raises whatever its kernels raise
        raise OnnxflowError(f"onnx.reference could not run the model: {exc}") from exc
    outputs = dict(zip(names, values, strict=True))
    _restack(exposed, outputs)
    return _unstack(exposed, outputs)


def reference_ops(custom_ops: CustomOps | None) -> list[type]:
    """The operators of ``custom_ops`` as onnx.reference's ``new_ops``: one ``OpRun`` class
    each, calling the user's function with the node's inputs and attributes."""
    from onnx.reference.op_run import OpRun

    made = []
    for op in parse_custom_ops(custom_ops).values():

        def run(self: Any, *inputs: Any, _fn: Any = op.fn, **attributes: Any) -> tuple[Any, ...]:
            result = _fn(*inputs, **attributes)
            return result if isinstance(result, tuple) else (result,)

        made.append(type(op.op_type, (OpRun,), {"op_domain": op.domain, "_run": run}))
    return made


def exposed_copy(model: onnx.ModelProto, **bounds: Any) -> Exposed:
    """The model with its values exposed as outputs (see :func:`onnxflow.compare.expose.expose`
    for the ``bounds``)."""
    return expose(model, **bounds)


def reference_copy(model: onnx.ModelProto, **bounds: Any) -> Exposed:
    """The exposed copy for onnx.reference: values stacked through one Loop at most, as its
    Loop's stacking is undone only once (see :func:`_restack`)."""
    return expose(model, **bounds, loop_depth=1)


def _restack(exposed: Exposed, outputs: dict[str, Any]) -> None:
    """Undo onnx.reference's Loop stacking, ``np.vstack`` of the iterations' values: [N, 1] for
    0-d values, [N * d0, ...] for 2-d and up; the iteration count N is read from a 0-d or 1-d
    value of the same Loop. A value stacked more than once, or whose count is unknown, is
    dropped: not compared."""
    once = _stacked_once(exposed, outputs)
    counts = {
        loop: np.asarray(outputs[name]).shape[0] for name, loop, rank in once if rank in (0, 1)
    }
    for name, loop, rank in once:
        value = outputs.get(name)
        if not isinstance(value, np.ndarray) or rank == 1:
            continue
        if rank == 0 and value.shape[1:] == (1,):
            outputs[name] = value.reshape(-1)
        elif rank >= 2 and counts.get(loop) and value.shape[0] % counts[loop] == 0:
            outputs[name] = value.reshape(counts[loop], -1, *value.shape[1:])
        elif rank >= 2:
            del outputs[name]


def _stacked_once(exposed: Exposed, outputs: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(output, Loop key, per-iteration rank) of the values one Loop stacked and nothing else;
    the values stacked by more (or of an unknown rank) are dropped from ``outputs``."""
    once = []
    for value in exposed.values:
        if not value.loops:
            continue
        scans = sum(exposed.ops.get(s.key) == "Scan" for s in value.path)
        if len(value.loops) > 1 or scans or value.shape is None:
            outputs.pop(value.carrier, None)
        elif value.carrier in outputs:
            once.append((value.carrier, value.loops[0], len(value.shape) - 1))
    return once


def _only_inputs(feeds: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {n: v for n, v in feeds.items() if n in names}


def _unstack(exposed: Exposed, outputs: dict[str, Any]) -> Records:
    """Each exposed value under its scope: main-graph values under ``()``; stacked body values
    split per iteration; branch values kept where the branch's flag says it ran."""
    records: Records = {(): {}}
    for value in sorted(exposed.values, key=lambda v: len(v.path)):
        if value.carrier in outputs:
            _place(records, (), value.path, value.name, outputs[value.carrier])
    return records


def _place(
    records: Records, scope: tuple[Any, ...], path: tuple[Step, ...], name: str, value: Any
) -> None:
    if not path:
        records.setdefault(scope, {})[name] = value
        return
    step, rest = path[0], path[1:]
    if step.kind == "iteration":
        for i in range(len(value) if np.ndim(value) else 0):
            _place(records, (*scope, (step.key, i)), rest, name, value[i])
        return
    taken = records.get(scope, {}).get(branch_flag(step.key))
    if taken is not None and bool(taken) == (step.kind == "then_branch"):
        _place(records, (*scope, (step.key, step.kind)), rest, name, value)
