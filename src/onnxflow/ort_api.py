"""onnxruntime's Python API around a session, with CPU meaning: module functions,
:class:`OrtValue`, :class:`SessionIOBinding`, :class:`ModelMetadata`, and what the session
needs to honour onnxruntime's options (warnings given once, BLAS thread limits, the profile
trace in onnxruntime's JSON format).

Everything is on the CPU: the only provider is ``CPUExecutionProvider``, the only device
``"cpu"``; an OrtValue holds a NumPy array (or a sequence, map or optional value).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
from threadpoolctl import OpenBLASController, ThreadpoolController

from onnxflow.errors import EPFail, Fail, InvalidArgument, OnnxflowWarning
from onnxflow.ir.walk import subgraph_reads
from onnxflow.logs import get_severity, set_severity
from onnxflow.options import SessionOptions
from onnxflow.runtime.observe import Observer, node_key
from onnxflow.values import NodeArg, elem_type_of, np_dtype, type_shape, value_type_str

CPU = "CPUExecutionProvider"


def get_device() -> str:
    """The device onnxflow computes on: ``"CPU"``."""
    return "CPU"


def get_available_providers() -> list[str]:
    """The execution providers onnxflow offers: the CPU only."""
    return [CPU]


def get_all_providers() -> list[str]:
    """Every provider onnxflow knows of: the CPU only."""
    return [CPU]


def set_default_logger_severity(severity: int) -> None:
    """Set the process's default severity (0 verbose, 1 info, 2 warning, 3 error, 4 fatal):
    the level of the ``onnxflow`` logger (see :mod:`onnxflow.logs`), and the level at or
    above which sessions whose ``log_severity_level`` is -1 do not show their warnings."""
    set_severity(severity)


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accept a default verbosity (an integer): as in onnxruntime's release builds, where it
    applies to debug logging only, it changes nothing."""
    if isinstance(verbosity, bool) or not isinstance(verbosity, (int, np.integer)):
        raise InvalidArgument(f"verbosity must be an integer, found {verbosity!r}")


# -- warnings, each given once -------------------------------------------------------------------
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with ``message`` the first time this process meets ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, category, stacklevel=4)


