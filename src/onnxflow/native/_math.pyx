# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Float math in one pass: each float32 result computed in double and rounded once.

The loops are in ``_mathkern.h`` (vectorizable: no branch and no libm call in an inner loop,
AVX-512, AVX2 or baseline chosen at load time). Buffers are contiguous and one-dimensional;
``h`` is a row's length where a loop works by rows (a bias of ``h`` values, a softmax row).
"""

cimport numpy as cnp

cnp.import_array()

cdef extern from "<math.h>" nogil:
    double erf(double)

ctypedef void (*Elementwise)(const float*, const float*, float*, long, long, double) noexcept nogil

cdef extern from "_mathkern.h" nogil:
    void of_erf_f32(const float*, const float*, float*, long, long, double)
    void of_sigmoid_f32(const float*, const float*, float*, long, long, double)
    void of_swish_f32(const float*, const float*, float*, long, long, double)
    void of_gelu_f32(const float*, const float*, float*, long, long, double)
    void of_gelu_tanh_f32(const float*, const float*, float*, long, long, double)
    void of_small_power_f32(const float*, float*, long, int)
    int of_softmax_f32(const float*, float*, long, long, int)
    int of_norm_f32(const float*, const float*, long, const float*, const float*, const float*,
                    float*, float*, float*, float*, long, long, double, int)


cdef void _run(Elementwise fn, const float[::1] x, const float[::1] bias, float[::1] out,
               double alpha):
    """out = f(x (+ bias, repeated over rows of bias's length)) through ``fn``."""
    cdef Py_ssize_t n = x.shape[0]
    cdef long h = n if bias is None else bias.shape[0]
    if n == 0 or h == 0:
        return
    if out.shape[0] != n or n % h:
        raise ValueError("buffer sizes do not match")
    cdef const float *b = NULL
    if bias is not None:
        b = &bias[0]
    with nogil:
        fn(&x[0], b, &out[0], n // h, h, alpha)


def erf_f32(const float[::1] x, float[::1] out):
    """out = erf(x) (x and out may be the same array)."""
    _run(of_erf_f32, x, None, out, 0.0)


def sigmoid_f32(const float[::1] x, float[::1] out):
    """out = 1 / (1 + exp(-x))."""
    _run(of_sigmoid_f32, x, None, out, 0.0)


def swish_f32(const float[::1] x, float[::1] out, double alpha):
    """out = x / (1 + exp(-alpha x))."""
    _run(of_swish_f32, x, None, out, alpha)


def gelu_f32(const float[::1] x, const float[::1] bias, float[::1] out):
    """out = v * Phi(v), v = x + bias (bias None: v = x; else repeated over rows)."""
    _run(of_gelu_f32, x, bias, out, 0.0)


def gelu_tanh_f32(const float[::1] x, const float[::1] bias, float[::1] out):
    """out = v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) / 2, v as in :func:`gelu_f32`."""
    _run(of_gelu_tanh_f32, x, bias, out, 0.0)


def softmax_f32(const float[::1] x, float[::1] out, long h, bint log_form):
    """Softmax (or LogSoftmax) over each row of ``h`` values."""
    cdef Py_ssize_t n = x.shape[0]
    cdef int status
    if n == 0 or h == 0:
        return
    if out.shape[0] != n or n % h:
        raise ValueError("buffer sizes do not match")
    with nogil:
        status = of_softmax_f32(&x[0], &out[0], n // h, h, log_form)
    if status:
        raise MemoryError()


cdef const float *_ptr(const float[::1] a):
    if a is None or a.shape[0] == 0:
        return NULL
    return &a[0]


cdef float *_out(float[::1] a):
    return NULL if a is None or a.shape[0] == 0 else &a[0]


def norm_f32(const float[::1] x, const float[::1] skip, const float[::1] bias,
             const float[::1] gamma, const float[::1] beta, float[::1] y, float[::1] mean,
             float[::1] inv, float[::1] total, double epsilon, bint rms):
    """Layer norm (RMS norm if ``rms``) of each row of s = x + skip + bias, rows of gamma's
    length: y = (s - mean) * inv * gamma + beta; ``mean``, ``inv`` (per row) and ``total`` (s)
    written when given. skip, bias, beta may be None; skip's rows repeat over x's."""
    cdef Py_ssize_t n = x.shape[0]
    cdef long h = gamma.shape[0]
    cdef long skip_rows = 1 if skip is None else skip.shape[0] // h if h else 1
    cdef int status
    if n == 0 or h == 0:
        return
    if y.shape[0] != n or n % h or (skip is not None and (skip_rows == 0 or skip.shape[0] % h)):
        raise ValueError("buffer sizes do not match")
    cdef const float *k = _ptr(skip)
    cdef const float *b = _ptr(bias)
    cdef const float *c = _ptr(beta)
    cdef float *m = _out(mean)
    cdef float *v = _out(inv)
    cdef float *t = _out(total)
    with nogil:
        status = of_norm_f32(&x[0], k, skip_rows, b, &gamma[0], c, &y[0], m, v, t, n // h, h,
                             epsilon, rms)
    if status:
        raise MemoryError()


cdef inline bint _f32(object a):
    """Whether ``a`` is an ndarray of native float32."""
    return (cnp.PyArray_Check(a) and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_FLOAT32
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a))


cdef bint _fits(object p, cnp.ndarray x, int first):
    """Whether ``p`` is None or a float32 array shaped as x's dims [first, rank)."""
    if p is None:
        return True
    if not _f32(p) or cnp.PyArray_NDIM(<cnp.ndarray>p) != cnp.PyArray_NDIM(x) - first:
        return False
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>p)
    cdef cnp.npy_intp *tail = cnp.PyArray_DIMS(x) + first
    cdef int d
    for d in range(cnp.PyArray_NDIM(x) - first):
        if dims[d] != tail[d]:
            return False
    return True


cdef const float *_data(object a):
    """The float32 data of contiguous ``a`` (NULL for None)."""
    return NULL if a is None else <const float *>cnp.PyArray_DATA(<cnp.ndarray>a)


cdef inline object _contiguous(object a):
    return a if a is None or cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a) else (
        cnp.PyArray_GETCONTIGUOUS(<cnp.ndarray>a))


def norm_rows(object x, object gamma, object beta, long axis, double epsilon, bint rms):
    """(Y, Mean, InvStdDev) of LayerNormalization (RMSNormalization if ``rms``: Mean 0) over
    the rows [axis, rank) of x by :func:`norm_f32`, ``epsilon`` rounded to float32 first, the
    statistics float32 shaped as x with those axes 1; the checks and allocations here, in C.
    None when the loop does not take these inputs (x not a float32 array, empty or with
    ``axis`` out of range; gamma, or beta when given, not float32 shaped as those axes)."""
    if not _f32(x):
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef int rank = cnp.PyArray_NDIM(xa), d
    cdef long first = axis + rank if axis < 0 else axis
    if first < 0 or first >= rank or cnp.PyArray_SIZE(xa) == 0:
        return None
    if gamma is None or not _fits(gamma, xa, first) or not _fits(beta, xa, first):
        return None
    cdef cnp.npy_intp stat[64]
    cdef cnp.npy_intp h = 1
    for d in range(rank):
        stat[d] = cnp.PyArray_DIMS(xa)[d] if d < first else 1
        if d >= first:
            h *= cnp.PyArray_DIMS(xa)[d]
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(rank, cnp.PyArray_DIMS(xa), cnp.NPY_FLOAT32, 0)
    cdef cnp.ndarray mean = cnp.PyArray_EMPTY(rank, stat, cnp.NPY_FLOAT32, 0)
    cdef cnp.ndarray inv = cnp.PyArray_EMPTY(rank, stat, cnp.NPY_FLOAT32, 0)
    x, gamma, beta = _contiguous(x), _contiguous(gamma), _contiguous(beta)
    cdef cnp.npy_intp n = cnp.PyArray_SIZE(xa)
    cdef int status
    cdef const float *px = _data(x)
    cdef const float *pg = _data(gamma)
    cdef const float *pb = _data(beta)
    with nogil:
        status = of_norm_f32(px, NULL, 1, NULL, pg, pb, <float *>cnp.PyArray_DATA(y),
                             <float *>cnp.PyArray_DATA(mean), <float *>cnp.PyArray_DATA(inv),
                             NULL, n // h, h, <double><float>epsilon, rms)
    if status:
        raise MemoryError()
    return y, mean, inv


def softmax_rows(object x, long axis, bint coerced, bint log_form):
    """Softmax (LogSoftmax if ``log_form``) of float32 x by :func:`softmax_f32`, its checks and
    its output in C: over the last axis (``axis`` must name it), or, when ``coerced`` (x
    coerced to 2-D, before opset 13), over every axis from ``axis`` on. None when the loop does
    not take x (not a non-empty float32 array of rank 1 or more, or another axis)."""
    if not _f32(x):
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef int rank = cnp.PyArray_NDIM(xa), d
    cdef cnp.npy_intp n = cnp.PyArray_SIZE(xa), h = 1
    if rank == 0 or n == 0:
        return None
    if not coerced:
        if axis != -1 and axis != rank - 1:
            return None
        h = cnp.PyArray_DIMS(xa)[rank - 1]
    else:
        if axis < -rank or axis > rank:
            return None
        for d in range(axis + rank if axis < 0 else axis, rank):
            h *= cnp.PyArray_DIMS(xa)[d]
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(rank, cnp.PyArray_DIMS(xa), cnp.NPY_FLOAT32, 0)
    x = _contiguous(x)
    cdef const float *px = _data(x)
    cdef int status
    with nogil:
        status = of_softmax_f32(px, <float *>cnp.PyArray_DATA(out), n // h, h, log_form)
    if status:
        raise MemoryError()
    return out


def small_power(object x, object y):
    """x ** y for float32 x and a one-element exponent y holding -4, -3, -2, 3 or 4 (of rank
    at most x's, so the result has x's shape), as Pow's NumPy form (``_small_power``) computes
    it; None for other inputs."""
    if not _f32(x) or not cnp.PyArray_Check(y):
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x, ya = <cnp.ndarray>y
    if (cnp.PyArray_SIZE(ya) != 1 or cnp.PyArray_NDIM(ya) > cnp.PyArray_NDIM(xa)
            or not (cnp.PyArray_ISINTEGER(ya) or cnp.PyArray_ISFLOAT(ya))):
        return None
    cdef double v = ya.item()
    if v not in (-4.0, -3.0, -2.0, 3.0, 4.0):
        return None
    cdef int n = <int>v
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(xa), cnp.PyArray_DIMS(xa),
                                             cnp.NPY_FLOAT32, 0)
    x = _contiguous(x)
    cdef const float *px = _data(x)
    with nogil:
        of_small_power_f32(px, <float *>cnp.PyArray_DATA(out), cnp.PyArray_SIZE(out), n)
    return out


def sigmoid(object x):
    """1 / (1 + exp(-x)) for an ndarray of native float32 (:func:`sigmoid_f32`'s values) in a
    new array of x's shape, the checks and allocation in C; None for other inputs."""
    if not _f32(x):
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(xa), cnp.PyArray_DIMS(xa),
                                             cnp.NPY_FLOAT32, 0)
    cdef long n = cnp.PyArray_SIZE(out)
    x = _contiguous(x)
    cdef const float *px = _data(x)
    if n:
        with nogil:
            of_sigmoid_f32(px, NULL, <float *>cnp.PyArray_DATA(out), 1, n, 0.0)
    return out


def relu(object x, object out, Py_ssize_t limit):
    """max(x, 0) for an ndarray of native float32 of at most ``limit`` elements, as
    ``np.maximum(x, 0)`` gives it (a NaN kept, -0.0 made +0.0), into ``out``: None for a new
    array of x's shape, or x itself (C-ordered and writable) for in place; the checks, the array
    and the pass in one call. None for other inputs."""
    if not _f32(x) or cnp.PyArray_SIZE(<cnp.ndarray>x) > limit:
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x, oa
    if out is None:
        oa = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(xa), cnp.PyArray_DIMS(xa), cnp.NPY_FLOAT32, 0)
        x = _contiguous(x)
    elif out is not x or not cnp.PyArray_IS_C_CONTIGUOUS(xa) or not cnp.PyArray_ISWRITEABLE(xa):
        return None
    else:
        oa = xa
    cdef const float *px = _data(x)
    cdef float *po = <float *>cnp.PyArray_DATA(oa)
    cdef Py_ssize_t i, n = cnp.PyArray_SIZE(oa)
    cdef float v
    with nogil:
        for i in range(n):
            v = px[i]
            po[i] = v if (v > 0 or v != v) else 0
    return oa


