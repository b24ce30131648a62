"""The public session: load → validate → compile once, then run many times."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto

from onnxflow.compile.compiler import Compiler
from onnxflow.compile.plan import Plan
from onnxflow.errors import (
    InputError,
    OnnxflowError,
    OnnxflowWarning,
    ResourceError,
    ValidationError,
)
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.inference import infer_types
from onnxflow.ir.load import ModelSource, load_model
from onnxflow.ir.validate import opset_map, run_onnx_checker, validate_model
from onnxflow.ir.walk import without_unread_initializers
from onnxflow.logs import SeverityLog
from onnxflow.ops.custom import CustomOps, CustomRegistry, registry_for
from onnxflow.options import RunOptions, SessionOptions
from onnxflow.ort_api import ModelMetadata, OrtSessionAPI, ort_node_arg, replace_initializers
from onnxflow.runtime.context import current_run_options, reset_run_options, set_run_options
from onnxflow.runtime.errstate import restore, silence
from onnxflow.runtime.executor import execute, sources
from onnxflow.runtime.feeds import FeedBinder
from onnxflow.runtime.lower import lower
from onnxflow.runtime.memory import keep_freed_memory
from onnxflow.runtime.observe import Observer, current_observation, observe, stop_observing
from onnxflow.runtime.outputs import DeclaredShapes, Detacher, all_fresh, made_outputs
from onnxflow.values import NodeArg, tensor_to_array


class InferenceSession(OrtSessionAPI):
    """A compiled ONNX model, ready to run many times; mirrors onnxruntime's InferenceSession.

    ``model`` is a file path, serialized bytes, or an ``onnx.ModelProto``. ``base_dir`` is where
    external data lives when the model is not given as a path. ``providers`` and
    ``provider_options`` are onnxruntime's: the session runs on the CPU, and asking for any
    other provider warns as onnxruntime does of a provider it does not have.

    With ``SessionOptions.optimized_model_filepath`` set, the session writes there the model
    after its load-time constant folding: the main graph's nodes computed once at load are
    initializers holding their values (see :func:`onnxflow.ort_api.folded_model`; the other
    passes rewrite the compiled plan, not an ONNX graph, and are not in the file).

    ``custom_ops`` gives operators onnxflow lacks as Python functions, for this session only:
    ``{"com.example.MyOp": fn}`` (a bare ``"MyOp"`` is of the default domain), where
    ``fn(*inputs, **attributes)`` returns an array, or a tuple of one per output; a value
    ``(fn, Traits(pure=False))`` also declares what the function promises. They run wherever
    the operator is used, loop and branch bodies included. See :mod:`onnxflow.ops.custom`.
    The session pickles with them when they pickle (module-level functions with pickle;
    lambdas and closures with cloudpickle, as Dask and Ray use).
    """

    def __init__(
        self,
        model: ModelSource,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
        *,
        base_dir: str | os.PathLike | None = None,
        check: bool = True,
        custom_ops: CustomOps | None = None,
    ) -> None:
        started = (time.perf_counter_ns(), time.time_ns())
        keep_freed_memory()  # once per process: see onnxflow.runtime.memory
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise InputError(
                "sess_options must be an onnxflow.SessionOptions, found "
                f"{type(sess_options).__name__}"
            )
        self.options = sess_options or SessionOptions()
        self._custom_ops = custom_ops
        self._registry = registry_for(custom_ops)
        self._base_dir = base_dir
        self._check = check
        self.model: ModelProto = load_model(model, base_dir)
        if self.model is model:  # the caller's proto: the session keeps its own copy
            self.model = ModelProto()
            self.model.CopyFrom(model)
        replace_initializers(self.model, self.options.added_initializers())
        validate_model(self.model, run_checker=False)
        # dropped as onnxruntime drops them: nothing below walks or decodes them
        self.model = without_unread_initializers(self.model)
        self._source = self.model if isinstance(model, ModelProto) else model
        if check:
            run_onnx_checker(self.model)
        try:
            self._compile()
        except OnnxflowError:
            raise
        except MemoryError as exc:
            raise ResourceError(
                f"out of memory while compiling graph {self.model.graph.name!r} into its plan"
            ) from exc
        except Exception as exc:  # a model that passed validation but trips the compiler
            raise ValidationError(
                f"the model could not be compiled: {type(exc).__name__}: {exc}"
            ) from exc
        self._lower()
        self._api_setup(providers, provider_options, started)
        self._log = SeverityLog(self.options.log_severity_level, self.options.logid)
        self._log.info(
            "session created in %.1f ms: graph %r, %d nodes, opsets %s, a plan of %d steps",
            (time.perf_counter_ns() - started[0]) / 1e6,
            self.model.graph.name,
            len(self.model.graph.node),
            self._opsets(),
            len(self.plan.steps),
        )

    def _compile(self) -> None:
        graph = self.model.graph
        initialized = {t.name for t in graph.initializer}
        self._inputs = [NodeArg.from_value_info(vi) for vi in graph.input]
        self._feedable = [a for a in self._inputs if a.name not in initialized]
        self._outputs = [NodeArg.from_value_info(vi) for vi in graph.output]
        # the same graph, with value_info to read: inferred once, for both plans and their passes
        inferred = infer_types(self.model).graph
        if isinstance(self._registry, CustomRegistry):  # the types the user's functions give
            self._registry.declare(inferred)
        self._declared = _main_values(inferred)
        compiler, opsets = self._compiler(), self._opsets()
        self.plan: Plan = compiler.compile_main(inferred, opsets)
        # Old models list their initializers as graph inputs, so a feed may override them. Runs
        # that do not use a plan in which they, and what they feed, are constants.
        self._default_plan: Plan | None = None
        if self.options.optimize and initialized & {a.name for a in self._inputs}:
            self._default_plan = compiler.compile_main(inferred, opsets, fixed_initializers=True)
        self._output_index = {name: i for i, name in enumerate(self.plan.output_names)}
        self._bind_io(initialized)

    def _bind_io(self, initialized: set[str]) -> None:
        """What a run needs around its plan: the feed binder (with the initializers a feed may
        override), what detaches outputs from stored constants, and the declared shapes."""
        defaults = {
            name: self.plan.template[slot]
            for name, slot in zip(self.plan.input_names, self.plan.arg_slots)
            if name in initialized
        }
        self._binder = FeedBinder(self._inputs, self._feedable, defaults)
        # the compiler made every stored constant read-only; outputs sharing them are copied
        self._detach = Detacher([*self.plan.template, *(self._default_plan or self.plan).template])
        #: The outputs whose kernels promise them new each run (ZipMap's rows): never copied.
        self._made = made_outputs(self.plan)
        by_name = {a.name: a.shape for a in self._outputs}
        declared = [by_name.get(name) for name in self.plan.output_names]
        self._shapes = DeclaredShapes(self.plan.output_names, declared)

    def _lower(self) -> None:
        """Lower the plans (every scope of each) to the functions that run them: the one
        lowering step of a session (see :mod:`onnxflow.runtime.lower`)."""
        #: Per plan, the function running it when nothing observes the run.
        self._quick: dict[Plan, Any] = {
            plan: lower(plan).call for plan in (self.plan, self._default_plan) if plan is not None
        }

    def _compiler(self) -> Compiler:
        return Compiler(
            functions={(normalize_domain(f.domain), f.name): f for f in self.model.functions},
            optimize=self.options.optimize,
            loop_condition=self.options.loop_condition,
            float16_rounding=self.options.float16_rounding,
            kernels=self.options.kernels,
            threads=int(self.options.intra_op_num_threads or 0),
            registry=self._registry,
        )

    def _opsets(self) -> dict[str, int]:
        return opset_map(self.model.opset_import)

    # -- onnxruntime-compatible metadata -------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The inputs a caller feeds (graph inputs that have no initializer)."""
        return [ort_node_arg(a) for a in self._feedable]

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs, in order."""
        return [ort_node_arg(a) for a in self._outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: feeding them overrides the stored value.

        None before IR version 4, as onnxruntime says: there every initializer had to be
        listed as an input, so listing one did not mean it could be overridden (feeding one
        still overrides it in onnxflow).
        """
        if self.model.ir_version < 4:
            return []
        return [ort_node_arg(a) for a in self._inputs if a.name in self._binder.defaults]

    def source(self) -> str:
        """The Python the plan runs: the main graph's generated function, then each subgraph's
        (loop bodies, branches), each under a comment saying where it sits. A loop appears
        also as the whole-loop function its runs generated, so run the model once first to
        see those."""
        return "\n\n".join(f"# {where}\n{text}" for where, text in sources(self.plan))

    def get_modelmeta(self) -> ModelMetadata:
        """Producer, graph name, domain, descriptions, version and metadata properties."""
        return ModelMetadata(self.model)

    # -- running -----------------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
        *,
        intermediate: bool = False,
        observers: Sequence[Observer] = (),
        verbose: bool = False,
    ) -> Any:
        """Run the model on ``input_feed``; return the requested outputs (all when None).

        Feeds are passed to the kernels as read-only views, so a run never writes a caller's
        array; returned arrays never share memory with a feed, a stored constant or each other.

        ``intermediate=True`` returns instead a dict of every value of the main graph by name
        (inputs, initializers and each node's outputs), or of the values named in
        ``output_names`` (any main-graph value, not only graph outputs). ``observers`` (see
        :mod:`onnxflow.observers`) watch every node and loop iteration; ``verbose=True`` prints
        each node as it runs to stderr.
        """
        if (  # the common call, all outputs of a plain run: skip what it does not use
            output_names is None
            and input_feed.__class__ is dict
            and run_options is None
            and not (intermediate or observers or verbose)
            and self._plain_runs()
        ):
            results = self._execute(self.plan, self._binder.bind(input_feed), None, [])
            if all_fresh(results):
                return results
            return self._detach(results, input_feed.values(), self._made)
        return self._run_as_asked(
            output_names, input_feed, run_options, intermediate, observers, verbose
        )

    def _run_as_asked(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None,
        intermediate: bool,
        observers: Sequence[Observer],
        verbose: bool,
    ) -> Any:
        """:meth:`run` with what its quick path does not do: outputs picked by name, run
        options, observers, intermediate values, overridable initializers."""
        _check_run_arguments(output_names, input_feed, run_options)
        indices = None if intermediate else self._select_outputs(output_names)
        args = self._binder.bind(input_feed)
        watchers = [*observers, _verbose()] if verbose else list(observers)
        watchers += self._api_watchers(run_options)
        plan = self._plan_for(input_feed)
        started = time.perf_counter()
        with self._api_run():
            if intermediate:
                return self._run_intermediate(plan, args, run_options, watchers, output_names)
            results = self._execute(plan, args, run_options, watchers)
        if run_options is not None:
            self._log_run(run_options, started)
        if indices is None:
            made = self._made if plan is self.plan else frozenset()
            return self._detach(results, input_feed.values(), made)
        return self._detach([results[i] for i in indices], input_feed.values())

    def _log_run(self, run_options: Any, started: float) -> None:
        """Log at INFO a run made with RunOptions, at the run's severity (-1: the session's)."""
        severity = getattr(run_options, "log_severity_level", -1)
        log = self._log if severity == -1 else SeverityLog(severity, self.options.logid)
        tag = getattr(run_options, "run_tag", "")
        ms = (time.perf_counter() - started) * 1e3
        log.info("%s took %.1f ms", f"run {tag!r}" if tag else "a run", ms)

    def _plain_runs(self) -> bool:
        """Whether a run needs only the plan: no initializer a feed may override, no profile,
        no BLAS thread bound (neither asked for nor the default one of a loaded machine), and
        not one of the first two runs (the second is timed for that default)."""
        plain = self._default_plan is None and self._api_plain and self._runs >= 2
        return plain and not self._load_bounded()

    def _plan_for(self, feeds: Mapping[str, Any]) -> Plan:
        """The plan for a run: with the initializers as constants when no feed overrides one."""
        defaults = self._default_plan
        if defaults is None or any(n in feeds for n in self._binder.defaults):
            return self.plan
        return defaults

    def _run_intermediate(
        self,
        plan: Plan,
        args: list[Any],
        run_options: Any,
        watchers: list[Observer],
        names: Sequence[str] | None,
    ) -> dict[str, Any]:
        """Run ``plan``; return the main graph's values named in ``names`` (all when None)."""
        collector = _MainValues(plan)
        self._execute(plan, args, run_options, [*watchers, collector])
        found = collector.values(args)
        found.update(_unread_initializers(self.model.graph, found, names))
        values = _pick(_as_declared(found, self._declared), names)
        return dict(zip(values, self._detach(list(values.values()), args)))

    def _execute(
        self, plan: Plan, args: list[Any], options: Any, watchers: list[Observer]
    ) -> list[Any]:
        quiet = current_run_options() is None and current_observation() is None
        token = silence()  # IEEE arithmetic: no NumPy warning (errstate.py)
        try:
            if quiet and not watchers and options is None:  # nothing to set up: the common case
                results = self._quick[plan](args)
            else:
                results = self._execute_watched(plan, args, options, watchers)
        finally:
            restore(token)
        try:
            for i, known in self._shapes.checks:  # a set lookup per output declaring a size
                if results[i].shape not in known:
                    self._shapes.seen(results, self._shape_warning)
                    break
        except AttributeError:  # not an array where the graph declares a tensor
            self._shapes.seen(results, self._shape_warning)
        return results

    def _shape_warning(self, message: str) -> None:
        """Warn that an output contradicts its declared shape, unless the session is quiet."""
        if self._shows_warnings():
            warnings.warn(f"{self._named()}{message}", OnnxflowWarning, stacklevel=_callers_level())

    @staticmethod
    def _execute_watched(
        plan: Plan, args: list[Any], options: Any, watchers: list[Observer]
    ) -> list[Any]:
        token = set_run_options(options)
        watch = observe(watchers)
        for w in watchers:
            w.run_start()
        try:
            return execute(plan, args)
        finally:
            for w in watchers:
                w.run_end()
            stop_observing(watch)
            reset_run_options(token)

    def _select_outputs(self, output_names: Sequence[str] | None) -> list[int] | None:
        """Indices of the requested outputs; None for all of them, in order."""
        if not output_names:
            return None
        unknown = [n for n in output_names if n not in self._output_index]
        if unknown:
            raise InputError(
                f"unknown output name(s) {unknown}; the model's outputs are "
                f"{list(self.plan.output_names)}"
            )
        return [self._output_index[n] for n in output_names]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by the model: its serialized bytes (external data already read in)."""
        try:
            model = self.model.SerializeToString()
            return (_rebuild, (model, None, self._check, self.options, self._custom_ops))
        except ValueError:  # over protobuf's 2 GiB: ship where to load it from instead
            source = self._source
            if isinstance(source, (str, os.PathLike)):
                source = os.path.abspath(source)
            return (_rebuild, (source, self._base_dir, self._check, self.options, self._custom_ops))


class _MainValues(Observer):
    """Collects every value of the main graph for ``run(..., intermediate=True)``."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.outputs: dict[str, Any] = {}

    def node_end(self, scope, info, inputs, outputs, seconds) -> None:  # type: ignore[no-untyped-def]
        if not scope:
            self.outputs.update((n, v) for n, v in zip(info.outputs, outputs) if n)

    def values(self, args: list[Any]) -> dict[str, Any]:
        plan = self.plan
        found = dict(zip(plan.input_names, args))
        for slot in sorted(plan.constant_slots):
            found.setdefault(plan.slot_names[slot], plan.template[slot])
        found.update(self.outputs)
        return found


