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

Once the loop is *steady* (an iteration passed every guard that a steady value makes redundant,
and its loop-carried values kept their shapes and dtypes: :class:`~onnxflow.runtime.codegen.Twin`)
the rest of it runs in a second ``while`` inside the first, the twin: the same steps without
those guards, a scan output computed straight into its buffer row by the ufunc that makes it::

        if ok: q = _signature(v3)          # after each iteration of the guarded loop
        else: p = q = None
        if q is not None and q == p:       # steady: the rest runs on the twin
            while i < stop:
                v4 = f0(v3, c7)
                v5 = f1(v3)
                v6 = f2(v4, v5, out=b0[i, ...])
                del v4, v5
                (v3,) = (v6,)
                i += 1
            break
        p = q

A value the twin makes with a ufunc or ``np.dot`` and uses up within its iteration (not carried,
not a scan output, read only by steps that make new arrays: :meth:`Twin.scratch`) is computed
by the first twin iteration as usual and kept as a scratch buffer ``t<slot>``; the next
iterations write it there (``out=t<slot>``) instead of allocating it anew.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxflow.compile.plan import Plan
from onnxflow.ops.control_flow.common import TRUE, Stacker, as_bool, terminated
from onnxflow.runtime.codegen import Emitter, Twin, steady_slots

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

    keep = frozenset(fixed) | ({cond_slot} if cond_slot is not None else set())
    roots, twin = _steady(plan, states, new_states, {*indexed, index_slot}, keep)
    em.namespace.update(
        _TRUE=TRUE,
        _index=_index,
        _truth=truth,
        _stopped=stopped,
        _sink=_sink,
        _ndarray=np.ndarray,
        _signature=_signature,
        _arrays=_arrays,
        _own=_own,
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
    # one iteration: its head, the body's steps (each line mapped to its step), its tail
    head = []
    if checked:
        head.append("if options.terminate: _stopped()")
    if index_slot is not None and index_slot in reads:
        head.append(f"v{index_slot} = _index(i)")
    for k, slot in enumerate(indexed):
        if slot in reads:  # a Scan element only read by hoisted work is not fetched
            head.append(f"v{slot} = q{k}[i]")
    roots_of = _aliases(plan)
    for k, slot in enumerate(scan_outs):  # the twin computes a scan output in its buffer row
        root = roots_of.get(slot, slot)
        if slot in twin.stable and root not in twin.rows and root not in plan.arg_slots:
            twin.rows[root] = k
    steps: list[str] = []
    em.steps(steps, "", keep, fixed=keep, twin=twin)
    cond = cond_out if use_cond else None
    tail, twin_tail = _tails(em, twin, scan_outs, cond, states, new_states, roots_of)
    use_twin = twin.dropped > 0
    body = "        "
    if use_twin:  # rows of arrays all have one signature
        lines.append(f"    p = q = None; ok0 = {'_arrays(seqs)' if indexed else '1'}")
    head_end = len(lines)
    lines.append("    while i < stop:")
    if use_twin:
        lines.append(f"{body}ok = ok0")
    lines.extend(body + line for line in head)
    at = len(lines)
    lines.extend(body + line for line in steps)
    line_to_step = {at + n: step for n, step in em.line_to_step.items()}
    lines.extend(body + line for line in tail)
    if use_twin:
        lines.append(f"{body}if ok: q = _signature({', '.join(f'v{s}' for s in roots)})")
        lines.append(f"{body}else: p = q = None")
        lines.append(f"{body}if q is not None and q == p:  # steady: the rest runs on the twin")
        scratch = twin.scratch(set(outs))
        passes = [twin.lines]
        if scratch:  # the first twin iteration makes the buffers the next ones write into
            lines.append(f"{body}    if i < stop:")
            passes = list(twin.with_scratch(scratch))
        inner = body + "    "
        for twin_lines in passes:
            if twin_lines is passes[-1]:
                lines.append(f"{inner}while i < stop:")
            inner += "    "
            lines.extend(inner + line for line in head)
            at = len(lines)
            lines.extend(inner + line for line in twin_lines)
            line_to_step.update({at + n + 1: step for n, step in twin.line_to_step.items()})
            lines.extend(inner + line for line in twin_tail)
        lines.append(f"{body}    break")
        lines.append(f"{body}p = q")
    for k in range(len(scan_outs)):
        lines.append(f"    s{k}.n = i")
    # a loop-carried value the twin wrote into a scan output's buffer goes out as a copy
    owned = []
    for s, n in zip(states, new_states):
        root = roots_of.get(n, n)
        owned.append(f"_own(v{s}, b{twin.rows[root]})" if root in twin.written else f"v{s}")
    lines.append(f"    return i, [{', '.join(owned)}]")
    if em.prologue:  # before the loop: line numbers after it shift
        lines[head_end:head_end] = [f"    {line}" for line in em.prologue]
        shift = len(em.prologue)
        line_to_step = {n + shift: step for n, step in line_to_step.items()}
    em.line_to_step = line_to_step
    fn = em.build(lines, "drive")
    _warm(fn, len(states), len(indexed), len(fixed), len(scan_outs))
    return fn, em.line_to_step


def _steady(
    plan: Plan,
    states: list[int],
    new_states: list[int],
    others: set[int | None],
    fixed: frozenset[int],
) -> tuple[list[int], Twin]:
    """The loop-carried slots whose signature a steady loop keeps, and the body's twin.

    A loop-carried value is kept steady when its next value's signature follows from steady
    values (its own included); the largest such set is found by dropping the others until none
    is left to drop. ``others`` are the per-iteration arguments that are steady by nature (the
    iteration number, rows of the scanned arrays).
    """
    roots = list(states)
    base = {s for s in others if s is not None}
    while True:
        stable = steady_slots(plan, set(roots) | base, fixed)
        kept = [s for s, n in zip(states, new_states) if s in roots and n in stable]
        if kept == roots:
            break
        roots = kept
    return roots, Twin(stable)


def _aliases(plan: Plan) -> dict[int, int]:
    """Slot -> the slot it passes on unchanged (through Identity and its kind), for each alias."""
    roots: dict[int, int] = {}
    for (_, ins, out, _), traits in zip(plan.steps, plan.traits):
        if traits.passthrough and out.__class__ is int:
            roots[out] = roots.get(ins[0], ins[0])
    return roots


def _own(value: Any, buffer: Any) -> Any:
    """``value``, copied if it is a row of ``buffer`` (a scan output the loop also returns)."""
    if value.__class__ is np.ndarray and buffer is not None and value.base is buffer:
        return value.copy()
    return value


def _signature(*values: Any) -> tuple[Any, ...] | None:
    """The shapes and dtypes of ``values``; None when one is not an array."""
    sig = []
    for v in values:
        if v.__class__ is not np.ndarray:
            return None
        sig += (v.shape, v.dtype)
    return tuple(sig)


def _arrays(values: Any) -> bool:
    """Whether every value is an array (then its rows all have one shape and dtype)."""
    return all(v.__class__ is np.ndarray for v in values)


def _tails(
    em: Emitter,
    twin: Twin,
    scan_outs: list[int],
    cond_out: int | None,
    states: list[int],
    new_states: list[int],
    roots_of: dict[int, int],
) -> tuple[list[str], list[str]]:
    """An iteration's last lines, as run until the loop is steady and in ``twin``: scan outputs
    written to their buffers, the condition tested, loop-carried values swapped, ``i`` counted.
    """
    lines, twin_lines = [], []
    for k, slot in enumerate(scan_outs):  # into the stacker's buffer once it has one
        v = em.ref(slot)
        write = f"b{k}[i] = {v}"
        lines.append(
            f"if {v}.__class__ is _ndarray and {v}.shape == z{k} and {v}.dtype is d{k}: {write}"
        )
        fallback = f"else: b{k}, z{k}, d{k} = _sink(s{k}, {v}, i)"
        if slot in twin.stable:  # the buffer fits every row once it fits one
            lines.append(f"{fallback}; ok = 0")
            root = roots_of.get(slot, slot)
            if root not in twin.written or twin.rows[root] != k:  # not computed in its row
                twin_lines.append(write)
            twin.dropped += 1
        else:
            lines.append(fallback)
            twin_lines.extend(lines[-2:])
    if cond_out is not None:
        c = em.ref(cond_out)  # a 0-d array is tested here; anything else by _truth
        lines.append(
            f"go = bool({c}) if {c}.__class__ is _ndarray and {c}.ndim == 0 else _truth({c}, i)"
        )
        if cond_out in twin.stable:  # one element, since it had one in a steady iteration
            twin_lines.append(f"go = bool({c})")
            twin.dropped += 1
        else:
            twin_lines.append(lines[-1])
    if states:
        lines.append(
            f"({', '.join(f'v{s}' for s in states)},) = "
            f"({', '.join(em.ref(s) for s in new_states)},)"
        )
        twin_lines.append(lines[-1])
    lines.append("i += 1")
    twin_lines.append("i += 1")
    if cond_out is not None:
        lines.append("if not go: break")
        twin_lines.append("if not go: break")
    return lines, twin_lines


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
