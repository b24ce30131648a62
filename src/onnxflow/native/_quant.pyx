# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Linear quantization in one pass over memory: quantize, dequantize, quantize-dequantize,
the zero-point shift of an integer product's operands, and requantizing tails.

A tensor is laid out as ``(outer, channels, inner)``: the scale and zero point hold one value
per channel (per tensor: one channel). Every loop repeats the float32 operations of the NumPy
form in its order (see ``_quant.h``), so the two give the same bits.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t


cdef extern from "_quant.h" nogil:
    void q_u8(const float *x, uint8_t *y, Py_ssize_t n, float s, float z, float lo, float hi)
    void q_i8(const float *x, int8_t *y, Py_ssize_t n, float s, float z, float lo, float hi)
    void q_u8_rows(const float *x, uint8_t *y, Py_ssize_t n, const float *s, const float *z,
                   float lo, float hi)
    void q_i8_rows(const float *x, int8_t *y, Py_ssize_t n, const float *s, const float *z,
                   float lo, float hi)
    void dq_u8(const uint8_t *x, float *y, Py_ssize_t n, float s, float z)
    void dq_i8(const int8_t *x, float *y, Py_ssize_t n, float s, float z)
    void dq_u8_rows(const uint8_t *x, float *y, Py_ssize_t n, const float *s, const float *z)
    void dq_i8_rows(const int8_t *x, float *y, Py_ssize_t n, const float *s, const float *z)
    void fake_q(const float *x, float *y, Py_ssize_t n, float s, float lo, float hi)
    void fake_q_array(const float *x, float *y, Py_ssize_t n, float s, float lo, float hi)
    void fake_q_rows(const float *x, float *y, Py_ssize_t n, const float *s, const float *lo,
                     const float *hi)
    int min_max(const float *x, Py_ssize_t n, float *lo, float *hi)
    void center_u8(const uint8_t *x, float *y, Py_ssize_t n, float z)
    void center_i8(const int8_t *x, float *y, Py_ssize_t n, float z)
    void center_u8_rows(const uint8_t *x, float *y, Py_ssize_t n, const float *z)
    void center_i8_rows(const int8_t *x, float *y, Py_ssize_t n, const float *z)
    void add_exact(const float *p, int32_t *acc, Py_ssize_t n, int first)
    void widen_u8(const uint8_t *x, int16_t *y, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t w,
                  const int16_t *z, int per_row)
    void widen_i8(const int8_t *x, int16_t *y, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t w,
                  const int16_t *z, int per_row)
    void rqd_u8(const int32_t *acc, uint8_t *y, Py_ssize_t rows, Py_ssize_t n, const double *c,
                double s, double z)
    void rqd_i8(const int32_t *acc, int8_t *y, Py_ssize_t rows, Py_ssize_t n, const double *c,
                double s, double z)
    void qadd_u8(const uint8_t *a, const uint8_t *b, uint8_t *y, Py_ssize_t n, Py_ssize_t bstep,
                 float za, float zb, float ra, float rb, float zc)
    void qadd_i8(const int8_t *a, const int8_t *b, int8_t *y, Py_ssize_t n, Py_ssize_t bstep,
                 float za, float zb, float ra, float rb, float zc)
    void qmul_u8(const uint8_t *a, const uint8_t *b, uint8_t *y, Py_ssize_t n, Py_ssize_t bstep,
                 float za, float zb, float r, float zc)
    void qmul_i8(const int8_t *a, const int8_t *b, int8_t *y, Py_ssize_t n, Py_ssize_t bstep,
                 float za, float zb, float r, float zc)
    int dw_u8(const uint8_t *x, uint8_t *y, const int32_t *w, const int32_t *b, const float *s,
              float zy, int32_t zx, const Py_ssize_t *g)
    int dw_i8(const int8_t *x, int8_t *y, const int32_t *w, const int32_t *b, const float *s,
              float zy, int32_t zx, const Py_ssize_t *g)
    void int_gemv(const int16_t *rows, const int16_t *x, int32_t *acc, Py_ssize_t M,
                  Py_ssize_t K, Py_ssize_t w)
    int pixel_u8(const uint8_t *x, uint8_t *y, const int16_t *rows, const int32_t *b,
                 const float *s, float zy, int16_t zx, Py_ssize_t images, Py_ssize_t M,
                 Py_ssize_t K, Py_ssize_t w)
    int pixel_i8(const int8_t *x, int8_t *y, const int16_t *rows, const int32_t *b,
                 const float *s, float zy, int16_t zx, Py_ssize_t images, Py_ssize_t M,
                 Py_ssize_t K, Py_ssize_t w)
    int igemm_available()
    int igemm_vnni
    void igemm(const int32_t *A, const int16_t *B, int32_t *C, Py_ssize_t M, Py_ssize_t panels,
               Py_ssize_t P, Py_ssize_t ldc)
    int IGEMM_PANEL
    void pack_pairs(const int16_t *rows, int16_t *out, Py_ssize_t K, Py_ssize_t P,
                    Py_ssize_t panels, Py_ssize_t pairs)
    void rq_u8(const int32_t *acc, uint8_t *y, Py_ssize_t n, int32_t b, float s, float z,
               float lo, float hi)
    void rq_i8(const int32_t *acc, int8_t *y, Py_ssize_t n, int32_t b, float s, float z,
               float lo, float hi)


