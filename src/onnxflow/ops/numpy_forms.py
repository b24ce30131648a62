"""Plain NumPy forms of ONNX operators, for the modules ``onnxflow export-python`` writes.

A kernel whose traits declare a NumPy form (:attr:`onnxflow.traits.Traits.numpy`) may call one
of these functions in it; the exporter copies the source of each function a module calls (and
of those they call) into the module, so the module needs nothing but NumPy. Each function here
therefore uses only ``np`` and the other ``onnx_`` functions of this module, and computes what
the operator's kernel computes, in the same dtype (``tests/conformance/test_exported_modules.py``
compares them on the whole ONNX node suite).
"""

from __future__ import annotations

import numpy as np


def onnx_ints(values):
    """A 1-D integer tensor, list or scalar as a list of Python ints."""
    return [int(v) for v in np.asarray(values).reshape(-1)]


def onnx_wide(x):
    """x in the dtype its arithmetic accumulates in: float32 for float16 and bfloat16."""
    return x.astype(np.float32) if x.dtype.kind in "fV" and x.dtype.itemsize < 4 else x


def onnx_matmul(a, b):
    """MatMul: np.matmul in a's dtype (bfloat16 products come back as float32), a 0-d result
    as an array."""
    return np.asarray(np.matmul(a, b)).astype(a.dtype, copy=False)


def onnx_gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    """Gemm: alpha * A' @ B' + beta * C, in A's dtype."""
    y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else c * beta)
    return np.asarray(y).astype(a.dtype, copy=False)


def onnx_div(a, b):
    """Div: integers divide truncating toward zero, as in C."""
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    q = np.floor_divide(a, b)
    if a.dtype.kind == "u":
        return q
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def onnx_sigmoid(x):
    """Sigmoid: exp(min(x, 0)) / (1 + exp(-|x|)), in x's dtype."""
    e = np.exp(-np.abs(x))
    return (np.where(x >= 0, 1, e) / (1 + e)).astype(x.dtype, copy=False)


