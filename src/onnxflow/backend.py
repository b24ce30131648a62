"""An ``onnx.backend.base.Backend`` adapter, used to run ONNX's backend conformance suite."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto
from onnx.backend.base import Backend, BackendRep

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


prepare = OnnxflowBackend.prepare
run_model = OnnxflowBackend.run_model
supports_device = OnnxflowBackend.supports_device
