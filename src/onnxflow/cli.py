"""The ``onnxflow`` command: ``run`` a model on given or generated inputs, ``check`` a model,
``profile`` one run, print the ``code`` onnxflow runs for it."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import onnx
from onnx import GraphProto, numpy_helper

from onnxflow.compare import compare
from onnxflow.errors import OnnxflowError
from onnxflow.ir.dims import dimension_variable
from onnxflow.ir.load import load_model
from onnxflow.ir.walk import subgraphs
from onnxflow.observers import Profiler, Verbose
from onnxflow.ops import load_all
from onnxflow.ops.registry import REGISTRY, normalize_domain, schema_since_version
from onnxflow.runtime.observe import Observer
from onnxflow.session import InferenceSession
from onnxflow.values import NodeArg, np_dtype


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnxflow`` command; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except OnnxflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`onnxflow profile m.onnx | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # what a shell reports for a command ended by SIGPIPE
    except OSError as exc:  # a file that cannot be read or written: its name and why
        print(f"error: {exc}", file=sys.stderr)
        return 1


#: What ``onnxflow --help`` says (the module docstring, as plain text).
DESCRIPTION = "onnxflow: run a model on given or generated inputs, check a model, profile one run, "
DESCRIPTION += "print the code onnxflow runs for it. 'onnxflow COMMAND --help' tells more."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxflow", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run a model and summarise its outputs")
    _add_feed_arguments(run)
    run.add_argument("--output-dir", help="save every output there as NAME.npy")
    run.add_argument("--intermediate", metavar="DIR", help="save every main-graph value there")
    run.add_argument("--verbose", action="store_true", help="print each node as it runs")
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line for a run over 1 s: the loop iterations done, else the time elapsed "
        "(default: on a terminal)",
    )
    run.set_defaults(func=_run)
    check = sub.add_parser("check", help="validate a model and print a report")
    check.add_argument("model", help="path to an .onnx file")
    check.set_defaults(func=_check)
    profile = sub.add_parser("profile", help="time every node and loop iteration of one run")
    _add_feed_arguments(profile)
    profile.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto opens it)")
    profile.add_argument("--top", type=int, default=10, help="how many nodes and op types to list")
    profile.add_argument(
        "--bodies",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time every node inside loop and branch bodies, in a second run observed "
        "node by node (slower than the model; default: with --trace)",
    )
    profile.set_defaults(func=_profile)
    code = sub.add_parser("code", help="print the Python that onnxflow runs for a model")
    _add_feed_arguments(code)
    code.add_argument(
        "--no-run",
        action="store_true",
        help="do not run the model first (loops then show only their body's function)",
    )
    code.set_defaults(func=_code)
    diff = sub.add_parser("compare", help="find the first value where two runs of a model disagree")
    _add_feed_arguments(diff)
    diff.add_argument(
        "--against",
        default="onnxruntime",
        metavar="onnxruntime|reference|OTHER.onnx",
        help="what to compare onnxflow's run with (default onnxruntime)",
    )
    diff.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance")
    diff.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance")
    diff.add_argument("--json", metavar="FILE", help="write the full report there as JSON")
    diff.set_defaults(func=_compare)
    export = sub.add_parser("export-python", help="write a model as a standalone NumPy module")
    export.add_argument("model", help="the .onnx file")
    export.add_argument("-o", "--output", required=True, help="the module to write (.py)")
    export.set_defaults(func=_export_python)
    return parser


def _version() -> str:
    """``onnxflow X`` and the versions of what it runs on."""
    from onnxflow import __version__

    return (
        f"onnxflow {__version__} (numpy {np.__version__}, onnx {onnx.__version__}, "
        f"Python {sys.version.split()[0]})"
    )


def _add_feed_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("model", help="path to an .onnx file")
    command.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="feed input NAME from a .npy or .pb (TensorProto) file; repeatable",
    )
    command.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension for generated inputs (default 1); repeatable",
    )
    command.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="shape of generated input NAME, for dimensions --dim cannot name ('?', unnamed); "
        "repeatable",
    )
    command.add_argument("--seed", type=int, default=0, help="seed for generated inputs")


def _pairs(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise OnnxflowError(f"{what} {item!r} is not of the form NAME=VALUE")
        out[name] = value
    return out


def _read_input(name: str, path: str) -> np.ndarray:
    file = Path(path)
    try:
        if file.suffix == ".pb":
            tensor = onnx.TensorProto()
            tensor.ParseFromString(file.read_bytes())
            return numpy_helper.to_array(tensor)
        return np.load(file, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise OnnxflowError(f"cannot read input {name!r} from {path!r}: {exc}") from exc


def generate_input(
    arg: NodeArg,
    dims: dict[str, int],
    rng: np.random.Generator,
    shape: Sequence[int] | None = None,
) -> np.ndarray:
    """Return random values of an input's declared type and ``shape`` (by default its declared
    shape: dimension variables from ``dims``, other unknown dimensions, such as ``"?"``, 1)."""
    if arg.type_proto is None or arg.type_proto.WhichOneof("value") != "tensor_type":
        raise OnnxflowError(f"cannot generate input {arg.name!r} of type {arg.type}: pass --input")
    dtype = np_dtype(arg.type_proto.tensor_type.elem_type)
    if shape is None:
        shape = [
            d if isinstance(d, int) and d > 0 else dims.get(dimension_variable(d) or "", 1)
            for d in (arg.shape or [])
        ]
    if dtype == np.dtype(object):
        return rng.choice(np.array(["a", "b", "c"], dtype=object), size=shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def summarize(value: Any) -> str:
    """One line describing a value: dtype, shape and a few statistics."""
    if value is None:
        return "empty optional"
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (f", first: {summarize(value[0])}" if value else "")
    if isinstance(value, dict):
        return f"map of {len(value)} entries"
    arr = np.asarray(value)
    head = f"{arr.dtype} {list(arr.shape)}"
    if arr.size == 0:
        return f"{head} (empty)"
    if arr.dtype.kind in "fiub" or arr.dtype.name in ("bfloat16",) or arr.dtype.kind == "V":
        try:
            f = arr.astype(np.float64)
            return (
                f"{head} min={np.nanmin(f):.6g} max={np.nanmax(f):.6g} mean={np.nanmean(f):.6g}"
                f" first={np.array2string(arr.reshape(-1)[:4], separator=', ')}"
            )
        except (TypeError, ValueError):
            pass
    return f"{head} first={arr.reshape(-1)[:4].tolist()}"


def _feeds(sess: InferenceSession, args: argparse.Namespace) -> dict[str, Any]:
    """Feeds from ``--input`` files; the other inputs generated from their declared types, each
    shown with the dimension values it was given and a summary of its values."""
    given = _pairs(args.input, "--input")
    known = {a.name for a in sess.get_inputs()} | {
        a.name for a in sess.get_overridable_initializers()
    }
    for name in given:
        if name not in known:
            raise OnnxflowError(f"--input {name}: the model has no input {name!r}")
    feeds = {name: _read_input(name, path) for name, path in given.items()}
    missing = [arg for arg in sess.get_inputs() if arg.name not in feeds]
    dims = _dims(args.dim, sess.get_inputs())
    shapes = _shapes(getattr(args, "shape", []), missing)
    rng = np.random.default_rng(args.seed)
    for arg in missing:
        feeds[arg.name] = generate_input(arg, dims, rng, shapes.get(arg.name))
        note = "\n  dimensions: from --shape" if arg.name in shapes else _dims_note(arg, dims)
        print(
            f"generated input {arg.name}: {arg.type} {list(feeds[arg.name].shape)}, random "
            f"(seed {args.seed}; pass --input {arg.name}=FILE to use your own)"
            f"{note}\n  values: {summarize(feeds[arg.name])}"
        )
    return feeds


def _dims(items: Iterable[str], inputs: Sequence[NodeArg]) -> dict[str, int]:
    """The ``--dim`` values, each checked to name a dimension variable of the inputs and to be a
    size."""
    variables = sorted({v for a in inputs for d in a.shape or [] if (v := dimension_variable(d))})
    dims = {}
    for name, value in _pairs(items, "--dim").items():
        if name not in variables:
            have = ", ".join(variables) if variables else "none"
            raise OnnxflowError(
                f"--dim {name}: the model's inputs have no dimension variable {name!r} "
                f"(they have: {have})"
            )
        if not value.isdigit():
            raise OnnxflowError(f"--dim {name}={value}: a dimension is a whole number >= 0")
        dims[name] = int(value)
    return dims


def _shapes(items: Iterable[str], missing: Sequence[NodeArg]) -> dict[str, list[int]]:
    """The ``--shape`` values, each checked against the declared shape of an input to generate:
    same rank, the same size where the model fixes one."""
    declared = {a.name: a.shape for a in missing}
    shapes = {}
    for name, text in _pairs(items, "--shape").items():
        if name not in declared:
            generated = ", ".join(declared) or "none"
            raise OnnxflowError(
                f"--shape {name}: no input {name!r} is generated (inputs to generate: {generated})"
            )
        shape = _sizes(f"--shape {name}={text}", text)
        if not _fits(shape, declared[name]):
            raise OnnxflowError(f"--shape {name}={text}: the model declares {declared[name]}")
        shapes[name] = shape
    return shapes


def _sizes(what: str, text: str) -> list[int]:
    """Comma-separated sizes, each a whole number."""
    parts = text.split(",") if text else []
    if not all(p.strip().isdigit() for p in parts):
        raise OnnxflowError(f"{what}: sizes are whole numbers, comma-separated")
    return [int(p) for p in parts]


def _fits(shape: list[int], declared: list[Any] | None) -> bool:
    """Whether ``shape`` has the declared rank and the sizes the declaration fixes."""
    if declared is None:
        return True
    fixed = all(s == d for s, d in zip(shape, declared) if isinstance(d, int) and d > 0)
    return len(shape) == len(declared) and fixed


def _dims_note(arg: NodeArg, dims: dict[str, int]) -> str:
    """What the generated shape took for each unknown dimension: ``--dim`` values, and the 1s
    given by default."""
    notes = []
    for d in arg.shape or []:
        if isinstance(d, int) and d > 0:
            continue
        name = dimension_variable(d)
        if name in dims:
            notes.append(f"{name}={dims[name]} (--dim)")
        elif name is not None:
            notes.append(f"{name}=1 (default; --dim {name}=N to change)")
        else:
            named = isinstance(d, str) and d
            notes.append(f"{d!r}=1 (not a dimension variable)" if named else "unnamed=1")
    return f"\n  dimensions: {'; '.join(dict.fromkeys(notes))}" if notes else ""


def _run(args: argparse.Namespace) -> int:
    sess = InferenceSession(args.model)
    feeds = _feeds(sess, args)
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


def _compare(args: argparse.Namespace) -> int:
    """``onnxflow compare``: 0 when the runs agree, 1 on a divergence, 2 on an error."""
    try:
        feeds = _feeds(InferenceSession(args.model), args)
        report = compare(args.model, feeds, args.against, rtol=args.rtol, atol=args.atol)
        if args.json:
            report.to_json(args.json)
    except (OnnxflowError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.agree else 1


def _export_python(args: argparse.Namespace) -> int:
    """Write the model as a NumPy module with its weights beside it; say what was written."""
    from onnxflow.export.python import write_module

    path, plain, kernels = write_module(args.model, args.output)
    print(f"wrote {path} and {path.with_suffix('.npz')}")
    print(f"{plain} nodes as plain NumPy, {kernels} as calls into onnxflow's kernels")
    return 0


def _code(args: argparse.Namespace) -> int:
    """Print the generated code; what the run says about its inputs goes to stderr."""
    sess = InferenceSession(args.model)
    if not args.no_run:
        with contextlib.redirect_stdout(sys.stderr):
            sess.run(None, _feeds(sess, args))
    print(sess.source())
    return 0


def _profile(args: argparse.Namespace) -> int:
    """Time one run by its main graph's nodes, at the speed of an unobserved run; with
    ``--bodies``, then time every node inside bodies in a second, observed run."""
    sess = InferenceSession(args.model)
    feeds = _feeds(sess, args)
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


class Progress(Observer):
    """A progress line on a stream for a run that lasts more than ``delay`` seconds: a bar over
    the iterations of the outermost loop while one runs, else the time elapsed (redrawn every
    ``tick`` seconds by a thread of its own, so a run without loops shows it too)."""

    node_events = False

    def __init__(
        self, stream: TextIO, delay: float = 1.0, width: int = 30, tick: float = 0.1
    ) -> None:
        self.stream, self.delay, self.width, self.tick = stream, delay, width, tick
        self.started = self.drawn = 0.0
        self.visible = False
        self.position: tuple[str, int, int | None] | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None

    def run_start(self) -> None:
        """Start the clock and the thread that redraws the line."""
        self.started = time.perf_counter()
        self._done.clear()
        self._ticker = threading.Thread(target=self._tick, name="onnxflow-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._done.wait(self.tick):
            now = time.perf_counter()
            if now - self.started >= self.delay and now - self.drawn >= self.tick:
                self._draw(now, self.position)

    def scope_start(self, scope: tuple[Any, ...], total: int | None) -> None:
        """Remember the outermost loop's position; redraw at most ten times a second."""
        if len(scope) != 1 or isinstance(scope[0][1], str):
            return
        owner, key = scope[0]
        self.position = (owner, key[1] if isinstance(key, tuple) else key, total)
        now = time.perf_counter()
        if now - self.started >= self.delay and now - self.drawn >= 0.1:
            self._draw(now, self.position)

    def _draw(self, now: float, position: tuple[str, int, int | None] | None) -> None:
        """Draw the line: ``done`` iterations of ``owner`` finished out of ``total`` (when
        known), or, with no loop running yet, the seconds elapsed."""
        elapsed = max(now - self.started, 1e-9)
        if position is None:
            line = f"running {elapsed:.1f} s"
        else:
            owner, done, total = position
            rate = f"{done / elapsed:,.0f} it/s"
            if total:
                filled = int(self.width * min(done / total, 1))
                bar = "#" * filled + "." * (self.width - filled)
                line = f"{owner} [{bar}] {done}/{total} {rate}"
            else:
                line = f"{owner} {done} iterations {rate}"
        with self._lock:
            self.drawn, self.visible = now, True
            print(f"\r{line}\033[K", end="", file=self.stream, flush=True)

    def run_end(self) -> None:
        """Stop the thread; draw the final line (every iteration started has finished, or the
        whole run's time) and end it."""
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.visible:
            position = self.position
            if position is not None:
                position = (position[0], position[1] + 1, position[2])
            self._draw(time.perf_counter(), position)
            print(file=self.stream)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def count_ops(graph: GraphProto, counts: Counter[str] | None = None) -> Counter[str]:
    """Count operators by ``domain.op_type``, including the nodes inside subgraphs."""
    counts = Counter() if counts is None else counts
    for node in graph.node:
        counts[f"{node.domain}.{node.op_type}" if node.domain else node.op_type] += 1
        for g in subgraphs(node):
            count_ops(g, counts)
    return counts


