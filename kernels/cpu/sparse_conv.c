/*
 * sparse_conv.c - 2-D convolutions with sparse weights (see sparse.h).
 *
 * The product is the SparseMatMul kernel's idea turned on its side: the
 * input goes in as [k][pixels], k = (input channel, ky, kx) of one group,
 * so each stored weight is one broadcast and fused multiply-adds over a
 * block of PB contiguous output pixels. A 1x1 conv with stride 1 and no
 * pads reads x in place (its channels are already [k][pixels]); any other
 * conv builds an im2col tile of the block first, K rows of PB floats, in
 * scratch from the allocator. Time then falls with the number of stored
 * entries, which is what pruning buys.
 *
 * Work is cut in items (image, group, pixel block, channel chunk); an item
 * never spans two images, and every output is one chain
 *   acc = fma(v_p, x[k_p], acc) over its channel's entries in stored order,
 * from 0, then + bias, + residual, then Relu, on every path (AVX-512 lanes,
 * portable C). So an image's result is bitwise the same alone or in any
 * batch, and the paths agree bitwise. Channel chunks exist only to give
 * the second thread work when an image has few pixel blocks (ResNet's 7x7
 * stage has one): each chunk rebuilds its tile, so they are as few as
 * keep the threads busy.
 */
#include "sparse.h"

#include "kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SPARSE_CONV_X86 1
#include <immintrin.h>
#endif

#define PB 64 /* output pixels per block: four 16-wide accumulators */

typedef struct {
    const slim_sparse_conv *c;
    const float *x, *res;
    float *y;
    int64_t mg, kg;          /* output channels and k's per group */
    int64_t n_pb, n_cc, cc;  /* pixel blocks, channel chunks and their size */
    bool direct;             /* 1x1, stride 1, no pads: x read in place */
    bool avx512;
    _Atomic int oom;
} job;

/* Channel j's entries: csr in place; 2:4 decoded from its nibbles as read. */
static void chain_c(const slim_sparse_w *w, int64_t j, const float *xb, int64_t ld,
                    float *acc)
{
    for (int p = 0; p < PB; p++)
        acc[p] = 0.0f;
    const float *vals = w->values;
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k);
        const uint8_t *nib = (const uint8_t *)w->idx + j * slim_sparse_24_idx_bytes(w->k);
        vals += j * 2 * groups;
        for (int64_t gr = 0; gr < groups; gr++) {
            int code = nib[gr >> 1] >> (4 * (gr & 1));
            const float *r0 = xb + (4 * gr + (code & 3)) * ld;
            const float *r1 = xb + (4 * gr + ((code >> 2) & 3)) * ld;
            float v0 = vals[2 * gr], v1 = vals[2 * gr + 1];
            for (int p = 0; p < PB; p++)
                acc[p] = fmaf(v1, r1[p], fmaf(v0, r0[p], acc[p]));
        }
        return;
    }
    int64_t b = w->rowptr[j], e = w->rowptr[j + 1];
    for (int64_t q = b; q < e; q++) {
        int64_t k = w->idtype == SLIM_U16 ? ((const uint16_t *)w->idx)[q]
                                          : ((const int32_t *)w->idx)[q];
        const float *r = xb + k * ld;
        float v = vals[q];
        for (int p = 0; p < PB; p++)
            acc[p] = fmaf(v, r[p], acc[p]);
    }
}

#ifdef SPARSE_CONV_X86
#define AVX512_TARGET __attribute__((target("avx512f,fma")))

AVX512_TARGET static inline void fma4(float v, const float *r, __m512 *a)
{
    __m512 b = _mm512_set1_ps(v);
    a[0] = _mm512_fmadd_ps(b, _mm512_loadu_ps(r), a[0]);
    a[1] = _mm512_fmadd_ps(b, _mm512_loadu_ps(r + 16), a[1]);
    a[2] = _mm512_fmadd_ps(b, _mm512_loadu_ps(r + 32), a[2]);
    a[3] = _mm512_fmadd_ps(b, _mm512_loadu_ps(r + 48), a[3]);
}

