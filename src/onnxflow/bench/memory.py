"""Peak memory of one engine on one model, measured in a fresh process.

    python -m onnxflow.bench.memory ENGINE MODEL.onnx INPUT_NAME INPUT.npy

prints, in MiB, how far the process's peak resident set rises above its resident set after
importing the engine and loading the input, while building a session from the file and running it
once: the memory the engine needs for the model's weights, plan and activations. On Linux the
kernel's peak (VmHWM) is reset after the imports, so a transient peak while importing does not
hide the run's; elsewhere the growth of ``ru_maxrss`` is used.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import numpy as np

METHOD = (
    "peak RSS in a fresh process per engine, counted from after importing the engine to the "
    "end of building a session from the file and one run (Linux: VmHWM reset after the imports)"
)
STATUS = Path("/proc/self/status")


def _status_mib(field: str) -> float:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"{field} missing from {STATUS}")


def _maxrss_mib() -> float:
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def _baseline() -> tuple[float, bool]:
    """The resident MiB now, and whether the kernel's peak could be reset to it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_mib("VmRSS"), True
    except OSError:
        return _maxrss_mib(), False


def _open(engine: str):
    """Import ``engine`` and return a function building its session from a model file."""
    if engine == "onnxflow":
        import onnxflow
        from onnxflow.ops import load_all

        load_all()
        return onnxflow.InferenceSession
    if engine == "onnxruntime":
        import onnxruntime as ort

        ort.set_default_logger_severity(3)
        return lambda p: ort.InferenceSession(p, providers=["CPUExecutionProvider"])
    raise ValueError(f"unknown engine {engine!r}: expected onnxflow or onnxruntime")


def probe(engine: str, model_path: str, input_name: str, input_path: str) -> float:
    """Peak RSS growth in MiB of building ``engine``'s session for the model and one run."""
    build = _open(engine)
    feeds = {input_name: np.load(input_path)}
    before, reset = _baseline()
    build(model_path).run(None, feeds)
    return (_status_mib("VmHWM") if reset else _maxrss_mib()) - before


if __name__ == "__main__":
    print(f"{probe(*sys.argv[1:5]):.1f}")