def erf_f64(const double[::1] x, double[::1] out):
    """out[i] = erf(x[i]) (libm's double erf)."""
    cdef Py_ssize_t i, n = x.shape[0]
    with nogil:
        for i in range(n):
            out[i] = erf(x[i])


cdef float _pairwise_sum(const float *a, Py_ssize_t n) noexcept nogil:
    """NumPy's float32 pairwise sum of a[0:n] (umath's ``FLOAT_pairwise_sum``): under 8 in
    order, up to 128 in eight interleaved partial sums then the tail, above 128 the two halves
    (the first a multiple of 8) summed apart; the same order, so the same bits."""
    cdef Py_ssize_t i, n2
    cdef float res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        res = 0.0
        for i in range(n):
            res = res + a[i]
        return res
    if n <= 128:
        r0 = a[0]; r1 = a[1]; r2 = a[2]; r3 = a[3]
        r4 = a[4]; r5 = a[5]; r6 = a[6]; r7 = a[7]
        i = 8
        while i < n - (n % 8):
            r0 += a[i]; r1 += a[i + 1]; r2 += a[i + 2]; r3 += a[i + 3]
            r4 += a[i + 4]; r5 += a[i + 5]; r6 += a[i + 6]; r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res = res + a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(a, n2) + _pairwise_sum(a + n2, n - n2)


