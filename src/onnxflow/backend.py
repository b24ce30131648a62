"""An ``onnx.backend.base.Backend`` adapter, used to run ONNX's backend conformance suite."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto
from onnx.backend.base import Backend, BackendRep
from onnx.backend.test.runner import Runner

from onnxflow.session import InferenceSession


class OnnxflowRep(BackendRep):
    """A prepared model: feeds are matched to the graph's feedable inputs by position."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run on a list of inputs (by position) or a dict (by name)."""
        if isinstance(inputs, dict):
            feeds = inputs
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            names = [a.name for a in self.session.get_inputs()]
            feeds = dict(zip(names, inputs))
        return tuple(self.session.run(None, feeds))


class OnnxflowBackend(Backend):
    """Runs models with onnxflow on the CPU."""

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> OnnxflowRep:
        """Validate and compile ``model``."""
        return OnnxflowRep(InferenceSession(model))

    @classmethod
    def run_model(
        cls, model: ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        """Compile and run ``model`` once."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only the CPU is supported."""
        return device == "CPU"


def assert_similar_outputs(
    ref_outputs: Any, outputs: Any, rtol: float = 1e-3, atol: float = 1e-7
) -> None:
    """Assert that outputs match references the way the ONNX backend suite compares them.

    onnx's own comparison recurses into a sequence by passing its elements where lists of
    outputs are expected, so a sequence holding a 0-d tensor cannot be compared at all; here
    each element is compared as a one-item list, with the same checks.
    """
    assert len(outputs) == len(ref_outputs), f"{len(outputs)} outputs, expected {len(ref_outputs)}"
    for ref, out in zip(ref_outputs, outputs):
        if isinstance(ref, (list, tuple)):
            assert isinstance(out, (list, tuple)), f"expected a sequence, found {type(out)}"
            assert len(out) == len(ref), f"sequence of {len(out)}, expected {len(ref)}"
            for r, o in zip(ref, out):
                assert_similar_outputs([r], [o], rtol, atol)
        else:
            Runner.assert_similar_outputs([ref], [out], rtol, atol)


prepare = OnnxflowBackend.prepare
run_model = OnnxflowBackend.run_model
supports_device = OnnxflowBackend.supports_device
