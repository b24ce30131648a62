"""A bounded, seeded run of ``tools/fuzz_models.py``: mutated real models give only OnnxflowErrors.

More cases: ``python tools/fuzz_models.py --cases 20000 --run``.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
import threading
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fuzz_models.py"


def _load_tool():
    if "fuzz_models" in sys.modules:
        return sys.modules["fuzz_models"]
    spec = importlib.util.spec_from_file_location("fuzz_models", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_models"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="the timeout uses SIGALRM"
)
def test_mutated_models_fail_cleanly_and_never_hang() -> None:
    fuzz = _load_tool()
    results = fuzz.fuzz(cases=300, seed=20240601, timeout=10.0, run=True)
    counts = collections.Counter(outcome.kind for _, outcome, _ in results)
    problems = [
        f"{name}: {outcome.kind} {outcome.detail}"
        for name, outcome, _ in results
        if outcome.kind in ("bug", "hang", "wrapped")
    ]
    assert not problems, "\n".join(problems)
    assert counts["rejected"] > 0 and sum(counts.values()) == 300


def test_mutations_are_reproducible() -> None:
    import numpy as np

    fuzz = _load_tool()
    data = bytes(range(256)) * 4
    first = [fuzz.mutate(data, np.random.default_rng(7)) for _ in range(3)]
    again = [fuzz.mutate(data, np.random.default_rng(7)) for _ in range(3)]
    assert first == again
    assert any(m != data for m in first)