def check_providers(providers: Sequence[Any] | None, *, stacklevel: int = 4) -> list[str]:
    """The providers a session uses (always the CPU); every other provider asked for warns as
    onnxruntime warns of a provider it does not have (whatever the log severity, as there),
    and the session falls back to the CPU."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or ()]
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgument(f"a provider is a name or (name, options), found {name!r}")
        if name != CPU:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{CPU}'",
                UserWarning,
                stacklevel=stacklevel,
            )
    return [CPU]


# -- BLAS threads --------------------------------------------------------------------------------
class BlasThreads:
    """Bounds BLAS's threads while runs are in progress, and restores them after the last.

    The bound is process-wide (threadpoolctl sets the BLAS library's global count): runs that
    overlap share the bound of the first to start, and the original count comes back when the
    last of them ends. threadpoolctl lets one thread at a time set OpenBLAS's count: the
    thread of the first run takes that control and gives it back when the last run ends (a
    thread outside onnxflow holding it makes the bound a no-op).
    """

    _lock = threading.Lock()
    _active = 0
    _limiter: Any = None
    _owner: threading.Thread | None = None
    _controller: Any = None

    @classmethod
    @contextmanager
    def limit(cls, threads: int) -> Iterator[None]:
        """Run the body with BLAS using at most ``threads`` threads."""
        with cls._lock:
            if cls._active == 0:
                if cls._controller is None:
                    cls._controller = ThreadpoolController()
                cls._limiter = cls._controller.limit(limits=threads, user_api="blas")
                cls._owner = threading.current_thread()
            cls._active += 1
        try:
            yield
        finally:
            with cls._lock:
                cls._active -= 1
                if cls._active == 0:
                    cls._restore()

    @classmethod
    def _restore(cls) -> None:
        """Restore the original count from this thread, then release control of OpenBLAS."""
        if cls._owner is not threading.current_thread():  # the first run's thread is done
            OpenBLASController.clear_controlling_thread(force=True)
        cls._limiter.restore_original_limits()
        OpenBLASController.clear_controlling_thread()
        cls._limiter = cls._owner = None


# -- the profile ---------------------------------------------------------------------------------
_ORT_TYPE_NAMES = {"float32": "float", "float64": "double", "object": "string", "str": "string"}


def _type_shapes(values: Sequence[Any]) -> list[dict[str, list[int]]]:
    shown = []
    for v in values:
        if isinstance(v, np.ndarray):
            name = _ORT_TYPE_NAMES.get(v.dtype.name, v.dtype.name)
            shown.append({name: list(v.shape)})
    return shown


class OrtProfile(Observer):
    """Times a session's runs and nodes as events of onnxruntime's JSON profile: ``"Session"``
    events (``session_initialization``, ``model_run``) and a ``"Node"`` event per node run
    (``<node>_kernel_time``, with ``op_name``, ``provider`` and the input and output types
    and shapes), ``ts`` and ``dur`` in whole microseconds from the start of profiling."""

    def __init__(self, started: tuple[int, int]) -> None:
        """``started``: ``(perf_counter_ns, time_ns)`` when profiling started."""
        self._perf0, self.start_ns = started
        self.events: list[dict[str, Any]] = []
        self._spans = threading.local()  # each thread's open node spans (concurrent runs)
        self._lock = threading.Lock()

    def session_event(self, name: str, start_perf_ns: int, end_perf_ns: int) -> None:
        """Record a ``"Session"`` event spanning the two ``perf_counter_ns`` readings."""
        self._add("Session", name, start_perf_ns, end_perf_ns, {})

    def node_start(self, scope, info, inputs) -> None:  # type: ignore[no-untyped-def]
        """Open the node's span."""
        self._open().append(time.perf_counter_ns())

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        """Record the node's event."""
        start = self._open().pop()
        args = {
            "op_name": info.op_type,
            "provider": CPU,
            "input_type_shape": _type_shapes(inputs),
            "output_type_shape": _type_shapes(outputs),
        }
        self._add("Node", f"{node_key(info)}_kernel_time", start, time.perf_counter_ns(), args)

    def _open(self) -> list[int]:
        """The calling thread's stack of open node spans."""
        spans = getattr(self._spans, "stack", None)
        if spans is None:
            spans = self._spans.stack = []
        return spans

    def _add(self, cat: str, name: str, start: int, end: int, args: dict[str, Any]) -> None:
        event = {
            "cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(),
            "dur": (end - start) // 1000, "ts": (start - self._perf0) // 1000, "ph": "X",
            "name": name, "args": args,
        }  # fmt: skip
        with self._lock:
            self.events.append(event)

    def write(self, prefix: str) -> str:
        """Write the events to ``<prefix>_<date>_<time>_<ms>.json``, as onnxruntime names its
        profiles; return the path."""
        now = datetime.datetime.now()
        path = f"{prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        with self._lock:
            lines = ",\n".join(json.dumps(e) for e in self.events)
        with open(path, "w") as f:
            f.write(f"[\n{lines}\n]\n")
        return path


# -- values --------------------------------------------------------------------------------------
def _check_cpu(device_type: str, device_id: int = 0) -> None:
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
        _check_cpu(device_type, device_id)
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
        _check_cpu(device_type, device_id)
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


def _from_pointer(element_type: Any, shape: Sequence[int], buffer_ptr: int) -> np.ndarray:
    """An array over the memory at ``buffer_ptr`` (CPU memory the caller keeps alive)."""
    dtype = _dtype_of(element_type)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))


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
        _check_cpu(device_type, device_id)
        self._inputs[name] = _from_pointer(element_type, shape, buffer_ptr)

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
        _check_cpu(device_type, device_id)
        if buffer_ptr is None:
            self._outputs[name] = None
        else:
            self._outputs[name] = _from_pointer(element_type, shape or (), buffer_ptr)

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


class ModelMetadata:
    """A model's metadata, with onnxruntime's attribute names."""

    def __init__(self, model: Any) -> None:
        self.producer_name: str = model.producer_name
        self.graph_name: str = model.graph.name
        self.domain: str = model.domain
        self.description: str = model.doc_string
        self.graph_description: str = model.graph.doc_string
        #: as onnxruntime gives it: the largest int64 when the model sets no version
        self.version: int = model.model_version if model.HasField("model_version") else 2**63 - 1
        self.custom_metadata_map: dict[str, str] = {p.key: p.value for p in model.metadata_props}

    def __repr__(self) -> str:
        return (
            f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r})"
        )


