"""OrtValue: a value held for a session, on the CPU a NumPy array (or a sequence, map or
optional value)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxflow.errors import EPFail, Fail, InvalidArgument
from onnxflow.values import elem_type_of, np_dtype, value_type_str


def check_cpu(device_type: str, device_id: int = 0) -> None:
    if str(device_type).lower() != "cpu":
        raise EPFail(
            f"device {device_type!r} (id {device_id}) is not available: onnxflow computes on the "
            "CPU only"
        )


def _dtype_of(element_type: Any) -> np.dtype:
    """A NumPy dtype from a NumPy type or an ONNX element type number."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        return np_dtype(int(element_type))
    return np.dtype(element_type)


class OrtValue:
    """A value held for a session: on the CPU, a NumPy array (sharing memory with the array it
    was made from), or a sequence, map or optional value a model returned."""

    def __init__(self, value: Any) -> None:
        self._value = value

    @staticmethod
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """An OrtValue over ``array`` (no copy when it is already an array)."""
        check_cpu(device_type, device_id)
        return OrtValue(np.asarray(array))

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(array: Any, onnx_element_type: int) -> OrtValue:
        """An OrtValue over ``array`` read as the ONNX element type given."""
        return OrtValue(np.asarray(array).view(np_dtype(onnx_element_type)))

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0
    ) -> OrtValue:
        """A new zero-filled tensor of ``shape`` and ``element_type`` (a NumPy type or an ONNX
        element type number)."""
        check_cpu(device_type, device_id)
        return OrtValue(np.zeros(tuple(shape), _dtype_of(element_type)))

    def numpy(self) -> Any:
        """The value: the array itself for a tensor (no copy)."""
        return self._value

    def _tensor(self, what: str) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            raise Fail(
                f"OrtValue.{what}: the value is a {value_type_str(self._value)}, not a tensor"
            )
        return self._value

    def shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._tensor("shape").shape)

    def data_type(self) -> str:
        """The value's type in onnxruntime's spelling: ``tensor(float)``, ``seq(...)``, ..."""
        return value_type_str(self._value)

    def element_type(self) -> int:
        """The tensor's ONNX element type number."""
        return elem_type_of(self._tensor("element_type").dtype)

    def device_name(self) -> str:
        """Where the value lives: ``"cpu"``."""
        return "cpu"

    def is_tensor(self) -> bool:
        """Whether the value is a tensor."""
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        """Whether the value is a sequence of tensors."""
        return isinstance(self._value, list)

    def is_sparse_tensor(self) -> bool:
        """Whether the value is a sparse tensor: never, onnxflow densifies them."""
        return False

    def has_value(self) -> bool:
        """False for an empty optional, True otherwise."""
        return self._value is not None

    def tensor_size_in_bytes(self) -> int:
        """The bytes the tensor's elements take."""
        return int(self._tensor("tensor_size_in_bytes").nbytes)

    def data_ptr(self) -> int:
        """The address of the tensor's first element."""
        return int(self._tensor("data_ptr").ctypes.data)

    def update_inplace(self, array: Any) -> None:
        """Copy ``array`` (of the same shape) into the tensor's memory."""
        target = self._tensor("update_inplace")
        array = np.asarray(array)
        if array.shape != target.shape:
            raise InvalidArgument(
                f"OrtValue.update_inplace: shape {list(array.shape)} given, the value has "
                f"{list(target.shape)}"
            )
        np.copyto(target, array, casting="same_kind")

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()})"


def array_at(element_type: Any, shape: Sequence[int], buffer_ptr: int) -> np.ndarray:
    """An array over the memory at ``buffer_ptr`` (CPU memory the caller keeps alive)."""
    dtype = _dtype_of(element_type)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))
