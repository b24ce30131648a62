/* Fused norms: LayerNorm and RMSNorm over the rows of a float32 matrix, in double, rounded once.
 *
 * Each row's sums run in FZ_LANES independent double accumulators (added together at the end):
 * one accumulator makes every addition wait for the one before, four cycles each; with eight
 * the compiler keeps them in vector registers. No FMA contraction (setup.py: -ffp-contract=off).
 */
#ifndef ONNXFLOW_FUSE_H
#define ONNXFLOW_FUSE_H

#include <math.h>

#define FZ_LANES 8

/* The sum of r[j] - shift over a row of n, or of its squares when square. */
static inline double fz_sum(const float *r, long n, double shift, int square)
{
    double acc[FZ_LANES] = {0};
    double total = 0.0, d;
    long j = 0;
    int k;
    if (square) {
        for (; j + FZ_LANES <= n; j += FZ_LANES)
            for (k = 0; k < FZ_LANES; k++) {
                d = (double)r[j + k] - shift;
                acc[k] += d * d;
            }
        for (; j < n; j++) {
            d = (double)r[j] - shift;
            total += d * d;
        }
    } else {
        for (; j + FZ_LANES <= n; j += FZ_LANES)
            for (k = 0; k < FZ_LANES; k++)
                acc[k] += (double)r[j + k] - shift;
        for (; j < n; j++)
            total += (double)r[j] - shift;
    }
    for (k = 0; k < FZ_LANES; k++)
        total += acc[k];
    return total;
}

/* out = (r - mean) * inv, times gamma and plus beta where given (NULL: none). */
static inline void fz_scale(const float *r, long n, double mean, double inv, const float *gamma,
                            const float *beta, float *out)
{
    long j;
    if (gamma && beta)
        for (j = 0; j < n; j++)
            out[j] = (float)(((double)r[j] - mean) * inv * gamma[j] + beta[j]);
    else if (gamma)
        for (j = 0; j < n; j++)
            out[j] = (float)(((double)r[j] - mean) * inv * gamma[j]);
    else if (beta)
        for (j = 0; j < n; j++)
            out[j] = (float)(((double)r[j] - mean) * inv + beta[j]);
    else
        for (j = 0; j < n; j++)
            out[j] = (float)(((double)r[j] - mean) * inv);
}

/* Normalize each of rows rows of cols values: LayerNorm when centered, else RMSNorm. */
__attribute__((target_clones("avx2", "default")))
static void fz_norm_rows(const float *x, long rows, long cols, const float *gamma,
                         const float *beta, double epsilon, int centered, float *out)
{
    long i;
    double mean, var;
    for (i = 0; i < rows; i++) {
        const float *r = x + i * cols;
        mean = centered ? fz_sum(r, cols, 0.0, 0) / (double)cols : 0.0;
        var = fz_sum(r, cols, mean, 1) / (double)cols;
        fz_scale(r, cols, mean, 1.0 / sqrt(var + epsilon), gamma, beta, out + i * cols);
    }
}

#endif
