/* The loops of onnxflow.native._quant: linear quantization in one pass over memory.
 *
 * Each loop does, element by element, the float32 operations of the NumPy form in the same
 * order (onnxflow/ops/quantization.py), so the results are the same bits: rintf rounds half
 * to even in the default rounding mode, and the clamps copy NumPy's clip (a bound wins over an
 * equal zero of the other sign as NumPy's loops let it, a NaN passes). An x86-64-v4 clone
 * (AVX-512 with byte and word lanes; GCC 11 and later) and an AVX2 clone are chosen at run time
 * where the CPU has them (GCC's target_clones; measured on the QOperator PP-OCR classifier, the
 * v4 clones took its run from 2.10 to 1.87 ms); the default build stays portable.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define QUANT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#endif

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

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

/* The least and greatest of x (with *lo and *hi), and whether a NaN is among them: 8 lanes
 * kept apart (which of two equal zeros wins does not matter to DynamicQuantizeLinear, whose
 * range always holds 0). */
QUANT_CLONES static int min_max(const float *x, ptrdiff_t n, float *lo, float *hi) {
    f32x8 a = {0}, b = {0};
    i32x8 nan = {0};
    a += *lo;
    b += *hi;
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 v;
        memcpy(&v, x + i, sizeof v);
        i32x8 below = v < a, above = v > b;
        nan |= v != v;
        a = (f32x8)(((i32x8)v & below) | ((i32x8)a & ~below));
        b = (f32x8)(((i32x8)v & above) | ((i32x8)b & ~above));
    }
    int any = 0;
    for (int j = 0; j < 8; j++) {
        any |= nan[j] != 0;
        *lo = a[j] < *lo ? a[j] : *lo;
        *hi = b[j] > *hi ? b[j] : *hi;
    }
    for (; i < n; i++) {
        float v = x[i];
        any |= v != v;
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
    return any;
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

/* y[i][j] = saturate(rint(acc[i][j] * c[j] / s) + z) over rows of n int32 sums, in double
 * (QLinearMatMul's tail, as its NumPy form: c[j] = a_scale * b_scale[j] is exact in double). */
#define RQ_DOUBLE(NAME, T, LO, HI)                                                            \
    QUANT_CLONES static void NAME(const int32_t *acc, T *y, ptrdiff_t rows, ptrdiff_t n,      \
                                  const double *c, double s, double z) {                      \
        for (ptrdiff_t i = 0; i < rows; i++) {                                                \
            for (ptrdiff_t j = 0; j < n; j++) {                                               \
                double v = rint((double)acc[i * n + j] * c[j] / s) + z;                       \
                v = v < LO ? LO : v;                                                          \
                y[i * n + j] = (T)(int32_t)(v > HI ? HI : v);                                 \
            }                                                                                 \
        }                                                                                     \
    }
RQ_DOUBLE(rqd_u8, uint8_t, 0.0, 255.0)
RQ_DOUBLE(rqd_i8, int8_t, -128.0, 127.0)

/* QLinearAdd and QLinearMul of 8-bit a and b (b one value when bstep is 0) into a's type:
 * y = saturate(rint((a - za) * ra + (b - zb) * rb) + zc), and
 * y = saturate(rint((a - za) * (b - zb) * r) + zc), in float32 as the NumPy forms. One value
 * of b is centered (and, for the sum, scaled) once: the same float32 operations, so the same
 * bits, in loops the compiler vectorizes. */
#define QBINARY_LOOPS(ADD, MUL, T, LO, HI)                                                    \
    QUANT_CLONES static void ADD(const T *a, const T *b, T *y, ptrdiff_t n, ptrdiff_t bstep,  \
                                 float za, float zb, float ra, float rb, float zc) {          \
        if (bstep == 0) {                                                                     \
            const float bv = ((float)b[0] - zb) * rb;                                         \
            for (ptrdiff_t i = 0; i < n; i++) {                                               \
                float v = ((float)a[i] - za) * ra + bv;                                       \
                y[i] = (T)(int32_t)clip_scalar(rintf(v) + zc, LO, HI);                        \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            float v = ((float)a[i] - za) * ra + ((float)b[i] - zb) * rb;                      \
            y[i] = (T)(int32_t)clip_scalar(rintf(v) + zc, LO, HI);                            \
        }                                                                                     \
    }                                                                                         \
    QUANT_CLONES static void MUL(const T *a, const T *b, T *y, ptrdiff_t n, ptrdiff_t bstep,  \
                                 float za, float zb, float r, float zc) {                     \
        if (bstep == 0) {                                                                     \
            const float bv = (float)b[0] - zb;                                                \
            for (ptrdiff_t i = 0; i < n; i++) {                                               \
                float v = ((float)a[i] - za) * bv * r;                                        \
                y[i] = (T)(int32_t)clip_scalar(rintf(v) + zc, LO, HI);                        \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            float v = ((float)a[i] - za) * ((float)b[i] - zb) * r;                            \
            y[i] = (T)(int32_t)clip_scalar(rintf(v) + zc, LO, HI);                            \
        }                                                                                     \
    }
QBINARY_LOOPS(qadd_u8, qmul_u8, uint8_t, 0, 255)
QBINARY_LOOPS(qadd_i8, qmul_i8, int8_t, -128, 127)

/* y[i][k] = x[i][k] - z[i] as int16 for 8-bit x (rows of n), each row padded with zeros to
 * width w: the left operand of igemm (its pairs of K read as one int32). */
#define WIDEN_LOOP(NAME, T)                                                                   \
    QUANT_CLONES static void NAME(const T *x, int16_t *y, ptrdiff_t rows, ptrdiff_t n,       \
                                  ptrdiff_t w, const int16_t *z, int per_row) {               \
        for (ptrdiff_t i = 0; i < rows; i++) {                                                \
            int16_t zi = z[per_row ? i : 0];                                                  \
            for (ptrdiff_t k = 0; k < n; k++) y[i * w + k] = (int16_t)(x[i * n + k] - zi);    \
            for (ptrdiff_t k = n; k < w; k++) y[i * w + k] = 0;                               \
        }                                                                                     \
    }
WIDEN_LOOP(widen_u8, uint8_t)
WIDEN_LOOP(widen_i8, int8_t)

/* acc[m] = sum over k < K of rows[m * w + k] * x[k], exact in int32 (9-bit operands): an
 * integer product with one column (a 1x1 convolution of one pixel), whose panels of igemm
 * would compute IGEMM_PANEL columns for it. */
QUANT_CLONES static void int_gemv(const int16_t *rows, const int16_t *x, int32_t *acc,
                                  ptrdiff_t M, ptrdiff_t K, ptrdiff_t w) {
    for (ptrdiff_t m = 0; m < M; m++) {
        const int16_t *r = rows + m * w;
        int32_t sum = 0;
        for (ptrdiff_t k = 0; k < K; k++) sum += (int32_t)r[k] * (int32_t)x[k];
        acc[m] = sum;
    }
}

/* An exact integer product on AVX-512 (BW): C (M rows of stride ldc) = A (M rows of P pairs of
 * int16, each pair read as one int32) times B packed in panels of IGEMM_PANEL columns (per
 * panel, per pair of K: IGEMM_PANEL columns of 2 int16). vpmaddwd multiplies int16 pairs and
 * adds each two products into int32 exactly (the operands are 9-bit), vpdpwssd (AVX512-VNNI)
 * the same in one instruction; the sums wrap as int32 adds do. Blocks of IGEMM_ROWS rows of A
 * stay in cache while the panels pass. */
#define IGEMM_PANEL 32
#define IGEMM_ROWS 64

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* c += the products of x's and b's int16 pairs, each pair's two summed: vpmaddwd then vpaddd,
 * or one vpdpwssd with AVX512-VNNI (the same exact sums). */
#define MADD_BW(c, x, b) c = _mm512_add_epi32(c, _mm512_madd_epi16(x, b))
#define MADD_VNNI(c, x, b) c = _mm512_dpwssd_epi32(c, x, b)

#define IGEMM_ROWS_KERNEL(NAME, TARGET, MADD)                                                 \
    __attribute__((target(TARGET))) static void NAME(const int32_t *A, const int16_t *bp,    \
                                                     int32_t *C, ptrdiff_t rows, ptrdiff_t P, \
                                                     ptrdiff_t ldc) {                         \
        ptrdiff_t i = 0;                                                                      \
        for (; i + 4 <= rows; i += 4) {                                                       \
            __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00;            \
            __m512i c20 = c00, c21 = c00, c30 = c00, c31 = c00;                               \
            const int32_t *a0 = A + i * P, *a1 = a0 + P, *a2 = a1 + P, *a3 = a2 + P;          \
            for (ptrdiff_t k = 0; k < P; k++) {                                               \
                __m512i b0 = _mm512_loadu_si512(bp + k * 64);                                 \
                __m512i b1 = _mm512_loadu_si512(bp + k * 64 + 32);                            \
                __m512i x = _mm512_set1_epi32(a0[k]);                                         \
                MADD(c00, x, b0);                                                             \
                MADD(c01, x, b1);                                                             \
                x = _mm512_set1_epi32(a1[k]);                                                 \
                MADD(c10, x, b0);                                                             \
                MADD(c11, x, b1);                                                             \
                x = _mm512_set1_epi32(a2[k]);                                                 \
                MADD(c20, x, b0);                                                             \
                MADD(c21, x, b1);                                                             \
                x = _mm512_set1_epi32(a3[k]);                                                 \
                MADD(c30, x, b0);                                                             \
                MADD(c31, x, b1);                                                             \
            }                                                                                 \
            int32_t *c = C + i * ldc;                                                         \
            _mm512_storeu_si512(c, c00);                                                      \
            _mm512_storeu_si512(c + 16, c01);                                                 \
            _mm512_storeu_si512(c + ldc, c10);                                                \
            _mm512_storeu_si512(c + ldc + 16, c11);                                           \
            _mm512_storeu_si512(c + 2 * ldc, c20);                                            \
            _mm512_storeu_si512(c + 2 * ldc + 16, c21);                                       \
            _mm512_storeu_si512(c + 3 * ldc, c30);                                            \
            _mm512_storeu_si512(c + 3 * ldc + 16, c31);                                       \
        }                                                                                     \
        for (; i < rows; i++) {                                                               \
            __m512i c0 = _mm512_setzero_si512(), c1 = c0;                                     \
            const int32_t *a0 = A + i * P;                                                    \
            for (ptrdiff_t k = 0; k < P; k++) {                                               \
                __m512i x = _mm512_set1_epi32(a0[k]);                                         \
                MADD(c0, x, _mm512_loadu_si512(bp + k * 64));                                 \
                MADD(c1, x, _mm512_loadu_si512(bp + k * 64 + 32));                            \
            }                                                                                 \
            _mm512_storeu_si512(C + i * ldc, c0);                                             \
            _mm512_storeu_si512(C + i * ldc + 16, c1);                                        \
        }                                                                                     \
    }
IGEMM_ROWS_KERNEL(igemm_rows_bw, "avx512bw", MADD_BW)
IGEMM_ROWS_KERNEL(igemm_rows_vnni, "avx512bw,avx512vnni", MADD_VNNI)

static int igemm_available(void) { return __builtin_cpu_supports("avx512bw"); }

/* The right operand of igemm from rows of int16 (K rows of P): per panel of IGEMM_PANEL
 * columns, per pair of rows, the columns' pairs; zeros past K and P. */
QUANT_CLONES static void pack_pairs(const int16_t *rows, int16_t *out, ptrdiff_t K, ptrdiff_t P,
                                    ptrdiff_t panels, ptrdiff_t pairs) {
    for (ptrdiff_t p = 0; p < panels; p++) {
        for (ptrdiff_t kp = 0; kp < pairs; kp++) {
            const int16_t *r0 = rows + 2 * kp * P, *r1 = r0 + P;
            int has1 = 2 * kp + 1 < K;
            int16_t *o = out + (p * pairs + kp) * IGEMM_PANEL * 2;
            ptrdiff_t q0 = p * IGEMM_PANEL;
            ptrdiff_t n = P - q0 < IGEMM_PANEL ? P - q0 : IGEMM_PANEL;
            for (ptrdiff_t j = 0; j < n; j++) {
                o[2 * j] = r0[q0 + j];
                o[2 * j + 1] = has1 ? r1[q0 + j] : 0;
            }
            for (ptrdiff_t j = n; j < IGEMM_PANEL; j++) o[2 * j] = o[2 * j + 1] = 0;
        }
    }
}

/* Whether igemm uses vpdpwssd: 1 where the CPU has AVX512-VNNI, unless a test turns it off. */
static int igemm_vnni = -1;

static void igemm(const int32_t *A, const int16_t *B, int32_t *C, ptrdiff_t M, ptrdiff_t panels,
                  ptrdiff_t P, ptrdiff_t ldc) {
    if (igemm_vnni < 0) igemm_vnni = __builtin_cpu_supports("avx512vnni");
    int vnni = igemm_vnni;
    for (ptrdiff_t i0 = 0; i0 < M; i0 += IGEMM_ROWS) {
        ptrdiff_t rows = M - i0 < IGEMM_ROWS ? M - i0 : IGEMM_ROWS;
        for (ptrdiff_t p = 0; p < panels; p++) {
            const int16_t *bp = B + p * P * IGEMM_PANEL * 2;
            int32_t *c = C + i0 * ldc + p * IGEMM_PANEL;
            if (vnni)
                igemm_rows_vnni(A + i0 * P, bp, c, rows, P, ldc);
            else
                igemm_rows_bw(A + i0 * P, bp, c, rows, P, ldc);
        }
    }
}
#else
static int igemm_vnni = 0;
static int igemm_available(void) { return 0; }
static void pack_pairs(const int16_t *rows, int16_t *out, ptrdiff_t K, ptrdiff_t P,
                       ptrdiff_t panels, ptrdiff_t pairs) {}
static void igemm(const int32_t *A, const int16_t *B, int32_t *C, ptrdiff_t M, ptrdiff_t panels,
                  ptrdiff_t P, ptrdiff_t ldc) {}
#endif

/* One output row of a depthwise convolution: acc[k] = sum over taps (i, j) of
 * w[i * kw + j] * plane[i * dh * wp + j * dw + k * sw], exact in int32. At stride 1, 32 then 8
 * outputs at a time in vectors (the plane's rows are long enough to read whole vectors). */
QUANT_CLONES static void dw_row(const int32_t *plane, const int32_t *w, int32_t *acc,
                                ptrdiff_t wo, ptrdiff_t kh, ptrdiff_t kw, ptrdiff_t sw,
                                ptrdiff_t dh, ptrdiff_t dw, ptrdiff_t wp) {
    ptrdiff_t k = 0;
    if (sw == 1) {
        for (; k + 32 <= wo + 7; k += 32) {
            i32x8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v;
            for (ptrdiff_t i = 0; i < kh; i++) {
                for (ptrdiff_t j = 0; j < kw; j++) {
                    const int32_t *p = plane + i * dh * wp + j * dw + k;
                    int32_t t = w[i * kw + j];
                    memcpy(&v, p, sizeof v);
                    a0 += t * v;
                    memcpy(&v, p + 8, sizeof v);
                    a1 += t * v;
                    memcpy(&v, p + 16, sizeof v);
                    a2 += t * v;
                    memcpy(&v, p + 24, sizeof v);
                    a3 += t * v;
                }
            }
            memcpy(acc + k, &a0, sizeof a0);
            memcpy(acc + k + 8, &a1, sizeof a1);
            memcpy(acc + k + 16, &a2, sizeof a2);
            memcpy(acc + k + 24, &a3, sizeof a3);
        }
        for (; k < wo; k += 8) {
            i32x8 a = {0}, v;
            for (ptrdiff_t i = 0; i < kh; i++) {
                for (ptrdiff_t j = 0; j < kw; j++) {
                    memcpy(&v, plane + i * dh * wp + j * dw + k, sizeof v);
                    a += w[i * kw + j] * v;
                }
            }
            memcpy(acc + k, &a, sizeof a);
        }
        return;
    }
    for (; k < wo; k++) {
        int32_t a = 0;
        for (ptrdiff_t i = 0; i < kh; i++)
            for (ptrdiff_t j = 0; j < kw; j++)
                a += w[i * kw + j] * plane[i * dh * wp + j * dw + k * sw];
        acc[k] = a;
    }
}

/* A depthwise QLinearConv of one image, exact then requantized (QLinearConv's tail, rq_u8's
 * float32 operations): each input channel less its zero point zx is copied into a zero-padded
 * int32 plane (the padding reads X's zero point, 0 once shifted), each of its `mult` output
 * channels summed over an output row (dw_row), then the row requantized while it is in cache.
 * g: channels, mult, h, w, kh, kw, ho, wo, sh, sw, dh, dw, ph, pw. w: the taps less their
 * zero points, kh * kw per output channel. Returns -1 when its scratch cannot be had. */
#define DEPTHWISE_LOOP(NAME, RQ, T, LO, HI)                                                   \
    static int NAME(const T *x, T *y, const int32_t *w, const int32_t *b, const float *s,     \
                    float zy, int32_t zx, const ptrdiff_t *g) {                               \
        ptrdiff_t channels = g[0], mult = g[1], h = g[2], wd = g[3], kh = g[4], kw = g[5];    \
        ptrdiff_t ho = g[6], wo = g[7], sh = g[8], sw = g[9], dh = g[10], dw = g[11];         \
        ptrdiff_t ph = g[12], pw = g[13];                                                     \
        ptrdiff_t hp = (ho - 1) * sh + (kh - 1) * dh + 1;                                     \
        ptrdiff_t wp = (wo + 7 - 1) * sw + (kw - 1) * dw + 1; /* whole vectors' reads */      \
        int32_t *plane = (int32_t *)malloc(sizeof(int32_t) * hp * wp);                        \
        int32_t *acc = (int32_t *)malloc(sizeof(int32_t) * (wo + 32));                        \
        if (!plane || !acc) {                                                                 \
            free(plane);                                                                      \
            free(acc);                                                                        \
            return -1;                                                                        \
        }                                                                                     \
        ptrdiff_t rows = h + ph < hp ? h : hp - ph, cols = wd + pw < wp ? wd : wp - pw;       \
        memset(plane, 0, sizeof(int32_t) * hp * wp);                                          \
        for (ptrdiff_t c = 0; c < channels; c++) {                                            \
            const T *xc = x + c * h * wd;                                                     \
            for (ptrdiff_t r = 0; r < rows; r++) {                                            \
                int32_t *to = plane + (r + ph) * wp + pw;                                     \
                for (ptrdiff_t k = 0; k < cols; k++) to[k] = (int32_t)xc[r * wd + k] - zx;    \
            }                                                                                 \
            for (ptrdiff_t q = 0; q < mult; q++) {                                            \
                ptrdiff_t m = c * mult + q;                                                   \
                for (ptrdiff_t oh = 0; oh < ho; oh++) {                                       \
                    dw_row(plane + oh * sh * wp, w + m * kh * kw, acc, wo, kh, kw, sw, dh,    \
                           dw, wp);                                                           \
                    RQ(acc, y + (m * ho + oh) * wo, wo, b[m], s[m], zy, LO, HI);              \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        free(plane);                                                                          \
        free(acc);                                                                            \
        return 0;                                                                             \
    }
DEPTHWISE_LOOP(dw_u8, rq_u8, uint8_t, 0, 255)
DEPTHWISE_LOOP(dw_i8, rq_i8, int8_t, -128, 127)

/* A QLinearConv of a 1x1 kernel on images of one pixel (K input channels, M output
 * channels): per image, acc = W's rows (less their zero points, int16 rows w apart) times x
 * less zx, exact in int32 (int_gemv), then requantized as QLinearConv's tail (rq_u8's float32
 * operations). Returns -1 when its scratch cannot be had. */
#define PIXEL_LOOP(NAME, RQ, T, LO, HI)                                                       \
    static int NAME(const T *x, T *y, const int16_t *rows, const int32_t *b, const float *s,  \
                    float zy, int16_t zx, ptrdiff_t images, ptrdiff_t M, ptrdiff_t K,         \
                    ptrdiff_t w) {                                                            \
        int16_t *col = (int16_t *)malloc(sizeof(int16_t) * (K + 1));                          \
        int32_t *acc = (int32_t *)malloc(sizeof(int32_t) * (M + 1));                          \
        if (!col || !acc) {                                                                   \
            free(col);                                                                        \
            free(acc);                                                                        \
            return -1;                                                                        \
        }                                                                                     \
        for (ptrdiff_t i = 0; i < images; i++) {                                              \
            for (ptrdiff_t k = 0; k < K; k++) col[k] = (int16_t)(x[i * K + k] - zx);          \
            int_gemv(rows, col, acc, M, K, w);                                                \
            for (ptrdiff_t m = 0; m < M; m++)                                                 \
                RQ(acc + m, y + i * M + m, 1, b[m], s[m], zy, LO, HI);                        \
        }                                                                                     \
        free(col);                                                                            \
        free(acc);                                                                            \
        return 0;                                                                             \
    }
PIXEL_LOOP(pixel_u8, rq_u8, uint8_t, 0, 255)
PIXEL_LOOP(pixel_i8, rq_i8, int8_t, -128, 127)
