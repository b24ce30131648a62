"""Plans turned into straight-line Python functions.

The interpreter in :mod:`onnxflow.runtime.executor` indexes a frame list for every input and
output of every step. Here a plan becomes the source of one function in which each value slot is
a local variable, each step one call, and each value is deleted after its last use::

    def run(args):
        (X, H_0,) = args
        XW = MatMul(X, W) if W.ndim == 2 == X.ndim else MatMul_kernel(X, W)
        del X
        (Y, _,) = _many(LSTM(XW, H_0), 2)
        ...
        return [Y]

Each value is named after its ONNX name (:class:`Names`: made an identifier, unique, never a
builtin, keyword or name of the generated code's own); a constant is a global of the generated
code named so too, and a kernel is a global named after its node's operator (``MatMul``,
``Add_1``), which the legend under the function relates to its node.
Lines are written in blocks (:class:`Block`), each line with the step it runs, so that a
failing line's number names the step. Each step's :class:`~onnxflow.traits.Traits`
(``plan.traits``, declared where its kernel is registered) tell the emitter what it may write
instead of a plain call:

- ``ufunc``: the kernel is exactly ``ufunc(inputs..., out=...)``; the ufunc is called.
- ``call`` with ``guard``: the kernel is that call whenever the guard holds (MatMul is
  ``np.dot`` for two matrices); the line tests the guard, else calls the kernel.
- ``fresh``: the result is a new array. When such a value is read by one later step only, as
  that step's first input, a kernel with ``in_place`` (or a dtype-keeping ufunc, with ``out=x``)
  writes its result over it.
- ``stateful``: the kernel keeps a memo between calls; each generated function calls its own
  instance (the plan holds the stateless kernel).
- ``widens``: the kernel keeps a broadcast operand widened, so it is called rather than its
  ufunc; in a loop (``steps(fixed=...)``), an operand fixed for the whole loop is kept widened
  to the result's shape in a local instead, and a read-only one (a constant) stays widened for
  the next runs while it is the same array.
- ``static_shape`` (:attr:`~onnxflow.traits.Traits.steady`): the class, shape and dtype of the
  kernel's outputs follow from its inputs' (True), or also from the values of the inputs at the
  positions it lists. A loop's :class:`Twin` drops the guards of steps whose inputs are steady
  by this rule.

A checked twin takes the run options and tests whether the caller asked to stop
(:data:`~onnxflow.runtime.context.STOP_REQUESTED`) before every step. When a kernel
fails, the traceback's line number in the generated code names the step.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import re
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxflow.compile.plan import NONE_SLOT, TRASH_SLOT, Plan, many, out_slots, returns_one
from onnxflow.runtime.context import STOP_REQUESTED, before_step, cancelled
from onnxflow.traits import WIDEN_LIMIT, Traits

Runner = Callable[..., list[Any]]

_ids = itertools.count()


def generate(plan: Plan, checked: bool) -> tuple[Runner, dict[int, int]]:
    """Return the generated function for ``plan`` and its map from source line to step index.

    The function takes ``(args)``, or ``(args, options)`` when ``checked``.
    """
    emitter = Emitter(plan, checked)
    body = Block()
    emitter.steps(body)
    source = Block()
    source.add(f"def run({'args, options' if checked else 'args'}):")
    if plan.arg_slots:
        source.add(f"    ({', '.join(emitter.local(s) for s in plan.arg_slots)},) = args")
    source.extend(body, "    ")
    source.add(f"    return [{', '.join(emitter.ref(s) for s in plan.output_slots)}]")
    return emitter.build(source, "run")


class Block:
    """Lines of generated source, each with the index of the plan step it runs (or None).

    Code is written in blocks and blocks are put together, indented, into one function: the
    map from a line to its step is made once, from the finished function (:meth:`render`).
    """

    def __init__(self, lines: list[tuple[str, int | None]] | None = None) -> None:
        self.lines: list[tuple[str, int | None]] = lines or []

    def __len__(self) -> int:
        return len(self.lines)

    def add(self, text: str, step: int | None = None) -> None:
        """Append one line."""
        self.lines.append((text, step))

    def extend(self, other: Block, indent: str = "") -> None:
        """Append ``other``'s lines, indented."""
        self.lines.extend((indent + text, step) for text, step in other.lines)

    def texts(self) -> list[str]:
        """The lines, without their steps."""
        return [text for text, _ in self.lines]

    def copy(self) -> Block:
        """A block with the same lines, to change apart from this one."""
        return Block(list(self.lines))

    def render(self) -> tuple[str, dict[int, int]]:
        """The source text, and the step of each line (1-based, as tracebacks count)."""
        steps = {n: step for n, (_, step) in enumerate(self.lines, 1) if step is not None}
        return "\n".join(self.texts()), steps


