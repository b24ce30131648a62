/* The recurrent products of onnxflow's compiled RNN, LSTM and GRU loops (_rnn.pyx), and their
 * gates' math.
 *
 * acc += h @ M, M's rows `ld` floats apart, h rounded to float32: each column's sum in float32
 * over k in order, as a BLAS product of the NumPy form's float32 arrays would, then added to
 * acc in double. The loop runs along a block of columns for four rows of M at a time, so that
 * it vectorizes (8 floats with AVX2, 16 with AVX-512, chosen at run time by target_clones)
 * without reordering any sum: every clone gives the same bits (measured: a 57-step LSTM of
 * hidden 32 runs about 17% faster on AVX-512 than on AVX2; the gates' double lanes double).
 */
#include <stddef.h>
#include <stdint.h>

#define ONNXFLOW_RNN_BLOCK 256

static inline __attribute__((always_inline)) void onnxflow_rnn_product_body(const float *restrict m, ptrdiff_t ld,
                                             const double *restrict h, double *restrict acc,
                                             ptrdiff_t rows, ptrdiff_t width)
{
    float part[ONNXFLOW_RNN_BLOCK];
    for (ptrdiff_t g0 = 0; g0 < width; g0 += ONNXFLOW_RNN_BLOCK) {
        const ptrdiff_t end = width - g0 < ONNXFLOW_RNN_BLOCK ? width - g0 : ONNXFLOW_RNN_BLOCK;
        const float *block = m + g0;
        for (ptrdiff_t g = 0; g < end; g++)
            part[g] = 0.0f;
        ptrdiff_t k = 0;
        for (; k + 4 <= rows; k += 4) {
            const float h0 = (float)h[k], h1 = (float)h[k + 1];
            const float h2 = (float)h[k + 2], h3 = (float)h[k + 3];
            const float *r0 = block + k * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
            for (ptrdiff_t g = 0; g < end; g++)
                part[g] = (((part[g] + r0[g] * h0) + r1[g] * h1) + r2[g] * h2) + r3[g] * h3;
        }
        for (; k < rows; k++) {
            const float hk = (float)h[k];
            const float *row = block + k * ld;
            for (ptrdiff_t g = 0; g < end; g++)
                part[g] += row[g] * hk;
        }
        for (ptrdiff_t g = 0; g < end; g++)
            acc[g0 + g] += (double)part[g];
    }
}

__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_rnn_product(const float *restrict m, ptrdiff_t ld, const double *restrict h,
                          double *restrict acc, ptrdiff_t rows, ptrdiff_t width)
{
    onnxflow_rnn_product_body(m, ld, h, acc, rows, width);
}

/* acc += q @ m in exact integer arithmetic: q (rows) and m (rows x width, ld apart) are
 * 8-bit codes less their zero points. */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_rnn_product_int(const int32_t *restrict m, ptrdiff_t ld,
                              const int32_t *restrict q, int32_t *restrict acc, ptrdiff_t rows,
                              ptrdiff_t width)
{
    ptrdiff_t k = 0;
    for (; k + 4 <= rows; k += 4) { /* four rows per pass over acc, as the float product */
        const int32_t q0 = q[k], q1 = q[k + 1], q2 = q[k + 2], q3 = q[k + 3];
        const int32_t *r0 = m + k * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] += r0[g] * q0 + r1[g] * q1 + r2[g] * q2 + r3[g] * q3;
    }
    for (; k < rows; k++) {
        const int32_t qk = q[k];
        const int32_t *row = m + k * ld;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] += row[g] * qk;
    }
}

/* The gate helpers assume no floating-point trap is enabled (Python enables none), so that
 * GCC may compute both sides of a select and vectorize their loops: values are unchanged. */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

