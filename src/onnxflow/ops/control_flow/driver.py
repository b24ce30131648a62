"""Whole loops as generated Python: a body plan's steps inlined in one ``while`` over iterations.

:mod:`onnxflow.runtime.codegen` turns a plan into a function called once per iteration; a loop
then pays, every iteration, for a call, an argument list, unpacking, and the stacking of its scan
outputs through the loop operator's own Python. Here the iteration itself is generated code::

    def drive(i, stop, states, seqs, tail, sinks, options):
        (v3,) = states
        (v9,) = tail
        (s0,) = sinks
        v2 = _TRUE
        while i < stop:
            v4 = f0(v3, c7)          # the body's steps, as in codegen
            v5 = f1(v3)
            v6 = f2(v4, v5)
            del v4, v5
            if v6.shape == z0 ...: b0[i] = v6   # scan output: a row of its stacker's buffer
            else: b0, z0, d0 = _sink(s0, v6, i)  # (the first row, or a changed shape)
            (v3,) = (v6,)            # loop-carried values swapped, never copied
            i += 1
        return i, [v3]

Values that stay the same across iterations (invariants hoisted out of the body, captured outer
values, the Loop's condition input) are bound once and never deleted inside the loop. Each
function is called on zero iterations when made, so that CPython has specialized it (:func:`_warm`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.compile.plan import Plan
from onnxflow.ops.control_flow.common import TRUE, Stacker, as_bool, terminated
from onnxflow.runtime.codegen import Emitter

Driver = Callable[..., tuple[int, list[Any]]]


@dataclass(frozen=True)
class Layout:
    """Where a body plan's per-iteration values sit among its arguments and outputs.

    Arguments: ``(i, cond)`` first when ``counter`` (Loop), then ``n_states`` loop-carried
    values, then ``n_indexed`` values read as row ``i`` of a sequence (Scan's elements, batched
    rows), then values fixed for the whole loop. Outputs: the condition first when ``counter``,
    then the new loop-carried values, then one value per scan output.
    """

    counter: bool
    n_states: int
    n_indexed: int


def generate_driver(
    plan: Plan, layout: Layout, *, checked: bool, use_cond: bool, label: str
) -> tuple[Driver, dict[int, int]]:
    """Return the loop function for ``plan`` and its map from source line to body step.

    ``drive(i, stop, states, seqs, tail, sinks, options)`` runs iterations ``i..stop-1`` (fewer
    when ``use_cond`` and the body's condition turns false) and returns ``(next i, states)``.
    ``sinks`` are called with each scan output value. ``options.terminate`` is tested before
    every iteration and step when ``checked``. ``label`` names the loop in condition errors.
    """
    em = Emitter(plan, checked)
    args = list(plan.arg_slots)
    head = 2 if layout.counter else 0
    index_slot, cond_slot = (args[0], args[1]) if layout.counter else (None, None)
    states = args[head : head + layout.n_states]
    indexed = args[head + layout.n_states : head + layout.n_states + layout.n_indexed]
    fixed = args[head + layout.n_states + layout.n_indexed :]
    outs = list(plan.output_slots)
    cond_out = outs[0] if layout.counter else None
    new_states = outs[1 if layout.counter else 0 :][: layout.n_states]
    scan_outs = outs[len(new_states) + (1 if layout.counter else 0) :]
    reads = {s for _, ins, _, _ in plan.steps for s in ins} | set(outs)

    def truth(value: Any, i: int) -> bool:
        if value.__class__ is np.ndarray and value.ndim == 0:
            return bool(value)
        return as_bool(value, f"{label}: body condition at iteration {i}")

    def stopped() -> None:
        raise terminated()

    em.namespace.update(
        _TRUE=TRUE, _index=_index, _truth=truth, _stopped=stopped, _sink=_sink, _ndarray=np.ndarray
    )
    lines = ["def drive(i, stop, states, seqs, tail, sinks, options):"]
    for names, source in ((states, "states"), (fixed, "tail")):
        if names:
            lines.append(f"    ({', '.join(f'v{s}' for s in names)},) = {source}")
    if indexed:
        lines.append(f"    ({', '.join(f'q{k}' for k in range(len(indexed)))},) = seqs")
    if scan_outs:
        lines.append(f"    ({', '.join(f's{k}' for k in range(len(scan_outs)))},) = sinks")
        for k in range(len(scan_outs)):
            lines.append(f"    b{k} = z{k} = d{k} = None")
    if cond_slot is not None:
        lines.append(f"    v{cond_slot} = _TRUE")
    head_end = len(lines)
    lines.append("    while i < stop:")
    body = "        "
    if checked:
        lines.append(f"{body}if options.terminate: _stopped()")
    if index_slot is not None and index_slot in reads:
        lines.append(f"{body}v{index_slot} = _index(i)")
    for k, slot in enumerate(indexed):
        if slot in reads:  # a Scan element only read by hoisted work is not fetched
            lines.append(f"{body}v{slot} = q{k}[i]")
    keep = frozenset(fixed) | ({cond_slot} if cond_slot is not None else set())
    em.steps(lines, body, keep, fixed=keep)
    for k, slot in enumerate(scan_outs):  # into the stacker's buffer once it has one
        v = em.ref(slot)
        lines.append(
            f"{body}if {v}.__class__ is _ndarray and {v}.shape == z{k} and {v}.dtype is d{k}: "
            f"b{k}[i] = {v}"
        )
        lines.append(f"{body}else: b{k}, z{k}, d{k} = _sink(s{k}, {v}, i)")
    if use_cond and cond_out is not None:
        c = em.ref(cond_out)  # a 0-d array is tested here; anything else by _truth
        lines.append(
            f"{body}go = bool({c}) if {c}.__class__ is _ndarray and {c}.ndim == 0 "
            f"else _truth({c}, i)"
        )
    if states:
        lines.append(
            f"{body}({', '.join(f'v{s}' for s in states)},) = "
            f"({', '.join(em.ref(s) for s in new_states)},)"
        )
    lines.append(f"{body}i += 1")
    if use_cond and cond_out is not None:
        lines.append(f"{body}if not go: break")
    for k in range(len(scan_outs)):
        lines.append(f"    s{k}.n = i")
    lines.append(f"    return i, [{', '.join(f'v{s}' for s in states)}]")
    if em.prologue:  # before the loop: line numbers after it shift
        lines[head_end:head_end] = [f"    {line}" for line in em.prologue]
        shift = len(em.prologue)
        em.line_to_step = {n + shift: step for n, step in em.line_to_step.items()}
    fn = em.build(lines, "drive")
    _warm(fn, len(states), len(indexed), len(fixed), len(scan_outs))
    return fn, em.line_to_step


#: Calls after which CPython 3.11 specializes a code object's bytecode (its warm-up delay).
_WARM_CALLS = 8


def _warm(fn: Driver, n_states: int, n_indexed: int, n_fixed: int, n_sinks: int) -> None:
    """Call ``fn`` on zero iterations until CPython has specialized its bytecode.

    CPython 3.11 specializes a function only after its eighth call, however long the loop in
    it runs. A loop driven once, or a few times, would run its every iteration unspecialized:
    10-15 % slower. Each of these calls costs about a microsecond.
    """
    sinks = [_Idle() for _ in range(n_sinks)]
    for _ in range(_WARM_CALLS):
        fn(0, 0, [None] * n_states, [None] * n_indexed, [None] * n_fixed, sinks, None)


class _Idle:
    """A stand-in for a scan output's Stacker in :func:`_warm`: it only has its count set."""

    n = 0


def iteration_of(exc: BaseException, driver: Driver) -> int | None:
    """The iteration ``driver`` was running when it raised ``exc`` (None if it never ran)."""
    code = driver.__code__
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            found = tb.tb_frame.f_locals.get("i")
        tb = tb.tb_next
    return found


def _sink(stacker: Stacker, value: Any, i: int) -> tuple[Any, Any, Any]:
    """Add iteration ``i``'s value to ``stacker``; return its buffer, the element shape and the
    dtype that may be written into it directly (all None while it has no buffer)."""
    stacker.n = i  # the driver writes rows itself and only tells the count here and at the end
    stacker.add(value)
    if stacker.buffer is None:
        return None, None, None
    return stacker.buffer, stacker.shape, stacker.dtype


def _index(i: int) -> np.ndarray:
    """The iteration number a Loop body receives: a 0-d int64 tensor."""
    return np.array(i, dtype=np.int64)
