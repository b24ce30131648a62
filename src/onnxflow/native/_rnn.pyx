# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The time loops of RNN, LSTM and GRU (and DynamicQuantizeLSTM's): one call per direction runs
every step of every batch entry, the recurrent product and the gates.

The input projection of every step (``xw``, float32, from one GEMM) comes in; each step adds
its bias and the recurrent product (summed in float32, _rnn_product.h) in double, computes the
gates in double and rounds the new states once to float32. A batch entry past its sequence
length keeps its state and outputs zeros.
"""

cimport numpy as cnp
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport exp, expm1, fabs, log1p, nearbyint, nearbyintf
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cnp.import_array()

cdef extern from "_rnn_product.h" nogil:
    void onnxflow_rnn_product(const float *m, Py_ssize_t ld, const double *h, double *acc,
                              Py_ssize_t rows, Py_ssize_t width)
    void onnxflow_rnn_product_int(const int32_t *m, Py_ssize_t ld, const int32_t *q,
                                  int32_t *acc, Py_ssize_t rows, Py_ssize_t width)
    void onnxflow_lstm_default(const double *acc, float *h, float *c, Py_ssize_t n)
    void onnxflow_lstm_default_steps(const float *xw, Py_ssize_t xw_step, const float *wb,
                                     const float *rt, double *acc, float *part, float *h,
                                     float *c, float *y, Py_ssize_t y_step, Py_ssize_t n,
                                     Py_ssize_t steps, int backwards)
    void onnxflow_rnn_default(const double *acc, float *h, Py_ssize_t n)
    void onnxflow_gru_default_zr(const double *xb, double *acc, double *hd, Py_ssize_t n,
                                 int linear_before_reset)
    void onnxflow_gru_default_h(const double *xb, const double *acc, const double *hd,
                                float *h, Py_ssize_t n, int linear_before_reset)

#: The activations, by the code the callers pass (onnx's names, lower case).
ACTIVATIONS = {
    "relu": 0, "tanh": 1, "sigmoid": 2, "affine": 3, "leakyrelu": 4, "thresholdedrelu": 5,
    "scaledtanh": 6, "hardsigmoid": 7, "elu": 8, "softsign": 9, "softplus": 10,
}
#: The cells, by the code the callers pass.
cdef enum:
    RNN = 0
    LSTM = 1
    GRU = 2
KINDS = {"RNN": RNN, "LSTM": LSTM, "GRU": GRU}


cdef struct Cell:
    int kind
    Py_ssize_t hidden
    int codes[3]
    double alphas[3]
    double betas[3]
    bint has_clip
    double clip
    bint flag  # LSTM: input_forget; GRU: linear_before_reset
    const float *peep  # LSTM peepholes i, o, f, or NULL
    bint plain  # the default activations, no peepholes, clip or (LSTM) coupling


cdef inline double tanh_(double x) noexcept nogil:
    """tanh(x) from one exp (libm's tanh goes through expm1, twice as slow): relative error
    below 1e-15 for |x| >= 1e-4 (1 - e loses at most log2(1 / 2|x|) bits of 53), the series
    x - x^3/3 (error x^4 relative) below; a NaN stays a NaN."""
    cdef double e, m = fabs(x)
    if m < 1e-4:
        return x * (1.0 - x * x / 3.0)
    e = exp(-2.0 * m)
    m = (1.0 - e) / (1.0 + e)
    return -m if x < 0 else m


cdef inline double activate(int code, double x, double a, double b) noexcept nogil:
    if code == 2:
        return 1.0 / (1.0 + exp(-x))
    if code == 1:
        return tanh_(x)
    if code == 0:
        return 0.0 if x < 0 else x
    if code == 3:
        return a * x + b
    if code == 4:
        return a * x if x < 0 else x
    if code == 5:
        return x if x > a else 0.0
    if code == 6:
        return a * tanh_(b * x)
    if code == 7:
        x = a * x + b
        return 0.0 if x < 0 else (1.0 if x > 1 else x)
    if code == 8:
        return a * expm1(x) if x < 0 else x
    if code == 9:
        return x / (1.0 + fabs(x))
    return x + log1p(exp(-x)) if x > 0 else log1p(exp(x))


cdef inline double bound(const Cell *cell, double x) noexcept nogil:
    if cell.has_clip:
        if x < -cell.clip:
            return -cell.clip
        if x > cell.clip:
            return cell.clip
    return x


cdef inline double f(const Cell *cell, int which, double x) noexcept nogil:
    return activate(cell.codes[which], bound(cell, x), cell.alphas[which], cell.betas[which])


cdef void lstm_cell(const Cell *cell, const double *acc, float *h, float *c) noexcept nogil:
    """acc: the gate pre-activations i, o, f, c; h and c: the states, overwritten."""
    cdef Py_ssize_t j, n = cell.hidden
    cdef double pi = 0, po = 0, pf = 0, i, forget, cj, cn, o
    for j in range(n):
        cj = c[j]
        if cell.peep != NULL:
            pi, po, pf = cell.peep[j], cell.peep[n + j], cell.peep[2 * n + j]
        i = f(cell, 0, acc[j] + pi * cj)
        forget = 1.0 - i if cell.flag else f(cell, 0, acc[2 * n + j] + pf * cj)
        cn = forget * cj + i * f(cell, 1, acc[3 * n + j])
        o = f(cell, 0, acc[n + j] + po * cn)
        c[j] = <float>cn
        h[j] = <float>(o * activate(cell.codes[2], cn, cell.alphas[2], cell.betas[2]))


cdef void gru_cell(const Cell *cell, const double *xw, const float *rt, double *acc,
                   double *hd, float *h) noexcept nogil:
    """xw: the step's input projection with Wb; acc: Rb plus h's product with R's z and r
    columns (and h column when linear before reset); hd: h in double (overwritten)."""
    cdef Py_ssize_t j, n = cell.hidden
    cdef double r
    for j in range(n):
        acc[j] = f(cell, 0, xw[j] + acc[j])  # z
        r = f(cell, 0, xw[n + j] + acc[n + j])
        if cell.flag:
            acc[2 * n + j] *= r
        else:
            acc[n + j] = hd[j]
            hd[j] = r * hd[j]
    if not cell.flag:
        onnxflow_rnn_product(rt + 2 * n, 3 * n, hd, acc + 2 * n, n, n)
    for j in range(n):
        hd[j] = acc[n + j] if not cell.flag else hd[j]
        h[j] = <float>((1.0 - acc[j]) * f(cell, 1, xw[2 * n + j] + acc[2 * n + j])
                       + acc[j] * hd[j])


cdef void step(const Cell *cell, const float *xw, const float *wb, const float *rt,
               const float *rb, double *acc, double *xb, double *hd, float *h,
               float *c) noexcept nogil:
    """One batch entry's step: h (and c) overwritten with the new states. acc, xb: scratch of
    the gates' width; hd: of the hidden size."""
    cdef Py_ssize_t j, n = cell.hidden
    cdef Py_ssize_t width = (4 if cell.kind == LSTM else (3 if cell.kind == GRU else 1)) * n
    for j in range(n):
        hd[j] = h[j]
    if cell.kind == GRU:
        for j in range(width):
            acc[j] = rb[j]
            xb[j] = <double>xw[j] + wb[j]
        onnxflow_rnn_product(rt, width, hd, acc, n, width if cell.flag else 2 * n)
        if not cell.plain:
            gru_cell(cell, xb, rt, acc, hd, h)
            return
        onnxflow_gru_default_zr(xb, acc, hd, n, cell.flag)
        if not cell.flag:
            onnxflow_rnn_product(rt + 2 * n, 3 * n, hd, acc + 2 * n, n, n)
        onnxflow_gru_default_h(xb, acc, hd, h, n, cell.flag)
        return
    for j in range(width):
        acc[j] = <double>xw[j] + wb[j]
    onnxflow_rnn_product(rt, width, hd, acc, n, width)
    if cell.kind == LSTM and cell.plain:
        onnxflow_lstm_default(acc, h, c, n)
    elif cell.kind == LSTM:
        lstm_cell(cell, acc, h, c)
    elif cell.plain:
        onnxflow_rnn_default(acc, h, n)
    else:
        for j in range(n):
            h[j] = <float>f(cell, 0, acc[j])


cdef int setup(Cell *cell, int kind, Py_ssize_t hidden, const int[::1] codes,
               const double[::1] alphas, const double[::1] betas, double clip, bint flag,
               const float[::1] peep) except -1:
    cdef Py_ssize_t a
    if codes.shape[0] > 3 or alphas.shape[0] != codes.shape[0] or betas.shape[0] != codes.shape[0]:
        raise ValueError("expected at most 3 activations, each with an alpha and a beta")
    cell.kind, cell.hidden, cell.flag = kind, hidden, flag
    cell.has_clip, cell.clip = clip == clip, clip  # NaN: no clip
    for a in range(codes.shape[0]):
        cell.codes[a], cell.alphas[a], cell.betas[a] = codes[a], alphas[a], betas[a]
    cell.peep = &peep[0] if peep.shape[0] else NULL
    cell.plain = cell.peep == NULL and not cell.has_clip and (
        (kind == LSTM and not flag and codes.shape[0] == 3 and codes[0] == 2 and codes[1] == 1
         and codes[2] == 1)
        or (kind == GRU and codes.shape[0] == 2 and codes[0] == 2 and codes[1] == 1)
        or (kind == RNN and codes.shape[0] == 1 and codes[0] == 1))
    return 0


cdef class Gates:
    """A node's cell as :func:`recur` takes it, made once: ``kind`` (:data:`KINDS`), the
    activations by code (:data:`ACTIVATIONS`) with their alphas and betas, ``clip`` (NaN for
    none) and ``flag``: input_forget (LSTM), linear_before_reset (GRU)."""
    cdef Cell cell

    def __init__(self, int kind, const int[::1] codes, const double[::1] alphas,
                 const double[::1] betas, double clip, bint flag):
        setup(&self.cell, kind, 0, codes, alphas, betas, clip, flag, _NO_PEEPHOLES)


cdef class Weights:
    """One direction's weights as :func:`recur` takes them, made once: ``wb`` (G*H: Wb, and Rb
    but GRU's), R transposed ``rt`` (H, G*H), GRU's Rb ``rb`` (G*H, zeros for the others) and
    LSTM's peepholes ``peep`` (3H or empty)."""
    cdef const float[::1] wb
    cdef const float[:, ::1] rt
    cdef const float[::1] rb
    cdef const float[::1] peep

    def __init__(self, const float[::1] wb, const float[:, ::1] rt, const float[::1] rb,
                 const float[::1] peep):
        if wb.shape[0] != rt.shape[1] or rb.shape[0] != rt.shape[1]:
            raise ValueError("Wb and Rb must have R's width")
        if peep.shape[0] not in (0, 3 * rt.shape[0]):
            raise ValueError("the peepholes must be 3 per hidden unit")
        self.wb, self.rt, self.rb, self.peep = wb, rt, rb, peep


_NO_PEEPHOLES = memoryview(bytearray(0)).cast("f")


# One direction's run through time: where each step's input projection (xw), output (y) and
# each batch entry's states (h, c) are, their strides in floats (by step, then by batch entry),
# each entry's sequence length (NULL: all ``seq``).
cdef struct Steps:
    const float *xw
    Py_ssize_t xw_step, xw_entry
    float *y
    Py_ssize_t y_step, y_entry
    float *h
    Py_ssize_t h_entry
    float *c
    Py_ssize_t c_entry
    const int64_t *lens
    Py_ssize_t seq, batch
    bint backwards


cdef void fit(Cell *cell, Weights weights, Py_ssize_t n) noexcept:
    """A cell made by :class:`Gates` fitted to ``weights`` of hidden size ``n``."""
    cell.hidden = n
    cell.peep = &weights.peep[0] if weights.peep.shape[0] else NULL
    cell.plain = cell.plain and cell.peep == NULL


cdef void lstm_default_steps(const Steps *r, const float *wb, const float *rt, double *acc,
                             Py_ssize_t n) noexcept nogil:
    """:func:`run_steps` for the default LSTM: each batch entry's steps in one call
    (onnxflow_lstm_default_steps: the same operations, the product and gates overlapped), zeros
    in y past its length. acc: scratch of 2 * 4n doubles (the second half holds 4n floats)."""
    cdef Py_ssize_t b, t, j, steps
    for b in range(r.batch):
        steps = r.seq if r.lens == NULL else max(0, min(<Py_ssize_t>r.lens[b], r.seq))
        onnxflow_lstm_default_steps(r.xw + b * r.xw_entry, r.xw_step, wb, rt, acc,
                                    <float *>(acc + 4 * n), r.h + b * r.h_entry,
                                    r.c + b * r.c_entry, r.y + b * r.y_entry, r.y_step, n,
                                    steps, r.backwards)
        for t in range(steps, r.seq):
            for j in range(n):
                r.y[t * r.y_step + b * r.y_entry + j] = 0


cdef int run_steps(const Cell *cell, Weights weights, const Steps *r) except -1:
    """Every step of ``r`` (see :class:`Steps`) with ``cell`` and ``weights``: y and the states
    written; an entry past its length keeps its state and outputs zeros."""
    cdef Py_ssize_t s, t, b, j, n = cell.hidden, width = weights.rt.shape[1]
    cdef const float *wb = &weights.wb[0]
    cdef const float *rt = &weights.rt[0, 0]
    cdef const float *rb = &weights.rb[0]
    cdef float *y
    cdef float *h
    cdef double *acc = <double *>malloc((2 * width + n) * sizeof(double))
    if acc == NULL:
        raise MemoryError()
    if cell.kind == LSTM and cell.plain:
        with nogil:
            lstm_default_steps(r, wb, rt, acc, n)
        free(acc)
        return 0
    with nogil:
        for s in range(r.seq):
            t = r.seq - 1 - s if r.backwards else s
            for b in range(r.batch):
                y = r.y + t * r.y_step + b * r.y_entry
                if r.lens != NULL and t >= r.lens[b]:
                    for j in range(n):
                        y[j] = 0
                    continue
                h = r.h + b * r.h_entry
                step(cell, r.xw + t * r.xw_step + b * r.xw_entry, wb, rt, rb, acc, acc + width,
                     acc + 2 * width, h, r.c + b * r.c_entry)
                for j in range(n):
                    y[j] = h[j]
    free(acc)
    return 0


def recur(Gates gates, Weights weights, const float[:, :, ::1] xw, float[:, ::1] h,
          float[:, ::1] c, const int64_t[::1] lens, float[:, :, ::1] y, bint backwards):
    """Run one direction of a cell (``gates``) with ``weights`` over xw (T, B, G*H): the input
    projection without its bias; the states ``h`` and ``c`` (B, H: the initial ones in, the
    final ones out; c is LSTM's, h stands in for the others), each entry's sequence length
    ``lens``; writes Y (T, B, H) into ``y``."""
    cdef Cell cell = gates.cell
    cdef Py_ssize_t seq = xw.shape[0], batch = xw.shape[1], n = h.shape[1]
    cdef Py_ssize_t width = xw.shape[2]
    cdef int gate_count = 4 if cell.kind == LSTM else (3 if cell.kind == GRU else 1)
    if (width != gate_count * n or weights.rt.shape[0] != n or weights.rt.shape[1] != width
            or h.shape[0] != batch or c.shape[0] != batch or c.shape[1] != n
            or lens.shape[0] != batch or y.shape[0] != seq or y.shape[1] != batch
            or y.shape[2] != n or (cell.kind == LSTM and weights.peep.shape[0] not in (0, 3 * n))):
        raise ValueError("the inputs, weights, states and outputs do not fit")
    fit(&cell, weights, n)
    cdef Steps steps = Steps(&xw[0, 0, 0], xw.strides[0] // 4, xw.strides[1] // 4, &y[0, 0, 0],
                             y.strides[0] // 4, y.strides[1] // 4, &h[0, 0], h.strides[0] // 4,
                             &c[0, 0], c.strides[0] // 4, &lens[0], seq, batch, backwards)
    run_steps(&cell, weights, &steps)


cdef inline object _item(tuple given, Py_ssize_t i):
    """given[i], or None past its end."""
    return <object>PyTuple_GET_ITEM(given, i) if i < PyTuple_GET_SIZE(given) else None


cdef inline bint _floats(object a, int ndim) noexcept:
    """Whether ``a`` is an ndarray (not a subclass) of native float32 with ``ndim`` dims."""
    return (type(a) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>a) == ndim
            and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_FLOAT32
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a))


