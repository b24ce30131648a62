"""The compiled direct convolution (:mod:`onnxflow.native._conv`): which convolutions it takes,
and the compiled forms of Conv and FusedConv that call it (NCHWc Conv's is in its module).

The loop serves float32 convolutions of one or two spatial axes where im2col and its Python
cost more than the product: depthwise ones (one input channel per group), small-channel ones
(a short sum per output), and long kernel rows with few filters (audio). It sums each output in
float32 in its own fixed order, reads the input in place or, where windows cross the left or
right padding, from a copy widened with zeros (rows of padding skipped), and
applies the bias, FusedConv's addend and activation to each output row as it is made. The
other float32 convolutions (pointwise and wide ones, which BLAS does better) run the NumPy
form's paths; a fused one then gets its bias, addend and activation in one compiled pass
(:func:`by_blas`). Other dtypes and 3-D run the NumPy form. The attributes are checked and the
output geometry computed as the NumPy form does (:func:`onnxflow.ops.conv_paths.conv_geometry`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from onnxflow.ops import compiled
from onnxflow.ops.conv_paths import check_kernel_shape, conv_geometry, convolve
from onnxflow.ops.im2col import GATHER_COLUMNS, _column_index
from onnxflow.traits import Built

_CONV = compiled.module("_conv")

#: A convolution that is not depthwise runs the loop when each output sums at most this many
#: products (a first layer's 3 channels x 3 x 3 = 27): beyond,
#: BLAS's product over im2col columns is faster than the loop's float32 lanes.
SMALL_SUM = 32
#: ... and the image's whole convolution is at most this many products: the loop makes fewer
#: products per second than BLAS, which wins once the layer is large (a 224x224 first layer).
SMALL_PRODUCTS = 1 << 21
#: A kernel row at least this long runs the loop, whatever the channels, when its group has at
#: most LONG_ROW_FILTERS filters: the GEMM is then too small for BLAS to make up for its call
#: and its column copy (audio's first layers). Rows longer than the loop's MAX_KERNEL are summed
#: as dot products over the row (dilation 1 only), shorter ones by taps like the others.
LONG_ROW = 16
LONG_ROW_FILTERS = 8

#: The loop's bias when there is none (read only).
_NO_BIAS = np.empty(0, np.float32)
_NO_BIAS.flags.writeable = False

#: (activation code, alpha, beta) of the loop: no activation.
NO_ACTIVATION = (0, 0.0, 0.0)


def _may_take(w_shape: tuple[int, ...], group: int) -> bool:
    """Whether the loop may take a convolution by W ``w_shape``, from W's shape alone: a cheap
    first test of the plan (:func:`_plan`)."""
    m, cg, *kernel = w_shape
    if not 1 <= len(kernel) <= 2:
        return False
    if kernel[-1] >= LONG_ROW and m // group <= LONG_ROW_FILTERS:
        return True
    depthwise = cg == 1 and group > 1
    return kernel[-1] <= _CONV.MAX_KERNEL and (depthwise or cg * math.prod(kernel) <= SMALL_SUM)


def _takes(
    w_shape: tuple[int, ...], group: int, path: str, dilations: Sequence[int], positions: int
) -> str:
    """How the loop runs a convolution by W ``w_shape`` with ``positions`` outputs per image and
    channel ("taps" or "dots"), or "" when it does not take it."""
    m, cg, *kernel = w_shape
    if path in ("pointwise", "empty") or kernel[:-1] > [_CONV.MAX_KERNEL]:
        return ""
    long_row = kernel[-1] >= LONG_ROW and m // group <= LONG_ROW_FILTERS
    if kernel[-1] > _CONV.MAX_KERNEL:
        return "dots" if long_row and dilations[-1] == 1 else ""
    if (cg == 1 and group > 1) or long_row:  # depthwise, or a long row
        return "taps"
    per_output = cg * math.prod(kernel)
    small = per_output <= SMALL_SUM and m * per_output * positions <= SMALL_PRODUCTS
    return "taps" if small else ""


#: The loop's plans by :func:`_plan_key`, kept for the convolutions seen last: a model's
#: convolutions meet the same shapes run after run, and the checks, the geometry and the
#: choice of path cost as much as a small layer's loop.
_PLANS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_PLANS_KEPT = 1024


def _seq(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _plan_key(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> tuple[Any, ...]:
    """What a plan depends on: the shapes and the geometry attributes."""
    return (
        x.shape,
        w.shape,
        attrs.get("group", 1),
        _seq(attrs.get("strides")),
        _seq(attrs.get("dilations")),
        _seq(attrs.get("pads")),
        attrs.get("auto_pad", "NOTSET"),
        _seq(attrs.get("kernel_shape")),
    )


def _plan(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> tuple[Any, ...]:
    """How a float32 convolution of X by W runs, checked as the NumPy form checks it: ("loop",
    output shape, strides, dilations, begin pads, how) or (path,) for one of conv_paths' paths
    ("pointwise", "depthwise", ...) when the loop does not take it."""
    group = attrs.get("group", 1)
    check_kernel_shape(attrs.get("kernel_shape"), w)
    out, begin, strides, dilations, path = conv_geometry(
        x.shape,
        w.shape,
        group,
        attrs.get("strides"),
        attrs.get("dilations"),
        attrs.get("pads"),
        attrs.get("auto_pad", "NOTSET"),
    )
    taken = x.size and _may_take(w.shape, group)
    how = _takes(w.shape, group, path, dilations, math.prod(out)) if taken else ""
    if not how:
        return (path,)
    return ("loop", (x.shape[0], w.shape[0], *out), strides, dilations, begin, how)


def _cached_plan(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> tuple[Any, ...]:
    """:func:`_plan`, kept in :data:`_PLANS` (a plan whose checks raise is not kept)."""
    key = _plan_key(x, w, attrs)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(x, w, attrs)
        if len(_PLANS) >= _PLANS_KEPT:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def direct(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    z: np.ndarray | None,
    attrs: dict[str, Any],
    activation: tuple[int, float, float] = NO_ACTIVATION,
) -> np.ndarray | None:
    """``act(conv(x, w) + b + z)`` by the compiled loop (``attrs``: Conv's geometry attributes;
    ``activation``: the loop's code and parameters), or None when the loop does not take it."""
    if _CONV is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != w.ndim:
        return None
    plan = _cached_plan(x, w, attrs)
    if plan[0] != "loop":
        return None
    shape, grid, how = plan[1], plan[2:5], plan[5]
    if not _fits(b, z, shape):
        return None
    return _run_loop(x, w, b, z, shape, attrs.get("group", 1), grid, how, activation)


def _run_loop(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    z: np.ndarray | None,
    shape: tuple[int, ...],
    group: int,
    grid: tuple[Sequence[int], Sequence[int], Sequence[int]],
    how: str,
    activation: tuple[int, float, float],
) -> np.ndarray:
    """The loop's convolution into a new array of ``shape`` (``grid``: strides, dilations and
    begin pads; a 1-D convolution runs as a 2-D one of height 1)."""
    strides, dilations, begin = grid
    y = np.empty(shape, np.float32)
    bias = _NO_BIAS if b is None else np.ascontiguousarray(b, np.float32)
    if x.ndim == 4:  # the loop's own rank: no reshapes
        _CONV.conv2d_f32(
            np.ascontiguousarray(x),
            np.ascontiguousarray(w),
            bias,
            z,
            y,
            group,
            tuple(strides),
            tuple(dilations),
            tuple(begin),
            *activation,
            dots=how == "dots",
        )
        return y
    ones = (1,) * (4 - x.ndim)
    _CONV.conv2d_f32(
        np.ascontiguousarray(x).reshape(*x.shape[:2], *ones, *x.shape[2:]),
        np.ascontiguousarray(w).reshape(*w.shape[:2], *ones, *w.shape[2:]),
        bias,
        None if z is None else z.reshape(y.shape[:2] + ones + y.shape[2:]),
        y.reshape(*shape[:2], *ones, *shape[2:]),
        group,
        (*ones, *strides),
        (*ones, *dilations),
        (*[0] * len(ones), *begin),
        *activation,
        dots=how == "dots",
    )
    return y


def pointwise_gemm(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any]
) -> np.ndarray | None:
    """A float32 1x1 convolution of one image, one group, as the NumPy form computes it (the
    same product ``W (M, C) @ X (C, P)``, then B added to each row), without its checks and
    geometry again (the plan kept them); None for the other convolutions."""
    if _CONV is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != w.ndim:
        return None
    if x.shape[0] != 1 or attrs.get("group", 1) != 1:
        return None
    if b is not None and (b.dtype != np.float32 or b.shape != w.shape[:1]):
        return None
    if _cached_plan(x, w, attrs)[0] != "pointwise":
        return None
    m, c = w.shape[:2]
    y = w.reshape(m, c) @ x.reshape(c, -1)
    if b is not None:
        y += b.reshape(m, 1)
    return y.reshape(1, m, *x.shape[2:])


