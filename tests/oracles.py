"""Tiny oracles for the control-flow operators, written straight from the spec's pseudo-code.

Bodies are plain Python functions on NumPy values, so an oracle shares no code with onnxflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Body = Callable[..., Sequence[Any]]


def scan_oracle(
    body: Body,
    n_states: int,
    inits: Sequence[np.ndarray],
    scan_inputs: Sequence[np.ndarray],
    input_axes: Sequence[int],
    input_directions: Sequence[int],
    output_axes: Sequence[int],
    output_directions: Sequence[int],
    empty_elements: Sequence[tuple[tuple[int, ...], np.dtype]] = (),
) -> list[np.ndarray]:
    """Scan 9+: iterate the scan inputs along their axes; stack each scan output on its axis."""
    length = scan_inputs[0].shape[input_axes[0]]
    states = list(inits)
    collected: list[list[np.ndarray]] = []
    for t in range(length):
        elements = []
        for x, axis, reverse in zip(scan_inputs, input_axes, input_directions):
            index = length - 1 - t if reverse else t
            elements.append(np.take(x, index, axis=axis))
        outs = body(*states, *elements)
        states = list(outs[:n_states])
        for k, y in enumerate(outs[n_states:]):
            if len(collected) <= k:
                collected.append([])
            collected[k].append(np.asarray(y))
    results = list(states)
    for k, (axis, reverse) in enumerate(zip(output_axes, output_directions)):
        if length == 0:
            shape, dtype = empty_elements[k]
            items_shape = (0, *shape)
            stacked = np.empty(items_shape, dtype=dtype)
        else:
            items = collected[k][::-1] if reverse else collected[k]
            stacked = np.stack(items)
        rank = stacked.ndim
        results.append(np.moveaxis(stacked, 0, axis % rank))
    return results


def scan8_oracle(
    body: Body,
    n_states: int,
    sequence_lens: Sequence[int] | None,
    inits: Sequence[np.ndarray],
    scan_inputs: Sequence[np.ndarray],
    directions: Sequence[int],
) -> list[np.ndarray]:
    """Scan 8: batch axis 0, sequence axis 1; outputs padded (here with zeros) to max length."""
    batch, max_len = scan_inputs[0].shape[:2]
    finals: list[list[np.ndarray]] = [[] for _ in range(n_states)]
    outputs: list[np.ndarray] = []
    for b in range(batch):
        n = max_len if sequence_lens is None else int(sequence_lens[b])
        states = [s[b] for s in inits]
        per_t: list[list[np.ndarray]] = []
        for t in range(n):
            elements = [x[b, n - 1 - t if d else t] for x, d in zip(scan_inputs, directions)]
            outs = body(*states, *elements)
            states = list(outs[:n_states])
            per_t.append([np.asarray(y) for y in outs[n_states:]])
        for j, s in enumerate(states):
            finals[j].append(s)
        for t, ys in enumerate(per_t):
            for k, y in enumerate(ys):
                if len(outputs) <= k:
                    outputs.append(np.zeros((batch, max_len, *y.shape), dtype=y.dtype))
                outputs[k][b, t] = y
    return [np.stack(f) for f in finals] + outputs


def loop_oracle(
    body: Body,
    trip_count: int | None,
    cond: bool | None,
    inits: Sequence[Any],
    max_iterations: int = 10_000,
) -> tuple[list[Any], list[list[np.ndarray]]]:
    """Loop: the spec's table of (M, cond) modes. Returns final states and per-iteration scans.

    ``max_iterations`` only guards the test against an oracle bug; the spec's unbounded mode
    (neither M nor cond) is not modelled here.
    """
    assert trip_count is not None or cond is not None, "the unbounded mode never ends"
    n = len(inits)
    states = list(inits)
    scans: list[list[np.ndarray]] = []
    keep_going = True if cond is None else bool(cond)
    i = 0
    while keep_going and (trip_count is None or i < trip_count):
        assert i < max_iterations
        cond_out, *rest = body(np.int64(i), np.bool_(True), *states)
        if cond is not None:
            keep_going = bool(cond_out)
        states = rest[:n]
        for k, y in enumerate(rest[n:]):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(np.asarray(y))
        i += 1
    return states, scans
