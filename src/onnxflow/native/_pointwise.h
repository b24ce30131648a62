/* A pointwise region: a short program of float32 elementwise instructions run over a tensor in
 * chunks, so the intermediate values stay in cache and each is computed as its own node would
 * compute it (IEEE float32 arithmetic, one rounding per instruction, no contraction).
 *
 * Operand k < n_in reads input k, element i of the result reading element (i / inner) % period
 * of it (a whole operand: inner 1, period n; a scalar: period 1; a per-channel one: inner = the
 * size of the dims after the channel). Operand n_in + j is instruction j's result. The last
 * instruction writes the output. */
#ifndef ONNXFLOW_POINTWISE_H
#define ONNXFLOW_POINTWISE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_mathkern.h" /* of_erf, of_sigmoid: the compiled Erf's and Sigmoid's own functions */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the region uses one of _half.h's loops */
#include "_half.h"     /* onnxflow_half_round: the compiled HalfRound's own loop */
#pragma GCC diagnostic pop

#define PW_CHUNK 1024 /* the most elements a chunk holds */

/* A NumPy ufunc's inner loop (PyUFuncGenericFunction, npy_intp being intptr_t): the tanh
 * instruction runs NumPy's own float32 tanh loop on each chunk, so its values are the Tanh
 * kernel's (np.tanh) bit for bit. _pointwise.pyx sets it at import. */
typedef void (*pw_ufunc_loop)(char **args, const intptr_t *dims, const intptr_t *steps,
                              void *data);
static pw_ufunc_loop pw_tanh_loop = NULL;
static void *pw_tanh_data = NULL;

static void pw_set_tanh(pw_ufunc_loop loop, void *data)
{
    pw_tanh_loop = loop;
    pw_tanh_data = data;
}

static void pw_ufunc(pw_ufunc_loop loop, void *data, const float *a, float *d, long m)
{
    char *args[2] = {(char *)a, (char *)d};
    intptr_t dims[1] = {m}, steps[2] = {sizeof(float), sizeof(float)};
    loop(args, dims, steps, data);
}

enum {
    PW_ADD = 0, PW_SUB, PW_MUL, PW_DIV, PW_MAX, PW_MIN,      /* binary */
    PW_NEG, PW_ABS, PW_SQRT, PW_RECIPROCAL, PW_RELU, PW_ERF, PW_SIGMOID, /* unary */
    PW_CLIP,                                                /* x, lo, hi */
    PW_HALF,                                      /* rounded to float16, kept in float32 */
    PW_TANH,                                                /* unary */
    PW_POW, /* binary: one exponent, -4, -3, -2, 3 or 4 (the pass admits no other) */
    PW_CODES
};

/* As in _mathkern.h: without it GCC does not vectorize loops with selects (erf's two ranges,
 * max, min); it changes no value (the loops raise no floating-point flags anyone reads). */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