def by_blas(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    z: np.ndarray | None,
    attrs: dict[str, Any],
    activation: tuple[int, float, float],
) -> np.ndarray | None:
    """``act(conv(x, w) + b + z)`` for the float32 convolutions the loop does not take: the
    convolution by the NumPy form's paths (BLAS), then the bias, Z and the activation in one
    compiled pass. None when the operands are not float32 as the pass reads them."""
    if _CONV is None or x.dtype != np.float32 or w.dtype != np.float32:
        return None
    check_kernel_shape(attrs.get("kernel_shape"), w)
    grid = [attrs.get(k) for k in ("strides", "dilations", "pads")]
    out = conv_geometry(
        x.shape, w.shape, attrs.get("group", 1), *grid, attrs.get("auto_pad", "NOTSET")
    ).out
    shape = (x.shape[0], w.shape[0], *out)
    if not _fits(b, z, shape):
        return None
    y = np.ascontiguousarray(
        convolve(x, w, attrs.get("group", 1), *grid, attrs.get("auto_pad", "NOTSET"))
    )
    positions = math.prod(out)  # not -1: NumPy cannot infer it for an empty batch
    _CONV.epilogue_f32(
        y.reshape(*shape[:2], positions),
        np.empty(0, np.float32) if b is None else np.ascontiguousarray(b, np.float32),
        None if z is None else z.reshape(*shape[:2], positions),
        *activation,
    )
    return y


