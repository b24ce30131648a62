/* float16 conversions in one pass each, bit for bit as NumPy makes them: its float32 -> float16
 * cast (npy_floatbits_to_halfbits: round to nearest, ties to even, overflow to infinity,
 * subnormals, NaN payloads shifted and kept signalling, a payload that would vanish becoming 1),
 * its float16 -> float32 cast (exact, NaN payloads shifted back), and float32 rounded to the
 * nearest float16 value kept in float32 (NaN left as it is).
 *
 * Two forms of each loop:
 * - on x86-64 CPUs with AVX2 and F16C (chosen at run time), the hardware conversions (8 values an
 *   instruction), whose results are NumPy's for every value but NaN: they quiet signalling NaNs,
 *   so NaN lanes are blended with the integer form's result, without a branch;
 * - everywhere, the portable form: branch-free integer operations on the bits, which the compiler
 *   vectorizes (target_clones adds an AVX2 build of it on x86-64).
 * No float arithmetic touches a subnormal, so FTZ/DAZ modes cannot change a result (the hardware
 * conversions ignore them, or map a float32 subnormal to the signed zero it rounds to anyway).
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

/* c ? a : b, as masks: GCC keeps it straight-line code that vectorizes (a ternary over a float
 * operation can become a branch under -ftrapping-math, which stops the vectorizer). */
static inline uint32_t onnxflow_pick(uint32_t c, uint32_t a, uint32_t b) {
    uint32_t mask = 0u - c;
    return (a & mask) | (b & ~mask);
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
    r = onnxflow_pick(a < 0x400u, sub, r);
    return r | ((uint32_t)(h & 0x8000u) << 16);
}

static inline uint32_t onnxflow_round_bits(uint32_t f) {
    uint32_t a = f & 0x7fffffffu;
    uint32_t r = onnxflow_round_normal(a);
    r = r < 0x47800000u ? r : F32_INF;
    uint32_t sub = onnxflow_bits((float)(int32_t)onnxflow_sub_steps(a) * 0x1p-24f);
    r = onnxflow_pick(a < HALF_NORMAL_F32, sub, r);
    r |= f & 0x80000000u;
    return onnxflow_pick(a > F32_INF, f, r);
}

/* out[i] = x[i] rounded to the nearest float16 value, as float32 (out may be x). */
ONNXFLOW_CLONES
static void onnxflow_half_round_ints(const float *x, float *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_float(onnxflow_round_bits(onnxflow_bits(x[i])));
    }
}

/* out[i] = the float16 bits of x[i]. */
ONNXFLOW_CLONES
static void onnxflow_to_half_ints(const float *x, uint16_t *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_half_bits(onnxflow_bits(x[i]));
    }
}

/* out[i] = the float16 of bits h[i], as float32. */
ONNXFLOW_CLONES
static void onnxflow_from_half_ints(const uint16_t *h, float *out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        out[i] = onnxflow_float(onnxflow_float_bits(h[i]));
    }
}


/* out[i] = table[the float16 bits of x[i]], for x[i] that are float16 values held in float32
 * (x[i] is exactly the float32 of its float16 bits). Returns 0, or 1 as soon as some x[i] is
 * not such a value (out is then incomplete). */
ONNXFLOW_CLONES
static int onnxflow_half_lookup_ints(const float *x, const float *table, float *out,
                                     ptrdiff_t n) {
    uint32_t bad = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        uint32_t b = onnxflow_bits(x[i]);
        uint16_t h = onnxflow_half_bits(b);
        bad |= onnxflow_float_bits(h) != b;
        out[i] = table[h];
    }
    return bad != 0;
}

/* onnxflow_half_lookup_ints with a table of float16 bits (65536 entries and one more, unread,
 * so that 32-bit reads of the last entry stay inside), each entry widened exactly. */
