"""Observers that show what a model does while it runs.

- :class:`Trace`: the values inside Loop, Scan, If and SequenceMap bodies, for every iteration or
  a chosen range of them, addressed by node and iteration.
- :class:`Verbose`: each node as it runs, with input and output shapes, dtypes and a summary;
  the first NaN or Inf is flagged with the node that produced it.
- :class:`Profiler`: time per node and per op type (totals, and medians per run over the runs
  it saw), each node's shapes, and a Chrome trace (Perfetto opens it) in which loop iterations
  nest under their Loop or Scan node; or, at the speed of an unobserved run, the main graph's
  nodes only.

Pass them to ``InferenceSession.run(..., observers=[...])``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Container, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from onnxflow.runtime.observe import Observer, Scope, node_key

__all__ = ["Observer", "Profiler", "Trace", "Verbose", "summarize"]


def _snapshot(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    return value


def _index(key: Any) -> Any:
    """The iteration number of a scope key (Scan 8's ``(batch, t)`` keys count by ``t``)."""
    return key[1] if isinstance(key, tuple) else key


class Trace(Observer):
    """Records the values computed inside bodies, per iteration.

    ``iterations`` bounds memory: only those iteration numbers (of the innermost loop) are kept.
    ``nodes`` keeps only the bodies of those control-flow nodes (by key: name, else first output).
    ``main`` also keeps the main graph's values, under the scope ``()``.
    """

    def __init__(
        self,
        iterations: Container[int] | None = None,
        nodes: Iterable[str] | None = None,
        main: bool = False,
    ) -> None:
        self.iterations = iterations
        self.nodes = None if nodes is None else set(nodes)
        self.main = main
        self.records: dict[Scope, dict[str, Any]] = {}

    def _wanted(self, scope: Scope) -> bool:
        if not scope:
            return self.main
        if self.nodes is not None and scope[-1][0] not in self.nodes:
            return False
        # the innermost loop iteration (If branches are keyed by name, not iteration)
        keys = [key for _, key in scope if not isinstance(key, str)]
        return self.iterations is None or not keys or _index(keys[-1]) in self.iterations

    def scope_inputs(self, scope: Scope, names: Sequence[str], values: Sequence[Any]) -> None:
        """Keep a body's formal inputs (iteration number, states, scan elements)."""
        if self._wanted(scope):
            record = self.records.setdefault(scope, {})
            record.update({n: _snapshot(v) for n, v in zip(names, values)})

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        """Keep the node's outputs."""
        if self._wanted(scope):
            record = self.records.setdefault(scope, {})
            record.update({n: _snapshot(v) for n, v in zip(info.outputs, outputs) if n})

    def at(self, *path: Any) -> dict[str, Any]:
        """Values of one body run: ``at("loop", 3)``, ``at("outer", 1, "inner", 0)``, ``at()``."""
        if len(path) % 2:
            raise ValueError(f"path alternates node keys and iterations, found {path!r}")
        scope = tuple(zip(path[::2], path[1::2]))
        if scope not in self.records:
            known = sorted({s[-1][0] for s in self.records if s})
            raise KeyError(f"no values recorded at {scope}; bodies recorded: {known}")
        return self.records[scope]

    def iterations_of(self, node: str) -> list[Any]:
        """The iteration keys recorded for a control-flow node, in order."""
        return [s[-1][1] for s in self.records if s and s[-1][0] == node]


def summarize(value: Any) -> str:
    """One line about a value: dtype, shape, min, max, and how many NaN and Inf it holds."""
    if value is None:
        return "empty optional"
    if isinstance(value, list):
        return f"sequence of {len(value)}"
    if isinstance(value, dict):
        return f"map of {len(value)}"
    arr = np.asarray(value)
    head = f"{arr.dtype}{list(arr.shape)}"
    if arr.size == 0 or (arr.dtype.kind not in "fiucb" and arr.dtype.name != "bfloat16"):
        return head
    f = arr.astype(np.float64) if arr.dtype.kind != "c" else np.abs(arr)
    nan, inf = int(np.isnan(f).sum()), int(np.isinf(f).sum())
    finite = f[np.isfinite(f)]
    stats = f" min={finite.min():.4g} max={finite.max():.4g}" if finite.size else ""
    bad = f" nan={nan}" * bool(nan) + f" inf={inf}" * bool(inf)
    return f"{head}{stats}{bad}"


def _non_finite(value: Any) -> bool:
    if isinstance(value, list):
        return any(_non_finite(v) for v in value)
    if not isinstance(value, np.ndarray) or (
        value.dtype.kind not in "fc" and value.dtype.kind != "V"
    ):
        return False
    try:
        return not bool(np.isfinite(value).all())
    except TypeError:
        return False


def _where(scope: Scope) -> str:
    return "".join(f"{owner}[{key}]/" for owner, key in scope)


class Verbose(Observer):
    """Prints each node as it runs; flags the first NaN or Inf and the node that produced it."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.flagged = False

    def scope_start(self, scope: Scope, total: int | None) -> None:
        """Print the start of a body run."""
        owner, key = scope[-1]
        of = f" of {total}" if total is not None and not isinstance(key, str) else ""
        print(f"{'  ' * (len(scope) - 1)}{owner}: {key}{of}", file=self.stream)

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        """Print the node and its inputs."""
        ins = ", ".join(summarize(v) for v in inputs)
        print(f"{'  ' * len(scope)}{info.op_type} {node_key(info)!r} ({ins})", file=self.stream)

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        """Print the node's outputs; flag the first non-finite output."""
        pad = "  " * len(scope)
        for name, value in zip(info.outputs, outputs):
            if name:
                print(f"{pad}  -> {name}: {summarize(value)}", file=self.stream)
                if not self.flagged and _non_finite(value):
                    self.flagged = True
                    how = "passed on by" if any(_non_finite(v) for v in inputs) else "from"
                    print(
                        f"{pad}  !! first NaN/Inf: {name!r} {how} {info.op_type} "
                        f"{node_key(info)!r} at {_where(scope) or 'main graph'}",
                        file=self.stream,
                    )


class Profiler(Observer):
    """Times every node and body run; summarises by node and op type; writes a Chrome trace.

    ``bodies=False`` times the main graph's nodes only, and lets Loop, Scan and If run their
    bodies as compiled, unobserved: a node's time is then what it takes in a run nobody
    watches. With ``bodies=True`` every node inside every body is timed too, but the bodies
    run node by node as written (no hoisting, no generated loop), and what observing costs
    (two observer calls per node, two per iteration) lands in the control-flow nodes' self
    time: use it to see where time goes inside a loop, not how long the model takes.

    Observe several runs with one profiler to time steady runs: ``run_seconds`` holds each
    run's time, ``node_samples`` and ``op_samples`` one sample per run, and ``report()``,
    ``median_nodes()`` and ``median_ops()`` give medians per run; ``shapes`` holds each node's
    input and output shapes, which the trace's events carry too (with the run's index).
    """

    def __init__(self, bodies: bool = True) -> None:
        self.body_events = bodies
        self.events: list[dict[str, Any]] = []
        self.by_node: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
        self.by_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        #: each run's wall time, in seconds, in the order they ran
        self.run_seconds: list[float] = []
        #: per node and per op type, one sample per run it ran in: its seconds in that run
        #: (total for a node, self time for an op type)
        self.node_samples: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.op_samples: dict[str, list[float]] = defaultdict(list)
        #: each node's input and output shapes (None: not a tensor), as first seen
        self.shapes: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
        self._t0 = time.perf_counter()
        self._open: list[float] = []
        self._children: list[float] = [0.0]
        self._run: tuple[dict[tuple[str, str], float], dict[str, float]] | None = None
        self._run_start = 0.0

    def run_start(self) -> None:
        """Start the samples of one run."""
        self._run = (defaultdict(float), defaultdict(float))
        self._run_start = time.perf_counter()

    def run_end(self) -> None:
        """Keep the run's time and each node's and op type's seconds in it."""
        self.run_seconds.append(time.perf_counter() - self._run_start)
        if self._run is None:
            return
        nodes, ops = self._run
        for key, seconds in nodes.items():
            self.node_samples[key].append(seconds)
        for op, seconds in ops.items():
            self.op_samples[op].append(seconds)
        self._run = None

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        """Open a node's span."""
        if scope and not self.body_events:  # another observer asked for the bodies' events
            return
        self._open.append(time.perf_counter())
        self._children.append(0.0)

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        """Close the node's span; its self time excludes the nodes of its bodies."""
        if scope and not self.body_events:
            return
        start = self._open.pop()
        inner = self._children.pop()
        self._children[-1] += seconds
        key = node_key(info)
        self._add(self.by_node[(info.op_type, key)], seconds)
        self._add(self.by_op[info.op_type], seconds - inner)
        if self._run is not None:
            self._run[0][(info.op_type, key)] += seconds
            self._run[1][info.op_type] += seconds - inner
        shapes = (_shapes(inputs), _shapes(outputs))
        self.shapes.setdefault((info.op_type, key), shapes)
        self._event(f"{info.op_type} {key}", info.op_type, start, seconds, _where(scope), shapes)

    def scope_start(self, scope: Scope, total: int | None) -> None:
        """Open a body run's span."""
        if not self.body_events:
            return
        self._open.append(time.perf_counter())

    def scope_end(self, scope: Scope, seconds: float) -> None:
        """Close the body run's span (an iteration event nested under its node)."""
        if not self.body_events:
            return
        owner, key = scope[-1]
        self._event(f"{owner} iteration {key}", "iteration", self._open.pop(), seconds, "")

    @staticmethod
    def _add(total: list[float], seconds: float) -> None:
        total[0] += seconds
        total[1] += 1

    def _event(
        self,
        name: str,
        cat: str,
        start: float,
        seconds: float,
        scope: str,
        shapes: tuple[list[Any], list[Any]] | None = None,
    ) -> None:
        args: dict[str, Any] = {"scope": scope, "run": len(self.run_seconds)}
        if shapes is not None:
            args["input_shapes"], args["output_shapes"] = shapes
        self.events.append({
            "name": name, "cat": cat, "ph": "X", "pid": 0, "tid": 0,
            "ts": (start - self._t0) * 1e6, "dur": seconds * 1e6, "args": args,
        })  # fmt: skip

    def top_nodes(self, n: int = 10) -> list[tuple[str, str, float, int]]:
        """The ``n`` nodes with the most total time: (op type, key, seconds, calls)."""
        rows = [(op, key, t, int(c)) for (op, key), (t, c) in self.by_node.items()]
        return sorted(rows, key=lambda r: -r[2])[:n]

    def top_ops(self, n: int = 10) -> list[tuple[str, float, int]]:
        """Op types by self time (bodies' nodes counted once, under their own op types)."""
        rows = [(op, t, int(c)) for op, (t, c) in self.by_op.items()]
        return sorted(rows, key=lambda r: -r[1])[:n]

    def median_nodes(self, n: int = 10) -> list[tuple[str, str, float, float]]:
        """The ``n`` nodes with the largest median time per run: (op type, key, median seconds
        over the runs it ran in, calls per run)."""
        runs = max(len(self.run_seconds), 1)
        rows = [
            (op, key, float(np.median(samples)), self.by_node[(op, key)][1] / runs)
            for (op, key), samples in self.node_samples.items()
        ]
        return sorted(rows, key=lambda r: -r[2])[:n]

    def median_ops(self, n: int = 10) -> list[tuple[str, float, float]]:
        """Op types by median self time per run: (op type, median seconds, calls per run)."""
        runs = max(len(self.run_seconds), 1)
        rows = [
            (op, float(np.median(samples)), self.by_op[op][1] / runs)
            for op, samples in self.op_samples.items()
        ]
        return sorted(rows, key=lambda r: -r[1])[:n]

    def chrome_trace(self) -> dict[str, Any]:
        """The trace as a Chrome trace-event document."""
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | Path) -> Path:
        """Write the Chrome trace JSON (open it in Perfetto or chrome://tracing)."""
        path = Path(path)
        path.write_text(json.dumps(self.chrome_trace()))
        return path

    def report(self, n: int = 10) -> str:
        """A text table of the top op types and nodes, with the nodes' shapes: medians per run
        over the runs recorded (totals when no run was recorded, as for bare events)."""
        if not self.node_samples:
            ops = [(op, t, float(c)) for op, t, c in self.top_ops(n)]
            nodes = [(op, k, t, float(c)) for op, k, t, c in self.top_nodes(n)]
        else:
            ops, nodes = self.median_ops(n), self.median_nodes(n)
        lines = [f"{'op type':<24}{'self ms':>10}{'calls':>8}"]
        lines += [f"{op:<24}{t * 1e3:>10.3f}{_calls(c):>8}" for op, t, c in ops]
        lines += ["", f"{'node':<40}{'ms':>10}{'calls':>8}  shapes (inputs -> outputs)"]
        lines += [
            f"{op + ' ' + k:<40}{t * 1e3:>10.3f}{_calls(c):>8}  {self._shape_text((op, k))}"
            for op, k, t, c in nodes
        ]
        return "\n".join(lines)

    def _shape_text(self, key: tuple[str, str]) -> str:
        inputs, outputs = self.shapes.get(key, ([], []))
        return f"{_shape_list(inputs)} -> {_shape_list(outputs)}"


def _shapes(values: Sequence[Any]) -> list[Any]:
    """Each value's shape (a list), ``None`` for what is not a tensor (sequences, maps)."""
    return [list(v.shape) if isinstance(v, np.ndarray) else None for v in values]


def _shape_list(shapes: list[Any]) -> str:
    return ", ".join("-" if s is None else "[" + ",".join(map(str, s)) + "]" for s in shapes)


def _calls(count: float) -> str:
    return f"{count:g}" if count == int(count) else f"{count:.1f}"
