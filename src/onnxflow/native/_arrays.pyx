# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Per-call tests on arrays that kernels make on every run: in C, where the Python took
several attribute reads, a bytes copy and a comparison per array."""

cimport numpy as cnp
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memcmp, memcpy

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


cdef class Remembered:
    """A ShapeMemo's stateful compiled form: the memo ``kept`` (None, or its last inputs' key
    and result, one tuple swapped whole) tested in C, :func:`same` on the key of the call's
    first ``n_inputs`` arguments (the shape of each ndarray at a position in ``shaped``, the
    others themselves), giving the kept result while they are equal; otherwise
    ``miss(self, key, args)`` runs the body (and may keep its result in ``kept``)."""

    cdef object miss
    cdef Py_ssize_t n_inputs
    cdef frozenset shaped
    cdef public object kept

    def __init__(self, miss, Py_ssize_t n_inputs, frozenset shaped):
        self.miss, self.n_inputs, self.shaped, self.kept = miss, n_inputs, shaped, None

    def __call__(self, *args):
        cdef Py_ssize_t i, n = min(self.n_inputs, PyTuple_GET_SIZE(args))
        cdef tuple key = PyTuple_New(n)
        for i in range(n):
            a = <object>PyTuple_GET_ITEM(args, i)
            if type(a) is cnp.ndarray and self.shaped and i in self.shaped:
                a = a.shape
            Py_INCREF(a)
            PyTuple_SET_ITEM(key, i, a)
        kept = self.kept
        if kept is not None and same(<tuple>kept[0], key):
            return kept[1]
        return self.miss(self, key, args)


cdef class _Form:
    """What every compiled form here shares: ``fallback``, the NumPy form, takes the inputs the
    form does not, and its signature names the attributes a node may bind (read when the
    compiler asks: not at import)."""

    cdef readonly object fallback
    cdef object signature

    def __init__(self, fallback):
        self.fallback = fallback

    @property
    def __signature__(self):
        """The fallback's signature (read when asked: not at import)."""
        if self.signature is None:
            self.signature = signature(self.fallback)
        return self.signature


cdef class Reshape(_Form):
    """Reshape's compiled form: ``data`` (an ndarray, not a subclass) reshaped in C when
    ``shape`` is a one-dimensional int64 ndarray of dims that are positive but for at most one
    -1 (inferred): the NumPy form's ``data.reshape(dims)`` view; other inputs (zeros, which copy
    or keep a dim by ``allowzero``, errors to report) go to ``fallback``, the NumPy form."""

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


cdef class Axes(_Form):
    """Squeeze's (``insert`` False) or Unsqueeze's (True) compiled form from opset 13, whose
    axes are an input: ``data`` (an ndarray, not a subclass) viewed in C with the size-1 dims
    at ``axes`` dropped or inserted, the NumPy form's ``data.reshape(dims)``, when ``axes`` is
    a one-dimensional int64 ndarray of distinct axes in range (and, to drop, of size 1); other
    inputs (no axes, errors to report) go to ``fallback``, the NumPy form."""

    cdef bint insert

    def __init__(self, fallback, bint insert):
        self.fallback, self.insert = fallback, insert

    def __call__(self, data, axes=None):
        if (type(data) is not cnp.ndarray or type(axes) is not cnp.ndarray
                or cnp.PyArray_NDIM(<cnp.ndarray>axes) != 1
                or cnp.PyArray_TYPE(<cnp.ndarray>axes) != cnp.NPY_INT64
                or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>axes)
                or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>axes)):
            return self.fallback(data, axes)
        cdef cnp.npy_intp dims[64]
        cdef char marked[64]
        cdef int rank = cnp.PyArray_NDIM(<cnp.ndarray>data)
        cdef Py_ssize_t count = cnp.PyArray_SIZE(<cnp.ndarray>axes)
        cdef int wide = rank + count if self.insert else rank, d, k = 0
        cdef const cnp.int64_t *values = <const cnp.int64_t *>cnp.PyArray_DATA(<cnp.ndarray>axes)
        cdef cnp.int64_t a
        cdef cnp.npy_intp *shape = cnp.PyArray_DIMS(<cnp.ndarray>data)
        if wide > 64 or (count == 0 and not self.insert):  # no axes: every size-1 dim goes
            return self.fallback(data, axes)
        for d in range(wide):
            marked[d] = 0
        for d in range(count):
            a = values[d] + wide if values[d] < 0 else values[d]
            if a < 0 or a >= wide or marked[a] or (not self.insert and shape[a] != 1):
                return self.fallback(data, axes)  # out of range, repeated, not of size 1
            marked[a] = 1
        cdef cnp.PyArray_Dims newshape
        newshape.ptr, newshape.len = dims, 0
        for d in range(wide):
            if self.insert:
                dims[d] = 1 if marked[d] else shape[k]
                k += 0 if marked[d] else 1
            elif not marked[d]:
                dims[newshape.len] = shape[d]
                newshape.len += 1
        if self.insert:
            newshape.len = wide
        return cnp.PyArray_Newshape(<cnp.ndarray>data, &newshape, cnp.NPY_CORDER)