AVX512_TARGET static void chain_avx512(const slim_sparse_w *w, int64_t j, const float *xb,
                                       int64_t ld, float *acc)
{
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    const float *vals = w->values;
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k);
        const uint8_t *nib = (const uint8_t *)w->idx + j * slim_sparse_24_idx_bytes(w->k);
        vals += j * 2 * groups;
        for (int64_t gr = 0; gr < groups; gr++) {
            int code = nib[gr >> 1] >> (4 * (gr & 1));
            fma4(vals[2 * gr], xb + (4 * gr + (code & 3)) * ld, a);
            fma4(vals[2 * gr + 1], xb + (4 * gr + ((code >> 2) & 3)) * ld, a);
        }
    } else {
        int64_t b = w->rowptr[j], e = w->rowptr[j + 1];
        if (w->idtype == SLIM_U16) {
            const uint16_t *ix = w->idx;
            for (int64_t q = b; q < e; q++)
                fma4(vals[q], xb + ix[q] * ld, a);
        } else {
            const int32_t *ix = w->idx;
            for (int64_t q = b; q < e; q++)
                fma4(vals[q], xb + (int64_t)ix[q] * ld, a);
        }
    }
    for (int i = 0; i < 4; i++)
        _mm512_storeu_ps(acc + 16 * i, a[i]);
}
#endif

/* Rows k = (ci, ky, kx) of group gi's tile for output pixels p0 .. p0+np-1,
 * zero where the window falls in the padding or past np. A run of pixels
 * in one output row reads one input row: with stride 1 a memcpy. */
static void im2col(const job *jb, const float *xg, int64_t p0, int64_t np, float *tile)
{
    const slim_sparse_conv *c = jb->c;
    int64_t cg = c->c / c->group;
    for (int64_t ci = 0; ci < cg; ci++) {
        const float *xc = xg + ci * c->h * c->wd;
        for (int64_t ky = 0; ky < c->kh; ky++)
            for (int64_t kx = 0; kx < c->kw; kx++) {
                float *row = tile + ((ci * c->kh + ky) * c->kw + kx) * PB;
                int64_t p = 0;
                while (p < np) {
                    int64_t oy = (p0 + p) / c->ow, ox0 = (p0 + p) % c->ow;
                    int64_t run = c->ow - ox0 < np - p ? c->ow - ox0 : np - p;
                    int64_t iy = oy * c->sh - c->pt + ky * c->dh;
                    float *o = row + p;
                    if (iy < 0 || iy >= c->h) {
                        memset(o, 0, sizeof(float) * (size_t)run);
                    } else {
                        const float *xr = xc + iy * c->wd;
                        int64_t ix = ox0 * c->sw - c->pl + kx * c->dw;
                        /* the t in [lo, hi) land inside the row */
                        int64_t lo, hi;
                        slim_window_range(ix, c->sw, run, c->wd, &lo, &hi);
                        if (hi <= lo)
                            lo = hi = run;
                        memset(o, 0, sizeof(float) * (size_t)lo);
                        if (c->sw == 1)
                            memcpy(o + lo, xr + ix + lo, sizeof(float) * (size_t)(hi - lo));
                        else
                            for (int64_t t = lo; t < hi; t++)
                                o[t] = xr[ix + t * c->sw];
                        memset(o + hi, 0, sizeof(float) * (size_t)(run - hi));
                    }
                    p += run;
                }
                if (np < PB)
                    memset(row + np, 0, sizeof(float) * (size_t)(PB - np));
            }
    }
}

