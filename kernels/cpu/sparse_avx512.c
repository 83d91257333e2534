/*
 * sparse_avx512.c - the sparse products' AVX-512 paths (sparse_impl.h):
 * x transposed into row blocks and each channel's chain over 64 or 16 rows
 * at once, and the few-rows paths that read x in place (csr: eight scalar
 * chains interleaved; 2:4: vectorized across 16 channels). Compiled for
 * baseline x86-64 with target attributes; sparse.c calls them only once the
 * CPU has been seen to support them. Why x is transposed, and why every
 * path gives the same bits: see sparse.c.
 */
#include "sparse_impl.h"
#include "simd_transpose.h"

#include <math.h>
#include <stdlib.h>

#ifdef SPARSE_X86
#define AVX512_TARGET __attribute__((target("avx512f,fma,f16c")))

/* Rows [r0, r0 + 16) of x (those past m as zeros) into their lanes of the
 * transposed block: dst[kk * bw + i] = x[r0 + i][kk], 16 x 16 at a time. */
AVX512_TARGET
static void transpose_rows(const float *x, int64_t ldx, int64_t k, int64_t m, int64_t r0,
                           float *dst, int64_t bw)
{
    int64_t rows = m - r0 < 16 ? m - r0 : 16;
    for (int64_t kk = 0; kk < k; kk += 16) {
        int64_t kw = k - kk < 16 ? k - kk : 16;
        __mmask16 km = (__mmask16)(kw == 16 ? 0xFFFF : (1u << kw) - 1);
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(km, x + (r0 + i) * ldx + kk)
                            : _mm512_setzero_ps();
        slim__transpose16_ps(r);
        for (int64_t j = 0; j < kw; j++)
            _mm512_store_ps(dst + (kk + j) * bw, r[j]);
    }
}

void slim__sparse_transpose_part(int64_t begin, int64_t end, void *user)
{
    const tjob *t = user;
    for (int64_t gi = begin; gi < end; gi++) {
        int64_t r0 = gi * 16;
        float *dst;
        int64_t bw;
        if (r0 < t->full_rb * RB) {
            int64_t b = r0 / RB;
            dst = t->xt + b * RB * t->k + (r0 - b * RB);
            bw = RB;
        } else {
            dst = t->xt + r0 * t->k;
            bw = 16;
        }
        transpose_rows(t->x, t->ldx, t->k, t->m, r0, dst, bw);
    }
}

/* A value as a float: in place, by kind (F16C converts float16 exactly,
 * as slim_f16_to_f32 does, so the paths agree bitwise). */
#define V_F32(p) (((const float *)ch->vals)[p])
#define V_F16(p) _cvtsh_ss(((const uint16_t *)ch->vals)[p])
#define V_BF16(p) bf16_f(((const uint16_t *)ch->vals)[p])
#define V_ANY(p) chan_val(ch, p)

/* One channel over a block of RB rows, entries [p, end) with k below k1:
 * four accumulators, IT the index type. */
#define CHAIN_RB(IT, VAL)                                                         \
    do {                                                                          \
        const IT *cc = ch->cols;                                                  \
        for (; p < ch->cnt && cc[p] < k1; p++) {                                  \
            __m512 v = _mm512_set1_ps(VAL(p));                                    \
            const float *xr = xt + (int64_t)cc[p] * RB;                           \
            a0 = _mm512_fmadd_ps(v, _mm512_load_ps(xr), a0);                      \
            a1 = _mm512_fmadd_ps(v, _mm512_load_ps(xr + 16), a1);                 \
            a2 = _mm512_fmadd_ps(v, _mm512_load_ps(xr + 32), a2);                 \
            a3 = _mm512_fmadd_ps(v, _mm512_load_ps(xr + 48), a3);                 \
        }                                                                         \
    } while (0)
#define CHAIN_16(IT, VAL)                                                         \
    do {                                                                          \
        const IT *cc = ch->cols;                                                  \
        for (int64_t p = 0; p < ch->cnt; p++)                                     \
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(VAL(p)),                          \
                                 _mm512_load_ps(xt + (int64_t)cc[p] * 16), a0);   \
    } while (0)