/* NumPy's maximum and minimum: a NaN operand gives NaN; of two equal values, the second. */
static inline float pw_max(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float pw_min(float a, float b) { return (a < b || a != a) ? a : b; }

__attribute__((target_clones("avx2", "avx512f", "default")))
static void pw_op(int code, const float *a, const float *b, const float *c, float *d, long m)
{
    long i;
    switch (code) {
    case PW_ADD: for (i = 0; i < m; i++) d[i] = a[i] + b[i]; break;
    case PW_SUB: for (i = 0; i < m; i++) d[i] = a[i] - b[i]; break;
    case PW_MUL: for (i = 0; i < m; i++) d[i] = a[i] * b[i]; break;
    case PW_DIV: for (i = 0; i < m; i++) d[i] = a[i] / b[i]; break;
    case PW_MAX: for (i = 0; i < m; i++) d[i] = pw_max(a[i], b[i]); break;
    case PW_MIN: for (i = 0; i < m; i++) d[i] = pw_min(a[i], b[i]); break;
    case PW_NEG: for (i = 0; i < m; i++) d[i] = -a[i]; break;
    case PW_ABS: for (i = 0; i < m; i++) d[i] = fabsf(a[i]); break;
    case PW_SQRT: for (i = 0; i < m; i++) d[i] = sqrtf(a[i]); break;
    case PW_RECIPROCAL: for (i = 0; i < m; i++) d[i] = 1.0f / a[i]; break;
    case PW_RELU: for (i = 0; i < m; i++) d[i] = pw_max(a[i], 0.0f); break;
    case PW_ERF: for (i = 0; i < m; i++) d[i] = (float)of_erf((double)a[i]); break;
    case PW_SIGMOID: for (i = 0; i < m; i++) d[i] = (float)of_sigmoid((double)a[i]); break;
    case PW_TANH: pw_ufunc(pw_tanh_loop, pw_tanh_data, a, d, m); break;
    case PW_POW: /* the exponent is one value: the pass admits constant scalar ones only */
        of_small_power_f32(a, d, m, (int)b[0]);
        break;
    case PW_CLIP: /* an omitted bound (NULL) does not clip */
        if (b != NULL && c != NULL) { /* two loops: GCC vectorizes neither nested form */
            for (i = 0; i < m; i++) d[i] = pw_max(a[i], b[i]);
            for (i = 0; i < m; i++) d[i] = pw_min(d[i], c[i]);
        } else if (b != NULL) for (i = 0; i < m; i++) d[i] = pw_max(a[i], b[i]);
        else if (c != NULL) for (i = 0; i < m; i++) d[i] = pw_min(a[i], c[i]);
        else memcpy(d, a, sizeof(float) * (size_t)m);
        break;
    case PW_HALF: onnxflow_half_round(a, d, m, 0); break;
    }
}

#pragma GCC pop_options

/* Elements [start, start + m) of an operand broadcast with (inner, period), into buf: runs of
 * one value each (inner > 1: a per-channel operand repeats each value over a channel's
 * elements), or stretches of the operand itself (inner 1: it repeats with its period). */
static void pw_load(const float *src, long inner, long period, long start, long m, float *buf)
{
    long i = 0, j, run, r = start % inner, k = (start / inner) % period;
    float v;
    if (period == 1) {
        for (i = 0; i < m; i++) buf[i] = src[0];
        return;
    }
    if (inner == 1) {
        while (i < m) {
            run = period - k < m - i ? period - k : m - i;
            memcpy(buf + i, src + k, sizeof(float) * (size_t)run);
            i += run;
            k = 0;
        }
        return;
    }
    while (i < m) {
        run = inner - r < m - i ? inner - r : m - i;
        v = src[k];
        for (j = 0; j < run; j++) buf[i + j] = v;
        i += run;
        r = 0;
        if (++k == period) k = 0;
    }
}

/* The chunk length: PW_CHUNK, or a multiple of the one period P <= PW_CHUNK of the operands
 * repeated along the output (inner 1), so that every chunk starts at a multiple of P and such
 * an operand's chunk is the same each time. 0 when the operands repeat with several periods. */
static long pw_chunk(int n_in, const long *inner, const long *period, long n)
{
    long p = 0;
    int k;
    for (k = 0; k < n_in; k++) {
        if (inner[k] != 1 || period[k] == 1 || period[k] == n) continue;
        if (period[k] > PW_CHUNK || (p != 0 && period[k] != p)) return 0;
        p = period[k];
    }
    return p == 0 ? PW_CHUNK : p * (PW_CHUNK / p);
}

/* Whether operand k reads the same values in every chunk of length cl (a scalar, or repeated
 * with a period cl is a multiple of). */
static int pw_fixed(long inner, long period, long cl)
{
    return period == 1 || (inner == 1 && cl % period == 0);
}

/* Run n_ops instructions (code, operand, operand, operand: -1 for none) over n elements.
 * Returns 0, or -1 when out of memory. */
static int pw_run(int n_in, const float **inputs, const long *inner, const long *period,
                  int n_ops, const int *ops, float *out, long n)
{
    long start, m, cl = pw_chunk(n_in, inner, period, n);
    int k, j, n_vals = n_in + n_ops, whole;
    float *regs = (float *)malloc(sizeof(float) * PW_CHUNK * (size_t)n_vals);
    const float **at = (const float **)malloc(sizeof(float *) * (size_t)n_vals);
    if (regs == NULL || at == NULL) {
        free(regs);
        free((void *)at);
        return -1;
    }
    if (cl == 0) cl = PW_CHUNK;
    for (k = 0; k < n_in; k++) /* operands read the same in every chunk: loaded once */
        if (pw_fixed(inner[k], period[k], cl) && period[k] != n)
            pw_load(inputs[k], inner[k], period[k], 0, cl < n ? cl : n, regs + (long)k * PW_CHUNK);
    for (start = 0; start < n; start += cl) {
        m = n - start < cl ? n - start : cl;
        for (k = 0; k < n_in; k++) {
            whole = inner[k] == 1 && period[k] == n;
            if (whole) {
                at[k] = inputs[k] + start;
                continue;
            }
            if (!pw_fixed(inner[k], period[k], cl))
                pw_load(inputs[k], inner[k], period[k], start, m, regs + (long)k * PW_CHUNK);
            at[k] = regs + (long)k * PW_CHUNK;
        }
        for (j = 0; j < n_ops; j++) {
            const int *op = ops + 4 * j;
            float *d = j == n_ops - 1 ? out + start : regs + (long)(n_in + j) * PW_CHUNK;
            pw_op(op[0], at[op[1]], op[2] >= 0 ? at[op[2]] : NULL,
                  op[3] >= 0 ? at[op[3]] : NULL, d, m);
            at[n_in + j] = d;
        }
    }
    free(regs);
    free((void *)at);
    return 0;
}

#endif
