"""Loading a model from a path, bytes or a ModelProto, with external data resolved safely.

External data is read only from regular files inside the model's directory: absolute locations,
``..`` escapes and symlinks that leave the directory are refused, as are devices, pipes and
directories, offsets and lengths that are not plain ASCII digits or run past the end of the file,
and unknown keys. Each file is opened once, by a walk that cannot leave the directory whatever
is renamed meanwhile (:mod:`onnxflow.ir.external`), then checked and read as opened. Each
refusal names the tensor and the location. Every tensor of the model is covered: initializers
(sparse ones too), tensor attributes, in subgraphs and in model-local functions.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, SparseTensorProto, TensorProto

from onnxflow.errors import (
    ExternalDataError,
    ModelFileNotFoundError,
    ModelLoadError,
    ModelParseError,
    ResourceError,
)
from onnxflow.ir.external import open_inside
from onnxflow.resources import available_memory

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
        _require_graph(proto, "the given ModelProto")
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the given bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        proto = _parse(_read_model_file(path), repr(str(path)))
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise ModelLoadError(
            f"model must be a path, bytes or onnx.ModelProto, found {type(model).__name__}"
        )
    external = external_tensors(proto)
    if external:
        if base_dir is None:
            raise ExternalDataError(
                f"the model references external data ({_location(external[0])!r} for tensor "
                f"{external[0].name!r}) but was not loaded from a file: pass base_dir"
            )
        if proto is model:
            proto = ModelProto()
            proto.CopyFrom(model)  # type: ignore[arg-type]
            external = external_tensors(proto)
        for tensor in external:
            read_external(tensor, base_dir)
    return proto


#: protobuf refuses to parse a message of 2 GiB or more; larger weights go in external data.
PROTOBUF_LIMIT = 2**31 - 1


def _read_model_file(path: Path) -> bytes:
    """The bytes of a model file, which must be a regular file under protobuf's 2 GiB limit:
    checked before reading, so /dev/zero or a FIFO is refused at once instead of read for
    ever."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ModelLoadError(
                f"cannot read model file {str(path)!r}: not a regular file "
                f"({_file_kind(info.st_mode)})"
            )
        if info.st_size > PROTOBUF_LIMIT:
            raise ModelLoadError(
                f"model file {str(path)!r} is {info.st_size} bytes, over protobuf's limit of "
                f"{PROTOBUF_LIMIT}: save large weights as external data"
            )
        return path.read_bytes()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        error = ModelFileNotFoundError if isinstance(exc, FileNotFoundError) else ModelLoadError
        raise error(f"cannot read model file {str(path)!r}: {reason}") from exc


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a plain file")


def external_tensors(model: ModelProto) -> list[TensorProto]:
    """The tensors of :func:`all_tensors` whose data is in another file (initializers picked
    by one comprehension per graph: a model may hold a million of them)."""
    found = [t for t in all_tensors(model, initializers=False) if _is_external(t)]
    pending = [model.graph]
    while pending:
        g = pending.pop()
        found += [t for t in g.initializer if t.data_location == TensorProto.EXTERNAL]
        pending.extend(sub for node in g.node for sub in _subgraphs(node))
    return found


def _subgraphs(node: NodeProto) -> list[GraphProto]:
    graphs = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            graphs.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            graphs.extend(a.graphs)
    return graphs


def all_tensors(model: ModelProto, initializers: bool = True) -> Iterator[TensorProto]:
    """Yield every TensorProto of the model: initializers (unless not ``initializers``), sparse
    parts, tensor attributes."""
    yield from _graph_tensors(model.graph, initializers)
    for fn in model.functions:
        for node in fn.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: GraphProto, initializers: bool = True) -> Iterator[TensorProto]:
    """The tensors of ``graph`` and of its subgraphs, at any depth (no recursion)."""
    pending = [graph]
    while pending:
        g = pending.pop()
        if initializers:
            yield from g.initializer
        for sparse in g.sparse_initializer:
            yield from _sparse_parts(sparse)
        for node in g.node:
            yield from _node_tensors(node, pending)


def _node_tensors(
    node: NodeProto, subgraphs: list[GraphProto] | None = None
) -> Iterator[TensorProto]:
    """The tensors in ``node``'s attributes; its subgraphs go to ``subgraphs`` when given,
    else their tensors are yielded too."""
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR:
            yield a.t
        elif a.type == AttributeProto.TENSORS:
            yield from a.tensors
        elif a.type == AttributeProto.SPARSE_TENSOR:
            yield from _sparse_parts(a.sparse_tensor)
        elif a.type == AttributeProto.SPARSE_TENSORS:
            for sparse in a.sparse_tensors:
                yield from _sparse_parts(sparse)
        elif a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
            if subgraphs is None:
                for g in graphs:
                    yield from _graph_tensors(g)
            else:
                subgraphs.extend(graphs)


def nesting_depth(graph: GraphProto) -> tuple[int, list[str]]:
    """How deep subgraphs nest below ``graph`` (0: none), and the names of the nodes down the
    deepest chain, outermost first (no recursion, whatever the depth)."""
    deepest: tuple[int, list[str]] = (0, [])
    pending: list[tuple[GraphProto, list[str]]] = [(graph, [])]
    while pending:
        g, chain = pending.pop()
        if len(chain) > deepest[0]:
            deepest = (len(chain), chain)
        for node in g.node:
            for a in node.attribute:
                subgraphs = [a.g] if a.type == AttributeProto.GRAPH else a.graphs
                label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
                pending.extend((sub, [*chain, label]) for sub in subgraphs)
    return deepest