/* The same for float32 2:4 read in place: entries p, p + 1 are group p / 2,
 * their k's decoded from its nibble as they are used. */
#define CHAIN24_RB(VAL)                                                           \
    do {                                                                          \
        for (; p < ch->cnt && 2 * p < k1; p += 2) {                               \
            int nb = nib_of(ch->nib, p >> 1);                                     \
            const float *xg = xt + 2 * p * RB;                                    \
            const float *x0 = xg + (nb & 3) * RB, *x1 = xg + (nb >> 2) * RB;      \
            __m512 v = _mm512_set1_ps(VAL(p));                                    \
            a0 = _mm512_fmadd_ps(v, _mm512_load_ps(x0), a0);                      \
            a1 = _mm512_fmadd_ps(v, _mm512_load_ps(x0 + 16), a1);                 \
            a2 = _mm512_fmadd_ps(v, _mm512_load_ps(x0 + 32), a2);                 \
            a3 = _mm512_fmadd_ps(v, _mm512_load_ps(x0 + 48), a3);                 \
            v = _mm512_set1_ps(VAL(p + 1));                                       \
            a0 = _mm512_fmadd_ps(v, _mm512_load_ps(x1), a0);                      \
            a1 = _mm512_fmadd_ps(v, _mm512_load_ps(x1 + 16), a1);                 \
            a2 = _mm512_fmadd_ps(v, _mm512_load_ps(x1 + 32), a2);                 \
            a3 = _mm512_fmadd_ps(v, _mm512_load_ps(x1 + 48), a3);                 \
        }                                                                         \
    } while (0)

/* Blocks of 16 rows (fewer than 64 rows left, or a csr batch of 4 to 15
 * rows padded to 16): one accumulator per channel, so a lone channel's
 * chain waits on each fused multiply-add's latency (4 cycles). Up to four
 * channels run side by side instead, each its own chain in its own stored
 * order (the result is the same bitwise), over their common length; each
 * channel's rest then runs alone. Single chains had made a 90% pruned MLP
 * at batch 8 4.5x slower than dense; four in flight, 0.4-0.5x. */
#define VF32(ch, p) (((const float *)(ch)->vals)[p])
#define VF16(ch, p) _cvtsh_ss(((const uint16_t *)(ch)->vals)[p])
#define VBF16(ch, p) bf16_f(((const uint16_t *)(ch)->vals)[p])
#define COL_U16(ch, p) (((const uint16_t *)(ch)->cols)[p])
#define COL_I32(ch, p) (((const int32_t *)(ch)->cols)[p])
#define COL_24(ch, p)                                                             \
    (4 * ((p) >> 1) + (((p) & 1) ? nib_of((ch)->nib, (p) >> 1) >> 2                \
                                 : nib_of((ch)->nib, (p) >> 1) & 3))
#define FMA16(a, ch, p)                                                           \
    a = _mm512_fmadd_ps(_mm512_set1_ps(VAL(ch, p)),                               \
                        _mm512_load_ps(xt + (int64_t)COL(ch, p) * 16), a)

typedef void (*chains16_fn)(const chan *chs, int g, const float *xt, float *tile);