cdef class Direct:
    """One direction of a node's cell (``gates``) with its ``weights`` (:class:`Weights`, made
    from the node's arrays ``given``: W, R, B, P, compared by identity) and ``wt``, W
    transposed (I, G*H): called with the node's inputs (X, W, R, B, sequence_lens, the initial
    states, P), runs it from end to end (the input projection, one BLAS GEMM as ``numpy.dot``,
    then :func:`recur`'s loop) and returns Y (T, 1, B, H) and the final states (1, B, H), all new
    arrays; returns None, having done nothing, unless X is float32 (T, B, I) with B below
    ``batch_limit``, the weights are those given, there are no sequence lengths and each state
    given is float32 (1, B, H)."""

    cdef Cell cell
    cdef Weights weights
    cdef tuple given
    cdef cnp.ndarray wt
    cdef Py_ssize_t batch_limit, n_states
    cdef bint backwards

    def __init__(self, Gates gates, Weights weights, tuple given, cnp.ndarray wt,
                 bint backwards, Py_ssize_t batch_limit):
        cdef Py_ssize_t n = weights.rt.shape[0]
        if PyTuple_GET_SIZE(given) != 4 or wt.ndim != 2 or wt.shape[1] != weights.rt.shape[1]:
            raise ValueError("expected W, R, B and P, and W transposed of R's width")
        self.cell, self.weights, self.given, self.wt = gates.cell, weights, given, wt
        fit(&self.cell, weights, n)
        self.n_states = 2 if self.cell.kind == LSTM else 1
        self.batch_limit = batch_limit
        self.backwards = backwards

    def __call__(self, tuple inputs):
        return self.call(inputs)

    cdef object call(self, tuple inputs):
        """:meth:`__call__`'s work, for :class:`Stateful` to call in C."""
        cdef object x = _item(inputs, 0)
        cdef Py_ssize_t i, n = self.cell.hidden
        if not _floats(x, 3) or _item(inputs, 4) is not None:
            return None
        for i in range(4):
            if _item(inputs, 1 + i + (3 if i == 3 else 0)) is not <object>PyTuple_GET_ITEM(
                    self.given, i):
                return None
        cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>x)
        cdef cnp.npy_intp seq = dims[0], batch = dims[1]
        if dims[2] != self.wt.shape[0] or batch >= self.batch_limit:
            return None
        cdef list states = []
        for i in range(self.n_states):
            states.append(self.initial(_item(inputs, 5 + i), batch))
            if states[i] is None:
                return None
        return self.run(<cnp.ndarray>x, states)

    cdef object initial(self, object given, cnp.npy_intp batch):
        """A new copy of the initial state ``given`` (zeros when None), or None when it is
        not float32 (1, B, H)."""
        cdef cnp.npy_intp shape[3]
        shape[0], shape[1], shape[2] = 1, batch, self.cell.hidden
        if given is None:
            return cnp.PyArray_ZEROS(3, shape, cnp.NPY_FLOAT32, 0)
        if not _floats(given, 3):
            return None
        cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>given)
        if dims[0] != 1 or dims[1] != batch or dims[2] != shape[2]:
            return None
        return cnp.PyArray_NewCopy(<cnp.ndarray>given, cnp.NPY_CORDER)

    cdef tuple run(self, cnp.ndarray x, list states):
        cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(x)
        cdef cnp.npy_intp seq = dims[0], batch = dims[1], n = self.cell.hidden
        cdef cnp.npy_intp width = self.wt.shape[1]
        cdef cnp.npy_intp rows[2]
        cdef cnp.npy_intp shape[4]
        cdef cnp.PyArray_Dims flat
        rows[0], rows[1] = seq * batch, dims[2]
        flat.ptr, flat.len = rows, 2
        xw = cnp.PyArray_MatrixProduct(cnp.PyArray_Newshape(x, &flat, cnp.NPY_CORDER), self.wt)
        shape[0], shape[1], shape[2], shape[3] = seq, 1, batch, n
        y = cnp.PyArray_EMPTY(4, shape, cnp.NPY_FLOAT32, 0)
        h, c = states[0], states[self.n_states - 1]
        cdef Steps steps = Steps(<const float *>cnp.PyArray_DATA(xw), batch * width, width,
                                 <float *>cnp.PyArray_DATA(y), batch * n, n,
                                 <float *>cnp.PyArray_DATA(h), n, <float *>cnp.PyArray_DATA(c),
                                 n, NULL, seq, batch, self.backwards)
        run_steps(&self.cell, self.weights, &steps)
        return (y, *states)


cdef class Stateful:
    """A recurrent node's stateful compiled form: ``direct`` (a :class:`Direct`, or None) tried
    first, in C; the call it does not take goes to ``first(self, inputs, attrs)``, the kernel's
    run, which may set ``direct`` for the calls after it."""

    cdef public object direct
    cdef object first

    def __init__(self, first):
        self.first, self.direct = first, None

    def __call__(self, *inputs, **attrs):
        if self.direct is not None:
            outs = (<Direct>self.direct).call(inputs)
            if outs is not None:
                return outs
        return self.first(self, inputs, attrs)


def lstm_default_step(const float[::1] xw, const float[::1] wb, const float[:, ::1] rt,
                      float[::1] h, float[::1] c):
    """One step of the default LSTM the step-by-step way (its pre-activations (xw + Wb) in
    double, then the recurrent product added, then the gates, each a call of its own): h and
    c (H) overwritten. The reference the whole-sequence loop of :func:`recur` and
    :class:`Direct` is held to, bit for bit (tests)."""
    cdef Py_ssize_t n = h.shape[0]
    if (c.shape[0] != n or rt.shape[0] != n or rt.shape[1] != 4 * n or xw.shape[0] != 4 * n
            or wb.shape[0] != 4 * n):
        raise ValueError("xw, Wb (4H), R transposed (H, 4H), h and c (H) do not fit")
    cdef Cell cell
    cdef double *acc = <double *>malloc((9 * n + 1) * sizeof(double))
    if acc == NULL:
        raise MemoryError()
    cell.kind, cell.hidden, cell.plain, cell.peep = LSTM, n, True, NULL
    step(&cell, &xw[0], &wb[0], &rt[0, 0], NULL, acc, acc + 4 * n, acc + 8 * n, &h[0], &c[0])
    free(acc)


