/* The loops of onnxflow.native._quant: linear quantization in one pass over memory.
 *
 * Each loop does, element by element, the float32 operations of the NumPy form in the same
 * order (onnxflow/ops/quantization.py), so the results are the same bits: rintf rounds half
 * to even in the default rounding mode, and the clamps copy NumPy's clip (a bound wins over an
 * equal zero of the other sign as NumPy's loops let it, a NaN passes). The AVX2 clone is
 * chosen at run time where the CPU has it (GCC's target_clones); the default build stays
 * portable.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define QUANT_CLONES __attribute__((target_clones("avx2", "default")))

/* NumPy's clip with scalar bounds: max(x, lo) keeps x on a tie, then min(., hi) likewise. */
static inline float clip_scalar(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* NumPy's clip with array bounds: a NaN passes, a bound wins a tie. */
static inline float clip_array(float v, float lo, float hi) {
    if (v != v) return v;
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* y = saturate(rint(x / s) + z) for 8-bit y: q_u8 and q_i8. */
#define QUANT_LOOP(NAME, T)                                                                  \
    QUANT_CLONES static void NAME(const float *x, T *y, ptrdiff_t n, float s, float z,        \
                                  float lo, float hi) {                                       \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            float v = rintf(x[i] / s) + z;                                                    \
            y[i] = (T)(int32_t)clip_scalar(v, lo, hi);                                        \
        }                                                                                     \
    }                                                                                         \
    QUANT_CLONES static void NAME##_rows(const float *x, T *y, ptrdiff_t n, const float *s,   \
                                         const float *z, float lo, float hi) {                \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            float v = rintf(x[i] / s[i]) + z[i];                                              \
            y[i] = (T)(int32_t)clip_scalar(v, lo, hi);                                        \
        }                                                                                     \
    }
QUANT_LOOP(q_u8, uint8_t)
QUANT_LOOP(q_i8, int8_t)

/* y = float(x - z) * s for 8-bit x: dq_u8 and dq_i8 (the difference is exact in float). */
#define DEQUANT_LOOP(NAME, T)                                                                 \
    QUANT_CLONES static void NAME(const T *x, float *y, ptrdiff_t n, float s, float z) {      \
        for (ptrdiff_t i = 0; i < n; i++) y[i] = ((float)x[i] - z) * s;                       \
    }                                                                                         \
    QUANT_CLONES static void NAME##_rows(const T *x, float *y, ptrdiff_t n, const float *s,   \
                                         const float *z) {                                    \
        for (ptrdiff_t i = 0; i < n; i++) y[i] = ((float)x[i] - z[i]) * s[i];                 \
    }
DEQUANT_LOOP(dq_u8, uint8_t)
DEQUANT_LOOP(dq_i8, int8_t)

/* Q then DQ in float: y = clip(rint(x / s), lo, hi) * s, lo and hi already less the zero
 * point; a scalar pair of bounds clips as NumPy's scalar loop, per-element bounds as its
 * array loop. */
QUANT_CLONES static void fake_q(const float *x, float *y, ptrdiff_t n, float s, float lo,
                                float hi) {
    for (ptrdiff_t i = 0; i < n; i++) y[i] = clip_scalar(rintf(x[i] / s), lo, hi) * s;
}

QUANT_CLONES static void fake_q_array(const float *x, float *y, ptrdiff_t n, float s, float lo,
                                      float hi) {
    for (ptrdiff_t i = 0; i < n; i++) y[i] = clip_array(rintf(x[i] / s), lo, hi) * s;
}

QUANT_CLONES static void fake_q_rows(const float *x, float *y, ptrdiff_t n, const float *s,
                                     const float *lo, const float *hi) {
    for (ptrdiff_t i = 0; i < n; i++) y[i] = clip_array(rintf(x[i] / s[i]), lo[i], hi[i]) * s[i];
}

/* The least and greatest of x, and whether a NaN is among them. */
QUANT_CLONES static int min_max(const float *x, ptrdiff_t n, float *lo, float *hi) {
    float a = *lo, b = *hi;
    int nan = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        float v = x[i];
        nan |= v != v;
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *lo = a;
    *hi = b;
    return nan;
}

/* y = float(x - z) for 8-bit x: the zero-point-shifted operand of an integer product. */
#define CENTER_LOOP(NAME, T)                                                                  \
    QUANT_CLONES static void NAME(const T *x, float *y, ptrdiff_t n, float z) {               \
        for (ptrdiff_t i = 0; i < n; i++) y[i] = (float)x[i] - z;                             \
    }                                                                                         \
    QUANT_CLONES static void NAME##_rows(const T *x, float *y, ptrdiff_t n, const float *z) { \
        for (ptrdiff_t i = 0; i < n; i++) y[i] = (float)x[i] - z[i];                          \
    }
CENTER_LOOP(center_u8, uint8_t)
CENTER_LOOP(center_i8, int8_t)

/* acc += int32(p) (p holds exact integers), or acc = int32(p) when first. */
QUANT_CLONES static void add_exact(const float *p, int32_t *acc, ptrdiff_t n, int first) {
    if (first) {
        for (ptrdiff_t i = 0; i < n; i++) acc[i] = (int32_t)p[i];
    } else {
        for (ptrdiff_t i = 0; i < n; i++) acc[i] += (int32_t)p[i];
    }
}

/* y = saturate(rint(float(acc + b) * s) + z): a requantizing tail over one row of n. */
#define REQUANT_LOOP(NAME, T)                                                                 \
    QUANT_CLONES static void NAME(const int32_t *acc, T *y, ptrdiff_t n, int32_t b, float s,  \
                                  float z, float lo, float hi) {                              \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            float v = rintf((float)(acc[i] + b) * s) + z;                                     \
            y[i] = (T)(int32_t)clip_scalar(v, lo, hi);                                        \
        }                                                                                     \
    }
REQUANT_LOOP(rq_u8, uint8_t)
REQUANT_LOOP(rq_i8, int8_t)
