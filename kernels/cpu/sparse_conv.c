/*
 * sparse_conv.c - 2-D convolutions with sparse weights (see sparse.h).
 *
 * The product is the SparseMatMul kernel's idea turned on its side: the
 * input goes in as [k][pixels], k = (input channel, ky, kx) of one group,
 * so each stored weight is one broadcast and fused multiply-adds over a
 * block of PB (or PB_WIDE, see block_width) contiguous output pixels. A
 * 1x1 conv with stride 1 and no pads reads x in place (its channels are
 * already [k][pixels]); any other conv reads phase planes of x, copied
 * once per image (see phase_part), in which every row k is contiguous too. Time then falls with the number of
 * stored entries, which is what pruning buys.
 *
 * Work is cut in items (image, group, pixel block, channel chunk); an item
 * never spans two images, and every output is one chain
 *   acc = fma(v_p, x[k_p], acc) over its channel's entries in stored order,
 * from 0, then + bias, + residual, then the activation, on every path
 * (AVX-512 lanes, portable C). So an image's result is bitwise the same
 * alone or in any batch, and the paths agree bitwise. Channel chunks exist
 * only to give the second thread work when an image has few pixel blocks
 * (ResNet's 7x7 stage has one).
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
/* The wide block, eight accumulators, for kxk convs whose chunk of rows
 * still fits L1 (see block_width). */
#define PB_WIDE 128

#define KC 256 /* k's per chunk (see do_item) */
#define KC1 128 /* the same for most 1x1 convs (see slim_sparse_conv_run) */

typedef struct {
    const slim_sparse_conv *c;
    const float *x;          /* the input */
    const float *xp;         /* x, or its phase planes (below) */
    const float *res;
    float *y;
    int64_t mg, kg;          /* output channels and k's per group */
    int64_t hq, wq, nq;      /* plane height, width; wide pixels OH x wq */
    int64_t per_ig;          /* floats of xp per (image, group) */
    const int64_t *off;      /* row k of a block: its base + off[k] */
    const int64_t *toff;     /* the same in a tail tile: (k % kc) * pb */
    int64_t n_pb, n_cc, cc;  /* pixel blocks, channel chunks and their size */
    int64_t kc;              /* k's per chunk: KC, or KC1 for 1x1 convs */
    int64_t pb;              /* output pixels per block: PB or PB_WIDE */
    bool direct;             /* 1x1, stride 1, no pads: x read in place */
    uint64_t used;           /* bit a * sw + b: a tap reads phase (a, b) (sh * sw <= 64) */
    bool avx512;
    _Atomic int oom;
} job;

/* Where a channel's walk stands: the next csr entry, or the next 2:4 group. */
typedef struct {
    int64_t q, end;
} cursor;

static inline int64_t csr_k(const slim_sparse_w *w, int64_t q)
{
    return w->idtype == SLIM_U16 ? ((const uint16_t *)w->idx)[q] : ((const int32_t *)w->idx)[q];
}

#define INLINE static inline __attribute__((always_inline))

/* Stored value q as a float: float32 as it is, an int8 code exactly (its
 * channel's scale comes in the epilogue). Inlined with i8 a constant, so
 * each path below is compiled once per value type. */
INLINE float val_at(const void *v, int64_t q, bool i8)
{
    return i8 ? (float)((const int8_t *)v)[q] : ((const float *)v)[q];
}

/* Channel j's entries with k below k1, from its cursor on, into acc[pb]
 * (from 0 when first); row k of x is xb + off[k]. The entries of a row are
 * in increasing k (slim_sparse_check refuses any other order), so walking the chunks in order
 * walks them in stored order: one chain however K is cut. */
static void chunk_c(const slim_sparse_w *w, int64_t j, cursor *cu, int64_t k1, const float *xb,
                    const int64_t *off, float *acc, bool first, int pb)
{
    if (first)
        for (int p = 0; p < pb; p++)
            acc[p] = 0.0f;
    const void *vals = w->values;
    bool i8 = w->vdtype == SLIM_I8;
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k);
        const uint8_t *nib = (const uint8_t *)w->idx + j * slim_sparse_24_idx_bytes(w->k);
        int64_t vb = j * 2 * groups;
        for (; cu->q < cu->end && 4 * cu->q < k1; cu->q++) {
            int64_t gr = cu->q;
            int code = nib[gr >> 1] >> (4 * (gr & 1));
            const float *r0 = xb + off[4 * gr + (code & 3)];
            const float *r1 = xb + off[4 * gr + ((code >> 2) & 3)];
            float v0 = val_at(vals, vb + 2 * gr, i8), v1 = val_at(vals, vb + 2 * gr + 1, i8);
            for (int p = 0; p < pb; p++)
                acc[p] = fmaf(v1, r1[p], fmaf(v0, r0[p], acc[p]));
        }
        return;
    }
    for (; cu->q < cu->end; cu->q++) {
        int64_t k = csr_k(w, cu->q);
        if (k >= k1)
            break;
        const float *r = xb + off[k];
        float v = val_at(vals, cu->q, i8);
        for (int p = 0; p < pb; p++)
            acc[p] = fmaf(v, r[p], acc[p]);
    }
}

#ifdef SPARSE_CONV_X86
#define AVX512_TARGET __attribute__((target("avx512f,fma")))

/* One entry: v broadcast, times the block's pixels of its row (nv
 * vectors of 16, nv a constant where the bodies below are inlined), into
 * a0..a7. A macro over named accumulators, not a helper over an array:
 * GCC kept an array of __m512 on the stack, a store and a reload per
 * multiply-add, which had made each entry cost 15-20 cycles instead of
 * about 4. */
#define FMA4X(a, v, r)                                                      \
    do {                                                                    \
        __m512 b_ = _mm512_set1_ps(v);                                      \
        const float *r_ = (r);                                              \
        a##0 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_), a##0);              \
        if (nv > 1)                                                         \
            a##1 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 16), a##1);     \
        if (nv > 2)                                                         \
            a##2 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 32), a##2);     \
        if (nv > 3)                                                         \
            a##3 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 48), a##3);     \
        if (nv > 4)                                                         \
            a##4 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 64), a##4);     \
        if (nv > 5)                                                         \
            a##5 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 80), a##5);     \
        if (nv > 6)                                                         \
            a##6 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 96), a##6);     \
        if (nv > 7)                                                         \
            a##7 = _mm512_fmadd_ps(b_, _mm512_loadu_ps(r_ + 112), a##7);    \
    } while (0)
#define FMA4(v, r) FMA4X(a, v, r)

/* The accumulators a0..a7 from acc (the sums so far) or 0, and back. */
#define ACC_LOAD(a, acc)                                                     \
    do {                                                                     \
        a##0 = _mm512_setzero_ps(), a##1 = a##0, a##2 = a##0, a##3 = a##0;   \
        a##4 = a##0, a##5 = a##0, a##6 = a##0, a##7 = a##0;                  \
        if (!first) {                                                        \
            a##0 = _mm512_loadu_ps(acc);                                     \
            if (nv > 1)                                                      \
                a##1 = _mm512_loadu_ps((acc) + 16);                          \
            if (nv > 2)                                                      \
                a##2 = _mm512_loadu_ps((acc) + 32);                          \
            if (nv > 3)                                                      \
                a##3 = _mm512_loadu_ps((acc) + 48);                          \
            if (nv > 4)                                                      \
                a##4 = _mm512_loadu_ps((acc) + 64);                          \
            if (nv > 5)                                                      \
                a##5 = _mm512_loadu_ps((acc) + 80);                          \
            if (nv > 6)                                                      \
                a##6 = _mm512_loadu_ps((acc) + 96);                          \
            if (nv > 7)                                                      \
                a##7 = _mm512_loadu_ps((acc) + 112);                         \
        }                                                                    \
    } while (0)