def _sparse_parts(sparse: SparseTensorProto) -> Iterator[TensorProto]:
    yield sparse.values
    yield sparse.indices


def _require_graph(proto: ModelProto, what: str) -> None:
    if not proto.HasField("graph"):
        raise ModelParseError(f"{what} is not a valid ONNX model: it has no graph")


def _parse(data: bytes, what: str) -> ModelProto:
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except MemoryError as exc:
        raise ResourceError(f"out of memory parsing {what} ({len(data)} bytes)") from exc
    except Exception as exc:  # protobuf raises DecodeError and, on some inputs, others
        raise ModelParseError(f"{what} is not a valid ONNX model: {exc}") from exc
    _require_graph(proto, what)
    return proto


def _is_external(tensor: TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == TensorProto.EXTERNAL


def _location(tensor: TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _check_location(location: str, what: str) -> None:
    """Refuse an empty, NUL-holding or absolute location."""
    if not location:
        raise ExternalDataError(f"{what}: no location given")
    if "\0" in location:
        raise ExternalDataError(f"{what}: the location contains a NUL character")
    if os.path.isabs(location) or Path(location).drive:
        raise ExternalDataError(f"{what}: absolute locations are refused")


#: The keys an external data entry may hold: the ONNX spec's four, and ``basepath``, which
#: onnx's own writer may add and its reader ignores (as onnxflow does ``checksum``: it is not
#: verified, by onnx or onnxruntime either). Any other key is refused, as onnxruntime does: a
#: misspelt ``Offset`` would otherwise silently read from offset 0.
EXTERNAL_DATA_KEYS = ("location", "offset", "length", "checksum", "basepath")


def _entries(tensor: TensorProto, what: str) -> dict[str, str]:
    """``tensor``'s external data entries by key: known keys only, each given once."""
    info: dict[str, str] = {}
    for e in tensor.external_data:
        if e.key not in EXTERNAL_DATA_KEYS:
            raise ExternalDataError(
                f"{what}: unknown key {e.key[:64]!r} (known: {', '.join(EXTERNAL_DATA_KEYS)})"
            )
        if e.key in info:
            raise ExternalDataError(f"{what}: key {e.key!r} is given more than once")
        info[e.key] = e.value
    return info


def _count(info: dict[str, str], key: str, what: str) -> int | None:
    """The value of ``key`` (offset, length), which must be plain ASCII digits, as onnxruntime
    reads it: no sign, space, ``_`` or other script's digits, which Python's ``int`` takes."""
    value = info.get(key)
    if value is None:
        return None
    shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} characters)"
    if not (value.isascii() and value.isdigit()):
        raise ExternalDataError(f"{what}: {key} {shown} is not a number in ASCII digits 0-9")
    try:
        return int(value)
    except ValueError as exc:  # more digits than int() converts (sys.get_int_max_str_digits)
        raise ExternalDataError(f"{what}: {key} {shown} has too many digits") from exc


def _span(info: dict[str, str], what: str) -> tuple[int, int | None]:
    """The offset and length (None: to the end) an external data entry names."""
    return _count(info, "offset", what) or 0, _count(info, "length", what)


def _regular_size(fd: int, what: str) -> int:
    """The size of the file open as ``fd``, which must be a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ExternalDataError(f"{what}: not a regular file ({_file_kind(info.st_mode)})")
    return info.st_size


def _check_fits_in_memory(nbytes: int, what: str) -> None:
    """Refuse, before reading, data larger than the memory available (a sparse file of
    64 GiB would otherwise be read for minutes before failing); data under a mebibyte is not
    worth the look at the limits."""
    if nbytes < 1 << 20:
        return
    available = available_memory()
    if nbytes > available:
        raise ExternalDataError(
            f"{what}: {nbytes} bytes to read, more than the {available} bytes of memory available"
        )


def read_external(tensor: TensorProto, base_dir: str | os.PathLike) -> None:
    """Read ``tensor``'s external data into ``raw_data``: only a regular file inside
    ``base_dir``, opened once (:func:`onnxflow.ir.external.open_inside`) and checked as opened,
    only the bytes its offset and length name."""
    location = _location(tensor)
    what = f"external data of tensor {tensor.name!r} at location {location!r}"
    info = _entries(tensor, what)
    _check_location(location, what)
    offset, length = _span(info, what)
    try:
        fd = open_inside(base_dir, location, what)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                tensor.raw_data = _read_span(f, offset, length, what)
        finally:
            os.close(fd)
    except ExternalDataError:  # a RuntimeError too, and already naming what was wrong
        raise
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop (resolve, Windows)
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ExternalDataError(f"{what}: cannot read: {reason}") from exc
    except MemoryError as exc:
        raise ExternalDataError(f"{what}: too large to read into memory") from exc
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT


def _read_span(f: BinaryIO, offset: int, length: int | None, what: str) -> bytes:
    """The ``length`` bytes (None: all) at ``offset`` of the open regular file ``f``."""
    size = _regular_size(f.fileno(), what)
    if offset > size or (length is not None and length > size - offset):
        raise ExternalDataError(
            f"{what}: offset {offset} and length {length} do not fit the file of {size} bytes"
        )
    wanted = size - offset if length is None else length
    _check_fits_in_memory(wanted, what)
    f.seek(offset)
    data = f.read(wanted)
    if len(data) != wanted:
        raise ExternalDataError(f"{what}: {len(data)} bytes read, not {wanted}: the file shrank")
    return data