ONNXFLOW_CLONES
static int onnxflow_half_lookup16_ints(const float *x, const uint16_t *table, float *out,
                                       ptrdiff_t n) {
    uint32_t bad = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        uint32_t b = onnxflow_bits(x[i]);
        uint16_t h = onnxflow_half_bits(b);
        bad |= onnxflow_float_bits(h) != b;
        out[i] = onnxflow_float(onnxflow_float_bits(table[h]));
    }
    return bad != 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ONNXFLOW_F16C_TARGET __attribute__((target("avx2,f16c")))

/* Whether this CPU has AVX2 and F16C (the OS saving the AVX registers too). */
static int onnxflow_has_f16c(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

/* NaN lanes of 8 float32 bits: magnitude above infinity's (signed compare: below 2**31). */
ONNXFLOW_F16C_TARGET
static inline __m256i onnxflow_nan_lanes(__m256i bits) {
    __m256i a = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    return _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)F32_INF));
}

ONNXFLOW_F16C_TARGET
static void onnxflow_half_round_f16c(const float *x, float *out, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        __m256 nan = _mm256_castsi256_ps(onnxflow_nan_lanes(_mm256_castps_si256(v)));
        _mm256_storeu_ps(out + i, _mm256_blendv_ps(r, v, nan));
    }
    onnxflow_half_round_ints(x + i, out + i, n - i);
}

/* NumPy's float16 NaN for NaN lanes of 8 float32 bits (see onnxflow_half_bits), narrowed to
 * 16-bit lanes in order; other lanes hold no meaning. */
ONNXFLOW_F16C_TARGET
static inline __m128i onnxflow_half_nans(__m256i bits) {
    __m256i a = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    __m256i pay = _mm256_and_si256(_mm256_srli_epi32(a, 13), _mm256_set1_epi32(0x3ff));
    __m256i gone = _mm256_cmpeq_epi32(pay, _mm256_setzero_si256());
    pay = _mm256_or_si256(pay, _mm256_and_si256(gone, _mm256_set1_epi32(1)));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000));
    __m256i h = _mm256_or_si256(_mm256_or_si256(pay, sign), _mm256_set1_epi32(0x7c00));
    h = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_castsi256_si128(h);
}

ONNXFLOW_F16C_TARGET
static void onnxflow_to_half_f16c(const float *x, uint16_t *out, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256i bits = _mm256_castps_si256(v);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        __m256i nan = onnxflow_nan_lanes(bits);
        nan = _mm256_permute4x64_epi64(_mm256_packs_epi32(nan, nan), 0x08);
        h = _mm_blendv_epi8(h, onnxflow_half_nans(bits), _mm256_castsi256_si128(nan));
        _mm_storeu_si128((__m128i *)(out + i), h);
    }
    onnxflow_to_half_ints(x + i, out + i, n - i);
}

ONNXFLOW_F16C_TARGET
static void onnxflow_from_half_f16c(const uint16_t *h, float *out, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i hv = _mm_loadu_si128((const __m128i *)(h + i));
        __m256 r = _mm256_cvtph_ps(hv);
        __m256i w = _mm256_cvtepu16_epi32(hv);
        __m256i a = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff));
        __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7c00));
        __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16);
        __m256i exact = _mm256_or_si256(_mm256_slli_epi32(a, 13), _mm256_set1_epi32((int)F32_INF));
        exact = _mm256_or_si256(exact, sign);
        r = _mm256_blendv_ps(r, _mm256_castsi256_ps(exact), _mm256_castsi256_ps(nan));
        _mm256_storeu_ps(out + i, r);
    }
    onnxflow_from_half_ints(h + i, out + i, n - i);
}

/* The F16C form of onnxflow_half_lookup_ints: a lane is a float16 value when converting it to
 * float16 and back gives its bits (the hardware quiets signalling NaNs and drops the payload
 * bits float16 has no room for: those lanes fail, as they do in the integer form). */