#define CHAINS16(NAME)                                                            \
    AVX512_TARGET                                                                 \
    static void NAME(const chan *chs, int g, const float *xt, float *tile)        \
    {                                                                             \
        __m512 acc[4];                                                            \
        for (int q = 0; q < 4; q++)                                               \
            acc[q] = _mm512_setzero_ps();                                         \
        int64_t common = 0;                                                       \
        if (g == 4) {                                                             \
            const chan *c0 = &chs[0], *c1 = &chs[1], *c2 = &chs[2], *c3 = &chs[3]; \
            __m512 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];            \
            common = c0->cnt;                                                     \
            for (int q = 1; q < 4; q++)                                           \
                common = chs[q].cnt < common ? chs[q].cnt : common;               \
            for (int64_t p = 0; p < common; p++) {                                \
                FMA16(a0, c0, p);                                                 \
                FMA16(a1, c1, p);                                                 \
                FMA16(a2, c2, p);                                                 \
                FMA16(a3, c3, p);                                                 \
            }                                                                     \
            acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;                   \
        }                                                                         \
        for (int q = 0; q < g; q++) {                                             \
            const chan *ch = &chs[q];                                             \
            __m512 a = acc[q];                                                    \
            for (int64_t p = common; p < ch->cnt; p++)                            \
                FMA16(a, ch, p);                                                  \
            _mm512_store_ps(tile + q * RB, a);                                    \
        }                                                                         \
    }

#define COL COL_U16
#define VAL VF32
CHAINS16(ch16_u16_f32)
#undef VAL
#define VAL VF16
CHAINS16(ch16_u16_f16)
#undef VAL
#define VAL VBF16
CHAINS16(ch16_u16_bf16)
#undef VAL
#undef COL
#define COL COL_I32
#define VAL VF32
CHAINS16(ch16_i32_f32)
#undef VAL
#define VAL VF16
CHAINS16(ch16_i32_f16)
#undef VAL
#define VAL VBF16
CHAINS16(ch16_i32_bf16)
#undef VAL
#undef COL
#define COL COL_24
#define VAL VF32
CHAINS16(ch16_24_f32)
#undef VAL
#define VAL VF16
CHAINS16(ch16_24_f16)
#undef VAL
#define VAL VBF16
CHAINS16(ch16_24_bf16)
#undef VAL
#undef COL

/* csr batches of 1 to 3 rows read x in place: padded to 16 lanes, a K = 784
 * block of transposed x is 50 KiB, past L1, and each entry loads a whole
 * line of it for one useful float (a 90% pruned MLP at batch 1 still took
 * 1.5x its dense time that way). A row of x stays in L1 instead, and eight
 * channels' scalar chains run side by side (each its own chain in its own
 * stored order: the same bits as every other path), so their fused
 * multiply-adds overlap instead of waiting on each other's latency. */
#define FMA1(a, ch, p) a = fmaf(VAL(ch, p), x[COL(ch, p)], a)
#define G1 8

typedef void (*chains1_fn)(const chan *chs, int g, const float *x, float *out);

#define CHAINS1(NAME)                                                             \
    AVX512_TARGET                                                                 \
    static void NAME(const chan *chs, int g, const float *x, float *out)          \
    {                                                                             \
        float acc[G1] = {0};                                                      \
        int64_t common = 0;                                                       \
        if (g == G1) {                                                            \
            const chan *c0 = &chs[0], *c1 = &chs[1], *c2 = &chs[2], *c3 = &chs[3]; \
            const chan *c4 = &chs[4], *c5 = &chs[5], *c6 = &chs[6], *c7 = &chs[7]; \
            float a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;  \
            common = c0->cnt;                                                     \
            for (int q = 1; q < G1; q++)                                          \
                common = chs[q].cnt < common ? chs[q].cnt : common;               \
            for (int64_t p = 0; p < common; p++) {                                \
                FMA1(a0, c0, p);                                                  \
                FMA1(a1, c1, p);                                                  \
                FMA1(a2, c2, p);                                                  \
                FMA1(a3, c3, p);                                                  \
                FMA1(a4, c4, p);                                                  \
                FMA1(a5, c5, p);                                                  \
                FMA1(a6, c6, p);                                                  \
                FMA1(a7, c7, p);                                                  \
            }                                                                     \
            acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;                   \
            acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;                   \
        }                                                                         \
        for (int q = 0; q < g; q++) {                                             \
            const chan *ch = &chs[q];                                             \
            float a = acc[q];                                                     \
            for (int64_t p = common; p < ch->cnt; p++)                            \
                FMA1(a, ch, p);                                                   \
            out[q] = a;                                                           \
        }                                                                         \
    }

