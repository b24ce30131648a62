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

Constants are module globals of the generated code (``c<slot>``), kernels are ``f<step>``. A
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

    def _cancel(step: int) -> None:
        info = plan.infos[step]
        raise CancelledError(
            f"run terminated by RunOptions.terminate in graph {plan.graph_name!r} before "
            f"{info.op_type} {info.name!r}"
        )

    namespace: dict[str, Any] = {"_many": many, "_cancel": _cancel}
    assigned = set(plan.arg_slots)

    def ref(slot: int) -> str:
        if slot == NONE_SLOT:
            return "None"
        if slot in plan.constant_slots and slot not in assigned:
            namespace[f"c{slot}"] = plan.template[slot]
            return f"c{slot}"
        return f"v{slot}"

    def target(slot: int) -> str:
        return "_" if slot == TRASH_SLOT else f"v{slot}"

    params = "args, options" if checked else "args"
    lines = [f"def run({params}):"]
    if plan.arg_slots:
        lines.append(f"    ({', '.join(f'v{s}' for s in plan.arg_slots)},) = args")
    line_to_step: dict[int, int] = {}
    for i, (fn, ins, out, free) in enumerate(plan.steps):
        namespace[f"f{i}"] = fn
        call = f"f{i}({', '.join(ref(s) for s in ins)})"
        if fn is passthrough:
            call = ref(ins[0])
        if checked:
            lines.append(f"    if options.terminate: _cancel({i})")
        if out.__class__ is int:
            lines.append(f"    {target(out)} = {call}")
        else:
            targets = ", ".join(target(s) for s in out)
            lines.append(f"    ({targets},) = _many({call}, {len(out)})")
        line_to_step[len(lines)] = i
        assigned.update((out,) if out.__class__ is int else out)
        dead = [f"v{s}" for s in free if s in assigned and s != TRASH_SLOT]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    lines.append(f"    return [{', '.join(ref(s) for s in plan.output_slots)}]")
    filename = f"<onnxflow plan {plan.graph_name!r} #{next(_ids)}>"
    exec(compile("\n".join(lines), filename, "exec"), namespace)
    return namespace["run"], line_to_step


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