def _main_values(graph: onnx.GraphProto) -> dict[str, int]:
    """Every value of the main graph by name, with its declared or inferred element type (0
    when unknown)."""
    found = {o: 0 for n in graph.node for o in n.output if o}
    found.update((t.name, t.data_type) for t in graph.initializer)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        found[vi.name] = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
    return found


def _unread_initializers(
    graph: onnx.GraphProto, found: dict[str, Any], names: Sequence[str] | None
) -> dict[str, Any]:
    """The main graph's initializers that the plan never decoded, as ``intermediate`` runs
    show them: those in ``names`` (all when None) and not in ``found``."""
    wanted = None if names is None else set(names)
    return {
        t.name: tensor_to_array(t)
        for t in graph.initializer
        if t.name not in found and (wanted is None or t.name in wanted)
    }


def _as_declared(values: dict[str, Any], declared: dict[str, int]) -> dict[str, Any]:
    """The main graph's own values, as the model types them: values the compile passes made
    (a float16 value's float32 form) are left out, and a float16 value held in float32 is
    given back in float16 (exactly: it holds float16 values)."""
    shown = {}
    for name, value in values.items():
        if name not in declared:
            continue
        if declared[name] == onnx.TensorProto.FLOAT16 and getattr(value, "dtype", None) == _F32:
            value = value.astype(np.float16)
        shown[name] = value
    return shown


