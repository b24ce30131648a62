"""The subcommands that run a model: ``run``, ``compare``, ``export-python``, ``code`` and
``profile``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from onnxflow.cli.feeds import feeds_for, generated_note, summarize
from onnxflow.cli.progress import Progress
from onnxflow.compare import compare
from onnxflow.errors import OnnxflowError
from onnxflow.observers import Profiler, Verbose
from onnxflow.runtime.observe import Observer
from onnxflow.session import InferenceSession


def run_command(args: argparse.Namespace) -> int:
    """``onnxflow run``: run the model once, summarise (and optionally save) its outputs."""
    sess = InferenceSession(args.model)
    feeds = feeds_for(sess, args)
    observers: list[Observer] = [Verbose(sys.stdout)] if args.verbose else []
    show = sys.stderr.isatty() if args.progress is None else args.progress
    if show:
        observers.append(Progress(sys.stderr, delay=1.0 if args.progress is None else 0.0))
    if args.intermediate:
        values = sess.run(None, feeds, intermediate=True, observers=observers)
        outputs = [values[a.name] for a in sess.get_outputs()]
        _save(values, Path(args.intermediate), "intermediate values")
    else:
        outputs = sess.run(None, feeds, observers=observers)
    for arg, value in zip(sess.get_outputs(), outputs):
        print(f"output {arg.name}: {summarize(value)}")
    if args.output_dir:
        _save(
            dict(zip([a.name for a in sess.get_outputs()], outputs)),
            Path(args.output_dir),
            "outputs",
        )
    return 0


def _save(values: dict[str, Any], out_dir: Path, what: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    skipped = []
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            np.save(out_dir / f"{_safe(name)}.npy", value)
        else:
            skipped.append(name)
    print(f"saved {len(values) - len(skipped)} {what} to {out_dir}")
    if skipped:
        print(f"not saved (sequences, maps, empty optionals are not tensors): {skipped}")


def compare_command(args: argparse.Namespace) -> int:
    """``onnxflow compare``: 0 when the runs agree, 1 on a divergence, 2 on an error."""
    try:
        feeds = feeds_for(InferenceSession(args.model), args)
        report = compare(args.model, feeds, args.against, rtol=args.rtol, atol=args.atol)
        if args.json:
            report.to_json(args.json)
    except (OnnxflowError, OSError) as exc:
        print(f"error: {exc}{generated_note(args)}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.agree else 1


def export_python_command(args: argparse.Namespace) -> int:
    """Write the model as a NumPy module with its weights beside it; say what was written."""
    from onnxflow.export.python import write_module

    path, numpy_nodes, kernel_calls = write_module(args.model, args.output)
    print(f"wrote {path} and {path.with_suffix('.npz')}")
    print(f"{numpy_nodes} nodes as plain NumPy, {kernel_calls} as calls into onnxflow's kernels")
    return 0


def code_command(args: argparse.Namespace) -> int:
    """Print the generated code; what the run says about its inputs goes to stderr."""
    sess = InferenceSession(args.model)
    if not args.no_run:
        with contextlib.redirect_stdout(sys.stderr):
            sess.run(None, feeds_for(sess, args))
    print(sess.source())
    return 0


def profile_command(args: argparse.Namespace) -> int:
    """Time one run by its main graph's nodes, at the speed of an unobserved run; with
    ``--bodies``, then time every node inside bodies in a second, observed run."""
    sess = InferenceSession(args.model)
    feeds = feeds_for(sess, args)
    profiler = Profiler(bodies=False)  # bodies run as compiled: no observing cost in the times
    ms = _timed_ms(lambda: sess.run(None, feeds, observers=[profiler]))
    print(f"one run: {ms:.2f} ms (bodies run as compiled: times are an unobserved run's)")
    if (args.trace is not None if args.bodies is None else args.bodies) and sess.plan.children:
        profiler = Profiler()
        observed = _timed_ms(lambda: sess.run(None, feeds, observers=[profiler]))
        print(
            f"a second run, observed inside bodies: {observed:.2f} ms; its bodies run node by "
            f"node as written, and the {max(observed - ms, 0):.2f} ms more than the first run "
            "is what observing costs, counted in the control-flow nodes' self time"
        )
    print(profiler.report(args.top))
    if args.trace:
        path = profiler.write_chrome_trace(args.trace)
        print(f"wrote Chrome trace {path} ({len(profiler.events)} events; open in Perfetto)")
    return 0


def _timed_ms(call: Callable[[], Any]) -> float:
    """How many milliseconds ``call()`` took."""
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