@dataclass
class Twin:
    """A loop body's lines without the guards its steady values make redundant.

    A generated loop tests, every iteration, that MatMul's inputs are matrices, that a widened
    operand still has the other operand's shape, and that a scan output fits its buffer. Once
    an iteration has passed every test and left its loop-carried values with the class, shape
    and dtype they came in with, the next iteration sees the same signatures throughout, if each
    step's output signature follows from its inputs' (:func:`steady_slots`): the tests can only
    pass again. The driver then runs the rest of the loop on these lines, and the values of
    :meth:`scratch` in buffers its first iteration made (:meth:`with_scratch`).
    """

    #: Slots whose class, shape and dtype are the same in every iteration of a steady loop.
    stable: frozenset[int]
    lines: Block = field(default_factory=Block)
    #: How many guards the twin goes without.
    dropped: int = 0
    #: Slot -> the scan output whose buffer row ``b<k>[i]`` the twin's ufunc may write it to.
    rows: dict[int, int] = field(default_factory=dict)
    #: The slots of :attr:`rows` that the twin does write there.
    written: set[int] = field(default_factory=set)
    #: Slot -> (index in :attr:`lines`, that line writing its result into scratch ``t<slot>``).
    makers: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: Slots a twin line may pass on or keep: an alias, a view, a result written over one, a
    #: kernel that remembers its operand. Their arrays may outlive the iteration.
    held: set[int] = field(default_factory=set)
    #: The names of the generated function the twin's lines are part of.
    names: Names | None = None

    def holds(self, ins: tuple[int, ...]) -> bool:
        """Whether a guard on these inputs is redundant once the loop is steady."""
        return all(s in self.stable for s in ins)

    def row(self, out: Any) -> str | None:
        """Where the twin's ufunc writes a step's result (recorded as written), if anywhere."""
        slot = _single(out)
        k = self.rows.get(slot)  # type: ignore[arg-type]
        if k is None:
            return None
        self.written.add(slot)  # type: ignore[arg-type]
        return f"b{k}[i, ...]"  # a view even of a 0-d row

    def offer(self, out: Any, line: str) -> None:
        """Record that the step about to be added to :attr:`lines` as the one line ``line``,
        ending ``out=...)``, can write its result into a scratch buffer instead."""
        slot = _single(out)
        if slot is not None and slot != TRASH_SLOT and slot in self.stable:
            self.makers[slot] = (len(self.lines), f"{line[: -len('...)')]}{self._buffer(slot)})")

    def _buffer(self, slot: int) -> str:
        """The scratch buffer of ``slot``: ``t<slot>``, a name of the generated code's own."""
        return f"t{slot}"

    def _local(self, slot: int) -> str:
        return self.names.local(slot) if self.names is not None else f"v{slot}"

    def scratch(self, outputs: set[int]) -> list[int]:
        """The slots whose every value the twin may compute into one buffer, made by the first
        twin iteration and written again by each next one.

        Such a value has the same shape and dtype each iteration (:attr:`stable`), is made by
        a ufunc or ``np.dot`` (which take ``out=``), is read only by steps that make new arrays
        from it (not :attr:`held`) and is not a loop output (``outputs``): nothing of it lives
        past its iteration, so the next one may write over it.
        """
        return sorted(s for s in self.makers if s not in self.held and s not in outputs)

    def with_scratch(self, slots: list[int]) -> tuple[Block, Block]:
        """The twin's lines for its first iteration (each ``slots`` value kept as its scratch
        buffer) and for the next ones (each written into it); line for line as :attr:`lines`."""
        first, rest = self.lines.copy(), self.lines.copy()
        for slot in slots:
            at, line = self.makers[slot]
            text, step = first.lines[at]
            first.lines[at] = (f"{text}; {self._buffer(slot)} = {self._local(slot)}", step)
            rest.lines[at] = (line, step)
        kept = {self._local(slot) for slot in slots}  # their buffers live on: deleting saves none
        for n, (line, step) in enumerate(rest.lines):
            if line.startswith("del "):
                names = [v for v in line[4:].split(", ") if v not in kept]
                rest.lines[n] = (f"del {', '.join(names)}" if names else "pass", step)
        return first, rest


