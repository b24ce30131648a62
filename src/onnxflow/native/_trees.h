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

#endif