def quantize_u8(const float[::1] x, uint8_t[::1] y, const float[::1] s, const float[::1] z,
                Py_ssize_t outer, Py_ssize_t inner):
    """``y = clip(rint(x / s) + z, 0, 255)``, s and z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = s.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                q_u8_rows(&x[at], &y[at], channels, &s[0], &z[0], 0, 255)
                at += channels
                continue
            for c in range(channels):
                q_u8(&x[at], &y[at], inner, s[c], z[c], 0, 255)
                at += inner


def quantize_i8(const float[::1] x, int8_t[::1] y, const float[::1] s, const float[::1] z,
                Py_ssize_t outer, Py_ssize_t inner):
    """``y = clip(rint(x / s) + z, -128, 127)``, s and z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = s.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                q_i8_rows(&x[at], &y[at], channels, &s[0], &z[0], -128, 127)
                at += channels
                continue
            for c in range(channels):
                q_i8(&x[at], &y[at], inner, s[c], z[c], -128, 127)
                at += inner


def quantize_tensor(const float[::1] x, object y, float s, float z):
    """``y = clip(rint(x / s) + z)`` to y's type (uint8 or int8), one scale and zero point."""
    cdef uint8_t[::1] yu
    cdef int8_t[::1] yi
    cdef Py_ssize_t n = x.shape[0]
    if y.dtype.char == "B":
        yu = y
        with nogil:
            q_u8(&x[0], &yu[0], n, s, z, 0, 255)
    else:
        yi = y
        with nogil:
            q_i8(&x[0], &yi[0], n, s, z, -128, 127)


def dequantize_tensor(object x, float[::1] y, float s, float z):
    """``y = float(x - z) * s`` from x (uint8 or int8), one scale and zero point."""
    cdef const uint8_t[::1] xu
    cdef const int8_t[::1] xi
    cdef Py_ssize_t n = y.shape[0]
    if x.dtype.char == "B":
        xu = x
        with nogil:
            dq_u8(&xu[0], &y[0], n, s, z)
    else:
        xi = x
        with nogil:
            dq_i8(&xi[0], &y[0], n, s, z)


def center_tensor(object x, float[::1] y, float z):
    """``y = float(x - z)`` from x (uint8 or int8), one zero point."""
    cdef const uint8_t[::1] xu
    cdef const int8_t[::1] xi
    cdef Py_ssize_t n = y.shape[0]
    if x.dtype.char == "B":
        xu = x
        with nogil:
            center_u8(&xu[0], &y[0], n, z)
    else:
        xi = x
        with nogil:
            center_i8(&xi[0], &y[0], n, z)


def dequantize_u8(const uint8_t[::1] x, float[::1] y, const float[::1] s, const float[::1] z,
                  Py_ssize_t outer, Py_ssize_t inner):
    """``y = float(x - z) * s``, s and z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = s.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                dq_u8_rows(&x[at], &y[at], channels, &s[0], &z[0])
                at += channels
                continue
            for c in range(channels):
                dq_u8(&x[at], &y[at], inner, s[c], z[c])
                at += inner


def dequantize_i8(const int8_t[::1] x, float[::1] y, const float[::1] s, const float[::1] z,
                  Py_ssize_t outer, Py_ssize_t inner):
    """``y = float(x - z) * s``, s and z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = s.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                dq_i8_rows(&x[at], &y[at], channels, &s[0], &z[0])
                at += channels
                continue
            for c in range(channels):
                dq_i8(&x[at], &y[at], inner, s[c], z[c])
                at += inner


def fake_quantize(const float[::1] x, float[::1] y, float s, float lo, float hi):
    """``y = clip(rint(x / s), lo, hi) * s`` with scalar bounds (NumPy's scalar clip)."""
    with nogil:
        fake_q(&x[0], &y[0], x.shape[0], s, lo, hi)