#: Names the generated functions use themselves: their arguments, loop counters and flags.
_OWN = frozenset(
    {"args", "options", "stop", "states", "seqs", "tail", "sinks", "ok", "ok0", "go", "run"}
    | {"drive", "i", "p", "q", "g", "w", "lim"}
)
#: The families of names the generated code gives its helpers: a scan output's buffer ``b<k>``,
#: its row shape ``z<k>`` and dtype ``d<k>``, its sink ``s<k>``, a scanned sequence ``q<k>``, a
#: scratch buffer ``t<slot>``, a widened operand ``w<step>``, its shape ``o<step>`` and its
#: store ``k<step>``.
_HELPER = re.compile(r"[bdkoqstwz]\d+")
#: Names no value may take: Python's keywords and builtins, and the generated code's own.
_TAKEN = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | _OWN


class Names:
    """The identifiers of one generated function: a local per value slot and a global per
    constant, named after the ONNX value, and a global per kernel, named after its operator.

    An ONNX name becomes an identifier by replacing each character that is not an ASCII letter,
    digit or underscore by ``_`` and dropping leading underscores (``/layer.0/Add_output_0``:
    ``layer_0_Add_output_0``); one that is then empty, starts with a digit, is a keyword or a
    builtin, or is a name of the generated code's own (``i``, ``ok``, the helpers' ``b0``,
    ``t7``, ``w3``...; those starting with ``_``) gets ``v_`` before it. Names are unique
    within the function (``_1``, ``_2``... after a taken one). Locals cost nothing at run time,
    whatever their length.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.taken: set[str] = set(_TAKEN)
        #: Per base name, the number to try next after it (each kernel of a 20,000-node chain
        #: is ``Add_<k>``: counting from 1 each time would take quadratic time).
        self.tried: dict[str, int] = {}
        self.values: dict[int, str] = {}
        self.constants: dict[int, str] = {}
        #: Kernel global -> the step it runs.
        self.kernels: dict[str, int] = {}

    def local(self, slot: int) -> str:
        """The local holding ``slot``'s value."""
        name = self.values.get(slot)
        if name is None:
            name = self.values[slot] = self._fresh(self.plan.slot_names[slot])
        return name

    def constant(self, slot: int) -> str:
        """The global holding constant ``slot``'s value (apart from its local, if it has one)."""
        name = self.constants.get(slot)
        if name is None:
            name = self.constants[slot] = self._fresh(self.plan.slot_names[slot])
        return name

    def kernel(self, step: int, suffix: str = "") -> str:
        """The global naming step ``step``'s kernel (``suffix``: another callable of it)."""
        name = self._fresh(self.plan.infos[step].op_type + suffix)
        self.kernels[name] = step
        return name

    def _fresh(self, onnx_name: str) -> str:
        base = re.sub(r"[^0-9A-Za-z_]", "_", onnx_name).lstrip("_")
        if not base or base[0].isdigit() or base in _TAKEN or _HELPER.fullmatch(base):
            base = f"v_{base}"
        k = self.tried.get(base, 0)
        name = f"{base}_{k}" if k else base
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.tried[base] = k + 1
        self.taken.add(name)
        return name


def steady_slots(plan: Plan, roots: set[int], fixed: frozenset[int]) -> frozenset[int]:
    """The slots of ``plan`` whose signature (class, shape, dtype) is the same every time it
    runs, given that ``roots`` (arguments) have that property and ``fixed`` are the very same
    values. Constants and omitted inputs are fixed too."""
    fixed = fixed | {NONE_SLOT} | (plan.constant_slots - set(plan.arg_slots))
    stable = set(roots) | fixed
    for (_, ins, out, _), traits in zip(plan.steps, plan.traits):
        kind = traits.steady
        if not kind or not all(s in stable for s in ins):
            continue
        if kind is not True and not all(ins[p] in fixed for p in kind if p < len(ins)):
            continue
        stable.update(out_slots(out))
    return frozenset(stable)


