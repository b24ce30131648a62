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


def _zip_map_model(outputs: tuple[str, ...] = ("label", "Z")):
    from onnx import TensorProto, helper

    ml = "ai.onnx.ml"
    nodes = [
        helper.make_node("Neg", ["X"], ["label"]),
        helper.make_node("ZipMap", ["X"], ["Z"], domain=ml, classlabels_int64s=[3, 7]),
        helper.make_node("Identity", ["Z"], ["Z2"]),
    ]
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(1, []))
    )
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
        [
            helper.make_value_info(n, seq_map)
            if n.startswith("Z")
            else helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 2])
            for n in outputs
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ml, 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_zip_maps_new_rows_are_handed_out_without_a_copy(monkeypatch) -> None:
    """ZipMap promises new rows (Traits.fresh): the plan knows its output position, so a run
    returns the kernel's own list (no dict copied), from the quick path on too."""
    import onnxflow
    from onnxflow.runtime import outputs

    copied = []
    monkeypatch.setattr(outputs, "_fresh_or_maps", lambda v: copied.append(1) or False)
    session = onnxflow.InferenceSession(_zip_map_model())
    assert session._made == frozenset({0, 1})  # Neg (a ufunc) promises a new array too
    x = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    for _ in range(4):  # the first runs and the quick path after them
        label, rows = session.run(None, {"X": x})
        assert rows == [{3: 0.25, 7: 0.75}, {3: 0.5, 7: 0.5}] and np.array_equal(label, -x)
    assert copied == []


def test_the_same_rows_given_twice_are_detached() -> None:
    """ZipMap's list as two outputs (the second through an Identity, which passes the same
    list on): the promise holds for ZipMap's own output alone, and another output that is not
    a fresh array sends the run to the full check, which copies what is returned twice."""
    import onnxflow

    session = onnxflow.InferenceSession(_zip_map_model(("Z", "Z2")))
    assert session._made == frozenset({0})
    x = np.array([[0.25, 0.75]], np.float32)
    for _ in range(4):
        a, b = session.run(None, {"X": x})
        assert a == b and a is not b and a[0] is not b[0]
