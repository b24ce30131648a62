"""The ``com.microsoft.nchwc`` operators onnxruntime's NCHWc transformer writes into the models
it saves at its highest optimization level (ORT_ENABLE_ALL).

=================  ====  ===============================================================
operator           since  meaning
=================  ====  ===============================================================
ReorderInput       1     NCHW (or NHWC with channels_last) -> blocked
ReorderOutput      1     blocked -> NCHW (or NHWC), the first ``channels`` channels
Conv               1     activation(Conv(X, W, B) + Sum), W in a blocked order
MaxPool            1     MaxPool of a blocked tensor
AveragePool        1     AveragePool of a blocked tensor
GlobalMaxPool      1     GlobalMaxPool of a blocked tensor
GlobalAveragePool  1     GlobalAveragePool of a blocked tensor
Upsample           1     integer upscaling by ``scales``, nearest (floor) or linear
=================  ====  ===============================================================

onnxruntime holds a blocked tensor as (N, C/b, H, W, b) in memory, its channels padded to a
multiple of the block size b (8 with AVX2, 16 with AVX-512), and reports its shape as
(N, C padded, H, W). Here a blocked tensor is held in NCHW order: every operator above but Conv
works channel by channel, so it is the default-domain kernel as is, and the block size only
matters for reading a Conv's weights, which the transformer saved reordered into blocks. A
blocked tensor may carry fewer channels than a Conv's padded weights read (ReorderInput pads
none, not knowing the block size): Conv pads them with zeros, as the padding is in onnxruntime.

The block size is the model's: the one that all its NCHWc Convs' weight shapes allow (their
padded channel counts are multiples of it, and a Conv reading an NCHW tensor directly has fewer
input channels than a block), so one Conv with 24 channels tells 8 for all. Where both 8 and
16 fit every Conv, it is this machine's, as onnxruntime's would be here: onnxruntime says a
model saved with this transformer is only for the machine it was saved on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import GraphProto, helper

from onnxflow.compile.context import NodeContext
from onnxflow.ops.conv import conv
from onnxflow.ops.conv_direct import by_blas, direct, if_built, loop_activation
from onnxflow.ops.memo import WeightMemo
from onnxflow.ops.microsoft import NCHWC_DOMAIN
from onnxflow.ops.microsoft.fused import mlas_activation
from onnxflow.ops.pool import average_pool, global_average_pool, global_max_pool, max_pool
from onnxflow.ops.registry import op
from onnxflow.ops.resize import resize
from onnxflow.traits import Built, Traits, native_form

#: The block sizes onnxruntime's MLAS uses: 8 with AVX2, 16 with AVX-512.
BLOCK_SIZES = (8, 16)


def machine_block_size() -> int:
    """The block size onnxruntime's MLAS would choose on this machine: 16 with AVX-512F."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features
    return 16 if features.get("AVX512F") else 8


# -- layout -------------------------------------------------------------------------------------
@op("ReorderInput", 1, domain=NCHWC_DOMAIN)
def reorder_input(x: np.ndarray, *, channels_last: int = 0) -> np.ndarray:
    """An NCHW tensor, or an NHWC one with channels_last, as a blocked tensor."""
    if x.ndim < 3:
        raise ValueError(f"expected a tensor with channels and spatial axes, found {x.shape}")
    return np.ascontiguousarray(np.moveaxis(x, -1, 1) if channels_last else x)


@op("ReorderOutput", 1, domain=NCHWC_DOMAIN)
def reorder_output(x: np.ndarray, *, channels: int, channels_last: int = 0) -> np.ndarray:
    """The first ``channels`` channels of a blocked tensor, NCHW or (channels_last) NHWC."""
    if x.shape[1] < channels:
        raise ValueError(f"channels is {channels}, but the tensor has {x.shape[1]}: {x.shape}")
    y = x[:, :channels]
    return np.ascontiguousarray(np.moveaxis(y, 1, -1) if channels_last else y)


