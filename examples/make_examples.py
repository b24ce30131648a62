"""Write the bundled example models of the spec's control-flow pages.

- ``rnn_scan.onnx``: the Scan page's "encoding RNN using a Scan" (hidden 8, input 4).
- ``loop_trip_count.onnx``: the Loop page's sample with a trip count and a condition.

Run ``python examples/make_examples.py [OUT_DIR]``; the models are small and deterministic. They
are built by :mod:`onnxflow.spec_models`, which the benchmark uses too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

from onnxflow.spec_models import loop_trip_count, rnn_scan


def main(out_dir: str | Path = Path(__file__).parent) -> None:
    """Write every example model into ``out_dir``."""
    out = Path(out_dir)
    onnx.save(rnn_scan(), out / "rnn_scan.onnx")
    onnx.save(loop_trip_count(), out / "loop_trip_count.onnx")


if __name__ == "__main__":
    main(*sys.argv[1:])
