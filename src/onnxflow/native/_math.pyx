# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Float math in one pass: each result computed in double and rounded once to the output type."""

cdef extern from "<math.h>" nogil:
    double erf(double)


def erf_f32(const float[::1] x, float[::1] out):
    """out[i] = erf(x[i]), in double, rounded once (x and out may be the same array)."""
    cdef Py_ssize_t i, n = x.shape[0]
    with nogil:
        for i in range(n):
            out[i] = <float>erf(<double>x[i])


def erf_f64(const double[::1] x, double[::1] out):
    """out[i] = erf(x[i]) (libm's double erf)."""
    cdef Py_ssize_t i, n = x.shape[0]
    with nogil:
        for i in range(n):
            out[i] = erf(x[i])
