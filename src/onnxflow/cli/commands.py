"""The subcommands that run a model: ``run``, ``compare``, ``export-python``, ``code``,
``profile`` and ``view``."""

from __future__ import annotations

import argparse
import contextlib
import sys
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
from onnxflow.view import view


def run_command(args: argparse.Namespace) -> int:
    """``onnxflow run``: run the model once, summarise (and optionally save) its outputs."""
    sess = InferenceSession(args.model, custom_ops=getattr(args, "custom_ops", None))
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
    """``onnxflow compare``: 0 when every output agrees within tolerance (with ``--strict``: when
    no compared value differs at all), 1 otherwise, 2 on an error."""
    try:
        feeds = feeds_for(
            InferenceSession(args.model, custom_ops=getattr(args, "custom_ops", None)), args
        )
        report = compare(
            args.model, feeds, args.against, rtol=args.rtol, atol=args.atol,
            custom_ops=getattr(args, "custom_ops", None),
        )  # fmt: skip
        if args.json:
            report.to_json(args.json)
    except (OnnxflowError, OSError) as exc:
        print(f"error: {exc}{generated_note(args)}", file=sys.stderr)
        return 2
    print(report.summary())
    if args.strict:
        print("strict: " + ("no value differs" if report.identical else "some values differ"))
        return 0 if report.identical else 1
    return 0 if report.agree else 1


def export_python_command(args: argparse.Namespace) -> int:
    """Write the model as a NumPy module with its weights beside it; say what was written."""
    from onnxflow.export.python import write_module

    path, numpy_nodes, kernel_calls = write_module(
        args.model, args.output, getattr(args, "custom_ops", None)
    )
    print(f"wrote {path} and {path.with_suffix('.npz')}")
    print(f"{numpy_nodes} nodes as plain NumPy, {kernel_calls} as calls into onnxflow's kernels")
    return 0


def code_command(args: argparse.Namespace) -> int:
    """Print the generated code; what the run says about its inputs goes to stderr."""
    sess = InferenceSession(args.model, custom_ops=getattr(args, "custom_ops", None))
    if not args.no_run:
        with contextlib.redirect_stdout(sys.stderr):
            sess.run(None, feeds_for(sess, args))
    print(sess.source())
    return 0


def profile_command(args: argparse.Namespace) -> int:
    """Time ``--runs`` runs after ``--warmup`` unmeasured ones by their main graph's nodes, at
    the speed of an unobserved run, and print medians per run; with ``--bodies``, then time
    every node inside bodies in as many observed runs, and say what observing costs."""
    sess = InferenceSession(args.model, custom_ops=getattr(args, "custom_ops", None))
    feeds = feeds_for(sess, args)
    profiler = _profiled(sess, feeds, args, bodies=False)  # bodies run as compiled
    runs = profiler.run_seconds
    print(
        f"{len(runs)} runs after {args.warmup} warm-up: {_spread(runs)} per run (bodies run as "
        "compiled: times are an unobserved run's; node times below are medians per run)"
    )
    if (args.trace is not None if args.bodies is None else args.bodies) and sess.plan.children:
        profiler = _profiled(sess, feeds, args, bodies=True)
        print(
            f"{len(profiler.run_seconds)} more runs, observed inside bodies: "
            f"{_spread(profiler.run_seconds)} per run; their bodies run node by node as written, "
            f"and {observing_cost(runs, profiler.run_seconds)}, counted in the control-flow "
            "nodes' self time"
        )
    print(profiler.report(args.top))
    if args.trace:
        path = profiler.write_chrome_trace(args.trace)
        print(f"wrote Chrome trace {path} ({len(profiler.events)} events; open in Perfetto)")
    return 0


def _profiled(
    sess: InferenceSession, feeds: dict[str, Any], args: argparse.Namespace, bodies: bool
) -> Profiler:
    """A profiler that saw ``args.runs`` runs, after ``args.warmup`` runs observed alike."""
    for _ in range(args.warmup):
        sess.run(None, feeds, observers=[Profiler(bodies=bodies)])
    profiler = Profiler(bodies=bodies)
    for _ in range(args.runs):
        sess.run(None, feeds, observers=[profiler])
    return profiler


def _spread(seconds: list[float]) -> str:
    """Median, quartiles and range of run times, in ms."""
    ms = np.array(seconds) * 1e3
    low, high = np.percentile(ms, [25, 75])
    return (
        f"median {np.median(ms):.2f} ms (quartiles {low:.2f} to {high:.2f}, "
        f"min {ms.min():.2f}, max {ms.max():.2f})"
    )


def observing_cost(plain: list[float], observed: list[float]) -> str:
    """What observing bodies costs, from the run times (seconds) of both kinds of runs: the
    difference of the medians, signed, beside the noise (the larger interquartile range of the
    two), and whether the difference stands out of it."""
    a, b = np.array(plain) * 1e3, np.array(observed) * 1e3
    diff = float(np.median(b) - np.median(a))
    noise = float(max(np.subtract(*np.percentile(x, [75, 25])) for x in (a, b)))
    verdict = "more than the noise" if abs(diff) > noise else "within the noise"
    return (
        f"observing costs {diff:+.2f} ms (median {np.median(b):.2f} against "
        f"{np.median(a):.2f} ms; noise, the larger interquartile range of the two: "
        f"{noise:.2f} ms; {verdict})"
    )


def view_command(args: argparse.Namespace) -> int:
    """Write the page of ``onnxflow view``; with ``--run`` or ``--against``, from a run on the
    feeds (``--input`` files, the others generated); say where it is, open it if asked."""
    feeds = None
    run = args.run or args.values  # the values come from a run
    if run or args.against or args.input:
        with contextlib.redirect_stdout(sys.stderr):
            feeds = feeds_for(InferenceSession(args.model), args)
    page = view(
        args.model,
        feeds,
        run=run,
        against=args.against,
        values=args.values,
        rtol=args.rtol,
        atol=args.atol,
    )
    path = page.save(args.output or Path(args.model).with_suffix(".html"))
    stats = " with each value's statistics and node times" if "stats" in page.document else ""
    compared = f", compared with {args.against}" if args.against else ""
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB{stats}{compared})")
    if args.open:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