cdef inline bint _ints64(object a):
    """Whether ``a`` is a one-dimensional, C-ordered ndarray of native int64."""
    return (type(a) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1
            and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_INT64
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a))


cdef inline const cnp.int64_t *_values(object a):
    return <const cnp.int64_t *>cnp.PyArray_DATA(<cnp.ndarray>a)


cdef class Slice(_Form):
    """Slice's compiled form from opset 10, whose bounds are inputs: the index of ``data`` (an
    ndarray, not a subclass) clamped as ONNX says in C, then ``data[index]``, the NumPy form's
    view, when starts, ends and the axes and steps given are one-dimensional int64 ndarrays of
    one length, the axes distinct and in range, no step 0; other inputs (other dtypes, errors
    to report) go to ``fallback``, the NumPy form."""

    def __call__(self, data, starts, ends, axes=None, steps=None):
        if (type(data) is not cnp.ndarray or not _ints64(starts) or not _ints64(ends)
                or (axes is not None and not _ints64(axes))
                or (steps is not None and not _ints64(steps))):
            return self.fallback(data, starts, ends, axes, steps)
        index = self._index(<cnp.ndarray>data, starts, ends, axes, steps)
        if index is None:
            return self.fallback(data, starts, ends, axes, steps)
        return data[index]

    cdef object _index(self, cnp.ndarray data, starts, ends, axes, steps):
        """The NumPy form's index (``shape._slice_index``), or None where it would raise."""
        cdef int rank = cnp.PyArray_NDIM(data), d
        cdef Py_ssize_t count = cnp.PyArray_SIZE(<cnp.ndarray>starts), i
        cdef cnp.npy_intp *shape = cnp.PyArray_DIMS(data)
        cdef cnp.int64_t a, start, end, step, dim
        cdef char marked[64]
        if (rank > 64 or cnp.PyArray_SIZE(<cnp.ndarray>ends) != count
                or (axes is None and count > rank)
                or (axes is not None and cnp.PyArray_SIZE(<cnp.ndarray>axes) != count)
                or (steps is not None and cnp.PyArray_SIZE(<cnp.ndarray>steps) != count)):
            return None
        for d in range(rank):
            marked[d] = 0
        index = [slice(None)] * rank
        for i in range(count):
            a = i if axes is None else _values(axes)[i]
            step = 1 if steps is None else _values(steps)[i]
            if a < -rank or a >= rank or step == 0:
                return None
            a = a + rank if a < 0 else a
            if marked[a]:
                return None
            marked[a] = 1
            dim, start, end = shape[a], _values(starts)[i], _values(ends)[i]
            start += dim if start < 0 else 0
            end += dim if end < 0 else 0
            if step > 0:
                start, end = min(max(start, 0), dim), min(max(end, 0), dim)
                index[a] = slice(start, end, step)
            else:
                start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
                index[a] = slice(start, end if end >= 0 else None, step)
        return tuple(index)


cdef extern from "numpy/arrayobject.h":
    # the output array as a pointer, so that no output (NULL) can be passed
    object _take_from "PyArray_TakeFrom"(cnp.ndarray, object, int, void *, cnp.NPY_CLIPMODE)


cdef class Gather(_Form):
    """Gather's compiled form: ``data.take(indices, axis)`` called in C, the NumPy form's very
    call (a 0-d result as a 0-d array, as the NumPy form returns it), when data is an ndarray
    (not a subclass) of rank 1 or more, indices an ndarray of a signed integer dtype and
    ``axis`` in range; other inputs, and indices out of range (errors to report in words), go
    to ``fallback``, the NumPy form."""

    def __call__(self, data, indices, *, int axis=0):
        if type(data) is not cnp.ndarray or type(indices) is not cnp.ndarray:
            return self.fallback(data, indices, axis=axis)
        cdef int rank = cnp.PyArray_NDIM(<cnp.ndarray>data)
        cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>indices)
        cdef int a = axis + rank if axis < 0 else axis
        if (rank == 0 or a < 0 or a >= rank or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>indices)
                or (t != cnp.NPY_INT64 and t != cnp.NPY_INT32)):
            return self.fallback(data, indices, axis=axis)
        if cnp.PyArray_NDIM(<cnp.ndarray>indices) == 0:
            picked = _slab(<cnp.ndarray>data, <cnp.ndarray>indices, t, rank, a)
            if picked is not None:
                return picked
        try:
            return _take_from(<cnp.ndarray>data, indices, a, NULL, cnp.NPY_RAISE)
        except IndexError:
            return self.fallback(data, indices, axis=axis)


cdef object _slab(cnp.ndarray data, cnp.ndarray index, int t, int rank, int a):
    """data.take(i, a) for one index i (a 0-d array of dtype ``t``) in range, by copies into a
    new C-ordered array, when data is C-ordered, of a native numeric or bool dtype; else
    None."""
    cdef int kind = cnp.PyArray_TYPE(data), d, k = 0
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(data)
    cdef cnp.npy_intp shape[64]
    cdef long long i = (<cnp.int64_t *>cnp.PyArray_DATA(index))[0] if t == cnp.NPY_INT64 else (
        <cnp.int32_t *>cnp.PyArray_DATA(index))[0]
    if (kind > cnp.NPY_CLONGDOUBLE or not cnp.PyArray_ISNOTSWAPPED(data) or rank > 64
            or not cnp.PyArray_IS_C_CONTIGUOUS(data)):
        return None
    i = i + dims[a] if i < 0 else i
    if i < 0 or i >= dims[a]:
        return None
    cdef Py_ssize_t o, outer = 1, size = cnp.PyArray_ITEMSIZE(data)
    for d in range(rank):
        if d < a:
            outer *= dims[d]
        elif d > a:
            size *= dims[d]
        if d != a:
            shape[k] = dims[d]
            k += 1
    out = cnp.PyArray_EMPTY(rank - 1, shape, kind, 0)
    cdef char *dst = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef const char *src = <const char *>cnp.PyArray_DATA(data) + i * size
    for o in range(outer):
        memcpy(dst + o * size, src + o * size * dims[a], size)
    return out


cdef object _copies_joined(tuple inputs, int rank, int a):
    """The inputs joined along axis ``a`` by copies into a new C-ordered array, what
    np.concatenate gives, when they are C-ordered and of one native-order numeric or bool dtype
    with the same dims but ``a``'s; None for others."""
    cdef cnp.ndarray first = <cnp.ndarray>PyTuple_GET_ITEM(inputs, 0), x
    cdef int kind = cnp.PyArray_TYPE(first), d
    cdef Py_ssize_t i, o, count = PyTuple_GET_SIZE(inputs), outer = 1, inner = 1, total = 0
    cdef cnp.npy_intp dims[64]
    cdef cnp.npy_intp *own
    if kind > cnp.NPY_CLONGDOUBLE or rank > 64:
        return None
    for i in range(count):
        x = <cnp.ndarray>PyTuple_GET_ITEM(inputs, i)
        own = cnp.PyArray_DIMS(x)
        if (cnp.PyArray_TYPE(x) != kind or not cnp.PyArray_ISNOTSWAPPED(x)
                or not cnp.PyArray_IS_C_CONTIGUOUS(x)):
            return None
        for d in range(rank):
            if d != a and own[d] != cnp.PyArray_DIMS(first)[d]:
                return None
        total += own[a]
    for d in range(rank):
        dims[d] = cnp.PyArray_DIMS(first)[d]
        if d < a:
            outer *= dims[d]
        elif d > a:
            inner *= dims[d]
    dims[a] = total
    out = cnp.PyArray_EMPTY(rank, dims, kind, 0)
    cdef char *dst = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(first) * inner, chunk
    for o in range(outer):
        for i in range(count):
            x = <cnp.ndarray>PyTuple_GET_ITEM(inputs, i)
            chunk = cnp.PyArray_DIMS(x)[a] * size
            memcpy(dst, <char *>cnp.PyArray_DATA(x) + o * chunk, chunk)
            dst += chunk
    return out