def replace_initializers(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> None:
    """Put ``values`` in place of the main graph's initializers of those names (the session's
    own copy of the model), each of the element type the model gives it; a name the model has
    no initializer for warns that it is unused."""
    if not values:
        return
    stored = {t.name: t for t in model.graph.initializer}
    for name, value in values.items():
        if name not in stored:
            warnings.warn(
                f"SessionOptions.add_initializer: the model has no initializer {name!r}; the "
                f"value is unused (initializers: {sorted(stored)[:10]})",
                OnnxflowWarning,
                stacklevel=4,
            )
            continue
        expected = np_dtype(stored[name].data_type)
        if value.dtype != expected:
            raise InvalidArgument(
                f"SessionOptions.add_initializer: {name!r} is {expected} in the model, the "
                f"value given is {value.dtype}"
            )
        stored[name].CopyFrom(onnx.numpy_helper.from_array(value, name))


def ort_node_arg(arg: NodeArg) -> NodeArg:
    """``arg`` as onnxruntime shows it: an unranked tensor or a sequence or map has shape
    ``[]``, an optional tensor the shape of the tensor."""
    if arg.shape is not None:
        return arg
    tp = arg.type_proto
    if tp is not None and tp.WhichOneof("value") == "optional_type":
        return NodeArg(arg.name, arg.type, type_shape(tp.optional_type.elem_type) or [], tp)
    return NodeArg(arg.name, arg.type, [], tp)


class OrtSessionAPI:
    """The part of onnxruntime's InferenceSession API that is not about compiling and running
    one call: providers, profiling, IO binding, OrtValue runs, asynchronous runs, and the
    options acted on around each run. :class:`onnxflow.InferenceSession` derives from it."""

    options: SessionOptions
    model: Any
    run: Any  # InferenceSession.run

    def _api_setup(
        self, providers: Sequence[Any] | None, provider_options: Any, started: tuple[int, int]
    ) -> None:
        """Act on the options and providers once the model is compiled; ``started`` is
        ``(perf_counter_ns, time_ns)`` at the start of the session's creation."""
        opts = self.options
        self._providers = check_providers(providers)
        self._provider_options: dict[str, dict[str, str]] = {
            CPU: _cpu_options(providers, provider_options)
        }
        self._fallback = True
        self._profiling_start_ns = started[1]
        self._profile: OrtProfile | None = None
        if opts.enable_profiling:
            self._profile = OrtProfile(started)
            self._profile.session_event(
                "session_initialization", started[0], time.perf_counter_ns()
            )
        self._threads = int(opts.intra_op_num_threads or 0)
        self._api_plain = self._profile is None and self._threads <= 0
        if self._shows_warnings():
            for name, why in opts.ignored_settings():
                warn_once(
                    f"SessionOptions.{name}",
                    f"{self._named()}SessionOptions.{name} is ignored: {why}",
                    OnnxflowWarning,
                )
        if opts.optimized_model_filepath:
            self._write_optimized(opts.optimized_model_filepath)

    def _shows_warnings(self) -> bool:
        level = self.options.log_severity_level
        return (level if level >= 0 else get_severity()) <= 2

    def _named(self) -> str:
        return f"session {self.options.logid!r}: " if self.options.logid else ""

    def _write_optimized(self, path: str) -> None:
        """Write the model after the load-time folding (see :func:`folded_model`)."""
        onnx.save_model(folded_model(self.model, self.plan), path)  # type: ignore[attr-defined]

    def _api_watchers(self, run_options: Any) -> list[Observer]:
        """Observers the options ask for: the profile when the session is profiling."""
        if getattr(run_options, "only_execute_path_to_fetches", False):
            warn_once(
                "RunOptions.only_execute_path_to_fetches",
                "RunOptions.only_execute_path_to_fetches is ignored: every node runs",
                OnnxflowWarning,
            )
        return [] if self._profile is None else [self._profile]

    @contextmanager
    def _api_run(self) -> Iterator[None]:
        """Around a run: the BLAS thread bound and the profile's ``model_run`` event."""
        start = time.perf_counter_ns()
        try:
            if self._threads > 0:
                with BlasThreads.limit(self._threads):
                    yield
            else:
                yield
        finally:
            if self._profile is not None:
                self._profile.session_event("model_run", start, time.perf_counter_ns())

    # -- onnxruntime's methods ----------------------------------------------------------------
    def get_session_options(self) -> SessionOptions:
        """The options the session was created with."""
        return self.options

    def get_providers(self) -> list[str]:
        """The providers the session uses: ``["CPUExecutionProvider"]``."""
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Each provider's options, as strings."""
        return {k: dict(v) for k, v in self._provider_options.items()}

    def set_providers(
        self, providers: Sequence[Any] | None = None, provider_options: Any = None
    ) -> None:
        """Choose providers: any but the CPU warns, and the session stays on the CPU."""
        self._providers = check_providers(providers, stacklevel=3)
        self._provider_options = {CPU: _cpu_options(providers, provider_options)}

    def disable_fallback(self) -> None:
        """Record that the session should not fall back to the CPU (it is always on it)."""
        self._fallback = False

    def enable_fallback(self) -> None:
        """Record that the session may fall back to the CPU."""
        self._fallback = True

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (the session's creation), in ns since the epoch."""
        return self._profiling_start_ns

    def end_profiling(self) -> str:
        """Write the profile (onnxruntime's JSON trace, which Perfetto opens) to
        ``<profile_file_prefix>_<date>_<time>_<ms>.json`` and stop profiling; return the
        path, or ``""`` when the session is not profiling."""
        if self._profile is None:
            return ""
        path = self._profile.write(self.options.profile_file_prefix)
        self._profile = None
        self._api_plain = self._threads <= 0
        return path

    def io_binding(self) -> SessionIOBinding:
        """A new binding of inputs and outputs for ``run_with_iobinding``."""
        return SessionIOBinding(self)

    def run_with_iobinding(self, iobinding: SessionIOBinding, run_options: Any = None) -> None:
        """Run on the binding's inputs; its outputs then hold the results."""
        iobinding.run(run_options)

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: dict[str, OrtValue],
        run_options: Any = None,
    ) -> list[OrtValue]:
        """Run on OrtValues; return the outputs as OrtValues."""
        feeds = {
            k: v.numpy() if isinstance(v, OrtValue) else v for k, v in input_dict_ort_values.items()
        }
        return [OrtValue(v) for v in self.run(output_names, feeds, run_options)]

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        callback: Any,
        user_data: Any,
        run_options: Any = None,
    ) -> None:
        """Run in a new thread; then call ``callback(outputs, user_data, error)``, ``error``
        being ``""`` on success, else the error's message with ``outputs`` empty."""

        def work() -> None:
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as exc:
                callback([], user_data, str(exc))
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, name="onnxflow run_async", daemon=True).start()


