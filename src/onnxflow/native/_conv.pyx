# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Direct float32 convolutions: one pass per output row, no column matrix.

Products and sums are float32 (each output summed in its own fixed order, see ``_conv.h``); the
bias, an optional addend and the activation are applied to each output row right after it is
summed. The caller (``onnxflow.ops.conv_direct``) checks shapes and attributes and computes the
output geometry; this module only runs the loop. Also the one-pass gather of an image's im2col
columns for the convolutions left to BLAS (``gather_columns_f32``).
"""

cimport numpy as cnp
from libc.stdlib cimport calloc, free

import numpy as np

cnp.import_array()

cdef object _MATMUL = np.matmul

#: The highest rank of X that :class:`ColumnsProduct` keeps.
cdef enum:
    MAX_RANK = 8

cdef extern from "_conv.h" nogil:
    enum: CONV_MAX_K
    ctypedef struct conv_geom:
        Py_ssize_t cg, h, w, kh, kw, ho, wo, sh, sw, dh, dw, ph, pw, wp, xw, lp
        int act
        float alpha, beta
    void conv_prepare(conv_geom *g)
    int conv_crosses(const conv_geom *g)
    void conv_widen(conv_geom *g)
    void conv_copy(const float *x, float *out, float *scratch, Py_ssize_t rows,
                   const conv_geom *g)
    void conv_plane_f32(const float *x, const float *w, const float *bias, const float *z,
                        float *out, const conv_geom *g, int dots)
    void conv_epilogue(float *row, const float *bias, const float *z, Py_ssize_t n,
                       const conv_geom *g)

#: The tallest kernel, and the widest one summed by taps, that the loops take.
MAX_KERNEL = CONV_MAX_K

#: The activations the loop applies, by the name FusedConv gives them: their codes.
ACTIVATIONS = {
    "Relu": 1,
    "LeakyRelu": 2,
    "Sigmoid": 3,
    "Tanh": 4,
    "HardSigmoid": 5,
    "Clip": 6,
    "HardSwish": 7,
}


def conv2d_f32(
    const float[:, :, :, ::1] x,
    const float[:, :, :, ::1] w,
    const float[::1] bias,
    const float[:, :, :, ::1] z,
    float[:, :, :, ::1] out,
    int group,
    tuple strides,
    tuple dilations,
    tuple begin,
    int act=0,
    float alpha=0,
    float beta=0,
    bint dots=False,
):
    """out (N, M, Ho, Wo) = act(conv(x (N, C, H, W), w (M, C/group, KH, KW)) + bias + z).

    ``bias``: M values, or none (length 0); ``z``: an addend shaped as out, or None. ``begin``:
    the pads before each axis (after each, the output size says how far windows reach).
    ``dots``: sum each output as dot products over kernel rows (kernel columns of dilation 1).
    """
    cdef conv_geom g
    cdef Py_ssize_t n, m, grp
    cdef Py_ssize_t batch = out.shape[0], channels = out.shape[1], per_group = channels // group
    cdef const float *src
    cdef const float *b = NULL
    cdef const float *zp = NULL
    cdef float *copy = NULL
    cdef int by_dots = dots
    cdef bint copied
    cdef bint has_z = z is not None
    g.cg, g.h, g.w = w.shape[1], x.shape[2], x.shape[3]
    g.kh, g.kw, g.ho, g.wo = w.shape[2], w.shape[3], out.shape[2], out.shape[3]
    g.sh, g.sw = strides
    g.dh, g.dw = dilations
    g.ph, g.pw = begin
    g.act, g.alpha, g.beta = act, alpha, beta
    _check(x, w, bias, z, out, group, g, by_dots)
    if batch == 0 or channels == 0 or g.ho * g.wo == 0:
        return
    g.xw, g.lp = g.w, 0
    copied = not by_dots and (g.sw > 1 or conv_crosses(&g))
    if copied:
        conv_widen(&g)  # the loop reads a zero-padded, phased copy: every window inside
    conv_prepare(&g)
    if copied:
        copy = <float *>calloc(g.cg * g.h * g.sw * g.wp + g.w, sizeof(float))
        if copy == NULL:
            raise MemoryError()
    with nogil:
        for n in range(batch):
            for grp in range(group):
                src = &x[n, grp * g.cg, 0, 0]
                if copy != NULL:
                    conv_copy(src, copy, copy + g.cg * g.h * g.sw * g.wp, g.cg * g.h, &g)
                    src = copy
                for m in range(grp * per_group, (grp + 1) * per_group):
                    if bias.shape[0]:
                        b = &bias[m]
                    if has_z:
                        zp = &z[n, m, 0, 0]
                    conv_plane_f32(src, &w[m, 0, 0, 0], b, zp, &out[n, m, 0, 0], &g, by_dots)
    free(copy)


cdef _check(x, w, bias, z, out, int group, conv_geom g, int dots):
    """Raise ValueError unless the arrays and the geometry agree."""
    if x.shape[0] != out.shape[0] or x.shape[1] != g.cg * group or w.shape[0] != out.shape[1]:
        raise ValueError("conv2d_f32: x, w and out do not agree")
    if group <= 0 or out.shape[1] % group or x.shape[2] * x.shape[3] == 0:
        raise ValueError("conv2d_f32: bad group, or an empty input")
    if g.kh > CONV_MAX_K or (not dots and g.kw > CONV_MAX_K) or (dots and g.dw != 1):
        raise ValueError("conv2d_f32: kernel too large, or dots with a dilated kernel row")
    if min(g.sh, g.sw, g.dh, g.dw) < 1 or min(g.ph, g.pw) < 0:
        raise ValueError("conv2d_f32: strides and dilations must be >= 1, pads >= 0")
    if bias.shape[0] not in (0, out.shape[1]):
        raise ValueError("conv2d_f32: bias must have one value per output channel, or none")
    if z is not None and z.shape[:4] != out.shape[:4]:
        raise ValueError("conv2d_f32: z must have the output's shape")


def epilogue_f32(
    float[:, :, ::1] y,
    const float[::1] bias,
    const float[:, :, ::1] z,
    int act=0,
    float alpha=0,
    float beta=0,
):
    """y (N, M, P) = act(y + bias + z) in place, in one pass: the loop's epilogue, for a
    convolution computed elsewhere (``bias``: M values or none; ``z``: y's shape, or None)."""
    cdef conv_geom g
    cdef Py_ssize_t n, m
    cdef const float *b = NULL
    cdef const float *zp = NULL
    cdef bint has_z = z is not None
    g.act, g.alpha, g.beta = act, alpha, beta
    if bias.shape[0] not in (0, y.shape[1]):
        raise ValueError("epilogue_f32: bias must have one value per output channel, or none")
    if has_z and (
        z.shape[0] != y.shape[0] or z.shape[1] != y.shape[1] or z.shape[2] != y.shape[2]
    ):
        raise ValueError("epilogue_f32: z must have y's shape")
    if y.shape[2] == 0:
        return
    with nogil:
        for n in range(y.shape[0]):
            for m in range(y.shape[1]):
                if bias.shape[0]:
                    b = &bias[m]
                if has_z:
                    zp = &z[n, m, 0]
                conv_epilogue(&y[n, m, 0], b, zp, y.shape[2], &g)


def gather_columns_f32(const float[::1] x, const Py_ssize_t[::1] index, float[::1] out):
    """out[i] = x[index[i]], and 0 where index[i] is len(x) (a window on the padding): an
    image's im2col columns by their flat positions in one pass, the copy NumPy's take makes
    from x with a zero after it. Raises ValueError for another index out of range."""
    cdef Py_ssize_t i, j, n = x.shape[0], count = index.shape[0]
    if out.shape[0] != count:
        raise ValueError("gather_columns_f32: out must have one value per index")
    for i in range(count):
        j = index[i]
        if <size_t>j < <size_t>n:
            out[i] = x[j]
        elif j == n:
            out[i] = 0
        else:
            raise ValueError(f"gather_columns_f32: index {j} outside 0..{n}")


cdef class ColumnsProduct:
    """A float32 convolution of one image run as one GEMM over its im2col columns, made once
    for an X shape, W and B (W and B compared by identity): ``(x, w, b, z)`` gathers the
    columns (as :func:`gather_columns_f32`; a pointwise one reads X's rows), calls NumPy's
    matmul of W's rows by them (the NumPy form's very call) and adds the bias and applies the
    activation in one pass (as :func:`epilogue_f32`), in one call from Python. It returns None
    for any other X (shape, dtype, layout), W, B, or an addend Z: the caller runs its own path.
    """

    cdef Py_ssize_t rank, n_x, m, p
    cdef Py_ssize_t dims[MAX_RANK]
    cdef object w, b, wm
    cdef cnp.ndarray index  # flat positions in X (n_x: a zero), or None: pointwise
    cdef cnp.ndarray bias  # M float32 values, or None
    cdef tuple cols_shape, out_shape
    cdef conv_geom g

    def __init__(
        self,
        tuple x_shape,
        w,
        b,
        index,
        wm,
        bias,
        tuple out_shape,
        int act=0,
        float alpha=0,
        float beta=0,
    ):
        """``index``: the (C*K, P) column index (None: pointwise); ``wm``: W's (M, C*K) rows;
        ``bias``: M float32 values or None; ``out_shape``: Y's, M*P values."""
        cdef Py_ssize_t i, n = 1
        if len(x_shape) > MAX_RANK or len(x_shape) < 3:
            raise ValueError(f"ColumnsProduct: X of rank {len(x_shape)}, expected 3..{MAX_RANK}")
        self.rank = len(x_shape)
        for i in range(self.rank):
            self.dims[i] = x_shape[i]
            n *= x_shape[i]
        self.n_x, self.w, self.b, self.wm = n, w, b, wm
        self.m = wm.shape[0]
        if index is None:
            self.index = None
            self.cols_shape = (x_shape[1], n // x_shape[1])
        else:
            flat = np.ascontiguousarray(index, np.intp).reshape(-1)
            if flat.size and (flat.min() < 0 or flat.max() > n):
                raise ValueError(f"ColumnsProduct: an index outside 0..{n}")
            self.index, self.cols_shape = flat, tuple(index.shape)
        self.p = self.cols_shape[1]
        if bias is not None and (bias.dtype != np.float32 or bias.shape != (self.m,)):
            raise ValueError(f"ColumnsProduct: bias must be {self.m} float32 values, or None")
        self.bias = None if bias is None else np.ascontiguousarray(bias)
        if self.m * self.p != np.prod(out_shape, dtype=np.intp):
            raise ValueError(f"ColumnsProduct: Y's shape {out_shape} is not M * P values")
        self.out_shape = out_shape
        self.g.act, self.g.alpha, self.g.beta = act, alpha, beta

    def __call__(self, x, w, b=None, z=None):
        """Y, or None when this product was not made for these operands."""
        if z is not None or w is not self.w or b is not self.b or type(x) is not cnp.ndarray:
            return None
        cdef cnp.ndarray xa = <cnp.ndarray>x
        cdef Py_ssize_t i
        if (cnp.PyArray_TYPE(xa) != cnp.NPY_FLOAT32 or not cnp.PyArray_ISNOTSWAPPED(xa)
                or not cnp.PyArray_IS_C_CONTIGUOUS(xa) or cnp.PyArray_NDIM(xa) != self.rank):
            return None
        cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(xa)
        for i in range(self.rank):
            if dims[i] != self.dims[i]:
                return None
        cols = self._columns(xa)
        y = _MATMUL(self.wm, cols)
        self._epilogue(<cnp.ndarray>y)
        return cnp.PyArray_Reshape(<cnp.ndarray>y, self.out_shape)

    cdef object _columns(self, cnp.ndarray xa):
        """X's columns: its rows viewed (pointwise), or gathered, a zero past X's end."""
        if self.index is None:
            return cnp.PyArray_Reshape(xa, self.cols_shape)
        cols = np.empty(self.cols_shape, np.float32)
        cdef const float *px = <const float *>cnp.PyArray_DATA(xa)
        cdef float *pc = <float *>cnp.PyArray_DATA(<cnp.ndarray>cols)
        cdef const Py_ssize_t *pi = <const Py_ssize_t *>cnp.PyArray_DATA(self.index)
        cdef Py_ssize_t i, j, n = self.n_x, count = cnp.PyArray_SIZE(self.index)
        with nogil:
            for i in range(count):
                j = pi[i]
                pc[i] = px[j] if j < n else 0
        return cols

    cdef void _epilogue(self, cnp.ndarray y):
        """y (M, P) = act(y + bias) in place, row by row (nothing to do: nothing done)."""
        cdef float *py = <float *>cnp.PyArray_DATA(y)
        cdef const float *pb = NULL
        cdef Py_ssize_t r
        if self.bias is not None:
            pb = <const float *>cnp.PyArray_DATA(self.bias)
        elif self.g.act == 0:
            return
        with nogil:
            for r in range(self.m):
                conv_epilogue(py + r * self.p, NULL if pb == NULL else pb + r, NULL, self.p,
                              &self.g)