/* exp(x) for x <= 709 (or NaN) in double, branch-free so that loops calling it vectorize:
 * x = n ln2 + r with |r| <= ln2/2, e^r from its Taylor series to r^11 (relative error below
 * 1e-15), 2^n put in the exponent bits; x is held at -708 and up (exp's finite normal range).
 * tanh's exp(-2|x|) calls it as it is: its argument needs no upper bound. */
static inline double onnxflow_exp_nonpositive(double x)
{
    const double shift = 0x1.8p52; /* adding it rounds to an integer, kept in the low bits */
    x = x < -708.0 ? -708.0 : x;
    double t = x * 0x1.71547652b82fep0 + shift; /* x / ln2 + shift */
    double n = t - shift;
    double r = (x - n * 0x1.62e42fee00000p-1) - n * 0x1.a39ef35793c76p-33; /* ln2 in two parts */
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t bits;
    __builtin_memcpy(&bits, &t, sizeof bits);
    bits = (bits + 1023) << 52; /* t's low bits hold n */
    double scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* exp(x) in double for any x: held in [-708, 709], a NaN stays NaN. */
static inline double onnxflow_exp(double x)
{
    return onnxflow_exp_nonpositive(x > 709.0 ? 709.0 : x);
}

static inline double onnxflow_sigmoid(double x)
{
    return 1.0 / (1.0 + onnxflow_exp(-x));
}

/* tanh(x) = (1 - e) / (1 + e) with e = exp(-2|x|): 1 - e loses at most log2(1 / 2|x|) bits of
 * 53, so below |x| = 1e-4 the series x (1 - x^2/3) (error x^4 relative) is taken instead. */
static inline double onnxflow_tanh(double x)
{
    double m = __builtin_fabs(x);
    double e = onnxflow_exp_nonpositive(-2.0 * m);
    double big = (1.0 - e) / (1.0 + e);
    big = __builtin_copysign(big, x);
    return m < 1e-4 ? x * (1.0 - x * x / 3.0) : big;
}

/* One LSTM step's gates with the default activations (no peepholes, clip or coupling) for
 * ``count`` units, from the pre-activations acc (i, o, f, c, ``ld`` apart): c and h
 * overwritten, rounded once. */
static inline __attribute__((always_inline)) void onnxflow_lstm_gates(
    const double *restrict acc, ptrdiff_t ld, float *restrict h, float *restrict c,
    ptrdiff_t count)
{
    for (ptrdiff_t j = 0; j < count; j++) {
        double i = onnxflow_sigmoid(acc[j]), o = onnxflow_sigmoid(acc[ld + j]);
        double f = onnxflow_sigmoid(acc[2 * ld + j]), g = onnxflow_tanh(acc[3 * ld + j]);
        double cn = f * (double)c[j] + i * g;
        c[j] = (float)cn;
        h[j] = (float)(o * onnxflow_tanh(cn));
    }
}

/* The gates of one step of n units (:func:`onnxflow_lstm_gates`). */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_lstm_default(const double *restrict acc, float *restrict h, float *restrict c,
                           ptrdiff_t n)
{
    onnxflow_lstm_gates(acc, n, h, c, n);
}

/* Rows [k0, end) of the product h @ rt (rows ``ld`` floats apart) added into part, each
 * column's float32 sum going on in row order, four rows a pass (as the product's loop). */
static inline __attribute__((always_inline)) void onnxflow_rows_into(
    const float *restrict rt, ptrdiff_t ld, const float *restrict h, float *restrict part,
    ptrdiff_t k0, ptrdiff_t end, ptrdiff_t width)
{
    ptrdiff_t k = k0;
    for (; k + 4 <= end; k += 4) {
        const float h0 = h[k], h1 = h[k + 1], h2 = h[k + 2], h3 = h[k + 3];
        const float *r0 = rt + k * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        for (ptrdiff_t g = 0; g < width; g++)
            part[g] = (((part[g] + r0[g] * h0) + r1[g] * h1) + r2[g] * h2) + r3[g] * h3;
    }
    for (; k < end; k++) {
        const float hk = h[k];
        const float *row = rt + k * ld;
        for (ptrdiff_t g = 0; g < width; g++)
            part[g] += row[g] * hk;
    }
}

/* A batch entry's whole sequence through the default LSTM: ``steps`` steps (backwards: the
 * last first) of the input projections xw (4n floats each, ``xw_step`` apart) with Wb ``wb``
 * and R transposed ``rt`` (n x 4n); h and c (n each) the states, in and out; each step's h
 * into y (``y_step`` apart). Scratch: acc (4n doubles), part (4n floats). The operations of
 * the product and gates called in turn, in their order: each step's pre-activations are
 * (xw + Wb) + the product in double, the product's columns summed in float32 in row order
 * (from the float32 states), the gates as onnxflow_lstm_default; the next step's product is
 * made as soon as the states are (none after the last step), in one call for all steps. */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_lstm_default_steps(const float *restrict xw, ptrdiff_t xw_step,
                                 const float *restrict wb, const float *restrict rt,
                                 double *restrict acc, float *restrict part, float *restrict h,
                                 float *restrict c, float *restrict y, ptrdiff_t y_step,
                                 ptrdiff_t n, ptrdiff_t steps, int backwards)
{
    const ptrdiff_t width = 4 * n;
    for (ptrdiff_t g = 0; g < width; g++)
        part[g] = 0.0f;
    if (steps > 0)
        onnxflow_rows_into(rt, width, h, part, 0, n, width);
    for (ptrdiff_t s = 0; s < steps; s++) {
        const ptrdiff_t t = backwards ? steps - 1 - s : s;
        const float *x = xw + t * xw_step;
        const int more = s + 1 < steps;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] = ((double)x[g] + wb[g]) + (double)part[g];
        if (more)
            for (ptrdiff_t g = 0; g < width; g++)
                part[g] = 0.0f;
        onnxflow_lstm_gates(acc, n, h, c, n);
        if (more)
            onnxflow_rows_into(rt, width, h, part, 0, n, width);
        float *out = y + t * y_step;
        for (ptrdiff_t j = 0; j < n; j++)
            out[j] = h[j];
    }
}