class Emitter:
    """Writes a plan's steps as Python source lines, each slot a local named after its ONNX
    value (:class:`Names`).

    Constants become globals of the generated code, and kernels globals named after their
    operator; the namespace also holds ``_many`` and ``_cancel(step)``.
    """

    def __init__(self, plan: Plan, checked: bool) -> None:
        self.plan = plan
        self.checked = checked
        self.names = Names(plan)
        self.namespace: dict[str, Any] = {"_many": many, "_cancel": _canceller(plan)}
        self.assigned = set(plan.arg_slots)
        #: Lines to run once before the steps (set up by fixed-operand broadcasts).
        self.prologue: list[str] = []
        #: Slots holding an array a step of this plan made, that nothing else refers to.
        self.fresh: set[int] = set()
        self.uses = Counter(s for _, ins, _, _ in plan.steps for s in ins)

    def ref(self, slot: int) -> str:
        """The expression reading ``slot``: None, a constant's global, or a local."""
        if slot == NONE_SLOT:
            return "None"
        if slot in self.plan.constant_slots and slot not in self.assigned:
            name = self.names.constant(slot)
            self.namespace[name] = self.plan.template[slot]
            return name
        return self.names.local(slot)

    def local(self, slot: int) -> str:
        """The local holding ``slot`` (what assigns it, unpacks it or deletes it writes)."""
        return self.names.local(slot)

    def target(self, slot: int) -> str:
        """What a step's output ``slot`` is assigned to: ``_`` for an omitted output."""
        return "_" if slot == TRASH_SLOT else self.names.local(slot)

    def kernel(self, step: int, fn: Any, suffix: str = "") -> str:
        """The global that ``fn``, step ``step``'s kernel (or another callable of it), is
        called by: named after the step's operator."""
        name = self.names.kernel(step, suffix)
        self.namespace[name] = fn
        return name

    def steps(
        self,
        block: Block,
        keep: frozenset[int] = frozenset(),
        fixed: frozenset[int] | None = None,
        twin: Twin | None = None,
    ) -> None:
        """Append each step's lines (and its ``del`` line) to ``block``; never delete ``keep``.

        ``fixed``: slots that hold the same value every time these lines run (a loop's
        invariants); a broadcasting binary step with one fixed operand then keeps that operand
        widened in a local set up by :attr:`prologue`. ``twin``: also write the steps, without
        the guards that :attr:`Twin.stable` makes redundant, into ``twin.lines``; in ``block``
        each such guard's fallback then sets ``ok = 0``.
        """
        blocks = [block] if twin is None else [block, twin.lines]
        if twin is not None:
            twin.names = self.names
        for i, ((fn, ins, out, free), traits) in enumerate(zip(self.plan.steps, self.plan.traits)):
            if self.checked:
                for b in blocks:
                    b.add(f"if {STOP_REQUESTED}: _cancel({i})")
            reuse = self._reusable(traits, ins, out, free, keep)
            general, plain = self._step(i, fn, traits, ins, out, reuse, fixed, twin)
            for line in general:
                block.add(line, i)
            if twin is not None:
                for line in general if plain is None else plain:
                    twin.lines.add(line, i)
            self._assigned(traits, ins, out, reuse)
            for line in self._deletion(free, keep):
                for b in blocks:
                    b.add(line)

    def _deletion(self, free: tuple[int, ...], keep: frozenset[int]) -> list[str]:
        """The ``del`` line (if any) of the locals a step frees, but for ``keep``."""
        dead = [
            self.local(s) for s in free if s in self.assigned and s != TRASH_SLOT and s not in keep
        ]
        return [f"del {', '.join(dead)}"] if dead else []

    def _assigned(self, traits: Traits, ins: tuple[int, ...], out: Any, reuse: Any) -> None:
        """Record a step's outputs as assigned, and as fresh arrays when they are."""
        one = _single(out)
        if one is not None and (reuse is not None or self._makes_fresh(traits, ins)):
            self.fresh.add(one)
        self.assigned.update(out_slots(out))

    def _step(
        self,
        i: int,
        fn: Any,
        traits: Traits,
        ins: tuple[int, ...],
        out: Any,
        reuse: Any,
        fixed: frozenset[int] | None,
        twin: Twin | None,
    ) -> tuple[list[str], list[str] | None]:
        """Step ``i``'s lines, unindented, and their guard-free form for ``twin`` (None when
        they have no guard it can drop). ``reuse``: the kernel that writes over input 0."""
        widen = self._fixed_side(traits, ins, out, fixed)
        if widen is not None:
            return self._widened(i, traits.ufunc, ins, out, widen, twin)
        if reuse is not None:  # the only input dies here: write the result over it
            return self._over_input(i, traits, ins, out, reuse, twin)
        if traits.passthrough:
            if twin is not None:
                twin.held.update(ins)
            return [f"{self.target(out)} = {self.ref(ins[0])}"], None
        if traits.ufunc is not None and not traits.widens:
            return self._ufunc(i, traits.ufunc, ins, out, twin)
        if traits.call is not None:
            return self._guarded(i, fn, traits, ins, out, twin)
        return self._called(i, fn, traits, ins, out, twin)

    def _called(
        self, i: int, fn: Any, traits: Traits, ins: tuple[int, ...], out: Any, twin: Twin | None
    ) -> tuple[list[str], None]:
        """A step whose kernel is called as it is (its own instance, when it keeps a memo)."""
        f = self.kernel(i, fn if traits.stateful is None else traits.stateful())
        if twin is not None and (not traits.fresh or traits.widens):  # may view or keep them
            twin.held.update(ins)
        call = f"{f}({', '.join(self.ref(s) for s in ins)})"
        targets = ", ".join(self.target(s) for s in out_slots(out))
        if returns_one(out):
            return [f"{targets} = {call}"], None
        return [f"({targets},) = _many({call}, {len(out)})"], None

    def _over_input(
        self, i: int, traits: Traits, ins: tuple[int, ...], out: Any, reuse: Any, twin: Twin | None
    ) -> tuple[list[str], list[str] | None]:
        """A step whose kernel writes its result over input 0 (a ufunc with ``out=x``)."""
        f = self.kernel(i, reuse)
        x = self.ref(ins[0])
        t = self.target(_single(out))  # type: ignore[arg-type]
        ufunc = reuse is traits.ufunc
        row = _row(twin, out) if ufunc else None
        if twin is not None and not row:  # the result is the input's array
            twin.held.update(ins)
        if not ufunc:
            return [f"{t} = {f}({', '.join(self.ref(s) for s in ins)})"], None
        return [f"{t} = {f}({x}, out={x})"], row and [f"{t} = {f}({x}, out={row})"]

    def _ufunc(
        self, i: int, ufunc: Any, ins: tuple[int, ...], out: Any, twin: Twin | None
    ) -> tuple[list[str], list[str] | None]:
        """A kernel that is exactly a ufunc: called here, one Python call less."""
        f = self.kernel(i, ufunc)
        args = ", ".join(self.ref(s) for s in ins)
        row = _row(twin, out)
        line = f"{self.target(out)} = {f}({args}, out=...)"
        if twin is not None and not row:
            twin.offer(out, line)
        return [line], row and [f"{self.target(out)} = {f}({args}, out={row})"]

    def _guarded(
        self, i: int, fn: Any, traits: Traits, ins: tuple[int, ...], out: Any, twin: Twin | None
    ) -> tuple[list[str], list[str] | None]:
        """A kernel that is ``traits.call`` whenever its guard holds; else the kernel runs."""
        f = self.kernel(i, traits.call)
        g = self.kernel(i, fn, "_kernel")
        args = ", ".join(self.ref(s) for s in ins)
        guard = traits.guard.format(*(self.ref(s) for s in ins))  # type: ignore[union-attr]
        t = self.target(out)
        if twin is None or not twin.holds(ins):
            return [f"{t} = {f}({args}) if {guard} else {g}({args})"], None
        twin.dropped += 1
        twin.offer(out, f"{t} = {f}({args}, out=...)")
        return [f"if {guard}: {t} = {f}({args})", f"else: {t} = {g}({args}); ok = 0"], [
            f"{t} = {f}({args})"
        ]

    def _reusable(
        self,
        traits: Traits,
        ins: tuple[int, ...],
        out: Any,
        free: tuple[int, ...],
        keep: frozenset[int],
    ) -> Any:
        """The kernel to call so that it writes over input 0, or None.

        Only when input 0 is an array a step of this plan made, read by this step alone (so no
        view of it lives on: views come from the steps that read it) and freed here (so not a
        plan output); the kernel is a ufunc that keeps its dtype, or says how to run in place
        (``in_place``).
        """
        if _single(out) is None or not ins:
            return None
        x = ins[0]
        if x not in self.fresh or self.uses[x] != 1 or x not in free or x in keep:
            return None
        ufunc = traits.ufunc
        if ufunc is not None:
            if traits.widens or len(ins) != 1 or not keeps_dtype(ufunc):
                return None
            return ufunc
        return traits.in_place

    def _makes_fresh(self, traits: Traits, ins: tuple[int, ...]) -> bool:
        """Whether the step's result is a new array that nothing else refers to."""
        if traits.passthrough:  # an alias: fresh only if what it passes on was, and dies here
            return ins[0] in self.fresh and self.uses[ins[0]] == 1
        return traits.fresh

    def _fixed_side(
        self, traits: Traits, ins: tuple[int, ...], out: Any, fixed: frozenset[int] | None
    ) -> int | None:
        """The position of a widening binary step's only fixed operand, if it has one."""
        if fixed is None or not traits.widens or len(ins) != 2 or not returns_one(out):
            return None
        held = [
            s in fixed or (s in self.plan.constant_slots and s not in self.assigned) for s in ins
        ]
        if held[0] == held[1]:
            return None
        return 0 if held[0] else 1

    def _widened(
        self,
        i: int,
        ufunc: Any,
        ins: tuple[int, ...],
        out: int,
        side: int,
        twin: Twin | None,
    ) -> tuple[list[str], list[str] | None]:
        """Lines for ``ufunc(a, b)`` whose operand ``side`` is fixed: once the other operand's
        shape is the result's, the fixed one is used widened to it (equal shapes skip NumPy's
        broadcasting, 0.5 us a call); otherwise ``_widen`` computes the step and decides."""
        f = self.kernel(i, ufunc)
        self.namespace["_widen"] = widen
        moving = self.ref(ins[1 - side])
        wide, shape = f"w{i}", f"o{i}"
        # a read-only fixed operand (a constant) is often the very same array in the next run:
        # its widened copy is kept in k<i> and used again while it is
        self.namespace[f"k{i}"] = [(_dead, None, None)]
        self.namespace["_keep"] = keep
        fixed = self.ref(ins[side])
        self.prologue.append(f"_k = k{i}[0]")
        self.prologue.append(f"{wide}, {shape} = _k[1:] if _k[0]() is {fixed} else (None, None)")
        operands = f"{moving}, {wide}" if side else f"{wide}, {moving}"
        target = self.target(out)
        call = f"{target} = {f}({operands}, out=...)"
        fallback = (
            f"else: {target}, {wide}, {shape} = _widen({f}, {self.ref(ins[0])}, "
            f"{self.ref(ins[1])}, {side}, {shape}); _keep(k{i}, {fixed}, {wide}, {shape})"
        )
        if twin is None or not twin.holds(ins):
            return [f"if {moving}.shape == {shape}: {call}", fallback], None
        row = _row(twin, out)
        plain = f"{target} = {f}({operands}, out={row})" if row else call
        if not row:
            twin.offer(out, call)
        twin.dropped += 1
        return [f"if {moving}.shape == {shape}: {call}", f"{fallback}; ok = 0"], [plain]

    def build(self, source: Block, name: str) -> tuple[Callable[..., Any], dict[int, int]]:
        """Compile ``source`` and return the function ``name`` it defines, with the step of
        each of its lines (its text is kept for :func:`source_of`)."""
        filename = f"<onnxflow plan {self.plan.graph_name!r} #{next(_ids)}>"
        text, line_to_step = source.render()
        exec(compile(text, filename, "exec"), self.namespace)
        fn = self.namespace[name]
        _SOURCES[fn] = "\n".join([text, *self._legend()])
        return fn, line_to_step

    def _legend(self) -> list[str]:
        """Comment lines saying what each kernel name of the generated code is."""
        legend = []
        for name, step in self.names.kernels.items():
            info = self.plan.infos[step]
            node = f"{info.op_type} {info.name!r}" if info.name else info.op_type
            legend.append(f"# {name}: {_callable_name(self.namespace[name])}, for {node}")
        return legend


