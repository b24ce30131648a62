"""glibc's malloc thresholds (runtime/memory.py): memory one run frees is reused by the next.

Each case runs in a fresh process: the setting is process-wide and made once.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
pytestmark = pytest.mark.skipif(
    not GLIBC or sys.maxsize <= 2**32, reason="the thresholds are set on 64-bit glibc only"
)

# The spec RNN at batch 8 over 1000 steps: its projected inputs and its output are 4 MiB each,
# freed at the end of each run (the caller drops the result): glibc trims them every run.
PROGRAM = """
import resource, numpy as np, onnxflow
from onnxflow.runtime.memory import keep_freed_memory
from onnxflow.spec_models import rnn_scan
sess = onnxflow.InferenceSession(rnn_scan(hidden=128, input_size=64))
rng = np.random.default_rng(0)
feeds = {"H_0": np.zeros((8, 128), np.float32),
         "X": rng.standard_normal((1000, 8, 64)).astype(np.float32)}
for _ in range(3):
    sess.run(None, feeds)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    sess.run(None, feeds)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
print(keep_freed_memory(), faults)
"""


def _run(**env: str) -> tuple[bool, float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] == "True", float(out[1])


def test_a_run_reuses_the_memory_the_last_one_freed() -> None:
    tuned, faults = _run()
    assert tuned
    assert faults < 100  # each 4 KiB page of 8 MiB would be about 2,000
    untuned, faults = _run(ONNXFLOW_TUNE_MALLOC="0")
    assert not untuned
    assert faults > 1000  # what the setting saves: glibc trims and faults the buffers in again


def test_malloc_settings_of_the_process_are_left_alone() -> None:
    tuned, _ = _run(MALLOC_TOP_PAD_="0")
    assert not tuned
