"""Lowering (runtime/lower.py): a session lowers every scope when it is created, each plan's
runnable form is one typed record, and only the run-dependent variants are made later. The
loop engine's one Python loop (runtime/loop.py: iterate) and the one terminate test."""

from __future__ import annotations

import gc
import io
import itertools
import tokenize
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnxflow
from onnxflow.compile.plan import Plan
from onnxflow.errors import RuntimeFailure
from onnxflow.runtime.context import STOP_REQUESTED, reset_run_options, set_run_options
from onnxflow.runtime.loop import Iterations, iterate
from onnxflow.runtime.lower import LOWERED, Variant, lowered
from onnxflow.runtime.observe import Observer, observe, stop_observing
from onnxflow.spec_models import rnn_scan

SRC = Path(onnxflow.__file__).resolve().parent


def _scopes(plan: Plan) -> list[Plan]:
    """``plan`` and every subgraph plan under it."""
    return [plan, *(p for _, child in plan.children for p in _scopes(child))]


def _feeds() -> dict[str, np.ndarray]:
    return {"X": np.ones((3, 1, 4), np.float32), "H_0": np.zeros((1, 8), np.float32)}


def test_a_session_lowers_every_scope_when_it_is_created() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    plans = _scopes(sess.plan)
    assert len(plans) >= 3  # main, the hoisted pre-body, what remains of the body
    for plan in plans:
        made = LOWERED[id(plan)]
        assert made.function is not None and not made.variants


def test_an_unobserved_run_makes_only_the_loop_driver() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    sess.run(None, _feeds())
    made = {key for plan in _scopes(sess.plan) for key in lowered(plan).variants}
    (key,) = made
    assert key.loop and not key.checked and not key.use_cond


def test_a_run_with_run_options_makes_the_checked_variants_once() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    expected = sess.run(None, _feeds())
    for _ in range(2):
        got = sess.run(None, _feeds(), onnxflow.RunOptions())
        np.testing.assert_array_equal(got[0], expected[0])
    main = lowered(sess.plan).variants
    assert list(main) == [Variant(checked=True)]
    drivers = [k for p in _scopes(sess.plan) for k in lowered(p).variants if k.loop]
    assert sorted(k.checked for k in drivers) == [False, True]


def test_a_variant_equals_the_tuple_of_its_fields() -> None:
    """The loop engine looks drivers up with plain tuples: no Variant made per loop call."""
    assert {Variant(True, loop=True): 1}.get((True, True, False)) == 1


def test_what_is_lowered_goes_with_its_session() -> None:
    sess = onnxflow.InferenceSession(rnn_scan())
    sess.run(None, _feeds())
    sess.run(None, _feeds(), onnxflow.RunOptions())
    ids = [id(plan) for plan in _scopes(sess.plan)]
    assert all(i in LOWERED for i in ids)
    del sess
    gc.collect()
    assert not any(i in LOWERED for i in ids)


def _cancelling_step(options: onnxflow.RunOptions, at: int, ran: list[int]) -> Any:
    def step(i: int) -> bool:
        ran.append(i)
        if i == at:
            options.terminate = True
        return True

    return step


def test_iterate_tests_terminate_before_each_iteration_and_names_it() -> None:
    options, ran = onnxflow.RunOptions(), []
    token = set_run_options(options)
    try:
        with pytest.raises(onnxflow.CancelledError, match=r"^'n' at iteration 3: run terminated"):
            iterate(Iterations("'n'", "n"), 10, _cancelling_step(options, 2, ran))
    finally:
        reset_run_options(token)
    assert ran == [0, 1, 2]


class Scopes(Observer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def scope_start(self, scope: Any, total: int | None) -> None:
        self.seen.append(("start", scope, total))

    def scope_end(self, scope: Any, seconds: float) -> None:
        self.seen.append(("end", scope))


def test_iterate_makes_each_iteration_a_scope_and_stops_when_a_step_says() -> None:
    scopes = Scopes()
    watch = observe([scopes])
    try:
        iterate(Iterations("'n'", "n", total=5, batch=1), 5, lambda i: i < 1)
    finally:
        stop_observing(watch)
    assert scopes.seen == [
        ("start", (("n", (1, 0)),), 5),
        ("end", (("n", (1, 0)),)),
        ("start", (("n", (1, 1)),), 5),
        ("end", (("n", (1, 1)),)),
    ]


def test_iterate_names_the_iteration_of_a_body_failure() -> None:
    def step(i: int) -> bool:
        if i == 1:
            raise RuntimeFailure("Neg 'x' failed")
        return True

    with pytest.raises(RuntimeFailure, match=r"^'n' at iteration 1: Neg 'x' failed"):
        iterate(Iterations("'n'", "n"), 3, step)


def _terminate_reads(path: Path) -> int:
    """How many times the code of ``path`` reads ``.terminate`` (strings and comments aside)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    return sum(
        1
        for a, b in itertools.pairwise(tokens)
        if a.string == "." and b.type == tokenize.NAME and b.string == "terminate"
    )


def test_terminate_is_tested_in_one_place() -> None:
    reads = {p.relative_to(SRC).as_posix(): _terminate_reads(p) for p in SRC.rglob("*.py")}
    assert {p: n for p, n in reads.items() if n} == {"options.py": 1}  # where it is set
    assert "options.terminate" in STOP_REQUESTED