def _fits(b: np.ndarray | None, z: np.ndarray | None, shape: tuple[int, ...]) -> bool:
    """Whether the loop reads B and Z as given: B one value per output channel (of a float
    dtype), Z a C-contiguous float32 array of the output's shape (else the NumPy form checks and
    converts them)."""
    if b is not None and (b.shape != shape[1:2] or b.dtype.kind != "f"):
        return False
    return z is None or (z.dtype == np.float32 and z.shape == shape and z.flags.c_contiguous)


def compiled_conv(numpy_form: Callable[..., np.ndarray]) -> Callable[..., np.ndarray] | None:
    """Conv's compiled form: the loop where it takes the convolution, else ``numpy_form``.
    None when the loop was not built."""
    if _CONV is None:
        return None

    def conv_compiled(
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        *,
        auto_pad: str = "NOTSET",
        dilations: list[int] | None = None,
        group: int = 1,
        kernel_shape: list[int] | None = None,
        pads: list[int] | None = None,
        strides: list[int] | None = None,
    ) -> np.ndarray:
        """Conv by the compiled direct loop where it serves, else by its NumPy form."""
        attrs = dict(
            auto_pad=auto_pad,
            dilations=dilations,
            group=group,
            kernel_shape=kernel_shape,
            pads=pads,
            strides=strides,
        )
        y = direct(x, w, b, None, attrs)
        if y is None:
            y = pointwise_gemm(x, w, b, attrs)
        return numpy_form(x, w, b, **attrs) if y is None else y

    return conv_compiled


def loop_activation(name: str | None, params: Sequence[float] | None) -> tuple[int, float, float]:
    """The loop's (code, alpha, beta) for FusedConv's activation ``name`` and its
    ``activation_params`` (checked by the NumPy form): LeakyRelu's alpha, HardSigmoid's alpha
    and beta, Clip's min and max, in that order."""
    if name is None:
        return NO_ACTIVATION
    first, second = [*(params or []), 0.0, 0.0][:2]
    return _CONV.ACTIVATIONS[name], float(first), float(second)