cdef class Concat(_Form):
    """Concat's compiled form: ``np.concatenate(inputs, axis)`` called in C
    (``PyArray_Concatenate``, what np.concatenate calls with no ``out`` or dtype), when the
    inputs are ndarrays (not subclasses) of one rank of at least 1 and ``axis`` is in range;
    other inputs (errors to report) go to ``fallback``, the NumPy form."""

    def __call__(self, *inputs, int axis):
        cdef Py_ssize_t i, count = PyTuple_GET_SIZE(inputs)
        cdef int rank, a
        if count == 0 or type(<object>PyTuple_GET_ITEM(inputs, 0)) is not cnp.ndarray:
            return self.fallback(*inputs, axis=axis)
        rank = cnp.PyArray_NDIM(<cnp.ndarray>PyTuple_GET_ITEM(inputs, 0))
        a = axis + rank if axis < 0 else axis
        if rank == 0 or a < 0 or a >= rank:
            return self.fallback(*inputs, axis=axis)
        for i in range(1, count):
            x = <object>PyTuple_GET_ITEM(inputs, i)
            if type(x) is not cnp.ndarray or cnp.PyArray_NDIM(<cnp.ndarray>x) != rank:
                return self.fallback(*inputs, axis=axis)
        joined = _copies_joined(inputs, rank, a)
        return cnp.PyArray_Concatenate(inputs, a) if joined is None else joined


cdef class Transpose(_Form):
    """Transpose's compiled form: the NumPy form's view ``data.transpose(perm)`` made in C
    (``PyArray_Transpose``) when ``data`` is an ndarray (not a subclass) and ``perm`` is None
    (the axes reversed) or a list of ints that permutes its axes; other inputs (negative axes,
    errors to report) go to ``fallback``, the NumPy form."""

    def __call__(self, data, *, perm=None):
        if type(data) is not cnp.ndarray:
            return self.fallback(data, perm=perm)
        if perm is None:
            return cnp.PyArray_Transpose(<cnp.ndarray>data, NULL)
        cdef int rank = cnp.PyArray_NDIM(<cnp.ndarray>data), d
        cdef cnp.npy_intp axes[64]
        cdef bint seen[64]
        if type(perm) is not list or len(perm) != rank:
            return self.fallback(data, perm=perm)
        for d in range(rank):
            seen[d] = False
        for d in range(rank):
            a = (<list>perm)[d]
            if type(a) is not int or not 0 <= a < rank or seen[<int>a]:
                return self.fallback(data, perm=perm)
            axes[d] = a
            seen[<int>a] = True
        cdef cnp.PyArray_Dims order
        order.ptr, order.len = axes, rank
        return cnp.PyArray_Transpose(<cnp.ndarray>data, &order)


cdef class Split(_Form):
    """Split's compiled form: the parts of ``x`` (an ndarray, not a subclass) when no sizes
    input is given, as the NumPy form's views, ``x[index]`` for each basic index of
    ``index_of(x.shape)`` (looked up again only when x's shape changes: the shape and its
    indexes kept in one tuple, swapped whole); other inputs go to ``fallback``, the NumPy
    form."""

    cdef object index_of
    cdef tuple memo

    def __init__(self, fallback, index_of):
        self.fallback, self.index_of, self.memo = fallback, index_of, ((), ())

    def __call__(self, x, sizes=None):
        if type(x) is not cnp.ndarray or sizes is not None:
            return self.fallback(x, sizes)
        shape = x.shape
        cdef tuple memo = self.memo
        if <tuple>memo[0] != shape:
            memo = self.memo = (shape, self.index_of(shape))
        cdef tuple index = <tuple>memo[1]
        cdef Py_ssize_t i, count = PyTuple_GET_SIZE(index)
        cdef tuple parts = PyTuple_New(count)
        for i in range(count):
            part = x[<object>PyTuple_GET_ITEM(index, i)]
            Py_INCREF(part)
            PyTuple_SET_ITEM(parts, i, part)
        return parts


cdef extern from "numpy/arrayobject.h":
    # PyArray_TakeFrom with no ``out`` (numpy's pxd types it an ndarray: None is not NULL)
    object _take "PyArray_TakeFrom" (cnp.ndarray, object, int, void *, cnp.NPY_CLIPMODE)


