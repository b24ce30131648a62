/* The recurrent products of onnxflow's compiled RNN, LSTM and GRU loops (_rnn.pyx).
 *
 * Each adds h @ M to acc, M's rows `ld` floats apart, one row of M at a time, so that the
 * inner loop runs along acc and vectorizes without reordering any sum: every acc[g] adds its
 * terms in the order of k, whatever the vector width. target_clones picks AVX2 at run time
 * where the CPU has it (the build itself stays portable).
 */
#include <stddef.h>
#include <stdint.h>

__attribute__((target_clones("avx2", "default")))
void onnxflow_rnn_product(const float *restrict m, ptrdiff_t ld, const double *restrict h,
                          double *restrict acc, ptrdiff_t rows, ptrdiff_t width)
{
    ptrdiff_t k = 0;
    for (; k + 4 <= rows; k += 4) { /* four rows per pass over acc: a quarter of its traffic */
        const double h0 = h[k], h1 = h[k + 1], h2 = h[k + 2], h3 = h[k + 3];
        const float *r0 = m + k * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] = (((acc[g] + (double)r0[g] * h0) + (double)r1[g] * h1) + (double)r2[g] * h2)
                     + (double)r3[g] * h3;
    }
    for (; k < rows; k++) {
        const double hk = h[k];
        const float *row = m + k * ld;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] += (double)row[g] * hk;
    }
}

/* acc += q @ m in exact integer arithmetic: q (rows) and m (rows x width, ld apart) are
 * 8-bit codes less their zero points. */
__attribute__((target_clones("avx2", "default")))
void onnxflow_rnn_product_int(const int32_t *restrict m, ptrdiff_t ld,
                              const int32_t *restrict q, int32_t *restrict acc, ptrdiff_t rows,
                              ptrdiff_t width)
{
    for (ptrdiff_t k = 0; k < rows; k++) {
        const int32_t qk = q[k];
        const int32_t *row = m + k * ld;
        if (qk == 0)
            continue;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] += row[g] * qk;
    }
}
