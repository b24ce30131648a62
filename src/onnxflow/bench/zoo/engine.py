"""One engine, one model, in a process of its own: build a session, run once (the warm-up, whose
outputs are saved for the correctness check), then time samples of steady runs.

    python -m onnxflow.bench.zoo.engine ENGINE MODEL.onnx FEEDS.npz OUT.json [--seconds S]
        [--threads N] [--steps N] [--options JSON]

Writes ``{"build": s, "first": s, "samples": [s per call, ...], "outputs": "OUT.npz"}``, or
``{"error": "..."}`` when the engine cannot load or run the model. Each sample is the mean of
enough calls to last about 0.2 s; sampling stops after ``--seconds`` (at least 3 samples, unless
one call takes longer than that budget).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Runner = Callable[[dict[str, np.ndarray]], list[Any]]
SAMPLE_SECONDS = 0.2
MIN_SAMPLES = 3


def _onnxflow(path: str, feeds: dict[str, np.ndarray], threads: int = 0, **options: Any) -> Runner:
    """``options``: SessionOptions fields, keyword arguments or (onnxruntime's) attributes."""
    import inspect

    import onnxflow

    keywords = inspect.signature(onnxflow.SessionOptions).parameters
    so = onnxflow.SessionOptions(**{k: v for k, v in options.items() if k in keywords})
    for name, value in options.items():
        if name not in keywords:
            setattr(so, name, value)
    so.intra_op_num_threads = threads or so.intra_op_num_threads
    sess = onnxflow.InferenceSession(path, so)
    return lambda f: sess.run(None, f)


def _onnxruntime(path: str, feeds: dict[str, np.ndarray], threads: int = 0) -> Runner:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return lambda f: sess.run(None, f)


def _reference(path: str, feeds: dict[str, np.ndarray], threads: int = 0) -> Runner:
    import onnx.reference

    sess = onnx.reference.ReferenceEvaluator(path)
    return lambda f: sess.run(None, f)


def _tract(path: str, feeds: dict[str, np.ndarray], threads: int = 0) -> Runner:
    import onnx
    import tract

    names = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    names = [n for n in names if n in feeds]
    model = tract.onnx().load(path)
    for i, name in enumerate(names):  # concrete facts: tract plans for the fed shapes
        value = feeds[name]
        dims = ",".join(str(d) for d in value.shape)
        model.set_input_fact(
            i, f"{dims},{_tract_type(value.dtype)}" if dims else _tract_type(value.dtype)
        )
    runnable = model.into_model().into_runnable()  # optimised on the way
    ordered = [feeds[n] for n in names]
    return lambda f: [v.to_numpy() for v in runnable.run(ordered)]


def _tract_type(dtype: np.dtype) -> str:
    return {
        "float32": "f32",
        "float64": "f64",
        "float16": "f16",
        "int64": "i64",
        "int32": "i32",
        "int8": "i8",
        "uint8": "u8",
        "bool": "bool",
    }[np.dtype(dtype).name]


ENGINES: dict[str, Callable[..., Runner]] = {
    "onnxflow": _onnxflow,
    "onnxruntime": _onnxruntime,
    "tract": _tract,
    "onnx.reference": _reference,
}


def generation(run: Runner, path: str, steps: int) -> Runner:
    """``run`` as a greedy generation loop of ``steps`` calls: each call's ``present_*``
    key/values and most likely next token are the next call's ``past_*`` and ``input_ids``.
    Returns the last call's outputs."""
    import onnx

    names = [o.name for o in onnx.load(path, load_external_data=False).graph.output]

    def loop(feeds: dict[str, np.ndarray]) -> list[Any]:
        outputs: dict[str, Any] = {}
        for _ in range(steps):
            outputs = dict(zip(names, run(feeds), strict=True))
            batch, seen = feeds["attention_mask"].shape
            feeds = {
                "input_ids": np.argmax(outputs["logits"][:, -1:], axis=-1).astype(np.int64),
                "attention_mask": np.ones((batch, seen + 1), np.int64),
            }
            for name, value in outputs.items():
                if name.startswith("present"):
                    feeds[name.replace("present", "past", 1)] = value
        return list(outputs.values())

    return loop


def measure(
    engine: str,
    model: str,
    feeds: dict[str, np.ndarray],
    seconds: float,
    options: dict[str, Any] | None = None,
    threads: int = 0,
    steps: int = 0,
) -> dict:
    """Build, warm up and time ``engine`` on ``model``; the result as written to OUT.json.
    ``options``: the engine's session options (onnxflow's SessionOptions fields);
    ``threads``: its intra-op threads (0: the engine's default); ``steps``: time a
    :func:`generation` loop of that many calls instead of one call."""
    start = time.perf_counter()
    run = ENGINES[engine](model, feeds, threads=threads, **(options or {}))
    if steps:
        run = generation(run, model, steps)
    built = time.perf_counter() - start
    start = time.perf_counter()
    outputs = run(feeds)
    first = time.perf_counter() - start
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    calls = max(1, round(SAMPLE_SECONDS / max(first, 1e-6)))
    while len(samples) < MIN_SAMPLES or time.perf_counter() < deadline:
        samples.append(_sample(run, feeds, calls))
        calls = max(1, round(SAMPLE_SECONDS / max(samples[-1], 1e-6)))
        if first > seconds and len(samples) >= 1:  # one call outlasts the budget: one sample
            break
    return {"build": built, "first": first, "samples": samples, "outputs": outputs}


def _sample(run: Runner, feeds: dict[str, np.ndarray], calls: int) -> float:
    """Mean seconds per call over ``calls`` calls, with the garbage collector paused."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            run(feeds)
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    """Measure one engine on one model and write the result."""
    parser = argparse.ArgumentParser(prog="python -m onnxflow.bench.zoo.engine")
    parser.add_argument("engine", choices=list(ENGINES))
    parser.add_argument("model")
    parser.add_argument("feeds")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--options", type=json.loads, default=None, help="SessionOptions, JSON")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: default)")
    parser.add_argument("--steps", type=int, default=0, help="a generation loop of N calls")
    args = parser.parse_args(argv)
    with np.load(args.feeds) as data:
        feeds = {k: data[k] for k in data.files}
    try:
        result = measure(
            args.engine, args.model, feeds, args.seconds, args.options, args.threads, args.steps
        )
    except Exception as exc:  # an engine that cannot run the model is reported, not fatal
        lines = f"{type(exc).__name__}: {exc}".strip().splitlines()
        args.out.write_text(json.dumps({"error": lines[0][:200], "trace": traceback.format_exc()}))
        return 0
    outputs = result.pop("outputs")
    saved = args.out.with_suffix(".npz")
    np.savez(
        saved, *[np.asarray(o) for o in outputs if isinstance(o, np.ndarray) or np.isscalar(o)]
    )
    result["outputs"] = str(saved)
    result["n_outputs"] = len(outputs)
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