# -- convolution --------------------------------------------------------------------------------
def _layout(w_shape: Sequence[int], group: int, block: int) -> bool | None:
    """Whether saved weights of shape ``(C out padded, C in per group, kernel...)`` read a
    blocked input with this block size (False: NCHW input, or depthwise), or None when the
    block size cannot have made them."""
    c_out, c_in = w_shape[0], w_shape[1]
    if c_out % block:
        return None
    if group > 1 and c_in == 1:  # depthwise: one filter per channel, blocked over channels
        return False
    if c_in % block == 0:
        return True
    return False if group == 1 and c_in < block else None


def _declared_shapes(graph: GraphProto) -> dict[str, tuple[int, ...]]:
    """The shapes of the graph's initializers, and of its inputs that declare one whole."""
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(value.name, tuple(d.dim_value for d in dims))
    return shapes


def model_block_size(graph: GraphProto | None, preferred: int) -> int:
    """The block size every NCHWc Conv of ``graph`` was saved with: the one that all their
    weight shapes allow, else ``preferred`` (this machine's) when both or neither do (a Conv
    whose weights fit no block size then says so)."""
    if graph is None:
        return preferred
    shapes = _declared_shapes(graph)
    fitting = set(BLOCK_SIZES)
    for node in graph.node:
        if node.domain == NCHWC_DOMAIN and node.op_type == "Conv" and node.input[1] in shapes:
            groups = [helper.get_attribute_value(a) for a in node.attribute if a.name == "group"]
            shape, group = shapes[node.input[1]], groups[0] if groups else 1
            fitting = {b for b in fitting if _layout(shape, group, b) is not None}
    return fitting.pop() if len(fitting) == 1 else preferred


