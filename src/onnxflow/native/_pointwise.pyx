# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Pointwise regions: a program of float32 elementwise instructions in one pass (_pointwise.h)."""

cimport numpy as cnp
import numpy as np
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM

cnp.import_array()

cdef extern from "_pointwise.h" nogil:
    int PW_CODES
    ctypedef void (*pw_ufunc_loop)(char **, const cnp.npy_intp *, const cnp.npy_intp *, void *)
    void pw_set_tanh(pw_ufunc_loop loop, void *data)
    int pw_run(int n_in, const float **inputs, const long *inner, const long *period,
               int n_ops, const int *ops, float *out, long n)

#: The instructions, by name, in the order of their codes (the header's enum).
OPCODES = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "sqrt", "reciprocal",
           "relu", "erf", "sigmoid", "clip", "half", "tanh", "pow")
assert len(OPCODES) == PW_CODES


cdef int _set_tanh() except -1:
    """Give the tanh instruction NumPy's float32 tanh loop (the one np.tanh runs)."""
    cdef cnp.ufunc tanh = <cnp.ufunc>np.tanh
    cdef int i
    for i in range(tanh.ntypes):
        if tanh.types[2 * i] == cnp.NPY_FLOAT32 and tanh.types[2 * i + 1] == cnp.NPY_FLOAT32:
            pw_set_tanh(<pw_ufunc_loop>tanh.functions[i], tanh.data[i])
            return 0
    raise ImportError("numpy.tanh has no float32 loop for the pointwise region's tanh")


_set_tanh()

cdef enum:
    MAX_IN = 16  # the most inputs a region's call reads without its fallback
    MAX_DIMS = 32  # the highest rank it does


cdef inline bint _takes(object a):
    """Whether ``a`` is an ndarray (not a subclass) of native float32."""
    return (type(a) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_FLOAT32
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a))


cdef int _broadcast(tuple args, int n_in, cnp.npy_intp *out, long *inner, long *period):
    """The rank of ``args`` broadcast together, their shape in ``out`` and, per input, the
    ``inner`` and ``period`` by which output element i reads element (i // inner) % period of
    it; -1 when the shapes do not broadcast or an input's dims that are not 1 do not form one
    run of the output's dims (the region's own ``_layout`` rule)."""
    cdef int k, d, rank = 0, nd, lo, hi
    cdef cnp.npy_intp size, total = 1
    cdef cnp.npy_intp *dims
    cdef cnp.ndarray a
    for k in range(n_in):
        nd = cnp.PyArray_NDIM(<cnp.ndarray>PyTuple_GET_ITEM(args, k))
        rank = nd if nd > rank else rank
    if rank > MAX_DIMS:
        return -1
    for d in range(rank):
        out[d] = 1
    for k in range(n_in):
        a = <cnp.ndarray>PyTuple_GET_ITEM(args, k)
        nd, dims = cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a)
        for d in range(nd):
            size = dims[d]
            if size != 1:
                if out[rank - nd + d] == 1:
                    out[rank - nd + d] = size
                elif out[rank - nd + d] != size:
                    return -1
    for d in range(rank):
        total *= out[d]
    for k in range(n_in):
        a = <cnp.ndarray>PyTuple_GET_ITEM(args, k)
        nd, dims = cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a)
        lo, hi = -1, -1
        for d in range(nd):
            if dims[d] != 1:
                hi = rank - nd + d
                if lo < 0:
                    lo = hi
        if lo < 0:
            inner[k], period[k] = (total if total > 1 else 1), 1
            continue
        inner[k], period[k] = 1, 1
        for d in range(lo, hi + 1):
            if out[d] != dims[d - rank + nd]:
                return -1
            period[k] *= out[d]
        for d in range(hi + 1, rank):
            inner[k] *= out[d]
    return rank


cdef class Region:
    """A pointwise region's compiled form: called with the region's inputs, it runs ``program``
    in one pass when every input is a native float32 ndarray and their shapes broadcast as one
    pass reads them (checked here, per call, in C); else ``fallback`` (the region's nodes as
    written) with the same inputs."""

    cdef object program
    cdef const int[:, ::1] code
    cdef readonly object fallback

    def __init__(self, program, fallback):
        self.program = program
        self.code = program
        self.fallback = fallback

    def __call__(self, *args):
        cdef int n_in = <int>PyTuple_GET_SIZE(args), k, rank, failed
        cdef cnp.npy_intp shape[MAX_DIMS]
        cdef long inner[MAX_IN]
        cdef long period[MAX_IN]
        cdef const float *ptrs[MAX_IN]
        cdef list copies = None  # contiguous copies of strided inputs, alive through the run
        cdef cnp.ndarray out, a
        if n_in == 0 or n_in > MAX_IN:
            return self.fallback(*args)
        for k in range(n_in):
            if not _takes(<object>PyTuple_GET_ITEM(args, k)):
                return self.fallback(*args)
        rank = _broadcast(args, n_in, shape, inner, period)
        if rank < 0:
            return self.fallback(*args)
        out = cnp.PyArray_EMPTY(rank, shape, cnp.NPY_FLOAT32, 0)
        if cnp.PyArray_SIZE(out) == 0:
            return out
        for k in range(n_in):
            a = <cnp.ndarray>PyTuple_GET_ITEM(args, k)
            if not cnp.PyArray_IS_C_CONTIGUOUS(a):
                a = cnp.PyArray_GETCONTIGUOUS(a)
                copies = [a] if copies is None else copies + [a]
            ptrs[k] = <const float *>cnp.PyArray_DATA(a)
        with nogil:
            failed = pw_run(n_in, ptrs, inner, period, self.code.shape[0], &self.code[0, 0],
                            <float *>cnp.PyArray_DATA(out), cnp.PyArray_SIZE(out))
        if failed:
            raise MemoryError("pointwise region: no memory for its chunk buffers")
        return out
