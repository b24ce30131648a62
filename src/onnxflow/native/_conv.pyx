# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Direct float32 convolutions: one pass per output row, no column matrix.

Products and sums are float32 (each output summed in its own fixed order, see ``_conv.h``); the
bias, an optional addend and the activation are applied to each output row right after it is
summed. The caller (``onnxflow.ops.conv_direct``) checks shapes and attributes and computes the
output geometry; this module only runs the loop. Also the one-pass gather of an image's im2col
columns for the convolutions left to BLAS (``gather_columns_f32``).
"""

from libc.stdlib cimport calloc, free

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
