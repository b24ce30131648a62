"""A model of many tiny initializers loads in time linear in its bytes: only the initializers
the plan reads are decoded, the others are dropped before shape inference, the checker and the
compiler walk them (as onnxruntime drops them), and running out of memory while building is a
ResourceError naming what was being built, never a ValidationError calling the model invalid.
Structural assertions only: what was decoded, not how long it took."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from model_builders import F, const, model, tiny_initializers, vi
from onnx import ModelProto, helper, numpy_helper

import onnxflow
from onnxflow.ir import load

N = 100_000


@pytest.fixture(scope="module")
def many() -> bytes:
    return tiny_initializers(N)


def _counting(monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> list[str]:
    """Patch numpy_helper.to_array to list the tensors it decodes (and to run out of memory
    on ``fail_on``)."""
    decoded: list[str] = []
    to_array = numpy_helper.to_array

    def counted(tensor: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        decoded.append(tensor.name)
        if tensor.name == fail_on:
            raise MemoryError
        return to_array(tensor, *args, **kwargs)

    monkeypatch.setattr(numpy_helper, "to_array", counted)
    return decoded


def test_only_the_initializers_the_plan_reads_are_decoded(
    many: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded = _counting(monkeypatch)
    session = onnxflow.InferenceSession(many)
    assert sorted(decoded) == ["w0", f"w{N - 1}"]
    (z,) = session.run(None, {"x": np.ones(1, np.float32)})
    assert z.tolist() == [N - 1]


def test_unread_initializers_are_dropped_from_the_session_s_model(many: bytes) -> None:
    session = onnxflow.InferenceSession(many)
    assert [t.name for t in session.model.graph.initializer] == ["w0", f"w{N - 1}"]


def test_running_out_of_memory_while_building_is_a_resource_error(
    many: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _counting(monkeypatch, fail_on=f"w{N - 1}")
    with pytest.raises(onnxflow.ResourceError) as info:
        onnxflow.InferenceSession(many)
    assert not isinstance(info.value, onnxflow.ValidationError)
    message = str(info.value)
    assert f"initializer 'w{N - 1}'" in message and "graph 'g'" in message
    assert "out of memory" in message


def test_running_out_of_memory_while_parsing_is_a_resource_error(
    many: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(self: ModelProto, data: bytes) -> None:
        raise MemoryError

    monkeypatch.setattr(load, "ModelProto", type("Parsing", (), {"ParseFromString": no_memory}))
    with pytest.raises(onnxflow.ResourceError, match=f"parsing the given bytes \\({len(many)}"):
        onnxflow.InferenceSession(many)


def test_a_few_unread_initializers_stay_and_show_in_an_intermediate_run() -> None:
    m = model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [vi("x", F, [1])],
        [vi("y", F, [1])],
        [const("unread", np.float32(7))],
    )
    session = onnxflow.InferenceSession(m)
    values = session.run(None, {"x": np.ones(1, np.float32)}, intermediate=True)
    assert values["unread"] == 7 and values["y"].tolist() == [-1]