/* GRU's update and reset gates with the default activations (no clip), from xb (the step's
 * input projection with Wb) and acc (Rb plus h's product): acc's z part gets z; linear
 * before reset, its h part is scaled by r; else hd (h in double) becomes r * h and acc's r part
 * keeps h. */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_gru_default_zr(const double *restrict xb, double *restrict acc,
                             double *restrict hd, ptrdiff_t n, int linear_before_reset)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        double z = onnxflow_sigmoid(xb[j] + acc[j]), r = onnxflow_sigmoid(xb[n + j] + acc[n + j]);
        double h = hd[j];
        acc[j] = z;
        if (linear_before_reset) {
            acc[2 * n + j] *= r;
        } else {
            acc[n + j] = h;
            hd[j] = r * h;
        }
    }
}

/* GRU's new state with the default activations, from what onnxflow_gru_default_zr left (and,
 * not linear before reset, acc's h part holding (r * h) @ R_h + Rb_h), rounded once. */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_gru_default_h(const double *restrict xb, const double *restrict acc,
                            const double *restrict hd, float *restrict h, ptrdiff_t n,
                            int linear_before_reset)
{
    for (ptrdiff_t j = 0; j < n; j++) {
        double z = acc[j], before = linear_before_reset ? hd[j] : acc[n + j];
        double cand = onnxflow_tanh(xb[2 * n + j] + acc[2 * n + j]);
        h[j] = (float)((1.0 - z) * cand + z * before);
    }
}

/* RNN's new state with the default activation: h = tanh(acc), rounded once. */
__attribute__((target_clones("avx2", "avx512f", "default")))
void onnxflow_rnn_default(const double *restrict acc, float *restrict h, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        h[j] = (float)onnxflow_tanh(acc[j]);
}

#pragma GCC pop_options