@dataclass(frozen=True)
class OpUse:
    """An operator a model uses, at the opset its scope imports, and what runs it."""

    domain: str
    op_type: str
    opset: int
    count: int
    #: How onnxflow resolves it: ``kernel since N``, an expansion, or ``not supported ...``.
    resolution: str
    #: A default-domain operator onnx has no schema for at this opset: only onnxruntime's own
    #: registrations define it (LayerNormalization below 17, SimplifiedLayerNormalization).
    onnxruntime_only: bool = False

    @property
    def name(self) -> str:
        """``op_type``, prefixed by its domain unless that is the default one."""
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type

    @property
    def where(self) -> str:
        """The domain and opset the operator is resolved at."""
        return f"ai.onnx opset {self.opset}" if not self.domain else f"opset {self.opset}"


def operator_uses(model: onnx.ModelProto) -> list[OpUse]:
    """Every operator ``model`` uses (subgraphs and model-local functions included), each with
    the kernel version it resolves to, most used first."""
    load_all()
    local = {(normalize_domain(f.domain), f.name) for f in model.functions}
    counts: Counter[tuple[str, str, int]] = Counter()
    scopes = [(model.graph.node, model.opset_import)]
    scopes += [(f.node, f.opset_import) for f in model.functions]
    for nodes, imports in scopes:
        opsets = {normalize_domain(o.domain): o.version for o in imports}
        for graph in _graphs(onnx.GraphProto(node=nodes)):
            for node in graph.node:
                domain = normalize_domain(node.domain)
                counts[domain, node.op_type, opsets.get(domain, 0)] += 1
    uses = [
        _resolve(domain, op_type, opset, n, (domain, op_type) in local)
        for (domain, op_type, opset), n in counts.items()
    ]
    return sorted(uses, key=lambda u: (-u.count, u.name, u.opset))


def _graphs(graph: GraphProto) -> Iterable[GraphProto]:
    """``graph`` and every subgraph nested in it."""
    yield graph
    for node in graph.node:
        for g in subgraphs(node):
            yield from _graphs(g)


def _resolve(domain: str, op_type: str, opset: int, count: int, local: bool) -> OpUse:
    """How onnxflow runs ``op_type`` of ``domain`` at ``opset`` (the registry's own lookup)."""
    use = functools.partial(OpUse, domain, op_type, opset, count)
    if local:
        return use("model-local function (expanded)")
    kernel = REGISTRY.lookup(domain, op_type, opset)
    since = schema_since_version(domain, op_type, opset)
    if since is None and domain in ("", "ai.onnx.ml"):
        no_schema = f"onnx has no schema for it at opset {opset}"
        if kernel is not None and domain == "":
            return use(f"onnxruntime's default-domain registration, kernel since {kernel.since}"
                       f" ({no_schema})", onnxruntime_only=True)  # fmt: skip
        return use(f"not supported ({no_schema})")
    if kernel is not None:
        return use(f"kernel since {kernel.since}")
    registered = REGISTRY.versions(domain, op_type)
    if since is not None and _has_function(domain, op_type, opset):
        return use(f"expanded from onnx's function body (schema since {since})")
    if since is not None and registered:
        return use(f"not supported (no kernel for schema since {since}; kernels since "
                   f"{', '.join(map(str, registered))})")  # fmt: skip
    return use("not supported")


