/*
 * matmul_small.c - FusedMatMul for a few rows, over oneDNN's packed
 * weight read in place (matmul_small.h).
 *
 * Why: at 16 rows a BERT-base run reads each of its 85M weights (340 MB)
 * once and does 32 flops with it: the run is the time to stream the
 * weights, and oneDNN's brgemm at M = 16 streamed them at about 13 GB/s
 * (84% of bert16's time in its kernels, plus per call its memory
 * objects, scratchpad and part buffer) while onnxruntime's MLAS took
 * 0.9x of our time for the same bytes. oneDNN's layout for these
 * weights (BA16a64b) is, per block of 64 columns, K rows of 64 floats one
 * after the other: exactly one sequential stream, the order this loop
 * reads it in, so no repacking and no second copy.
 *
 * Per block of 64 columns, K is cut in chunks of KC rows (16 KiB of
 * weights, which stay in L1): the first tile of rows streams the chunk
 * from memory, the other tiles of rows read it from L1. The first tile
 * also prefetches: a chunk ahead into L1 and four ahead into L2, which
 * keeps more lines in flight than L1's fill buffers allow (alternating
 * cold runs at 16 x 768 x 3072 on a busy machine: without the far ones
 * 0.88-0.99x oneDNN's time, with them 0.81-0.85x; without either,
 * 1.1-1.2x). A tile is up to 6 rows x 4 vectors of sums in
 * registers (24 of 32, 4 for the weights' row), kept in a small buffer
 * between chunks. Storing a float and loading it back changes nothing, so
 * every element is one chain of FMAs over k in order, from 0, whatever
 * the tiles: row invariance by construction. Bias and activation follow
 * on the finished sums. (matmul_dnnl.c still sends the row-invariant mode
 * to matmul_rows.c at every row count: one code for all m.)
 *
 * Threads: tasks are ranges of the N-blocks of all parts; each thread
 * streams its own contiguous weights.
 */
#include "matmul_small.h"
#include "matmul_layout.h"

#include "kernel.h"
#include "parallel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NB 64       /* columns per N-block of the layout */
#define KC 64       /* rows of K per chunk: 16 KiB of weights */
#define RT 6        /* rows per register tile */
#define PF_NEAR 64  /* rows prefetched into L1 ahead: one chunk (16 KiB) */
#define PF_FAR 256  /* rows prefetched into L2 ahead (64 KiB) */
#define DEFAULT_ROWS 16

typedef struct small_block {
    int64_t c0;  /* Y's first column */
    int cols;    /* 1..64 */
    size_t woff; /* float offset of its K x 64 weights in Wp */
} small_block;

struct slim__fmm_small {
    int64_t k, n;
    size_t floats; /* Wp's size: no prefetch past it */
    int64_t n_blocks;
    small_block *blocks;
};

int64_t slim__fmm_small_max_rows(void)
{
    static atomic_llong rows = -1; /* read by every thread of a run */
    long long v = atomic_load_explicit(&rows, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("SLIM_FMM_SMALL");
        v = e && *e ? atoll(e) : DEFAULT_ROWS;
        v = v < 0 ? 0 : v > SLIM_FMM_SMALL_CAP ? SLIM_FMM_SMALL_CAP : v;
        atomic_store_explicit(&rows, v, memory_order_relaxed);
    }
    return v;
}

/* Whether part layout m is K rows of 64 floats per N-block, N-blocks
 * outermost: inner blocks 16 of K then 64 of N (N innermost), K-blocks of
 * 16 x 64 floats in order, N-blocks of padded K x 64. */
static bool layout_fits(const dnnl_memory_desc_t *m, int64_t k)
{
    const dnnl_blocking_desc_t *b = &m->format_desc.blocking;
    return m->ndims == 2 && m->format_kind == dnnl_blocked && m->data_type == dnnl_f32 &&
           !m->offset0 && !m->extra.flags && !m->padded_offsets[0] && !m->padded_offsets[1] &&
           m->dims[0] == k && b->inner_nblks == 2 && b->inner_idxs[0] == 0 &&
           b->inner_blks[0] == 16 && b->inner_idxs[1] == 1 && b->inner_blks[1] == NB &&
           m->padded_dims[0] % 16 == 0 && m->padded_dims[1] % NB == 0 &&
           b->strides[0] == 16 * NB && b->strides[1] == m->padded_dims[0] * NB;
}

