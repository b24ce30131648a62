"""Time onnxflow, onnxruntime and onnx.reference on the workloads, and report medians.

:mod:`onnxflow.bench.tier` runs each engine in a process of its own, which calls
:func:`one_row` with that engine alone; with several engines in one process (as the functions
here allow), they interleave as follows. Per workload: each engine builds its session (not
timed) and runs once (a warm-up whose outputs are checked: onnxflow's against onnxruntime's,
else against onnx.reference's). Each engine then gets a number of calls per sample so that one
sample lasts about ``target`` seconds, and the repeats interleave the engines: every repeat
takes one sample of each, in rotating order. The reported time is the median per-call time of
an engine's samples. After each onnxruntime sample the harness pauses (``COOL_DOWN``) so that
its spinning thread pool does not slow the next engine's sample. onnx.reference is slow, so it
takes at most ``REF_CAP`` samples, and on the big workloads a single run with no warm-up.
Loop linearity compares two sizes of one Loop, so those two are sampled alternately in the same
repeats (:func:`linearity_row`).
"""

from __future__ import annotations

import gc
import logging
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnxflow.bench.process import blas_info, blas_text, engine_blas, run_engine
from onnxflow.bench.workloads import LIGHT_MODELS, TIMED, SkipWorkload, Workload, light_model

log = logging.getLogger(__name__)

ENGINES = ("onnxflow", "onnxruntime", "onnx.reference")
REF_CAP = 3
MAX_CALLS = 10_000
Runner = Callable[[dict[str, np.ndarray]], list]
Builder = Callable[[onnx.ModelProto], Runner]


@dataclass
class Row:
    """One workload's result: median seconds (or MiB) per engine, or why an engine failed."""

    name: str
    size: str
    values: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    units: int = 1
    unit: str = ""
    match: str = "—"
    note: str = ""
    kind: str = "time"


@dataclass
class Report:
    """A whole benchmark run: the machine, the settings and the rows."""

    machine: dict[str, str]
    repeats: int
    quick: bool
    rows: list[Row]


def engine_builders(threads: int = 0) -> tuple[dict[str, Builder], dict[str, str]]:
    """Session builders of the installed engines, and why any engine is skipped; ``threads``:
    onnxflow's and onnxruntime's ``intra_op_num_threads`` (0: their default)."""
    import onnx.reference

    import onnxflow

    options = onnxflow.SessionOptions()
    options.intra_op_num_threads = threads
    builders: dict[str, Builder] = {
        "onnxflow": lambda m: _runner(onnxflow.InferenceSession(m, options)),
        "onnx.reference": lambda m: _runner(onnx.reference.ReferenceEvaluator(m)),
    }
    try:
        import onnxruntime as ort
    except ImportError:
        return builders, {"onnxruntime": "not installed"}
    ort.set_default_logger_severity(3)
    ort_options = ort.SessionOptions()
    ort_options.intra_op_num_threads = threads
    builders["onnxruntime"] = lambda m: _runner(
        ort.InferenceSession(m.SerializeToString(), ort_options, providers=["CPUExecutionProvider"])
    )
    return {e: builders[e] for e in ENGINES}, {}


def _runner(session) -> Runner:
    return lambda feeds: session.run(None, feeds)


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 70 else text[:67] + "..."


def _close(got: list, want: list, tolerance: tuple[float, float]) -> bool:
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            rtol, atol = tolerance
            if not np.allclose(a.astype(np.float64), b.astype(np.float64), rtol, atol, True):
                return False
        elif not np.array_equal(a, b):
            return False
    return True


def _match(outputs: dict[str, list], tolerance: tuple[float, float], ref_wrong: str = "") -> str:
    """✓ or ✗ for onnxflow's outputs against onnxruntime's (else onnx.reference's), or —.

    Against onnx.reference where its outputs are known to be wrong (``ref_wrong``), a mismatch
    says so.
    """
    if "onnxflow" not in outputs:
        return "—"
    for peer, suffix in (("onnxruntime", ""), ("onnx.reference", " (vs ref)")):
        if peer in outputs:
            if _close(outputs["onnxflow"], outputs[peer], tolerance):
                return "✓" + suffix
            if peer == "onnx.reference" and ref_wrong:
                return f"✗ (vs ref, expected: {ref_wrong})"
            return "✗" + suffix
    return "—"


def _sample(runner: Runner, feeds: dict[str, np.ndarray], calls: int) -> float:
    """Mean seconds per call over ``calls`` calls, with the garbage collector paused."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            runner(feeds)
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def _interleave(
    runners: dict[str, Runner],
    feeds: dict[str, dict],
    calls: dict[str, int],
    caps: dict[str, int],
    repeats: int,
) -> dict[str, list[float]]:
    """``repeats`` rounds, each sampling every runner once (up to its cap), in rotating order.

    Runners are keyed by engine, or ``engine/what`` when an engine runs several models.
    """
    names = list(runners)
    samples: dict[str, list[float]] = {e: [] for e in names}
    shared = len({key.split("/")[0] for key in names}) > 1  # engines sharing this process
    for r in range(repeats):
        shift = r % len(names) if names else 0
        for key in names[shift:] + names[:shift]:
            if len(samples[key]) < caps[key]:
                samples[key].append(_sample(runners[key], feeds[key], calls[key]))
                if shared and key.split("/")[0] == "onnxruntime":
                    time.sleep(COOL_DOWN)
    return samples


#: Seconds to wait after an onnxruntime sample. Its thread pool keeps spinning for a while after
#: a run (its default), and those spinning threads halve the BLAS throughput of whatever runs
#: next on a 2-core machine; the pause keeps one engine's idle threads out of another's time.
COOL_DOWN = 0.2


def _first_runs(
    w: Workload, builders: dict[str, Builder], row: Row
) -> tuple[dict[str, Runner], dict[str, list], dict[str, float]]:
    """Build and run each engine once; record failures on ``row``."""
    runners, outputs, seconds = {}, {}, {}
    for engine, build in builders.items():
        try:
            runner = build(w.model)
            start = time.perf_counter()
            outputs[engine] = runner(w.feeds)
            seconds[engine] = time.perf_counter() - start
            runners[engine] = runner
        except Exception as exc:  # a failing engine is reported, not fatal
            row.failures[engine] = _reason(exc)
    return runners, outputs, seconds


def _calls(target: float, first: float) -> int:
    """Calls per sample for a sample to last about ``target`` seconds, given one call's time."""
    return max(1, min(MAX_CALLS, round(target / max(first, 1e-9))))


def time_workload(
    w: Workload,
    builders: dict[str, Builder],
    repeats: int,
    target: float,
    keep: dict[str, list] | None = None,
) -> Row:
    """Run ``w`` on every engine: check outputs, then interleave the timed repeats.
    ``keep``: where to put each engine's warm-up outputs (for a check across processes)."""
    row = Row(w.name, w.size, units=w.units, unit=w.unit, note=w.note)
    runners, outputs, first = _first_runs(w, builders, row)
    row.match = _match(outputs, w.tolerance, w.ref_wrong)
    if keep is not None:
        keep.update(outputs)
    del outputs
    once = {e: [first[e]] for e in runners if e == "onnx.reference" and w.ref_runs == 1}
    timed = {e: r for e, r in runners.items() if e not in once}
    calls = {e: _calls(target, first[e]) for e in timed}
    caps = {e: min(repeats, REF_CAP) if e == "onnx.reference" else repeats for e in timed}
    feeds = dict.fromkeys(timed, w.feeds)
    samples = {**_interleave(timed, feeds, calls, caps, repeats), **once}
    row.values = {e: statistics.median(s) for e, s in samples.items()}
    row.samples = {e: len(s) for e, s in samples.items()}
    ref_n = row.samples.get("onnx.reference", REF_CAP)
    if ref_n < min(repeats, REF_CAP):
        runs = f"{ref_n} run{'s' if ref_n > 1 else ''}" + (", no warm-up" if once else "")
        row.note = "; ".join(filter(None, [row.note, f"ref: {runs}"]))
    return row


def linearity_row(
    builders: dict[str, Builder], skipped: dict[str, str], repeats: int, target: float, quick: bool
) -> Row:
    """Per engine, the counting Loop's time at 10x the trips over its time at the mid size.

    The two sizes are sampled alternately within each repeat: as separate workloads they are
    timed a minute apart, and the machine's drift over that minute shows up in their ratio.
    onnx.reference is left out: its 100k-trip run alone takes seconds.
    """
    mid, large = TIMED["loop_count_mid"](quick), TIMED["loop_count_large"](quick)
    row = Row("loop_linearity", f"{large.size} / {mid.size}", kind="ratio")
    row.failures.update({e: f"skipped: {r}" for e, r in skipped.items()})
    row.failures["onnx.reference"] = "not measured"
    engines = {e: b for e, b in builders.items() if e not in row.failures}
    runners: dict[str, Runner] = {}
    calls: dict[str, int] = {}
    feeds: dict[str, dict] = {}
    for key, w in (("mid", mid), ("large", large)):
        built, _, first = _first_runs(w, engines, row)
        for engine, run in built.items():
            runners[f"{engine}/{key}"], feeds[f"{engine}/{key}"] = run, w.feeds
            calls[f"{engine}/{key}"] = _calls(target, first[engine])
    samples = _interleave(runners, feeds, calls, dict.fromkeys(runners, repeats), repeats)
    for engine in (e for e in engines if f"{e}/mid" in runners and f"{e}/large" in runners):
        per_mid = statistics.median(samples[f"{engine}/mid"])
        row.values[engine] = statistics.median(samples[f"{engine}/large"]) / per_mid
    row.note = f"{large.units // max(mid.units, 1)}x the trips; sizes sampled alternately"
    return row


def memory_row(model: str, skipped: dict[str, str]) -> Row:
    """Peak memory of ``model`` in onnxflow and onnxruntime, each in a fresh subprocess."""
    row = Row("peak_memory", f"{model}, 1 run", kind="memory", note="see method below")
    row.failures.update({e: f"skipped: {r}" for e, r in skipped.items()})
    row.failures["onnx.reference"] = "not measured"
    _, feeds = light_model(model)
    ((name, x),) = feeds.items()
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", x)
        path = LIGHT_MODELS / f"light_{model}.onnx"
        for engine in ("onnxflow", "onnxruntime"):
            if engine in row.failures:
                continue
            cmd = ["-m", "onnxflow.bench.memory", engine, str(path), name, f"{tmp}/x.npy"]
            proc = run_engine(cmd)
            if proc.returncode == 0:
                row.values[engine] = float(proc.stdout.split()[-1])
            else:
                row.failures[engine] = (proc.stderr.strip().splitlines() or ["failed"])[-1][:70]
    return row


def machine_info() -> dict[str, str]:
    """CPU count, load, platform, the versions of every package the bench uses, and the BLAS
    as an engine process sees it (:mod:`onnxflow.bench.process`: without the OpenBLAS pin)."""
    info = {
        "cpus": str(os.cpu_count()),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnx": onnx.__version__,
        "blas": blas_text(engine_blas()),
    }
    for package in ("onnxruntime", "sklearn", "skl2onnx"):
        try:
            info[package] = __import__(package).__version__
        except ImportError:
            info[package] = "not installed"
    return info


def _blas() -> str | None:
    """NumPy's BLAS in this process and the CPU kernels it chose (they set the speed of every
    MatMul and Conv); ``OPENBLAS_CORETYPE``, which overrides OpenBLAS's own choice, is shown
    when set. None without threadpoolctl."""
    info = blas_info()
    if not info:
        return None
    text = f"{info.get('internal_api')} {info.get('version')} {info.get('architecture')}"
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return f"{text} (OPENBLAS_CORETYPE={forced})" if forced else text


def one_row(
    name: str,
    builders: dict[str, Builder],
    skipped: dict[str, str],
    repeats: int,
    quick: bool,
    keep: dict[str, list] | None = None,
) -> Row:
    """The row of workload ``name`` on the engines of ``builders``."""
    target = 0.01 if quick else 0.1
    if name == "peak_memory":
        return memory_row("squeezenet" if quick else "resnet50", skipped)
    if name == "loop_linearity":
        return linearity_row(builders, skipped, repeats, target, quick)
    try:
        workload = TIMED[name](quick)
    except SkipWorkload as exc:
        return Row(name, "—", note=f"skipped: {exc}")
    row = time_workload(workload, builders, repeats, target, keep)
    if keep is not None:
        keep["__check__"] = [workload.tolerance, workload.ref_wrong]
    row.failures.update({e: f"skipped: {r}" for e, r in skipped.items()})
    return row


def report_to_json(report: Report) -> dict:
    """The report as plain JSON data."""
    return asdict(report)


def report_from_json(data: dict) -> Report:
    """A report read back from :func:`report_to_json`'s data."""
    rows = [Row(**r) for r in data["rows"]]
    return Report(data["machine"], data["repeats"], data["quick"], rows)
