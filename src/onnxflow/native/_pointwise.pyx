# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Pointwise regions: a program of float32 elementwise instructions in one pass (_pointwise.h)."""

from libc.stdlib cimport free, malloc

cdef extern from "_pointwise.h" nogil:
    int PW_CODES
    int pw_run(int n_in, const float **inputs, const long *inner, const long *period,
               int n_ops, const int *ops, float *out, long n)

#: The instructions, by name, in the order of their codes (the header's enum).
OPCODES = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "sqrt", "reciprocal",
           "relu", "erf", "sigmoid", "clip", "half")
assert len(OPCODES) == PW_CODES


def run(const int[:, ::1] program, tuple inputs, const long[::1] inner, const long[::1] period,
        float[::1] out):
    """Run ``program`` (rows: code, operand, operand, operand; -1 for none) over ``inputs``
    (contiguous float32 buffers, each broadcast by its ``inner`` and ``period``) into ``out``."""
    cdef int n_in = len(inputs), k
    cdef const float[::1] view
    cdef const float **ptrs = <const float **>malloc(sizeof(float *) * (n_in if n_in else 1))
    cdef int failed
    if ptrs == NULL:
        raise MemoryError("pointwise region: no memory for its operand table")
    try:
        for k in range(n_in):
            view = inputs[k]
            ptrs[k] = &view[0]
        with nogil:
            failed = pw_run(n_in, ptrs, &inner[0], &period[0], program.shape[0],
                            &program[0, 0], &out[0], out.shape[0])
    finally:
        free(ptrs)
    if failed:
        raise MemoryError("pointwise region: no memory for its chunk buffers")
