"""The part of onnxruntime's InferenceSession API that is not about compiling and running one
call, as a mixin of :class:`onnxflow.InferenceSession`; and its warnings, each given once."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import onnx

from onnxflow.errors import OnnxflowWarning
from onnxflow.logs import get_severity
from onnxflow.options import SessionOptions
from onnxflow.ort_api.api import CPU, check_providers, cpu_options
from onnxflow.ort_api.binding import SessionIOBinding
from onnxflow.ort_api.editing import folded_model
from onnxflow.ort_api.ortvalue import OrtValue
from onnxflow.ort_api.profiler import OrtProfile
from onnxflow.ort_api.threads import BlasThreads, default_threads
from onnxflow.runtime.observe import Observer

#: A second run at least this long (ns) makes a session take the default BLAS bound of a loaded
#: machine (see ``OrtSessionAPI._load_bounded``).
HEAVY_RUN_NS = 1_000_000

_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with ``message`` the first time this process meets ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, category, stacklevel=4)


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
            CPU: cpu_options(providers, provider_options)
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
        self._runs = 0  # runs started, counted up to 2
        self._heavy = False  # whether the second run took HEAVY_RUN_NS or more
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

    def _load_bounded(self) -> bool:
        """Whether this run of a session left at ``intra_op_num_threads=0`` takes the default
        bound (:func:`~onnxflow.ort_api.threads.default_threads`): BLAS on the cores the load
        leaves idle (at least one) while the machine is busy, from the session's third run on,
        and only when its second run took :data:`HEAVY_RUN_NS` or more. A small model (whose
        products are too small for BLAS to thread) never pays threadpoolctl's scan of the
        loaded libraries (2-10 ms once per process) nor the bound's 10 µs per run, and no
        session's first two runs do."""
        return self._runs >= 2 and self._heavy and default_threads() > 0

    @contextmanager
    def _api_run(self) -> Iterator[None]:
        """Around a run: the BLAS thread bound and the profile's ``model_run`` event."""
        start = time.perf_counter_ns()
        index = self._runs
        self._runs = min(index + 1, 2)
        threads = self._threads if self._threads > 0 else self._load_bounded() and default_threads()
        try:
            if threads > 0:
                with BlasThreads.limit(threads):
                    yield
            else:
                yield
        finally:
            if index == 1:
                self._heavy = time.perf_counter_ns() - start >= HEAVY_RUN_NS
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
        self._provider_options = {CPU: cpu_options(providers, provider_options)}

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