def fake_quantize_axis(const float[::1] x, float[::1] y, const float[::1] s,
                       const float[::1] lo, const float[::1] hi, Py_ssize_t outer,
                       Py_ssize_t inner):
    """``y = clip(rint(x / s), lo, hi) * s``, s, lo and hi per channel of ``(outer, C,
    inner)``, clipped as NumPy clips against arrays of bounds."""
    cdef Py_ssize_t o, c, channels = s.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                fake_q_rows(&x[at], &y[at], channels, &s[0], &lo[0], &hi[0])
                at += channels
                continue
            for c in range(channels):
                fake_q_array(&x[at], &y[at], inner, s[c], lo[c], hi[c])
                at += inner


def range_of(const float[::1] x, float lo, float hi):
    """``(min(lo, x.min()), max(hi, x.max()), any NaN in x)``."""
    cdef int nan = 0
    with nogil:
        if x.shape[0]:
            nan = min_max(&x[0], x.shape[0], &lo, &hi)
    return lo, hi, bool(nan)


def center_u8_axis(const uint8_t[::1] x, float[::1] y, const float[::1] z, Py_ssize_t outer,
                   Py_ssize_t inner):
    """``y = float(x - z)``, z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = z.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                center_u8_rows(&x[at], &y[at], channels, &z[0])
                at += channels
                continue
            for c in range(channels):
                center_u8(&x[at], &y[at], inner, z[c])
                at += inner


def center_i8_axis(const int8_t[::1] x, float[::1] y, const float[::1] z, Py_ssize_t outer,
                   Py_ssize_t inner):
    """``y = float(x - z)``, z per channel of ``(outer, C, inner)``."""
    cdef Py_ssize_t o, c, channels = z.shape[0], at = 0
    with nogil:
        for o in range(outer):
            if inner == 1:
                center_i8_rows(&x[at], &y[at], channels, &z[0])
                at += channels
                continue
            for c in range(channels):
                center_i8(&x[at], &y[at], inner, z[c])
                at += inner


def accumulate(const float[::1] p, int32_t[::1] acc, bint first):
    """``acc += int32(p)`` (``acc = int32(p)`` when ``first``); p holds exact integers."""
    with nogil:
        add_exact(&p[0], &acc[0], p.shape[0], first)


def requantize_u8(const int32_t[::1] acc, uint8_t[::1] y, const int32_t[::1] b,
                  const float[::1] s, float z, Py_ssize_t outer, Py_ssize_t inner,
                  Py_ssize_t stride):
    """``y = clip(rint(float(acc + b) * s) + z, 0, 255)``, b and s per channel of ``(outer,
    C, inner)``; acc's rows are ``stride`` apart."""
    cdef Py_ssize_t o, c, channels = s.shape[0], row = 0
    with nogil:
        for o in range(outer):
            for c in range(channels):
                rq_u8(&acc[row * stride], &y[row * inner], inner, b[c], s[c], z, 0, 255)
                row += 1


def requantize_i8(const int32_t[::1] acc, int8_t[::1] y, const int32_t[::1] b,
                  const float[::1] s, float z, Py_ssize_t outer, Py_ssize_t inner,
                  Py_ssize_t stride):
    """``y = clip(rint(float(acc + b) * s) + z, -128, 127)``, b and s per channel of
    ``(outer, C, inner)``; acc's rows are ``stride`` apart."""
    cdef Py_ssize_t o, c, channels = s.shape[0], row = 0
    with nogil:
        for o in range(outer):
            for c in range(channels):
                rq_i8(&acc[row * stride], &y[row * inner], inner, b[c], s[c], z, -128, 127)
                row += 1


#: Columns per panel of a packed right operand of :func:`int_matmul` (0: no such kernel here).
PANEL = IGEMM_PANEL if igemm_available() else 0


def widen(object x, int16_t[::1] y, Py_ssize_t rows, Py_ssize_t width, const int16_t[::1] z):
    """``y[i, k] = x[i, k] - z`` as int16 for 8-bit x of ``rows`` rows, y's rows padded with
    zeros to ``width``; z holds one value, or one per row."""
    cdef const uint8_t[::1] xu
    cdef const int8_t[::1] xi
    cdef Py_ssize_t n = x.shape[0] // rows if rows else 0
    cdef int per_row = z.shape[0] > 1
    if x.dtype.char == "B":
        xu = x
        with nogil:
            widen_u8(&xu[0], &y[0], rows, n, width, &z[0], per_row)
    else:
        xi = x
        with nogil:
            widen_i8(&xi[0], &y[0], rows, n, width, &z[0], per_row)