def onnx_softmax(x, axis=-1, coerced=False):
    """Softmax along ``axis``; ``coerced`` (before opset 13): over x seen as a matrix whose
    rows are the dims before ``axis``."""
    if x.size == 0:
        return np.empty_like(x)
    if coerced:
        axis = axis + x.ndim if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return onnx_softmax(x.reshape(rows, x.size // rows), 1).reshape(x.shape)
    e = np.exp(x - x.max(axis, keepdims=True))
    return (e / e.sum(axis, keepdims=True)).astype(x.dtype, copy=False)


def onnx_reshape(x, shape, allowzero=0):
    """Reshape: a 0 copies the input's dim unless ``allowzero``, one -1 is inferred."""
    dims = onnx_ints(shape)
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def onnx_flatten(x, axis=1):
    """Flatten: the dims before ``axis`` make the rows, the rest the columns."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))


def onnx_squeeze(x, axes=None):
    """Squeeze: drop the size-1 dims ``axes`` (all of them when None)."""
    return np.squeeze(x) if axes is None else np.squeeze(x, tuple(onnx_ints(axes)))


def onnx_unsqueeze(x, axes):
    """Unsqueeze: a size-1 dim at each of ``axes`` (positions in the result)."""
    return np.expand_dims(x, tuple(onnx_ints(axes)))


def onnx_slice(x, starts, ends, axes=None, steps=None):
    """Slice: x[starts:ends:steps] along ``axes``, clamped as the spec says."""
    starts, ends = onnx_ints(starts), onnx_ints(ends)
    axes = range(len(starts)) if axes is None else onnx_ints(axes)
    steps = [1] * len(starts) if steps is None else onnx_ints(steps)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = x.shape[axis]
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            index[axis] = slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            index[axis] = slice(start, end if end >= 0 else None, step)
    return x[tuple(index)]


def onnx_reduce(x, how, axes=None, keepdims=1, noop_with_empty_axes=0):
    """ReduceSum (``how`` "sum"), ReduceMean ("mean"), ReduceMax ("max") or ReduceMin ("min")
    over ``axes``: none or empty mean all axes, or none at all with ``noop_with_empty_axes``;
    float16 accumulates in float32."""
    axes = [] if axes is None else onnx_ints(axes)
    if not axes:
        axes = [] if noop_with_empty_axes else list(range(x.ndim))
    axes = tuple(sorted(a + x.ndim if a < 0 else a for a in axes))
    if how in ("max", "min"):
        bound = how == "max"
        if x.dtype == np.bool_:
            initial = not bound
        elif x.dtype.kind in "iu":
            initial = np.iinfo(x.dtype).min if bound else np.iinfo(x.dtype).max
        else:
            initial = -np.inf if bound else np.inf
        ufunc = np.maximum if bound else np.minimum
        y = ufunc.reduce(x, axis=axes, keepdims=bool(keepdims), initial=x.dtype.type(initial))
    elif how == "mean":
        w = x.astype(np.float64) if x.dtype.kind in "iub" else onnx_wide(x)
        total = np.add.reduce(w, axis=axes, keepdims=bool(keepdims))
        count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        y = np.true_divide(total, np.float64(count)).astype(w.dtype, copy=False)
    else:
        w = onnx_wide(x)
        y = np.add.reduce(w, axis=axes, dtype=w.dtype, keepdims=bool(keepdims))
    return np.asarray(y).astype(x.dtype, copy=False)


def onnx_batch_norm(x, scale, bias, mean, var, epsilon=1e-5):
    """BatchNormalization in inference mode: per channel (axis 1), x * a + (bias - mean * a)
    with a = scale / sqrt(var + epsilon); float16 computed in float32."""
    w = onnx_wide(x)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    s, b, m, v = (onnx_wide(p).reshape(shape) for p in (scale, bias, mean, var))
    a = s / np.sqrt(v + w.dtype.type(epsilon))
    return (w * a + (b - m * a)).astype(x.dtype, copy=False)


def onnx_window(spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode=0):
    """Output sizes, begin pads and end pads of a window sliding over ``spatial``."""
    n = len(spatial)
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-size // s) for size, s in zip(spatial, strides, strict=True)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, extent, spatial)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        return out, begin, [t - b for t, b in zip(total, begin, strict=True)]
    valid = auto_pad == "VALID" or not pads
    begin, end = ([0] * n, [0] * n) if valid else (list(pads[:n]), list(pads[n:]))
    ceil_mode = ceil_mode and auto_pad != "VALID"
    out = []
    for size, e, s, b, a in zip(spatial, extent, strides, begin, end, strict=True):
        span = size + b + a - e
        o = -(-span // s) + 1 if ceil_mode else span // s + 1
        out.append(o - 1 if ceil_mode and (o - 1) * s >= size + b else o)
    return out, begin, end


def onnx_taps(x, kernel, value=0, strides=None, dilations=None, pads=None, auto_pad="NOTSET",
              ceil_mode=0):  # fmt: skip
    """The views (N, C, *out) of x, padded with ``value``, that each kernel position sees, in
    row-major order; and the output sizes and begin pads."""
    strides = strides or [1] * len(kernel)
    dilations = dilations or [1] * len(kernel)
    spatial = x.shape[2:]
    out, begin, end = onnx_window(spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out, strides, kernel, dilations)]
    end = [max(e, r - i - b) for e, r, i, b in zip(end, reach, spatial, begin, strict=True)]
    pairs = [(0, 0), (0, 0), *zip(begin, end, strict=True)]
    xp = np.pad(x, pairs, constant_values=value) if any(begin) or any(end) else x
    taps = []
    for offset in np.ndindex(*kernel):
        window = zip(offset, dilations, out, strides, strict=True)
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in window)
        taps.append(xp[(slice(None), slice(None), *index)])
    return taps, out, begin


def onnx_conv(x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, pads=None, strides=None):
    """Conv: x (N, C, *spatial) with w (M, C/group, *kernel), plus bias b, computed in float32
    (float64 for float64): the columns of x (im2col: one padded, strided view per kernel
    position) times w, one matrix product per group; a depthwise convolution (one input
    channel per group) as one multiply-add per kernel position."""
    dtype = np.float64 if x.dtype == np.float64 else np.float32
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    w = w.astype(dtype, copy=False)
    xw = x.astype(dtype, copy=False)
    taps, out, _ = onnx_taps(xw, w.shape[2:], 0, strides, dilations, pads, auto_pad)
    if group == c == m and w.shape[1] == 1:
        weights = w.reshape(c, -1)
        y = np.zeros(taps[0].shape, dtype)
        term = np.empty_like(y)
        for j, view in enumerate(taps):
            y += np.multiply(view, weights[:, j].reshape((1, c) + (1,) * len(out)), out=term)
    else:
        cols = taps[0][:, :, None] if len(taps) == 1 else np.stack(taps, axis=2)
        cols = cols.reshape(n, group, (c // group) * len(taps), -1)
        y = np.matmul(w.reshape(group, m // group, -1), cols).reshape(n, m, *out)
    if b is not None:
        y += b.astype(dtype, copy=False).reshape((1, -1) + (1,) * len(out))
    return y.astype(x.dtype, copy=False)


def onnx_max_pool(x, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
                  strides=None):  # fmt: skip
    """MaxPool's first output: the max over each window (padding never wins)."""
    lowest = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    taps, _, _ = onnx_taps(x, kernel_shape, lowest, strides, dilations, pads, auto_pad, ceil_mode)
    best = taps[0].copy()
    for view in taps[1:]:
        np.maximum(best, view, out=best)
    return best


def onnx_average_pool(x, kernel_shape, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0,
                      dilations=None, pads=None, strides=None):  # fmt: skip
    """AveragePool: the mean over each window, the pads counted with ``count_include_pad``
    only; float16 computed in float32."""
    w = onnx_wide(x)
    geometry = (strides, dilations, pads, auto_pad, ceil_mode)
    taps, out, begin = onnx_taps(w, kernel_shape, 0, *geometry)
    total = np.zeros(taps[0].shape, w.dtype)
    for view in taps:
        total += view
    spatial = x.shape[2:]
    _, _, end = onnx_window(spatial, kernel_shape, strides or [1] * len(out),
                            dilations or [1] * len(out), pads, auto_pad, ceil_mode)  # fmt: skip
    counts = np.ones((), np.int64)
    for axis, size in enumerate(spatial):
        s, d = (strides or [1] * len(out))[axis], (dilations or [1] * len(out))[axis]
        pos = np.arange(out[axis])[:, None] * s - begin[axis] + np.arange(kernel_shape[axis]) * d
        lo, hi = (-begin[axis], size + end[axis]) if count_include_pad else (0, size)
        counts = np.multiply.outer(counts, ((pos >= lo) & (pos < hi)).sum(axis=1))
    return (total / counts.astype(w.dtype)).astype(x.dtype, copy=False)


def onnx_global_pool(x, how):
    """GlobalAveragePool (``how`` "mean", float16 in float32) or GlobalMaxPool ("max"): over
    every spatial axis, kept as size 1."""
    axes = tuple(range(2, x.ndim))
    if how == "max":
        return x.max(axis=axes, keepdims=True)
    return onnx_wide(x).mean(axis=axes, keepdims=True).astype(x.dtype, copy=False)


def onnx_clip(x, lo=None, hi=None):
    """Clip: max(x, lo) then min(., hi) in x's dtype (lo > hi gives hi); a None bound does
    not clip."""
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi, x.dtype))
    return np.array(x, copy=True)


