# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Tree ensembles: every row walked through every tree of a packed forest.

A packed forest is one int32 array of nodes, ``width`` words each: the threshold (one float32
word, or two for a float64 forest), then ``fm``, ``yes`` and ``no`` (and a pad word for float64).
``fm`` holds the feature tested (bits 0-26), whether the node tests set membership (bit 27), and
in bits 28-31 which comparison outcomes take ``no``: outcome 0 x < t, 1 x == t, 2 x > t,
3 unordered (a NaN). A leaf takes ``yes`` to itself and holds its leaf slot in ``no``, so a walk
may go on past its leaf: a tree walks up to 32 rows in lock step for its depth (no branch to
mispredict). Fewer rows than that walk (row, tree) pairs in 32 lanes instead: in lock step
when all trees have one depth, else each lane to its own leaf and then the next pair (trees of
unequal depths waste no steps). In a forest without membership nodes, 8 lanes at a time keep
their nodes in registers through a branch-free step: 8 rows of a tile through one tree, or,
under 8 rows, one row through 8 trees taken in order of depth.

A forest whose tests all compare one feature with a threshold (no sets, no ==/!= tests) and that
is shallow enough is also laid out *perfect*: every tree padded to the forest's depth D in heap
order, node i's children at 2i+1 and 2i+2, each test turned into ``v < t`` (t the next value up
for ``<=``; a pack's ``>`` and ``>=`` tests are already ``<=`` and ``<`` with their children
swapped), a leaf above level D copied into every leaf slot below it. A step is then
``i = 2i + 2 - (v < t)``: no child to load, no comparison code. Rows without a NaN (NaN tracks
differ per node) walk that layout, in lanes of rows through one tree (or of trees, under PLANES
rows), D steps each; a row with a NaN is walked again by the nodes (a block of more than a
quarter of such rows walks only by the nodes). A float32 forest of at most 6 levels
walks 16 rows and more by bit vectors where the CPU has AVX-512 (``_trees.h``): every test of a
tree on 16 rows at once, none waiting for another (measured on xgboost's 100 trees of depth 6:
0.4 us a row, against 0.6 for the perfect steps and 1.0 for the node walk). A forest of such
tests too deep for the perfect layout walks rows without NaN by its nodes in that ``v < t``
form (``cnodes``: the step loads no comparison code; lightgbm's 300 trees: 15% faster).

From 8 rows on, an oblivious forest (every tree tests one feature and threshold per level, as
catboost's do) is walked without following nodes: a row's leaf in a tree is the index made of its outcomes
at the tree's levels, one bit each, looked up in the tree's table of leaf slots (no step waits
for the one before).

Rows go in blocks: a block is walked through all trees, then its leaf weights are summed per
row in tree order, the way NumPy's ``sum(axis=0)`` of a [trees, rows] array sums them (one after
the other from 0.0; pairwise, as NumPy does, when its chunk holds one row), four rows at a time.
Many rows go over plain threads (``_threads.h``, up to the forest's ``threads``): each takes the
next unit of rows until none is left; a row's sums are the same whichever thread takes it.

:class:`Post` finishes the sums of a tree ensemble kernel in one pass (base values, top class,
post_transform, float32), in the same call as the walk (:class:`Predict`, which makes the outputs).
"""

import os

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc

cnp.import_array()

ctypedef fused real:
    float
    double

cdef extern from "_threads.h" nogil:
    int of_parallel(void* (*fn)(void*) noexcept nogil, void* arg, int n)
    long of_next(long* counter)
    void of_add(long* counter, long value)

cdef extern from "_trees.h" nogil:
    void of_level_f32(const float* column, float t, uint32_t takes_no, uint32_t* index, long n)
    void of_level_f64(const double* column, double t, uint32_t takes_no, uint32_t* index, long n)
    bint of_any_nan_f32(const float* x, long n)
    bint of_any_nan_f64(const double* x, long n)
    ctypedef struct of_test:
        float t
        int32_t feature
        uint64_t keep
    bint of_bitvector_ok()
    void of_bitvector_walk(
        const float* x, long n_features, long nr, long trees, const of_test* tests,
        const int32_t* start, const int32_t* leaves, long width, int32_t* out, float* cols,
    )

cdef enum:
    FEATURE = (1 << 27) - 1
    MEMBER = 1 << 27
    LANES = 32  # (row, tree) pairs walked in lock step
    BLOCK = 256  # rows walked through all trees before their sums
    GROUP = 8  # rows walked together, their nodes in registers (forests without sets)
    LEVELS = 16  # the most levels of an oblivious tree
    UNIT = 48  # rows a thread takes at a time (4 perfect-walk lane groups, 3 bit-vector groups)
    PARALLEL_WORK = 100000  # steps (rows x levels walked) from which more threads than one walk
    OBLIVIOUS_STEP = 4  # levels of an oblivious walk that cost about one step of a node walk
    PLANES = 12  # lanes of the perfect walk (measured: 8 and 16 took 10% longer)
    PERFECT_LEVELS = 12  # the deepest forest laid out perfect
    PERFECT_GROWTH = 16  # ... in at most this many times its packed nodes (or PERFECT_FLOOR)
    PERFECT_FLOOR = 1 << 16
    PERFECT_MOST = 1 << 20  # ... and at most this many leaf slots (12 MB in float32)
    BITVECTOR_LEVELS = 6  # the deepest perfect forest walked by bit vectors (64 leaf slots)
    BITVECTOR_ROWS = 16  # the fewest rows walked by bit vectors (16 at a time)
    NAN_SHARE = 4  # the v < t forms walk a block unless more than a quarter of its rows hold NaN


cdef struct Forest:
    const int32_t* nodes
    const int32_t* roots
    const int32_t* depth
    Py_ssize_t trees
    const int32_t* member_start  # per node: its set in member_values (membership nodes only)
    const int32_t* member_end
    const void* member_values  # each set sorted, in the forest's float type
    bint even  # all trees of one depth
    bint members  # some node tests set membership
    const int32_t* order  # the trees by depth, shallowest first
    bint oblivious  # one test per level of each tree: walked by walk_oblivious
    const int32_t* level_node  # per tree, from level_start[t]: a node of each of its levels
    const int32_t* level_start
    const int32_t* table  # per tree, from table_start[t]: the leaf slot of each outcome index
    const int32_t* table_start
    int pdepth  # the perfect layout's depth D (-1: none)
    const int32_t* pnodes  # tree t's 2^D - 1 nodes from word t * (2^D - 1) * pwords: t, feature
    const int32_t* pleaves  # tree t's 2^D leaf slots from t * 2^D
    const of_test* tests  # a float32 perfect forest's tests for of_bitvector_walk (NULL: none)
    const int32_t* test_start  # tree t's from test_start[t] (set with the layout's tests)
    const int32_t* cnodes  # the packed nodes with each test as v < t taking yes (NULL: none)


cdef inline Py_ssize_t words(real t) noexcept nogil:
    """A node's int32 words in a forest of thresholds of t's type."""
    return 4 if real is float else 6


cdef inline bint contains(const Forest* f, int32_t node, real v) noexcept nogil:
    """Whether v is in the (sorted) set of membership node ``node``."""
    cdef const real* values = <const real*>f.member_values
    cdef int32_t lo = f.member_start[node], hi = f.member_end[node], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < f.member_end[node] and values[lo] == v


cdef inline int32_t step(const Forest* f, int32_t node, const real* row) noexcept nogil:
    """The node that ``node`` leads to for the row (a leaf leads to itself)."""
    cdef Py_ssize_t k = sizeof(real) // 4
    cdef const int32_t* nd = f.nodes + node * words(<real>0)
    cdef real t = (<const real*>nd)[0]
    cdef uint32_t fm = <uint32_t>nd[k]
    cdef real v = row[fm & FEATURE]
    # 0 x < t, 1 x == t, 2 x > t, 3 x NaN (a NaN threshold's node takes one child for all codes)
    cdef int code = (v > t) + (v >= t) + 3 * (v != v)
    if fm & MEMBER:
        if v != v:
            code = 3
        elif contains(f, node, v):
            code = 0
        else:
            code = 2
    return nd[k + 1 + ((fm >> (28 + code)) & 1)]


cdef void walk_tile(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t r0, Py_ssize_t nr,
    Py_ssize_t t, int32_t* out, bint canonical,
) noexcept nogil:
    """Walk nr rows from x[r0] through tree t in lock step, for the tree's depth:
    out[r * trees + t] = the leaf slot row r0 + r reaches (``canonical``: by f.cnodes, rows
    without NaN)."""
    cdef int32_t node[LANES]
    cdef const real* rows[LANES]
    cdef Py_ssize_t i, d
    cdef Py_ssize_t slot = sizeof(real) // 4 + 2
    cdef Py_ssize_t grouped = 0 if f.members else nr - nr % GROUP
    i = 0
    while i < grouped:
        walk_group(
            f.cnodes if canonical else f.nodes, f.roots[t], f.depth[t], x + (r0 + i) * n_features,
            n_features, node + i, canonical,
        )
        i += GROUP
    for i in range(grouped, nr):
        node[i] = f.roots[t]
        rows[i] = x + (r0 + i) * n_features
    for d in range(f.depth[t]):
        for i in range(grouped, nr):
            node[i] = step(f, node[i], rows[i])
    for i in range(nr):
        out[i * f.trees + t] = f.nodes[node[i] * words(<real>0) + slot]


cdef inline int32_t plain_step(
    const int32_t* nodes, int32_t node, const real* row, bint canonical
) noexcept nogil:
    """:func:`step` in a forest without membership nodes: no branch at all. ``canonical``: the
    nodes are f.cnodes, each test ``v < t`` taking ``yes`` (rows without NaN)."""
    cdef Py_ssize_t k = sizeof(real) // 4
    cdef const int32_t* nd = nodes + node * words(<real>0)
    cdef real t = (<const real*>nd)[0]
    cdef uint32_t fm = <uint32_t>nd[k]
    cdef real v = row[fm & FEATURE]
    if canonical:
        return nd[k + 2 - (v < t)]
    cdef uint32_t code = (v > t) + (v >= t) + 3 * (v != v)
    return nd[k + 1 + ((fm >> (28 + code)) & 1)]


cdef inline void walk_group(
    const int32_t* nodes, int32_t root, Py_ssize_t depth, const real* x, Py_ssize_t n_features,
    int32_t* reached, bint canonical,
) noexcept nogil:
    """Walk GROUP consecutive rows from x through the tree at ``root`` for its depth, in a
    forest without membership nodes: reached[i] = the node row i ends on. The lanes' nodes
    stay in registers from step to step (no store and load between them)."""
    cdef int32_t node[GROUP]
    cdef Py_ssize_t i, d
    for i in range(GROUP):
        node[i] = root
    for d in range(depth):
        for i in range(GROUP):
            node[i] = plain_step(nodes, node[i], x + i * n_features, canonical)
    for i in range(GROUP):
        reached[i] = node[i]


cdef void walk_trees(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, Py_ssize_t t0,
    Py_ssize_t nt, int32_t* out,
) noexcept nogil:
    """Walk nr rows through trees t0..t0+nt (nr * nt <= LANES) in lock step, for the depth
    of the deepest: out[r * trees + t] = the leaf slot row r reaches in tree t."""
    cdef int32_t node[LANES]
    cdef const real* rows[LANES]
    cdef int32_t* at[LANES]
    cdef Py_ssize_t i = 0, r, t, d, depth = 0
    cdef Py_ssize_t slot = sizeof(real) // 4 + 2
    for t in range(t0, t0 + nt):
        depth = max(depth, <Py_ssize_t>f.depth[t])
        for r in range(nr):
            node[i], rows[i], at[i] = f.roots[t], x + r * n_features, out + r * f.trees + t
            i += 1
    for d in range(depth):
        for i in range(nr * nt):
            node[i] = step(f, node[i], rows[i])
    for i in range(nr * nt):
        at[i][0] = f.nodes[node[i] * words(<real>0) + slot]


cdef void walk_jobs(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """out[r * trees + t] = the leaf slot row r of x reaches in tree t, for nr rows: each lane
    walks one (row, tree) pair to its leaf, then takes the next pair (rows first)."""
    cdef int32_t node[LANES]
    cdef const real* rows[LANES]
    cdef int32_t* at[LANES]
    cdef Py_ssize_t active = 0, i = 0, row = 0, tree = 0
    cdef Py_ssize_t slot = sizeof(real) // 4 + 2
    cdef int32_t nxt
    while active < LANES and tree < f.trees:
        node[active], rows[active], at[active] = f.roots[tree], x + row * n_features, out + row * f.trees + tree
        active += 1
        row += 1
        if row == nr:
            row, tree = 0, tree + 1
    while active:
        i = 0
        while i < active:
            nxt = step(f, node[i], rows[i])
            if nxt != node[i]:
                node[i] = nxt
                i += 1
                continue
            at[i][0] = f.nodes[nxt * words(<real>0) + slot]
            if tree < f.trees:
                node[i], rows[i], at[i] = f.roots[tree], x + row * n_features, out + row * f.trees + tree
                row += 1
                if row == nr:
                    row, tree = 0, tree + 1
                i += 1
            else:
                active -= 1
                node[i], rows[i], at[i] = node[active], rows[active], at[active]


cdef inline void walk_trees_of_row(
    const int32_t* nodes, const int32_t* roots, Py_ssize_t depth, const real* row,
    int32_t* reached, bint canonical,
) noexcept nogil:
    """Walk one row through GROUP trees (their roots given) for ``depth`` steps, in a forest
    without membership nodes, the lanes' nodes in registers: reached[i] = tree i's node."""
    cdef int32_t node[GROUP]
    cdef Py_ssize_t i, d
    for i in range(GROUP):
        node[i] = roots[i]
    for d in range(depth):
        for i in range(GROUP):
            node[i] = plain_step(nodes, node[i], row, canonical)
    for i in range(GROUP):
        reached[i] = node[i]


cdef void walk_rows(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out,
    bint canonical,
) noexcept nogil:
    """out[r * trees + t] = the leaf slot row r of x reaches in tree t, for nr rows of a forest
    without membership nodes: each row through GROUP trees at a time, taken in order of depth
    (a group walks for the depth of its deepest, which its others little fall short of);
    ``canonical``: by f.cnodes (rows without NaN)."""
    cdef const int32_t* nodes = f.cnodes if canonical else f.nodes
    cdef int32_t roots[GROUP]
    cdef int32_t reached[GROUP]
    cdef Py_ssize_t r, g, i, t, d, slot = sizeof(real) // 4 + 2
    cdef int32_t node
    cdef const real* row
    for r in range(nr):
        row = x + r * n_features
        g = 0
        while g + GROUP <= f.trees:
            for i in range(GROUP):
                roots[i] = f.roots[f.order[g + i]]
            walk_trees_of_row(nodes, roots, f.depth[f.order[g + GROUP - 1]], row, reached, canonical)
            for i in range(GROUP):
                out[r * f.trees + f.order[g + i]] = f.nodes[reached[i] * words(<real>0) + slot]
            g += GROUP
        for g in range(g, f.trees):  # the deepest few, one at a time
            t = f.order[g]
            node = f.roots[t]
            for d in range(f.depth[t]):
                node = plain_step(nodes, node, row, canonical)
            out[r * f.trees + t] = f.nodes[node * words(<real>0) + slot]


cdef inline bint any_nan(const real* x, Py_ssize_t n) noexcept nogil:
    """Whether x[:n] holds a NaN."""
    if real is float:
        return of_any_nan_f32(x, n)
    return of_any_nan_f64(x, n)


cdef inline Py_ssize_t pwords(real t) noexcept nogil:
    """A perfect node's int32 words in a forest of thresholds of t's type: the threshold, then
    the feature (and a pad word for float64)."""
    return 2 if real is float else 4


cdef inline void perfect_lanes(
    const int32_t** trees, const real** rows, Py_ssize_t depth, uint32_t* reached
) noexcept nogil:
    """Walk PLANES (tree, row) lanes of a perfect forest for ``depth`` steps, their heap
    indices in registers: reached[i] = the heap index lane i ends on (2^depth - 1 and up)."""
    cdef uint32_t node[PLANES]
    cdef const int32_t* nd
    cdef Py_ssize_t i, d
    for i in range(PLANES):
        node[i] = 0
    for d in range(depth):
        for i in range(PLANES):
            nd = trees[i] + node[i] * pwords(<real>0)
            node[i] = 2 * node[i] + 2 - (rows[i][nd[sizeof(real) // 4]] < (<const real*>nd)[0])
    for i in range(PLANES):
        reached[i] = node[i]


cdef void walk_perfect(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """out[r * trees + t] = the leaf slot row r of x reaches in tree t, for nr rows without NaN
    of a perfect forest: PLANES rows through one tree at a time, or, under PLANES rows, one row
    through PLANES trees (a last short group repeats its last lane)."""
    cdef const int32_t* trees[PLANES]
    cdef const real* rows[PLANES]
    cdef uint32_t reached[PLANES]
    cdef Py_ssize_t inner = (1 << f.pdepth) - 1, stride = inner * pwords(<real>0)
    cdef Py_ssize_t t, r, i, tt, rr, by_rows = nr >= PLANES
    cdef Py_ssize_t outer = f.trees if by_rows else nr, lanes = nr if by_rows else f.trees
    for t in range(outer):
        r = 0
        while r < lanes:
            for i in range(PLANES):
                tt = t if by_rows else min(r + i, lanes - 1)
                rr = min(r + i, lanes - 1) if by_rows else t
                trees[i], rows[i] = f.pnodes + tt * stride, x + rr * n_features
            perfect_lanes(trees, rows, f.pdepth, reached)
            for i in range(min(<Py_ssize_t>PLANES, lanes - r)):
                tt = t if by_rows else r + i
                rr = r + i if by_rows else t
                out[rr * f.trees + tt] = f.pleaves[tt * (inner + 1) + reached[i] - inner]
            r += PLANES


cdef bint walk_bitvector(
    const Forest* f, const float* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """:func:`walk_perfect` by bit vectors (``_trees.h``, a float32 forest of f.tests); False
    (nothing walked) when out of memory."""
    cdef char* raw = <char*>malloc(BITVECTOR_ROWS * n_features * sizeof(float) + 64)
    if raw == NULL:
        return False
    cdef float* cols = <float*>(raw + 64 - <uintptr_t>raw % 64)
    of_bitvector_walk(
        x, n_features, nr, f.trees, f.tests, f.test_start, f.pleaves, 1 << f.pdepth, out, cols
    )
    free(raw)
    return True


cdef bint walk_oblivious(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """out[r * trees + t] = the leaf slot row r of x reaches in tree t, for nr rows of an
    oblivious forest: each level's outcome is one bit of the leaf's index in the tree's table
    (1: the level's test takes ``no``), the first level the highest bit. The rows are first
    turned into columns, so that a level tests consecutive values of one feature, many rows
    at a time (SIMD). False (nothing walked) when out of memory."""
    cdef real* columns = <real*>malloc(nr * n_features * sizeof(real))
    cdef Py_ssize_t r, j
    if columns == NULL:
        return False
    for r in range(nr):
        for j in range(n_features):
            columns[j * nr + r] = x[r * n_features + j]
    oblivious_columns(f, columns, nr, out)
    free(columns)
    return True


cdef void oblivious_columns(
    const Forest* f, const real* columns, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """:func:`walk_oblivious` of nr rows given as columns (feature j of row r at
    columns[j * nr + r]): level by level, each level's bit of every row in one loop
    (``_trees.h``)."""
    cdef uint32_t index[BLOCK]
    cdef Py_ssize_t t, d, r, k = sizeof(real) // 4
    cdef const int32_t* nd
    cdef const int32_t* table
    cdef uint32_t fm
    for t in range(f.trees):
        for r in range(nr):
            index[r] = 0
        for d in range(f.depth[t]):
            nd = f.nodes + f.level_node[f.level_start[t] + d] * words(<real>0)
            fm = <uint32_t>nd[k]
            if real is float:
                of_level_f32(columns + (fm & FEATURE) * nr, (<const float*>nd)[0], fm >> 28, index, nr)
            else:
                of_level_f64(columns + (fm & FEATURE) * nr, (<const double*>nd)[0], fm >> 28, index, nr)
        table = f.table + f.table_start[t]
        for r in range(nr):
            out[r * f.trees + t] = table[index[r]]


cdef void walk_block(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out
) noexcept nogil:
    """out[r * trees + t] = the leaf slot row r of x reaches in tree t, for nr rows: by the
    forest's ``v < t`` forms (perfect, or cnodes) unless more than 1 / NAN_SHARE of the rows
    hold a NaN (those rows walked again by their nodes), else by its nodes."""
    if f.oblivious and nr >= GROUP and walk_oblivious(f, x, n_features, nr, out):
        return  # (fewer rows: the walk of 8 trees at a time in registers takes fewer steps)
    cdef bint forms = f.pdepth >= 0 or f.cnodes != NULL
    cdef Py_ssize_t r, nan_rows = rows_with_nan(x, n_features, nr) if forms else nr
    cdef bint clean = forms and nan_rows * NAN_SHARE <= nr
    if clean and f.pdepth >= 0:
        if not (real is float and f.tests != NULL and nr >= BITVECTOR_ROWS
                and walk_bitvector(f, <const float*>x, n_features, nr, out)):
            walk_perfect(f, x, n_features, nr, out)
    else:
        walk_nodes(f, x, n_features, nr, out, clean)
    for r in range(nr if clean and nan_rows else 0):
        if any_nan(x + r * n_features, n_features):
            walk_rows(f, x + r * n_features, n_features, 1, out + r * f.trees, False)


cdef Py_ssize_t rows_with_nan(const real* x, Py_ssize_t n_features, Py_ssize_t nr) noexcept nogil:
    """How many of the nr rows at x hold a NaN."""
    cdef Py_ssize_t r, n = 0
    if not any_nan(x, nr * n_features):
        return 0
    for r in range(nr):
        n += any_nan(x + r * n_features, n_features)
    return n


cdef void walk_nodes(
    const Forest* f, const real* x, Py_ssize_t n_features, Py_ssize_t nr, int32_t* out,
    bint canonical,
) noexcept nogil:
    """:func:`walk_block` by the forest's nodes (``canonical``: by f.cnodes where the walk
    steps without branches, for rows without NaN)."""
    cdef Py_ssize_t t = 0, r, lanes = LANES, group
    canonical = canonical and f.cnodes != NULL
    if nr < GROUP and not f.members:  # each row through 8 trees at a time, in registers
        walk_rows(f, x, n_features, nr, out, canonical)
        return
    if nr < LANES and not f.even:  # lanes across trees of unequal depths: each to its leaf
        walk_jobs(f, x, n_features, nr, out)
        return
    if nr < LANES:  # lanes across trees of one depth, in lock step
        group = lanes // nr
        while t < f.trees:
            walk_trees(f, x, n_features, nr, t, min(group, f.trees - t), out)
            t += group
        return
    for t in range(f.trees):
        r = 0
        while r < nr:
            walk_tile(f, x, n_features, r, min(lanes, nr - r), t, out + r * f.trees, canonical)
            r += lanes


cdef double pairwise(const double* a, Py_ssize_t n) noexcept nogil:
    """NumPy's pairwise sum of a[:n] (numpy/_core/src/umath/loops_utils.h.src)."""
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


cdef void sum_row(
    const int32_t* slots, Py_ssize_t trees, const double* weights, Py_ssize_t targets,
    bint pairwise_order, double* out, double* scratch,
) noexcept nogil:
    """out[j] = 0.0 + the sum over trees of weights[slots[t], j]: one after the other in tree
    order, or pairwise (NumPy's order when it reduces one row)."""
    cdef Py_ssize_t t, j
    cdef const double* w
    if pairwise_order:
        for j in range(targets):
            for t in range(trees):
                scratch[t] = weights[slots[t] * targets + j]
            out[j] = 0.0 + pairwise(scratch, trees)
        return
    for j in range(targets):
        out[j] = 0.0
    for t in range(trees):
        w = weights + slots[t] * targets
        for j in range(targets):
            out[j] += w[j]


cdef void sum_rows4(
    const int32_t* slots, Py_ssize_t trees, const double* weights, Py_ssize_t targets,
    double* out,
) noexcept nogil:
    """:func:`sum_row` (in tree order) of 4 consecutive rows at once: their sums are
    independent chains of additions, which the CPU overlaps (slots and out hold the rows one
    after the other)."""
    cdef Py_ssize_t t, j, k
    cdef double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0
    cdef const double* w
    if targets == 1:
        for t in range(trees):
            a0 += weights[slots[t]]
            a1 += weights[slots[trees + t]]
            a2 += weights[slots[2 * trees + t]]
            a3 += weights[slots[3 * trees + t]]
        out[0], out[1], out[2], out[3] = a0, a1, a2, a3
        return
    for j in range(4 * targets):
        out[j] = 0.0
    for t in range(trees):
        for k in range(4):
            w = weights + slots[k * trees + t] * targets
            for j in range(targets):
                out[k * targets + j] += w[j]


cdef inline Py_ssize_t chunk_rows(Py_ssize_t r, Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    """How many rows the chunk of row r holds when n rows go in chunks of ``chunk``."""
    return min(chunk, n - (r // chunk) * chunk)


cdef extern from "<math.h>" nogil:
    double exp(double x)
    double nextafter(double x, double y)
    float nextafterf(float x, float y)
    const double INFINITY
    const double NAN

cdef enum:
    NONE = 0
    SOFTMAX = 1
    LOGISTIC = 2
    SOFTMAX_ZERO = 3
    REGRESSION = 0  # Post modes: scores only
    CLASSES = 1  # the top class, and the scores of every class
    ONE_SCORE = 2  # two classes from the positive one's score


cdef Py_ssize_t top_class(const double* s, const double* mask, Py_ssize_t n) noexcept nogil:
    """NumPy's argmax of s + mask: the first largest, or the first NaN."""
    cdef Py_ssize_t j, best = 0
    cdef double v, top = s[0] + mask[0]
    if top != top:
        return 0
    for j in range(1, n):
        v = s[j] + mask[j]
        if not v <= top:
            top, best = v, j
            if top != top:
                return best
    return best


cdef void transform_row(double* s, Py_ssize_t n, int how) noexcept nogil:
    """post_transform NONE, SOFTMAX, LOGISTIC or SOFTMAX_ZERO of one row, in place, as
    ``common.transform_scores`` computes it (its sums from 0.0 in order, as NumPy sums a short
    row; exp from libm, NumPy's may differ in the last bit of a double)."""
    cdef Py_ssize_t j
    cdef double top, total = 0.0
    if how == LOGISTIC:
        for j in range(n):
            s[j] = 1.0 / (1.0 + exp(-s[j]))
        return
    if how != SOFTMAX and how != SOFTMAX_ZERO:
        return
    top = s[0]
    for j in range(n):  # np.max: the first NaN wins
        if top != top:
            break
        if s[j] > top or s[j] != s[j]:
            top = s[j]
    for j in range(n):
        s[j] = 0.0 if how == SOFTMAX_ZERO and s[j] == 0 else exp(s[j] - top)
        total += s[j]
    for j in range(n):
        s[j] = 0.0 if how == SOFTMAX_ZERO and not total > 0 else s[j] / total


cdef class Post:
    """What a tree ensemble does to its [N, targets] float64 aggregate, in one pass: adds
    base values, picks each row's top class (classifiers), applies the post_transform and
    rounds to float32, as the NumPy form does it step by step."""

    cdef const double[::1] base, mask
    cdef const int64_t[::1] labels
    cdef int how, mode
    cdef double threshold
    cdef bint probability
    cdef Py_ssize_t width

    def __init__(
        self, const double[::1] base, int how, int mode, const double[::1] mask,
        const int64_t[::1] labels, double threshold, bint probability,
    ):
        if how < 0 or how > SOFTMAX_ZERO or mode < 0 or mode > ONE_SCORE or base.shape[0] == 0:
            raise ValueError("an unknown post_transform or mode, or no base values")
        if mode == CLASSES and mask.shape[0] != base.shape[0]:
            raise ValueError("one mask value per class")
        self.base, self.how, self.mode, self.mask, self.labels = base, how, mode, mask, labels
        self.threshold, self.probability = threshold, probability
        self.width = 2 if mode == ONE_SCORE else base.shape[0]

    def __call__(self, const double[:, ::1] summed, float[:, ::1] out, int64_t[::1] top):
        """out = the scores, top = each row's label (its class index where no int64 labels
        were given; unused for a regression) of the aggregate ``summed``."""
        cdef Py_ssize_t n = summed.shape[0]
        self.check(n, summed.shape[1], out, top)
        cdef double* row = <double*>malloc(max(summed.shape[1], 2) * sizeof(double))
        if row == NULL:
            raise MemoryError()
        if n:
            with nogil:
                self.finish_rows(&summed[0, 0], summed.shape[1], n, &out[0, 0], &top[0] if top.shape[0] else NULL, row)
        free(row)

    cdef check(self, Py_ssize_t n, Py_ssize_t targets, float[:, ::1] out, int64_t[::1] top):
        """Raise ValueError unless an [n, targets] aggregate fits this post and its outputs."""
        if out.shape[0] != n:
            raise ValueError("an aggregate or output of the wrong shape")
        self.check_rows(n, targets, out.shape[1], top.shape[0])

    cdef check_rows(self, Py_ssize_t n, Py_ssize_t targets, Py_ssize_t width, Py_ssize_t labels):
        """:meth:`check` of n rows of ``targets`` sums into n rows of ``width`` scores and
        ``labels`` labels."""
        cdef Py_ssize_t cols = 1 if self.mode == ONE_SCORE else self.base.shape[0]
        if (targets < cols if self.mode == ONE_SCORE else targets != cols) or width != self.width:
            raise ValueError("an aggregate or output of the wrong shape")
        if self.mode != REGRESSION and labels != n:
            raise ValueError("one top label per row")

    cdef void finish_rows(
        self, const double* summed, Py_ssize_t stride, Py_ssize_t n, float* out, int64_t* top,
        double* row,
    ) noexcept nogil:
        """The rows of an aggregate ``stride`` values apart, finished into out (``width``
        apart) and top; ``row``: scratch of max(targets, 2) values."""
        cdef Py_ssize_t r, j
        cdef Py_ssize_t cols = 1 if self.mode == ONE_SCORE else self.base.shape[0]
        for r in range(n):
            for j in range(cols):
                row[j] = summed[r * stride + j] + self.base[j]
            if self.mode == ONE_SCORE:
                self._one_score(row, r, top)
            elif self.mode == CLASSES:
                j = top_class(row, &self.mask[0], cols)
                top[r] = self.labels[j] if self.labels.shape[0] else j
            if self.mode != ONE_SCORE:
                transform_row(row, cols, self.how)
            for j in range(self.width):
                out[r * self.width + j] = <float>row[j]

    cdef void _one_score(self, double* row, Py_ssize_t r, int64_t* top) noexcept nogil:
        """row[0:2] = ``common.binary_scores`` of the positive score row[0]; top[r] its label."""
        cdef double p = row[0]
        cdef Py_ssize_t j = 1 if p > self.threshold else 0
        top[r] = self.labels[j] if self.labels.shape[0] else j
        if self.probability:
            row[0], row[1] = 1.0 - p, p
        elif self.how == LOGISTIC:
            row[0], row[1] = 1.0 / (1.0 + exp(p)), 1.0 / (1.0 + exp(-p))
        else:
            row[0], row[1] = -p, p


cdef struct Job:  # the sums of n rows, taken ``unit`` rows at a time by each thread's work()
    const Forest* f
    const void* x  # float (single) or double rows
    bint single
    Py_ssize_t n_features, n, chunk, unit, targets
    const double* weights
    double* out
    long next  # the next unit to take
    long done  # rows summed


cdef void* work(void* arg) noexcept nogil:
    """Take units of a :class:`Job` until none is left (a thread's whole work)."""
    cdef Job* job = <Job*>arg
    cdef int32_t* block = <int32_t*>malloc(job.unit * job.f.trees * sizeof(int32_t))
    cdef double* scratch = <double*>malloc(job.f.trees * sizeof(double))
    cdef Py_ssize_t r0, nr
    while block != NULL and scratch != NULL:  # out of memory: take nothing (others may)
        r0 = of_next(&job.next) * job.unit
        if r0 >= job.n:
            break
        nr = min(job.unit, job.n - r0)
        if job.single:
            sum_block(job, <const float*>job.x, r0, nr, block, scratch)
        else:
            sum_block(job, <const double*>job.x, r0, nr, block, scratch)
        of_add(&job.done, nr)
    free(block)
    free(scratch)
    return NULL


cdef void sum_block(
    const Job* job, const real* x, Py_ssize_t r0, Py_ssize_t nr, int32_t* block, double* scratch
) noexcept nogil:
    """The sums of rows r0..r0+nr of the job (``block``: nr * trees slots, ``scratch``: trees
    values), each row's as :meth:`PackedForest.sums` takes it."""
    cdef Py_ssize_t r = 0, n = job.n, trees = job.f.trees, targets = job.targets
    walk_block(job.f, x + r0 * job.n_features, job.n_features, nr, block)
    while r < nr:
        if r + 4 <= nr and chunk_rows(r0 + r + 3, n, job.chunk) > 1:
            sum_rows4(block + r * trees, trees, job.weights, targets, job.out + (r0 + r) * targets)
            r += 4
            continue
        sum_row(
            block + r * trees, trees, job.weights, targets,
            chunk_rows(r0 + r, n, job.chunk) == 1, job.out + (r0 + r) * targets, scratch,
        )
        r += 1


cdef Py_ssize_t idle_cores(Py_ssize_t cpus):
    """The cores the 1-minute load average leaves idle, counting this process's run as one
    (at least 1; ``cpus`` where the system has no load average). Measured on 2 cores, a
    load of 8: two threads walked 15-40% slower than one."""
    cdef double load
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, min(cpus, cpus - <Py_ssize_t>max(0.0, load - 1.0)))


cdef int32_t* by_depth(const int32_t[::1] depth):
    """The tree indices ordered by depth, shallowest first (ties in index order); NULL when
    out of memory."""
    cdef Py_ssize_t n = depth.shape[0], i, top = 0
    for i in range(n):
        top = max(top, <Py_ssize_t>depth[i])
    cdef int32_t* order = <int32_t*>malloc(max(n, 1) * sizeof(int32_t))
    cdef Py_ssize_t* start = <Py_ssize_t*>calloc(top + 2, sizeof(Py_ssize_t))
    if order == NULL or start == NULL:
        free(order)
        free(start)
        return NULL
    for i in range(n):
        start[depth[i] + 1] += 1
    for i in range(top + 1):
        start[i + 1] += start[i]
    for i in range(n):
        order[start[depth[i]]] = <int32_t>i
        start[depth[i]] += 1
    free(start)
    return order


cdef int less_than_form(real t, uint32_t no, real* out) noexcept nogil:
    """The ``v < t`` form of a packed test (``no``: which of v < t, v == t, v > t take ``no``,
    bits 0-2; a pack's ``yes`` is v < t's child, so bit 0 is clear but for NaN thresholds):
    out[0] = t' such that ``v < t'`` takes the first child, and whether that child is ``no``
    (1) or ``yes`` (0); -1 where no such form exists (an == or != test)."""
    if t != t:  # every value compares as v < t (a NaN row walks the nodes)
        no = 7 if no & 1 else 0
    if no == 6:  # v < t takes yes
        out[0] = t
        return 0
    if no == 4 and t != INFINITY:  # v <= t takes yes: v < the next value up
        out[0] = nextafterf(t, <float>INFINITY) if real is float else nextafter(t, INFINITY)
        return 0
    if no == 0 or no == 7 or no == 4:  # one child for every value (v <= +inf: yes)
        out[0] = <real>NAN  # v < NaN is never true
        return 0 if no == 7 else 1
    return -1


cdef bint canonical_nodes(const Forest* f, Py_ssize_t n, int32_t* out, real kind) noexcept nogil:
    """out = the forest's n packed nodes with each test in its :func:`less_than_form`, ``v < t``
    taking ``yes`` (a leaf, t NaN, leads to itself either way); False where a test has none."""
    cdef Py_ssize_t i, k = sizeof(real) // 4
    cdef const int32_t* nd
    cdef int32_t* cn
    cdef real t
    cdef int swap
    for i in range(n):
        nd, cn = f.nodes + i * words(<real>0), out + i * words(<real>0)
        if nd[k + 1] == i:
            (<real*>cn)[0], cn[k], cn[k + 1], cn[k + 2] = <real>NAN, 0, <int32_t>i, <int32_t>i
            continue
        swap = less_than_form((<const real*>nd)[0], (<uint32_t>nd[k] >> 28) & 7, &t)
        if swap < 0:
            return False
        (<real*>cn)[0], cn[k] = t, nd[k] & FEATURE
        cn[k + 1], cn[k + 2] = nd[k + 1 + swap], nd[k + 2 - swap]
    return True


cdef struct Tests:  # a float32 perfect forest's tests, listed for the bit-vector walk
    of_test* at
    Py_ssize_t n


cdef bint fill_perfect(
    const Forest* f, int32_t node, Py_ssize_t heap, Py_ssize_t level, Py_ssize_t depth,
    int32_t* tree, int32_t* leaves, Tests* tests, real kind,
) noexcept nogil:
    """Lay out the subtree of packed node ``node`` at heap index ``heap`` (on level ``level``)
    of a perfect tree ``depth`` levels deep (``tree``: its nodes, zeroed; ``leaves``: its leaf
    slots), each test also added to ``tests`` unless NULL; False where a test has no perfect
    form or the subtree is deeper (a cycle)."""
    cdef Py_ssize_t k = sizeof(real) // 4, i, below = depth - level
    cdef const int32_t* nd = f.nodes + node * words(<real>0)
    cdef int32_t* pn = tree + heap * pwords(<real>0)
    cdef real t
    cdef int swap
    if nd[k + 1] == node:  # a leaf: its slot in every leaf slot below it
        for i in range(1 << below):
            leaves[((heap + 1) << below) - (1 << depth) + i] = nd[k + 2]
        return True
    swap = less_than_form((<const real*>nd)[0], (<uint32_t>nd[k] >> 28) & 7, &t)
    if level >= depth or swap < 0:
        return False
    (<real*>pn)[0] = t
    pn[k] = nd[k] & FEATURE
    if tests != NULL:  # a failed test drops the leaf slots of the left subtree
        tests.at[tests.n].t, tests.at[tests.n].feature = <float>t, pn[k]
        tests.at[tests.n].keep = ~(((<uint64_t>1 << (1 << (below - 1))) - 1) << (
            ((2 * heap + 2) << (below - 1)) - (1 << depth)
        ))
        tests.n += 1
    return (
        fill_perfect(f, nd[k + 1 + swap], 2 * heap + 1, level + 1, depth, tree, leaves, tests, kind)
        and fill_perfect(f, nd[k + 2 - swap], 2 * heap + 2, level + 1, depth, tree, leaves, tests, kind)
    )


def bitvector_ok():
    """Whether this CPU walks perfect float32 forests by bit vectors (it has AVX-512)."""
    return bool(of_bitvector_ok())


cdef class PackedForest:
    """A packed forest, its leaf weights, and the rows per chunk of the NumPy form's sums;
    the arrays it is made of are kept, not copied. Its sums take up to ``threads`` threads
    for an input of at least ``min_work`` steps (rows times the trees' depths, a quarter of
    that for an oblivious forest). Measured on 2 idle cores, medians, threads started for the
    call: 2 threads took 100 rows of a 100-tree depth-10 forest from 123 to 107 us and of
    xgboost's 300 trees from 103 to 83 us (100,000 to 170,000 steps), and 100 rows of 100
    depth-6 trees by bit vectors (60,000 steps, 38 us on one) to 62 us; on a loaded machine
    ``follow_load`` keeps the walk on one thread."""

    cdef Forest f
    cdef const int32_t[::1] nodes, roots, depth, member_start, member_end
    cdef const int32_t[::1] level_node, level_start, table, table_start
    cdef const unsigned char[::1] member_values
    cdef const double[:, ::1] weights
    cdef Py_ssize_t chunk, width
    cdef int32_t* order
    cdef public int threads
    cdef public Py_ssize_t min_work
    cdef public bint follow_load  # threads: no more than the cores the load leaves idle
    cdef Py_ssize_t steps  # a row's steps through all trees (their depths; oblivious: a 4th)
    cdef int32_t* cnodes  # the nodes in their v < t form (NULL: none)
    cdef int32_t* pnodes  # the perfect layout (NULL: none)
    cdef int32_t* pleaves
    cdef of_test* tests  # its tests for the bit-vector walk (NULL: none)
    cdef int32_t* test_start

    def __init__(
        self, const int32_t[::1] nodes, Py_ssize_t width, const int32_t[::1] roots,
        const int32_t[::1] depth, const int32_t[::1] member_start,
        const int32_t[::1] member_end, const unsigned char[::1] member_values,
        const double[:, ::1] weights, Py_ssize_t chunk,
    ):
        cdef Py_ssize_t i
        if roots.shape[0] == 0 or depth.shape[0] != roots.shape[0] or width not in (4, 6):
            raise ValueError("a packed forest needs trees, one depth each, 4 or 6 words a node")
        self.nodes, self.roots, self.depth = nodes, roots, depth
        self.member_start, self.member_end, self.member_values = member_start, member_end, member_values
        self.weights, self.chunk, self.width = weights, max(chunk, 1), width
        self.f.nodes = &nodes[0]
        self.f.roots = &roots[0]
        self.f.depth = &depth[0]
        self.f.trees = roots.shape[0]
        self.f.member_start = &member_start[0]
        self.f.member_end = &member_end[0]
        self.f.member_values = &member_values[0]
        self.f.even = True
        self.f.members = False
        self.f.oblivious = False
        for i in range(width // 2 - 1, nodes.shape[0], width):  # the fm word of each node
            self.f.members = self.f.members or (<uint32_t>nodes[i] & MEMBER) != 0
        for i in range(depth.shape[0]):
            self.f.even = self.f.even and depth[i] == depth[0]
        self.order = by_depth(depth)
        if self.order == NULL:
            raise MemoryError()
        self.f.order = self.order
        self.threads, self.min_work, self.steps, self.follow_load = 1, PARALLEL_WORK, 0, False
        for i in range(depth.shape[0]):
            self.steps += max(depth[i], 1)
        self.f.pdepth = -1
        self.lay_out_perfect()
        if self.f.pdepth < 0 and not self.f.members:
            self.lay_out_canonical()

    cdef lay_out_canonical(self):
        """The nodes in their ``v < t`` form for rows without NaN (f.cnodes), where every test
        has one (no ==, != or set tests)."""
        cdef Py_ssize_t n = self.nodes.shape[0] // self.width
        self.cnodes = <int32_t*>calloc(max(self.nodes.shape[0], 1), sizeof(int32_t))
        if self.cnodes == NULL:
            raise MemoryError()
        cdef bint fits = (
            canonical_nodes(&self.f, n, self.cnodes, <float>0) if self.width == 4
            else canonical_nodes(&self.f, n, self.cnodes, <double>0)
        )
        if fits:
            self.f.cnodes = self.cnodes
        else:
            free(self.cnodes)
            self.cnodes = NULL

    cdef lay_out_perfect(self):
        """Lay the forest out perfect where it can be (the module's docstring): no sets, only
        <, <=, >, >= tests, at most PERFECT_LEVELS deep, in at most PERFECT_GROWTH times its
        nodes (or PERFECT_FLOOR) and PERFECT_MOST leaf slots."""
        cdef Py_ssize_t t, top = 0, trees = self.f.trees, pw = 2 if self.width == 4 else 4
        cdef bint fits = not self.f.members
        for t in range(trees):
            top = max(top, <Py_ssize_t>self.depth[t])
        cdef Py_ssize_t inner = (1 << min(top, PERFECT_LEVELS)) - 1
        cdef Py_ssize_t slots = trees * (inner + 1)
        if not fits or top > PERFECT_LEVELS or slots > PERFECT_MOST or slots > max(
            PERFECT_GROWTH * (self.nodes.shape[0] // self.width), PERFECT_FLOOR
        ):
            return
        self.pnodes = <int32_t*>calloc(max(trees * inner * pw, 1), sizeof(int32_t))
        self.pleaves = <int32_t*>malloc(trees * (inner + 1) * sizeof(int32_t))
        cdef Tests tests
        tests.n, tests.at = 0, NULL
        if pw == 2 and top <= BITVECTOR_LEVELS and of_bitvector_ok():
            self.tests = <of_test*>malloc(max(self.nodes.shape[0] // self.width, 1) * sizeof(of_test))
            self.test_start = <int32_t*>malloc((trees + 1) * sizeof(int32_t))
            if self.tests == NULL or self.test_start == NULL:
                raise MemoryError()
            tests.at = self.tests
        if self.pnodes == NULL or self.pleaves == NULL:
            raise MemoryError()
        for t in range(trees):
            if self.test_start != NULL:
                self.test_start[t] = <int32_t>tests.n
            if self.width == 4:
                fits = fits and fill_perfect(
                    &self.f, self.roots[t], 0, 0, top, self.pnodes + t * inner * pw,
                    self.pleaves + t * (inner + 1), &tests if tests.at else NULL, <float>0,
                )
            else:
                fits = fits and fill_perfect(
                    &self.f, self.roots[t], 0, 0, top, self.pnodes + t * inner * pw,
                    self.pleaves + t * (inner + 1), NULL, <double>0,
                )
        if not fits:
            return
        self.f.pnodes, self.f.pleaves, self.f.pdepth = self.pnodes, self.pleaves, top
        if self.test_start != NULL:
            self.test_start[trees] = <int32_t>tests.n
            self.f.test_start, self.f.tests = self.test_start, self.tests

    def walk_oblivious(
        self, const int32_t[::1] level_node, const int32_t[::1] level_start,
        const int32_t[::1] table, const int32_t[::1] table_start,
    ):
        """Walk the forest as oblivious: tree t tests, at its level d, what node
        ``level_node[level_start[t] + d]`` tests (every node of that level tests the same),
        and outcome index i (a bit per level, the first level highest, 1 where the test takes
        ``no``) reaches leaf slot ``table[table_start[t] + i]``."""
        cdef Py_ssize_t t, i, trees = self.f.trees, nodes = self.nodes.shape[0] // self.width
        cdef bint fits = (
            not self.f.members and level_start.shape[0] == trees + 1
            and table_start.shape[0] == trees + 1 and level_start[trees] <= level_node.shape[0]
            and table_start[trees] <= table.shape[0]
        )
        for t in range(trees if fits else 0):
            fits = fits and self.depth[t] <= LEVELS and level_start[t] >= 0 and table_start[t] >= 0
            fits = fits and level_start[t + 1] - level_start[t] == self.depth[t]
            fits = fits and table_start[t + 1] - table_start[t] == 1 << self.depth[t]
        for i in range(level_start[trees] if fits else 0):
            fits = fits and 0 <= level_node[i] < nodes
        for i in range(table_start[trees] if fits else 0):
            fits = fits and 0 <= table[i] < self.weights.shape[0]
        if not fits:
            raise ValueError("levels or tables that do not fit the forest")
        self.level_node, self.level_start, self.table, self.table_start = level_node, level_start, table, table_start
        self.f.level_node, self.f.level_start = &level_node[0], &level_start[0]
        self.f.table, self.f.table_start = &table[0], &table_start[0]
        self.f.oblivious = True
        self.steps = max(self.steps // OBLIVIOUS_STEP, 1)

    @property
    def canonical(self):
        """Whether rows without NaN walk the nodes in their ``v < t`` form (a forest without a
        perfect layout whose tests all have one); False turns that off."""
        return self.f.cnodes != NULL

    @canonical.setter
    def canonical(self, bint on):
        self.f.cnodes = self.cnodes if on else NULL

    @property
    def perfect_depth(self):
        """The depth D of the forest's perfect layout, -1 where it has none."""
        return self.f.pdepth

    @property
    def bitvector(self):
        """Whether 16 rows and more walk by bit vectors (a float32 perfect forest of at most
        BITVECTOR_LEVELS levels, on a CPU with AVX-512); False turns that walk off."""
        return self.f.tests != NULL

    @bitvector.setter
    def bitvector(self, bint on):
        self.f.tests = self.tests if on and self.f.test_start != NULL else NULL

    def __dealloc__(self):
        free(self.order)
        free(self.cnodes)
        free(self.pnodes)
        free(self.pleaves)
        free(self.tests)
        free(self.test_start)

    def slots(self, const real[:, ::1] x, int32_t[:, ::1] out):
        """out[r, t] = the leaf slot row r of x reaches in tree t."""
        cdef Py_ssize_t n = x.shape[0], r0 = 0
        self._check(x.shape[0], x.shape[1], words(<real>0), out.shape[0], out.shape[1], self.f.trees)
        with nogil:
            while r0 < n:
                walk_block(&self.f, &x[r0, 0], x.shape[1], min(<Py_ssize_t>BLOCK, n - r0), &out[r0, 0])
                r0 += BLOCK

    def sums(self, const real[:, ::1] x, double[:, ::1] out):
        """out[r, j] = the sum of weights[slot, j] over the leaves row r reaches, trees in order,
        as NumPy sums a [trees, rows] chunk over its first axis."""
        self._sums(x, out)

    def sums_f32(self, const float[:, ::1] x, double[:, ::1] out):
        """:meth:`sums` of a float32 input (no dispatch on the input's type: a call at 1 row
        costs less)."""
        self._sums(x, out)

    def sums_f64(self, const double[:, ::1] x, double[:, ::1] out):
        """:meth:`sums` of a float64 input."""
        self._sums(x, out)

    cdef _sums(self, const real[:, ::1] x, double[:, ::1] out):
        self._check(x.shape[0], x.shape[1], words(<real>0), out.shape[0], out.shape[1], self.weights.shape[1])
        if x.shape[0]:
            self._sums_rows(&x[0, 0], x.shape[0], x.shape[1], &out[0, 0])

    cdef _predict_rows(
        self, const real* x, Py_ssize_t n, Py_ssize_t n_features, Post post, bint average,
        float* out, int64_t* top,
    ):
        """What ``post`` makes of the sums (divided by the trees' count when ``average``) of
        n > 0 rows at x: out = the scores, top = the labels (NULL: none); one call, no
        intermediate array; the shapes checked by the caller (:class:`Predict`)."""
        cdef Py_ssize_t i, targets = self.weights.shape[1]
        cdef double* summed = <double*>malloc(max(n * targets, 1) * sizeof(double))
        cdef double* row = <double*>malloc(max(targets, 2) * sizeof(double))
        if summed == NULL or row == NULL:
            free(summed)
            free(row)
            raise MemoryError()
        try:
            self._sums_rows(x, n, n_features, summed)
            with nogil:
                for i in range(n * targets if average else 0):
                    summed[i] = summed[i] / <double>self.f.trees
                post.finish_rows(summed, targets, n, out, top, row)
        finally:
            free(summed)
            free(row)

    cdef _sums_rows(self, const real* x, Py_ssize_t n, Py_ssize_t n_features, double* out):
        """out[r * targets + j] = :meth:`sums` of n > 0 rows at x, over up to ``threads``
        threads when their steps reach ``min_work``."""
        cdef Job job
        job.f, job.x, job.single = &self.f, x, real is float
        job.n_features, job.n, job.chunk = n_features, n, self.chunk
        job.weights, job.targets, job.out = &self.weights[0, 0], self.weights.shape[1], out
        job.next, job.done = 0, 0
        cdef Py_ssize_t threads = 1
        if self.threads > 1 and job.n * self.steps >= self.min_work and job.n > UNIT:
            threads = min(<Py_ssize_t>self.threads, (job.n + UNIT - 1) // UNIT)
            if self.follow_load:
                threads = min(threads, idle_cores(self.threads))
        job.unit = UNIT if threads > 1 else BLOCK
        with nogil:
            if threads > 1:
                of_parallel(work, &job, <int>threads)
            else:
                work(&job)
        if job.done < job.n:
            raise MemoryError()

    cdef _check(
        self, Py_ssize_t n, Py_ssize_t features, Py_ssize_t width, Py_ssize_t out_rows,
        Py_ssize_t out_cols, Py_ssize_t cols,
    ):
        if width != self.width or out_rows != n or out_cols != cols or (n and features == 0):
            raise ValueError("input of the wrong float type, no features, or output of the wrong shape")


cdef class Predict:
    """A tree ensemble kernel's [N, F] -> result in one call: the sums of its packed forests
    (``f32`` for a float32 input, ``f64`` for a float64 one) finished by ``post`` into new
    arrays: the [N, cols] float32 scores, or (labels, scores) for a classifier (``labels``:
    None where the Post writes int64 labels, else the labels its class indices pick). Any other
    input (another type or rank, not contiguous, no rows, too few features) goes to
    ``fallback``."""

    cdef PackedForest f32, f64
    cdef Post post
    cdef bint average, classifier
    cdef object labels, fallback
    cdef cnp.npy_intp cols
    cdef Py_ssize_t top_feature

    def __init__(
        self, PackedForest f32, PackedForest f64, Post post, bint average, bint classifier,
        labels, Py_ssize_t cols, Py_ssize_t top_feature, fallback,
    ):
        if f32.width != 4 or f64.width != 6 or f32.weights.shape[1] != f64.weights.shape[1]:
            raise ValueError("a float32 and a float64 pack of one forest")
        self.f32, self.f64, self.post, self.average = f32, f64, post, average
        self.classifier, self.labels, self.fallback = classifier, labels, fallback
        self.cols, self.top_feature = cols, top_feature

    def __call__(self, x):
        cdef cnp.ndarray a, out, top
        cdef cnp.npy_intp dims[2]
        cdef int kind
        if type(x) is not cnp.ndarray:
            return self.fallback(x)
        a = <cnp.ndarray>x
        kind = cnp.PyArray_TYPE(a)
        if (
            cnp.PyArray_NDIM(a) != 2 or not cnp.PyArray_IS_C_CONTIGUOUS(a)
            or (kind != cnp.NPY_FLOAT32 and kind != cnp.NPY_FLOAT64)
            or a.shape[0] == 0 or a.shape[1] <= self.top_feature
        ):
            return self.fallback(x)
        dims[0], dims[1] = a.shape[0], self.cols
        out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_FLOAT32, 0)
        dims[0] = a.shape[0] if self.classifier else 0
        top = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        self.post.check_rows(a.shape[0], self.f32.weights.shape[1], self.cols, dims[0])
        if kind == cnp.NPY_FLOAT32:
            self.f32._predict_rows(
                <const float*>cnp.PyArray_DATA(a), a.shape[0], a.shape[1], self.post,
                self.average, <float*>cnp.PyArray_DATA(out), self.labels_out(top),
            )
        else:
            self.f64._predict_rows(
                <const double*>cnp.PyArray_DATA(a), a.shape[0], a.shape[1], self.post,
                self.average, <float*>cnp.PyArray_DATA(out), self.labels_out(top),
            )
        if not self.classifier:
            return out
        return (top if self.labels is None else self.labels[top]), out

    cdef int64_t* labels_out(self, cnp.ndarray top):
        return <int64_t*>cnp.PyArray_DATA(top) if self.classifier else NULL
