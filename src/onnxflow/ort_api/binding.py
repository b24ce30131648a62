"""IOBinding: inputs and outputs bound to a session ahead of ``run_with_iobinding``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxflow.errors import Fail, InvalidArgument
from onnxflow.ort_api.ortvalue import OrtValue, array_at, check_cpu
from onnxflow.values import value_type_str


class SessionIOBinding:
    """Inputs and outputs bound to a session ahead of ``run_with_iobinding``.

    On the CPU, binding is naming: inputs are arrays (or memory at an address), outputs are
    either left to the run (read them with ``get_outputs`` or ``copy_outputs_to_cpu``) or
    bound to an OrtValue or memory the run's result is copied into.
    """

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind an input to an array."""
        self._inputs[name] = arr_on_cpu

    def bind_input(
        self,
        name: str,
        device_type: str,
        device_id: int,
        element_type: Any,
        shape: Sequence[int],
        buffer_ptr: int,
    ) -> None:
        """Bind an input to memory at ``buffer_ptr`` holding ``shape`` elements of
        ``element_type``."""
        check_cpu(device_type, device_id)
        self._inputs[name] = array_at(element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an input to an OrtValue."""
        self._inputs[name] = ortvalue.numpy()

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Sequence[int] | None = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output: to memory at ``buffer_ptr`` when given (the result is copied there),
        else to the device, where the run leaves a new value."""
        check_cpu(device_type, device_id)
        if buffer_ptr is None:
            self._outputs[name] = None
        else:
            self._outputs[name] = array_at(element_type, shape or (), buffer_ptr)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an output to an OrtValue: the run's result is copied into its tensor."""
        self._outputs[name] = ortvalue.numpy()

    def clear_binding_inputs(self) -> None:
        """Forget the bound inputs."""
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        """Forget the bound outputs."""
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for on the CPU."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for on the CPU."""

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs, in the order they were bound."""
        return list(self._results)

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The last run's outputs as NumPy values (copies)."""
        return [_copy(v.numpy()) for v in self._results]

    def run(self, run_options: Any = None) -> None:
        """Run the session on the bound inputs; keep (and copy into bound memory) the outputs."""
        names = list(self._outputs)
        if not names:
            raise Fail("run_with_iobinding: no output is bound; bind at least one with bind_output")
        results = self._session.run(names, dict(self._inputs), run_options)
        kept = []
        for name, value in zip(names, results, strict=True):
            target = self._outputs[name]
            if target is not None:
                _copy_into(name, target, value)
                value = target
            kept.append(OrtValue(value))
        self._results = kept


def _copy(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value


def _copy_into(name: str, target: np.ndarray, value: Any) -> None:
    if not isinstance(value, np.ndarray) or value.shape != target.shape:
        found = list(value.shape) if isinstance(value, np.ndarray) else value_type_str(value)
        raise InvalidArgument(
            f"output {name!r} is bound to a tensor of shape {list(target.shape)}, the run "
            f"produced {found}"
        )
    np.copyto(target, value, casting="same_kind")


#: onnxruntime's ``io_binding()`` returns an ``IOBinding`` wrapping its native
#: ``SessionIOBinding``; here both names are the one class.
IOBinding = SessionIOBinding
