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
void onnxflow_rnn_product(const float *m, ptrdiff_t ld, const double *h, double *acc,
                          ptrdiff_t rows, ptrdiff_t width)
{
    for (ptrdiff_t k = 0; k < rows; k++) {
        const double hk = h[k];
        const float *row = m + k * ld;
        for (ptrdiff_t g = 0; g < width; g++)
            acc[g] += (double)row[g] * hk;
    }
}

/* acc += q @ m in exact integer arithmetic: q (rows) and m (rows x width, ld apart) are
 * 8-bit codes less their zero points. */
__attribute__((target_clones("avx2", "default")))
void onnxflow_rnn_product_int(const int32_t *m, ptrdiff_t ld, const int32_t *q, int32_t *acc,
                              ptrdiff_t rows, ptrdiff_t width)
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