void slim__fmm_small_free(slim__fmm_small *s)
{
    if (!s)
        return;
    free(s->blocks);
    free(s);
}

slim__fmm_small *slim__fmm_small_make(int64_t k, const slim__fmm_rows_parts *parts)
{
    if (!slim_cpu_has_avx512f() || k < 1 || parts->n_parts < 1)
        return NULL;
    int64_t count = 0;
    for (int p = 0; p < parts->n_parts; p++) {
        if (!layout_fits(&parts->wmd[p], k) ||
            parts->wmd[p].dims[1] != parts->n0[p + 1] - parts->n0[p])
            return NULL;
        count += (parts->n0[p + 1] - parts->n0[p] + NB - 1) / NB;
    }
    /* raw: fixed-size load-time state, freed with the node's */
    slim__fmm_small *s = calloc(1, sizeof(*s));
    if (!s || !(s->blocks = calloc((size_t)count, sizeof(*s->blocks)))) {
        free(s);
        return NULL;
    }
    s->k = k;
    s->floats = parts->off[parts->n_parts];
    s->n = parts->n0[parts->n_parts];
    for (int p = 0; p < parts->n_parts; p++) {
        const int64_t stride = parts->wmd[p].format_desc.blocking.strides[1];
        for (int64_t c = parts->n0[p], i = 0; c < parts->n0[p + 1]; c += NB, i++) {
            small_block *blk = &s->blocks[s->n_blocks++];
            blk->c0 = c;
            blk->cols = (int)(parts->n0[p + 1] - c < NB ? parts->n0[p + 1] - c : NB);
            blk->woff = parts->off[p] + (size_t)(i * stride);
        }
    }
    return s;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "gelu_poly.h"

#include <immintrin.h>

#define SMALL_AVX512 __attribute__((target("avx512f,fma")))
#define SMALL_INLINE __attribute__((always_inline)) inline

/* rb rows' sums for kc rows of one chunk: acc (rb x 64 floats) in and
 * out, or from 0 when first. pf: weights PF_NEAR rows ahead of w to
 * prefetch along (and PF_FAR rows ahead when far), or NULL.
 * Called with a constant rb, so that the sums are registers. */
SMALL_AVX512 static SMALL_INLINE void tile_chunk(const float *a, int64_t lda, const float *w,
                                                 int64_t kc, const int rb, float *acc,
                                                 bool first, const float *pf, bool far)
{
    __m512 s[RT][4];
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < 4; v++)
            s[i][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + i * NB + v * 16);
    for (int64_t kk = 0; kk < kc; kk++) {
        const float *wr = w + kk * NB;
        if (pf) {
            _mm_prefetch((const char *)(pf + kk * NB), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + kk * NB + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + kk * NB + 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + kk * NB + 48), _MM_HINT_T0);
            if (far) {
                const char *p2 = (const char *)(pf + (PF_FAR - PF_NEAR + kk) * NB);
                _mm_prefetch(p2, _MM_HINT_T1);
                _mm_prefetch(p2 + 64, _MM_HINT_T1);
                _mm_prefetch(p2 + 128, _MM_HINT_T1);
                _mm_prefetch(p2 + 192, _MM_HINT_T1);
            }
        }
        const __m512 w0 = _mm512_loadu_ps(wr), w1 = _mm512_loadu_ps(wr + 16);
        const __m512 w2 = _mm512_loadu_ps(wr + 32), w3 = _mm512_loadu_ps(wr + 48);
        for (int i = 0; i < rb; i++) {
            const __m512 x = _mm512_set1_ps(a[i * lda + kk]);
            s[i][0] = _mm512_fmadd_ps(x, w0, s[i][0]);
            s[i][1] = _mm512_fmadd_ps(x, w1, s[i][1]);
            s[i][2] = _mm512_fmadd_ps(x, w2, s[i][2]);
            s[i][3] = _mm512_fmadd_ps(x, w3, s[i][3]);
        }
    }
    for (int i = 0; i < rb; i++)
        for (int v = 0; v < 4; v++)
            _mm512_storeu_ps(acc + i * NB + v * 16, s[i][v]);
}

