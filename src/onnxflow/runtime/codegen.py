"""Plans turned into straight-line Python functions.

The interpreter in :mod:`onnxflow.runtime.executor` indexes a frame list for every input and
output of every step. Here a plan becomes the source of one function in which each value slot is
a local variable, each step one call, and each value is deleted after its last use::

    def run(args):
        v2, v3 = args
        v4 = f0(v2, c5)
        del v2
        v6, _ = _many(f1(v4, v3), 2)
        ...
        return [v6]

Constants are module globals of the generated code (``c<slot>``), kernels are ``f<step>``; a
kernel that is exactly ``ufunc(inputs..., out=...)`` says so (``inline_ufunc``) and the ufunc
itself is called. A
checked twin takes the run options and tests ``terminate`` before every step. When a kernel
fails, the traceback's line number in the generated code names the step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from onnxflow.compile.plan import NONE_SLOT, TRASH_SLOT, Plan, passthrough
from onnxflow.errors import CancelledError

Runner = Callable[..., list[Any]]

_ids = itertools.count()


def many(result: Any, n: int) -> tuple[Any, ...]:
    """Return exactly ``n`` outputs from a kernel result (a tuple, or one value)."""
    if result.__class__ is tuple:
        if len(result) == n:
            return result
        return (result + (None,) * n)[:n]
    return (result, *((None,) * (n - 1)))


def generate(plan: Plan, checked: bool) -> tuple[Runner, dict[int, int]]:
    """Return the generated function for ``plan`` and its map from source line to step index.

    The function takes ``(args)``, or ``(args, options)`` when ``checked``.
    """
    emitter = Emitter(plan, checked)
    params = "args, options" if checked else "args"
    lines = [f"def run({params}):"]
    if plan.arg_slots:
        lines.append(f"    ({', '.join(f'v{s}' for s in plan.arg_slots)},) = args")
    emitter.steps(lines, "    ")
    lines.append(f"    return [{', '.join(emitter.ref(s) for s in plan.output_slots)}]")
    return emitter.build(lines, "run"), emitter.line_to_step


class Emitter:
    """Writes a plan's steps as Python source lines, each slot a local ``v<slot>``.

    Constants become globals ``c<slot>`` of the generated code and kernels ``f<step>``; the
    namespace also holds ``_many`` and ``_cancel(step)``. ``line_to_step`` maps a source line
    (1-based, as in tracebacks) to the step it calls.
    """

    def __init__(self, plan: Plan, checked: bool) -> None:
        self.plan = plan
        self.checked = checked
        self.namespace: dict[str, Any] = {"_many": many, "_cancel": self._cancel}
        self.assigned = set(plan.arg_slots)
        self.line_to_step: dict[int, int] = {}

    def _cancel(self, step: int) -> None:
        info = self.plan.infos[step]
        raise CancelledError(
            f"run terminated by RunOptions.terminate in graph {self.plan.graph_name!r} before "
            f"{info.op_type} {info.name!r}"
        )

    def ref(self, slot: int) -> str:
        """The expression reading ``slot``: None, a constant's global, or a local."""
        if slot == NONE_SLOT:
            return "None"
        if slot in self.plan.constant_slots and slot not in self.assigned:
            self.namespace[f"c{slot}"] = self.plan.template[slot]
            return f"c{slot}"
        return f"v{slot}"

    def steps(self, lines: list[str], indent: str, keep: frozenset[int] = frozenset()) -> None:
        """Append one line per step (and its ``del`` line) to ``lines``; never delete ``keep``."""
        for i, (fn, ins, out, free) in enumerate(self.plan.steps):
            args = ", ".join(self.ref(s) for s in ins)
            ufunc = getattr(fn, "inline_ufunc", None)
            if fn is passthrough:
                call = self.ref(ins[0])
            elif ufunc is not None:  # the kernel is this call: make it here, one Python call less
                self.namespace[f"f{i}"] = ufunc
                call = f"f{i}({args}, out=...)"
            else:
                self.namespace[f"f{i}"] = fn
                call = f"f{i}({args})"
            if self.checked:
                lines.append(f"{indent}if options.terminate: _cancel({i})")
            if out.__class__ is int:
                lines.append(f"{indent}{_target(out)} = {call}")
            else:
                targets = ", ".join(_target(s) for s in out)
                lines.append(f"{indent}({targets},) = _many({call}, {len(out)})")
            self.line_to_step[len(lines)] = i
            self.assigned.update((out,) if out.__class__ is int else out)
            dead = [
                f"v{s}" for s in free if s in self.assigned and s != TRASH_SLOT and s not in keep
            ]
            if dead:
                lines.append(f"{indent}del {', '.join(dead)}")

    def build(self, lines: list[str], name: str) -> Callable[..., Any]:
        """Compile ``lines`` and return the function ``name`` they define."""
        filename = f"<onnxflow plan {self.plan.graph_name!r} #{next(_ids)}>"
        exec(compile("\n".join(lines), filename, "exec"), self.namespace)
        return self.namespace[name]


def _target(slot: int) -> str:
    return "_" if slot == TRASH_SLOT else f"v{slot}"


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
