"""Loading a model from a path, bytes or a ModelProto, with external data resolved safely.

External data is read only from files inside the model's directory: absolute locations, ``..``
escapes and symlinks that leave the directory are refused, as are offsets and lengths past the
end of the file. Each refusal names the tensor and the location.
"""

from __future__ import annotations

import os
from pathlib import Path

from onnx import ModelProto, TensorProto

from onnxflow.errors import ExternalDataError, ModelLoadError

ModelSource = str | os.PathLike | bytes | ModelProto


def load_model(model: ModelSource, base_dir: str | os.PathLike | None = None) -> ModelProto:
    """Return a ModelProto with every external tensor's data read in.

    ``model`` is a file path, the serialized bytes, or a ModelProto (which is copied when it has
    external data, so the caller's proto is never changed). ``base_dir`` is where external data
    lives; it defaults to the model file's directory and is required for bytes and protos that
    reference external data.
    """
    if isinstance(model, ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the given bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model file {str(path)!r}: {exc.strerror}") from exc
        proto = _parse(data, repr(str(path)))
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise ModelLoadError(
            f"model must be a path, bytes or onnx.ModelProto, found {type(model).__name__}"
        )
    external = [t for t in _all_tensors(proto) if _is_external(t)]
    if external:
        if base_dir is None:
            raise ExternalDataError(
                f"the model references external data ({_location(external[0])!r} for tensor "
                f"{external[0].name!r}) but was not loaded from a file: pass base_dir"
            )
        if proto is model:
            proto = ModelProto()
            proto.CopyFrom(model)  # type: ignore[arg-type]
            external = [t for t in _all_tensors(proto) if _is_external(t)]
        for tensor in external:
            _read_external(tensor, Path(base_dir))
    return proto


def _parse(data: bytes, what: str) -> ModelProto:
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and, on some inputs, others
        raise ModelLoadError(f"{what} is not a valid ONNX model: {exc}") from exc
    if not proto.HasField("graph"):
        raise ModelLoadError(f"{what} is not a valid ONNX model: it has no graph")
    return proto


def _all_tensors(model: ModelProto) -> list[TensorProto]:
    from onnx.external_data_helper import _get_all_tensors

    return list(_get_all_tensors(model))


def _is_external(tensor: TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == TensorProto.EXTERNAL


def _location(tensor: TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _read_external(tensor: TensorProto, base_dir: Path) -> None:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    what = f"external data of tensor {tensor.name!r} at location {location!r}"
    if not location:
        raise ExternalDataError(f"{what}: no location given")
    if os.path.isabs(location) or Path(location).drive:
        raise ExternalDataError(f"{what}: absolute locations are refused")
    root = base_dir.resolve()
    target = (root / location).resolve()
    if not target.is_relative_to(root):
        raise ExternalDataError(f"{what}: resolves outside the model directory {str(root)!r}")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError as exc:
        raise ExternalDataError(f"{what}: offset/length are not integers") from exc
    try:
        size = target.stat().st_size
        if (
            offset < 0
            or offset > size
            or (length is not None and (length < 0 or offset + length > size))
        ):
            raise ExternalDataError(
                f"{what}: offset {offset} and length {length} do not fit the file of {size} bytes"
            )
        with open(target, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read() if length is None else f.read(length)
    except OSError as exc:
        raise ExternalDataError(f"{what}: cannot read: {exc.strerror}") from exc
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT
