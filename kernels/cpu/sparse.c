/*
 * sparse.c - matrix products with sparse weights (see sparse.h).
 *
 * Why x is transposed: a sparse weight's entries hit scattered k's, so
 * walking x row by row would gather one float per entry. With x laid out
 * [k][rows] in blocks of 64 rows, one entry (k, v) is one broadcast of v
 * and four 16-wide fused multiply-adds over 64 contiguous floats: the
 * loads are whole cache lines and the FMA units stay busy, so time falls
 * with the number of entries. Outputs come out per channel ([channel][rows])
 * and go back to [rows][channel] through 16 x 16 register transposes.
 *
 * (The AVX-512 paths are in sparse_avx512.c.)
 *
 * Small batches skip the transposition and read their rows in place: csr
 * below SMALL_M rows with eight channels' scalar chains interleaved
 * (rows_small), 2:4 below SMALL_M24 rows vectorized across 16 channels
 * (rows_small_24); the rest of a batch below 64 rows goes in 16-row
 * blocks, four channels interleaved (chains16).
 *
 * Every output is the chain acc = fma(v_p, x[k_p], acc) over its channel's
 * entries in stored order, from acc = 0, then + bias: the lanes of the
 * AVX-512 blocks, the few-rows path and the portable C path compute exactly
 * that, so they agree bitwise and no row depends on the others (the paths
 * only differ in which chains run side by side, never in a chain's order).
 */
#include "sparse_impl.h"

#include "kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- one channel's entries ----------------------------------------------- */

static void channel_view(const slim_sparse_w *w, int64_t j, chan *ch)
{
    size_t vsize = w->vdtype == SLIM_F32 ? 4 : 2;
    ch->vk = w->vdtype == SLIM_F32 ? 0 : w->vdtype == SLIM_F16 ? 1 : 2;
    ch->nib = NULL;
    ch->cols = NULL;
    ch->narrow = false;
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k);
        ch->nib = (const uint8_t *)w->idx + j * slim_sparse_24_idx_bytes(w->k);
        ch->vals = (const char *)w->values + (size_t)(j * 2 * groups) * vsize;
        ch->cnt = 2 * groups;
        return;
    }
    int64_t b = w->rowptr[j];
    ch->narrow = w->idtype == SLIM_U16;
    ch->cols = (const char *)w->idx + (size_t)b * (ch->narrow ? 2 : 4);
    ch->vals = (const char *)w->values + (size_t)b * vsize;
    ch->cnt = w->rowptr[j + 1] - b;
}

/* ---- the chain, row by row (portable C, and few rows) ------------------- */

static inline void chain_rows(const job *jb, int64_t j0, int64_t nc, const chan *chs)
{
    const float *bias = jb->w->bias;
    for (int64_t i = 0; i < jb->m; i++) {
        const float *x = jb->x + i * jb->ldx;
        float *y = jb->y + i * jb->ldy;
        for (int64_t c = 0; c < nc; c++) {
            const chan *ch = &chs[c];
            float acc = 0.0f;
            for (int64_t p = 0; p < ch->cnt; p++)
                acc = fmaf(chan_val(ch, p), x[chan_col(ch, p)], acc);
            y[j0 + c] = bias ? acc + bias[j0 + c] : acc;
        }
    }
}

static void chain_rows_c(const job *jb, int64_t j0, int64_t nc, const chan *chs)
{
    chain_rows(jb, j0, nc, chs);
}

/* ---- path selection --------------------------------------------------------- */

static _Atomic int forced_isa = SLIM_SPARSE_ISA_AUTO;

