/* float16 conversions in one branch-free pass each, on the bits as 32-bit integers.
 *
 * The results are NumPy's, bit for bit: its float32 -> float16 cast (npy_floatbits_to_halfbits:
 * round to nearest, ties to even, overflow to infinity, subnormals, NaN payloads shifted and kept
 * signalling, a payload that would vanish becoming 1), its float16 -> float32 cast (exact, NaN
 * payloads shifted back), and float32 rounded to the nearest float16 value kept in float32 (NaN
 * left as it is). No hardware conversion (F16C) is used: it quiets signalling NaNs, NumPy does
 * not. No float arithmetic touches a subnormal, so FTZ/DAZ modes cannot change a result.
 *
 * Each loop is plain integer code that GCC vectorizes; target_clones compiles it twice, for AVX2
 * (8 lanes, variable shifts) and for the baseline, and picks one at load time.
 */
#ifndef ONNXFLOW_HALF_H
#define ONNXFLOW_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ONNXFLOW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ONNXFLOW_CLONES
#endif

#define HALF_NORMAL_F32 0x38800000u /* 2**-14, float16's smallest normal, as float32 bits */
#define F32_INF 0x7f800000u

static inline uint32_t onnxflow_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
}

static inline float onnxflow_float(uint32_t b) {
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* |f| < 2**-14 (a: f's bits less the sign) as a count of float16's subnormal step 2**-24,
 * rounded to nearest even: the 24-bit significand shifted right by 126 - exponent (at least 14;
 * past 31 every value is 0). 1024 (a tie up from the largest subnormal) is float16's smallest
 * normal, as its bits. */
static inline uint32_t onnxflow_sub_steps(uint32_t a) {
    uint32_t shift = 126u - (a >> 23);
    shift = shift > 31u ? 31u : shift;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return (m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift;
}

/* float32 bits a (sign cleared), 2**-14 <= a, rounded to 10 fraction bits, ties to even, still
 * float32 bits (beyond 65504 they reach 0x47800000, float16's infinity, or more). */
static inline uint32_t onnxflow_round_normal(uint32_t a) {
    return (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
}

static inline uint16_t onnxflow_half_bits(uint32_t f) {
    uint32_t a = f & 0x7fffffffu;
    uint32_t normal = (onnxflow_round_normal(a) - 0x38000000u) >> 13;
    normal = normal < 0x7c00u ? normal : 0x7c00u; /* overflow and infinity */
    uint32_t h = a < HALF_NORMAL_F32 ? onnxflow_sub_steps(a) : normal;
    uint32_t nan = 0x7c00u | ((a >> 13) & 0x3ffu);
    nan |= (a & 0x7fe000u) == 0u; /* a payload only in the dropped bits: NaN all the same */
    h = a > F32_INF ? nan : h;
    return (uint16_t)(h | ((f >> 16) & 0x8000u));
}

static inline uint32_t onnxflow_float_bits(uint16_t h) {
    uint32_t a = h & 0x7fffu;
    uint32_t wide = a << 13;
    uint32_t r = a >= 0x7c00u ? (wide | F32_INF) : wide + 0x38000000u;
    /* subnormals and zero: a steps of 2**-24, exact in float32 and a normal result */
    uint32_t sub = onnxflow_bits((float)(int32_t)a * 0x1p-24f);
    r = a < 0x400u ? sub : r;
    return r | ((uint32_t)(h & 0x8000u) << 16);
}

static inline uint32_t onnxflow_round_bits(uint32_t f) {
    uint32_t a = f & 0x7fffffffu;
    uint32_t r = onnxflow_round_normal(a);
    r = r < 0x47800000u ? r : F32_INF;
    uint32_t sub = onnxflow_bits((float)(int32_t)onnxflow_sub_steps(a) * 0x1p-24f);
    r = a < HALF_NORMAL_F32 ? sub : r;
    r |= f & 0x80000000u;
    return a > F32_INF ? f : r;
}

/* out[i] = x[i] rounded to the nearest float16 value, as float32 (out may be x). */
ONNXFLOW_CLONES
static void onnxflow_half_round(const float *x, float *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_float(onnxflow_round_bits(onnxflow_bits(x[i])));
    }
}

/* out[i] = the float16 bits of x[i]. */
ONNXFLOW_CLONES
static void onnxflow_to_half(const float *x, uint16_t *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_half_bits(onnxflow_bits(x[i]));
    }
}

/* out[i] = the float16 of bits h[i], as float32. */
ONNXFLOW_CLONES
static void onnxflow_from_half(const uint16_t *h, float *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_float(onnxflow_float_bits(h[i]));
    }
}

#endif
