"""The profile a session with ``enable_profiling`` writes: onnxruntime's JSON trace."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxflow.ort_api.api import CPU
from onnxflow.runtime.observe import Observer, node_key

_ORT_TYPE_NAMES = {"float32": "float", "float64": "double", "object": "string", "str": "string"}


def _type_shapes(values: Sequence[Any]) -> list[dict[str, list[int]]]:
    shown = []
    for v in values:
        if isinstance(v, np.ndarray):
            name = _ORT_TYPE_NAMES.get(v.dtype.name, v.dtype.name)
            shown.append({name: list(v.shape)})
    return shown


class OrtProfile(Observer):
    """Times a session's runs and nodes as events of onnxruntime's JSON profile: ``"Session"``
    events (``session_initialization``, ``model_run``) and a ``"Node"`` event per node run
    (``<node>_kernel_time``, with ``op_name``, ``provider`` and the input and output types
    and shapes), ``ts`` and ``dur`` in whole microseconds from the start of profiling."""

    def __init__(self, started: tuple[int, int]) -> None:
        """``started``: ``(perf_counter_ns, time_ns)`` when profiling started."""
        self._perf0, self.start_ns = started
        self.events: list[dict[str, Any]] = []
        self._spans = threading.local()  # each thread's open node spans (concurrent runs)
        self._lock = threading.Lock()

    def session_event(self, name: str, start_perf_ns: int, end_perf_ns: int) -> None:
        """Record a ``"Session"`` event spanning the two ``perf_counter_ns`` readings."""
        self._add("Session", name, start_perf_ns, end_perf_ns, {})

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        """Open the node's span."""
        self._open().append(time.perf_counter_ns())

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        """Record the node's event."""
        start = self._open().pop()
        args = {
            "op_name": info.op_type,
            "provider": CPU,
            "input_type_shape": _type_shapes(inputs),
            "output_type_shape": _type_shapes(outputs),
        }
        self._add("Node", f"{node_key(info)}_kernel_time", start, time.perf_counter_ns(), args)

    def _open(self) -> list[int]:
        """The calling thread's stack of open node spans."""
        spans = getattr(self._spans, "stack", None)
        if spans is None:
            spans = self._spans.stack = []
        return spans

    def _add(self, cat: str, name: str, start: int, end: int, args: dict[str, Any]) -> None:
        event = {
            "cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(),
            "dur": (end - start) // 1000, "ts": (start - self._perf0) // 1000, "ph": "X",
            "name": name, "args": args,
        }  # fmt: skip
        with self._lock:
            self.events.append(event)

    def write(self, prefix: str) -> str:
        """Write the events to ``<prefix>_<date>_<time>_<ms>.json``, as onnxruntime names its
        profiles; return the path."""
        now = datetime.datetime.now()
        path = f"{prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        with self._lock:
            lines = ",\n".join(json.dumps(e) for e in self.events)
        with open(path, "w") as f:
            f.write(f"[\n{lines}\n]\n")
        return path
