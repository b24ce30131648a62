"""Whole loops as generated Python: a body plan's steps inlined in one ``while`` over iterations.

:mod:`onnxflow.runtime.codegen` turns a plan into a function called once per iteration; a loop
then pays, every iteration, for a call, an argument list, unpacking, and the stacking of its scan
outputs through the loop operator's own Python. Here the iteration itself is generated code::

    def drive(i, stop, states, seqs, tail, sinks, options):
        (h,) = states
        (scale,) = tail
        (s0,) = sinks
        cond = _TRUE
        while i < stop:
            a = Mul(h, two)          # the body's steps, as in codegen
            b = Tanh(h)
            h_out = Add(a, b)
            del a, b
            if h_out.shape == z0 ...: b0[i] = h_out   # scan output: a row of its stacker's buffer
            else: b0, z0, d0 = _sink(s0, h_out, i)  # (the first row, or a changed shape)
            (h,) = (h_out,)          # loop-carried values swapped, never copied
            i += 1
        return i, [h]

With loop-carried values, the iterations run in stretches between two looks at whether they
grow (:mod:`onnxflow.runtime.growth`), each stretch a ``while i < lim`` around the same lines.

Values that stay the same across iterations (invariants hoisted out of the body, captured outer
values, the Loop's condition input) are bound once and never deleted inside the loop. Each
function is called on zero iterations when made, so that CPython has specialized it (:func:`_warm`).

Once the loop is *steady* (an iteration passed every guard that a steady value makes redundant,
and its loop-carried values kept their shapes and dtypes: :class:`~onnxflow.runtime.codegen.Twin`)
the rest of it runs in a second ``while`` inside the first, the twin: the same steps without
those guards, a scan output computed straight into its buffer row by the ufunc that makes it::

        if ok: q = _signature(h)           # after each iteration of the guarded loop
        else: p = q = None
        if q is not None and q == p:       # steady: the rest runs on the twin
            while i < stop:
                a = Mul(h, two)
                b = Tanh(h)
                h_out = Add(a, b, out=b0[i, ...])
                del a, b
                (h,) = (h_out,)
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

from onnxflow.compile.plan import Layout, Plan, returns_one
from onnxflow.runtime.codegen import Block, Emitter, Twin, steady_slots
from onnxflow.runtime.context import STOP_REQUESTED, cancelled
from onnxflow.runtime.growth import FIRST_CHECK, FOREVER, SHORT, Watch
from onnxflow.runtime.stacking import TRUE, Stacker, as_bool

Driver = Callable[..., tuple[int, list[Any]]]


@dataclass(frozen=True)
class _Slots:
    """Where a loop's values sit among its body plan's arguments and outputs (see Layout)."""

    index: int | None  # Loop's iteration number
    cond: int | None  # Loop's condition input
    states: list[int]
    indexed: list[int]
    fixed: list[int]
    cond_out: int | None
    new_states: list[int]
    scan_outs: list[int]
    #: Slots some step or output reads.
    reads: frozenset[int]

    @classmethod
    def of(cls, plan: Plan, layout: Layout) -> _Slots:
        args, outs = list(plan.arg_slots), list(plan.output_slots)
        head = 2 if layout.counter else 0
        rows = head + layout.n_states
        new_states = outs[1 if layout.counter else 0 :][: layout.n_states]
        return cls(
            index=args[0] if layout.counter else None,
            cond=args[1] if layout.counter else None,
            states=args[head:rows],
            indexed=args[rows : rows + layout.n_indexed],
            fixed=args[rows + layout.n_indexed :],
            cond_out=outs[0] if layout.counter else None,
            new_states=new_states,
            scan_outs=outs[len(new_states) + (1 if layout.counter else 0) :],
            reads=frozenset({s for _, ins, _, _ in plan.steps for s in ins} | set(outs)),
        )


def generate_driver(
    plan: Plan, layout: Layout, *, checked: bool, use_cond: bool, label: str
) -> tuple[Driver, dict[int, int]]:
    """Return the loop function for ``plan`` and its map from source line to body step.

    ``drive(i, stop, states, seqs, tail, sinks, options)`` runs iterations ``i..stop-1`` (fewer
    when ``use_cond`` and the body's condition turns false) and returns ``(next i, states)``.
    ``sinks`` are called with each scan output value. The loop-carried values are looked at
    now and then (:mod:`onnxflow.runtime.growth`; in the twin only if it keeps some unsteady).
    When ``checked``, whether the caller asked to stop is tested before every iteration and
    step. ``label`` names the loop in condition and growth errors.
    """
    slots = _Slots.of(plan, layout)
    em = Emitter(plan, checked)
    em.namespace.update(_helpers(label))
    first = 1 if layout.counter else 0
    names = plan.output_names[first : first + layout.n_states]
    em.namespace.update(_watch=Watch(label, names, use_cond), _FOREVER=FOREVER)
    keep = frozenset(slots.fixed) | ({slots.cond} if slots.cond is not None else set())
    roots, twin = _steady(plan, slots.states, slots.new_states, {*slots.indexed, slots.index}, keep)
    roots_of = _aliases(plan)
    for k, slot in enumerate(slots.scan_outs):  # the twin computes a scan output in its row
        root = roots_of.get(slot, slot)
        if slot in twin.stable and root not in twin.rows and root not in plan.arg_slots:
            twin.rows[root] = k
    steps = Block()
    em.steps(steps, keep, fixed=keep, twin=twin)
    tail, twin_tail = _tails(em, twin, slots, use_cond, roots_of)
    look = _look(em, slots.states)
    if look and set(slots.states) - set(roots):  # the twin may change their shapes
        twin_tail.add(look)
    head = _head(em, slots, checked)
    iteration = Block()
    if twin.dropped:
        iteration.add("ok = ok0")
    for block in (head, steps, tail):
        iteration.extend(block)
    if twin.dropped:
        iteration.extend(_to_twin(em, twin, roots, head, twin_tail, set(plan.output_slots)))
    source = _prelude(em, slots, twin.dropped > 0, use_cond)
    source.extend(_iterations(iteration, look), "    ")
    source.extend(_epilogue(em, slots, twin, roots_of), "    ")
    fn, line_to_step = em.build(source, "drive")
    _warm(fn, len(slots.states), len(slots.indexed), len(slots.fixed), len(slots.scan_outs))
    return fn, line_to_step


def _helpers(label: str) -> dict[str, Any]:
    """The names generated loops call besides the body's kernels."""

    def truth(value: Any, i: int) -> bool:
        if value.__class__ is np.ndarray and value.ndim == 0:
            return bool(value)
        return as_bool(value, f"{label}: body condition at iteration {i}")

    def stopped() -> None:
        raise cancelled("")

    return {
        "_TRUE": TRUE,
        "_index": _index,
        "_truth": truth,
        "_stopped": stopped,
        "_sink": _sink,
        "_ndarray": np.ndarray,
        "_signature": _signature,
        "_arrays": _arrays,
        "_own": _own,
    }


def _prelude(em: Emitter, slots: _Slots, use_twin: bool, use_cond: bool) -> Block:
    """The function's first lines: arguments unpacked, buffers unset, fixed work done."""
    source = Block()
    source.add("def drive(i, stop, states, seqs, tail, sinks, options):")
    for names, given in ((slots.states, "states"), (slots.fixed, "tail")):
        if names:
            source.add(f"    ({', '.join(em.local(s) for s in names)},) = {given}")
    if slots.states:  # when the values are first looked at: growth.first_check, inlined
        short = f"1 if {SHORT} < stop < _FOREVER else {FIRST_CHECK}"
        source.add(f"    g = None; w = {FIRST_CHECK if use_cond else short}")
    if slots.indexed:
        source.add(f"    ({', '.join(f'q{k}' for k in range(len(slots.indexed)))},) = seqs")
    if slots.scan_outs:
        source.add(f"    ({', '.join(f's{k}' for k in range(len(slots.scan_outs)))},) = sinks")
        for k in range(len(slots.scan_outs)):
            source.add(f"    b{k} = z{k} = d{k} = None")
    if slots.cond is not None:
        source.add(f"    {em.local(slots.cond)} = _TRUE")
    if use_twin:  # rows of arrays all have one signature
        source.add(f"    p = q = None; ok0 = {'_arrays(seqs)' if slots.indexed else '1'}")
    for line in em.prologue:
        source.add(f"    {line}")
    return source


def _head(em: Emitter, slots: _Slots, checked: bool) -> Block:
    """An iteration's first lines: the cancellation test and the iteration's own inputs."""
    head = Block()
    if checked:
        head.add(f"if {STOP_REQUESTED}: _stopped()")
    if slots.index is not None and slots.index in slots.reads:
        head.add(f"{em.local(slots.index)} = _index(i)")
    for k, slot in enumerate(slots.indexed):
        if slot in slots.reads:  # a Scan element only read by hoisted work is not fetched
            head.add(f"{em.local(slot)} = q{k}[i]")
    return head


def _to_twin(
    em: Emitter, twin: Twin, roots: list[int], head: Block, tail: Block, outputs: set[int]
) -> Block:
    """The lines ending a guarded iteration: once two iterations in a row passed every guard
    with the same signatures, the rest of the loop runs on the twin (its first iteration making
    the scratch buffers the next ones write into)."""
    block = Block()
    block.add(f"if ok: q = _signature({', '.join(em.local(s) for s in roots)})")
    block.add("else: p = q = None")
    block.add("if q is not None and q == p:  # steady: the rest runs on the twin")
    scratch = twin.scratch(outputs)
    if scratch:
        first, rest = twin.with_scratch(scratch)
        block.add("    if i < stop:")
        for part in (head, first, tail):
            block.extend(part, "        ")
        block.add("        while i < stop:")
        indent = "            "
    else:
        rest = twin.lines
        block.add("    while i < stop:")
        indent = "        "
    for part in (head, rest, tail):
        block.extend(part, indent)
    block.add("    break")
    block.add("p = q")
    return block


def _epilogue(em: Emitter, slots: _Slots, twin: Twin, roots_of: dict[int, int]) -> Block:
    """The lines after the loop: the sinks told their counts, the states returned (a state the
    twin wrote into a scan output's buffer goes out as a copy)."""
    block = Block()
    for k in range(len(slots.scan_outs)):
        block.add(f"s{k}.n = i")
    owned = []
    for s, n in zip(slots.states, slots.new_states):
        root = roots_of.get(n, n)
        v = em.local(s)
        owned.append(f"_own({v}, b{twin.rows[root]})" if root in twin.written else v)
    block.add(f"return i, [{', '.join(owned)}]")
    return block


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
        if traits.passthrough and returns_one(out):
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
    em: Emitter, twin: Twin, slots: _Slots, use_cond: bool, roots_of: dict[int, int]
) -> tuple[Block, Block]:
    """An iteration's last lines, as run until the loop is steady and in ``twin``: scan outputs
    written to their buffers, the condition tested, loop-carried values swapped, ``i`` counted.
    """
    lines, twin_lines = _scan_writes(em, twin, slots.scan_outs, roots_of)
    cond_out = slots.cond_out if use_cond else None
    if cond_out is not None:
        c = em.ref(cond_out)  # a 0-d array is tested here; anything else by _truth
        lines.add(
            f"go = bool({c}) if {c}.__class__ is _ndarray and {c}.ndim == 0 else _truth({c}, i)"
        )
        if cond_out in twin.stable:  # one element, since it had one in a steady iteration
            twin_lines.add(f"go = bool({c})")
            twin.dropped += 1
        else:
            twin_lines.add(lines.lines[-1][0])
    common = []
    if slots.states:
        common.append(
            f"({', '.join(em.local(s) for s in slots.states)},) = "
            f"({', '.join(em.ref(s) for s in slots.new_states)},)"
        )
    common.append("i += 1")
    if cond_out is not None:
        common.append("if not go: break")
    for line in common:
        lines.add(line)
        twin_lines.add(line)
    return lines, twin_lines


