"""What a kernel promises: one typed record, given where the kernel is registered.

The code generator (:mod:`onnxflow.runtime.codegen`), the loop generator and the compile passes
read these promises instead of probing kernel functions or lists of op names. A non-builder kernel's
traits are those of its registration, with its attributes bound into :attr:`Traits.in_place`
and into the forms :attr:`Traits.stateful` makes; a builder kernel may return a :class:`Built`
whose traits refine its registration's for one node (Add takes its widening form when the
node's operands broadcast).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

#: The output rank of a row-independent kernel given input 0's rank per row and the other
#: inputs' ranks; None when the kernel is not row-independent for those ranks.
RowRank = Callable[[int, tuple[int, ...]], "int | None"]


@dataclass(frozen=True)
class Traits:
    """The promises of one kernel. Every field defaults to "promises nothing"."""

    #: The kernel is exactly ``ufunc(*inputs, out=...)``: generated code calls the ufunc.
    ufunc: np.ufunc | None = None
    #: With :attr:`ufunc` (binary): the kernel's own form keeps a broadcast operand widened (for
    #: results of at most :data:`WIDEN_LIMIT` elements), so generated code calls the kernel, or
    #: in a loop keeps an operand fixed for the whole loop widened itself.
    widens: bool = False
    #: The kernel is ``call(*inputs)`` whenever ``guard`` (a format string over the inputs'
    #: expressions ``{0}``, ``{1}``...) holds: MatMul is ``np.dot`` for two matrices.
    call: Callable[..., Any] | None = None
    guard: str | None = None
    #: The kernel's result written as plain NumPy, for code a person reads (``onnxflow
    #: export-python``): a format string over the inputs' expressions, e.g. Relu's
    #: ``"np.maximum({0}, 0)"`` (for a node with no attributes), or a function of the node
    #: (:class:`NumpyCall`) giving the expression, None when it has none for that node. It may
    #: call the functions of :mod:`onnxflow.ops.numpy_forms`, which the exporter copies into
    #: the module. Same values and dtype, a 0-d result possibly as a NumPy scalar.
    numpy: str | Callable[[NumpyCall], str | None] | None = None
    #: The result is a new array that nothing else refers to (no view, no kept operand), or
    #: a new list of new dicts of Python scalars (ZipMap's rows): a run hands it out as it is.
    fresh: bool = False
    #: A kernel computing the same result over input 0's array, for when that array dies here.
    in_place: Callable[..., Any] | None = None
    #: The class, shape and dtype of the outputs follow from the inputs' (True), or also from
    #: the values of the inputs at the positions listed (a ReduceSum's ``axes`` input).
    static_shape: bool | tuple[int, ...] = False
    #: Each output element depends only on the inputs' elements at the same (broadcast) index.
    elementwise: bool = False
    #: Input 0 may be a stack of rows computed at once (the others fixed): see :data:`RowRank`.
    rows: RowRank | None = None
    #: The same inputs always give the same outputs (False: random draws).
    pure: bool = True
    #: The kernel returns its only input unchanged: the plan passes the value on, no call.
    passthrough: bool = False
    #: Every output element equals an element of the inputs: the kernel moves, picks or
    #: compares values but computes none (Reshape, Gather, Max, Relu), so it keeps them within
    #: any set of values the inputs hold (float16 values in float32: :mod:`.compile.passes.half`).
    selects: bool = False
    #: The output follows from input 0's shape alone, never from its values (Shape, Size): it
    #: is known once the shapes are, so the arithmetic on it can be memoised per set of shapes
    #: (:mod:`.compile.passes.memo_shapes` starts its groups at such nodes).
    from_shape: bool = False
    #: Float16 inputs are computed in float32 and the result rounded once, so float32 inputs
    #: holding float16 values give the same result before rounding (Conv, MatMul, Gemm).
    rounds_once: bool = False
    #: The kernel returns a tuple of all its outputs, though no onnx schema says the operator
    #: has several (com.microsoft ops): a node listing fewer takes the first ones.
    several: bool = False
    #: Makes a form of the kernel that keeps a memo between calls (an operand it has widened
    #: or transposed). The plan holds the stateless kernel; each generated function makes its
    #: own stateful form, so run state lives with the runner, never in the immutable plan.
    stateful: Callable[[], Callable[..., Any]] | None = None
    #: The kernel on float32 inputs with no attributes is this instruction of a compiled
    #: pointwise region (``onnxflow.native._pointwise.OPCODES``): same values, computed as its
    #: own kernel computes them, so :mod:`.compile.passes.pointwise` may run a chain of such
    #: nodes in one pass over memory.
    pointwise: str | None = None
    #: The kernel's compiled form (:mod:`onnxflow.native`), which the compiler binds instead of
    #: the kernel unless ``SessionOptions(kernels="numpy")``: same signature and same results
    #: (bit for bit, or within the bound its test states). None when the kernel has none or
    #: its compiled module was not built.
    native: Native | None = None

    def replace(self, **changes: Any) -> Traits:
        """These traits with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @property
    def steady(self) -> bool | tuple[int, ...]:
        """:attr:`static_shape`, implied by the forms whose output signature follows from the
        inputs' (a ufunc, a passthrough)."""
        if self.passthrough or self.ufunc is not None:
            return True
        return self.static_shape


