# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""float16 in one pass each: float32 rounded to float16 (kept in float32), and the casts both
ways, bit for bit as NumPy's ``astype`` (the loops are in ``_half.h``). float16 buffers are
passed as their uint16 bits. ``portable`` runs the integer form even where the CPU's F16C
conversions are there (the tests hold both forms to NumPy)."""

cdef extern from "_half.h" nogil:
    void onnxflow_half_round(const float *x, float *out, Py_ssize_t n, int portable)
    void onnxflow_to_half(const float *x, unsigned short *out, Py_ssize_t n, int portable)
    void onnxflow_from_half(const unsigned short *h, float *out, Py_ssize_t n, int portable)
    int onnxflow_half_lookup(const float *x, const float *table, float *out, Py_ssize_t n,
                             int portable)
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
