"""External data is opened once and checked as opened: swapping the data file for a symlink to
a file outside the model's folder, while the model loads, never makes a load read that file.

The swapper, in its own process, flips the location between the real file and the symlink as
fast as it can; the loads are a fixed number. No timing is asserted: only how many loads read
the outside bytes. The loader that checked the resolved path and then opened it again by name
read the outside file in 10 to 16 of these 10,000 loads (issue 31: 20 to 60 of 10,000)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from test_external_data import W, matmul_model, save_external

import onnxflow

LOADS = 10_000


#: Run in its own process (no GIL shared with the loads): flip ``weights.bin`` between the real
#: file (kept as a hard link) and a symlink to the outside file, each by one atomic rename,
#: until the stop file appears; say "ready" after the first flip.
SWAPPER = """
import os, sys
directory, outside, stop = sys.argv[1:]
os.chdir(directory)
os.link("weights.bin", "keep.bin")
ready = False
while not os.path.exists(stop):
    os.symlink(outside, "link.tmp")
    os.replace("link.tmp", "weights.bin")
    os.link("keep.bin", "back.tmp")
    os.replace("back.tmp", "weights.bin")
    if not ready:
        print("ready", flush=True)
        ready = True
"""


def _loaded_weights(path: Path) -> bytes | None:
    """The bytes of ``W`` one load read, or None when the load refused."""
    try:
        proto = onnxflow.load_model(path)
    except onnxflow.ExternalDataError as exc:
        assert "tensor 'W' at location 'weights.bin'" in str(exc), exc
        return None
    return proto.graph.initializer[0].raw_data


def test_swapping_the_data_file_for_an_outside_symlink_never_reads_outside(
    tmp_path: Path,
) -> None:
    path = save_external(matmul_model(), tmp_path / "m")
    outside = tmp_path / "outside.bin"
    outside.write_bytes((W + 1000).tobytes())
    inside, secret = W.tobytes(), outside.read_bytes()
    stop = tmp_path / "stop"
    args = [sys.executable, "-c", SWAPPER, str(tmp_path / "m"), str(outside), str(stop)]
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as swapper:
        try:
            assert swapper.stdout.readline() == "ready\n"
            read = [_loaded_weights(path) for _ in range(LOADS)]
        finally:
            stop.touch()
    assert swapper.returncode == 0
    outside_reads = sum(r == secret for r in read)
    assert outside_reads == 0, f"{outside_reads} of {LOADS} loads read the file outside"
    assert all(r in (None, inside) for r in read)
    assert np.array_equal(
        onnx.numpy_helper.to_array(onnxflow.load_model(path).graph.initializer[0]), W
    )
