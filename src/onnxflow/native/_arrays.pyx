# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Per-call tests on arrays that kernels make on every run: in C, where the Python took
several attribute reads, a bytes copy and a comparison per array."""

cimport numpy as cnp
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.string cimport memcmp

from inspect import signature

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
    the same objects, equal tuples (shapes), or ndarrays (not subclasses) of the same shape,
    equivalent dtypes and the same bytes (bitwise: 0.0 and -0.0 differ)."""
    cdef Py_ssize_t i, n = min(PyTuple_GET_SIZE(kept), PyTuple_GET_SIZE(now))
    cdef object a, b
    for i in range(n):
        a = <object>PyTuple_GET_ITEM(kept, i)
        b = <object>PyTuple_GET_ITEM(now, i)
        if a is b:
            continue
        if type(a) is tuple and type(b) is tuple:  # shapes (a memo's inputs taken by shape)
            if a != b:
                return False
            continue
        if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray:
            return False
        if not _equal(<cnp.ndarray>a, <cnp.ndarray>b):
            return False
    return True


cdef class Reshape:
    """Reshape's compiled form: ``data`` (an ndarray, not a subclass) reshaped in C when
    ``shape`` is a one-dimensional int64 ndarray of dims that are positive but for at most one
    -1 (inferred): the NumPy form's ``data.reshape(dims)`` view; other inputs (zeros, which copy
    or keep a dim by ``allowzero``, errors to report) go to ``fallback``, the NumPy form."""

    cdef readonly object fallback
    cdef object signature

    def __init__(self, fallback):
        self.fallback = fallback
        self.signature = signature(fallback)

    @property
    def __signature__(self):
        """The fallback's signature (the attributes a node may bind)."""
        return self.signature

    def __call__(self, data, shape, *, allowzero=0):
        if (type(data) is not cnp.ndarray or type(shape) is not cnp.ndarray
                or cnp.PyArray_NDIM(<cnp.ndarray>shape) != 1
                or cnp.PyArray_TYPE(<cnp.ndarray>shape) != cnp.NPY_INT64
                or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>shape)
                or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>shape)
                or cnp.PyArray_SIZE(<cnp.ndarray>shape) > 64):
            return self.fallback(data, shape, allowzero=allowzero)
        cdef cnp.npy_intp dims[64]
        cdef int rank = <int>cnp.PyArray_SIZE(<cnp.ndarray>shape), d, inferred = 0
        cdef const cnp.int64_t *values = <const cnp.int64_t *>cnp.PyArray_DATA(<cnp.ndarray>shape)
        for d in range(rank):
            if values[d] == -1:
                inferred += 1
            elif values[d] <= 0:
                return self.fallback(data, shape, allowzero=allowzero)
            dims[d] = <cnp.npy_intp>values[d]
        if inferred > 1:
            return self.fallback(data, shape, allowzero=allowzero)
        cdef cnp.PyArray_Dims newshape
        newshape.ptr, newshape.len = dims, rank
        return cnp.PyArray_Newshape(<cnp.ndarray>data, &newshape, cnp.NPY_CORDER)