def onnx_hard_sigmoid(x, alpha=0.2, beta=0.5):
    """HardSigmoid: max(0, min(1, alpha * x + beta)); float16 computed in float32."""
    w = onnx_wide(x)
    c = w.dtype.type
    return np.clip(w * c(alpha) + c(beta), c(0), c(1)).astype(x.dtype, copy=False)


def onnx_hard_swish(x):
    """HardSwish: x * max(0, min(1, x / 6 + 0.5)); float16 computed in float32."""
    w = onnx_wide(x)
    c = w.dtype.type
    return (w * np.clip(w * c(1 / 6) + c(0.5), c(0), c(1))).astype(x.dtype, copy=False)


def onnx_leaky_relu(x, alpha=0.01):
    """LeakyRelu: x where x >= 0, else alpha * x."""
    scaled = x * x.dtype.type(alpha)
    y = np.maximum(x, scaled) if alpha <= 1 else np.minimum(x, scaled)
    return np.asarray(y).astype(x.dtype, copy=False)


def onnx_expand(x, shape):
    """Expand: x broadcast (both ways) with ``shape``, a new array."""
    target = np.broadcast_shapes(x.shape, tuple(onnx_ints(shape)))
    return np.broadcast_to(x, target).copy()


def onnx_element(value):
    """OptionalGetElement: the optional's element (a tensor or sequence passes through)."""
    if value is None:
        raise ValueError("OptionalGetElement: the input is an empty optional")
    return value