static bool isa_supported(slim_sparse_isa isa)
{
    if (isa == SLIM_SPARSE_ISA_AUTO || isa == SLIM_SPARSE_ISA_C)
        return true;
#ifdef SPARSE_X86
    if (isa == SLIM_SPARSE_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") &&
               slim_cpu_has_f16c();
#endif
    return false;
}

static slim_sparse_isa best_isa(void)
{
    static _Atomic int best = -1;
    int b = atomic_load(&best);
    if (b >= 0)
        return (slim_sparse_isa)b;
    b = isa_supported(SLIM_SPARSE_ISA_AVX512) ? SLIM_SPARSE_ISA_AVX512 : SLIM_SPARSE_ISA_C;
    const char *env = getenv("SLIM_SPARSE_ISA");
    if (env && strcmp(env, "c") == 0) /* the variable can only lower the path */
        b = SLIM_SPARSE_ISA_C;
    atomic_store(&best, b);
    return (slim_sparse_isa)b;
}

bool slim_sparse_set_isa(slim_sparse_isa isa)
{
    if (!isa_supported(isa))
        return false;
    atomic_store(&forced_isa, isa);
    return true;
}

slim_sparse_isa slim_sparse_get_isa(void)
{
    int f = atomic_load(&forced_isa);
    return f != SLIM_SPARSE_ISA_AUTO ? (slim_sparse_isa)f : best_isa();
}

/* ---- driver ---------------------------------------------------------------- */

typedef struct {
    job jb;
    slim_sparse_isa isa;
    int64_t n_cb;        /* channel blocks */
    int64_t full_rb;     /* row blocks of RB rows; 16-row blocks follow */
} run;

/* Work items: channel blocks for the portable path; (row block, channel
 * block) tiles for AVX-512, row block major so that consecutive items on a
 * thread read the same transposed x block while it is in cache. */
static void part(int64_t begin, int64_t end, void *user)
{
    run *r = user;
    const job *jb = &r->jb;
    const slim_sparse_w *w = jb->w;
    /* One tile of outputs per thread: 4 KiB, on the stack (no allocation
     * per call, nothing the allocator's accounting would miss). */
    _Alignas(64) float tile[CB * RB];
    chan chs[CB];
#ifdef SPARSE_X86
    if (r->isa == SLIM_SPARSE_ISA_AVX512 && !jb->xt && w->enc == SLIM_SPARSE_24) {
        /* Up to four channel blocks at a time (rows_small_24). */
        chan chs4[4][CB];
        block24 bl[4];
        for (int64_t item = begin; item < end;) {
            int nb = 0;
            for (; nb < 4 && item < end; nb++, item++) {
                int64_t j0 = item * CB, nc = w->n - j0 < CB ? w->n - j0 : CB;
                for (int64_t c = 0; c < nc; c++)
                    channel_view(w, j0 + c, &chs4[nb][c]);
                bl[nb] = (block24){j0, nc, chs4[nb]};
            }
            slim__sparse_rows_small_24(jb, bl, nb);
        }
        return;
    }
#endif
    for (int64_t item = begin; item < end; item++) {
        int64_t blk = jb->xt ? item % r->n_cb : item;
        int64_t j0 = blk * CB, nc = w->n - j0 < CB ? w->n - j0 : CB;
        for (int64_t c = 0; c < nc; c++)
            channel_view(w, j0 + c, &chs[c]);
#ifdef SPARSE_X86
        if (r->isa == SLIM_SPARSE_ISA_AVX512 && !jb->xt) {
            slim__sparse_rows_small(jb, j0, nc, chs);
            continue;
        }
        if (jb->xt) {
            int64_t rb = item / r->n_cb, r0, bw;
            if (rb < r->full_rb)
                r0 = rb * RB, bw = RB;
            else
                r0 = r->full_rb * RB + (rb - r->full_rb) * 16, bw = 16;
            slim__sparse_block_avx512(jb, j0, nc, chs, r0, bw, jb->xt + r0 * w->k, tile);
            continue;
        }
#endif
        (void)tile;
        chain_rows_c(jb, j0, nc, chs);
    }
}

slim_status slim_sparse_matmul(const slim_sparse_w *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, slim_err *err)
{
    if (m <= 0)
        return SLIM_OK;
    run r = {.jb = {w, m, ldx, ldy, x, NULL, y}, .isa = slim_sparse_get_isa(),
             .n_cb = (w->n + CB - 1) / CB};
    int64_t items = r.n_cb;
    slim_tensor xt = {.dtype = SLIM_F32, .ndim = 1};
#ifdef SPARSE_X86
    /* From SMALL_M rows on, x goes through the transposed blocks, 4 to 15
     * rows padded to 16 lanes: a row by row chain of scalar fused
     * multiply-adds had made a 90% pruned MLP at batch 8 6.8x slower than
     * its dense product (one entry per 4-cycle latency), and 16 padded
     * lanes still do one entry per instruction. The transposed x is
     * scratch from the allocator (64-byte aligned, counted in /metrics),
     * like the other kernels' buffers. */
    if (r.isa == SLIM_SPARSE_ISA_AVX512 &&
        m >= (w->enc == SLIM_SPARSE_24 ? SMALL_M24 : SMALL_M)) {
        int64_t padded = (m + 15) / 16 * 16;
        xt.dims[0] = padded * w->k;
        slim_status st = slim_tensor_alloc(&xt, err);
        if (st) /* the allocator's message: bytes asked, held and allowed */
            return st;
        r.full_rb = m / RB;
        int64_t n_rb = r.full_rb + (m - r.full_rb * RB + 15) / 16;
        tjob t = {x, ldx, w->k, m, r.full_rb, xt.data};
        slim_parallel_for(padded / 16, 1 + 65536 / (16 * w->k), slim__sparse_transpose_part, &t);
        r.jb.xt = xt.data;
        items = n_rb * r.n_cb;
    }
#endif
    /* Waking a second thread costs microseconds: a small layer (an MLP's
     * 3k entries at batch 1) runs on one, about 64k multiply-adds a task. */
    int64_t nnz = w->enc == SLIM_SPARSE_24 ? w->n * 2 * slim_sparse_24_groups(w->k)
                                           : w->rowptr[w->n];
    int64_t per_item = nnz / r.n_cb * (r.jb.xt ? 16 : m) + 1;
    slim_parallel_for(items, 1 + 65536 / per_item, part, &r);
    slim_tensor_release(&xt);
    return SLIM_OK;
}