def int_matmul(const int16_t[::1] a, const int16_t[::1] b, int32_t[::1] c, Py_ssize_t rows,
               Py_ssize_t panels, Py_ssize_t pairs):
    """``c = a @ b`` exactly in int32: a is ``rows`` rows of ``pairs`` pairs of int16, b is
    packed in ``panels`` panels of :data:`PANEL` columns, c is ``rows x panels * PANEL``."""
    if not igemm_available():
        raise RuntimeError("int_matmul needs AVX-512 (BW)")
    with nogil:
        igemm(<const int32_t *>&a[0], &b[0], &c[0], rows, panels, pairs, panels * IGEMM_PANEL)


def int_column(const int16_t[::1] a, const int16_t[::1] x, int32_t[::1] c, Py_ssize_t rows,
               Py_ssize_t width):
    """``c = a @ x`` exactly in int32 for one column x: a is ``rows`` rows of ``width`` int16
    (of which x's length are read)."""
    if a.shape[0] < rows * width or width < x.shape[0] or c.shape[0] < rows:
        raise ValueError("int_column: operands of mismatched sizes")
    with nogil:
        int_gemv(&a[0], &x[0], &c[0], rows, x.shape[0], width)


def pack(const int16_t[::1] rows, int16_t[::1] out, Py_ssize_t k, Py_ssize_t p):
    """``rows`` (k rows of p int16) packed as :func:`int_matmul`'s right operand into ``out``
    (``ceil(p / PANEL) * ceil(k / 2) * PANEL * 2`` values)."""
    cdef Py_ssize_t panels = (p + IGEMM_PANEL - 1) // IGEMM_PANEL, pairs = (k + 1) // 2
    with nogil:
        pack_pairs(&rows[0], &out[0], k, p, panels, pairs)


cdef inline Py_ssize_t _period(Py_ssize_t n, Py_ssize_t nb, Py_ssize_t inner) noexcept nogil:
    """How many elements of a one call of a binary loop covers: all of a for one value of b,
    one value's run of ``inner`` elements, else b's length (b repeats along a)."""
    if nb == 1:
        return n
    return inner if inner > 1 else nb


def qlinear_add(object a, object b, object y, float za, float zb, float ra, float rb, float zc,
                Py_ssize_t inner=1):
    """``y = saturate(rint((a - za) * ra + (b - zb) * rb) + zc)`` for 1-D uint8 or int8 a and
    y; b of one value, or repeated along a (its length divides a's), or with ``inner`` > 1 each
    of its values held for ``inner`` elements of a, b over again when it ends (a channel)."""
    cdef const uint8_t[::1] au, bu
    cdef uint8_t[::1] yu
    cdef const int8_t[::1] ai, bi
    cdef int8_t[::1] yi
    cdef Py_ssize_t o = 0, n = a.shape[0], nb = b.shape[0], j = 0
    cdef Py_ssize_t period = _period(n, nb, inner), step = 1 if nb > 1 and inner == 1 else 0
    if n == 0:
        return
    if a.dtype.char == "B":
        au, bu, yu = a, b, y
        with nogil:
            while o < n:
                qadd_u8(&au[o], &bu[j], &yu[o], period, step, za, zb, ra, rb, zc)
                o += period
                j = (j + 1) % nb if step == 0 else 0
    else:
        ai, bi, yi = a, b, y
        with nogil:
            while o < n:
                qadd_i8(&ai[o], &bi[j], &yi[o], period, step, za, zb, ra, rb, zc)
                o += period
                j = (j + 1) % nb if step == 0 else 0


def qlinear_mul(object a, object b, object y, float za, float zb, float r, float zc,
                Py_ssize_t inner=1):
    """``y = saturate(rint((a - za) * (b - zb) * r) + zc)`` for 1-D uint8 or int8 a and y; b
    laid along a as :func:`qlinear_add`'s."""
    cdef const uint8_t[::1] au, bu
    cdef uint8_t[::1] yu
    cdef const int8_t[::1] ai, bi
    cdef int8_t[::1] yi
    cdef Py_ssize_t o = 0, n = a.shape[0], nb = b.shape[0], j = 0
    cdef Py_ssize_t period = _period(n, nb, inner), step = 1 if nb > 1 and inner == 1 else 0
    if n == 0:
        return
    if a.dtype.char == "B":
        au, bu, yu = a, b, y
        with nogil:
            while o < n:
                qmul_u8(&au[o], &bu[j], &yu[o], period, step, za, zb, r, zc)
                o += period
                j = (j + 1) % nb if step == 0 else 0
    else:
        ai, bi, yi = a, b, y
        with nogil:
            while o < n:
                qmul_i8(&ai[o], &bi[j], &yi[o], period, step, za, zb, r, zc)
                o += period
                j = (j + 1) % nb if step == 0 else 0


