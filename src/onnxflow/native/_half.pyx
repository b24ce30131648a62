# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""float16 in one pass each: float32 rounded to float16 (kept in float32), and the casts both
ways, bit for bit as NumPy's ``astype`` (the loops are in ``_half.h``). float16 buffers are
passed as their uint16 bits. ``portable`` runs the integer form even where the CPU's F16C
conversions are there (the tests hold both forms to NumPy)."""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)

cdef extern from "_half.h" nogil:
    void onnxflow_half_round(const float *x, float *out, Py_ssize_t n, int portable)
    void onnxflow_to_half(const float *x, unsigned short *out, Py_ssize_t n, int portable)
    void onnxflow_from_half(const unsigned short *h, float *out, Py_ssize_t n, int portable)
    int onnxflow_half_lookup(const float *x, const float *table, float *out, Py_ssize_t n,
                             int portable)
    int onnxflow_half_lookup16(const float *x, const unsigned short *table, float *out,
                               Py_ssize_t n, int portable)
    int ONNXFLOW_HAS_F16C()


def has_f16c():
    """Whether the loops use the CPU's F16C conversions (x86-64 with AVX2 and F16C)."""
    return bool(ONNXFLOW_HAS_F16C())


def round_f32(const float[::1] x, float[::1] out, bint portable=False):
    """out[i] = x[i] rounded to the nearest float16 (ties to even, beyond 65504 to infinity),
    as float32; NaN stays as it is (x and out may be the same array)."""
    cdef Py_ssize_t n = x.shape[0]
    if n:
        with nogil:
            onnxflow_half_round(&x[0], &out[0], n, portable)


def f32_to_f16(const float[::1] x, unsigned short[::1] out, bint portable=False):
    """out[i] = the float16 bits of x[i], as NumPy's float32 -> float16 cast makes them."""
    cdef Py_ssize_t n = x.shape[0]
    if n:
        with nogil:
            onnxflow_to_half(&x[0], &out[0], n, portable)


def f16_to_f32(const unsigned short[::1] h, float[::1] out, bint portable=False):
    """out[i] = the float16 whose bits are h[i], as float32 (exact)."""
    cdef Py_ssize_t n = h.shape[0]
    if n:
        with nogil:
            onnxflow_from_half(&h[0], &out[0], n, portable)


def lookup_f32(const float[::1] x, const float[::1] table, float[::1] out, bint portable=False):
    """out[i] = table[the float16 bits of x[i]] (``table`` holds 65536 values) when every x[i]
    is a float16 value held in float32 (exactly the float32 of its float16 bits): True; False
    as soon as one is not (out is then incomplete)."""
    cdef Py_ssize_t n = x.shape[0]
    cdef int bad = 0
    if table.shape[0] != 65536:
        raise ValueError(f"a float16 table holds 65536 values, not {table.shape[0]}")
    if n:
        with nogil:
            bad = onnxflow_half_lookup(&x[0], &table[0], &out[0], n, portable)
    return not bad


cdef bint _float32_buffer(object x, Py_buffer *view, int flags):
    """Whether ``x`` gives a C-contiguous float32 buffer with ``flags`` (then held in view)."""
    try:
        PyObject_GetBuffer(x, view, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (BufferError, TypeError, ValueError):
        return False
    if view.itemsize != 4 or view.format == NULL or view.format[0] != b"f" or view.format[1] != 0:
        PyBuffer_Release(view)
        return False
    return True


def round_over(object x):
    """x (a C-contiguous, writeable float32 array of any shape) rounded to the nearest float16
    over itself, as :func:`round_f32`: True; False, untouched, when x is not such an array (one
    call where ``round_f32`` takes a reshape and two memoryviews)."""
    cdef Py_buffer view
    if not _float32_buffer(x, &view, PyBUF_WRITABLE):
        return False
    try:
        with nogil:
            onnxflow_half_round(<const float *>view.buf, <float *>view.buf, view.len // 4, 0)
    finally:
        PyBuffer_Release(&view)
    return True


def round_into(object x, object out):
    """out = x rounded to the nearest float16 (both C-contiguous float32 arrays of x's size,
    out writeable): True; False, out untouched, when they are not such arrays."""
    cdef Py_buffer src, dst
    if not _float32_buffer(x, &src, 0):
        return False
    if not _float32_buffer(out, &dst, PyBUF_WRITABLE):
        PyBuffer_Release(&src)
        return False
    try:
        if src.len != dst.len:
            return False
        with nogil:
            onnxflow_half_round(<const float *>src.buf, <float *>dst.buf, src.len // 4, 0)
    finally:
        PyBuffer_Release(&src)
        PyBuffer_Release(&dst)
    return True


def lookup_f16(const float[::1] x, const unsigned short[::1] table, float[::1] out,
               bint portable=False):
    """:func:`lookup_f32` with a table of float16 bits, half the memory: 65537 entries (the
    last one unread), none a signalling NaN (the F16C form would quiet it), each widened
    exactly."""
    cdef Py_ssize_t n = x.shape[0]
    cdef int bad = 0
    if table.shape[0] != 65537:
        raise ValueError(f"a float16 table of bits holds 65537 entries, not {table.shape[0]}")
    if n:
        with nogil:
            bad = onnxflow_half_lookup16(&x[0], &table[0], &out[0], n, portable)
    return not bad
