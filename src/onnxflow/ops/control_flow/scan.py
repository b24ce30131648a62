"""Scan: version 8 (batched, with ``sequence_lens``) and versions 9..25 (axes and directions).

Node inputs are N initial states then M scan inputs (Scan 8 puts ``sequence_lens`` first); the
body maps ``(states..., scan elements...)`` to ``(states..., scan output elements...)``; node
outputs are N final states then K stacked scan outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.ops.control_flow.body import loop_plan
from onnxflow.ops.registry import op
from onnxflow.runtime.loop import run_loop
from onnxflow.runtime.stacking import Stacker, empty_element, pad_stacked


def _check_arity(node: NodeContext, body: GraphProto, n_inputs: int, m: int) -> tuple[int, int]:
    """Return (N states, K scan outputs) after checking the counts agree with the body."""
    if not 1 <= m <= n_inputs:
        raise node.error(
            f"num_scan_inputs={m} is out of range: the node has {n_inputs} "
            "state and scan inputs, so it must be between 1 and that"
        )
    n = n_inputs - m
    if len(body.input) != n + m:
        raise node.error(
            f"body has {len(body.input)} inputs, expected {n} states + {m} scan inputs = {n + m}"
        )
    k = len(body.output) - n
    if k < 0:
        raise node.error(f"body has {len(body.output)} outputs, expected at least {n} states")
    return n, k


def _normalize_axes(axes: list[int] | None, count: int, what: str) -> list[int]:
    axes = list(axes) if axes is not None else [0] * count
    if len(axes) != count:
        raise ValueError(f"{what} has {len(axes)} entries, expected {count}")
    return axes


def _directions(node: NodeContext, values: list[int] | None, count: int, what: str) -> list[int]:
    """The ``count`` directions of attribute ``what``: each 0 (forward) or 1 (reverse)."""
    directions = _normalize_axes(values, count, what)
    for i, d in enumerate(directions):
        if d not in (0, 1):
            raise node.error(f"{what}[{i}] is {d}, expected 0 (forward) or 1 (reverse)")
    return directions


@op("Scan", 9, 11, 16, 19, 21, 23, 24, 25, build=True)
def scan(
    node: NodeContext,
    *,
    body: GraphProto,
    num_scan_inputs: int,
    scan_input_axes: list[int] | None = None,
    scan_input_directions: list[int] | None = None,
    scan_output_axes: list[int] | None = None,
    scan_output_directions: list[int] | None = None,
) -> Callable[..., Any]:
    """Compile the body once; return the callable that scans."""
    m = num_scan_inputs
    n, k = _check_arity(node, body, node.n_inputs, m)
    in_axes = _normalize_axes(scan_input_axes, m, "scan_input_axes")
    in_dirs = _directions(node, scan_input_directions, m, "scan_input_directions")
    out_axes = _normalize_axes(scan_output_axes, k, "scan_output_axes")
    out_dirs = _directions(node, scan_output_directions, k, "scan_output_directions")
    plan = loop_plan(node, body, [vi.name for vi in body.input[n:]])
    decls = list(body.output)[n:]
    label = node.describe()

    def run(*args: Any) -> tuple[Any, ...]:
        states, inputs = list(args[:n]), args[n : n + m]
        captured = args[n + m :]
        sequences = []
        for i, (x, axis, reverse) in enumerate(zip(inputs, in_axes, in_dirs)):
            axis = axis + x.ndim if axis < 0 else axis
            if axis:  # np.moveaxis costs 4 us even when nothing moves
                x = np.moveaxis(x, axis, 0)
            sequences.append(x[::-1] if reverse else x)
            if x.shape[0] != sequences[0].shape[0]:
                raise ValueError(
                    f"{label}: scan input {i} has sequence length {x.shape[0]} on axis {axis}, "
                    f"but scan input 0 has {sequences[0].shape[0]}; all must be equal"
                )
        length = sequences[0].shape[0]
        scans = [Stacker(f"{label}: scan output {j}", length) for j in range(k)]
        states = run_loop(plan, captured, states, sequences, length, scans, total=length)
        outputs = []
        for stacker, decl, axis, reverse in zip(scans, decls, out_axes, out_dirs):
            y = stacker.result(decl)
            y = y[::-1] if reverse else y
            axis = axis + y.ndim if axis < 0 else axis
            outputs.append(np.moveaxis(y, 0, axis) if axis else y)
        return (*states, *outputs)

    return run


@op("Scan", 8, build=True)
def scan_8(
    node: NodeContext,
    *,
    body: GraphProto,
    num_scan_inputs: int,
    directions: list[int] | None = None,
) -> Callable[..., Any]:
    """Compile the body once; return the callable for batched Scan-8 (batch axis 0, time 1)."""
    m = num_scan_inputs
    n, k = _check_arity(node, body, node.n_inputs - 1, m)
    dirs = _directions(node, directions, m, "directions")
    plan = loop_plan(node, body, [vi.name for vi in body.input[n:]])
    decls = list(body.output)[n:]
    label = node.describe()

    def run(sequence_lens: Any, *args: Any) -> tuple[Any, ...]:
        inits, inputs = args[:n], args[n : n + m]
        captured = args[n + m :]
        batch, max_len = _batch_dims(label, inputs)
        lens = _lengths(label, sequence_lens, batch, max_len)
        finals: list[list[Any]] = [[] for _ in range(n)]
        batches: list[list[Stacker]] = []
        for b in range(batch):
            length = lens[b]
            seqs = [x[b, :length][::-1] if d else x[b, :length] for x, d in zip(inputs, dirs)]
            scans = [Stacker(f"{label}: scan output {j}", length) for j in range(k)]
            states = run_loop(
                plan, captured, [s[b] for s in inits], seqs, length, scans, total=length, batch=b
            )
            for j, s in enumerate(states):
                finals[j].append(s)
            batches.append(scans)
        outs = [np.stack(f) if f else init for f, init in zip(finals, inits)]
        outs += [_padded(j, batches, decls[j], max_len) for j in range(k)]
        return tuple(outs)

    return run


def _batch_dims(label: str, inputs: Sequence[np.ndarray]) -> tuple[int, int]:
    """The (batch, sequence) dims Scan-8's inputs share, or a ValueError."""
    batch, max_len = inputs[0].shape[0], inputs[0].shape[1]
    for i, x in enumerate(inputs):
        if x.shape[:2] != (batch, max_len):
            raise ValueError(
                f"{label}: scan input {i} has (batch, sequence) dims {list(x.shape[:2])}, "
                f"but scan input 0 has {[batch, max_len]}; all must be equal"
            )
    return batch, max_len


def _lengths(label: str, sequence_lens: Any, batch: int, max_len: int) -> list[int]:
    """Each batch entry's sequence length (all ``max_len`` when ``sequence_lens`` is omitted)."""
    lens = [max_len] * batch if sequence_lens is None else [int(v) for v in sequence_lens]
    if len(lens) != batch or any(not 0 <= v <= max_len for v in lens):
        raise ValueError(
            f"{label}: sequence_lens {lens} must have {batch} entries in [0, {max_len}]"
        )
    return lens


def _padded(j: int, batches: list[list[Stacker]], decl: Any, max_len: int) -> np.ndarray:
    """Scan output ``j`` of Scan-8: [batch, max_len, ...], zero past each sequence's length."""
    shape, dtype = empty_element(decl)
    results = [scans[j].result(decl) for scans in batches]
    return pad_stacked(results, max_len, np.empty((0, *shape), dtype))
