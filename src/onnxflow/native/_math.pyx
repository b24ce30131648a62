# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Float math in one pass: each float32 result computed in double and rounded once.

The loops are in ``_mathkern.h`` (vectorizable: no branch and no libm call in an inner loop,
AVX-512, AVX2 or baseline chosen at load time). Buffers are contiguous and one-dimensional;
``h`` is a row's length where a loop works by rows (a bias of ``h`` values, a softmax row).
"""

cdef extern from "<math.h>" nogil:
    double erf(double)

ctypedef void (*Elementwise)(const float*, const float*, float*, long, long, double) noexcept nogil

cdef extern from "_mathkern.h" nogil:
    void of_erf_f32(const float*, const float*, float*, long, long, double)
    void of_sigmoid_f32(const float*, const float*, float*, long, long, double)
    void of_swish_f32(const float*, const float*, float*, long, long, double)
    void of_gelu_f32(const float*, const float*, float*, long, long, double)
    void of_gelu_tanh_f32(const float*, const float*, float*, long, long, double)
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


def erf_f64(const double[::1] x, double[::1] out):
    """out[i] = erf(x[i]) (libm's double erf)."""
    cdef Py_ssize_t i, n = x.shape[0]
    with nogil:
        for i in range(n):
            out[i] = erf(x[i])