class NumpyCall(NamedTuple):
    """What a kernel's NumPy form (:attr:`Traits.numpy`) is written from, for one node."""

    #: The inputs' expressions, ``"None"`` for an omitted optional input.
    ins: list[str]
    #: The node's attributes, decoded (a tensor as an array).
    attrs: dict[str, Any]
    #: The attributes as Python source (a tensor as an expression reading it).
    src: dict[str, str]
    #: The since version of the kernel the node resolves to.
    since: int
    #: How many outputs the node lists: a form for one output gives None for more, a form
    #: for several gives a tuple of that many.
    outputs: int = 1

    def arg(self, name: str, default: Any) -> str:
        """The source of attribute ``name``, or of ``default`` (repr) when the node has none."""
        return self.src[name] if name in self.src else repr(default)


@dataclass(frozen=True)
class Native:
    """A kernel's compiled form, declared where the kernel is registered.

    ``fn`` takes what the kernel takes (a builder's: the node context and attributes) and gives
    what it gives; ``in_place`` is its form over input 0's array when that array dies at the
    node (None: the compiled form has none, the NumPy form's is not used either);
    ``stateful`` makes its form that keeps a memo between calls, as :attr:`Traits.stateful`
    (None: none, the NumPy form's is not used either). Every other trait of the kernel holds
    for it too.

    ``prepare`` (plain kernels) makes, once at compile time, ``fn`` specialized for one node:
    ``prepare(constants, **attributes)`` gets the node's inputs that are constants of its graph
    (``constants[i]`` input ``i``'s value, None when it is fed at run time or omitted) and
    returns a function taking what ``fn`` takes (it may ignore the constant inputs, whose
    values it has read), or None to leave the node on ``fn``. What it makes is the node's for
    the plan's life: it holds no state between calls.
    """

    fn: Callable[..., Any]
    in_place: Callable[..., Any] | None = None
    stateful: Callable[[], Callable[..., Any]] | None = None
    prepare: Callable[..., Callable[..., Any] | None] | None = None


def native_form(
    fn: Callable[..., Any] | None,
    in_place: Callable[..., Any] | None = None,
    stateful: Callable[[], Callable[..., Any]] | None = None,
    prepare: Callable[..., Callable[..., Any] | None] | None = None,
) -> Native | None:
    """``Native(fn, in_place, stateful, prepare)``, or None when ``fn`` is None (its compiled
    module not built)."""
    return None if fn is None else Native(fn, in_place, stateful, prepare)


def chosen(
    traits: Traits, fn: Callable[..., Any], compiled: bool
) -> tuple[Callable[..., Any], Traits]:
    """The function a node runs and its traits: the compiled form when ``compiled`` and the
    kernel has one (its traits then promise its own in-place and stateful forms, or none), else
    ``fn``."""
    if not compiled or traits.native is None:
        return fn, traits
    native = traits.native
    return native.fn, traits.replace(
        in_place=native.in_place, ufunc=None, call=None, guard=None, stateful=native.stateful
    )


#: Broadcast operands are kept widened (by widening kernels and generated loops) for results
#: of at most this many elements.
WIDEN_LIMIT = 4096

#: The traits of a kernel that promises nothing.
NONE = Traits()

#: The traits of a kernel that draws random numbers: never folded, hoisted or batched.
RANDOM = Traits(pure=False)


def ufunc_traits(ufunc: np.ufunc, **more: Any) -> Traits:
    """Traits of a kernel that is exactly ``ufunc`` applied elementwise."""
    return Traits(ufunc=ufunc, elementwise=True, static_shape=True, fresh=True, **more)


class Built(NamedTuple):
    """What a builder kernel may return instead of a bare callable: the step function and its
    traits for this node (refined from the registration's)."""

    fn: Callable[..., Any]
    traits: Traits


def bind_attributes(traits: Traits, attrs: dict[str, Any]) -> Traits:
    """``traits`` with the node's attributes bound into its in-place and stateful forms as
    into the kernel."""
    if not attrs:
        return traits
    changes: dict[str, Any] = {}
    if traits.in_place is not None:
        changes["in_place"] = functools.partial(traits.in_place, **attrs)
    if traits.stateful is not None:
        make = traits.stateful
        changes["stateful"] = lambda: functools.partial(make(), **attrs)
    return traits.replace(**changes) if changes else traits