def onnx_layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5, wide=False):
    """LayerNormalization's Y: x standardized over axes [axis, rank), statistics in float32
    (float64 when ``wide``), then times scale plus bias, in x's dtype."""
    axes = tuple(range(axis + x.ndim if axis < 0 else axis, x.ndim))
    w = x.astype(np.float64 if wide else np.float32)
    centered = w - w.mean(axes, keepdims=True)
    var = (centered * centered).mean(axes, keepdims=True)
    y = (centered * (1 / np.sqrt(var + w.dtype.type(epsilon)))).astype(x.dtype)
    y = y * scale
    return (y if bias is None else y + bias).astype(x.dtype, copy=False)


def onnx_pow(x, y):
    """Pow in x's dtype: an integer to a negative integer power through float64; a float32
    (or smaller) to the power -4, -3, -2, 3 or 4 by products in float64, rounded once."""
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and np.any(y < 0):
        return np.power(x.astype(np.float64), y).astype(x.dtype)
    if y.size == 1 and x.dtype.itemsize <= 4 and x.dtype.kind in "fV":
        n = y.item()
        if n in (-4, -3, -2, 3, 4):
            wide = x.astype(np.float64)
            out = wide * wide
            out = out * wide if abs(n) == 3 else (out * out if abs(n) == 4 else out)
            return (1.0 / out if n < 0 else out).astype(x.dtype)
    return np.asarray(np.power(x, y)).astype(x.dtype, copy=False)


def onnx_range(start, limit, delta, stash_type=1):
    """Range: start, start + delta, ... up to limit (excluded), in start's dtype (float16 in
    float32 with ``stash_type`` 1)."""
    s, stop, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    dtype = s.dtype
    if dtype.kind in "iu":
        return np.arange(int(s), int(stop), int(d), dtype=np.int64).astype(dtype)
    work = np.float32 if dtype.itemsize == 2 and stash_type == 1 else dtype
    s, stop, d = (np.asarray(v, dtype=work) for v in (s, stop, d))
    count = max(int(np.ceil(float((stop - s) / d))), 0)
    return (s + np.arange(count).astype(work) * d).astype(dtype)


def onnx_constant_of_shape(shape, value=None):
    """ConstantOfShape: ``shape`` filled with value's one element (float32 0 by default)."""
    value = np.zeros(1, np.float32) if value is None else value
    return np.full(onnx_ints(shape), value.reshape(-1)[0], dtype=value.dtype)