def _has_function(domain: str, op_type: str, opset: int) -> bool:
    schema = onnx.defs.get_schema(op_type, opset, domain)
    return bool(schema.has_function or schema.has_context_dependent_function)


def _print_operators(model: onnx.ModelProto) -> None:
    uses = operator_uses(model)
    print(f"  {sum(u.count for u in uses)} nodes (subgraphs included):")
    for u in uses:
        print(f"    {u.name}: {u.count} ({u.where}) -> {u.resolution}")
    flagged = [u for u in uses if u.onnxruntime_only]
    if flagged:
        print("  default-domain operators that only onnxruntime defines (onnx has no schema for")
        print("  them at the model's opset; runtimes that follow onnx will reject the model):")
        for u in flagged:
            print(f"    {u.name} ({u.where})")


def _print_inputs(model: onnx.ModelProto) -> None:
    """The inputs to feed; graph inputs that have an initializer are counted apart: before IR 4
    every initializer is listed as an input, from IR 4 such an input is a default to override."""
    stored = {t.name for t in model.graph.initializer} | {
        t.values.name for t in model.graph.sparse_initializer
    }
    with_value = []
    for vi in model.graph.input:
        arg = NodeArg.from_value_info(vi)
        if arg.name in stored:
            with_value.append(arg.name)
        else:
            print(f"  input {arg.name}: {arg.type} {arg.shape}")
    if not with_value:
        return
    if model.ir_version < 4:
        print(f"  {len(with_value)} initializers also listed as inputs (IR version "
              f"{model.ir_version} lists them all there): stored values, not inputs to "
              "feed")  # fmt: skip
    else:
        names = ", ".join(with_value[:5]) + (", ..." if len(with_value) > 5 else "")
        print(f"  {len(with_value)} overridable initializers (inputs with a stored value, fed "
              f"only to override it): {names}")  # fmt: skip


def _check(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    print(f"model: {args.model}")
    print(
        f"  IR version {model.ir_version}; producer {model.producer_name or '?'} "
        f"{model.producer_version}".rstrip()
    )
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"  opsets: {opsets}")
    _print_inputs(model)
    for vi in model.graph.output:
        arg = NodeArg.from_value_info(vi)
        print(f"  output {arg.name}: {arg.type} {arg.shape}")
    _print_operators(model)
    try:
        InferenceSession(model)
    except OnnxflowError as exc:
        print(f"problems found:\n  {exc}")
        return 1
    print("problems found: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