def compiled_fused_conv(
    numpy_builder: Callable[..., Any], flat_bias: bool = False
) -> Callable[..., Any] | None:
    """FusedConv's compiled form (a builder, as its NumPy form ``numpy_builder`` is): the loop,
    with the bias, addend and activation in its pass, where it takes the convolution, else the
    NumPy form's step; its stateful form (:class:`_PreparedFused`) reruns a GEMM path made
    once. ``flat_bias``: B may be any shape of one value per output channel, read flat (the
    pass-made ConvActivation's). None when the loop was not built."""
    if _CONV is None:
        return None

    def fused_conv_compiled(node: Any, **attrs: Any) -> Built:
        numpy_run = numpy_builder(node, **attrs)  # checks the attributes and the activation
        act = loop_activation(attrs.pop("activation", None), attrs.pop("activation_params", None))
        one_product = _OneProduct(attrs, act)

        def steps(loop: Callable[..., np.ndarray | None]) -> Callable[..., np.ndarray]:
            """The step trying the one product, then ``loop``, then BLAS, then NumPy."""

            def run(
                x: np.ndarray,
                w: np.ndarray,
                b: np.ndarray | None = None,
                z: np.ndarray | None = None,
            ) -> np.ndarray:
                if flat_bias and b is not None:
                    b = b.reshape(-1)
                y = one_product(x, w, b, z)
                if y is None:
                    y = loop(x, w, b, z)
                if y is None:
                    y = by_blas(x, w, b, z, attrs, act)
                return numpy_run(x, w, b, z) if y is None else y

            return run

        run = steps(lambda x, w, b, z: direct(x, w, b, z, attrs, act))

        def stateful() -> _PreparedFused:  # the loop's plan kept per generated function
            return _PreparedFused(steps(_KeptLoop(attrs, act)), attrs, act)

        return Built(run, node.traits.replace(stateful=stateful))

    return fused_conv_compiled


class _OneProduct:
    """A fused float32 1x1 convolution of one image, one group, stride 1, no padding (an SE
    block's squeeze and excite on a [1, C, 1, 1] input, a pointwise layer): the NumPy form's
    one product ``W (M, C) @ X (C, P)`` (the call :func:`by_blas` makes), then the bias, addend
    and activation in one compiled pass. Which X and W shapes are such a product is decided once
    per node and shape (the geometry checked as the NumPy form checks it), so a call is the
    product and the pass; None for the others."""

    def __init__(self, attrs: dict[str, Any], activation: tuple[int, float, float]) -> None:
        self.attrs, self.activation = attrs, activation
        self.shapes: dict[tuple[tuple[int, ...], tuple[int, ...]], bool] = {}

    def __call__(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, z: np.ndarray | None
    ) -> np.ndarray | None:
        """act(W @ X + B + Z) shaped as Y, or None when this is not such a product."""
        if x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != w.ndim:
            return None
        key = (x.shape, w.shape)
        taken = self.shapes.get(key)
        if taken is None:
            taken = self._decide(x, w)
        m, c = w.shape[:2]
        shape = (1, m, *x.shape[2:])
        if not taken or not _fits(b, z, shape):
            return None
        y = w.reshape(m, c) @ x.reshape(c, -1)
        _CONV.epilogue_f32(  # type: ignore[union-attr]
            y.reshape(1, m, -1),
            _NO_BIAS if b is None else np.ascontiguousarray(b, np.float32),
            None if z is None else z.reshape(1, m, -1),
            *self.activation,
        )
        return y.reshape(shape)

    def _decide(self, x: np.ndarray, w: np.ndarray) -> bool:
        """Whether X and W of these shapes are one product (kept per shape, at most 16)."""
        one = x.shape[0] == 1 and self.attrs.get("group", 1) == 1 and x.size > 0 and w.size > 0
        taken = one and _cached_plan(x, w, self.attrs) == ("pointwise",)
        if len(self.shapes) >= 16:
            self.shapes.clear()
        self.shapes[(x.shape, w.shape)] = taken
        return taken


class _KeptLoop:
    """:func:`direct` for a fused node's stateful form (one per generated function, so the plan
    keeps no state), which keeps the loop's plan of the last X shape and W it took: when they
    come back (each run of a session), the loop is called without the plan's key, lookup and
    checks again."""

    def __init__(self, attrs: dict[str, Any], activation: tuple[int, float, float]) -> None:
        self.attrs, self.activation = attrs, activation
        self.kept: tuple[Any, ...] = ()  # X's shape, W (by identity), the loop's plan

    def __call__(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, z: np.ndarray | None
    ) -> np.ndarray | None:
        """``act(conv(x, w) + b + z)`` by the loop, or None when it does not take it."""
        kept = self.kept
        if kept and x.shape == kept[0] and w is kept[1] and x.dtype == np.float32:
            plan = kept[2]
            if _fits(b, z, plan[1]):
                group = self.attrs.get("group", 1)
                return _run_loop(x, w, b, z, plan[1], group, plan[2:5], plan[5], self.activation)
        y = direct(x, w, b, z, self.attrs, self.activation)
        if y is not None:  # direct checked the dtypes and ranks, and made and kept the plan
            self.kept = (x.shape, w, _cached_plan(x, w, self.attrs))
        return y