static void part(int64_t begin, int64_t end, void *user)
{
    job *jb = user;
    const slim_sparse_conv *c = jb->c;
    const slim_sparse_w *w = &c->w;
    int64_t hw = c->h * c->wd, ohw = c->oh * c->ow;
    float *tile = NULL;
    if (!jb->direct || ohw % PB) {
        tile = slim_scratch_malloc(sizeof(float) * (size_t)(jb->kg * PB));
        if (!tile) {
            atomic_store(&jb->oom, 1);
            return;
        }
    }
    _Alignas(64) float acc[PB];
    for (int64_t item = begin; item < end; item++) {
        int64_t cc = item % jb->n_cc, rest = item / jb->n_cc;
        int64_t pb = rest % jb->n_pb;
        rest /= jb->n_pb;
        int64_t gi = rest % c->group, img = rest / c->group;
        int64_t p0 = pb * PB, np = ohw - p0 < PB ? ohw - p0 : PB;
        const float *xg = jb->x + (img * c->c + gi * (c->c / c->group)) * hw;
        const float *xb;
        int64_t ld;
        if (jb->direct && np == PB) {
            xb = xg + p0;
            ld = hw;
        } else {
            im2col(jb, xg, p0, np, tile);
            xb = tile;
            ld = PB;
        }
        int64_t j0 = gi * jb->mg + cc * jb->cc;
        int64_t j1 = j0 + jb->cc < (gi + 1) * jb->mg ? j0 + jb->cc : (gi + 1) * jb->mg;
        for (int64_t j = j0; j < j1; j++) {
#ifdef SPARSE_CONV_X86
            if (jb->avx512)
                chain_avx512(w, j, xb, ld, acc);
            else
#endif
                chain_c(w, j, xb, ld, acc);
            size_t off = (size_t)((img * w->n + j) * ohw + p0);
            float bias = w->bias ? w->bias[j] : 0.0f;
            const float *r = jb->res ? jb->res + off : NULL;
            float *o = jb->y + off;
            for (int64_t p = 0; p < np; p++) {
                float v = w->bias ? acc[p] + bias : acc[p];
                if (r)
                    v += r[p];
                o[p] = c->act == 1 ? (v > 0.0f ? v : 0.0f) : v;
            }
        }
    }
    slim_scratch_free(tile);
}

slim_status slim_sparse_conv_run(const slim_sparse_conv *c, int64_t batch, const float *x,
                                 const float *res, float *y, slim_err *err)
{
    int64_t ohw = c->oh * c->ow;
    if (batch <= 0 || ohw <= 0 || c->w.n <= 0)
        return SLIM_OK;
    job jb = {.c = c, .x = x, .res = res, .y = y, .mg = c->w.n / c->group, .kg = c->w.k};
    jb.direct = c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 && c->pt == 0 &&
                c->pl == 0 && c->oh == c->h && c->ow == c->wd;
    jb.avx512 = slim_sparse_get_isa() == SLIM_SPARSE_ISA_AVX512;
    jb.n_pb = (ohw + PB - 1) / PB;
    /* Channel chunks of at least 16 only when images x groups x pixel
     * blocks leave the threads short of two items each. */
    int64_t items0 = batch * c->group * jb.n_pb, want = 2 * (int64_t)slim_num_threads();
    jb.n_cc = 1;
    if (items0 < want) {
        jb.n_cc = (want + items0 - 1) / items0;
        int64_t most = (jb.mg + 15) / 16;
        if (jb.n_cc > most)
            jb.n_cc = most;
    }
    jb.cc = (jb.mg + jb.n_cc - 1) / jb.n_cc;
    jb.n_cc = (jb.mg + jb.cc - 1) / jb.cc;
    int64_t nnz = c->w.enc == SLIM_SPARSE_24 ? c->w.n * 2 * slim_sparse_24_groups(c->w.k)
                                             : c->w.rowptr[c->w.n];
    int64_t per_item = nnz / (c->w.n ? c->w.n : 1) * jb.cc * PB + jb.kg * PB + 1;
    slim_parallel_for(items0 * jb.n_cc, 1 + 65536 / per_item, part, &jb);
    if (atomic_load(&jb.oom))
        return slim_scratch_oom(err);
    return SLIM_OK;
}