#define ACC_STORE(a, acc)                                                    \
    do {                                                                     \
        _mm512_storeu_ps(acc, a##0);                                         \
        if (nv > 1)                                                          \
            _mm512_storeu_ps((acc) + 16, a##1);                              \
        if (nv > 2)                                                          \
            _mm512_storeu_ps((acc) + 32, a##2);                              \
        if (nv > 3)                                                          \
            _mm512_storeu_ps((acc) + 48, a##3);                              \
        if (nv > 4)                                                          \
            _mm512_storeu_ps((acc) + 64, a##4);                              \
        if (nv > 5)                                                          \
            _mm512_storeu_ps((acc) + 80, a##5);                              \
        if (nv > 6)                                                          \
            _mm512_storeu_ps((acc) + 96, a##6);                              \
        if (nv > 7)                                                          \
            _mm512_storeu_ps((acc) + 112, a##7);                             \
    } while (0)

/* chunk_c in 16-wide lanes: the same chain per pixel. */
AVX512_TARGET INLINE void chunk_avx512_body(const slim_sparse_w *w, int64_t j, cursor *cu,
                                            int64_t k1, const float *xb, const int64_t *off,
                                            float *acc, bool first, bool i8, int nv)
{
    __m512 a0, a1, a2, a3, a4, a5, a6, a7;
    ACC_LOAD(a, acc);
    const void *vals = w->values;
    if (w->enc == SLIM_SPARSE_24) {
        int64_t groups = slim_sparse_24_groups(w->k);
        const uint8_t *nib = (const uint8_t *)w->idx + j * slim_sparse_24_idx_bytes(w->k);
        int64_t vb = j * 2 * groups;
        int64_t g1 = (k1 + 3) / 4 < cu->end ? (k1 + 3) / 4 : cu->end;
        for (int64_t gr = cu->q; gr < g1; gr++) {
            int code = nib[gr >> 1] >> (4 * (gr & 1));
            const int64_t *o = off + 4 * gr;
            FMA4(val_at(vals, vb + 2 * gr, i8), xb + o[code & 3]);
            FMA4(val_at(vals, vb + 2 * gr + 1, i8), xb + o[(code >> 2) & 3]);
        }
        cu->q = g1 > cu->q ? g1 : cu->q;
    } else if (w->idtype == SLIM_U16) {
        const uint16_t *ix = w->idx;
        int64_t q = cu->q;
        for (; q < cu->end && ix[q] < k1; q++)
            FMA4(val_at(vals, q, i8), xb + off[ix[q]]);
        cu->q = q;
    } else {
        const int32_t *ix = w->idx;
        int64_t q = cu->q;
        for (; q < cu->end && ix[q] < k1; q++)
            FMA4(val_at(vals, q, i8), xb + off[ix[q]]);
        cu->q = q;
    }
    ACC_STORE(a, acc);
}
/* chunk2_avx512 for 2:4: both channels walk the same groups. */
AVX512_TARGET INLINE void chunk2_24_avx512_body(const slim_sparse_w *w, int64_t j, cursor *c0,
                                                cursor *c1, int64_t k1, const float *xb,
                                                const int64_t *off, float *acc0, float *acc1,
                                                bool first, bool i8, int nv)
{
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7;
    ACC_LOAD(a, acc0);
    ACC_LOAD(b, acc1);
    int64_t groups = slim_sparse_24_groups(w->k), ib = slim_sparse_24_idx_bytes(w->k);
    const uint8_t *n0 = (const uint8_t *)w->idx + j * ib, *n1 = n0 + ib;
    const void *vals = w->values;
    int64_t b0q = j * 2 * groups, b1q = b0q + 2 * groups;
    int64_t g1 = (k1 + 3) / 4 < c0->end ? (k1 + 3) / 4 : c0->end;
    for (int64_t gr = c0->q; gr < g1; gr++) {
        int s = 4 * (int)(gr & 1), e0 = n0[gr >> 1] >> s, e1 = n1[gr >> 1] >> s;
        const int64_t *o = off + 4 * gr;
        FMA4X(a, val_at(vals, b0q + 2 * gr, i8), xb + o[e0 & 3]);
        FMA4X(b, val_at(vals, b1q + 2 * gr, i8), xb + o[e1 & 3]);
        FMA4X(a, val_at(vals, b0q + 2 * gr + 1, i8), xb + o[(e0 >> 2) & 3]);
        FMA4X(b, val_at(vals, b1q + 2 * gr + 1, i8), xb + o[(e1 >> 2) & 3]);
    }
    c0->q = c1->q = g1 > c0->q ? g1 : c0->q;
    ACC_STORE(a, acc0);
    ACC_STORE(b, acc1);
}

/* Two channels' csr (u16) chunks side by side: each chain waits on its
 * previous fused multiply-add (4 cycles), so one channel alone keeps the
 * FMA units half idle; two interleaved fill them. Each chain keeps its own
 * order, so the result is chunk_avx512's for each. */
AVX512_TARGET INLINE void chunk2_avx512_body(const slim_sparse_w *w, cursor *c0, cursor *c1,
                                             int64_t k1, const float *xb, const int64_t *off,
                                             float *acc0, float *acc1, bool first, bool i8,
                                             int nv)
{
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7;
    ACC_LOAD(a, acc0);
    ACC_LOAD(b, acc1);
    const void *vals = w->values;
    const uint16_t *ix = w->idx;
    int64_t q0 = c0->q, q1 = c1->q;
    while (q0 < c0->end && ix[q0] < k1 && q1 < c1->end && ix[q1] < k1) {
        FMA4X(a, val_at(vals, q0, i8), xb + off[ix[q0]]);
        FMA4X(b, val_at(vals, q1, i8), xb + off[ix[q1]]);
        q0++;
        q1++;
    }
    for (; q0 < c0->end && ix[q0] < k1; q0++)
        FMA4X(a, val_at(vals, q0, i8), xb + off[ix[q0]]);
    for (; q1 < c1->end && ix[q1] < k1; q1++)
        FMA4X(b, val_at(vals, q1, i8), xb + off[ix[q1]]);
    c0->q = q0;
    c1->q = q1;
    ACC_STORE(a, acc0);
    ACC_STORE(b, acc1);
}

/* The bodies above compiled once per value type and block width: i8 and
 * nv constants, the value loads specialized, no branch in the inner
 * loops. nv = 4 (8 in PB_WIDE blocks) but in a block of fewer pixels (the
 * image's last, or ResNet's 7 x 7 planes), whose vectors past its pixels would be work
 * for nothing: a 14 x 14 1x1 conv's fourth block has 4 pixels of 64.
 * Each pixel's chain is the same whatever nv, so the results are too. */
#define BY_NV_SWITCH(call_)                                                 \
    switch (nv) {                                                           \
    case 1: { const int nvc_ = 1; call_; break; }                           \
    case 2: { const int nvc_ = 2; call_; break; }                           \
    case 3: { const int nvc_ = 3; call_; break; }                           \
    case 4: { const int nvc_ = 4; call_; break; }                           \
    case 5: { const int nvc_ = 5; call_; break; }                           \
    case 6: { const int nvc_ = 6; call_; break; }                           \
    case 7: { const int nvc_ = 7; call_; break; }                           \
    default: { const int nvc_ = 8; call_; break; }                          \
    }
#define BY_NV(call_)                                                        \
    do {                                                                    \
        if (i8) {                                                           \
            const bool i8c_ = true;                                         \
            BY_NV_SWITCH(call_)                                             \
        } else {                                                            \
            const bool i8c_ = false;                                        \
            BY_NV_SWITCH(call_)                                             \
        }                                                                   \
    } while (0)

AVX512_TARGET static void chunk_avx512(const slim_sparse_w *w, int64_t j, cursor *cu, int64_t k1,
                                       const float *xb, const int64_t *off, float *acc,
                                       bool first, int nv)
{
    bool i8 = w->vdtype == SLIM_I8;
    BY_NV(chunk_avx512_body(w, j, cu, k1, xb, off, acc, first, i8c_, nvc_));
}
AVX512_TARGET static void chunk2_24_avx512(const slim_sparse_w *w, int64_t j, cursor *c0,
                                           cursor *c1, int64_t k1, const float *xb,
                                           const int64_t *off, float *acc0, float *acc1,
                                           bool first, int nv)
{
    bool i8 = w->vdtype == SLIM_I8;
    BY_NV(chunk2_24_avx512_body(w, j, c0, c1, k1, xb, off, acc0, acc1, first, i8c_, nvc_));
}
AVX512_TARGET static void chunk2_avx512(const slim_sparse_w *w, cursor *c0, cursor *c1,
                                        int64_t k1, const float *xb, const int64_t *off,
                                        float *acc0, float *acc1, bool first, int nv)
{
    bool i8 = w->vdtype == SLIM_I8;
    BY_NV(chunk2_avx512_body(w, c0, c1, k1, xb, off, acc0, acc1, first, i8c_, nvc_));
}
#endif

/* Why phase planes and not an im2col tile per block: building a tile
 * row by row had cost more than the sparse product itself (a 64-channel
 * 3x3 conv at 56x56, 90% pruned, took longer than the dense conv), since
 * each of its K rows is a few short copies. Instead x is copied once per
 * image, zero padded and split by stride phase: plane (ci, a, b) holds
 * xpad[i * sh + a][j * sw + b]. Then tap (ky, kx) of every output pixel
 * (oy, ox) reads plane (ci, ky dh % sh, kx dw % sw) at (oy + ky dh / sh,
 * ox + kx dw / sw): over "wide" pixels q = oy * wq + ox (ox running to the
 * plane width wq, the columns past OW computed and dropped) each row k of
 * the product is contiguous, one offset off[k] from the image's planes. */
#ifdef SPARSE_CONV_X86
/* o[t] = s[2 t] for t < n, 16 at a time: the stride-2 convs' phase planes
 * (ResNet's stem and downsampling convs) had been copied one float at a
 * time, 60% of phase_part's time. Reads s[0 .. 2 n - 2] only. */
AVX512_TARGET static void copy_every2_avx512(float *o, const float *s, int64_t n)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 a = _mm512_loadu_ps(s + 2 * t);
        __m512 b = _mm512_maskz_loadu_ps(0x7fff, s + 2 * t + 16);
        _mm512_storeu_ps(o + t, _mm512_permutex2var_ps(a, even, b));
    }
    for (; t < n; t++)
        o[t] = s[2 * t];
}

/* A stride-1 plane row: o[t] = s[t] for lo <= t < hi, 0 elsewhere in
 * [0, n), 16 at a time through masked loads (which read only [lo, hi)):
 * one pass in place of a memset, a memcpy and a memset per row (a 56 x
 * 56 conv's planes are 58 rows of 58 floats a channel). */
AVX512_TARGET static void copy_row_avx512(float *o, const float *s, int64_t lo, int64_t hi,
                                          int64_t n)
{
    for (int64_t t = 0; t < n; t += 16) {
        int64_t a = lo > t ? lo - t : 0, e = hi - t < 16 ? hi - t : 16; /* valid [a, e) */
        __mmask16 m = e > a ? (__mmask16)(((1u << e) - 1) & ~((1u << a) - 1)) : 0;
        __mmask16 st = n - t >= 16 ? 0xffff : (__mmask16)((1u << (n - t)) - 1);
        _mm512_mask_storeu_ps(o + t, st, _mm512_maskz_loadu_ps(m, s + t));
    }
}
#endif

static void phase_part(int64_t begin, int64_t end, void *user)
{
    const job *jb = user;
    const slim_sparse_conv *c = jb->c;
    const float *x = jb->x;
    float *xp = (float *)jb->xp;
    int64_t plane = jb->hq * jb->wq;
    for (int64_t pc = begin; pc < end; pc++) { /* (image, channel) */
        const float *src = x + pc * c->h * c->wd;
        for (int64_t a = 0; a < c->sh; a++)
            for (int64_t b = 0; b < c->sw; b++) {
                /* A phase no tap reads is left unwritten: a 1x1 stride-2
                 * conv reads one of its four. */
                int64_t ph = a * c->sw + b;
                if (ph < 64 && !(jb->used >> ph & 1))
                    continue;
                float *dst = xp + (pc * c->sh * c->sw + a * c->sw + b) * plane;
                int64_t lo, hi; /* the columns inside the input: the same every row */
                slim_window_range(b - c->pl, c->sw, jb->wq, c->wd, &lo, &hi);
                if (hi <= lo)
                    lo = hi = jb->wq;
                for (int64_t i = 0; i < jb->hq; i++) {
                    int64_t sy = i * c->sh + a - c->pt;
                    float *o = dst + i * jb->wq;
                    if (sy < 0 || sy >= c->h) {
                        memset(o, 0, sizeof(float) * (size_t)jb->wq);
                        continue;
                    }
                    const float *sr = src + sy * c->wd + b - c->pl;
#ifdef SPARSE_CONV_X86
                    if (c->sw == 1 && jb->avx512) {
                        copy_row_avx512(o, sr, lo, hi, jb->wq);
                        continue;
                    }
#endif
                    memset(o, 0, sizeof(float) * (size_t)lo);
                    if (c->sw == 1)
                        memcpy(o + lo, sr + lo, sizeof(float) * (size_t)(hi - lo));
#ifdef SPARSE_CONV_X86
                    else if (c->sw == 2 && jb->avx512)
                        copy_every2_avx512(o + lo, sr + 2 * lo, hi - lo);
#endif
                    else
                        for (int64_t t = lo; t < hi; t++)
                            o[t] = sr[t * c->sw];
                    memset(o + hi, 0, sizeof(float) * (size_t)(jb->wq - hi));
                }
            }
    }
}

/* acc (+ bias) (+ r), then Relu, into o: the same operations per element
 * on both paths (the AVX-512 one only runs 16 at a time). With int8
 * values (sc non-NULL) acc is first scaled, fused with the bias: one
 * rounding, fma(acc, scale, bias), on both paths. */
INLINE void epilogue(const float *acc, bool has_b, float bias, const float *sc,
                     const float *r, const slim_sparse_conv *c, float *o, int64_t n)
{
    for (int64_t p = 0; p < n; p++) {
        float v = sc ? (has_b ? fmaf(acc[p], *sc, bias) : acc[p] * *sc)
                     : has_b ? acc[p] + bias : acc[p];
        if (r)
            v += r[p];
        if (c->act == 1)
            v = v > 0.0f ? v : 0.0f;
        else if (c->act == 2) {
            v = v > c->lo ? v : c->lo;
            v = v < c->hi ? v : c->hi;
        }
        o[p] = v;
    }
}

#ifdef SPARSE_CONV_X86
AVX512_TARGET INLINE void epilogue_avx512(const float *acc, bool has_b, float bias,
                                          const float *sc, const float *r,
                                          const slim_sparse_conv *c, float *o, int64_t n)
{
    __m512 b = _mm512_set1_ps(bias), z = _mm512_setzero_ps();
    __m512 s = _mm512_set1_ps(sc ? *sc : 1.0f);
    __m512 lo = _mm512_set1_ps(c->lo), hi = _mm512_set1_ps(c->hi);
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 m = n - p >= 16 ? 0xffff : (__mmask16)((1u << (n - p)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, acc + p);
        if (sc)
            v = has_b ? _mm512_fmadd_ps(v, s, b) : _mm512_mul_ps(v, s);
        else if (has_b)
            v = _mm512_add_ps(v, b);
        if (r)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r + p));
        if (c->act == 1) /* v > 0 ? v : 0, NaN to 0 as in C */
            v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, z, _CMP_GT_OQ), v);
        else if (c->act == 2) /* max(v, lo): v > lo ? v : lo; min: v < hi ? v : hi */
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        _mm512_mask_storeu_ps(o + p, m, v);
    }
}
#endif

/* Channels j0 .. j1 - 1 of a block (their sums in otile, pb apart) into y,
 * one epilogue call per run of output pixels in a row: a run ends where
 * the wide pixels pass the output width. Planes as wide as the output (1x1
 * convs, any stride) make the block one run: a 7 x 7 block had been seven
 * calls per channel, the larger part of a 1x1 conv's time there. The loop
 * is written once and compiled per path so the epilogue inlines. */
#define EPILOGUES(epi)                                                                   \
    do {                                                                                 \
        const slim_sparse_conv *c = jb->c;                                               \
        const slim_sparse_w *w = &c->w;                                                  \
        int64_t ohw = c->oh * c->ow;                                                     \
        bool flat = jb->wq == c->ow;                                                     \
        for (int64_t j = j0; j < j1; j++) {                                              \
            float bias = w->bias ? w->bias[j] : 0.0f;                                    \
            const float *sc = w->scale ? &w->scale[j] : NULL;                            \
            size_t plane = (size_t)((img * w->n + j) * ohw);                             \
            for (int64_t q = 0; q < nq;) {                                               \
                int64_t oy = (q0 + q) / jb->wq, ox = (q0 + q) % jb->wq;                  \
                int64_t run = flat || jb->wq - ox >= nq - q ? nq - q : jb->wq - ox;      \
                int64_t valid = flat ? run : ox >= c->ow ? 0                             \
                                : c->ow - ox < run ? c->ow - ox : run;                   \
                size_t at = plane + (size_t)(flat ? q0 + q : oy * c->ow + ox);           \
                epi(otile + (j - j0) * jb->pb + q, w->bias != NULL, bias, sc,                \
                    jb->res ? jb->res + at : NULL, c, jb->y + at, valid);                \
                q += run;                                                                \
            }                                                                            \
        }                                                                                \
    } while (0)

static void epilogues(const job *jb, const float *otile, int64_t img, int64_t j0, int64_t j1,
                      int64_t q0, int64_t nq)
{
    EPILOGUES(epilogue);
}

#ifdef SPARSE_CONV_X86
AVX512_TARGET static void epilogues_avx512(const job *jb, const float *otile, int64_t img,
                                           int64_t j0, int64_t j1, int64_t q0, int64_t nq)
{
    EPILOGUES(epilogue_avx512);
}
#endif

/* Why K is walked in chunks of KC: every stored weight loads its row of
 * the block, and K rows of PB floats (K = 4608 for a 512-channel 3x3
 * conv: 1.2 MB) fall out of L2; a chunk's rows stay in L1-L2 while all the
 * item's channels use them. The channels' partial sums wait in an output
 * tile between chunks (stored and reloaded exactly), which costs a chunk
 * 8 vector loads and stores per channel: with 90% zeros a chunk of 128
 * gives a channel about 13 entries to pay for them, and 256 and 512
 * measured faster than 128 (0.81 / 0.80 against 1.18 ms for 128 channels
 * 3x3 at 28x28; noisy, 2 shared cores) while a whole K (no chunks) was
 * slower (1.04 ms). */
static void do_item(job *jb, int64_t item, float *tile, float *otile, cursor *cur)
{
    const slim_sparse_conv *c = jb->c;
    const slim_sparse_w *w = &c->w;
    int64_t cc = item % jb->n_cc, rest = item / jb->n_cc;
    int64_t pb = rest % jb->n_pb;
    rest /= jb->n_pb;
    int64_t gi = rest % c->group, img = rest / c->group;
    int64_t PBJ = jb->pb, q0 = pb * PBJ, nq = jb->nq - q0 < PBJ ? jb->nq - q0 : PBJ;
    const float *xg = jb->xp + (img * c->group + gi) * jb->per_ig;
    int64_t j0 = gi * jb->mg + cc * jb->cc;
    int64_t j1 = j0 + jb->cc < (gi + 1) * jb->mg ? j0 + jb->cc : (gi + 1) * jb->mg;
    int64_t groups = slim_sparse_24_groups(w->k);
    for (int64_t j = j0; j < j1; j++)
        cur[j - j0] = w->enc == SLIM_SPARSE_24 ? (cursor){0, groups}
                                               : (cursor){w->rowptr[j], w->rowptr[j + 1]};
    /* x read in place ends with the image: its last block goes through a
     * tile so as not to read past it. */
    bool tiled = jb->direct && nq < PBJ;
    int nv = (int)((nq + 15) / 16); /* 16-wide vectors covering the block's pixels */
    (void)nv;                       /* the AVX-512 path's */
    for (int64_t k0 = 0; k0 < jb->kg; k0 += jb->kc) {
        int64_t k1 = k0 + jb->kc < jb->kg ? k0 + jb->kc : jb->kg;
        const float *xb = xg + q0;
        const int64_t *off = jb->off;
        if (tiled) {
            for (int64_t k = k0; k < k1; k++) {
                float *row = tile + (k - k0) * PBJ;
                memcpy(row, xg + jb->off[k] + q0, sizeof(float) * (size_t)nq);
                memset(row + nq, 0, sizeof(float) * (size_t)(PBJ - nq));
            }
            xb = tile;
            off = jb->toff;
        }
        int64_t j = j0;
#ifdef SPARSE_CONV_X86
        if (jb->avx512 && w->enc == SLIM_SPARSE_CSR && w->idtype == SLIM_U16)
            for (; j + 1 < j1; j += 2)
                chunk2_avx512(w, &cur[j - j0], &cur[j + 1 - j0], k1, xb, off,
                              otile + (j - j0) * PBJ, otile + (j + 1 - j0) * PBJ, k0 == 0, nv);
        else if (jb->avx512 && w->enc == SLIM_SPARSE_24)
            for (; j + 1 < j1; j += 2)
                chunk2_24_avx512(w, j, &cur[j - j0], &cur[j + 1 - j0], k1, xb, off,
                                 otile + (j - j0) * PBJ, otile + (j + 1 - j0) * PBJ, k0 == 0, nv);
#endif
        for (; j < j1; j++) {
#ifdef SPARSE_CONV_X86
            if (jb->avx512) {
                chunk_avx512(w, j, &cur[j - j0], k1, xb, off, otile + (j - j0) * PBJ, k0 == 0,
                             nv);
                continue;
            }
#endif
            chunk_c(w, j, &cur[j - j0], k1, xb, off, otile + (j - j0) * PBJ, k0 == 0, (int)PBJ);
        }
    }
#ifdef SPARSE_CONV_X86
    if (jb->avx512) {
        epilogues_avx512(jb, otile, img, j0, j1, q0, nq);
        return;
    }
#endif
    epilogues(jb, otile, img, j0, j1, q0, nq);
}

static void part(int64_t begin, int64_t end, void *user)
{
    job *jb = user;
    /* One scratch block per call: a tail tile (kc rows), the channels'
     * partial sums and their cursors. */
    size_t tile_b = sizeof(float) * (size_t)(jb->kc * jb->pb);
    size_t out_b = sizeof(float) * (size_t)(jb->cc * jb->pb);
    char *mem = slim_scratch_malloc(tile_b + out_b + sizeof(cursor) * (size_t)jb->cc);
    if (!mem) {
        atomic_store(&jb->oom, 1);
        return;
    }
    for (int64_t item = begin; item < end; item++)
        do_item(jb, item, (float *)mem, (float *)(mem + tile_b), (cursor *)(mem + tile_b + out_b));
    slim_scratch_free(mem);
}

/* Why a wider block for some convs: each stored weight costs a broadcast,
 * its index and its row's offset besides the row's loads, so 8 vectors of
 * pixels an entry share them where 4 did; every pixel's chain is the same,
 * so the results are too. Only where a chunk's rows still fit L1 (32 KB of
 * its 48, estimated: the chunk's input channels x the phases its taps read
 * x a row of the block plus the taps' reach). ResNet-18's 90% convs alone
 * against PB everywhere (min of 6-8 x 200-300 runs, 1 thread, 4 runs):
 * 3x3 stride 1 at 56, 28 and 14 0.81-0.96x (one 1.06), the 7x7 stem
 * 0.92-0.99x; with PB_WIDE for them too, 3x3 stride 2 (four phases, ~72
 * KB) had run 1.01-1.31x and 1x1 (rows that do not overlap) 0.76-1.12x, so
 * they keep PB. Planes of at most PB wide pixels (7 x 7) are one block
 * either way. */
static int64_t block_width(const slim_sparse_conv *c, const job *jb, int64_t khw)
{
    if (khw == 1 || jb->nq <= PB)
        return PB;
    int64_t kc = jb->kc < jb->kg ? jb->kc : jb->kg;
    int64_t chans = kc / khw + 1;
    int64_t phases = (c->kh < c->sh ? c->kh : c->sh) * (c->kw < c->sw ? c->kw : c->sw);
    int64_t span = PB_WIDE + (c->kh - 1) * c->dh / c->sh * jb->wq + (c->kw - 1) * c->dw / c->sw;
    return chans * phases * span * (int64_t)sizeof(float) <= 32768 ? PB_WIDE : PB;
}

slim_status slim_sparse_conv_run(const slim_sparse_conv *c, int64_t batch, const float *x,
                                 const float *res, float *y, slim_err *err)
{
    int64_t ohw = c->oh * c->ow, cg = c->c / c->group, khw = c->kh * c->kw;
    if (batch <= 0 || ohw <= 0 || c->w.n <= 0)
        return SLIM_OK;
    job jb = {.c = c, .x = x, .res = res, .y = y, .mg = c->w.n / c->group, .kg = c->w.k};
    jb.direct = khw == 1 && c->sh == 1 && c->sw == 1 && c->pt == 0 && c->pl == 0 &&
                c->oh == c->h && c->ow == c->wd;
    jb.avx512 = slim_sparse_get_isa() == SLIM_SPARSE_ISA_AVX512;
    if (jb.direct) {
        jb.hq = c->h;
        jb.wq = c->wd;
    } else { /* the planes cover every tap of every output pixel */
        jb.hq = c->oh + (c->kh - 1) * c->dh / c->sh;
        jb.wq = c->ow + (c->kw - 1) * c->dw / c->sw;
    }
    int64_t plane = jb.hq * jb.wq, phases = jb.direct ? 1 : c->sh * c->sw;
    jb.nq = c->oh * jb.wq;
    jb.per_ig = cg * phases * plane;
    /* 1x1: rows do not overlap (a 3x3 conv's nine taps of a channel are
     * shifted views of one plane, so 256 of its k's read ~21 KB), so KC
     * rows are 64 KB, past L1; 128 fit it and measured 0.89-0.95x on
     * ResNet-50's 14 x 14 1x1 convs (1 thread, same process, alternating),
     * no change at 56 x 56. Not where every block is a tail tile (7 x 7),
     * copied once per chunk: 1.06-1.15x there. */
    jb.kc = khw == 1 && jb.kg > KC1 && !(jb.direct && jb.nq < PB) ? KC1 : KC;
    jb.pb = block_width(c, &jb, khw);
    slim_tensor hold = {0};
    int64_t n_xp = jb.direct ? 0 : batch * c->c * phases * plane + jb.wq + jb.pb;
    /* offsets, then the planes (their slack: a block's wide pixels and
     * taps may run past the last plane by up to wq + pb floats, zeros) */
    char *mem = slim_scratch_alloc(&hold, 16 * jb.kg + 4 * n_xp, 1, false, err);
    if (!mem)
        return err->status ? err->status : SLIM_ENOMEM;
    int64_t *off = (int64_t *)mem, *toff = off + jb.kg;
    /* Row k = (ci, ky, kx): tap t = (ky, kx)'s place in input channel 0's
     * planes, worked out once for the khw taps, then + ci's planes. Not k
     * divided out per row: some ten integer divisions a row had been 11%
     * of a 512-channel 3x3 conv at 7 x 7 (K = 4608) at batch 1 (perf). */
    jb.used = phases > 64 ? ~(uint64_t)0 : 0;
    for (int64_t t = 0; t < khw && !jb.direct; t++) {
        int64_t ky = t / c->kw, kx = t % c->kw;
        int64_t a = ky * c->dh % c->sh, b = kx * c->dw % c->sw;
        if (a * c->sw + b < 64)
            jb.used |= (uint64_t)1 << (a * c->sw + b);
        off[t] = (a * c->sw + b) * plane + ky * c->dh / c->sh * jb.wq + kx * c->dw / c->sw;
    }
    for (int64_t k = 0; k < jb.kg && jb.direct; k++)
        off[k] = k * plane;
    for (int64_t ci = 1, k = khw; ci < jb.kg / khw && !jb.direct; ci++) /* ci 0's are the taps' */
        for (int64_t t = 0; t < khw; t++, k++)
            off[k] = ci * phases * plane + off[t];
    for (int64_t k = 0, t = 0; k < jb.kg; k++, t = t + 1 == jb.kc ? 0 : t + 1)
        toff[k] = t * jb.pb;
    jb.off = off;
    jb.toff = toff;
    if (jb.direct) {
        jb.xp = x;
    } else {
        float *xp = (float *)(toff + jb.kg);
        memset(xp + n_xp - jb.wq - jb.pb, 0, sizeof(float) * (size_t)(jb.wq + jb.pb));
        jb.xp = xp;
        slim_parallel_for(batch * c->c, 1 + 16384 / (phases * plane + 1), phase_part, &jb);
    }
    jb.n_pb = (jb.nq + jb.pb - 1) / jb.pb;
    /* Channel chunks of at least 16 only when images x groups x pixel
     * blocks leave the threads short of four items each. Four, not two:
     * a 14 x 14 plane is 4 blocks, the last of 4 pixels, so 2 threads
     * taking 2 items each left one of them idle a third of the conv. */
    int64_t items0 = batch * c->group * jb.n_pb, want = 4 * (int64_t)slim_num_threads();
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
    int64_t per_item = nnz / c->w.n * jb.cc * jb.pb + 1;
    slim_parallel_for(items0 * jb.n_cc, 1 + 65536 / per_item, part, &jb);
    slim_tensor_release(&hold);
    if (atomic_load(&jb.oom))
        return slim_scratch_oom(err);
    return SLIM_OK;
}