def row_means_f32(const float[::1] x, float[::1] out, bint wide=False):
    """out[r] = the mean of row r of x (rows of len(x) // len(out) values) as NumPy's ``mean``
    gives it for a float32 row: the pairwise sum added to 0, then divided in float32; with
    ``wide``, as ReduceMean's NumPy form gives it under NumPy 2's promotion: that float32 sum
    divided by the count in double, rounded once to float32."""
    cdef Py_ssize_t rows = out.shape[0], n = x.shape[0] // rows if rows else 0
    if rows == 0:
        return
    if n * rows != x.shape[0] or n == 0:
        raise ValueError("buffer sizes do not match")
    with nogil:
        _row_means(&x[0], &out[0], rows, n, wide)


cdef void _row_means(const float *x, float *out, Py_ssize_t rows, Py_ssize_t n,
                     bint wide) noexcept nogil:
    """:func:`row_means_f32` over ``rows`` rows of ``n`` values."""
    cdef Py_ssize_t r
    cdef float count = <float>n, zero = 0.0
    cdef double wide_count = <double>n
    for r in range(rows):
        if wide:
            out[r] = <float>(<double>(zero + _pairwise_sum(&x[r * n], n)) / wide_count)
        else:
            out[r] = (zero + _pairwise_sum(&x[r * n], n)) / count