def onnx_split(x, n, axis=0, sizes=None, uneven=False):
    """Split into ``sizes`` along ``axis``, or into n equal parts (as equal as possible, the
    last one smaller, when ``uneven``)."""
    axis = axis + x.ndim if axis < 0 else axis
    dim = x.shape[axis]
    if sizes is None or np.size(sizes) == 0:
        chunk = -(-dim // n) if uneven else dim // n
        sizes = [min(chunk, dim - i * chunk) for i in range(n)] if uneven else [chunk] * n
    return tuple(np.split(x, np.cumsum(onnx_ints(sizes))[:-1], axis=axis))


def onnx_gather_nd(x, indices, batch_dims=0):
    """GatherND: the slices of x addressed by the index tuples in indices' last axis, after
    ``batch_dims`` leading axes x and indices share."""
    batch = x.shape[:batch_dims]
    rows = int(np.prod(batch, dtype=np.int64))
    flat_x = x.reshape(rows, *x.shape[batch_dims:])
    flat_i = indices.reshape(rows, *indices.shape[batch_dims:]).astype(np.int64)
    row = np.arange(rows).reshape((rows,) + (1,) * (flat_i.ndim - 2))
    out = flat_x[(row, *np.moveaxis(flat_i, -1, 0))]
    return out.reshape(*batch, *out.shape[1:])


def onnx_horner(t, coefficients):
    """The polynomial with ``coefficients`` (Python floats, lowest degree first) at t, in t's
    dtype."""
    acc = np.full_like(t, coefficients[-1])
    for c in coefficients[-2::-1]:
        acc = acc * t + c
    return acc


def onnx_erf(x):
    """Erf in x's dtype, computed in float32 (float64 for float64), as the kernel computes it:
    the Taylor series below 0.5; above, 1 - exp(-a * a) times a polynomial in 1 / (1 + a / 2)
    fitted to erfc (up to 4 in float32, where erf rounds to 1); odd."""
    single = x.dtype.kind in "fV" and x.dtype.itemsize <= 4
    w = x.astype(np.float32 if single else np.float64)
    a = np.abs(w)
    series = [
        float(2 / np.sqrt(np.pi))
        * (-1) ** n
        / (float(np.prod(np.arange(1.0, n + 1))) * (2 * n + 1))
        for n in range(7 if single else 12)
    ]
    if single:
        tail = (
            -0.00023623015172052897, 0.28626424829363295, 0.250047893954066, 0.3866694371756762,
            -0.20051893099489487, 0.7162885666914467, -0.6206562352578168, 0.20191756963066734,
            -0.01975884099223241,
        )  # fmt: skip
        b = np.minimum(np.maximum(a, np.float32(0.5)), np.float32(4.0))
    else:
        tail = (
            -9.155870506205588e-12, 0.28209479241193713, 0.2820947729733593, 0.24683323597506512,
            0.17630703715438206, 0.08374316395731574, -0.004121618448784697, -0.06031614946788817,
            -0.026599723870490213, -0.14554675883149637, 0.6015891234613138, -1.5580347671376398,
            3.5191249040822137, -5.760010919617342, 6.379352663664237, -4.716034685683433,
            2.254273108191401, -0.6355101022931144, 0.0807620695564119,
        )  # fmt: skip
        b = np.maximum(a, 0.5)
    s = np.minimum(a, a.dtype.type(0.5))
    small = s * onnx_horner(s * s, series)
    large = 1 - onnx_horner(1 / (1 + a.dtype.type(0.5) * b), tail) * np.exp(-(b * b))
    return np.copysign(np.where(a < 0.5, small, large), w).astype(x.dtype)


def onnx_resize_plan(shape, axes, scales, sizes, policy):
    """Resize's output extent and scale for each resized axis: from ``sizes`` (under the
    keep_aspect_ratio ``policy``) when given, else floor(input * scale)."""
    extents = [shape[a] for a in axes]
    if sizes is not None and np.size(sizes):
        want = onnx_ints(sizes)
        ratios = [w / n for w, n in zip(want, extents, strict=True)]
        if policy == "stretch":
            return want, ratios
        common = min(ratios) if policy == "not_larger" else max(ratios)
        return [int(np.floor(common * n + 0.5)) for n in extents], [common] * len(axes)
    factors = [float(v) for v in np.asarray(scales).reshape(-1)]
    return [int(np.floor(n * f)) for n, f in zip(extents, factors, strict=True)], factors


def onnx_resize_coords(n_out, n_in, scale, mode):
    """The input position each output position of one axis maps to."""
    i = np.arange(n_out, dtype=np.float64)
    if mode in ("pytorch_half_pixel", "align_corners") and n_out <= 1:
        return np.zeros_like(i)
    if mode == "align_corners":
        return i * (n_in - 1) / (n_out - 1)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    shift = n_in / 2 - n_out / (2 * scale) if mode == "half_pixel_symmetric" else 0
    return shift + (i + 0.5) / scale - 0.5


def onnx_resize_nearest(x, roi=None, scales=None, sizes=None, axes=None,
                        coordinate_transformation_mode="half_pixel",
                        keep_aspect_ratio_policy="stretch",
                        nearest_mode="round_prefer_floor"):  # fmt: skip
    """Resize (version 11 on) in nearest mode: one axis at a time, each output position takes
    the input element its position rounds to (``nearest_mode``)."""
    axes = [a + x.ndim if a < 0 else a for a in (range(x.ndim) if axes is None else axes)]
    outs, factors = onnx_resize_plan(x.shape, axes, scales, sizes, keep_aspect_ratio_policy)
    y = x
    for axis, n_out, scale in zip(axes, outs, factors, strict=True):
        n_in = x.shape[axis]
        if n_out == n_in and scale == 1:
            continue
        c = onnx_resize_coords(n_out, n_in, scale, coordinate_transformation_mode)
        if nearest_mode == "round_prefer_floor":
            c = np.ceil(c - 0.5)
        elif nearest_mode == "round_prefer_ceil":
            c = np.floor(c + 0.5)
        else:
            c = np.floor(c) if nearest_mode == "floor" else np.ceil(c)
        y = np.take(y, np.clip(c, 0, n_in - 1).astype(np.intp), axis=axis)
    return y


def onnx_padded(rows, steps, empty):
    """Scan 8's scan output [batch, steps, ...]: each batch entry's rows stacked, zeros past
    them; ``empty`` (no rows anywhere) gives the element shape and dtype."""
    stacks = [np.stack(entry) if entry else empty for entry in rows]
    full = next((r for r in stacks if r.shape[0]), empty)
    out = np.zeros((len(stacks), steps, *full.shape[1:]), dtype=full.dtype)
    for b, stacked in enumerate(stacks):
        if stacked.shape[0]:
            out[b, : stacked.shape[0]] = stacked
    return out


def onnx_conv_transpose_geometry(spatial, kernel, strides, dilations, pads, auto_pad,
                                 output_padding, output_shape):  # fmt: skip
    """ConvTranspose's begin pads and output sizes, per spatial axis."""
    n = len(spatial)
    extra = output_padding or [0] * n
    full = [
        s * (i - 1) + a + (k - 1) * d + 1
        for s, i, a, k, d in zip(strides, spatial, extra, kernel, dilations, strict=True)
    ]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        given = output_shape is not None
        size = list(output_shape[-n:]) if given else [i * s for i, s in zip(spatial, strides)]
        total = [f - o for f, o in zip(full, size, strict=True)]
        return [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total], size
    if auto_pad == "VALID" or not pads:
        return [0] * n, full
    return list(pads[:n]), [f - b - e for f, b, e in zip(full, pads[:n], pads[n:], strict=True)]


def onnx_conv_transpose(x, w, b=None, auto_pad="NOTSET", dilations=None, group=1,
                        output_padding=None, output_shape=None, pads=None,
                        strides=None):  # fmt: skip
    """ConvTranspose: x (N, C, *spatial) with w (C, M/group, *kernel): one matrix product per
    group gives a column per kernel position and input position, each added into the output
    at input * stride + kernel * dilation - pad (col2im); computed in float32 (float64)."""
    n, c, *spatial = x.shape
    kernel = list(w.shape[2:])
    strides = strides or [1] * len(kernel)
    dilations = dilations or [1] * len(kernel)
    begin, size = onnx_conv_transpose_geometry(spatial, kernel, strides, dilations, pads,
                                               auto_pad, output_padding, output_shape)  # fmt: skip
    dtype = np.float64 if x.dtype == np.float64 else np.float32
    cg, mg = c // group, w.shape[1]
    wt = w.astype(dtype).reshape(group, cg, -1).transpose(0, 2, 1)
    xg = x.astype(dtype).reshape(n, group, cg, -1)
    cols = np.matmul(wt, xg).reshape(n, group * mg, int(np.prod(kernel)), *spatial)
    shift = [max(0, -p) for p in begin]
    frame = [
        max(sh + (g - 1) * s + (k - 1) * d + 1, sh + p + o)
        for sh, g, s, k, d, p, o in zip(shift, spatial, strides, kernel, dilations, begin, size)
    ]
    buf = np.zeros((n, group * mg, *frame), dtype)
    for tap, index in enumerate(np.ndindex(*kernel)):
        at = zip(shift, index, dilations, spatial, strides, strict=True)
        buf[(..., *(slice(h + k * d, h + k * d + (g - 1) * s + 1, s) for h, k, d, g, s in at))] += (
            cols[:, :, tap]
        )
    y = buf[(..., *(slice(h + p, h + p + o) for h, p, o in zip(shift, begin, size)))]
    if b is not None:
        y = y + b.astype(dtype).reshape((1, -1) + (1,) * len(size))
    return y.astype(x.dtype, copy=False)
