# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused chains: LayerNorm and RMSNorm over the rows of a matrix, in double, rounded once."""

from libc.math cimport sqrt


def norm_rows(const float[:, ::1] x, const float[::1] gamma, const float[::1] beta,
              double epsilon, bint centered, float[:, ::1] out):
    """Normalize each row of ``x`` into ``out``: ``(x - mean) / sqrt(var + epsilon)`` when
    ``centered`` (LayerNorm), ``x / sqrt(mean(x * x) + epsilon)`` when not (RMSNorm); then times
    ``gamma`` and plus ``beta`` (each one value per column, or empty: none). Every sum and product
    in double, the result rounded to float32 once."""
    cdef Py_ssize_t rows = x.shape[0], cols = x.shape[1], i, j
    cdef Py_ssize_t ng = gamma.shape[0], nb = beta.shape[0]
    cdef double mean, acc, d, inv, v
    if cols == 0:
        return
    with nogil:
        for i in range(rows):
            mean = 0.0
            if centered:
                for j in range(cols):
                    mean += x[i, j]
                mean /= cols
            acc = 0.0
            for j in range(cols):
                d = x[i, j] - mean
                acc += d * d
            inv = 1.0 / sqrt(acc / cols + epsilon)
            for j in range(cols):
                v = (x[i, j] - mean) * inv
                if ng:
                    v *= gamma[j]
                if nb:
                    v += beta[j]
                out[i, j] = <float>v
