/* The direct convolution loops of _conv.pyx: one output channel's plane at a time, float32
 * products summed in float32, the rows of padding skipped, the columns of padding read as zeros
 * from a widened copy where some window crosses them (conv_widen), then the bias,
 * an optional addend and the activation applied to each output row while it is in cache.
 *
 * Two loop orders. "Taps": each output is the sum over (input channel, kernel row, kernel
 * column), in that order, of w * x; where a row's windows lie inside the input, eight outputs
 * are summed side by side in the lanes of a vector (one to four vectors at a time, and two
 * output rows at a time where both read as many kernel rows), the input read from a copy split
 * into stride phases so that the eight reads are contiguous; rows too narrow for a block, one
 * output at a time. "Dots": for long kernel rows of dilation 1 (audio's long 1-D kernels), each output is a dot product over the kernel row,
 * summed in 32 lanes then added lane by lane in a fixed order.
 *
 * The vectors are GCC vector extensions: the same arithmetic on every target. target_clones
 * picks AVX2 at run time where the CPU has it; -ffp-contract=off keeps multiply and add
 * separate, so every clone gives the same bits.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

enum {
    CONV_ACT_NONE = 0,
    CONV_ACT_RELU = 1,
    CONV_ACT_LEAKY_RELU = 2,
    CONV_ACT_SIGMOID = 3,
    CONV_ACT_TANH = 4,
    CONV_ACT_HARD_SIGMOID = 5,
    CONV_ACT_CLIP = 6,
    CONV_ACT_HARD_SWISH = 7
};

/* The tallest and (by taps) widest kernel the loops take (the caller hands others to NumPy). */
#define CONV_MAX_K 64

typedef struct {
    ptrdiff_t cg, h, w;      /* input channels per group, input height and width */
    ptrdiff_t kh, kw;        /* kernel height and width */
    ptrdiff_t ho, wo;        /* output height and width */
    ptrdiff_t sh, sw, dh, dw, ph, pw;  /* strides, dilations, begin pads */
    ptrdiff_t wp;            /* the phased input's row length (conv_prepare) */
    ptrdiff_t xw, lp;        /* conv_widen: the input's own row length, and the zeros written
                                before each of its rows in the copy (w is then the copy's) */
    ptrdiff_t tap[CONV_MAX_K];  /* where each kernel column reads (conv_prepare) */
    int act;                 /* CONV_ACT_* */
    float alpha, beta;       /* the activation's parameters (LeakyRelu alpha; HardSigmoid
                                alpha, beta; Clip min, max) */
} conv_geom;

typedef float conv_v8 __attribute__((vector_size(32)));
typedef int conv_v8i __attribute__((vector_size(32)));

/* The activation of one value, as the default-domain kernels compute it in float32 (sigmoid and
 * tanh in double, rounded once). NaN passes through every one. */
static inline __attribute__((always_inline)) float conv_activate(float v, int act, float a, float b) {
    float t;
    switch (act) {
    case CONV_ACT_RELU:
        return v <= 0.0f ? 0.0f : v; /* -0.0 to +0.0, as np.maximum(v, 0) */
    case CONV_ACT_LEAKY_RELU:
        return v < 0.0f ? v * a : v;
    case CONV_ACT_SIGMOID:
        return (float)(1.0 / (1.0 + exp(-(double)v)));
    case CONV_ACT_TANH:
        return (float)tanh((double)v);
    case CONV_ACT_HARD_SIGMOID:
        t = v * a + b;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    case CONV_ACT_CLIP:
        t = v < a ? a : v;
        return t > b ? b : t;
    case CONV_ACT_HARD_SWISH:
        t = v * (1.0f / 6.0f) + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    default:
        return v;
    }
}

/* row[i] = act(row[i] + bias (if any) + z[i] (if z)), for i < n: one loop per activation, so
 * that each is a plain loop the compiler vectorizes where it can. */
