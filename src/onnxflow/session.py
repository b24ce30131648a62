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
from onnxflow.errors import InputError
from onnxflow.ir.load import ModelSource, load_model
from onnxflow.ir.validate import opset_map, validate_model
from onnxflow.ops import load_all
from onnxflow.ops.registry import normalize_domain
from onnxflow.runtime.context import reset_run_options, set_run_options
from onnxflow.values import NodeArg, np_dtype, value_type_str


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
        sess_options: Any = None,
        providers: Sequence[str] | None = None,
        *,
        base_dir: str | os.PathLike | None = None,
        check: bool = True,
    ) -> None:
        load_all()
        self._source = model
        self._base_dir = base_dir
        self.model: ModelProto = load_model(model, base_dir)
        validate_model(self.model, run_checker=check)
        graph = self.model.graph
        initialized = {t.name for t in graph.initializer}
        self._inputs = [NodeArg.from_value_info(vi) for vi in graph.input]
        self._feedable = [a for a in self._inputs if a.name not in initialized]
        self._outputs = [NodeArg.from_value_info(vi) for vi in graph.output]
        compiler = Compiler(
            functions={(normalize_domain(f.domain), f.name): f for f in self.model.functions},
            value_types=_inferred_types(self.model),
        )
        self.plan: Plan = compiler.compile_main(graph, opset_map(self.model.opset_import))
        self._output_index = {name: i for i, name in enumerate(self.plan.output_names)}
        self._defaults = {
            name: self.plan.template[slot]
            for name, slot in zip(self.plan.input_names, self.plan.arg_slots)
            if name in initialized
        }

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
    ) -> list[Any]:
        """Run the model on ``input_feed``; return the requested outputs (all when None)."""
        indices = self._select_outputs(output_names)
        args = self._bind_feeds(input_feed)
        token = set_run_options(run_options)
        try:
            results = self.plan.run(args)
        finally:
            reset_run_options(token)
        protected = _roots(input_feed.values(), self.plan.template)
        return [_detach(results[i], protected) for i in indices]

    def _select_outputs(self, output_names: Sequence[str] | None) -> list[int]:
        if not output_names:
            return list(range(len(self.plan.output_names)))
        unknown = [n for n in output_names if n not in self._output_index]
        if unknown:
            raise InputError(
                f"unknown output name(s) {unknown}; the model's outputs are "
                f"{list(self.plan.output_names)}"
            )
        return [self._output_index[n] for n in output_names]

    def _bind_feeds(self, feeds: Mapping[str, Any]) -> list[Any]:
        known = {a.name for a in self._inputs}
        unknown = [n for n in feeds if n not in known]
        if unknown:
            raise InputError(
                f"unknown input name(s) {unknown}; the model's inputs are "
                f"{[a.name for a in self._feedable]}"
            )
        dims: dict[str, tuple[str, int]] = {}
        args = []
        for arg in self._inputs:
            if arg.name in feeds:
                args.append(_check_feed(arg, feeds[arg.name], dims))
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

    def __reduce__(self) -> tuple[Any, ...]:
        source = self._source
        if not isinstance(source, (bytes, str, os.PathLike)):
            source = self.model.SerializeToString()
        return (_rebuild, (source, self._base_dir))


def _rebuild(source: ModelSource, base_dir: Any) -> InferenceSession:
    return InferenceSession(source, base_dir=base_dir)


def run(
    model: ModelSource, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
) -> list[Any]:
    """Load, compile and run a model once; return its outputs in graph order."""
    return InferenceSession(model).run(output_names, feeds)


def _check_feed(arg: NodeArg, value: Any, dims: dict[str, tuple[str, int]]) -> Any:
    tp = arg.type_proto
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return value
    elem = tp.tensor_type.elem_type
    expected = np_dtype(elem) if elem else None
    if not isinstance(value, np.ndarray):
        if isinstance(value, (list, tuple, int, float, bool, str, np.generic)):
            value = np.asarray(value, dtype=expected)
        else:
            raise InputError(
                f"input {arg.name!r}: expected {arg.type} as a numpy array, found "
                f"{value_type_str(value) if value is not None else 'None'}"
            )
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


def _roots(*groups: Any) -> set[int]:
    ids: set[int] = set()
    for group in groups:
        for v in group:
            if isinstance(v, np.ndarray):
                ids.add(id(_root(v)))
            elif isinstance(v, list):
                ids |= _roots(v)
    return ids


def _detach(value: Any, protected: set[int]) -> Any:
    """Copy an output that shares memory with a feed or a stored constant."""
    if isinstance(value, np.ndarray):
        return value.copy() if id(_root(value)) in protected else value
    if isinstance(value, list):
        return [_detach(v, protected) for v in value]
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