def last_axis_means(object x, object axes, bint keep, bint wide):
    """ReduceMean over the last axis alone of a C-ordered float32 ndarray (rank 1 and up, that
    axis not empty) whose ``axes`` attribute (a list or tuple) names that axis alone, by
    :func:`row_means_f32`, into a new array (the axis kept as 1 with ``keep``): the checks, the
    array and the pass in one call; None for other inputs."""
    if type(x) is not cnp.ndarray or not _f32(x) or type(axes) not in (list, tuple):
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef int rank = cnp.PyArray_NDIM(xa)
    if rank == 0 or rank > 32 or len(axes) != 1 or type(axes[0]) is not int:
        return None
    cdef long axis = axes[0]
    if (axis if axis >= 0 else axis + rank) != rank - 1 or not cnp.PyArray_IS_C_CONTIGUOUS(xa):
        return None
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(xa)
    cdef cnp.npy_intp n = dims[rank - 1], shape[32]
    if n == 0:
        return None
    cdef int d
    for d in range(rank - 1):
        shape[d] = dims[d]
    shape[rank - 1] = 1
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(rank if keep else rank - 1, shape,
                                             cnp.NPY_FLOAT32, 0)
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(out)
    with nogil:
        _row_means(<const float *>cnp.PyArray_DATA(xa), <float *>cnp.PyArray_DATA(out), rows,
                   n, wide)
    return out