def unblock_filter(w: np.ndarray, block: int, blocked_input: bool) -> np.ndarray:
    """The OIHW filter that saved NCHWc weights hold: (O/b, I/b, kernel..., b_in, b_out) for a
    blocked input, else (O/b, I, kernel..., b_out) (an NCHW input, or depthwise)."""
    c_out, c_in, *kernel = w.shape
    n = len(kernel)
    if blocked_input:
        v = w.reshape(c_out // block, c_in // block, *kernel, block, block)
        perm = [0, n + 3, 1, n + 2, *range(2, n + 2)]  # (O/b, bo, I/b, bi, kernel...)
    else:
        v = w.reshape(c_out // block, c_in, *kernel, block)
        perm = [0, n + 2, *range(1, n + 2)]  # (O/b, bo, I, kernel...)
    return np.ascontiguousarray(v.transpose(perm)).reshape(w.shape)


def _fit_channels(x: np.ndarray, channels: int, what: str) -> np.ndarray:
    """x with its channels zero-padded to ``channels`` (a blocked tensor's padding)."""
    have = x.shape[1]
    if have == channels:
        return x
    if have > channels:
        raise ValueError(f"{what} has {have} channels, more than the {channels} expected")
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, channels - have)
    return np.pad(x, pad)


def nchwc_conv(
    node: NodeContext,
    *,
    activation: str | None = None,
    activation_params: list[float] | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Built:
    """activation(Conv(X, W, B) + Sum) over blocked tensors (X may be NCHW when it has fewer
    channels than a block), W saved in the NCHWc transformer's blocked order. The stateful
    form unblocks the same W once."""
    geometry = dict(auto_pad=auto_pad, dilations=dilations, group=group, pads=pads)
    geometry.update(kernel_shape=kernel_shape, strides=strides)
    return _nchwc_conv(node, activation, activation_params, geometry, compiled=False)


def nchwc_conv_compiled(node: NodeContext, **attrs: Any) -> Built:
    """:func:`nchwc_conv` with the convolutions :mod:`onnxflow.ops.conv_direct` takes run by
    the compiled loop, Sum and the activation in its pass."""
    activation, params = attrs.pop("activation", None), attrs.pop("activation_params", None)
    nchwc_conv(node, activation=activation, activation_params=params, **attrs)  # the checks
    return _nchwc_conv(node, activation, params, attrs, compiled=True)


def _nchwc_conv(
    node: NodeContext,
    activation: str | None,
    activation_params: list[float] | None,
    geometry: dict[str, Any],
    compiled: bool,
) -> Built:
    """The step of an NCHWc Conv (:func:`nchwc_conv`); ``compiled``: by the compiled loop where
    it takes the convolution."""
    act = mlas_activation(activation, activation_params)
    loop_act = loop_activation(activation, activation_params) if compiled else None
    group = geometry.get("group", 1)
    block = model_block_size(node.graph, machine_block_size())

    def unblocked(w: np.ndarray) -> tuple[np.ndarray, bool]:
        blocked_input = _layout(w.shape, group, block)
        if blocked_input is None:
            raise ValueError(
                f"W of shape {w.shape} (group {group}) was not blocked by {block}, the block "
                f"size of the model's other NCHWc weights (of {BLOCK_SIZES})"
            )
        return unblock_filter(w, block, blocked_input), blocked_input

    def run(
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        s: np.ndarray | None = None,
        *,
        memo: WeightMemo[tuple[np.ndarray, bool]] | None = None,
    ) -> np.ndarray:
        filters, blocked_input = (
            unblocked(w) if memo is None else memo.get((w,), lambda: unblocked(w))
        )
        c_in = filters.shape[1] * group
        if not blocked_input and group == 1 and x.shape[1] != c_in:
            raise ValueError(f"X has {x.shape[1]} channels, W reads {c_in}: {x.shape}")
        bias = None if b is None else _fit_channels(b.reshape(1, -1), w.shape[0], "B")[0]
        x = _fit_channels(x, c_in, "X")
        if loop_act is not None:
            addend = None if s is None else _fit_channels(s, w.shape[0], "Sum")
            y = direct(x, filters, bias, addend, geometry, loop_act)
            if y is None:
                y = by_blas(x, filters, bias, addend, geometry, loop_act)
            if y is not None:
                return y
        y = conv(x, filters, bias, **geometry)
        if s is not None:
            y += _fit_channels(s, y.shape[1], "Sum").astype(y.dtype, copy=False)
        return y if act is None else act(y)

    return Built(
        run, node.traits.replace(stateful=lambda: functools.partial(run, memo=WeightMemo()))
    )


#: The compiled form runs the convolutions :mod:`onnxflow.ops.conv_direct` takes (depthwise
#: ones, a first layer reading NCHW) by its loop.
op(
    "Conv",
    1,
    domain=NCHWC_DOMAIN,
    build=True,
    traits=Traits(native=native_form(if_built(nchwc_conv_compiled))),
)(nchwc_conv)


# -- pooling and upsampling ---------------------------------------------------------------------
@op("MaxPool", 1, domain=NCHWC_DOMAIN, build=True, traits=Traits(selects=True))
def nchwc_max_pool(
    node: NodeContext,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """MaxPool of a blocked tensor (one output; storage_order has nothing to order)."""
    return max_pool(
        node,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        dilations=dilations,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )


op("AveragePool", 1, domain=NCHWC_DOMAIN)(average_pool)
op("GlobalAveragePool", 1, domain=NCHWC_DOMAIN)(global_average_pool)
op("GlobalMaxPool", 1, domain=NCHWC_DOMAIN, traits=Traits(selects=True))(global_max_pool)


@op("Upsample", 1, domain=NCHWC_DOMAIN)
def nchwc_upsample(
    x: np.ndarray,
    *,
    scales: list[int],
    mode: str = "nearest",
    coordinate_transformation_mode: str = "asymmetric",
) -> np.ndarray:
    """x scaled up by the integer ``scales`` (one per axis): nearest takes input pixel
    floor(i / scale); linear interpolates with the coordinate transformation named."""
    if len(scales) != x.ndim or any(s < 1 for s in scales):
        raise ValueError(f"scales {scales} must give one factor >= 1 per axis of {x.shape}")
    factors = np.asarray(scales, dtype=np.float32)
    if mode == "nearest":
        return resize(
            x, None, factors, coordinate_transformation_mode="asymmetric", nearest_mode="floor"
        )
    if mode != "linear":
        raise ValueError(f"mode must be 'nearest' or 'linear', found {mode!r}")
    return resize(
        x,
        None,
        factors,
        mode="linear",
        coordinate_transformation_mode=coordinate_transformation_mode,
    )