SMALL_AVX512 static void tile_dispatch(const float *a, int64_t lda, const float *w, int64_t kc,
                                       int rb, float *acc, bool first, const float *pf,
                                       bool far)
{
    switch (rb) {
    case 1: tile_chunk(a, lda, w, kc, 1, acc, first, pf, far); break;
    case 2: tile_chunk(a, lda, w, kc, 2, acc, first, pf, far); break;
    case 3: tile_chunk(a, lda, w, kc, 3, acc, first, pf, far); break;
    case 4: tile_chunk(a, lda, w, kc, 4, acc, first, pf, far); break;
    case 5: tile_chunk(a, lda, w, kc, 5, acc, first, pf, far); break;
    default: tile_chunk(a, lda, w, kc, RT, acc, first, pf, far); break;
    }
}

/* Y's rows for one block: sums + bias, then the activation. */
SMALL_AVX512 static void block_store(const float *acc, int64_t m, const small_block *blk,
                                     const float *bias, float *y, int64_t ldy, int act)
{
    const slim_gelu_tab16 tb = slim_gelu_load16();
    for (int v = 0; v < 4 && v * 16 < blk->cols; v++) {
        const int left = blk->cols - v * 16;
        const __mmask16 mk = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
        const __m512 b = _mm512_maskz_loadu_ps(mk, bias + blk->c0 + v * 16);
        for (int64_t i = 0; i < m; i++) {
            __m512 r = _mm512_add_ps(_mm512_loadu_ps(acc + i * NB + v * 16), b);
            if (act == SLIM_FMM_ACT_RELU)
                r = _mm512_max_ps(r, _mm512_setzero_ps());
            else if (act == SLIM_FMM_ACT_GELU_ERF)
                r = slim_gelu_poly16t(r, &tb);
            _mm512_mask_storeu_ps(y + i * ldy + blk->c0 + v * 16, mk, r);
        }
    }
}

typedef struct small_job {
    const slim__fmm_small *s;
    const float *a, *w, *bias;
    float *y;
    int64_t m;
    int act;
} small_job;

SMALL_AVX512 static void small_tasks(int64_t begin, int64_t end, void *user)
{
    const small_job *j = user;
    const slim__fmm_small *s = j->s;
    float acc[SLIM_FMM_SMALL_CAP * NB] __attribute__((aligned(64)));
    for (int64_t t = begin; t < end; t++) {
        const small_block *blk = &s->blocks[t];
        const float *w = j->w + blk->woff;
        for (int64_t k0 = 0; k0 < s->k; k0 += KC) {
            const int64_t kc = s->k - k0 < KC ? s->k - k0 : KC;
            /* Prefetch runs on into whatever follows in Wp (the next
             * block, usually this thread's next), never past its end. */
            const size_t at = blk->woff + (size_t)(k0 * NB);
            const bool near = at + (size_t)((PF_NEAR + KC) * NB) <= s->floats;
            const bool far = at + (size_t)((PF_FAR + KC) * NB) <= s->floats;
            for (int64_t r0 = 0; r0 < j->m; r0 += RT) {
                const int rb = (int)(j->m - r0 < RT ? j->m - r0 : RT);
                const float *pf = r0 == 0 && near ? w + (k0 + PF_NEAR) * NB : NULL;
                tile_dispatch(j->a + r0 * s->k + k0, s->k, w + k0 * NB, kc, rb, acc + r0 * NB,
                              k0 == 0, pf, far);
            }
        }
        block_store(acc, j->m, blk, j->bias, j->y, s->n, j->act);
    }
}

void slim__fmm_small_run(const slim__fmm_small *s, const float *a, const float *wp,
                         const float *bias, float *y, int64_t m, int act)
{
    if (m <= 0)
        return;
    small_job j = {.s = s, .a = a, .w = wp, .bias = bias, .y = y, .m = m, .act = act};
    slim_parallel_for(s->n_blocks, 1, small_tasks, &j);
}

#else

void slim__fmm_small_run(const slim__fmm_small *s, const float *a, const float *wp,
                         const float *bias, float *y, int64_t m, int act)
{
    (void)s, (void)a, (void)wp, (void)bias, (void)y, (void)m, (void)act;
}

#endif