def _look(em: Emitter, states: list[int]) -> str:
    """The line looking at the loop-carried values when they are due a look (at iteration
    ``w``: :class:`~onnxflow.runtime.growth.Watch`); none without loop-carried values."""
    if not states:
        return ""
    now = "".join(f"{em.local(s)}, " for s in states)
    return f"if i >= w: g, w = _watch.check(g, i, stop, states, ({now}))"


def _iterations(iteration: Block, look: str) -> Block:
    """The loop over the iterations. With loop-carried values to look at, they run in
    stretches up to the next look, so that an iteration tests ``i`` only against the end of its
    stretch, as it would against ``stop`` (a ``break`` inside, the condition's or the twin's,
    ends the whole loop)."""
    block = Block()
    block.add("while i < stop:")
    if not look:
        block.extend(iteration, "    ")
        return block
    block.add("    lim = w if w < stop else stop")
    block.add("    while i < lim:")
    block.extend(iteration, "        ")
    block.add("    else:")
    block.add(f"        {look}")
    block.add("        continue")
    block.add("    break")
    return block


def _scan_writes(
    em: Emitter, twin: Twin, scan_outs: list[int], roots_of: dict[int, int]
) -> tuple[Block, Block]:
    """Each scan output written into its stacker's buffer once it has one, as run until the
    loop is steady and in ``twin`` (where the buffer fits every row once it fits one)."""
    lines, twin_lines = Block(), Block()
    for k, slot in enumerate(scan_outs):
        v = em.ref(slot)
        write = f"b{k}[i] = {v}"
        test = f"if {v}.__class__ is _ndarray and {v}.shape == z{k} and {v}.dtype is d{k}: {write}"
        fallback = f"else: b{k}, z{k}, d{k} = _sink(s{k}, {v}, i)"
        lines.add(test)
        if slot in twin.stable:
            lines.add(f"{fallback}; ok = 0")
            root = roots_of.get(slot, slot)
            if root not in twin.written or twin.rows[root] != k:  # not computed in its row
                twin_lines.add(write)
            twin.dropped += 1
        else:
            lines.add(fallback)
            twin_lines.add(test)
            twin_lines.add(fallback)
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
