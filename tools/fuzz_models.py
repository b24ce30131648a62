"""Mutated-bytes fuzzing of real models: only OnnxflowErrors may come out, and nothing may hang.

Each case takes the serialized bytes of a real model (the bundled examples, the onnx package's
on-disk test models and a few node-suite models), applies 1-4 random byte mutations (bit flips,
overwrites, insertions, deletions, truncation, duplicated chunks) and builds an
``InferenceSession`` from the result (load, validate, compile), optionally running it on small
generated feeds. Outcomes:

- ``ok``: the mutant loaded (and ran);
- ``rejected``: an ``OnnxflowError`` came out -- the expected answer to garbage;
- ``wrapped``: an ``OnnxflowError`` whose cause is an internal exception the session caught
  as a last resort (a message without node or op: worth fixing where it was raised);
- ``bug``: any other exception escaped;
- ``hang``: the case did not finish within the per-case timeout.

Usage: ``python tools/fuzz_models.py [--cases N] [--seed S] [--timeout SEC] [--run]
[--save DIR]``; exits 1 when a bug or hang was found. The timeout uses SIGALRM, so it interrupts
Python code only (POSIX, main thread).
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import onnxflow

ROOT = Path(__file__).resolve().parents[1]
NODE_CASES = (
    "test_loop11",
    "test_scan9_sum",
    "test_if_seq",
    "test_sequence_map_identity_1_sequence",
    "test_conv_with_strides_padding",
    "test_gather_0",
    "test_reshape_reordered_all_dims",
    "test_lstm_defaults",
    "test_resize_upsample_scales_linear",
    "test_einsum_batch_matmul",
)


@dataclass(frozen=True)
class Outcome:
    """What one mutant did: its kind (see the module docstring) and a one-line detail."""

    kind: str
    detail: str = ""


class CaseTimeout(BaseException):
    """Raised by the alarm in a case that runs too long (a BaseException: nothing catches it)."""


def corpus(with_node_suite: bool = True) -> list[tuple[str, bytes]]:
    """Return ``(name, serialized model)`` for every seed model."""
    seeds = [(p.name, p.read_bytes()) for p in sorted((ROOT / "examples").glob("*.onnx"))]
    import onnx.backend.test

    data = Path(onnx.backend.test.__file__).parent / "data"
    for kind in ("simple", "pytorch-operator"):
        for path in sorted((data / kind).glob("*/model.onnx"))[:12]:
            seeds.append((f"{kind}/{path.parent.name}", path.read_bytes()))
    if with_node_suite:
        from onnx.backend.test.loader import load_node_model_tests

        with warnings.catch_warnings():  # generating the suite's data warns about overflows
            warnings.simplefilter("ignore")
            generated = load_node_model_tests()
        for case in generated:
            if case.name in NODE_CASES and case.model is not None:
                seeds.append((case.name, case.model.SerializeToString()))
    return seeds


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """Apply 1-4 random byte-level mutations."""
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        if not buf:
            buf = bytearray(rng.integers(0, 256, size=8, dtype=np.uint8).tobytes())
        at = int(rng.integers(0, len(buf)))
        kind = int(rng.integers(0, 7))
        if kind == 0:  # flip one bit
            buf[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:  # overwrite a few bytes
            n = int(rng.integers(1, 9))
            buf[at : at + n] = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        elif kind == 2:  # insert a few bytes
            n = int(rng.integers(1, 9))
            buf[at:at] = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        elif kind == 3:  # delete a range
            del buf[at : at + int(rng.integers(1, 17))]
        elif kind == 4:  # truncate
            del buf[at:]
        elif kind == 5:  # duplicate a chunk in place
            n = int(rng.integers(1, 33))
            buf[at:at] = buf[at : at + n]
        else:  # an extreme varint byte, often a length or a dimension
            buf[at] = int(rng.choice([0x00, 0x7F, 0x80, 0xFF]))
    return bytes(buf)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise CaseTimeout in the main thread after ``seconds``."""

    def on_alarm(signum: int, frame: object) -> None:
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def feeds_for(sess: onnxflow.InferenceSession) -> dict[str, np.ndarray]:
    """Small feeds matching the declared inputs (unknown dimensions become 1)."""
    feeds = {}
    for arg in sess.get_inputs():
        proto = arg.type_proto
        if proto is None or proto.WhichOneof("value") != "tensor_type":
            continue
        dtype = onnxflow.values.np_dtype(proto.tensor_type.elem_type or 1)
        shape = [d if isinstance(d, int) and 0 < d <= 64 else 1 for d in (arg.shape or [])]
        feeds[arg.name] = np.zeros(shape, dtype=dtype)
    return feeds


def check(data: bytes, timeout: float = 5.0, run: bool = False) -> Outcome:
    """Build (and optionally run) a session from ``data``; classify what happened."""
    try:
        with time_limit(timeout):
            sess = onnxflow.InferenceSession(data)
            if run:
                sess.run(None, feeds_for(sess))
    except CaseTimeout:
        return Outcome("hang", f"over {timeout} s")
    except onnxflow.OnnxflowError as exc:
        cause = exc.__cause__
        if str(exc).startswith("the model could not be compiled") and cause is not None:
            return Outcome("wrapped", _where(cause))
        return Outcome("rejected", type(exc).__name__)
    except Exception as exc:
        return Outcome("bug", _where(exc))
    return Outcome("ok")


def _where(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {str(exc)[:120]} at {Path(frame.filename).name}:{frame.lineno}"


def fuzz(
    cases: int, seed: int = 0, timeout: float = 5.0, run: bool = False, with_node_suite: bool = True
) -> list[tuple[str, Outcome, bytes]]:
    """Run ``cases`` mutants round-robin over the corpus; return (seed model, outcome, bytes)."""
    rng = np.random.default_rng(seed)
    seeds = corpus(with_node_suite)
    results = []
    for k in range(cases):
        name, data = seeds[k % len(seeds)]
        mutant = mutate(data, rng)
        results.append((name, check(mutant, timeout, run), mutant))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per case")
    parser.add_argument("--run", action="store_true", help="also run mutants that load")
    parser.add_argument("--save", type=Path, help="write bug and hang mutants here")
    args = parser.parse_args(argv)
    results = fuzz(args.cases, args.seed, args.timeout, args.run)
    counts = collections.Counter(outcome.kind for _, outcome, _ in results)
    print(", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items())))
    details = collections.Counter(
        (outcome.kind, outcome.detail)
        for _, outcome, _ in results
        if outcome.kind in ("bug", "hang", "wrapped")
    )
    for (kind, detail), n in details.most_common():
        print(f"{kind:8} x{n:<4} {detail}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for k, (name, outcome, mutant) in enumerate(results):
            if outcome.kind in ("bug", "hang"):
                safe = name.replace("/", "_")
                (args.save / f"{k:05d}_{outcome.kind}_{safe}.onnx").write_bytes(mutant)
    return 1 if counts["bug"] or counts["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
