"""Options fixed when a session is created (:class:`SessionOptions`) and per run
(:class:`RunOptions`), with onnxruntime's attribute names and enums beside onnxflow's own.

Every onnxruntime setting is either acted on or, when given a value other than its default,
makes the session warn once (per process and setting) that onnxflow ignores it.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from onnxflow.errors import Fail, InputError
from onnxflow.errors import NotImplemented as OrtNotImplemented

LOOP_CONDITION_MODES = ("spec", "always")
FLOAT16_ROUNDINGS = ("each_op", "outputs")
KERNEL_FORMS = ("native", "numpy")


class _OrtEnum(enum.IntEnum):
    """An integer enum shown as onnxruntime shows its enums: ``str`` and ``format`` give
    ``Class.MEMBER`` (an ``IntEnum``'s give the number), ``repr`` ``<Class.MEMBER: value>``."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(int(self), spec)


class GraphOptimizationLevel(_OrtEnum):
    """onnxruntime's optimization levels; onnxflow has two: all its passes, or none."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(_OrtEnum):
    """onnxruntime's execution modes; onnxflow runs nodes one after another."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(_OrtEnum):
    """onnxruntime's node orders; onnxflow runs nodes in the compiled plan's order."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


#: onnxruntime's SessionOptions settings asking for what onnxflow cannot do, with their
#: defaults and why: a value other than the default warns once.
IGNORED_SESSION_SETTINGS: dict[str, tuple[Any, str]] = {
    "inter_op_num_threads": (0, "nodes run one after another"),
    "execution_mode": (ExecutionMode.ORT_SEQUENTIAL, "nodes run one after another"),
    "execution_order": (ExecutionOrder.DEFAULT, "nodes run in the compiled plan's order"),
    "enable_mem_reuse": (True, "a run frees each value after its last use, always"),
}

#: Settings onnxflow acts on, or whose every value describes what it does already, with
#: onnxruntime's defaults (see the SessionOptions docstring).
SESSION_SETTINGS: dict[str, Any] = {
    "intra_op_num_threads": 0,
    "enable_profiling": False,
    "profile_file_prefix": "onnxruntime_profile_",
    "optimized_model_filepath": "",
    "log_severity_level": -1,
    "log_verbosity_level": 0,
    "logid": "",
    "use_deterministic_compute": False,
    "enable_cpu_mem_arena": True,
    "enable_mem_pattern": True,
    "use_per_session_threads": True,
}

#: Config entries asking for what onnxflow does already: no warning.
SATISFIED_CONFIG_ENTRIES = {
    ("session.intra_op.allow_spinning", "0"),  # onnxflow has no threads that spin-wait
    ("session.inter_op.allow_spinning", "0"),
    ("session.load_model_format", "ONNX"),
}


class SessionOptions:
    """How a session compiles and runs its model.

    onnxflow's own options (also keyword arguments):

    - ``optimize`` (default True): compute nodes whose inputs are all constants once, when the
      session is created (never random draws); move loop-invariant work out of Loop and Scan
      bodies; batch per-element Scan work over whole sequences. Results are the same; turn it
      off to run every node, every time, exactly as written. ``graph_optimization_level`` is
      the same switch under onnxruntime's name: ``ORT_DISABLE_ALL`` is ``optimize=False``, any
      other level ``optimize=True``.
    - ``loop_condition`` (default ``"spec"``): with ``"spec"``, a Loop whose ``cond`` input is
      omitted ignores the condition its body computes, as the operator's table says. With
      ``"always"``, the body's condition stops the loop in every mode, as onnxruntime does and
      as onnxscript's translation of ``for ... break`` expects.
    - ``float16_rounding`` (default ``"each_op"``): float16 values are held in float32 and, with
      ``"each_op"``, every op's float16 result is rounded to float16, as the model's types say.
      With ``"outputs"``, they are computed in float32 from op to op and rounded only where the
      model casts to float16 and at the graph's outputs, as onnxruntime's CPU provider runs
      float16 models (it computes them in float32 and drops the casts between ops): faster, and
      its results differ from the spec's by float16 roundings. Applies with ``optimize``.
    - ``kernels`` (default ``"native"``): with ``"native"``, a kernel that has a compiled form
      (:mod:`onnxflow.native`, built with the package) runs it; with ``"numpy"``, every kernel
      runs its NumPy form, the reference the compiled forms are tested against. Results agree
      bit for bit, or within the bound each compiled form's test states.

    onnxruntime's settings that onnxflow acts on:

    - ``intra_op_num_threads``: the most threads BLAS uses while one of the session's runs is in
      progress (through threadpoolctl), restored after, and the most a compiled kernel runs
      on: the tree ensembles' walk alone splits a large input's rows over plain threads (the
      caller's and up to that many less one, started for the call and joined, none spinning);
      every other compiled kernel runs on the caller's thread. 0 (the default) follows the
      machine's load: BLAS gets the cores the 1-minute load average leaves idle, at least one
      (from a session's third run on, for models whose second run took 1 ms or more), and its
      own default while every core is idle; a tree walk takes at most the CPUs the process may
      use that the load leaves idle; see :mod:`onnxflow.ort_api.threads` and docs/scaling.md.
    - ``enable_profiling``, ``profile_file_prefix``: each run's nodes are timed and
      ``InferenceSession.end_profiling()`` writes them in onnxruntime's JSON trace format.
    - ``optimized_model_filepath``: the session writes there the model after its load-time
      constant folding (see ``InferenceSession``).
    - ``log_severity_level`` (-1: the process default, see ``set_default_logger_severity``):
      the severity the session logs at (:mod:`onnxflow.logs`); at 3 (error) or above, its
      warnings of ignored settings are not shown either (those of a provider it does not
      have are, as in onnxruntime).
    - ``logid``: names the session in its log records and warnings.
    - ``use_deterministic_compute``: accepted; onnxflow's results are always deterministic.
    - ``enable_cpu_mem_arena``, ``enable_mem_pattern``: accepted; onnxflow has no arena and
      plans no memory pattern (NumPy allocates each array), whatever their value.
    - ``use_per_session_threads``: accepted; a run uses its caller's thread (and BLAS's pool
      and a tree walk's threads, bounded by ``intra_op_num_threads``), whatever its value.
    - ``log_verbosity_level``: accepted; as in onnxruntime's release builds, it changes nothing.
    - ``add_session_config_entry`` / ``get_session_config_entry``: kept and given back; no key
      changes what onnxflow does, so a session warns once that they are ignored, except for
      those in :data:`SATISFIED_CONFIG_ENTRIES` (turning spinning off: onnxflow never spins).

    The settings in :data:`IGNORED_SESSION_SETTINGS` are accepted and, when changed, warned
    about once. ``register_custom_ops_library`` raises: onnxruntime's custom-op libraries are
    compiled for onnxruntime, and onnxflow cannot run them.
    """

    def __init__(
        self,
        optimize: bool = True,
        loop_condition: str = "spec",
        float16_rounding: str = "each_op",
        kernels: str = "native",
    ) -> None:
        self.optimize = optimize
        self.loop_condition = loop_condition
        self.float16_rounding = float16_rounding
        self.kernels = kernels
        for name, value in SESSION_SETTINGS.items():
            setattr(self, name, value)
        for name, (value, _) in IGNORED_SESSION_SETTINGS.items():
            setattr(self, name, value)
        self._config: dict[str, str] = {}
        self._dimension_overrides: dict[str, int] = {}
        self._initializers: dict[str, Any] = {}
        for name, allowed in (
            ("loop_condition", LOOP_CONDITION_MODES),
            ("float16_rounding", FLOAT16_ROUNDINGS),
            ("kernels", KERNEL_FORMS),
        ):
            if getattr(self, name) not in allowed:
                raise InputError(
                    f"SessionOptions.{name} must be one of {allowed}, found {getattr(self, name)!r}"
                )

    @property
    def optimize(self) -> bool:
        """Whether onnxflow's compile passes run (see the class docstring)."""
        return self._level != GraphOptimizationLevel.ORT_DISABLE_ALL

    @optimize.setter
    def optimize(self, value: bool) -> None:
        level = GraphOptimizationLevel
        self._level = level.ORT_ENABLE_ALL if value else level.ORT_DISABLE_ALL

    @property
    def graph_optimization_level(self) -> GraphOptimizationLevel:
        """onnxruntime's optimization level: ``ORT_DISABLE_ALL`` turns ``optimize`` off."""
        return self._level

    @graph_optimization_level.setter
    def graph_optimization_level(self, value: int) -> None:
        try:
            self._level = GraphOptimizationLevel(value)
        except ValueError as exc:
            raise InputError(
                "graph_optimization_level must be one of "
                f"{[int(v) for v in GraphOptimizationLevel]}, found {value!r}"
            ) from exc

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Record a configuration entry (onnxruntime's ``session.*`` keys)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """A configuration entry recorded before; a ``Fail`` (RuntimeError) when there is none."""
        if key not in self._config:
            raise Fail(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_initializer(self, name: str, ort_value: Any) -> None:
        """Use ``ort_value`` (an OrtValue or an array) as the model's initializer ``name``; a
        session whose model has no such initializer warns that it is unused."""
        value = ort_value.numpy() if hasattr(ort_value, "numpy") else ort_value
        self._initializers[str(name)] = np.asarray(value)

    def added_initializers(self) -> dict[str, np.ndarray]:
        """The initializers given with :meth:`add_initializer`, by name."""
        return dict(self._initializers)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Record a value for a symbolic dimension; ignored (with a warning, once): onnxflow
        takes every dimension from the feeds."""
        self._dimension_overrides[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(
        self, dim_denotation: str, dim_value: int
    ) -> None:
        """Record a value for dimensions of a denotation; ignored as the override by name."""
        self._dimension_overrides[f"denotation {dim_denotation}"] = int(dim_value)

    def register_custom_ops_library(self, library_path: str) -> None:
        """Refused: a custom-op library is native code built against onnxruntime."""
        raise OrtNotImplemented(
            f"cannot register custom-op library {library_path!r}: onnxruntime custom-op "
            "libraries are native code for onnxruntime; onnxflow runs registered Python kernels"
        )

    def ignored_settings(self) -> list[tuple[str, str]]:
        """The onnxruntime settings changed from their defaults that onnxflow ignores, each with
        why; the configuration entries count as one."""
        found = [
            (name, why)
            for name, (default, why) in IGNORED_SESSION_SETTINGS.items()
            if getattr(self, name) != default
        ]
        config = set(self._config.items()) - SATISFIED_CONFIG_ENTRIES
        if config:
            found.append((f"config entries {sorted(dict(config))}", "no key applies to onnxflow"))
        if self._dimension_overrides:
            found.append((
                f"free dimension overrides {sorted(self._dimension_overrides)}",
                "every dimension is taken from the feeds",
            ))  # fmt: skip
        return found

    def __repr__(self) -> str:
        return (
            f"SessionOptions(optimize={self.optimize}, loop_condition={self.loop_condition!r}, "
            f"float16_rounding={self.float16_rounding!r}, kernels={self.kernels!r})"
        )


class RunOptions:
    """Per-run options. Setting ``terminate = True`` (from any thread) cancels a run.

    ``log_severity_level`` is the severity the run logs at (-1, the default: the session's;
    see :mod:`onnxflow.logs`); ``logid`` and ``run_tag`` name the run; run config entries
    are kept and given back, and none changes a run. ``only_execute_path_to_fetches`` is ignored
    (with a warning, once): every node of the plan runs.
    """

    def __init__(self) -> None:
        self.terminate = False
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.only_execute_path_to_fetches = False
        #: The most bytes one stacked loop scan output may take (None: the memory available
        #: when the loop runs). A loop whose scan output would exceed it fails at once when
        #: its trip count is known, else when the rows collected reach it.
        self.max_scan_output_bytes: int | None = None
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Record a run configuration entry."""
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """A run configuration entry recorded before; a ``Fail`` when there is none."""
        if key not in self._config:
            raise Fail(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]