#define COL COL_U16
#define VAL VF32
CHAINS1(ch1_u16_f32)
#undef VAL
#define VAL VF16
CHAINS1(ch1_u16_f16)
#undef VAL
#define VAL VBF16
CHAINS1(ch1_u16_bf16)
#undef VAL
#undef COL
#define COL COL_I32
#define VAL VF32
CHAINS1(ch1_i32_f32)
#undef VAL
#define VAL VF16
CHAINS1(ch1_i32_f16)
#undef VAL
#define VAL VBF16
CHAINS1(ch1_i32_bf16)
#undef VAL
#undef COL
/* [csr u16, csr int32][float32, float16, bfloat16]; 2:4 has rows_small_24 */
static const chains1_fn chains1[2][3] = {
    {ch1_u16_f32, ch1_u16_f16, ch1_u16_bf16},
    {ch1_i32_f32, ch1_i32_f16, ch1_i32_bf16},
};

#define AVX512BW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* 2:4 below SMALL_M24 rows, vectorized across the block's channels: lane c is
 * channel c's chain in stored order (the same bits as every path). Entry p
 * of every channel lies in the same group of 4 k's, so x is no gather: its
 * 4 floats broadcast to the four 128-bit lanes, and vpermps picks each
 * channel's one by its 2-bit code. The values of 16 entries of the 16
 * channels are loaded and transposed in registers; the codes of 8 groups
 * are one 32-bit word per channel, shifted per step. (The csr chains keep
 * the scalar form: gathering x at their k's measured twice as slow.)
 *
 * A lane's chain is two dependent fused multiply-adds per group, so one
 * row through one block waits on the FMA latency: nb blocks (up to 4, for
 * 1-2 rows) go side by side, 8 groups of each in turn, and their chains
 * overlap. Each chain keeps its order, so no bit changes. */
AVX512BW_TARGET __attribute__((always_inline))
static inline void rows_24(const job *jb, const block24 *bl, int nb, int64_t k, int64_t groups,
                           int vk, int64_t r0, int64_t m)
{
    const float *x0 = jb->x + r0 * jb->ldx;
    __m512 acc[4][RC24];
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < RC24; i++)
            acc[b][i] = _mm512_setzero_ps();
    const __m512i three = _mm512_set1_epi32(3);
    for (int64_t g0 = 0; g0 < groups; g0 += 8) {
        int gs = groups - g0 < 8 ? (int)(groups - g0) : 8;
        __mmask16 mk = (__mmask16)((1u << (2 * gs)) - 1);
        for (int b = 0; b < nb; b++) {
            const chan *chs = bl[b].chs;
            _Alignas(64) uint32_t cw[16] = {0};
            __m512 v[16];
            for (int64_t c = 0; c < 16; c++) {
                if (c >= bl[b].nc) {
                    v[c] = _mm512_setzero_ps();
                    continue;
                }
                memcpy(&cw[c], chs[c].nib + g0 / 2, (size_t)(gs + 1) / 2);
                const void *vp = chs[c].vals;
                if (vk == 0)
                    v[c] = _mm512_maskz_loadu_ps(mk, (const float *)vp + 2 * g0);
                else {
                    __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)vp + 2 * g0);
                    v[c] = vk == 1 ? _mm512_cvtph_ps(h)
                                   : _mm512_castsi512_ps(
                                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                }
            }
            slim__transpose16_ps(v);
            __m512i codes = _mm512_load_si512(cw);
            for (int q = 0; q < gs; q++) {
                int64_t kk = 4 * (g0 + q);
                __mmask8 xm = (__mmask8)(k - kk >= 4 ? 0xF : (1u << (k - kk)) - 1);
                __m512i c0 = _mm512_and_si512(_mm512_srli_epi32(codes, 4 * q), three);
                __m512i c1 = _mm512_and_si512(_mm512_srli_epi32(codes, 4 * q + 2), three);
                for (int64_t i = 0; i < m; i++) {
                    __m512 xb =
                        _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(xm, x0 + i * jb->ldx + kk));
                    acc[b][i] =
                        _mm512_fmadd_ps(v[2 * q], _mm512_permutexvar_ps(c0, xb), acc[b][i]);
                    acc[b][i] =
                        _mm512_fmadd_ps(v[2 * q + 1], _mm512_permutexvar_ps(c1, xb), acc[b][i]);
                }
            }
        }
    }
    for (int b = 0; b < nb; b++) {
        int64_t j0 = bl[b].j0, nc = bl[b].nc;
        __mmask16 cm = (__mmask16)(nc >= 16 ? 0xFFFF : (1u << nc) - 1);
        for (int64_t i = 0; i < m; i++) {
            __m512 o = jb->w->bias
                           ? _mm512_add_ps(acc[b][i], _mm512_maskz_loadu_ps(cm, jb->w->bias + j0))
                           : acc[b][i];
            _mm512_mask_storeu_ps(jb->y + (r0 + i) * jb->ldy + j0, cm, o);
        }
    }
}

/* nb blocks (1-4) of channels, all rows: 4 blocks side by side for 1-2
 * rows, 2 for 3-4, one block for more (its rows' chains overlap already). */
AVX512BW_TARGET
void slim__sparse_rows_small_24(const job *jb, const block24 *bl, int nb)
{
    int64_t k = jb->w->k, groups = slim_sparse_24_groups(k), m = jb->m;
    int vk = bl[0].chs[0].vk;
    int per = m <= 2 ? 4 : m <= 4 ? 2 : 1;
    for (int b = 0; b < nb;) {
        int n = nb - b < per ? nb - b : per;
        if (n == 3) /* 2, then 1 */
            n = 2;
        for (int64_t r0 = 0; r0 < m; r0 += RC24) {
            int64_t rows = m - r0 < RC24 ? m - r0 : RC24;
            if (n == 4)
                rows_24(jb, bl + b, 4, k, groups, vk, r0, rows);
            else if (n == 2)
                rows_24(jb, bl + b, 2, k, groups, vk, r0, rows);
            else
                rows_24(jb, bl + b, 1, k, groups, vk, r0, rows);
        }
        b += n;
    }
}

/* csr rows of x in place (batches below SMALL_M), channels [j0, j0 + nc). */
void slim__sparse_rows_small(const job *jb, int64_t j0, int64_t nc, const chan *chs)
{
    chains1_fn fn = chains1[chs[0].narrow ? 0 : 1][chs[0].vk];
    const float *bias = jb->w->bias;
    for (int64_t i = 0; i < jb->m; i++) {
        float *y = jb->y + i * jb->ldy + j0;
        for (int64_t c = 0; c < nc; c += G1) {
            int g = nc - c < G1 ? (int)(nc - c) : G1;
            float out[G1];
            fn(chs + c, g, jb->x + i * jb->ldx, out);
            for (int q = 0; q < g; q++)
                y[c + q] = bias ? out[q] + bias[j0 + c + q] : out[q];
        }
    }
}

/* [csr u16, csr int32, 2:4][float32, float16, bfloat16] */
static const chains16_fn chains16[3][3] = {
    {ch16_u16_f32, ch16_u16_f16, ch16_u16_bf16},
    {ch16_i32_f32, ch16_i32_f16, ch16_i32_bf16},
    {ch16_24_f32, ch16_24_f16, ch16_24_bf16},
};

/* K is walked in chunks of KC for blocks of RB rows: a chunk of transposed
 * x (KC x RB floats, 128 KiB) stays in L2 while every channel of the block
 * goes over it, where a whole K = 3072 block (768 KiB) fell out of it. The
 * accumulators wait in the tile between chunks, so each output's chain of
 * fused multiply-adds keeps its order: the result is bitwise the same.
 * KC is a multiple of 4, so a 2:4 group never straddles two chunks.
 * 2:4 reads every group of x, so its chunk is cut to 128 k's (32 KiB, about
 * L1): at 1024 x 3072 x 768 that measured 0.80x the time of 512 (1.19x the
 * dense product instead of 1.48x), at 1024 x 768 x 3072 the same; 64 k's
 * was 1.5x slower (the sums go back to the tile every chunk). A 90% csr
 * channel has too few entries in a short chunk for that to pay. */