#: The source of every generated function, for as long as the function lives.
_SOURCES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _canceller(plan: Plan) -> Callable[[int], None]:
    """``_cancel(step)`` of generated code: raises the run's cancellation error naming the step.

    It holds the plan's names, not the plan: nothing the plan's lowered code holds may keep the
    plan alive (its :class:`~onnxflow.runtime.lower.Lowered` record goes when the plan does).
    """
    graph_name, infos = plan.graph_name, plan.infos

    def cancel(step: int) -> None:
        raise cancelled(before_step(graph_name, infos[step]))

    return cancel


def _callable_name(fn: Any) -> str:
    """How a kernel reads in a legend: ``numpy.dot``, ``onnxflow.ops.shape.concat``..."""
    if isinstance(fn, np.ufunc):
        return f"numpy.{fn.__name__}"
    inner = getattr(fn, "func", fn)  # a kernel with its attributes bound
    module = getattr(inner, "__module__", None) or _class_module(inner) or "numpy"
    return f"{module}.{getattr(inner, '__qualname__', type(inner).__name__)}"


def _class_module(fn: Any) -> str | None:
    """The module of the class of callable object ``fn`` (a compiled class's instance, whose
    own ``__module__`` reads None), unless a built-in one."""
    module = type(fn).__module__
    return None if module == "builtins" else module