def folded_model(model: onnx.ModelProto, plan: Any) -> onnx.ModelProto:
    """``model`` with the main graph's nodes that the compiled ``plan`` computed once at load
    time (their outputs all constant tensors) replaced by initializers holding their values,
    the initializers no node reads any more dropped, and the types shape inference finds.

    onnxflow's other passes (fusions, loop hoisting, float16 widening) rewrite the plan, not
    an ONNX graph, and are not in it; nor are folded values inside subgraphs.
    """
    folded = {
        plan.slot_names[slot]: plan.template[slot]
        for slot in plan.constant_slots
        if isinstance(plan.template[slot], np.ndarray)
    }
    kept = [n for n in model.graph.node if not _computed(n, folded)]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(kept)
    initializers = _initializers(model, kept, folded)
    del result.graph.initializer[:]
    result.graph.initializer.extend(initializers)
    del result.graph.value_info[:]
    return _inferred(result)


def _initializers(
    model: onnx.ModelProto, kept: list[onnx.NodeProto], folded: dict[str, np.ndarray]
) -> list[onnx.TensorProto]:
    """The initializers the ``kept`` nodes, their subgraphs or the graph's outputs read: the
    model's own (all those listed as inputs too) and the folded values, as declared."""
    graph = model.graph
    reads = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    reads |= subgraph_reads(kept)
    inputs = {vi.name for vi in graph.input}
    found = [t for t in graph.initializer if t.name in reads or t.name in inputs]
    dropped = {o for n in graph.node if _computed(n, folded) for o in n.output}
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in _typed(model)}
    for name in sorted(dropped & reads):
        value, elem = folded[name], declared.get(name, 0)
        value = value.astype(np_dtype(elem), copy=False) if elem else value
        found.append(onnx.numpy_helper.from_array(value, name))
    return found


def _computed(node: onnx.NodeProto, folded: dict[str, np.ndarray]) -> bool:
    """Whether the plan computed every output of ``node`` at load time."""
    return all(o in folded for o in node.output if o)


def _typed(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The main graph's declared and inferred tensor types."""
    inferred = _inferred(model).graph
    found = [*inferred.input, *inferred.output, *inferred.value_info]
    return [vi for vi in found if vi.type.HasField("tensor_type")]


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # an aid only: a model inference cannot handle is kept as it is
        return model


def _cpu_options(providers: Sequence[Any] | None, provider_options: Any) -> dict[str, str]:
    """The CPU provider's options, from ``(name, options)`` in ``providers`` or from
    ``provider_options`` (one dict per provider), as strings."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or ()]
    given: dict[str, Any] = {}
    for i, p in enumerate(providers or ()):
        if isinstance(p, (tuple, list)) and p[0] == CPU:
            given = dict(p[1])
        elif provider_options and i < len(provider_options) and names[i] == CPU:
            given = dict(provider_options[i])
    return {str(k): str(v) for k, v in given.items()}