cdef float quantize_states(const float[:, ::1] h, int32_t *q) noexcept nogil:
    """All of h (B, H) quantized to uint8 over its range widened to 0, as onnx
    DynamicQuantizeLinear in float32: ``q`` gets each code less the zero point; returns the
    scale (1 when the range is empty, every code then 0)."""
    cdef Py_ssize_t b, j, batch = h.shape[0], n = h.shape[1]
    cdef float low = 0, high = 0, scale, zero
    cdef double code
    for b in range(batch):
        for j in range(n):
            low = h[b, j] if h[b, j] < low else low
            high = h[b, j] if h[b, j] > high else high
    scale = (high - low) / <float>255
    if scale == 0:
        for j in range(batch * n):
            q[j] = 0
        return 1
    zero = nearbyintf(min(max(-low / scale, <float>0), <float>255))
    for b in range(batch):
        for j in range(n):
            code = nearbyint(<double>(h[b, j] / scale)) + zero
            q[b * n + j] = <int32_t>min(max(code, 0.0), 255.0) - <int32_t>zero
    return scale


def quantized_lstm(const float[:, :, ::1] xw, const int32_t[:, ::1] rc,
                   const float[::1] r_scale, const float[::1] rb, const float[::1] peep,
                   float[:, ::1] h, float[:, ::1] c, const int64_t[::1] lens,
                   float[:, :, ::1] y, const int[::1] codes, const double[::1] alphas,
                   const double[::1] betas, double clip, bint input_forget):
    """DynamicQuantizeLSTM's loop, forward over xw (T, B, 4H: the input projection with Wb,
    each entry's steps already in its own order): at every step the states h (B, H) quantized
    together, their product with R's codes less its zero points ``rc`` (H, 4H) exact in int32,
    scaled by the states' scale times ``r_scale`` (4H) and Rb ``rb`` added, in float32 as
    onnxruntime; then LSTM's gates (see :func:`recur`, which the other arguments follow)."""
    cdef Cell cell
    cdef Py_ssize_t seq = xw.shape[0], batch = xw.shape[1], n = h.shape[1]
    cdef Py_ssize_t t, b, j, width = xw.shape[2]
    cdef float scale
    if (width != 4 * n or rc.shape[0] != n or rc.shape[1] != width
            or r_scale.shape[0] != width or rb.shape[0] != width
            or peep.shape[0] not in (0, 3 * n) or h.shape[0] != batch or c.shape[0] != batch
            or c.shape[1] != n or lens.shape[0] != batch or y.shape[0] != seq
            or y.shape[1] != batch or y.shape[2] != n):
        raise ValueError("the inputs, weights, states and outputs do not fit")
    setup(&cell, LSTM, n, codes, alphas, betas, clip, input_forget, peep)
    cdef double *acc = <double *>malloc(width * sizeof(double))
    cdef int32_t *q = <int32_t *>malloc((batch * n + width) * sizeof(int32_t))
    cdef int32_t *dot = q + batch * n
    if acc == NULL or q == NULL:
        free(acc)
        free(q)
        raise MemoryError()
    with nogil:
        for t in range(seq):
            scale = quantize_states(h, q)
            for b in range(batch):
                if t >= lens[b]:
                    for j in range(n):
                        y[t, b, j] = 0
                    continue
                for j in range(width):
                    dot[j] = 0
                onnxflow_rnn_product_int(&rc[0, 0], width, q + b * n, dot, n, width)
                for j in range(width):
                    acc[j] = xw[t, b, j] + (<float>dot[j] * (scale * r_scale[j]) + rb[j])
                if cell.plain:
                    onnxflow_lstm_default(acc, &h[b, 0], &c[b, 0], n)
                else:
                    lstm_cell(&cell, acc, &h[b, 0], &c[b, 0])
                for j in range(n):
                    y[t, b, j] = h[b, j]
    free(acc)
    free(q)
