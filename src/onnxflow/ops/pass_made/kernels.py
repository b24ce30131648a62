"""Kernels of the nodes the compile passes make (names and domain: :mod:`onnxflow.ops.pass_made`).

The registry imports this module, like every family, the first time a plan looks one of them
up (:mod:`onnxflow.ops.kernel_index` lists them): a model no pass rewrites never imports it.
The kernels that build on other families have modules of their own, so that a model without
their nodes imports none of those: FakeQuantize (:mod:`.quantize`), RowSquaredDistances
(:mod:`.distances`), HalfRound and HalfTable (:mod:`.half`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import GraphProto

from onnxflow.ops import compiled
from onnxflow.ops.memo import Memo
from onnxflow.ops.pass_made import (
    FOLD_BATCH_NORM,
    FUSED_DOMAIN,
    SHAPE_MEMO,
    SHAPED_RESHAPE,
)
from onnxflow.ops.pass_made.body import body_call
from onnxflow.ops.registry import op
from onnxflow.traits import Built, Traits, native_form


@op(FOLD_BATCH_NORM, 1, domain=FUSED_DOMAIN, traits=Traits(fresh=True))
def fold_batch_norm(
    w: np.ndarray,
    b: np.ndarray | None,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """A Conv's weight ``W`` and bias ``B`` (None: zeros) with an inference BatchNormalization
    after it folded in, in W's dtype: per output channel ``a = scale / sqrt(var + epsilon)``,
    ``W * a`` and ``B * a + (bias - mean * a)``."""
    dt = w.dtype
    s, m, v, c = (p.astype(dt, copy=False) for p in (scale, mean, var, bias))
    a = s / np.sqrt(v + dt.type(epsilon))
    shift = c - m * a
    if b is not None:
        shift = b.astype(dt, copy=False) * a + shift
    return w * a.reshape(-1, *[1] * (w.ndim - 1)), shift


#: A ShapeMemo keeps its values only while they hold at most this many bytes in all.
MEMO_LIMIT = 64 << 20


_ARRAYS = compiled.module("_arrays")


def _shape_memo_compiled(node: Any, *, body: GraphProto, shaped: list[int] | None = None) -> Built:
    """ShapeMemo's compiled form: :func:`shape_memo` whose memo compares its inputs in C
    (``_arrays.same``: :func:`_same`'s test, without a bytes copy per array)."""
    return _shape_memo(node, body, shaped, _ARRAYS.same, _remembered_in_c)  # type: ignore[union-attr]


@op(
    SHAPE_MEMO,
    1,
    domain=FUSED_DOMAIN,
    build=True,
    traits=Traits(native=native_form(compiled.when(_ARRAYS, _shape_memo_compiled))),
)
def shape_memo(node: Any, *, body: GraphProto, shaped: list[int] | None = None) -> Built:
    """Run ``body`` (shape arithmetic, see :mod:`~onnxflow.compile.passes.memo_shapes`) on the
    node's inputs. The plan's stateless form runs it every time; the stateful form each
    generated function makes keeps the inputs and outputs of its last run and returns those
    outputs, read-only, while the inputs are equal: the inputs at the positions ``shaped``
    (tensors whose Shape or Size the body takes) by their shapes alone, the others by value."""
    return _shape_memo(node, body, shaped, _same)


def _shape_memo(
    node: Any,
    body: GraphProto,
    shaped: list[int] | None,
    same: Callable[..., bool],
    remember: Callable[..., Callable[..., Any]] | None = None,
) -> Built:
    """:func:`shape_memo` whose memo tells equal inputs by ``same``, made by ``remember``
    (:func:`_remembering` when None)."""
    run = body_call(node, body)
    n_inputs = len(body.input)
    by_shape = frozenset(shaped or ())
    make = remember or _remembering
    return Built(run, node.traits.replace(stateful=lambda: make(run, n_inputs, by_shape, same)))


def _remembered_in_c(
    run: Callable[..., Any], n_inputs: int, shaped: frozenset[int], same: Callable[..., bool]
) -> Callable[..., Any]:
    """:func:`_remembering`'s memo with its test in C (``_arrays.Remembered``, which compares
    by ``_arrays.same``): the run and what it keeps as there."""

    def miss(memo: Any, key: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        result = run(*args)
        if _keepable(result):
            memo.kept = (key, result)
        return result

    return _ARRAYS.Remembered(miss, n_inputs, shaped)  # type: ignore[union-attr]


def _keepable(result: Any) -> bool:
    """Whether a memo keeps ``result`` (its arrays made read-only): arrays alone, at most
    MEMO_LIMIT bytes in all."""
    values = result if isinstance(result, tuple) else (result,)
    if not all(v.__class__ is np.ndarray for v in values):
        return False
    if sum(v.nbytes for v in values) > MEMO_LIMIT:
        return False
    for v in values:
        v.flags.writeable = False
    return True


def _remembering(
    run: Callable[..., Any], n_inputs: int, shaped: frozenset[int], same: Callable[..., bool]
) -> Callable[..., Any]:
    """``run`` with a memo of its last inputs and result, in one tuple swapped whole; ``same``
    tells whether inputs are those kept."""
    memo: Memo[tuple[tuple[Any, ...], Any]] = Memo()

    def remembered(*args: Any) -> Any:
        kept = memo.kept
        key = _key(args[:n_inputs], shaped)
        if kept is not None and same(kept[0], key):
            return kept[1]
        result = run(*args)
        if _keepable(result):
            memo.kept = (key, result)
        return result

    return remembered


def _key(args: tuple[Any, ...], shaped: frozenset[int]) -> tuple[Any, ...]:
    """What a memo compares of ``args``: the shape of each array at a position in ``shaped``,
    the others themselves."""
    if not shaped:
        return args
    return tuple(
        a.shape if i in shaped and a.__class__ is np.ndarray else a for i, a in enumerate(args)
    )


def _same(kept: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """Whether the inputs ``now`` are those ``kept``: the same arrays, or arrays of the same
    shape, dtype and bytes (bitwise: 0.0 and -0.0 differ, as they may in results), or equal
    shapes (tuples)."""
    for a, b in zip(kept, now):
        if a is b:
            continue
        if a.__class__ is tuple and b.__class__ is tuple:
            if a != b:
                return False
            continue
        if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray:
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return False
    return True


@op(SHAPED_RESHAPE, 1, domain=FUSED_DOMAIN, build=True)
def shaped_reshape(
    node: Any, *, body: GraphProto, shaped: list[int], perm: list[int] | None = None
) -> Built:
    """``Reshape(x, target)`` with the shape arithmetic making ``target`` (see
    :mod:`~onnxflow.compile.passes.memo_shapes`), then ``Transpose(perm)`` when ``perm`` is
    given: input 0 is x, then what the arithmetic reads; ``body`` runs them as written. The
    plan's stateless form runs it every time; the stateful form each generated function makes
    keeps the reshaped shape and, while the inputs are those of its last run (at the positions
    ``shaped`` by their shapes alone, x among them), reshapes x to it (and transposes the view,
    as the Transpose kernel does)."""
    run = body_call(node, body)
    n_inputs = len(body.input)
    by_shape = frozenset(shaped)
    order = None if perm is None else tuple(perm)
    return Built(
        run, node.traits.replace(stateful=lambda: _reshaping(run, n_inputs, by_shape, order))
    )


def _reshaping(
    run: Callable[..., Any], n_inputs: int, shaped: frozenset[int], perm: tuple[int, ...] | None
) -> Callable[..., Any]:
    """``run`` with a memo of its last inputs' key and the shape it reshaped to."""
    memo: Memo[tuple[tuple[Any, ...], tuple[int, ...]]] = Memo()
    only_shapes = shaped == frozenset(range(n_inputs))

    def reshaped(*args: Any) -> Any:
        kept = memo.kept
        x = args[0]
        if only_shapes and x.__class__ is np.ndarray:
            key: tuple[Any, ...] = tuple(a.shape for a in args[:n_inputs])
            hit = kept is not None and kept[0] == key
        else:
            key = _key(args[:n_inputs], shaped)
            hit = kept is not None and x.__class__ is np.ndarray and _same(kept[0], key)
        if hit:
            y = x.reshape(kept[1])  # type: ignore[index]
            return y if perm is None else np.transpose(y, perm)
        y = run(*args)
        if y.__class__ is np.ndarray and x.__class__ is np.ndarray:
            memo.kept = (key, _unpermuted(y.shape, perm))
        return y

    return reshaped


def _unpermuted(shape: tuple[int, ...], perm: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape whose transpose by ``perm`` (None: none) is ``shape``."""
    if perm is None:
        return shape
    dims = [0] * len(shape)
    for i, p in enumerate(perm):
        dims[p] = shape[i]
    return tuple(dims)
