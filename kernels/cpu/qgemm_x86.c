/*
 * qgemm_x86.c - the int8 product's x86 panels (qgemm_panel.h): AVX-512
 * VNNI (with the sparse entries' sums and, on full panels, the AMX tiles
 * of qgemm_amx.c) and AVX2. Compiled for baseline x86-64: each function
 * carries its target attribute and is called only once qgemm.c's path
 * selection has seen the CPU support it. Both compute the exact int32
 * sums and the epilogue of qgemm.c's portable path, so they agree with it
 * bit for bit.
 */
#include "qgemm_panel.h"
#include "gelu_poly.h"

#include <string.h>

#ifdef QGEMM_X86
AVX512_TARGET __attribute__((always_inline))
static inline __m512 act_avx512(__m512 y, slim_qgemm_act act)
{
    if (act == SLIM_QGEMM_ACT_RELU)
        return _mm512_max_ps(y, _mm512_setzero_ps());
    return act == SLIM_QGEMM_ACT_GELU ? slim_gelu_poly16(y) : y;
}

/* The sparse entries' part of the epilogue: ys[i] + the sums
 * slim__qgemm_sparse_sums left in y (y + acc, slim__qgemm_sparse_rows_c's
 * last step). */
AVX512_TARGET __attribute__((always_inline))
static inline void sparse_add(const slim_qgemm_args *a, int mr, int64_t r, int64_t c,
                              __mmask16 mk, __m512 *ys)
{
    for (int i = 0; i < mr; i++)
        ys[i] = _mm512_add_ps(ys[i], _mm512_maskz_loadu_ps(mk, a->y + (r + i) * a->ldy + c));
}

/* The epilogue of mr rows x nv vectors of int32 sums (accs[i * 64 + v *
 * 16 ..], rows r.., panel p): zero-point correction, scales and bias, the
 * outlier channels' side product (outlier_tile's operations, here while
 * the outputs are in registers: no second pass over y), the activation.
 * Each converted outlier weight vector serves all mr rows. */
AVX512_TARGET __attribute__((always_inline))
static inline void vnni_epilogue(const qgemm_job *j, int mr, int nv, int64_t r, int64_t p,
                                 const int32_t *accs)
{
    const slim_qgemm_args *a = j->a;
    int64_t n0 = p * SLIM_QGEMM_PANEL;
    __m512 zero = _mm512_setzero_ps();
    for (int v = 0; v < nv; v++) {
        int64_t c = n0 + v * 16;
        if (c >= a->n)
            break;
        __mmask16 mk = a->n - c >= 16 ? 0xFFFF : (__mmask16)((1u << (a->n - c)) - 1);
        __m512i cs = _mm512_maskz_loadu_epi32(mk, a->colsum + c);
        if (a->y_i32) {
            for (int i = 0; i < mr; i++)
                _mm512_mask_storeu_epi32(
                    a->y_i32 + (r + i) * a->ldy + c, mk,
                    _mm512_sub_epi32(_mm512_load_si512(accs + i * 64 + v * 16),
                                     _mm512_mullo_epi32(_mm512_set1_epi32(j->zx[r + i]), cs)));
            continue;
        }
        __m512 sw = _mm512_maskz_loadu_ps(mk, a->w_scale + c);
        __m512 bias = a->bias ? _mm512_maskz_loadu_ps(mk, a->bias + c) : zero;
        /* Named accumulators and the operands in locals: with an array
         * GCC stored all six to the stack on every o. */
        __m512 o0 = zero, o1 = zero, o2 = zero, o3 = zero, o4 = zero, o5 = zero;
        bool outl = a->n_outl > 0;
        if (outl) {
            /* From the gathered copy when there is one: read from x, each
             * of a tile's rows x outliers is its own cache line, which
             * for a 1024 x 3072 x that no longer sits in cache cost a
             * third of the product's time. */
            int64_t n = a->n, no = a->n_outl;
            const float *x0 = j->xo ? j->xo + r * no : a->x + r * a->ldx;
            const int64_t *idx = j->xo ? NULL : a->outl_idx;
            int64_t ld = j->xo ? no : a->ldx;
            const int8_t *q = a->outl_q + c;
            for (int64_t o = 0; o < no; o++) {
                __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, q)));
                const float *xo = x0 + (idx ? idx[o] : o);
                q += n;
                o0 = _mm512_fmadd_ps(_mm512_set1_ps(xo[0]), w, o0);
                if (mr > 1)
                    o1 = _mm512_fmadd_ps(_mm512_set1_ps(xo[ld]), w, o1);
                if (mr > 2)
                    o2 = _mm512_fmadd_ps(_mm512_set1_ps(xo[2 * ld]), w, o2);
                if (mr > 3)
                    o3 = _mm512_fmadd_ps(_mm512_set1_ps(xo[3 * ld]), w, o3);
                if (mr > 4)
                    o4 = _mm512_fmadd_ps(_mm512_set1_ps(xo[4 * ld]), w, o4);
                if (mr > 5)
                    o5 = _mm512_fmadd_ps(_mm512_set1_ps(xo[5 * ld]), w, o5);
            }
        }
        __m512 oacc[WIDE_MR] = {o0, o1, o2, o3, o4, o5};
        __m512 osc = outl ? _mm512_maskz_loadu_ps(mk, a->outl_scale + c) : zero;
        __m512 ys[WIDE_MR];
        for (int i = 0; i < mr; i++) {
            __m512i t = _mm512_sub_epi32(_mm512_load_si512(accs + i * 64 + v * 16),
                                         _mm512_mullo_epi32(_mm512_set1_epi32(j->zx[r + i]), cs));
            __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t),
                                       _mm512_mul_ps(_mm512_set1_ps(j->sx[r + i]), sw), bias);
            ys[i] = outl ? _mm512_fmadd_ps(oacc[i], osc, y) : y;
        }
        if (a->n_sp > 0)
            sparse_add(a, mr, r, c, mk, ys);
        /* The activation two rows at a time: Gelu is a chain of ~16
         * dependent operations, and two side by side fill the pipes. */
        int i = 0;
        for (; i + 1 < mr; i += 2) {
            __m512 g0 = act_avx512(ys[i], a->act), g1 = act_avx512(ys[i + 1], a->act);
            _mm512_mask_storeu_ps(a->y + (r + i) * a->ldy + c, mk, g0);
            _mm512_mask_storeu_ps(a->y + (r + i + 1) * a->ldy + c, mk, g1);
        }
        if (i < mr)
            _mm512_mask_storeu_ps(a->y + (r + i) * a->ldy + c, mk, act_avx512(ys[i], a->act));
    }
}