_F32 = np.dtype(np.float32)


def _pick(values: dict[str, Any], names: Sequence[str] | None) -> dict[str, Any]:
    """The values named in ``names`` (all when None or empty); unknown names are an error."""
    if not names:
        return values
    unknown = [n for n in names if n not in values]
    if unknown:
        raise InputError(
            f"unknown value name(s) {unknown}: with intermediate=True, output_names may name any "
            f"value of the main graph, such as {sorted(values)[:10]}"
        )
    return {n: values[n] for n in names}


def _rebuild(
    source: ModelSource,
    base_dir: Any,
    check: bool = True,
    options: SessionOptions | None = None,
    custom_ops: CustomOps | None = None,
) -> InferenceSession:
    return InferenceSession(source, options, base_dir=base_dir, check=check, custom_ops=custom_ops)


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside onnxflow, for a warning to point there."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def run(
    model: ModelSource, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
) -> list[Any]:
    """Load, compile and run a model once; return its outputs in graph order."""
    return InferenceSession(model).run(output_names, feeds)


def _check_run_arguments(
    output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any
) -> None:
    """An InputError when an argument of ``run`` is of the wrong kind."""
    if isinstance(output_names, (str, bytes)):
        raise InputError(
            f"output_names must be a list of names or None, found the string {output_names!r}"
        )
    if input_feed.__class__ is not dict and not isinstance(input_feed, Mapping):
        raise InputError(
            f"input_feed must be a mapping of input names to values, found "
            f"{type(input_feed).__name__}"
        )
    if run_options is not None and not hasattr(run_options, "terminate"):
        raise InputError(f"run_options must be a RunOptions, found {type(run_options).__name__}")


def _verbose() -> Observer:
    """The observer ``verbose=True`` adds (:class:`onnxflow.observers.Verbose`), its module
    loaded only then: a plain ``import onnxflow`` does not need it."""
    from onnxflow.observers import Verbose

    return Verbose()
