/* Float32 math in one pass: each result computed in double and rounded once to float32.
 *
 * The inner loops have no branches and call no libm function, so that GCC vectorizes them;
 * target_clones picks AVX-512, AVX2 or the baseline at load time. Every clone does the same
 * operations in the same order (setup.py builds with -ffp-contract=off, and reductions keep
 * partial sums in a fixed order), so results do not depend on the machine.
 *
 * exp: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a polynomial of degree 7, 2^n built in the
 * exponent bits. exp, erf and erfc use polynomials fitted here (least squares on Chebyshev
 * nodes, relative errors below 8e-11): float32 needs 3e-8 (half an ulp) for a result within
 * 1 ulp of the exact one rounded, see the constants.
 */
#ifndef ONNXFLOW_MATHKERN_H
#define ONNXFLOW_MATHKERN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* No floating-point trap is observed here: GCC may then evaluate both sides of a select, which
 * is what lets it vectorize loops with selects for AVX2 and SSE2 (values are unchanged). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define OF_CLONES __attribute__((target_clones("avx2", "avx512f", "default")))
#else
#define OF_CLONES
#endif

#define OF_LOG2E 1.4426950408889634
#define OF_LN2 0.69314718055994530942
#define OF_SHIFTER 6755399441055744.0 /* 1.5 * 2^52: adding it rounds to an integer */
#define OF_SQRT_HALF 0.70710678118654752440
#define OF_SQRT_2_OVER_PI 0.79788456080286535588

/* erf(x) = x * P(x * x) on [0, 1]; relative error 3.4e-11. */
static const double OF_ERF_P[8] = {
    1.1283791670570977, -0.376126384259573, 0.11283781839101559, -0.02686539212487338,
    0.005220923216944727, -0.0008482507751624491, 0.00011254640840189224, -9.63499144099291e-06,
};
/* erfc(x) * exp(x * x) = Q(t), t = 1 / (1 + x / 2), on [0, 11]; relative error 7.7e-11. */
static const double OF_ERFCX_Q[13] = {
    -6.0134442009252e-07, 0.28211744362288965, 0.2817136427412289, 0.2506220788138733,
    0.15151639306512688, 0.19620717015876762, -0.36649225356386145, 0.7732649533295003,
    -1.382393548618787, 1.4034180722250795, -0.810998147854184, 0.25558558492557615,
    -0.03456078757654357,
};

