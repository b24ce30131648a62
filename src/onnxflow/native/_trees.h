/* One level of an oblivious tree over many rows (see _trees.pyx, walk_oblivious): each row's
 * outcome index gains one bit, 1 where the level's test takes "no". takes_no holds which
 * outcomes do: bit 0 for v < t, bit 1 v == t, bit 2 v > t, bit 3 unordered (v NaN). And
 * whether rows hold a NaN (the perfect walk takes rows without). */
#ifndef ONNXFLOW_TREES_H
#define ONNXFLOW_TREES_H

#include <stdint.h>

/* As in _mathkern.h: without it GCC does not vectorize loops of comparisons; it changes no
 * value (the loops raise no floating-point flags anyone reads). */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

#define OF_LEVEL(name, real)                                                                   \
    __attribute__((target_clones("avx2", "default"), noinline))                                \
    static void name(const real *column, real t, uint32_t takes_no, uint32_t *index, long n)   \
    {                                                                                          \
        uint32_t lt = takes_no & 1, eq = (takes_no >> 1) & 1, gt = (takes_no >> 2) & 1;        \
        uint32_t un = (takes_no >> 3) & 1;                                                     \
        long i;                                                                                \
        if (t != t) { /* a NaN threshold: every value unordered */                             \
            for (i = 0; i < n; i++) index[i] = (index[i] << 1) | un;                           \
            return;                                                                            \
        }                                                                                      \
        for (i = 0; i < n; i++) {                                                              \
            real v = column[i];                                                                \
            index[i] = (index[i] << 1) | ((uint32_t)(v < t) & lt) | ((uint32_t)(v == t) & eq)  \
                       | ((uint32_t)(v > t) & gt) | ((uint32_t)(v != v) & un);                 \
        }                                                                                      \
    }

OF_LEVEL(of_level_f32, float)
OF_LEVEL(of_level_f64, double)

/* Whether x[:n] holds a NaN (one vectorized pass, no early exit). */
#define OF_ANY_NAN(name, real)                                                                 \
    __attribute__((target_clones("avx2", "default"), noinline))                                \
    static int name(const real *x, long n)                                                     \
    {                                                                                          \
        int nan = 0;                                                                           \
        long i;                                                                                \
        for (i = 0; i < n; i++) nan |= x[i] != x[i];                                           \
        return nan;                                                                            \
    }

OF_ANY_NAN(of_any_nan_f32, float)
OF_ANY_NAN(of_any_nan_f64, double)

#pragma GCC pop_options

/* The bit-vector walk of a perfect forest D <= 6 levels deep (see _trees.pyx): a row's leaf in a
 * tree is the lowest bit left of a 64-bit vector of its leaf slots (left to right) once every
 * test the row fails (v >= t, or t NaN) has cleared the leaves of its left subtree. The tests are
 * independent of each other (no step waits for the one before), and 16 rows go at a time in two
 * AVX-512 registers, so this runs only where the CPU has AVX-512 (of_bitvector_ok). */
typedef struct {
    float t;
    int32_t feature;
    uint64_t keep; /* the tree's leaf slots a failed test keeps */
} of_test;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static int of_bitvector_ok(void) { return __builtin_cpu_supports("avx512f"); }

/* A test on 16 rows (cols: its feature's 16 values): the rows it fails drop keep's zero bits. */
__attribute__((target("avx512f"), always_inline)) static inline void of_bitvector_test(
    const of_test *test, const float *cols, __m512i *lo, __m512i *hi)
{
    __m512 v = _mm512_load_ps(cols + test->feature * 16);
    __mmask16 fails = _mm512_cmp_ps_mask(v, _mm512_set1_ps(test->t), _CMP_NLT_UQ);
    __m512i keep = _mm512_set1_epi64((long long)test->keep);
    *lo = _mm512_mask_and_epi64(*lo, (__mmask8)fails, *lo, keep);
    *hi = _mm512_mask_and_epi64(*hi, (__mmask8)(fails >> 8), *hi, keep);
}

/* The leaf slots of n rows (r0 on) in tree t from its 16 bit vectors lo, hi. */
__attribute__((target("avx512f"), always_inline)) static inline void of_bitvector_leaves(
    __m512i lo, __m512i hi, long n, long r0, long t, long trees, const int32_t *leaves,
    long width, int32_t *out)
{
    uint64_t bits[16] __attribute__((aligned(64)));
    long i;
    _mm512_store_si512((void *)bits, lo);
    _mm512_store_si512((void *)(bits + 8), hi);
    for (i = 0; i < n; i++) out[(r0 + i) * trees + t] = leaves[t * width + __builtin_ctzll(bits[i])];
}

/* out[r * trees + t] = leaves[t * width + the row's leaf] for rows x[:nr] (no NaN, n_features
 * apart) and trees whose tests are tests[start[t]:start[t + 1]] (width: leaf slots a tree, at
 * most 64); cols: 16 * n_features floats of scratch, 64-byte aligned. Two trees go side by side
 * (their tests alternate: 15% faster than one at a time, measured on depth-6 trees). */
__attribute__((target("avx512f"), noinline)) static void of_bitvector_walk(
    const float *x, long n_features, long nr, long trees, const of_test *tests,
    const int32_t *start, const int32_t *leaves, long width, int32_t *out, float *cols)
{
    long r0, n, i, f, t, a, b;
    for (r0 = 0; r0 < nr; r0 += 16) {
        n = nr - r0 < 16 ? nr - r0 : 16;
        for (f = 0; f < n_features; f++) /* a short last group repeats its last row */
            for (i = 0; i < 16; i++) cols[f * 16 + i] = x[(r0 + (i < n ? i : n - 1)) * n_features + f];
        for (t = 0; t < trees; t += 2) {
            __m512i lo = _mm512_set1_epi64(-1), hi = lo, lo2 = lo, hi2 = lo;
            long two = t + 1 < trees, b_end = start[t + 1 + two];
            a = start[t], b = two ? start[t + 1] : b_end; /* a last odd tree alone */
            for (; a < start[t + 1] && b < b_end; a++, b++) {
                of_bitvector_test(tests + a, cols, &lo, &hi);
                of_bitvector_test(tests + b, cols, &lo2, &hi2);
            }
            for (; a < start[t + 1]; a++) of_bitvector_test(tests + a, cols, &lo, &hi);
            for (; b < b_end; b++) of_bitvector_test(tests + b, cols, &lo2, &hi2);
            of_bitvector_leaves(lo, hi, n, r0, t, trees, leaves, width, out);
            if (two) of_bitvector_leaves(lo2, hi2, n, r0, t + 1, trees, leaves, width, out);
        }
    }
}
#else
static int of_bitvector_ok(void) { return 0; }
static void of_bitvector_walk(const float *x, long n_features, long nr, long trees,
                              const of_test *tests, const int32_t *start, const int32_t *leaves,
                              long width, int32_t *out, float *cols)
{
    (void)x, (void)n_features, (void)nr, (void)trees, (void)tests, (void)start, (void)leaves;
    (void)width, (void)out, (void)cols;
}
#endif

#endif