static inline __attribute__((always_inline)) void conv_epilogue(
    float *row, const float *bias, const float *z, ptrdiff_t n, const conv_geom *g) {
    ptrdiff_t i;
    float a = g->alpha, b = g->beta;
    if (bias != NULL) {
        float c = *bias;
        for (i = 0; i < n; i++) row[i] += c;
    }
    if (z != NULL)
        for (i = 0; i < n; i++) row[i] += z[i];
    switch (g->act) {
    case CONV_ACT_NONE:
        break;
    case CONV_ACT_RELU:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], CONV_ACT_RELU, a, b);
        break;
    case CONV_ACT_LEAKY_RELU:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], CONV_ACT_LEAKY_RELU, a, b);
        break;
    case CONV_ACT_HARD_SIGMOID:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], CONV_ACT_HARD_SIGMOID, a, b);
        break;
    case CONV_ACT_CLIP:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], CONV_ACT_CLIP, a, b);
        break;
    case CONV_ACT_HARD_SWISH:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], CONV_ACT_HARD_SWISH, a, b);
        break;
    default:
        for (i = 0; i < n; i++) row[i] = conv_activate(row[i], g->act, a, b);
    }
}

/* The kernel rows ki that output row oh reads inside the input; their count. */
static inline __attribute__((always_inline)) ptrdiff_t conv_rows(ptrdiff_t oh, const conv_geom *g,
                                                               ptrdiff_t *rows) {
    ptrdiff_t ki, n = 0;
    for (ki = 0; ki < g->kh; ki++) {
        ptrdiff_t ih = oh * g->sh + ki * g->dh - g->ph;
        if (ih >= 0 && ih < g->h) rows[n++] = ki;
    }
    return n;
}

/* Sets g->wp and g->tap: in the phased input (each row split into sw phases of wp columns,
 * column iw at phase iw % sw, index iw / sw), output o's tap kj reads row[o + tap[kj]]. */
static inline void conv_prepare(conv_geom *g) {
    ptrdiff_t kj;
    g->wp = (g->w + g->sw - 1) / g->sw;
    for (kj = 0; kj < g->kw && kj < CONV_MAX_K; kj++) {
        ptrdiff_t t = kj * g->dw - g->pw;
        ptrdiff_t fl = t >= 0 ? t / g->sw : -((-t + g->sw - 1) / g->sw);
        g->tap[kj] = (t - fl * g->sw) * g->wp + fl;
    }
}

/* One row xr of n columns in s phases of wp: column iw at dst[(iw % s) * wp + iw / s]. */
static inline __attribute__((always_inline)) void conv_phase_row(
    const float *xr, float *dst, ptrdiff_t n, ptrdiff_t s, ptrdiff_t wp) {
    ptrdiff_t p, j = 0;
    if (s == 2) { /* eight even and eight odd columns from sixteen, by two shuffles */
        for (; 2 * j + 16 <= n; j += 8) {
            conv_v8 a, b, even, odd;
            memcpy(&a, xr + 2 * j, sizeof a);
            memcpy(&b, xr + 2 * j + 8, sizeof b);
            even = __builtin_shuffle(a, b, (conv_v8i){0, 2, 4, 6, 8, 10, 12, 14});
            odd = __builtin_shuffle(a, b, (conv_v8i){1, 3, 5, 7, 9, 11, 13, 15});
            memcpy(dst + j, &even, sizeof even);
            memcpy(dst + wp + j, &odd, sizeof odd);
        }
    }
    for (p = 0; p < s; p++) {
        ptrdiff_t k;
        for (k = j; k * s + p < n; k++) dst[p * wp + k] = xr[k * s + p];
    }
}

/* Whether some output's window crosses the input's left or right edge (into the padding). */
static inline int conv_crosses(const conv_geom *g) {
    return g->pw > 0 || (g->wo - 1) * g->sw + (g->kw - 1) * g->dw - g->pw > g->w - 1;
}

/* Widens the geometry to a copy of the input whose rows have the left padding's zeros before
 * them and enough zeros after them that every output's window lies inside (call before
 * conv_prepare; conv_copy writes the copy). A tap on the padding then adds w * 0: a zero, which
 * leaves every sum as it was (a sum that starts at +0 never becomes -0), but an infinite or NaN
 * weight makes NaN there, as the NumPy form's product over padded windows does. */
static inline void conv_widen(conv_geom *g) {
    ptrdiff_t need = (g->wo - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    g->xw = g->w;
    g->lp = g->pw;
    g->w = g->pw + g->w > need ? g->pw + g->w : need;
    g->pw = 0;
}

/* x (rows, xw) into the widened, phased copy out (rows, sw, wp), whose zeros (made once by
 * the caller) stay where they are; scratch: g->w floats, zeros but for the row (sw > 1). */
__attribute__((target_clones("avx2", "default")))
static void conv_copy(const float *x, float *out, float *scratch, ptrdiff_t rows, const conv_geom *g) {
    ptrdiff_t r;
    for (r = 0; r < rows; r++) {
        const float *xr = x + r * g->xw;
        float *dst = out + r * g->sw * g->wp;
        if (g->sw == 1) {
            memcpy(dst + g->lp, xr, g->xw * sizeof(float));
        } else {
            memcpy(scratch + g->lp, xr, g->xw * sizeof(float));
            conv_phase_row(scratch, dst, g->w, g->sw, g->wp);
        }
    }
}

/* Output o of row oh from the phased input, its windows checked against the input's bounds:
 * the sum over (ci, ki, kj) of w * x, in that order (each lane of conv_block sums its output
 * the same way, so both give the same bits). */
static inline __attribute__((always_inline)) float conv_one(
    const float *x, const float *w, ptrdiff_t oh, ptrdiff_t o, const ptrdiff_t *rows,
    ptrdiff_t nrows, const conv_geom *g) {
    ptrdiff_t ci, r, kj;
    float acc = 0.0f;
    for (ci = 0; ci < g->cg; ci++) {
        for (r = 0; r < nrows; r++) {
            ptrdiff_t ki = rows[r], ih = oh * g->sh + ki * g->dh - g->ph;
            const float *xr = x + (ci * g->h + ih) * g->sw * g->wp + o;
            const float *wr = w + (ci * g->kh + ki) * g->kw;
            for (kj = 0; kj < g->kw; kj++) {
                ptrdiff_t iw = o * g->sw + kj * g->dw - g->pw;
                if (iw >= 0 && iw < g->w) acc += wr[kj] * xr[g->tap[kj]];
            }
        }
    }
    return acc;
}

/* The kernel width, and where tap kj reads: kwc when the loop was made for one width (its taps
 * then the kernel columns themselves: stride 1, dilation 1, no left padding), else g's. */
#define CONV_KW(g, kwc) ((kwc) ? (ptrdiff_t)(kwc) : (g)->kw)
#define CONV_TAP(g, kj, kwc) ((kwc) ? (kj) : (g)->tap[kj])

/* Outputs o .. o + 8 * nv of row oh (nv of 1, 2 or 4), whose windows all lie inside the input's
 * columns: NV vectors of eight lanes, each lane summing its output's taps in conv_one's order. */
static inline __attribute__((always_inline)) void conv_block(
    const float *x, const float *w, float *acc, ptrdiff_t oh, ptrdiff_t o,
    const ptrdiff_t *rows, ptrdiff_t nrows, const conv_geom *g, int nv, int kwc) {
    ptrdiff_t ci, r, kj, kw = CONV_KW(g, kwc);
    conv_v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, a;
    for (ci = 0; ci < g->cg; ci++) {
        for (r = 0; r < nrows; r++) {
            ptrdiff_t ki = rows[r], ih = oh * g->sh + ki * g->dh - g->ph;
            const float *xr = x + (ci * g->h + ih) * g->sw * g->wp + o;
            const float *wr = w + (ci * g->kh + ki) * kw;
            for (kj = 0; kj < kw; kj++) {
                const float *p = xr + CONV_TAP(g, kj, kwc);
                float wv = wr[kj];
                memcpy(&a, p, sizeof a);
                s0 += wv * a;
                if (nv >= 2) {
                    memcpy(&a, p + 8, sizeof a);
                    s1 += wv * a;
                }
                if (nv == 4) {
                    memcpy(&a, p + 16, sizeof a);
                    s2 += wv * a;
                    memcpy(&a, p + 24, sizeof a);
                    s3 += wv * a;
                }
            }
        }
    }
    memcpy(acc + o, &s0, sizeof s0);
    if (nv >= 2) memcpy(acc + o + 8, &s1, sizeof s1);
    if (nv == 4) {
        memcpy(acc + o + 16, &s2, sizeof s2);
        memcpy(acc + o + 24, &s3, sizeof s3);
    }
}

/* Outputs lo .. hi of row oh in blocks of 8 * nv, the last block ending at hi (it may overlap
 * the one before: it computes the same values again). */
static inline __attribute__((always_inline)) void conv_blocks(
    const float *x, const float *w, float *acc, ptrdiff_t oh, ptrdiff_t lo, ptrdiff_t hi,
    const ptrdiff_t *rows, ptrdiff_t nrows, const conv_geom *g, int nv, int kwc) {
    ptrdiff_t o, width = 8 * nv;
    for (o = lo; o + width <= hi; o += width) conv_block(x, w, acc, oh, o, rows, nrows, g, nv, kwc);
    if (o < hi) conv_block(x, w, acc, oh, hi - width, rows, nrows, g, nv, kwc);
}

/* The outputs lo .. hi of a row whose windows lie inside the input's columns. */
static inline __attribute__((always_inline)) void conv_inside(const conv_geom *g, ptrdiff_t *lo,
                                                            ptrdiff_t *hi) {
    /* inside: o * sw - pw >= 0 and o * sw + (kw - 1) * dw - pw <= w - 1 */
    ptrdiff_t reach = (g->kw - 1) * g->dw - g->pw;
    *lo = (g->pw + g->sw - 1) / g->sw;
    *hi = g->w - 1 - reach < 0 ? 0 : (g->w - 1 - reach) / g->sw + 1;
    if (*hi > g->wo) *hi = g->wo;
}

/* One output row by taps (x phased): eight outputs per lane block where the windows lie inside
 * the input's columns, one by one at the edges (none where the input was widened). */
static inline __attribute__((always_inline)) void conv_row_taps(
    const float *x, const float *w, float *acc, ptrdiff_t oh, const conv_geom *g, int kwc) {
    ptrdiff_t rows[CONV_MAX_K];
    ptrdiff_t nrows = conv_rows(oh, g, rows), o = 0, lo, hi;
    conv_inside(g, &lo, &hi);
    for (; o < lo && o < g->wo; o++) acc[o] = conv_one(x, w, oh, o, rows, nrows, g);
    if (hi - o >= 32) {
        conv_blocks(x, w, acc, oh, o, hi, rows, nrows, g, 4, kwc);
        o = hi;
    } else if (hi - o >= 16) {
        conv_blocks(x, w, acc, oh, o, hi, rows, nrows, g, 2, kwc);
        o = hi;
    } else if (hi - o >= 8) {
        conv_blocks(x, w, acc, oh, o, hi, rows, nrows, g, 1, kwc);
        o = hi;
    }
    for (; o < g->wo; o++) acc[o] = conv_one(x, w, oh, o, rows, nrows, g);
}

/* Outputs o .. o + 8 * nv (nv of 1, 2 or 4) of rows oh and oh + 1, which read as many kernel
 * rows (rows0 and rows1) inside the input: conv_block for two rows at once, twice the
 * independent sums in flight (each output summed in conv_one's order, so the bits are the
 * same). */
static inline __attribute__((always_inline)) void conv_block2(
    const float *x, const float *w, float *acc0, float *acc1, ptrdiff_t oh, ptrdiff_t o,
    const ptrdiff_t *rows0, const ptrdiff_t *rows1, ptrdiff_t nrows, const conv_geom *g, int nv,
    int kwc) {
    ptrdiff_t ci, r, kj, row = g->sw * g->wp, kw = CONV_KW(g, kwc);
    conv_v8 s00 = {0}, s01 = {0}, s02 = {0}, s03 = {0}, a;
    conv_v8 s10 = {0}, s11 = {0}, s12 = {0}, s13 = {0};
    for (ci = 0; ci < g->cg; ci++) {
        for (r = 0; r < nrows; r++) {
            ptrdiff_t k0 = rows0[r], k1 = rows1[r];
            ptrdiff_t ih0 = oh * g->sh + k0 * g->dh - g->ph, ih1 = (oh + 1) * g->sh + k1 * g->dh - g->ph;
            const float *xr0 = x + (ci * g->h + ih0) * row + o;
            const float *xr1 = x + (ci * g->h + ih1) * row + o;
            const float *wr0 = w + (ci * g->kh + k0) * kw;
            const float *wr1 = w + (ci * g->kh + k1) * kw;
            for (kj = 0; kj < kw; kj++) {
                const float *p0 = xr0 + CONV_TAP(g, kj, kwc), *p1 = xr1 + CONV_TAP(g, kj, kwc);
                float w0 = wr0[kj], w1 = wr1[kj];
                memcpy(&a, p0, sizeof a);
                s00 += w0 * a;
                memcpy(&a, p1, sizeof a);
                s10 += w1 * a;
                if (nv >= 2) {
                    memcpy(&a, p0 + 8, sizeof a);
                    s01 += w0 * a;
                    memcpy(&a, p1 + 8, sizeof a);
                    s11 += w1 * a;
                }
                if (nv == 4) {
                    memcpy(&a, p0 + 16, sizeof a);
                    s02 += w0 * a;
                    memcpy(&a, p1 + 16, sizeof a);
                    s12 += w1 * a;
                    memcpy(&a, p0 + 24, sizeof a);
                    s03 += w0 * a;
                    memcpy(&a, p1 + 24, sizeof a);
                    s13 += w1 * a;
                }
            }
        }
    }
    memcpy(acc0 + o, &s00, sizeof s00);
    memcpy(acc1 + o, &s10, sizeof s10);
    if (nv >= 2) {
        memcpy(acc0 + o + 8, &s01, sizeof s01);
        memcpy(acc1 + o + 8, &s11, sizeof s11);
    }
    if (nv == 4) {
        memcpy(acc0 + o + 16, &s02, sizeof s02);
        memcpy(acc1 + o + 16, &s12, sizeof s12);
        memcpy(acc0 + o + 24, &s03, sizeof s03);
        memcpy(acc1 + o + 24, &s13, sizeof s13);
    }
}

/* Outputs lo .. hi of rows oh and oh + 1 in blocks of 8 * nv, the last ending at hi. */
static inline __attribute__((always_inline)) void conv_blocks2(
    const float *x, const float *w, float *acc0, float *acc1, ptrdiff_t oh, ptrdiff_t lo,
    ptrdiff_t hi, const ptrdiff_t *rows0, const ptrdiff_t *rows1, ptrdiff_t nrows,
    const conv_geom *g, int nv, int kwc) {
    ptrdiff_t o, width = 8 * nv;
    for (o = lo; o + width <= hi; o += width)
        conv_block2(x, w, acc0, acc1, oh, o, rows0, rows1, nrows, g, nv, kwc);
    if (o < hi) conv_block2(x, w, acc0, acc1, oh, hi - width, rows0, rows1, nrows, g, nv, kwc);
}

/* Rows oh and oh + 1 by taps, reading as many kernel rows (rows0, rows1) inside the input: as
 * conv_row_taps, two rows per block. */
static inline __attribute__((always_inline)) void conv_row_pair(
    const float *x, const float *w, float *acc0, float *acc1, ptrdiff_t oh,
    const ptrdiff_t *rows0, const ptrdiff_t *rows1, ptrdiff_t nrows, const conv_geom *g, int kwc) {
    ptrdiff_t o = 0, lo, hi;
    conv_inside(g, &lo, &hi);
    for (; o < lo && o < g->wo; o++) {
        acc0[o] = conv_one(x, w, oh, o, rows0, nrows, g);
        acc1[o] = conv_one(x, w, oh + 1, o, rows1, nrows, g);
    }
    if (hi - o >= 32) {
        conv_blocks2(x, w, acc0, acc1, oh, o, hi, rows0, rows1, nrows, g, 4, kwc);
        o = hi;
    } else if (hi - o >= 16) {
        conv_blocks2(x, w, acc0, acc1, oh, o, hi, rows0, rows1, nrows, g, 2, kwc);
        o = hi;
    } else if (hi - o >= 8) {
        conv_blocks2(x, w, acc0, acc1, oh, o, hi, rows0, rows1, nrows, g, 1, kwc);
        o = hi;
    }
    for (; o < g->wo; o++) {
        acc0[o] = conv_one(x, w, oh, o, rows0, nrows, g);
        acc1[o] = conv_one(x, w, oh + 1, o, rows1, nrows, g);
    }
}

/* Adds the products w[k] * x[k], k < n, to four vectors of eight lanes (lane k % 32 while 32
 * remain, then lane k % 8 of the first vector); returns the sum of the last n % 8 products. */
static inline __attribute__((always_inline)) float conv_dot(const float *w, const float *x, ptrdiff_t n, conv_v8 *lanes) {
    ptrdiff_t k = 0, v;
    float tail = 0.0f;
    conv_v8 a, b;
    for (; k + 32 <= n; k += 32) {
        for (v = 0; v < 4; v++) {
            memcpy(&a, w + k + 8 * v, sizeof a);
            memcpy(&b, x + k + 8 * v, sizeof b);
            lanes[v] += a * b;
        }
    }
    for (; k + 8 <= n; k += 8) {
        memcpy(&a, w + k, sizeof a);
        memcpy(&b, x + k, sizeof b);
        lanes[0] += a * b;
    }
    for (; k < n; k++) tail += w[k] * x[k];
    return tail;
}

/* One output row by dots (dw == 1): each output sums its kernel rows' dot products. */
static inline __attribute__((always_inline)) void conv_row_dots(const float *x, const float *w, float *acc, ptrdiff_t oh,
                                 const conv_geom *g) {
    ptrdiff_t rows[CONV_MAX_K];
    ptrdiff_t nrows = conv_rows(oh, g, rows), o, ci, r, v;
    for (o = 0; o < g->wo; o++) {
        ptrdiff_t start = o * g->sw - g->pw;  /* the input column of kernel column 0 */
        ptrdiff_t k0 = start < 0 ? -start : 0;
        ptrdiff_t k1 = g->w - start < g->kw ? g->w - start : g->kw;
        conv_v8 lanes[4], s;
        float tail = 0.0f;
        for (v = 0; v < 4; v++) lanes[v] = (conv_v8){0, 0, 0, 0, 0, 0, 0, 0};
        for (ci = 0; ci < g->cg && k0 < k1; ci++) {
            for (r = 0; r < nrows; r++) {
                ptrdiff_t ki = rows[r], ih = oh * g->sh + ki * g->dh - g->ph;
                const float *xr = x + (ci * g->h + ih) * g->w + start;
                const float *wr = w + (ci * g->kh + ki) * g->kw;
                tail += conv_dot(wr + k0, xr + k0, k1 - k0, lanes);
            }
        }
        s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
        acc[o] = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
    }
}

/* conv_plane_f32 by taps, for kernels of width kwc (0: any width). */
static inline __attribute__((always_inline)) void conv_plane_taps(
    const float *x, const float *w, const float *bias, const float *z, float *out,
    const conv_geom *g, int kwc) {
    ptrdiff_t oh, n = g->wo;
    ptrdiff_t rows0[CONV_MAX_K], rows1[CONV_MAX_K];
    for (oh = 0; oh < g->ho; oh++) {
        float *acc = out + oh * n;
        if (oh + 1 < g->ho) {
            ptrdiff_t n0 = conv_rows(oh, g, rows0);
            if (conv_rows(oh + 1, g, rows1) == n0) {
                conv_row_pair(x, w, acc, acc + n, oh, rows0, rows1, n0, g, kwc);
                conv_epilogue(acc, bias, z == NULL ? NULL : z + oh * n, 2 * n, g);
                oh++;
                continue;
            }
        }
        conv_row_taps(x, w, acc, oh, g, kwc);
        conv_epilogue(acc, bias, z == NULL ? NULL : z + oh * n, n, g);
    }
}

/* One output channel's plane (ho, wo) from its group's input channels x (cg, h, w) and its
 * filter w (cg, kh, kw); bias: one value or NULL; z: an addend plane or NULL. */
__attribute__((target_clones("avx2", "default")))
static void conv_plane_f32(const float *x, const float *w, const float *bias, const float *z,
                           float *out, const conv_geom *g, int dots) {
    ptrdiff_t oh, n = g->wo;
    int unit = g->sw == 1 && g->dw == 1 && g->pw == 0; /* tap kj reads column o + kj */
    if (!dots) {
        if (unit && g->kw == 3)
            conv_plane_taps(x, w, bias, z, out, g, 3);
        else if (unit && g->kw == 5)
            conv_plane_taps(x, w, bias, z, out, g, 5);
        else
            conv_plane_taps(x, w, bias, z, out, g, 0);
        return;
    }
    for (oh = 0; oh < g->ho; oh++) {
        conv_row_dots(x, w, out + oh * n, oh, g);
        conv_epilogue(out + oh * n, bias, z == NULL ? NULL : z + oh * n, n, g);
    }
}
