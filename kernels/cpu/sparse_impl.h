/*
 * sparse_impl.h - inside the sparse products: what the driver (sparse.c)
 * and the AVX-512 paths (sparse_avx512.c) share: the blockings, one
 * channel's entries read in place, the job, and the AVX-512 entries.
 *
 * The AVX-512 entries run only where slim_sparse_get_isa() says
 * SLIM_SPARSE_ISA_AVX512; each computes the same chains as the portable
 * path (sparse.c), so every path gives the same bits.
 */
#ifndef SLIM_SPARSE_IMPL_H
#define SLIM_SPARSE_IMPL_H

#include "sparse.h"

#include "kernel.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SPARSE_X86 1
#include <immintrin.h>
#endif

#define CB 16   /* channels per block: one 16 x 16 transpose wide */
#define RB 64   /* rows per full x block: four zmm accumulators */
#define SMALL_M 4 /* fewer rows read x in place (rows_small), more go transposed */
#define SMALL_M24 16 /* the same for 2:4 (rows_small_24, in chunks of RC24 rows) */
#define RC24 8

/* ---- one channel's entries ----------------------------------------------- */

/* One channel's entries, read in place: values (float32, float16 or
 * bfloat16, converted as used: exact, so every path sees the same floats)
 * and their k's (csr indices, or 2:4 nibbles decoded as used). Decoding a
 * channel into a scratch list per tile had cost more than its products:
 * 2:4 at 1.3-2.3x the dense time, half values 1.8-3x their float32 time. */
typedef struct {
    const void *cols;
    bool narrow;          /* csr: cols are u16, else int32 */
    const uint8_t *nib;   /* 2:4: the channel's codes (cols unused) */
    const void *vals;
    int vk;               /* 0 float32, 1 float16, 2 bfloat16 */
    int64_t cnt;
} chan;

static inline float bf16_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float chan_val(const chan *ch, int64_t p)
{
    switch (ch->vk) {
    case 0: return ((const float *)ch->vals)[p];
    case 1: return slim_f16_to_f32(((const uint16_t *)ch->vals)[p]);
    default: return bf16_f(((const uint16_t *)ch->vals)[p]);
    }
}

static inline int nib_of(const uint8_t *nib, int64_t g)
{
    return nib[g >> 1] >> (4 * (g & 1)) & 15;
}

static inline int64_t chan_col(const chan *ch, int64_t p)
{
    if (ch->nib) {
        int nb = nib_of(ch->nib, p >> 1);
        return 4 * (p >> 1) + ((p & 1) ? nb >> 2 : nb & 3);
    }
    return ch->narrow ? ((const uint16_t *)ch->cols)[p] : ((const int32_t *)ch->cols)[p];
}

/* One call's product, as every path reads it. */
typedef struct {
    const slim_sparse_w *w;
    int64_t m, ldx, ldy;
    const float *x;   /* rows as given */
    const float *xt;  /* transposed blocks (AVX-512 path) */
    float *y;
} job;

#ifdef SPARSE_X86
/* Rows of x transposed into blocks (slim_parallel_for's part over 16-row
 * groups): RB-row blocks first (full_rb of them), then 16-row ones. */
typedef struct {
    const float *x;
    int64_t ldx, k, m, full_rb;
    float *xt;
} tjob;

void slim__sparse_transpose_part(int64_t begin, int64_t end, void *user);

/* A block of channels [j0, j0 + nc) and their entries. */
typedef struct {
    int64_t j0, nc;
    const chan *chs;
} block24;

/* 2:4 below SMALL_M24 rows: nb blocks (1-4) of channels, all rows. */
void slim__sparse_rows_small_24(const job *jb, const block24 *bl, int nb);
/* csr rows of x in place (batches below SMALL_M), channels [j0, j0 + nc). */
void slim__sparse_rows_small(const job *jb, int64_t j0, int64_t nc, const chan *chs);
/* Channels [j0, j0 + nc) over one transposed x block of bw (64 or 16) rows
 * from r0: tile[c][bw] per channel, then transposed into y. */
void slim__sparse_block_avx512(const job *jb, int64_t j0, int64_t nc, const chan *chs, int64_t r0,
                               int64_t bw, const float *xt, float *tile);
#endif

#endif
