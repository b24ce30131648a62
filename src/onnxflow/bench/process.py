"""Engine processes, shared by both tiers of the bench: the environment an engine runs in, the
BLAS it then sees, and how a child is started.

Each engine runs in a process of its own, without ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE``: some environments set both to work around older OpenBLAS builds on some
CPUs, and the pin (Haswell kernels on an AVX-512 machine) halves GEMM's speed. Users do not have
them, so the bench measures without them. Only the engine processes lose them: the bench's own
process, the tests and CI keep the environment as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

#: Set together by environments that pin OpenBLAS's kernels; unset together in engine processes.
PINNED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: Seconds a process may take before the engine counts as failing.
TIMEOUT = 600
#: What the machine line reports of the BLAS in an engine process (threadpoolctl's keys).
BLAS_KEYS = ("internal_api", "version", "threading_layer", "architecture", "num_threads")


def engine_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) without the OpenBLAS pin."""
    env = dict(os.environ if base is None else base)
    for name in PINNED:
        env.pop(name, None)
    return env


def run_engine(cmd: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``python`` with ``cmd`` in an engine's environment (may raise TimeoutExpired)."""
    return subprocess.run(
        [sys.executable, *cmd], capture_output=True, text=True, timeout=timeout, env=engine_env()
    )


def blas_info() -> dict[str, str]:
    """NumPy's BLAS as threadpoolctl reports it in this process, once onnxflow is imported:
    its library file, version, internal API, threading layer, CPU kernels and threads."""
    import numpy as np  # noqa: F401  (its BLAS is the one loaded)

    import onnxflow  # noqa: F401  (whatever onnxflow loads is loaded too)

    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    # SciPy may load a BLAS of its own: name NumPy's, which onnxflow calls
    ours = [p for p in pools if "numpy" in os.path.basename(os.path.dirname(p["filepath"]))]
    if not (chosen := ours or pools):
        return {}
    pool = chosen[0]
    info = {"library": os.path.basename(pool["filepath"])}
    info.update({k: str(pool.get(k)) for k in BLAS_KEYS if pool.get(k) is not None})
    return info


def engine_blas() -> dict[str, str]:
    """:func:`blas_info` as an engine process sees it (without the pin), or why not."""
    code = (
        "import json; from onnxflow.bench.process import blas_info; print(json.dumps(blas_info()))"
    )
    try:
        done = run_engine(["-c", code], timeout=120)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return {}


def blas_text(info: Mapping[str, str]) -> str:
    """One phrase for the machine line: ``openblas 0.3.30 (pthreads, SkylakeX kernels, ...)``."""
    if not info:
        return "unknown (threadpoolctl not installed)"
    head = f"{info.get('internal_api', '?')} {info.get('version', '?')}"
    details = [
        f"{info['library']}",
        f"{info['threading_layer']} threading" if "threading_layer" in info else "",
        f"{info['architecture']} kernels" if "architecture" in info else "",
        f"{info['num_threads']} threads" if "num_threads" in info else "",
    ]
    where = f"in engine processes, without {' and '.join(PINNED)}"
    return f"{head} ({', '.join(d for d in details if d)}; {where})"