cdef class Pad(_Form):
    """Pad's compiled form for the modes that copy (reflect, edge, wrap) with ``pads`` a
    one-dimensional int64 ndarray and no ``axes``: the NumPy form's crop and gathers
    (``plan_of(shape, pads, mode)``: the crop's index, () for none, and the (axis, positions)
    gathers, or None where the NumPy form does it otherwise), looked up again only when data's
    shape, the pads or the mode change (all kept in one tuple, swapped whole), then applied in
    C (indexing, ``PyArray_TakeFrom``); other inputs go to ``fallback``, the NumPy form."""

    cdef object plan_of
    cdef tuple memo

    def __init__(self, fallback, plan_of):
        self.fallback, self.plan_of, self.memo = fallback, plan_of, ((), b"", "", None, ())

    def __call__(self, data, pads, constant_value=None, axes=None, *, mode="constant"):
        if (mode == "constant" or axes is not None or type(data) is not cnp.ndarray
                or not _ints64(pads)):
            return self.fallback(data, pads, constant_value, axes, mode=mode)
        shape = data.shape
        cdef tuple memo = self.memo
        cdef bytes kept = <bytes>memo[1]
        if (<tuple>memo[0] != shape or memo[2] != mode
                or len(kept) != cnp.PyArray_NBYTES(<cnp.ndarray>pads)
                or memcmp(<const char *>kept, cnp.PyArray_DATA(<cnp.ndarray>pads), len(kept))):
            made = self.plan_of(shape, tuple(pads.tolist()), mode)
            if made is None:
                return self.fallback(data, pads, constant_value, axes, mode=mode)
            memo = self.memo = (shape, pads.tobytes(), mode, made[0], made[1])
        out = data[<tuple>memo[3]] if memo[3] else data
        cdef tuple takes = <tuple>memo[4]
        if not takes:
            return cnp.PyArray_NewCopy(<cnp.ndarray>out, cnp.NPY_CORDER)
        for axis, index in takes:
            out = _take(<cnp.ndarray>out, index, axis, NULL, cnp.NPY_RAISE)
        return out


cdef class Shape(_Form):
    """Shape's compiled form: dims ``start:end`` of ``data``'s shape (an ndarray, not a
    subclass; Python's slice clamping, as ONNX's) written into a new int64 array in C, the
    NumPy form's ``np.array(data.shape[start:end], dtype=np.int64)``; anything else goes to
    ``fallback``, the NumPy form."""

    def __call__(self, data, *, start=0, end=None):
        if type(data) is not cnp.ndarray or type(start) is not int or (
                end is not None and type(end) is not int):
            return self.fallback(data, start=start, end=end)
        cdef Py_ssize_t rank = cnp.PyArray_NDIM(<cnp.ndarray>data), i, first, last
        try:
            first = _clamped(start, rank)
            last = rank if end is None else _clamped(end, rank)
        except OverflowError:  # a bound past a C long long: Python's slice clamps it
            return self.fallback(data, start=start, end=end)
        cdef cnp.npy_intp count = last - first if last > first else 0
        cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>data)
        out = cnp.PyArray_EMPTY(1, &count, cnp.NPY_INT64, 0)
        cdef cnp.int64_t *values = <cnp.int64_t *>cnp.PyArray_DATA(<cnp.ndarray>out)
        for i in range(count):
            values[i] = dims[first + i]
        return out


cdef inline Py_ssize_t _clamped(object bound, Py_ssize_t rank) except? -1:
    """A slice bound of a sequence of ``rank`` items as Python reads it: negatives from the
    back, then held to 0..rank."""
    cdef long long b = bound
    if b < 0:
        b += rank
    return 0 if b < 0 else (rank if b > rank else b)


def zip_rows(const float[:, ::1] x, tuple labels):
    """ZipMap's maps of float32 rows: ``[{labels[j]: float(x[r, j]) for j} for r]``, the
    NumPy form's (its ``tolist`` floats, the labels in order), without a list of row lists."""
    cdef Py_ssize_t r, j, n = x.shape[0], m = x.shape[1]
    cdef list out = [None] * n
    cdef dict row
    if m != len(labels):
        raise ValueError(f"input has {m} columns for {len(labels)} class labels")
    for r in range(n):
        row = {}
        for j in range(m):
            row[labels[j]] = <double>x[r, j]
        out[r] = row
    return out
