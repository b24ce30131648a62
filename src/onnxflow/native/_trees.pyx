# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Tree ensembles: every row walked through every tree of a packed forest.

A packed forest is one int32 array of nodes, ``W`` words each: the threshold (one float32 word,
or two for a float64 forest: ``K`` words), then ``fm``, ``yes`` and ``no`` (and a pad word for
float64). ``fm`` holds the feature tested (bits 0-26), whether the node tests set membership
(bit 27), and in bits 28-31 which comparison outcomes take ``no``: outcome 0 x < t, 1 x == t,
2 x > t, 3 unordered (a NaN). A leaf takes ``yes`` to itself and holds its leaf slot in ``no``,
so a walk may go on past its leaf: rows and trees are walked in lock step, a tile of lanes at a
time, each lane one (row, tree) pair, for the depth of the tile's deepest tree.

Rows go in blocks: a block is walked through all trees, then its leaf weights are summed per
row in tree order, the way NumPy's ``sum(axis=0)`` of a [trees, rows] array sums them (one after
the other from 0.0; pairwise, as NumPy does, when a chunk holds one row).
"""

from libc.stdint cimport int32_t, uint32_t
from libc.stdlib cimport free, malloc

ctypedef fused real:
    float
    double

cdef enum:
    FEATURE = (1 << 27) - 1
    MEMBER = 1 << 27
    LANES = 32  # (row, tree) pairs walked in lock step
    BLOCK = 128  # rows walked through all trees before their sums


cdef struct Forest:
    const int32_t* nodes
    Py_ssize_t width  # words per node
    Py_ssize_t k  # words of a threshold
    const int32_t* roots
    const int32_t* depth
    Py_ssize_t trees
    const int32_t* member_start  # per node: its set in member_values (membership nodes only)
    const int32_t* member_end
    const void* member_values  # each set sorted, in the forest's float type


cdef inline int32_t step(const Forest* f, int32_t node, const real* row) noexcept nogil:
    """The node that ``node`` leads to for the row (a leaf leads to itself)."""
    cdef const int32_t* nd = f.nodes + node * f.width
    cdef real t = (<const real*>nd)[0]
    cdef uint32_t fm = <uint32_t>nd[f.k]
    cdef real v = row[fm & FEATURE]
    cdef int le = v <= t
    cdef int gt = v > t
    cdef int code = (v == t) + (le == gt) + ((1 - le) << 1)
    if fm & MEMBER:
        if v != v:
            code = 3
        elif _contains(f, node, v):
            code = 0
        else:
            code = 2
    return nd[f.k + 1 + ((fm >> (28 + code)) & 1)]


cdef inline bint _contains(const Forest* f, int32_t node, real v) noexcept nogil:
    cdef const real* values = <const real*>f.member_values
    cdef int32_t lo = f.member_start[node], hi = f.member_end[node], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < f.member_end[node] and values[lo] == v


cdef void walk_tile(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t r0, Py_ssize_t nr,
    Py_ssize_t t0, Py_ssize_t nt, int32_t* out, Py_ssize_t out_r0,
) noexcept nogil:
    """Walk rows r0..r0+nr through trees t0..t0+nt; out[(r - out_r0) * trees + t] = the node."""
    cdef int32_t node[LANES]
    cdef const real* rows[LANES]
    cdef Py_ssize_t lanes = nr * nt, i, d, depth = 0
    for i in range(lanes):
        node[i] = f.roots[t0 + i % nt]
        rows[i] = x + (r0 + i // nt) * n_features
    for i in range(nt):
        if f.depth[t0 + i] > depth:
            depth = f.depth[t0 + i]
    for d in range(depth):
        for i in range(lanes):
            node[i] = step(f, node[i], rows[i])
    for i in range(lanes):
        out[(r0 - out_r0 + i // nt) * f.trees + t0 + i % nt] = node[i]


cdef void walk_block(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t r0, Py_ssize_t nr,
    int32_t* out,
) noexcept nogil:
    """out[r * trees + t] = the leaf row r0 + r reaches in tree t, for nr rows."""
    cdef Py_ssize_t t, r, lanes_rows, group, lanes = LANES
    if nr >= LANES:
        for t in range(f.trees):
            r = 0
            while r < nr:
                lanes_rows = min(lanes, nr - r)
                walk_tile(f, x, n_features, r0 + r, lanes_rows, t, 1, out, r0)
                r += lanes
    else:
        group = LANES // nr
        t = 0
        while t < f.trees:
            walk_tile(f, x, n_features, r0, nr, t, min(group, f.trees - t), out, r0)
            t += group


cdef double pairwise(const double* a, Py_ssize_t n) noexcept nogil:
    """NumPy's pairwise sum of a[:n] (numpy/_core/src/umath/loops_utils.h)."""
    cdef double r[8]
    cdef double res
    cdef Py_ssize_t i, j, n2
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        for j in range(8):
            r[j] = a[j]
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise(a, n2) + pairwise(a + n2, n - n2)


