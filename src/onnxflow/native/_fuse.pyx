# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused chains: LayerNorm and RMSNorm over the rows of a matrix, in double, rounded once
(_fuse.h)."""

cdef extern from "_fuse.h" nogil:
    void fz_norm_rows(const float *x, long rows, long cols, const float *gamma,
                      const float *beta, double epsilon, int centered, float *out)


def norm_rows(const float[:, ::1] x, const float[::1] gamma, const float[::1] beta,
              double epsilon, bint centered, float[:, ::1] out):
    """Normalize each row of ``x`` into ``out``: ``(x - mean) / sqrt(var + epsilon)`` when
    ``centered`` (LayerNorm), ``x / sqrt(mean(x * x) + epsilon)`` when not (RMSNorm); then times
    ``gamma`` and plus ``beta`` (each one value per column, or empty: none). Every sum and product
    in double, the result rounded to float32 once."""
    cdef long rows = x.shape[0], cols = x.shape[1]
    cdef const float *g = &gamma[0] if gamma.shape[0] else NULL
    cdef const float *b = &beta[0] if beta.shape[0] else NULL
    if rows == 0 or cols == 0:
        return
    with nogil:
        fz_norm_rows(&x[0, 0], rows, cols, g, b, epsilon, centered, &out[0, 0])
