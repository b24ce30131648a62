"""The public session: load → validate → compile once, then run many times."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import GraphProto, ModelProto, TypeProto

from onnxflow.compile.compiler import Compiler
from onnxflow.compile.plan import Plan
from onnxflow.errors import InputError, OnnxflowError, ValidationError
from onnxflow.ir.load import ModelSource, load_model
from onnxflow.ir.validate import opset_map, validate_model
from onnxflow.observers import Verbose
from onnxflow.ops import load_all
from onnxflow.ops.registry import normalize_domain
from onnxflow.options import SessionOptions
from onnxflow.runtime.context import current_run_options, reset_run_options, set_run_options
from onnxflow.runtime.executor import execute, runner, sources
from onnxflow.runtime.memory import keep_freed_memory
from onnxflow.runtime.observe import Observer, current_observation, observe, stop_observing
from onnxflow.values import NodeArg, np_dtype, type_shape, type_str, value_type_str


class RunOptions:
    """Per-run options. Setting ``terminate = True`` (from any thread) cancels a run."""

    def __init__(self) -> None:
        self.terminate = False
        self.log_severity_level = 2
        self.run_tag = ""


class InferenceSession:
    """A compiled ONNX model, ready to run many times; mirrors onnxruntime's InferenceSession.

    ``model`` is a file path, serialized bytes, or an ``onnx.ModelProto``. ``base_dir`` is where
    external data lives when the model is not given as a path.
    """

    def __init__(
        self,
        model: ModelSource,
        sess_options: SessionOptions | None = None,
        providers: Sequence[str] | None = None,
        *,
        base_dir: str | os.PathLike | None = None,
        check: bool = True,
    ) -> None:
        load_all()
        keep_freed_memory()  # once per process: see onnxflow.runtime.memory
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise InputError(
                "sess_options must be an onnxflow.SessionOptions, found "
                f"{type(sess_options).__name__}"
            )
        self.options = sess_options or SessionOptions()
        self._source = model
        self._base_dir = base_dir
        self._check = check
        self.model: ModelProto = load_model(model, base_dir)
        validate_model(self.model, run_checker=check)
        try:
            self._compile()
        except OnnxflowError:
            raise
        except Exception as exc:  # a model that passed validation but trips the compiler
            raise ValidationError(
                f"the model could not be compiled: {type(exc).__name__}: {exc}"
            ) from exc

    def _compile(self) -> None:
        graph = self.model.graph
        initialized = {t.name for t in graph.initializer}
        self._inputs = [NodeArg.from_value_info(vi) for vi in graph.input]
        self._feedable = [a for a in self._inputs if a.name not in initialized]
        self._outputs = [NodeArg.from_value_info(vi) for vi in graph.output]
        types = _inferred_types(self.model)
        self.plan: Plan = self._compiler(types).compile_main(graph, self._opsets())
        # Old models list their initializers as graph inputs, so a feed may override them. Runs
        # that do not use a plan in which they, and what they feed, are constants.
        self._default_plan: Plan | None = None
        #: Per plan, the function running it when nothing observes the run (made on first use).
        self._quick: dict[Plan, Any] = {}
        if self.options.optimize and initialized & {a.name for a in self._inputs}:
            self._default_plan = self._compiler(types).compile_main(
                graph, self._opsets(), fixed_initializers=True
            )
        # the compiler made every stored constant read-only; outputs sharing them are copied
        templates = [*self.plan.template, *(self._default_plan or self.plan).template]
        self._constant_roots = _roots(templates)
        self._output_index = {name: i for i, name in enumerate(self.plan.output_names)}
        self._input_names = frozenset(a.name for a in self._inputs)
        self._fast_checks = [_fast_check(a) for a in self._inputs]
        # (name, check) per input when every input has a fast check; else nothing to try
        pairs = [(a.name, f) for a, f in zip(self._inputs, self._fast_checks)]
        self._fast_pairs = pairs if all(f is not None for _, f in pairs) else []
        self._defaults = {
            name: self.plan.template[slot]
            for name, slot in zip(self.plan.input_names, self.plan.arg_slots)
            if name in initialized
        }

    def _compiler(self, types: dict[str, TypeProto]) -> Compiler:
        return Compiler(
            functions={(normalize_domain(f.domain), f.name): f for f in self.model.functions},
            value_types=types,
            optimize=self.options.optimize,
            loop_condition=self.options.loop_condition,
        )

    def _opsets(self) -> dict[str, int]:
        return opset_map(self.model.opset_import)

    # -- onnxruntime-compatible metadata -------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The inputs a caller feeds (graph inputs that have no initializer)."""
        return list(self._feedable)

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs, in order."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: feeding them overrides the stored value."""
        return [a for a in self._inputs if a.name in self._defaults]

    def source(self) -> str:
        """The Python the plan runs: the main graph's generated function, then each subgraph's
        (loop bodies, branches), each under a comment saying where it sits. A loop appears
        also as the whole-loop function its runs generated, so run the model once first to
        see those."""
        return "\n\n".join(f"# {where}\n{text}" for where, text in sources(self.plan))

    def get_modelmeta(self) -> dict[str, Any]:
        """Producer, domain, version and metadata properties of the model."""
        m = self.model
        return {
            "producer_name": m.producer_name,
            "graph_name": m.graph.name,
            "domain": m.domain,
            "version": m.model_version,
            "custom_metadata_map": {p.key: p.value for p in m.metadata_props},
        }

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
            and self._default_plan is None
        ):
            results = self._execute(self.plan, self._bind_feeds(input_feed), None, [])
            return results if _all_fresh(results) else self._detached(results, input_feed)
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
            raise InputError(
                f"run_options must be a RunOptions, found {type(run_options).__name__}"
            )
        indices = [] if intermediate else self._select_outputs(output_names)
        args = self._bind_feeds(input_feed)
        watchers = [*observers, Verbose()] if verbose else list(observers)
        plan = self.plan
        if self._default_plan is not None and not any(n in input_feed for n in self._defaults):
            plan = self._default_plan
        collector = _MainValues(plan) if intermediate else None
        results = self._execute(plan, args, run_options, watchers + [collector] * bool(collector))
        if collector is not None:
            values = _pick(collector.values(args), output_names)
            picked = list(values.values())
        else:
            picked = results if indices is None else [results[i] for i in indices]
        # made by this run's kernels, each once: nothing to copy
        detached = picked if _all_fresh(picked) else self._detached(picked, input_feed)
        return dict(zip(values, detached)) if collector is not None else detached

    def _detached(self, values: list[Any], feeds: Mapping[str, Any]) -> list[Any]:
        """``values`` with a copy of each that shares memory with a feed, a stored constant or
        an earlier one of them."""
        protected = _roots(feeds.values()) | self._constant_roots
        returned: set[int] = set()
        return [_detach(v, protected, returned) for v in values]

    def _execute(
        self, plan: Plan, args: list[Any], options: Any, watchers: list[Observer]
    ) -> list[Any]:
        quiet = current_run_options() is None and current_observation() is None
        if quiet and not watchers and options is None:  # nothing to set up: the common case
            quick = self._quick.get(plan)
            if quick is None:
                quick = self._quick[plan] = runner(plan)
            return quick(args)
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

    def _bind_feeds(self, feeds: Mapping[str, Any]) -> list[Any]:
        if self._fast_pairs and feeds.__class__ is dict and len(feeds) == len(self._fast_pairs):
            args = self._bind_arrays(feeds)
            if args is not None:
                return args
        known = self._input_names
        if not feeds.keys() <= known:
            unknown = [n for n in feeds if n not in known]
            raise InputError(
                f"unknown input name(s) {unknown}; the model's inputs are "
                f"{[a.name for a in self._feedable]}"
            )
        dims: dict[str, tuple[str, int]] = {}
        args = []
        for arg, fast in zip(self._inputs, self._fast_checks):
            value = feeds.get(arg.name, _MISSING)
            if fast is not None and value.__class__ is np.ndarray and fast(value, dims):
                args.append(_read_only(value))
            elif value is not _MISSING:
                args.append(_read_only(_check_feed(arg, value, dims)))
            elif arg.name in self._defaults:
                args.append(self._defaults[arg.name])
            elif arg.type.startswith("optional("):
                args.append(None)
            else:
                raise InputError(
                    f"input {arg.name!r} ({arg.type}, shape {arg.shape}) is required but was "
                    f"not fed; fed: {sorted(feeds)}"
                )
        return args

    def _bind_arrays(self, feeds: dict[str, Any]) -> list[Any] | None:
        """The common case of :meth:`_bind_feeds` in one pass: every input fed an array that its
        fast check passes. None when one is not (the general path then says what is wrong)."""
        dims: dict[str, tuple[str, int]] = {}
        args = []
        for name, fast in self._fast_pairs:
            value = feeds.get(name)
            if value.__class__ is not np.ndarray or not fast(value, dims):
                return None
            args.append(_read_only(value))
        return args

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by the model: its serialized bytes (external data already read in)."""
        try:
            return (_rebuild, (self.model.SerializeToString(), None, self._check, self.options))
        except ValueError:  # over protobuf's 2 GiB: ship where to load it from instead
            source = self._source
            if isinstance(source, (str, os.PathLike)):
                source = os.path.abspath(source)
            return (_rebuild, (source, self._base_dir, self._check, self.options))


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
    source: ModelSource, base_dir: Any, check: bool = True, options: SessionOptions | None = None
) -> InferenceSession:
    return InferenceSession(source, options, base_dir=base_dir, check=check)


def run(
    model: ModelSource, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
) -> list[Any]:
    """Load, compile and run a model once; return its outputs in graph order."""
    return InferenceSession(model).run(output_names, feeds)


_MISSING = object()


def _fast_check(arg: NodeArg) -> Any:
    """A test ``fast(array, dims)`` that passes an array fed for ``arg`` without the general
    checks, or None.

    Only for tensors of a known dtype: the array passes when its dtype is the very dtype object
    expected (NumPy's builtin dtypes are singletons), its rank is right, every fixed dimension
    matches, and every symbolic dimension agrees with ``dims``, where it is then recorded as the
    general check does. When the test fails, the general check says what is wrong.
    """
    tp = arg.type_proto
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type:
        return None
    dtype = np_dtype(tp.tensor_type.elem_type)
    if arg.shape is None:
        return lambda v, dims: v.dtype is dtype
    rank = len(arg.shape)
    fixed = [(axis, d) for axis, d in enumerate(arg.shape) if isinstance(d, int) and d > 0]
    symbols = [(axis, d) for axis, d in enumerate(arg.shape) if isinstance(d, str) and d]
    if not symbols:
        if len(fixed) == rank:
            shape = tuple(d for _, d in fixed)
            return lambda v, dims: v.dtype is dtype and v.shape == shape
        return lambda v, dims: (
            v.dtype is dtype and v.ndim == rank and all(v.shape[a] == d for a, d in fixed)
        )
    name = arg.name

    def fast(v: np.ndarray, dims: dict[str, tuple[str, int]]) -> bool:
        shape = v.shape
        if v.dtype is not dtype or len(shape) != rank:
            return False
        for axis, d in fixed:
            if shape[axis] != d:
                return False
        for axis, symbol in symbols:  # one at a time: a symbol may repeat within the input
            seen = dims.get(symbol)
            if seen is not None and seen[1] != shape[axis]:
                return False
            dims[symbol] = (name, shape[axis])
        return True

    return fast


def _check_feed(arg: NodeArg, value: Any, dims: dict[str, tuple[str, int]]) -> Any:
    tp = arg.type_proto
    kind = tp.WhichOneof("value") if tp is not None else None
    if kind == "optional_type":
        if value is None:
            return None
        inner = tp.optional_type.elem_type  # type: ignore[union-attr]
        return _check_feed(
            NodeArg(arg.name, type_str(inner), type_shape(inner), inner), value, dims
        )
    if kind == "sequence_type":
        if not isinstance(value, (list, tuple)):
            raise InputError(
                f"input {arg.name!r}: expected {arg.type} as a list, found {_describe(value)}"
            )
        return list(value)
    if kind == "map_type":
        if not isinstance(value, Mapping):
            raise InputError(
                f"input {arg.name!r}: expected {arg.type} as a dict, found {_describe(value)}"
            )
        return value
    if kind != "tensor_type":
        return value
    elem = tp.tensor_type.elem_type  # type: ignore[union-attr]
    expected = np_dtype(elem) if elem else None
    if not isinstance(value, np.ndarray):
        value = _to_array(arg, value, expected)
    if expected is not None and value.dtype != expected:
        if expected == np.dtype(object) and value.dtype.kind == "U":
            value = value.astype(object)
        else:
            raise InputError(
                f"input {arg.name!r}: expected dtype {arg.type}, found {value_type_str(value)} "
                f"(numpy {value.dtype})"
            )
    if arg.shape is not None:
        _check_shape(arg, value.shape, dims)
    return value


def _describe(value: Any) -> str:
    return value_type_str(value) if value is not None else "None"


#: Python scalars and lists may be fed for a tensor input; their values must fit its dtype.
_CONVERTIBLE_KINDS = {"b": "b", "i": "iuf", "u": "iuf", "f": "f"}


def _to_array(arg: NodeArg, value: Any, expected: np.dtype | None) -> np.ndarray:
    """Make an array of a feed given as a Python scalar, list or tuple, refusing lossy casts."""
    if not isinstance(value, (list, tuple, int, float, bool, str, np.generic)):
        raise InputError(
            f"input {arg.name!r}: expected {arg.type} as a numpy array, found {_describe(value)}"
        )
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"input {arg.name!r}: cannot make an array of the given {type(value).__name__}: {exc}"
        ) from exc
    if expected is None or arr.dtype == expected:
        return arr
    if expected == np.dtype(object) and (arr.dtype.kind == "U" or arr.size == 0):
        return arr.astype(object)
    if arr.size == 0 and arr.dtype == np.float64:  # an empty list has no element type
        return arr.astype(expected)
    if expected.kind in _CONVERTIBLE_KINDS.get(arr.dtype.kind, ""):
        converted = arr.astype(expected)
        if np.array_equal(converted.astype(arr.dtype), arr) or expected.kind == "f":
            return converted
    raise InputError(
        f"input {arg.name!r}: expected dtype {arg.type}, found {type(value).__name__} of "
        f"numpy {arr.dtype} values that do not convert exactly"
    )


def _check_shape(arg: NodeArg, shape: tuple[int, ...], dims: dict[str, tuple[str, int]]) -> None:
    assert arg.shape is not None
    if len(shape) != len(arg.shape):
        raise InputError(
            f"input {arg.name!r}: expected rank {len(arg.shape)} (shape {arg.shape}), found "
            f"rank {len(shape)} (shape {list(shape)})"
        )
    for axis, (want, got) in enumerate(zip(arg.shape, shape)):
        if isinstance(want, int) and want > 0 and want != got:
            raise InputError(
                f"input {arg.name!r}: dimension {axis} expected {want}, found {got} "
                f"(shape {list(shape)}, declared {arg.shape})"
            )
        if isinstance(want, str) and want:
            seen = dims.get(want)
            if seen is not None and seen[1] != got:
                raise InputError(
                    f"input {arg.name!r}: dimension {axis} is {want!r}={got}, but input "
                    f"{seen[0]!r} bound {want!r}={seen[1]}"
                )
            dims[want] = (arg.name, got)


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _roots(values: Any) -> set[int]:
    """Ids of the arrays owning the memory of every array in ``values`` (nested lists too)."""
    ids: set[int] = set()
    for v in values:
        if isinstance(v, np.ndarray):
            ids.add(id(_root(v)))
        elif isinstance(v, (list, tuple)):
            ids |= _roots(v)
        elif isinstance(v, dict):
            ids |= _roots(v.values())
    return ids


def _read_only(value: Any) -> Any:
    """A read-only view of a feed (nested in lists and dicts too): kernels cannot write it."""
    if isinstance(value, np.ndarray):
        view = value.view()
        view.setflags(write=False)  # 0.1 us less than setting flags.writeable
        return view
    if isinstance(value, list):
        return [_read_only(v) for v in value]
    if isinstance(value, dict):
        return {k: _read_only(v) for k, v in value.items()}
    return value


def _all_fresh(values: list[Any]) -> bool:
    """Whether every value is an array owning writable memory, and no two are the same array.

    Such an array was made by a kernel of this run: feeds reach kernels as read-only views and
    constants are read-only. Returned once, it may be handed out as it is.
    """
    for v in values:
        if v.__class__ is not np.ndarray or v.base is not None or not v.flags.writeable:
            return False
    if len(values) < 3:  # no set for the usual one or two outputs
        return len(values) < 2 or values[0] is not values[1]
    return len({id(v) for v in values}) == len(values)


def _detach(value: Any, protected: set[int], returned: set[int]) -> Any:
    """Copy an output whose memory a caller must not share.

    That is memory of a feed or a stored constant (``protected``), read-only memory (constants
    of subgraphs and kernels, which later runs reuse; views of feeds) and memory already
    returned by this run.
    """
    if isinstance(value, np.ndarray):
        root = _root(value)
        if (
            id(root) in protected
            or id(root) in returned
            or not value.flags.writeable
            or not root.flags.writeable
        ):
            value = value.copy()
            root = value
        returned.add(id(root))
        return value
    if isinstance(value, list):
        return [_detach(v, protected, returned) for v in value]
    if isinstance(value, dict):
        return {k: _detach(v, protected, returned) for k, v in value.items()}
    return value


def _inferred_types(model: ModelProto) -> dict[str, TypeProto]:
    """Types of every value shape inference can tell, across all graphs of the model."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference is an aid only: a model it cannot handle still runs
        inferred = model
    types: dict[str, TypeProto] = {}

    def visit(g: GraphProto) -> None:
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value"):
                types.setdefault(vi.name, vi.type)
        for t in g.initializer:
            tp = TypeProto()
            tp.tensor_type.elem_type = t.data_type
            for d in t.dims:
                tp.tensor_type.shape.dim.add().dim_value = d
            types.setdefault(t.name, tp)
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g)
                for sub in a.graphs:
                    visit(sub)

    visit(inferred.graph)
    return types