cdef double sum_row(
    const Forest* f, const int32_t* leaves, const double* weights, Py_ssize_t targets,
    Py_ssize_t j, bint pairwise_order, double* scratch,
) noexcept nogil:
    """The sum over trees of weights[slot of leaves[t], j], in tree order from 0.0 (NumPy's
    pairwise order when ``pairwise_order``)."""
    cdef Py_ssize_t t
    cdef double acc = 0.0
    cdef Py_ssize_t no = f.k + 2  # a leaf's slot
    if pairwise_order:
        for t in range(f.trees):
            scratch[t] = weights[<Py_ssize_t>f.nodes[leaves[t] * f.width + no] * targets + j]
        return acc + pairwise(scratch, f.trees)
    for t in range(f.trees):
        acc += weights[<Py_ssize_t>f.nodes[leaves[t] * f.width + no] * targets + j]
    return acc


cdef Forest forest_of(
    const int32_t[::1] nodes, Py_ssize_t k, const int32_t[::1] roots, const int32_t[::1] depth,
    const int32_t[::1] member_start, const int32_t[::1] member_end, const void* member_values,
):
    cdef Forest f
    f.nodes = &nodes[0]
    f.k = k
    f.width = 4 if k == 1 else 6
    f.roots = &roots[0]
    f.depth = &depth[0]
    f.trees = roots.shape[0]
    f.member_start = &member_start[0]
    f.member_end = &member_end[0]
    f.member_values = member_values
    return f


def leaves(
    const real[:, ::1] x, const int32_t[::1] nodes, const int32_t[::1] roots,
    const int32_t[::1] depth, const int32_t[::1] member_start, const int32_t[::1] member_end,
    const real[::1] member_values, int32_t[:, ::1] out,
):
    """out[r, t] = the node row r reaches in tree t (the forest packed for x's float type)."""
    cdef Py_ssize_t n = x.shape[0], r0
    cdef Forest f = forest_of(
        nodes, sizeof(real) // 4, roots, depth, member_start, member_end, &member_values[0]
    )
    cdef Py_ssize_t block_rows = BLOCK
    if n == 0 or f.trees == 0:
        return
    with nogil:
        r0 = 0
        while r0 < n:
            walk_block(&f, &x[0, 0], x.shape[1], r0, min(block_rows, n - r0), &out[r0, 0])
            r0 += block_rows


def sums(
    const real[:, ::1] x, const int32_t[::1] nodes, const int32_t[::1] roots,
    const int32_t[::1] depth, const int32_t[::1] member_start, const int32_t[::1] member_end,
    const real[::1] member_values, const double[:, ::1] weights, Py_ssize_t chunk,
    double[:, ::1] out,
):
    """out[r, j] = the sum of weights[slot, j] over the leaves row r reaches, trees in order,
    as NumPy sums a [trees, rows] chunk of ``chunk`` rows over its first axis."""
    cdef Py_ssize_t n = x.shape[0], r0, nr, targets = weights.shape[1], r, j
    cdef Forest f = forest_of(
        nodes, sizeof(real) // 4, roots, depth, member_start, member_end, &member_values[0]
    )
    cdef Py_ssize_t block_rows = BLOCK
    if n == 0 or f.trees == 0:
        return
    cdef int32_t* block = <int32_t*>malloc(BLOCK * f.trees * sizeof(int32_t))
    cdef double* scratch = <double*>malloc(f.trees * sizeof(double))
    cdef bint pairwise_order
    if block == NULL or scratch == NULL:
        free(block)
        free(scratch)
        raise MemoryError()
    with nogil:
        r0 = 0
        while r0 < n:
            nr = min(block_rows, n - r0)
            walk_block(&f, &x[0, 0], x.shape[1], r0, nr, block)
            for r in range(nr):
                pairwise_order = _chunk_rows(r0 + r, n, chunk) == 1
                for j in range(targets):
                    out[r0 + r, j] = sum_row(
                        &f, block + r * f.trees, &weights[0, 0], targets, j, pairwise_order,
                        scratch,
                    )
            r0 += block_rows
    free(block)
    free(scratch)


cdef inline Py_ssize_t _chunk_rows(Py_ssize_t r, Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    """How many rows the chunk of row r holds when n rows go in chunks of ``chunk``."""
    cdef Py_ssize_t start = (r // chunk) * chunk
    return min(chunk, n - start)
