/*
 * qgemm_sparse.c - the int8 product's sparse float32 entries (qgemm.h,
 * n_sp): each channel's largest weights, which quant/int8.c keeps out of
 * the int8 codes, added per row before the activation. The portable
 * paths add them in a second pass over y (qgemm.c), the AVX-512 VNNI path
 * computes them here while a chunk of rows is quantized, into y, and its
 * epilogue adds them. Every path runs the same chain of fused
 * multiply-adds per output, so they agree bit for bit, and each row's
 * sums read that row alone (the batching guarantee).
 */
#include "qgemm.h"
#include "qgemm_impl.h"
#include "simd_transpose.h"

#include <math.h>
#include <stdlib.h>

/* The sparse float32 entries (qgemm.h) of rows [r, r + nr), after the
 * outlier channels: per output, acc = fma(x[idx[t]], val[t], acc) over t
 * in order from 0, then y + acc (the VNNI path's operations). */
void slim__qgemm_sparse_rows_c(const slim_qgemm_args *a, int64_t r, int nr)
{
    for (int i = 0; i < nr; i++) {
        const float *x = a->x + (r + i) * a->ldx;
        float *y = a->y + (r + i) * a->ldy;
        for (int64_t c = 0; c < a->n; c++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < a->n_sp; t++)
                acc = fmaf(x[a->sp_idx[t * a->n + c]], a->sp_val[t * a->n + c], acc);
            y[c] = y[c] + acc;
        }
    }
}

#ifdef QGEMM_X86
/* Rows [r0, r1) of x, 16 at a time, transposed into xt (group g at xt +
 * g * k * 16: k vectors of the group's 16 rows, rows past r1 zero), so
 * that one sparse entry of one channel is one vector load and one fused
 * multiply-add for 16 rows (gathering x per row and entry, the first
 * version, cost a gather of 16 loads per 16 channels, row and entry: a
 * fifth of MiniLM's run). */
AVX512_TARGET
static void transpose_rows_avx512(const slim_qgemm_args *a, int64_t r0, int64_t r1, float *xt)
{
    int64_t k = a->k;
    for (int64_t r = r0; r < r1; r += 16, xt += k * 16) {
        int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
        for (int64_t c = 0; c < k; c += 16) {
            int w = k - c < 16 ? (int)(k - c) : 16;
            __mmask16 mk = w == 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
            __m512 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = i < nr ? _mm512_maskz_loadu_ps(mk, a->x + (r + i) * a->ldx + c)
                              : _mm512_setzero_ps();
            slim__transpose16_ps(v);
            for (int l = 0; l < w; l++)
                _mm512_store_ps(xt + (c + l) * 16, v[l]);
        }
    }
}

/* The sums of channels [c0, c1) for rows [r0, r1) from their transpose
 * (transpose_rows_avx512's xt), written to y, where the epilogue of the
 * same task reads and replaces them (qgemm.c's sparse_add). Per element
 * the chain of slim__qgemm_sparse_rows_c: acc = fma(x[idx[t]], val[t],
 * acc) over t from 0, so every path agrees bit for bit. */
AVX512_TARGET
static void sums_avx512(const slim_qgemm_args *a, const float *xt, int64_t r0, int64_t r1,
                        int64_t c0, int64_t c1)
{
    int64_t n = a->n, k = a->k;
    for (int64_t r = r0; r < r1; r += 16, xt += k * 16) {
        int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
        for (int64_t c = c0; c < c1; c += 16) {
            int w = c1 - c < 16 ? (int)(c1 - c) : 16;
            __mmask16 mk = w == 16 ? 0xFFFF : (__mmask16)((1u << w) - 1);
            __m512 acc[16];
            for (int l = 0; l < 16; l++) {
                __m512 s = _mm512_setzero_ps();
                for (int64_t t = 0; l < w && t < a->n_sp; t++)
                    s = _mm512_fmadd_ps(_mm512_load_ps(xt + a->sp_idx[t * n + c + l] * 16),
                                        _mm512_set1_ps(a->sp_val[t * n + c + l]), s);
                acc[l] = s;
            }
            slim__transpose16_ps(acc);
            for (int i = 0; i < nr; i++)
                _mm512_mask_storeu_ps(a->y + (r + i) * a->ldy + c, mk, acc[i]);
        }
    }
}
#endif

size_t slim__qgemm_sparse_xt_floats(int64_t chunks, int64_t rows_per_chunk, int64_t k)
{
    return (size_t)chunks * (size_t)((rows_per_chunk + 15) / 16 * 16) * (size_t)k;
}

void slim__qgemm_sparse_transpose(const slim_qgemm_args *a, int64_t r0, int64_t r1, float *xt)
{
#ifdef QGEMM_X86
    transpose_rows_avx512(a, r0, r1, xt);
#else
    (void)a, (void)r0, (void)r1, (void)xt;
#endif
}

void slim__qgemm_sparse_sums(const slim_qgemm_args *a, const float *xt, int64_t r0, int64_t r1,
                             int64_t c0, int64_t c1)
{
#ifdef QGEMM_X86
    if (xt) {
        sums_avx512(a, xt, r0, r1, c0, c1);
        return;
    }
#endif
    /* Without the transpose (it could not be allocated): the same chain
     * per element. */
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < a->n_sp; t++)
                acc = fmaf(a->x[r * a->ldx + a->sp_idx[t * a->n + c]], a->sp_val[t * a->n + c],
                           acc);
            a->y[r * a->ldy + c] = acc;
        }
}