/* mr rows x nv vectors of 16 channels, k4 / 4 steps of vpdpbusd (panels
 * narrower than 64 channels; wide_loop below takes the full ones). */
AVX512_TARGET __attribute__((always_inline))
static inline void micro_vnni(const qgemm_job *j, int mr, int nv, int64_t r, int64_t p,
                              const int8_t *b)
{
    __m512i acc[MR_MAX][4];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_setzero_si512();
    const uint8_t *x = j->qx + r * j->k4;
    int64_t groups = j->k4 / 4, row_bytes = (int64_t)nv * 64;
    for (int64_t g = 0; g < groups; g++) {
        __m512i w[4];
        for (int v = 0; v < nv; v++)
            w[v] = _mm512_loadu_si512(b + g * row_bytes + v * 64);
        for (int i = 0; i < mr; i++) {
            int32_t quad;
            memcpy(&quad, x + i * j->k4 + g * 4, 4);
            __m512i xv = _mm512_set1_epi32(quad);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], xv, w[v]);
        }
    }
    _Alignas(64) int32_t accs[MR_MAX * SLIM_QGEMM_PANEL];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            _mm512_store_si512(accs + i * 64 + v * 16, acc[i][v]);
    vnni_epilogue(j, mr, nv, r, p, accs);
}

#define MICRO_CASE(MR, NV) \
    case (MR) * 8 + (NV): micro_vnni(j, MR, NV, r, p, b); break;
#define MICRO_ROW(MR) MICRO_CASE(MR, 1) MICRO_CASE(MR, 2) MICRO_CASE(MR, 3) MICRO_CASE(MR, 4)

/* The full-width panels' loop, 6 rows x 64 channels: 24 accumulators, 4
 * weight vectors and one row broadcast, 31 of the 32 registers. Written
 * out with one named variable per accumulator: with micro_vnni's
 * acc[i][v] arrays GCC 12 copied every accumulator through a second
 * register (and one through the stack) on each k step, 33 extra moves per
 * 16 vpdpbusd, which is what held the 4-row kernel to about half of the
 * vpdpbusd rate. The sums go to acc (exact int32, so any blocking gives
 * the same) for the epilogue. */
#define WIDE_ZERO(i) \
    __m512i a##i##0 = _mm512_setzero_si512(), a##i##1 = a##i##0, a##i##2 = a##i##0, \
            a##i##3 = a##i##0;
#define WIDE_STEP(i)                                                                  \
    if ((i) < mr) {                                                                   \
        int32_t quad;                                                                 \
        memcpy(&quad, x + (i) * k4 + g * 4, 4);                                       \
        __m512i xv = _mm512_set1_epi32(quad);                                         \
        a##i##0 = _mm512_dpbusd_epi32(a##i##0, xv, w0);                               \
        a##i##1 = _mm512_dpbusd_epi32(a##i##1, xv, w1);                               \
        a##i##2 = _mm512_dpbusd_epi32(a##i##2, xv, w2);                               \
        a##i##3 = _mm512_dpbusd_epi32(a##i##3, xv, w3);                               \
    }