def if_built(form: Callable[..., Any]) -> Callable[..., Any] | None:
    """The compiled form ``form``, or None when the loop it calls was not built."""
    return form if _CONV is not None else None


class _Columns(NamedTuple):
    """A float32 convolution of one image by one W that the NumPy form runs as one GEMM over
    gathered im2col columns (``index``, :func:`onnxflow.ops.im2col._column_index`) or, for a
    pointwise one (``index`` None), over the image's rows: made once for the X shape, W and B
    of ``key``."""

    key: tuple[Any, ...]  # X's shape, W, B (the arrays, compared by identity)
    index: np.ndarray | None
    wm: np.ndarray  # (M, C*K): W's rows
    bias: np.ndarray | None  # (M,), float32
    shape: tuple[int, ...]  # Y's

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The NumPy form's columns (the same values, gathered in one compiled pass) and
        product (the same call) over ``x``, then its bias add as the loop's compiled pass (the
        same float32 sums: NumPy's add of a (M, 1) bias copied it to a buffer element by
        element, 4 instructions an output)."""
        if self.index is None:
            cols = x.reshape(x.shape[1], -1)
        else:  # what take makes from x with a zero after it, in one compiled pass
            cols = np.empty(self.index.shape, np.float32)
            _CONV.gather_columns_f32(x.reshape(-1), self.index.reshape(-1), cols.reshape(-1))
        y = self.wm @ cols
        if self.bias is not None:
            _CONV.epilogue_f32(y.reshape(1, *y.shape), self.bias, None)  # type: ignore[union-attr]
        return y.reshape(self.shape)


def _columns_plan(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict) -> Any:
    """The :class:`_Columns` of this convolution, or None where the loop takes it or the
    NumPy form runs it otherwise (batches, groups, other dtypes, large column matrices)."""
    ok = x.dtype == w.dtype == np.float32 and x.ndim == w.ndim and x.shape[0] == 1
    if not ok or attrs.get("group", 1) != 1 or (b is not None and b.dtype != np.float32):
        return None
    check_kernel_shape(attrs.get("kernel_shape"), w)
    grid = [attrs.get(k) for k in ("strides", "dilations", "pads")]
    geometry = conv_geometry(x.shape, w.shape, 1, *grid, attrs.get("auto_pad", "NOTSET"))
    out, begin, strides, dilations, path = geometry
    taken = _may_take(w.shape, 1) and _takes(w.shape, 1, path, dilations, math.prod(out))
    kernel = w.shape[2:]
    size = x.shape[1] * math.prod(kernel) * math.prod(out)
    if taken or path not in ("pointwise", "columns") or not x.size or size > GATHER_COLUMNS:
        return None
    index = None
    if path == "columns":
        index = _column_index(x.shape[1:], kernel, out, strides, dilations, begin)
    bias = None if b is None else np.ascontiguousarray(b.reshape(-1))
    wm = w.reshape(w.shape[0], -1)
    return _Columns((x.shape, w, b), index, wm, bias, (1, w.shape[0], *out))


class _Loop(NamedTuple):
    """A float32 convolution that the direct loop takes (depthwise, small-channel), made once
    for the X shape, W and B of ``key``: the loop's own call, without the plan's key, lookup and
    checks at every call (a PP-OCR classifier's dozen depthwise Convs, 2-3 us of glue each)."""

    key: tuple[Any, ...]  # X's shape, W, B (the arrays, compared by identity)
    shape: tuple[int, ...]  # Y's
    group: int
    grid: tuple[Sequence[int], Sequence[int], Sequence[int]]  # strides, dilations, begin pads
    how: str

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The loop's convolution of ``x``, as :func:`direct` runs it."""
        _, w, b = self.key
        return _run_loop(x, w, b, None, self.shape, self.group, self.grid, self.how, NO_ACTIVATION)


def _loop_plan(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict) -> Any:
    """The :class:`_Loop` of this convolution, or None where the loop does not take it (as
    :func:`direct` decides: then it returns None too)."""
    if _CONV is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != w.ndim:
        return None
    plan = _cached_plan(x, w, attrs)
    if plan[0] != "loop" or not _fits(b, None, plan[1]):
        return None
    return _Loop((x.shape, w, b), plan[1], attrs.get("group", 1), plan[2:5], plan[5])


class _PreparedConv:
    """Conv's compiled stateful form: the compiled form, and for a node that runs the same W
    and B twice in a row on one float32 image, the path it takes made once: the NumPy form's
    GEMM (:class:`_Columns`), its geometry and column index then not looked up at every call,
    or the direct loop's call (:class:`_Loop`)."""

    def __init__(self, form: Callable[..., np.ndarray]) -> None:
        self.form = form
        self.plan: _Columns | _Loop | None = None
        self.fast: Any = None  # a GEMM plan's compiled call (_compiled_columns), or None
        self.last: tuple[Any, ...] = ()

    def __call__(self, x: np.ndarray, w: np.ndarray, b: Any = None, **attrs: Any) -> np.ndarray:
        """Y for X, W, B and the node's attributes."""
        fast = self.fast
        if fast is not None:
            y = fast(x, w, b)
            if y is not None:
                return y
        plan = self.plan
        if plan is not None:
            key = plan.key
            if x.shape == key[0] and w is key[1] and b is key[2] and x.dtype == np.float32:
                return plan(x)
        y = self.form(x, w, b, **attrs)
        key = (x.shape, w, b)
        last, self.last = self.last, key
        if len(last) == 3 and last[0] == key[0] and last[1] is w and last[2] is b:
            self.plan = _columns_plan(x, w, b, attrs) or _loop_plan(x, w, b, attrs)
            self.fast = _compiled_columns(self.plan, None, NO_ACTIVATION)
        return y


def prepared_conv(form: Callable[..., np.ndarray] | None) -> Callable[[], Any] | None:
    """What makes Conv's compiled stateful form over its compiled ``form`` (None: not built)."""
    return None if form is None else lambda: _PreparedConv(form)


class _PreparedFused:
    """FusedConv's compiled stateful form: the compiled step, and for a node that runs the same
    W and B twice in a row on one float32 image, with no Z, where :func:`by_blas` serves it, the
    NumPy form's GEMM path made once (:class:`_Columns`, without B), then B and the activation
    in by_blas's one compiled pass: the same calls on the same operands, without the checks,
    the geometry and the column index looked up at every call."""

    def __init__(
        self, step: Callable[..., np.ndarray], attrs: dict, act: tuple[int, float, float]
    ) -> None:
        self.step, self.attrs, self.act = step, attrs, act
        self.plan: _Columns | None = None
        self.fast: Any = None  # the plan's compiled call (_compiled_columns), or None
        self.bias = _NO_BIAS
        self.last: tuple[Any, ...] = ()

    def __call__(self, x: np.ndarray, w: np.ndarray, b: Any = None, z: Any = None) -> np.ndarray:
        """Y for X, W, B (read flat) and Z."""
        fast = self.fast
        if fast is not None:
            y = fast(x, w, b, z)
            if y is not None:
                return y
        plan = self.plan
        if plan is not None and z is None:
            key = plan.key
            if x.shape == key[0] and w is key[1] and b is key[2] and x.dtype == np.float32:
                y = plan(x)
                shape = plan.shape
                _CONV.epilogue_f32(y.reshape(*shape[:2], -1), self.bias, None, *self.act)
                return y
        y = self.step(x, w, b, z)
        last, self.last = self.last, (x.shape, w, b)
        if z is None and len(last) == 3 and last[0] == x.shape and last[1] is w and last[2] is b:
            self._prepare(x, w, b)
        return y

    def _prepare(self, x: np.ndarray, w: np.ndarray, b: Any) -> None:
        """Make the GEMM path for X's shape, W and B, where by_blas serves them."""
        flat = None if b is None else b.reshape(-1)
        if flat is not None and (flat.dtype != np.float32 or flat.shape != w.shape[:1]):
            return
        plan = _columns_plan(x, w, None, self.attrs)
        if plan is not None and math.prod(plan.shape):
            self.bias = _NO_BIAS if flat is None else np.ascontiguousarray(flat)
            self.plan = plan._replace(key=(x.shape, w, b))
            self.fast = _compiled_columns(self.plan, None if flat is None else self.bias, self.act)


def _compiled_columns(plan: Any, bias: np.ndarray | None, act: tuple[int, float, float]) -> Any:
    """The compiled call (``_conv.ColumnsProduct``) running a :class:`_Columns` plan, then its
    bias (or ``bias``) and the activation ``act``, in one call from Python: the same gather,
    the same matmul and the same one pass after it, without the Python between them. None for
    another plan (a loop's) or none."""
    if plan.__class__ is not _Columns:
        return None
    shape, w, b = plan.key
    bias = plan.bias if bias is None else bias
    return _CONV.ColumnsProduct(shape, w, b, plan.index, plan.wm, bias, plan.shape, *act)