ONNXFLOW_F16C_TARGET
static int onnxflow_half_lookup_f16c(const float *x, const float *table, float *out,
                                     ptrdiff_t n) {
    ptrdiff_t i = 0;
    __m256i bad = _mm256_setzero_si256();
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(v), _MM_FROUND_TO_NEAREST_INT);
        __m256i back = _mm256_castps_si256(_mm256_cvtph_ps(h));
        bad = _mm256_or_si256(bad, _mm256_xor_si256(back, v));
        __m256i idx = _mm256_cvtepu16_epi32(h);
        _mm256_storeu_ps(out + i, _mm256_i32gather_ps(table, idx, 4));
    }
    if (!_mm256_testz_si256(bad, bad)) return 1;
    return onnxflow_half_lookup_ints(x + i, table, out + i, n - i);
}

/* The F16C form of onnxflow_half_lookup16_ints: 32-bit gathers at 2-byte steps, the low half
 * kept, widened by the hardware (exact for every float16 but signalling NaNs, which a table of
 * float16 bits must not hold). */
ONNXFLOW_F16C_TARGET
static int onnxflow_half_lookup16_f16c(const float *x, const uint16_t *table, float *out,
                                       ptrdiff_t n) {
    ptrdiff_t i = 0;
    __m256i bad = _mm256_setzero_si256();
    const __m256i low = _mm256_set1_epi32(0xffff);
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(v), _MM_FROUND_TO_NEAREST_INT);
        __m256i back = _mm256_castps_si256(_mm256_cvtph_ps(h));
        bad = _mm256_or_si256(bad, _mm256_xor_si256(back, v));
        __m256i idx = _mm256_cvtepu16_epi32(h);
        __m256i got = _mm256_and_si256(_mm256_i32gather_epi32((const int *)table, idx, 2), low);
        got = _mm256_permute4x64_epi64(_mm256_packus_epi32(got, got), 0x08);
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_castsi256_si128(got)));
    }
    if (!_mm256_testz_si256(bad, bad)) return 1;
    return onnxflow_half_lookup16_ints(x + i, table, out + i, n - i);
}
#define ONNXFLOW_HAS_F16C() onnxflow_has_f16c()
#else
#define ONNXFLOW_HAS_F16C() 0
#define onnxflow_half_lookup16_f16c onnxflow_half_lookup16_ints
#define onnxflow_half_lookup_f16c onnxflow_half_lookup_ints
#define onnxflow_half_round_f16c onnxflow_half_round_ints
#define onnxflow_to_half_f16c onnxflow_to_half_ints
#define onnxflow_from_half_f16c onnxflow_from_half_ints
#endif

/* The loops: the F16C form where the CPU has it, unless `portable` asks for the integer form. */
static void onnxflow_half_round(const float *x, float *out, ptrdiff_t n, int portable) {
    (portable || !ONNXFLOW_HAS_F16C() ? onnxflow_half_round_ints : onnxflow_half_round_f16c)(
        x, out, n);
}

static void onnxflow_to_half(const float *x, uint16_t *out, ptrdiff_t n, int portable) {
    (portable || !ONNXFLOW_HAS_F16C() ? onnxflow_to_half_ints : onnxflow_to_half_f16c)(x, out, n);
}

static void onnxflow_from_half(const uint16_t *h, float *out, ptrdiff_t n, int portable) {
    (portable || !ONNXFLOW_HAS_F16C() ? onnxflow_from_half_ints : onnxflow_from_half_f16c)(
        h, out, n);
}

/* out[i] = table[float16 bits of x[i]]: 0, or 1 when some x[i] is not a float16 value. */
static int onnxflow_half_lookup(const float *x, const float *table, float *out, ptrdiff_t n,
                                int portable) {
    return (portable || !ONNXFLOW_HAS_F16C() ? onnxflow_half_lookup_ints
                                             : onnxflow_half_lookup_f16c)(x, table, out, n);
}

static int onnxflow_half_lookup16(const float *x, const uint16_t *table, float *out,
                                  ptrdiff_t n, int portable) {
    return (portable || !ONNXFLOW_HAS_F16C() ? onnxflow_half_lookup16_ints
                                             : onnxflow_half_lookup16_f16c)(x, table, out, n);
}

#endif