#define KC 512
#define KC24 128

/* Channels [j0, j0 + nc) over one x block of bw (64 or 16) rows from r0:
 * tile[c][bw] per channel, then transposed into y. */
AVX512_TARGET
void slim__sparse_block_avx512(const job *jb, int64_t j0, int64_t nc, const chan *chs, int64_t r0,
                               int64_t bw, const float *xt, float *tile)
{
    if (bw == RB) {
        int64_t pos[CB] = {0};
        int64_t kc = chs[0].nib ? KC24 : KC;
        for (int64_t k0 = 0; k0 < jb->w->k; k0 += kc) {
            int64_t k1 = k0 + kc;
            for (int64_t c = 0; c < nc; c++) {
                const chan *ch = &chs[c];
                float *t = tile + c * RB;
                __m512 a0, a1, a2, a3;
                if (k0 == 0) {
                    a0 = a1 = a2 = a3 = _mm512_setzero_ps();
                } else {
                    a0 = _mm512_load_ps(t);
                    a1 = _mm512_load_ps(t + 16);
                    a2 = _mm512_load_ps(t + 32);
                    a3 = _mm512_load_ps(t + 48);
                }
                int64_t p = pos[c];
                if (ch->nib) {
                    if (ch->vk == 0)
                        CHAIN24_RB(V_F32);
                    else if (ch->vk == 1)
                        CHAIN24_RB(V_F16);
                    else
                        CHAIN24_RB(V_BF16);
                } else if (ch->narrow) {
                    if (ch->vk == 0)
                        CHAIN_RB(uint16_t, V_F32);
                    else if (ch->vk == 1)
                        CHAIN_RB(uint16_t, V_F16);
                    else
                        CHAIN_RB(uint16_t, V_BF16);
                } else {
                    if (ch->vk == 0)
                        CHAIN_RB(int32_t, V_F32);
                    else if (ch->vk == 1)
                        CHAIN_RB(int32_t, V_F16);
                    else
                        CHAIN_RB(int32_t, V_BF16);
                }
                pos[c] = p;
                _mm512_store_ps(t, a0);
                _mm512_store_ps(t + 16, a1);
                _mm512_store_ps(t + 32, a2);
                _mm512_store_ps(t + 48, a3);
            }
        }
    } else {
        for (int64_t c = 0; c < nc; c += 4) {
            int g = nc - c < 4 ? (int)(nc - c) : 4;
            chains16[chs[0].nib ? 2 : chs[0].narrow ? 0 : 1][chs[0].vk](chs + c, g, xt,
                                                                       tile + c * RB);
        }
    }
    __mmask16 cmask = (__mmask16)(nc >= 16 ? 0xFFFF : (1u << nc) - 1);
    __m512 bias = jb->w->bias ? _mm512_maskz_loadu_ps(cmask, jb->w->bias + j0)
                              : _mm512_setzero_ps();
    for (int64_t g = 0; g < bw; g += 16) {
        __m512 r[16];
        for (int c = 0; c < 16; c++)
            r[c] = c < nc ? _mm512_load_ps(tile + c * RB + g) : _mm512_setzero_ps();
        slim__transpose16_ps(r);
        for (int i = 0; i < 16 && r0 + g + i < jb->m; i++) {
            __m512 o = jb->w->bias ? _mm512_add_ps(r[i], bias) : r[i];
            _mm512_mask_storeu_ps(jb->y + (r0 + g + i) * jb->ldy + j0, cmask, o);
        }
    }
}
#else
/* ISO C wants a declaration in every translation unit. */
typedef int slim__sparse_avx512_unused;
#endif