static inline double of_bits_to_double(uint64_t b) {
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static inline uint64_t of_double_to_bits(double d) {
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

/* exp(r) = 1 + r P(r) for |r| <= ln2 / 2 (fitted here, relative error 5.8e-11; exact at 0). */
static const double OF_EXP_P[7] = {
    1.000000000357775,     0.5000000083078824,    0.16666664408221216,  0.041666253784343105,
    0.008333672606538443,  0.0013947195343288936, 0.00019725986790821167,
};

static inline double of_exp_reduced(double r) {
    double p = OF_EXP_P[6];
    for (int k = 5; k >= 0; k--) p = p * r + OF_EXP_P[k];
    return p * r + 1.0;
}

/* x = n ln2 + r: returns r, and 2^n in *scale (x within [-708, 709]). */
static inline double of_reduce(double x, double *scale) {
    double t = x * OF_LOG2E + OF_SHIFTER;
    double n = t - OF_SHIFTER;
    uint64_t k = of_double_to_bits(t) - of_double_to_bits(OF_SHIFTER);
    *scale = of_bits_to_double((k + 1023) << 52);
    return x - n * OF_LN2; /* |n| <= 1023: an error below 1e-13 in r */
}

/* exp(x) for every double x (inf, 0 and NaN where libm gives them). */
static inline double of_exp(double x) {
    double c = x < -708.0 ? -708.0 : x;
    c = c > 709.0 ? 709.0 : c;
    double scale;
    double r = of_reduce(c, &scale);
    double e = of_exp_reduced(r) * scale;
    e = x > 709.0 ? INFINITY : e;
    return x < -708.0 ? 0.0 : e;
}

/* erf(a) for 0 <= a < 1. */
static inline double of_erf_small(double a) {
    double u = a * a, p = OF_ERF_P[7];
    for (int k = 6; k >= 0; k--) p = p * u + OF_ERF_P[k];
    return a * p;
}

/* erfc(a) for a >= 0 (0 beyond 11, where it is below 1.5e-54; NaN for NaN). */
static inline double of_erfc(double a) {
    double c = a > 11.0 ? 11.0 : a;
    double t = 1.0 / (1.0 + 0.5 * c), q = OF_ERFCX_Q[12];
    for (int k = 11; k >= 0; k--) q = q * t + OF_ERFCX_Q[k];
    double e = of_exp(-(c * c)) * q;
    return a > 11.0 ? 0.0 : e;
}

static inline double of_erf(double x) {
    double a = fabs(x);
    double e = a < 1.0 ? of_erf_small(a) : 1.0 - of_erfc(a);
    return copysign(e, x);
}

/* The standard normal CDF: erfc(-x / sqrt 2) / 2, the smaller side from erfc. */
static inline double of_phi(double x) {
    double z = -x * OF_SQRT_HALF;
    double upper = of_erfc(fabs(z));
    return z >= 0.0 ? 0.5 * upper : 1.0 - 0.5 * upper;
}

static inline double of_sigmoid(double x) { return 1.0 / (1.0 + of_exp(-x)); }

/* x * Phi(x) */
static inline double of_gelu(double x) { return x * of_phi(x); }

/* x * (1 + tanh(u)) / 2 = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline double of_gelu_tanh(double x) {
    double u = OF_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x));
    return x / (1.0 + of_exp(-2.0 * u));
}

/* Elementwise kernels: y[r, j] = f(x[r, j] + bias[j]) over rows of h (bias may be NULL; the
 * sum rounded to float32, as the operators define it), f(v, alpha). */
#define OF_ELEMENTWISE(name, expr)                                                            \
    OF_CLONES void name(const float *x, const float *bias, float *y, long rows, long h,      \
                        double alpha) {                                                       \
        (void)alpha;                                                                          \
        for (long r = 0; r < rows; r++) {                                                     \
            const float *xr = x + r * h;                                                      \
            float *yr = y + r * h;                                                            \
            if (bias) {                                                                       \
                for (long j = 0; j < h; j++) {                                                \
                    double v = (double)(xr[j] + bias[j]); /* A + B: a float32 tensor */ \
                    yr[j] = (float)(expr);                                                    \
                }                                                                             \
            } else {                                                                          \
                for (long j = 0; j < h; j++) {                                                \
                    double v = (double)xr[j];                                                 \
                    yr[j] = (float)(expr);                                                    \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

/* y = x ** n for n in (-4, -3, -2, 2, 3, 4): products in double (w w, times w or squared),
 * 1 / that for negative n, rounded once: Pow's small powers (its NumPy form's steps). */
#define OF_POWER_LOOPS(expr)                                                                  \
    if (n < 0)                                                                                \
        for (long i = 0; i < m; i++) {                                                        \
            double w = x[i];                                                                  \
            y[i] = (float)(1.0 / (expr));                                                     \
        }                                                                                     \
    else                                                                                      \
        for (long i = 0; i < m; i++) {                                                        \
            double w = x[i];                                                                  \
            y[i] = (float)(expr);                                                             \
        }

OF_CLONES void of_small_power_f32(const float *x, float *y, long m, int n) {
    int a = n < 0 ? -n : n;
    if (a == 3) {
        OF_POWER_LOOPS((w * w) * w)
    } else if (a == 4) {
        OF_POWER_LOOPS((w * w) * (w * w))
    } else {
        OF_POWER_LOOPS(w * w)
    }
}

OF_ELEMENTWISE(of_erf_f32, of_erf(v))
OF_ELEMENTWISE(of_sigmoid_f32, of_sigmoid(v))
OF_ELEMENTWISE(of_swish_f32, v / (1.0 + of_exp(-(alpha * v))))
OF_ELEMENTWISE(of_gelu_f32, of_gelu(v))
OF_ELEMENTWISE(of_gelu_tanh_f32, of_gelu_tanh(v))

/* Reductions keep this many partial results (several vector registers: an add's latency is
 * not a row's critical path), combined pairwise in a fixed order. */
#define OF_LANES 32

static inline double of_combine(double *acc) {
    for (int width = OF_LANES / 2; width > 0; width /= 2)
        for (int k = 0; k < width; k++) acc[k] += acc[k + width];
    return acc[0];
}

/* max over a row (NaN ignored: exp of a NaN makes the row NaN anyway). */
static inline float of_row_max(const float *x, long h) {
    float m[OF_LANES];
    for (int k = 0; k < OF_LANES; k++) m[k] = -INFINITY;
    long j = 0;
    for (; j + OF_LANES <= h; j += OF_LANES)
        for (int k = 0; k < OF_LANES; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    float best = -INFINITY;
    for (; j < h; j++) best = x[j] > best ? x[j] : best;
    for (int k = 0; k < OF_LANES; k++) best = m[k] > best ? m[k] : best;
    return best;
}

/* The sum of s[j] (mode 0), s[j]^2 (mode 1) or (s[j] - c)^2 (mode 2), from OF_LANES partial
 * sums. */
static inline double of_row_sum(const double *s, long h, int mode, double c) {
    double acc[OF_LANES] = {0};
    long j = 0;
    for (; j + OF_LANES <= h; j += OF_LANES)
        for (int k = 0; k < OF_LANES; k++) {
            double v = mode == 2 ? s[j + k] - c : s[j + k];
            acc[k] += mode == 0 ? v : v * v;
        }
    double tail = 0.0;
    for (; j < h; j++) {
        double v = mode == 2 ? s[j] - c : s[j];
        tail += mode == 0 ? v : v * v;
    }
    return of_combine(acc) + tail;
}

/* Softmax (log_form 0) or LogSoftmax (1) of each row of h. 0 on success, -1 out of memory. */
OF_CLONES int of_softmax_f32(const float *x, float *y, long rows, long h, int log_form) {
    double *e = malloc((size_t)(h > 0 ? h : 1) * sizeof(double));
    if (!e) return -1;
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float *yr = y + r * h;
        double m = (double)of_row_max(xr, h);
        for (long j = 0; j < h; j++) e[j] = of_exp((double)xr[j] - m);
        double total = of_row_sum(e, h, 0, 0.0);
        if (log_form) {
            double shift = m + log(total);
            for (long j = 0; j < h; j++) yr[j] = (float)((double)xr[j] - shift);
        } else {
            double inv = 1.0 / total;
            for (long j = 0; j < h; j++) yr[j] = (float)(e[j] * inv);
        }
    }
    free(e);
    return 0;
}

/* s = x + skip + bias in double (skip, bias NULL: none), written rounded to sum when not
 * NULL; returns the sum of s (of s^2 with squares). */
static inline double of_row_load(const float *x, const float *skip, const float *bias, double *s,
                                 float *sum, long h, int squares) {
    double acc[OF_LANES] = {0};
    double tail = 0.0;
    for (long j = 0; j < h; j++) {
        double v = (double)x[j];
        if (skip) v += (double)skip[j];
        if (bias) v += (double)bias[j];
        s[j] = v;
        if (sum) sum[j] = (float)v;
    }
    long j = 0;
    for (; j + OF_LANES <= h; j += OF_LANES)
        for (int k = 0; k < OF_LANES; k++) acc[k] += squares ? s[j + k] * s[j + k] : s[j + k];
    for (; j < h; j++) tail += squares ? s[j] * s[j] : s[j];
    return of_combine(acc) + tail;
}

/* Layer norm (rms 0) or RMS norm (rms 1) of each row of s = x + skip + bias (skip, bias,
 * beta may be NULL; skip has skip_rows rows, repeated): y = (s - mean) * inv * gamma + beta,
 * inv = 1 / sqrt(var + eps) (RMS: y = s * inv * gamma, inv = 1 / sqrt(mean(s^2) + eps)).
 * mean, inv (one per row) and sum (s, rows of h) are written where not NULL. */
OF_CLONES int of_norm_f32(const float *x, const float *skip, long skip_rows, const float *bias,
                          const float *gamma, const float *beta, float *y, float *mean_out,
                          float *inv_out, float *sum_out, long rows, long h, double eps, int rms) {
    double *s = malloc((size_t)(h > 0 ? h : 1) * sizeof(double));
    if (!s) return -1;
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float *yr = y + r * h;
        const float *kr = skip ? skip + (r % skip_rows) * h : NULL;
        double first = of_row_load(xr, kr, bias, s, sum_out ? sum_out + r * h : NULL, h, rms);
        double mean = rms ? 0.0 : first / (double)h;
        double spread = rms ? first : of_row_sum(s, h, 2, mean);
        double inv = 1.0 / sqrt(spread / (double)h + eps);
        if (mean_out) mean_out[r] = (float)mean;
        if (inv_out) inv_out[r] = (float)inv;
        if (beta)
            for (long j = 0; j < h; j++)
                yr[j] = (float)((s[j] - mean) * inv * (double)gamma[j] + (double)beta[j]);
        else
            for (long j = 0; j < h; j++) yr[j] = (float)((s[j] - mean) * inv * (double)gamma[j]);
    }
    free(s);
    return 0;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif
