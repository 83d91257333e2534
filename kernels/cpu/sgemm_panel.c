/*
 * sgemm_panel.c - a float32 product with no JIT (sgemm_panel.h says why).
 *
 * op(B) is copied once into a panel of k rows of n floats, padded to a
 * multiple of 16 with zeros, so that a row of it is whole vectors whichever
 * way B was stored. Then, per block of rows of A and of up to four vectors
 * of columns, the block's sums stay in registers while k runs: one load of
 * the panel's row, one broadcast of A's element per row, one FMA per
 * vector. The shapes it is for are short (the attention core's: 128 x 128 x
 * 32, 128 x 32 x 128 for a MiniLM head), so the panel (16 KiB there) sits in
 * L1 and no further blocking over k pays.
 */
#include "sgemm_panel.h"

#include "kernel.h"
#include "simd_transpose.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define PANEL_AVX512 __attribute__((target("avx512f")))
#define PANEL_INLINE __attribute__((always_inline)) inline
#define PANEL_MAX_ROWS 16

PANEL_AVX512 static void panel_pack_t_tile(const float *b, int64_t ldb, int64_t n, int64_t k,
                                           int64_t j0, int64_t k0, int64_t n16, float *p);

/* op(B) as k rows of n16 floats, columns n..n16 zero. */
PANEL_AVX512 static void panel_pack(bool trans_b, int64_t n, int64_t k, const float *b, int64_t ldb,
                       int64_t n16, float *p)
{
    if (trans_b) {
        for (int64_t j0 = 0; j0 < n16; j0 += 16)
            for (int64_t k0 = 0; k0 < k; k0 += 16)
                panel_pack_t_tile(b, ldb, n, k, j0, k0, n16, p);
        return;
    }
    for (int64_t kk = 0; kk < k; kk++) {
        float *row = p + kk * n16;
        memcpy(row, b + kk * ldb, sizeof(float) * (size_t)n);
        memset(row + n, 0, sizeof(float) * (size_t)(n16 - n));
    }
}

/* The transposed case in 16 x 16 tiles, in registers: B's rows j0..j0+15
 * (zero past n), 16 elements of k each, come out as 16 rows of the panel.
 * One element at a time it was the larger part of a 128 x 128 x 32
 * product. */
PANEL_AVX512 static void panel_pack_t_tile(const float *b, int64_t ldb, int64_t n, int64_t k,
                                           int64_t j0, int64_t k0, int64_t n16, float *p)
{
    const int64_t kw = k - k0 < 16 ? k - k0 : 16;
    const __mmask16 km = (__mmask16)(kw == 16 ? 0xFFFF : (1u << kw) - 1);
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = j0 + i < n ? _mm512_maskz_loadu_ps(km, b + (j0 + i) * ldb + k0)
                          : _mm512_setzero_ps();
    slim__transpose16_ps(r);
    for (int d = 0; d < kw; d++)
        _mm512_storeu_ps(p + (k0 + d) * n16 + j0, r[d]);
}

/* rb rows of C by nv vectors of columns from the panel's columns at p.
 * Called with constant rb and nv, so that acc is registers. */
PANEL_AVX512 static PANEL_INLINE void panel_block(const float *a, int64_t lda, const float *p,
                                                  int64_t n16, int64_t k, const int rb,
                                                  const int nv, __m512 valpha, float beta,
                                                  float *c, int64_t ldc, __mmask16 last)
{
    __m512 acc[PANEL_MAX_ROWS][4];
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k; kk++) {
        __m512 bv[4];
        for (int v = 0; v < nv; v++)
            bv[v] = _mm512_loadu_ps(p + kk * n16 + v * 16);
        for (int i = 0; i < rb; i++) {
            const __m512 x = _mm512_set1_ps(a[i * lda + kk]);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_fmadd_ps(x, bv[v], acc[i][v]);
        }
    }
    const __m512 vbeta = _mm512_set1_ps(beta);
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < nv; v++) {
            const __mmask16 m = v == nv - 1 ? last : (__mmask16)0xFFFF;
            float *out = c + i * ldc + v * 16;
            __m512 r = _mm512_mul_ps(acc[i][v], valpha);
            if (beta != 0.0f)
                r = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(m, out), r);
            _mm512_mask_storeu_ps(out, m, r);
        }
}

/* Every row of C for one chunk of nv vectors of columns: blocks of RB rows
 * (as many as the registers hold beside the panel's nv vectors), then the
 * rows left one at a time, which compute each element the same way. */
#define PANEL_CHUNK(NV, RB)                                                                  \
    PANEL_AVX512 static void panel_chunk_##NV(const float *a, int64_t lda, const float *p,    \
                                              int64_t n16, int64_t m, int64_t k,              \
                                              __m512 valpha, float beta, float *c,            \
                                              int64_t ldc, __mmask16 last)                    \
    {                                                                                         \
        int64_t r = 0;                                                                        \
        for (; r + (RB) <= m; r += (RB))                                                      \
            panel_block(a + r * lda, lda, p, n16, k, (RB), (NV), valpha, beta, c + r * ldc,   \
                        ldc, last);                                                           \
        for (; r < m; r++)                                                                    \
            panel_block(a + r * lda, lda, p, n16, k, 1, (NV), valpha, beta, c + r * ldc, ldc, \
                        last);                                                                \
    }

/* 32 vector registers: RB * NV sums, NV panel vectors and a broadcast. */
PANEL_CHUNK(1, 16)
PANEL_CHUNK(2, 12)
PANEL_CHUNK(3, 8)
PANEL_CHUNK(4, 6)

PANEL_AVX512 static void panel_run(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                   int64_t lda, const float *p, int64_t n16, float beta,
                                   float *c, int64_t ldc)
{
    const __m512 valpha = _mm512_set1_ps(alpha);
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        const int64_t cols = n - j0 < 64 ? n - j0 : 64;
        const int nv = (int)((cols + 15) / 16);
        const int tail = (int)(cols - (nv - 1) * 16);
        const __mmask16 last = (__mmask16)(tail == 16 ? 0xFFFF : (1u << tail) - 1);
        switch (nv) {
        case 1: panel_chunk_1(a, lda, p + j0, n16, m, k, valpha, beta, c + j0, ldc, last); break;
        case 2: panel_chunk_2(a, lda, p + j0, n16, m, k, valpha, beta, c + j0, ldc, last); break;
        case 3: panel_chunk_3(a, lda, p + j0, n16, m, k, valpha, beta, c + j0, ldc, last); break;
        default: panel_chunk_4(a, lda, p + j0, n16, m, k, valpha, beta, c + j0, ldc, last); break;
        }
    }
}

bool slim__sgemm_panel(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc)
{
    if (!slim_cpu_has_avx512f() || k < 0 || n > INT64_MAX / 2)
        return false;
    if (m <= 0 || n <= 0)
        return true;
    const int64_t n16 = (n + 15) & ~(int64_t)15;
    size_t floats;
    if (__builtin_mul_overflow((size_t)n16, (size_t)(k > 0 ? k : 1), &floats) ||
        floats > SIZE_MAX / sizeof(float))
        return false;
    /* raw: one product's panel on a kernel thread, which has no account to
     * charge (parallel.c carries only the cancel token); k * n16 floats */
    float *p = malloc(floats * sizeof(float));
    if (!p)
        return false;
    panel_pack(trans_b, n, k, b, ldb, n16, p);
    panel_run(m, n, k, alpha, a, lda, p, n16, beta, c, ldc);
    free(p);
    return true;
}

#else

bool slim__sgemm_panel(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc)
{
    (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
    (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif
