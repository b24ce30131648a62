# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""MatMul's and MatMulBias's per-call glue in C: the tests, reshapes and bias add around
NumPy's own product (``np.dot``: ``PyArray_MatrixProduct2``), so the product is BLAS's as
before and only the Python around it goes."""

cimport numpy as cnp

import numpy as np

cnp.import_array()

cdef object _MATMUL = np.matmul

cdef extern from "numpy/arrayobject.h":
    object PyArray_MatrixProduct2(object, object, void *)


cdef inline bint _blas(cnp.ndarray a):
    """Whether a's dtype is one np.dot takes to BLAS (float32, float64, complex64, complex128,
    in native byte order)."""
    cdef int t = cnp.PyArray_TYPE(a)
    return ((t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64 or t == cnp.NPY_COMPLEX64
             or t == cnp.NPY_COMPLEX128) and cnp.PyArray_ISNOTSWAPPED(a))


cdef object _rows_product(object a, object b):
    """np.dot of a stack of rows ``a`` (rank 2 or more) by the matrix ``b`` when both are
    ndarrays (not subclasses) of one BLAS dtype object and a's last dim is b's first, in a's
    shape but the last dim (b's columns): :func:`onnxflow.ops.linalg.matmul`'s fast path, the
    same calls; None otherwise."""
    if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray:
        return None
    cdef cnp.ndarray x = <cnp.ndarray>a, w = <cnp.ndarray>b
    cdef int rank = cnp.PyArray_NDIM(x), d
    if (cnp.PyArray_NDIM(w) != 2 or rank < 2 or cnp.PyArray_DESCR(x) is not cnp.PyArray_DESCR(w)
            or not _blas(x)):
        return None
    if rank == 2:
        return PyArray_MatrixProduct2(x, w, NULL)
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(x)
    if dims[rank - 1] != cnp.PyArray_DIMS(w)[0]:
        return None
    cdef cnp.npy_intp shape[64]
    cdef cnp.npy_intp rows = 1
    for d in range(rank - 1):
        rows *= dims[d]
        shape[d] = dims[d]
    shape[rank - 1] = cnp.PyArray_DIMS(w)[1]
    cdef cnp.npy_intp flat[2]
    flat[0], flat[1] = rows, dims[rank - 1]
    cdef cnp.PyArray_Dims as_rows, as_stack
    as_rows.ptr, as_rows.len = flat, 2
    as_stack.ptr, as_stack.len = shape, rank
    product = PyArray_MatrixProduct2(cnp.PyArray_Newshape(x, &as_rows, cnp.NPY_CORDER), w, NULL)
    return cnp.PyArray_Newshape(<cnp.ndarray>product, &as_stack, cnp.NPY_CORDER)


cdef class MatMul:
    """MatMul's compiled form: the fast path of ``fallback`` (the NumPy form's
    :func:`~onnxflow.ops.linalg.matmul`: a stack of rows times a matrix as one np.dot) tested
    and reshaped in C, and its np.matmul of two stacks of one BLAS dtype called from here;
    other inputs go to ``fallback``."""

    cdef readonly object fallback

    def __init__(self, fallback):
        self.fallback = fallback

    def __call__(self, a, b):
        y = _rows_product(a, b)
        if y is None and _stacks(a, b):
            return _MATMUL(a, b)  # the NumPy form's np.matmul, whose result it keeps as is
        return self.fallback(a, b) if y is None else y


cdef bint _stacks(object a, object b):
    """Whether a and b are ndarrays (not subclasses) of rank 2 or more and of one BLAS dtype
    object: np.matmul then gives an array of that dtype, which the NumPy form returns as is."""
    if type(a) is not cnp.ndarray or type(b) is not cnp.ndarray:
        return False
    cdef cnp.ndarray x = <cnp.ndarray>a, w = <cnp.ndarray>b
    return (cnp.PyArray_NDIM(x) >= 2 and cnp.PyArray_NDIM(w) >= 2
            and cnp.PyArray_DESCR(x) is cnp.PyArray_DESCR(w) and _blas(x))


cdef class MatMulBias:
    """MatMulBias's compiled form: :class:`MatMul`'s product, then a float32 bias of one value
    or one per column added into it in C (float32 sums, each rounded once: the NumPy form's
    ``np.add(y, bias, out=y)`` values); other inputs to ``fallback`` (the NumPy form)."""

    cdef readonly object fallback

    def __init__(self, fallback):
        self.fallback = fallback

    def __call__(self, a, b, bias):
        if type(bias) is not cnp.ndarray:
            return self.fallback(a, b, bias)
        cdef cnp.ndarray c = <cnp.ndarray>bias
        if (cnp.PyArray_TYPE(c) != cnp.NPY_FLOAT32 or not cnp.PyArray_ISNOTSWAPPED(c)
                or cnp.PyArray_NDIM(c) > 1):
            return self.fallback(a, b, bias)
        y = _rows_product(a, b)
        if y is None:
            return self.fallback(a, b, bias)
        cdef cnp.ndarray out = <cnp.ndarray>y
        cdef int rank = cnp.PyArray_NDIM(out)
        cdef cnp.npy_intp size = cnp.PyArray_SIZE(c), n = cnp.PyArray_SIZE(out)
        cdef cnp.npy_intp cols = cnp.PyArray_DIMS(out)[rank - 1], i, j
        if (cnp.PyArray_TYPE(out) != cnp.NPY_FLOAT32 or (size != 1 and size != cols)
                or not cnp.PyArray_IS_C_CONTIGUOUS(out) or not cnp.PyArray_ISWRITEABLE(out)):
            return self.fallback(a, b, bias)  # the product again: rare (not float32)
        if not cnp.PyArray_IS_C_CONTIGUOUS(c):
            c = cnp.PyArray_GETCONTIGUOUS(c)
        cdef float *py = <float *>cnp.PyArray_DATA(out)
        cdef const float *pc = <const float *>cnp.PyArray_DATA(c)
        cdef float one
        with nogil:
            if size == 1:
                one = pc[0]
                for i in range(n):
                    py[i] = py[i] + one
            elif cols:
                for i in range(n // cols):
                    for j in range(cols):
                        py[i * cols + j] = py[i * cols + j] + pc[j]
        return out
