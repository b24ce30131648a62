"""Operators given in Python by the user of one session: ``InferenceSession(model,
custom_ops={"com.example.MyOp": fn})``.

A key is ``"domain.OpType"`` (the domain is all before the last dot: ``"com.example.MyOp"``
is ``MyOp`` of ``com.example``) or a bare ``"OpType"``, an operator of the default domain
(``ai.onnx``, as ``onnx.reference``'s ``new_ops`` default to). A value is the function, or a
pair ``(fn, Traits(...))`` declaring what it promises (:class:`~onnxflow.traits.Traits`:
``pure=False`` for a function that must run every time, as a random draw; by default it is
pure, so a node whose inputs are all constants runs once, at load, and one inside a loop that
reads nothing of the iteration runs once before it, like onnxflow's own kernels). Traits that
replace the call (``ufunc``, ``call``, ``in_place``...) are refused: the function is always
what runs.

``fn(*inputs, **attributes)`` is called with the node's inputs (None for an omitted one) and its
attributes as keywords (decoded as onnxflow's kernels get them: ints, floats, strings, lists,
arrays for tensors), and returns one array for a node of one output, else a tuple with one
value per output the node lists. A NumPy or Python scalar becomes a 0-d array; a list is a
sequence value. A value whose element type contradicts the type the model declares for that
output is an error naming the node, the output and both types, and so is a wrong count; an
exception inside ``fn`` is a :class:`~onnxflow.errors.RuntimeFailure` naming the node, the op
and the function.

The operators are served to the session's compiler by a :class:`CustomRegistry` over the one
:data:`~onnxflow.ops.registry.REGISTRY` (which it never changes), so two sessions may give one
operator two functions. An operator onnxflow has a kernel for cannot be given: the compile
passes rewrite such operators by their promises and names, and a function replacing the kernel
would not run where they did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.compile.context import NodeContext
from onnxflow.errors import InputError, OnnxflowError, RuntimeFailure
from onnxflow.ir.domains import normalize_domain
from onnxflow.ir.walk import scope_types, subgraphs
from onnxflow.ops.registry import REGISTRY, Kernel, Registry
from onnxflow.traits import NONE, Built, Traits
from onnxflow.values import np_dtype

#: What a session's ``custom_ops`` maps each operator to: its function, or the function and
#: its traits.
CustomOps = Mapping[str, "Callable[..., Any] | tuple[Callable[..., Any], Traits]"]

#: The traits a function may not declare: each makes generated code call something else.
REFUSED_TRAITS = (
    "ufunc", "widens", "call", "guard", "numpy", "in_place", "passthrough", "several",
    "stateful", "pointwise", "native",
)  # fmt: skip


@dataclass(frozen=True)
class CustomOp:
    """One operator of ``custom_ops``: its key as given, where it lives, and what runs it."""

    key: str
    domain: str
    op_type: str
    fn: Callable[..., Any]
    traits: Traits = NONE

    @property
    def label(self) -> str:
        """How reports name the function: ``module.qualname``."""
        return function_name(self.fn)


def function_name(fn: Any) -> str:
    """``module.qualname`` of a function (its class's for another callable)."""
    return ".".join(_named_as(fn))


def parse_custom_ops(given: CustomOps | None) -> dict[tuple[str, str], CustomOp]:
    """The operators of ``custom_ops`` by ``(domain, op_type)``; an :class:`InputError` naming
    the key when one is malformed, its function is not callable, it declares a refused trait,
    or onnxflow has a kernel for the operator."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise InputError(f"custom_ops must be a dict of 'domain.OpType' -> function, found "
                         f"{type(given).__name__}")  # fmt: skip
    found: dict[tuple[str, str], CustomOp] = {}
    for key, value in given.items():
        op = _custom_op(key, value)
        if (op.domain, op.op_type) in found:
            raise InputError(f"custom_ops names {op.op_type} of {op.domain or 'ai.onnx'!r} twice "
                             f"({found[op.domain, op.op_type].key!r} and {key!r})")  # fmt: skip
        found[op.domain, op.op_type] = op
    return found


def _custom_op(key: Any, value: Any) -> CustomOp:
    """One entry of ``custom_ops``, checked."""
    if not isinstance(key, str) or not key.rpartition(".")[2]:
        raise InputError(f"custom_ops: a key is 'domain.OpType' or 'OpType', found {key!r}")
    domain, _, op_type = key.rpartition(".")
    domain = normalize_domain(domain)
    fn, traits = value if isinstance(value, tuple) and len(value) == 2 else (value, NONE)
    if not callable(fn):
        raise InputError(f"custom_ops[{key!r}] must be a function or (function, Traits), found "
                         f"{type(value).__name__}")  # fmt: skip
    if not isinstance(traits, Traits):
        raise InputError(f"custom_ops[{key!r}]: the second item must be an onnxflow.traits."
                         f"Traits, found {type(traits).__name__}")  # fmt: skip
    refused = [f for f in REFUSED_TRAITS if getattr(traits, f) != getattr(NONE, f)]
    if refused:
        raise InputError(f"custom_ops[{key!r}] declares {', '.join(refused)}: traits that make "
                         "generated code call something other than the function")  # fmt: skip
    if REGISTRY.has_op(domain, op_type):
        raise InputError(
            f"custom_ops[{key!r}]: onnxflow has a kernel for {op_type} of "
            f"{domain or 'ai.onnx'!r}; custom_ops gives operators onnxflow lacks"
        )
    return CustomOp(key, domain, op_type, fn, traits)


class CustomRegistry(Registry):
    """:data:`~onnxflow.ops.registry.REGISTRY` with one session's operators added: what the
    session's compiler and passes look kernels up in. The base registry is not changed."""

    def __init__(self, ops: Mapping[tuple[str, str], CustomOp], base: Registry = REGISTRY):
        super().__init__()
        self.base = base
        self.ops = dict(ops)
        #: The element type of every tensor of the model as written (:meth:`declare`).
        self.declared: dict[str, np.dtype | None] = {}
        self._custom = {
            key: Kernel(op.domain, op.op_type, 1, _builder(op, self.declared), True, op.traits)
            for key, op in self.ops.items()
        }

    def declare(self, graph: GraphProto) -> None:
        """Record the element types ``graph`` (the main graph, shape-inferred, before any pass
        rewrites it) gives its tensors, subgraphs included: what a user's function's results
        are checked against. A pass may change a graph's types (float16 held in float32): the
        model's own are the ones a user wrote a function for. Names are unique across a model's
        scopes, so one table serves them all."""
        for name, tp in scope_types(graph).items():
            if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
                self.declared[name] = _dtype_of(tp.tensor_type.elem_type)
        for node in graph.node:
            for body in subgraphs(node):
                self.declare(body)

    def lookup(self, domain: str, op_type: str, opset: int) -> Kernel | None:
        """The user's kernel for the operator, at any opset; else the base registry's."""
        kernel = self._custom.get((normalize_domain(domain), op_type))
        return kernel if kernel is not None else self.base.lookup(domain, op_type, opset)

    def versions(self, domain: str, op_type: str) -> list[int]:
        """The base registry's versions, or ``[1]`` for a user's operator."""
        if (normalize_domain(domain), op_type) in self._custom:
            return [1]
        return self.base.versions(domain, op_type)

    def has_op(self, domain: str, op_type: str) -> bool:
        """Whether the user or the base registry serves the operator."""
        return (normalize_domain(domain), op_type) in self._custom or self.base.has_op(
            domain, op_type
        )

    def registered(self) -> list[Kernel]:
        """The base registry's kernels registered so far, then the user's."""
        return [*self.base.registered(), *self._custom.values()]

    def all(self) -> list[Kernel]:
        """Every kernel of the base registry, then the user's."""
        return [*self.base.all(), *self._custom.values()]


def registry_for(given: CustomOps | None) -> Registry:
    """The registry a session with ``custom_ops`` compiles with (the one registry when none)."""
    ops = parse_custom_ops(given)
    return CustomRegistry(ops) if ops else REGISTRY


def _builder(op: CustomOp, declared: Mapping[str, np.dtype | None]) -> Callable[..., Any]:
    """The builder kernel of ``op``: for each node, a step calling the function with the
    node's attributes and checking what it returns."""

    def build(ctx: NodeContext, **attributes: Any) -> Built:
        check = _Outputs(ctx, op, declared)
        fn = op.fn

        def step(*inputs: Any) -> Any:
            try:
                result = fn(*inputs, **attributes)
            except OnnxflowError:
                raise
            except Exception as exc:
                raise check.failed(exc) from exc
            return check(result)

        step.__module__, step.__qualname__ = _named_as(fn)  # what `onnxflow code` shows
        step.__wrapped__ = fn  # type: ignore[attr-defined]
        return Built(step, op.traits)

    build.__qualname__ = f"custom_op[{op.key}]"
    return build


def _named_as(fn: Any) -> tuple[str, str]:
    """The module and qualified name that name ``fn`` (a callable object: its class's)."""
    inner = getattr(fn, "func", fn)
    name = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return getattr(inner, "__module__", None) or "?", name


class _Outputs:
    """Checks a custom function's result against its node: how many values, and the element
    type the model declares for each output (when it declares one)."""

    def __init__(
        self, ctx: NodeContext, op: CustomOp, declared: Mapping[str, np.dtype | None]
    ) -> None:
        self.where = f"{ctx.describe()}, given by custom_ops[{op.key!r}]"
        self.names = ctx.outputs or ("",)
        self.dtypes = tuple(declared.get(n) if n else None for n in self.names)
        self.label = op.label

    def failed(self, exc: Exception) -> RuntimeFailure:
        """The error saying the function raised ``exc``."""
        return RuntimeFailure(
            f"{self.where}: the function {self.label} raised {type(exc).__name__}: {exc}"
        )

    def __call__(self, result: Any) -> Any:
        n = len(self.names)
        values = result if isinstance(result, tuple) else (result,)
        if len(values) != n:
            found = f"a tuple of {len(values)}" if isinstance(result, tuple) else "one value"
            raise RuntimeFailure(f"{self.where}: the function returned {found}; the node lists "
                                 f"{n} output(s) {list(self.names)}")  # fmt: skip
        values = tuple(self._value(k, v) for k, v in enumerate(values))
        return values[0] if n == 1 else values

    def _value(self, k: int, value: Any) -> Any:
        if isinstance(value, (np.generic, int, float, bool, complex)):
            value = np.asarray(value)
        want = self.dtypes[k]
        if want is not None and isinstance(value, np.ndarray) and value.dtype != want:
            raise RuntimeFailure(
                f"{self.where}: output {k} {self.names[k]!r} is declared {want}, the function "
                f"returned {value.dtype} (shape {value.shape})"
            )
        return value


def _dtype_of(elem_type: int) -> np.dtype | None:
    """The dtype of an ONNX element type (None: one NumPy has no dtype for, not checked)."""
    try:
        return np.dtype(np_dtype(elem_type))
    except Exception:  # an element type NumPy has no dtype for: not checked
        return None


__all__ = [
    "CustomOp",
    "CustomOps",
    "CustomRegistry",
    "function_name",
    "parse_custom_ops",
    "registry_for",
]