def source_of(fn: Any) -> str | None:
    """The Python source of a generated function (None for any other callable)."""
    return _SOURCES.get(fn)


def widen(ufunc: Any, a: Any, b: Any, side: int, seen: Any) -> tuple[Any, Any, Any]:
    """Return ``ufunc(a, b)``, the fixed operand (``side``) widened to the result's shape, and
    the shape the other operand must have for the widened one to be used.

    The fixed operand is widened on the second call in a row with the same shapes (a state whose
    shape changes every iteration is not copied every iteration); until then the returned shape
    is ``(shape,)``, which no array's shape equals, and ``seen`` passes it back.
    """
    y = ufunc(a, b, out=...)
    moving, still = (a, b) if side else (b, a)
    if moving.shape != y.shape or y.size > WIDEN_LIMIT:
        return y, None, None  # the moving operand broadcasts too, or the copy would be big
    if still.shape == y.shape:
        return y, still, y.shape
    if seen != (y.shape,):
        return y, None, (y.shape,)
    wide = np.ascontiguousarray(np.broadcast_to(still, y.shape))
    wide.flags.writeable = False
    return y, wide, y.shape


def keep(store: list[Any], still: Any, wide: Any, shape: Any) -> None:
    """Remember a fixed operand's widening for the next run, if that operand is read-only.

    A read-only array is never written (a constant, a constant passed on, a feed's view), so
    while the next run's operand is this same object, ``wide`` is still it widened. The operand
    is held by a weak reference: a feed's view dies with its run, and nothing of the caller's is
    kept alive. Writable operands are made anew by each run and are not remembered.
    """
    if still.__class__ is np.ndarray and not still.flags.writeable:
        store[0] = (weakref.ref(still), wide, shape)


def _dead() -> None:
    """What a weak reference to a dead object returns: matches no operand."""
    return None


def keeps_dtype(ufunc: np.ufunc) -> bool:
    """Whether every loop of a one-input ufunc returns its input's dtype (so ``out=x`` is
    exactly the plain result: not Abs of complex, not IsNaN)."""
    if ufunc.nin != 1 or ufunc.nout != 1:
        return False
    return all(sig.split("->")[0] == sig.split("->")[1] for sig in ufunc.types)


def _single(out: Any) -> int | None:
    """The slot of a step's only output (kernels of multi-output ops give a 1-tuple)."""
    slots = out_slots(out)
    return slots[0] if len(slots) == 1 else None


def _row(twin: Twin | None, out: Any) -> str | None:
    return None if twin is None else twin.row(out)


def failing_step(exc: BaseException, runner: Runner, line_to_step: dict[int, int]) -> int | None:
    """Return the index of the step whose kernel raised ``exc`` inside ``runner``, if any."""
    code = runner.__code__
    tb = exc.__traceback__
    step = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            step = line_to_step.get(tb.tb_lineno)
        tb = tb.tb_next
    return step