#define WIDE_STORE(i)                                                                 \
    if ((i) < mr) {                                                                   \
        _mm512_store_si512(acc + (i) * 64, a##i##0);                                  \
        _mm512_store_si512(acc + (i) * 64 + 16, a##i##1);                             \
        _mm512_store_si512(acc + (i) * 64 + 32, a##i##2);                             \
        _mm512_store_si512(acc + (i) * 64 + 48, a##i##3);                             \
    }

AVX512_TARGET __attribute__((always_inline))
static inline void wide_loop(const uint8_t *x, int64_t k4, const int8_t *b, int mr, int32_t *acc)
{
    WIDE_ZERO(0) WIDE_ZERO(1) WIDE_ZERO(2) WIDE_ZERO(3) WIDE_ZERO(4) WIDE_ZERO(5)
    for (int64_t g = 0; g < k4 / 4; g++, b += 4 * SLIM_QGEMM_PANEL) {
        __m512i w0 = _mm512_loadu_si512(b), w1 = _mm512_loadu_si512(b + 64),
                w2 = _mm512_loadu_si512(b + 128), w3 = _mm512_loadu_si512(b + 192);
        WIDE_STEP(0) WIDE_STEP(1) WIDE_STEP(2) WIDE_STEP(3) WIDE_STEP(4) WIDE_STEP(5)
    }
    WIDE_STORE(0) WIDE_STORE(1) WIDE_STORE(2) WIDE_STORE(3) WIDE_STORE(4) WIDE_STORE(5)
}
#undef WIDE_ZERO
#undef WIDE_STEP
#undef WIDE_STORE

/* One copy of the loop and epilogue per row count, each with its
 * registers to itself. */
#define WIDE_FN(MR)                                                                   \
    AVX512_TARGET __attribute__((noinline)) static void wide_tile_##MR(              \
        const qgemm_job *j, int64_t r, int64_t p, const int8_t *b)                    \
    {                                                                                 \
        _Alignas(64) int32_t accs[WIDE_MR * SLIM_QGEMM_PANEL];                        \
        wide_loop(j->qx + r * j->k4, j->k4, b, MR, accs);                             \
        vnni_epilogue(j, MR, 4, r, p, accs);                                          \
    }
WIDE_FN(1) WIDE_FN(2) WIDE_FN(3) WIDE_FN(4) WIDE_FN(5) WIDE_FN(6)
#undef WIDE_FN

/* 16 or 32 rows of a full panel on AMX tiles, then vnni_epilogue in row
 * groups of at most WIDE_MR (its register arrays' size). */
AVX512_TARGET __attribute__((noinline)) static void amx_rows(const qgemm_job *j, int64_t r,
                                                             int rows, int64_t p,
                                                             const int8_t *b)
{
    _Alignas(64) int32_t accs[32 * SLIM_QGEMM_PANEL];
    if (rows == 32)
        slim__qgemm_amx_tile32(j->qx + r * j->k4, j->k4, b, accs);
    else
        slim__qgemm_amx_tile16(j->qx + r * j->k4, j->k4, b, accs);
    for (int i = 0; i < rows; i += 16) {
        const int32_t *ai = accs + i * SLIM_QGEMM_PANEL;
        vnni_epilogue(j, 6, 4, r + i, p, ai);
        vnni_epilogue(j, 6, 4, r + i + 6, p, ai + 6 * SLIM_QGEMM_PANEL);
        vnni_epilogue(j, 4, 4, r + i + 12, p, ai + 12 * SLIM_QGEMM_PANEL);
    }
}

AVX512_TARGET
void slim__qgemm_panel_vnni(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    int nv = (int)(slim__qgemm_panel_width(j->n16, p) / 16);
    const int8_t *b = j->a->packed + p * SLIM_QGEMM_PANEL * j->k4;
    if (nv == 4) {
        for (; j->amx && r1 - r0 >= 16; r0 += r1 - r0 >= 32 ? 32 : 16)
            amx_rows(j, r0, r1 - r0 >= 32 ? 32 : 16, p, b);
        for (int64_t r = r0; r < r1; r += WIDE_MR) {
            switch (r1 - r < WIDE_MR ? (int)(r1 - r) : WIDE_MR) {
            case 1: wide_tile_1(j, r, p, b); break;
            case 2: wide_tile_2(j, r, p, b); break;
            case 3: wide_tile_3(j, r, p, b); break;
            case 4: wide_tile_4(j, r, p, b); break;
            case 5: wide_tile_5(j, r, p, b); break;
            default: wide_tile_6(j, r, p, b); break;
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; r += MR_MAX) {
        int mr = r1 - r < MR_MAX ? (int)(r1 - r) : MR_MAX;
        switch (mr * 8 + nv) {
            MICRO_ROW(1) MICRO_ROW(2) MICRO_ROW(3) MICRO_ROW(4)
        default: break;
        }
    }
}
#undef MICRO_ROW
#undef MICRO_CASE

/* AVX2 has no u8 x s8 dot product that cannot saturate (vpmaddubsw sums
 * pairs into int16, and 2 * 255 * 127 does not fit), so both operands are
 * widened to int16 and multiplied with vpmaddwd, which is exact: per 8
 * channels x 4 k's, two registers of (channel, pair of k) partial sums,
 * folded pairwise at the end. Rows two at a time, 16 channels (two
 * 8-channel halves) per step: 8 accumulators, 4 weight registers. */
AVX2_TARGET __attribute__((always_inline))
static inline void micro_avx2(const qgemm_job *j, int mr, int64_t r, int64_t p, int64_t c0,
                              const int8_t *b, int64_t w)
{
    const slim_qgemm_args *a = j->a;
    /* Named accumulators: as acc[2][4] GCC copied them through other
     * registers and the stack on every k step (as in the VNNI loop). */
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a02 = a00, a03 = a00;
    __m256i a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    const uint8_t *x = j->qx + r * j->k4;
    int64_t groups = j->k4 / 4, k4 = j->k4;
    const int8_t *bg = b + c0 * 4; /* 16 channels x 4 bytes per group */
    for (int64_t g = 0; g < groups; g++, bg += w * 4) {
        __m256i w8a = _mm256_loadu_si256((const __m256i *)bg);
        __m256i w8b = _mm256_loadu_si256((const __m256i *)(bg + 32));
        __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w8a));      /* channels 0-3 */
        __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w8a, 1)); /* 4-7 */
        __m256i w2 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w8b));      /* 8-11 */
        __m256i w3 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w8b, 1)); /* 12-15 */
        int32_t quad;
        memcpy(&quad, x + g * 4, 4);
        __m256i xv = _mm256_cvtepu8_epi16(_mm_set1_epi32(quad));
        a00 = _mm256_add_epi32(a00, _mm256_madd_epi16(xv, w0));
        a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(xv, w1));
        a02 = _mm256_add_epi32(a02, _mm256_madd_epi16(xv, w2));
        a03 = _mm256_add_epi32(a03, _mm256_madd_epi16(xv, w3));
        if (mr > 1) {
            memcpy(&quad, x + k4 + g * 4, 4);
            xv = _mm256_cvtepu8_epi16(_mm_set1_epi32(quad));
            a10 = _mm256_add_epi32(a10, _mm256_madd_epi16(xv, w0));
            a11 = _mm256_add_epi32(a11, _mm256_madd_epi16(xv, w1));
            a12 = _mm256_add_epi32(a12, _mm256_madd_epi16(xv, w2));
            a13 = _mm256_add_epi32(a13, _mm256_madd_epi16(xv, w3));
        }
    }
    __m256i acc[2][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}};
    int64_t n0 = p * SLIM_QGEMM_PANEL + c0;
    for (int i = 0; i < mr; i++) {
        int32_t sums[16];
        for (int h = 0; h < 4; h += 2) {
            /* hadd folds each channel's two pair sums; its lane order is
             * (a0 a1 b0 b1 | a2 a3 b2 b3), put right by the permute. */
            __m256i s = _mm256_hadd_epi32(acc[i][h], acc[i][h + 1]);
            s = _mm256_permute4x64_epi64(s, 0xD8);
            _mm256_storeu_si256((__m256i *)(sums + h * 4), s);
        }
        for (int c = 0; c < 16 && n0 + c < a->n; c++)
            store_c(j, r + i, n0 + c, sums[c]);
    }
}

AVX2_TARGET
void slim__qgemm_panel_avx2(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    int64_t w = slim__qgemm_panel_width(j->n16, p);
    const int8_t *b = j->a->packed + p * SLIM_QGEMM_PANEL * j->k4;
    for (int64_t c0 = 0; c0 < w && p * SLIM_QGEMM_PANEL + c0 < j->a->n; c0 += 16)
        for (int64_t r = r0; r < r1; r += 2) {
            if (r1 - r >= 2)
                micro_avx2(j, 2, r, p, c0, b, w);
            else
                micro_avx2(j, 1, r, p, c0, b, w);
        }
}
#else
/* ISO C wants a declaration in every translation unit. */
typedef int slim__qgemm_x86_unused;
#endif