def requantize_f64(const int32_t[::1] acc, object y, const double[::1] c, double s, double z):
    """``y[i, j] = saturate(rint(acc[i, j] * c[j] / s) + z)`` in double, into y (uint8 or
    int8) of rows of ``len(c)``."""
    cdef uint8_t[::1] yu
    cdef int8_t[::1] yi
    cdef Py_ssize_t n = c.shape[0], rows = acc.shape[0] // c.shape[0] if c.shape[0] else 0
    if y.dtype.char == "B":
        yu = y
        with nogil:
            rqd_u8(&acc[0], &yu[0], rows, n, &c[0], s, z)
    else:
        yi = y
        with nogil:
            rqd_i8(&acc[0], &yi[0], rows, n, &c[0], s, z)


def use_vnni(bint allowed):
    """Let :func:`int_matmul` use AVX512-VNNI where the CPU has it (the default), or not (so
    that a test holds the other kernel to the same results); returns the previous choice."""
    global igemm_vnni
    cdef int before = igemm_vnni
    igemm_vnni = -1 if allowed else 0
    return before != 0


def qlinear_depthwise(object x, object y, const int32_t[::1] w, const int32_t[::1] b,
                      const float[::1] s, float zy, int zx, const Py_ssize_t[::1] g,
                      Py_ssize_t images):
    """A depthwise QLinearConv of 8-bit x (``images`` images of ``g[0]`` planes, flat) into y
    of its type: per output channel, the exact int32 sums of ``x - zx`` by its taps ``w``, then
    ``clip(rint(float(sum + b) * s) + zy)``; g is the geometry (see ``_quant.h``)."""
    cdef const uint8_t[::1] xu
    cdef uint8_t[::1] yu
    cdef const int8_t[::1] xi
    cdef int8_t[::1] yi
    cdef Py_ssize_t i, x_step = g[0] * g[2] * g[3], y_step = g[0] * g[1] * g[6] * g[7]
    cdef int failed = 0
    if x.dtype.char == "B":
        xu, yu = x, y
        with nogil:
            for i in range(images):
                failed |= dw_u8(&xu[i * x_step], &yu[i * y_step], &w[0], &b[0], &s[0], zy, zx,
                                &g[0])
    else:
        xi, yi = x, y
        with nogil:
            for i in range(images):
                failed |= dw_i8(&xi[i * x_step], &yi[i * y_step], &w[0], &b[0], &s[0], zy, zx,
                                &g[0])
    if failed:
        raise MemoryError("no memory for a depthwise convolution's padded plane")


def qlinear_pixel(object x, object y, const int16_t[::1] rows, const int32_t[::1] b,
                  const float[::1] s, float zy, int zx, Py_ssize_t images, Py_ssize_t width):
    """A QLinearConv of a 1x1 kernel on ``images`` images of one pixel: x holds K 8-bit values
    per image, y M of its type, rows W's M rows less their zero points (int16, ``width``
    apart); per image ``y = clip(rint(float(rows @ (x - zx) + b) * s) + zy)``."""
    cdef const uint8_t[::1] xu
    cdef uint8_t[::1] yu
    cdef const int8_t[::1] xi
    cdef int8_t[::1] yi
    cdef Py_ssize_t k = x.shape[0] // images if images else 0
    cdef Py_ssize_t m = y.shape[0] // images if images else 0
    cdef int failed = 0
    if rows.shape[0] < m * width or width < k or b.shape[0] < m or s.shape[0] < m:
        raise ValueError("qlinear_pixel: operands of mismatched sizes")
    if images == 0:
        return
    if x.dtype.char == "B":
        xu, yu = x, y
        with nogil:
            failed = pixel_u8(&xu[0], &yu[0], &rows[0], &b[0], &s[0], zy, zx, images, m, k,
                              width)
    else:
        xi, yi = x, y
        with nogil:
            failed = pixel_i8(&xi[0], &yi[0], &rows[0], &b[0], &s[0], zy, zx, images, m, k,
                              width)
    if failed:
        raise MemoryError("no memory for a 1x1 convolution's column")
