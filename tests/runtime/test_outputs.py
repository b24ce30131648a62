"""Detaching a run's results: lists of maps of Python scalars (ZipMap's rows) take the quick
path, and anything else in a list is detached value by value."""

from __future__ import annotations

import numpy as np

from onnxflow.runtime.outputs import Detacher, _detach, _scalar_maps


def test_maps_of_scalars_come_back_as_new_equal_dicts() -> None:
    rows = [{0: 0.25, 1: 0.75}, {"a": 1, "b": True, "c": "x"}]
    assert _scalar_maps(rows)
    out = _detach(rows, set(), set())
    assert out == rows and out is not rows
    assert all(new is not old for new, old in zip(out, rows))


def test_maps_holding_arrays_are_detached_value_by_value() -> None:
    protected = np.arange(3.0)
    rows = [{0: 0.5}, {0: protected}]
    assert not _scalar_maps(rows) and not _scalar_maps([]) and not _scalar_maps([1.0, {0: 1.0}])
    out = _detach(rows, {id(protected)}, set())
    assert out[1][0] is not protected and np.array_equal(out[1][0], protected)


def test_fresh_arrays_beside_maps_are_handed_out_and_maps_copied() -> None:
    feed, constant = np.arange(2.0), np.arange(3.0)
    constant.setflags(write=False)
    fresh, rows = np.zeros(2, np.int64), [{"a": 0.5}]
    out = Detacher([constant])([fresh, rows], [feed])
    assert out[0] is fresh and out[1] == rows and out[1][0] is not rows[0]
    out = Detacher([constant])([feed, constant, rows], [feed])  # shared memory: copies
    assert out[0] is not feed and out[1] is not constant and out[2] == rows
