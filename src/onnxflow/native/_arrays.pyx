# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Per-call tests on arrays that kernels make on every run: in C, where the Python took
several attribute reads, a bytes copy and a comparison per array."""

cimport numpy as cnp
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.string cimport memcmp

cnp.import_array()


cdef bint _equal(cnp.ndarray a, cnp.ndarray b) except -1:
    """Whether a and b have one shape, equivalent dtypes and the same bytes in C order."""
    cdef int rank = cnp.PyArray_NDIM(a), d
    if rank != cnp.PyArray_NDIM(b):
        return False
    for d in range(rank):
        if cnp.PyArray_DIMS(a)[d] != cnp.PyArray_DIMS(b)[d]:
            return False
    if not cnp.PyArray_EquivTypes(a.dtype, b.dtype):
        return False
    if cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_IS_C_CONTIGUOUS(b):
        return memcmp(cnp.PyArray_DATA(a), cnp.PyArray_DATA(b), cnp.PyArray_NBYTES(a)) == 0
    return a.tobytes() == b.tobytes()


def same(tuple kept, tuple now):
    """Whether the values ``now`` are those ``kept``, pairwise (as ``zip``, to the shorter):
    the same objects, or ndarrays (not subclasses) of the same shape, equivalent dtypes and the
    same bytes (bitwise: 0.0 and -0.0 differ)."""
    cdef Py_ssize_t i, n = min(PyTuple_GET_SIZE(kept), PyTuple_GET_SIZE(now))
    cdef object a, b
    for i in range(n):
        a = <object>PyTuple_GET_ITEM(kept, i)
        b = <object>PyTuple_GET_ITEM(now, i)
        if a is b:
            continue
        if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray:
            return False
        if not _equal(<cnp.ndarray>a, <cnp.ndarray>b):
            return False
    return True
