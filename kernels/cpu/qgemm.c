/*
 * qgemm.c - the int8 matrix product (qgemm.h): packing and three code
 * paths chosen at run time by CPUID (the rows' quantization is in
 * qgemm_quant.c).
 *
 * The build targets baseline x86-64, so the AVX2 and AVX-512 VNNI paths are
 * functions compiled with target attributes and only called once
 * __builtin_cpu_supports (which also checks that the OS saves the wider
 * registers) says the CPU has them. Every path computes the same exact
 * int32 sums and the same rounded float epilogue (see qgemm.h), so they
 * agree bit for bit and the C path is the oracle the tests hold them to.
 *
 * Work is one parallel region per call (see "scheduling"): the rows'
 * quantization in chunks, then (panel of 64 output channels) x (chunk of
 * rows) products, panel major, taken one by one. Exact integer sums and a
 * per-row epilogue make the result independent of who ran what, as
 * slim_parallel_for requires.
 */
#include "qgemm.h"
#include "qgemm_impl.h"
#include "gelu_poly.h"

#include "kernel.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>


/* Rows per micro-kernel call on panels narrower than 64 channels
 * (micro_vnni's accumulator arrays; with 6 rows GCC spilled them). */
#define MR_MAX 4
/* Rows per call of the full-panel loop (wide_loop: 24 named accumulators). */
#define WIDE_MR 6
#define ROW_CHUNK 24    /* rows per task: a multiple of MR_MAX and of WIDE_MR */
/* Rows per task on AMX tiles: two 16-row tiles (a task loads and releases
 * the tile configuration once); more than ROW_CHUNK, so flags_bytes holds. */
#define AMX_CHUNK 32

/* ---- path selection ------------------------------------------------------ */

static _Atomic int forced_isa = SLIM_QGEMM_AUTO;

bool slim_qgemm_isa_supported(slim_qgemm_isa isa)
{
    switch (isa) {
    case SLIM_QGEMM_AUTO:
    case SLIM_QGEMM_C:
        return true;
#ifdef QGEMM_X86
    case SLIM_QGEMM_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SLIM_QGEMM_AVX512VNNI:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
#endif
    default:
        return false;
    }
}

const char *slim_qgemm_isa_name(slim_qgemm_isa isa)
{
    switch (isa) {
    case SLIM_QGEMM_C: return "c";
    case SLIM_QGEMM_AVX2: return "avx2";
    case SLIM_QGEMM_AVX512VNNI: return "avx512vnni";
    default: return "auto";
    }
}

static slim_qgemm_isa best_isa(void)
{
    static _Atomic int best = -1;
    int b = atomic_load(&best);
    if (b >= 0)
        return (slim_qgemm_isa)b;
    b = SLIM_QGEMM_C;
    const char *env = getenv("SLIM_INT8_ISA");
    if (slim_qgemm_isa_supported(SLIM_QGEMM_AVX512VNNI))
        b = SLIM_QGEMM_AVX512VNNI;
    else if (slim_qgemm_isa_supported(SLIM_QGEMM_AVX2))
        b = SLIM_QGEMM_AVX2;
    /* The variable can only lower the path (benchmarks, bug hunts). */
    for (int i = SLIM_QGEMM_C; env && i <= SLIM_QGEMM_AVX512VNNI; i++)
        if (strcmp(env, slim_qgemm_isa_name((slim_qgemm_isa)i)) == 0 &&
            slim_qgemm_isa_supported((slim_qgemm_isa)i))
            b = i;
    atomic_store(&best, b);
    return (slim_qgemm_isa)b;
}

slim_qgemm_isa slim_qgemm_get_isa(void)
{
    int f = atomic_load(&forced_isa);
    return f != SLIM_QGEMM_AUTO ? (slim_qgemm_isa)f : best_isa();
}

bool slim_qgemm_set_isa(slim_qgemm_isa isa)
{
    if (!slim_qgemm_isa_supported(isa))
        return false;
    atomic_store(&forced_isa, (int)isa);
    return true;
}

/* ---- the product --------------------------------------------------------- */

typedef struct {
    const slim_qgemm_args *a;
    const uint8_t *qx;        /* m rows of k4 bytes */
    const float *sx;
    const int32_t *zx;
    int64_t k4, n16, panels, chunks;
    int64_t rows_per_chunk; /* ROW_CHUNK, or AMX_CHUNK on AMX tiles */
    slim_qgemm_isa isa;
    bool amx;               /* full panels' 16-row tiles on AMX (qgemm_amx.c) */
    /* The outlier channels' activations, gathered per row while it is
     * quantized (m rows of a->n_outl floats), or NULL: then read from x. */
    const float *xo;
    /* The rows' transpose for the sparse entries (qgemm_sparse.c), chunk c
     * at xt + c * xt_chunk, or NULL; sparse says whether there are any
     * (the VNNI path, float output). */
    const float *xt;
    int64_t xt_chunk;
    bool sparse;
    /* The sums with the chunk's quantization (at least 2 chunks a thread)
     * rather than per product task (few chunks: one thread would make
     * them all while the others wait). */
    bool sums_early;
} qgemm_job;

/* The epilogue's Gelu: kernels/cpu/gelu_poly.h's polynomial, whose AVX-512
 * version below computes the same operations (bitwise equal). */
float slim_qgemm_gelu(float y)
{
    return slim_gelu_poly(y);
}

static inline float act_c(float v, slim_qgemm_act act)
{
    if (act == SLIM_QGEMM_ACT_RELU)
        return v > 0 ? v : 0.0f;
    return act == SLIM_QGEMM_ACT_GELU ? slim_qgemm_gelu(v) : v;
}

/* The epilogue of one output element, as every path computes it. */
static inline float epilogue_c(int32_t acc, int32_t zx, int32_t colsum, float sx, float sw,
                               float bias, slim_qgemm_act act)
{
    int32_t t = (int32_t)((uint32_t)acc - (uint32_t)zx * (uint32_t)colsum);
    return act_c(fmaf((float)t, sx * sw, bias), act);
}

/* Output (r, n) from its int32 sum: the float epilogue, or (slim_qgemm_u8)
 * the zero-point-corrected sum itself. */
static inline void store_c(const qgemm_job *j, int64_t r, int64_t n, int32_t acc)
{
    const slim_qgemm_args *a = j->a;
    if (a->y_i32)
        a->y_i32[r * a->ldy + n] =
            (int32_t)((uint32_t)acc - (uint32_t)j->zx[r] * (uint32_t)a->colsum[n]);
    else
        a->y[r * a->ldy + n] = epilogue_c(acc, j->zx[r], a->colsum[n], j->sx[r], a->w_scale[n],
                                          a->bias ? a->bias[n] : 0.0f, a->act);
}

/* Rows [r0, r1) against panel p, the portable way. */
static void panel_c(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    const slim_qgemm_args *a = j->a;
    int64_t w = slim__qgemm_panel_width(j->n16, p), n0 = p * SLIM_QGEMM_PANEL;
    const int8_t *b = a->packed + p * SLIM_QGEMM_PANEL * j->k4;
    int32_t acc[SLIM_QGEMM_PANEL];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *x = j->qx + r * j->k4;
        memset(acc, 0, sizeof(acc));
        for (int64_t g = 0; g < j->k4 / 4; g++) {
            const int8_t *bg = b + g * w * 4;
            const uint8_t *xg = x + g * 4;
            for (int64_t c = 0; c < w; c++)
                acc[c] += xg[0] * bg[c * 4] + xg[1] * bg[c * 4 + 1] + xg[2] * bg[c * 4 + 2] +
                          xg[3] * bg[c * 4 + 3];
        }
        for (int64_t c = 0; c < w && n0 + c < a->n; c++)
            store_c(j, r, n0 + c, acc[c]);
    }
}

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
static void panel_vnni(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1)
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
static void panel_avx2(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1)
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
#endif

/* ---- scheduling ------------------------------------------------------------
 *
 * One parallel region per call. Its tasks, handed out one at a time from an
 * atomic counter in this order: quantize row chunk c (c < chunks), then the
 * products, panel-major (panel p x row chunk c), each product waiting for
 * its chunk's rows (a flag per chunk; their quantization was handed out
 * earlier, so the wait is at most one chunk's quantization). Before, three
 * slim_parallel_for calls (quantize, product, outliers) each woke the
 * workers and cut the work into the pool's 4 x threads parts, where a
 * worker waking late left the caller one part of up to 1/8 of the product
 * to finish alone; ROW_CHUNK-row tasks taken one by one balance to a task.
 * Every task computes exact integer sums and the same epilogue for its
 * rows, so the results do not depend on who ran what. */
typedef struct {
    qgemm_job j;
    const slim_qgemm_args *a;
    uint8_t *qx;              /* writable views of j's rows, when quantizing */
    float *sx;
    int32_t *zx;
    _Atomic int *ready;       /* per chunk, when quantizing; else NULL */
    float *xo;                /* writable view of j.xo */
    float *xt;                /* writable view of j.xt */
    slim__qgemm_rows_fn quantize; /* j.isa's, chosen once per call */
    atomic_llong next;
    int64_t n_tasks;
} qgemm_run;

static void run_task(qgemm_run *q, int64_t t)
{
    const qgemm_job *j = &q->j;
    int64_t chunks = j->chunks;
    if (q->ready) {
        if (t < chunks) {
            int64_t rc = j->rows_per_chunk;
            int64_t r1 = (t + 1) * rc < j->a->m ? (t + 1) * rc : j->a->m;
            const slim_qgemm_args *a = q->a;
            int64_t r0 = t * rc;
            q->quantize(a->x + r0 * a->ldx, a->ldx, r1 - r0, a->k, q->qx + r0 * j->k4, j->k4,
                        q->sx + r0, q->zx + r0);
            for (int64_t r = r0; q->xo && r < r1; r++)
                for (int64_t o = 0; o < a->n_outl; o++)
                    q->xo[r * a->n_outl + o] = a->x[r * a->ldx + a->outl_idx[o]];
            if (j->xt)
                slim__qgemm_sparse_transpose(a, r0, r1, q->xt + t * j->xt_chunk);
            /* Many chunks: the sums here, while the transpose is in cache
             * (the tasks still spread over the threads). */
            if (j->sparse && j->sums_early)
                slim__qgemm_sparse_sums(a, j->xt ? j->xt + t * j->xt_chunk : NULL, r0, r1, 0,
                                        a->n);
            atomic_store_explicit(&q->ready[t], 1, memory_order_release);
            return;
        }
        t -= chunks;
    }
    int64_t p = t / chunks, c = t % chunks;
    /* The wait is at most one chunk's quantization, unless its thread was
     * preempted (a busy machine): then give the core away rather than spin
     * through the time slice that thread needs. */
    for (int spins = 0; q->ready && !atomic_load_explicit(&q->ready[c], memory_order_acquire);
         spins++) {
        if (spins >= 2000)
            sched_yield();
#ifdef QGEMM_X86
        else
            _mm_pause();
#endif
    }
    int64_t rc = j->rows_per_chunk;
    int64_t r0 = c * rc, r1 = r0 + rc < j->a->m ? r0 + rc : j->a->m;
#ifdef QGEMM_X86
    if (j->isa == SLIM_QGEMM_AVX512VNNI) {
        if (j->sparse && !j->sums_early) {
            int64_t c0 = p * SLIM_QGEMM_PANEL, w = slim__qgemm_panel_width(j->n16, p);
            int64_t c1 = c0 + w < j->a->n ? c0 + w : j->a->n;
            slim__qgemm_sparse_sums(j->a, j->xt ? j->xt + c * j->xt_chunk : NULL, r0, r1, c0, c1);
        }
        bool tiles = j->amx && r1 - r0 >= 16 && slim__qgemm_panel_width(j->n16, p) == SLIM_QGEMM_PANEL;
        if (tiles)
            slim__qgemm_amx_begin();
        panel_vnni(j, p, r0, r1);
        if (tiles)
            slim__qgemm_amx_end();
        return;
    }
    if (j->isa == SLIM_QGEMM_AVX2) {
        panel_avx2(j, p, r0, r1);
        return;
    }
#endif
    panel_c(j, p, r0, r1);
}

static void qgemm_worker(int64_t begin, int64_t end, void *user)
{
    qgemm_run *q = user;
    (void)begin;
    (void)end;
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);
        if (t >= q->n_tasks)
            return;
        run_task(q, t);
    }
}

static size_t rows_bytes(int64_t m, int64_t k)
{
    return ((size_t)m * (size_t)slim_qgemm_k4(k) + 63) & ~(size_t)63;
}

/* Room for the gathered outlier activations: up to k / 16 + 1 a row (the
 * int8 pass takes at most k / 16; a node with more reads them from x). */
static int64_t xo_cap(int64_t k)
{
    return k / 16 + 1;
}

static size_t flags_bytes(int64_t m)
{
    size_t chunks = (size_t)((m + ROW_CHUNK - 1) / ROW_CHUNK);
    return (chunks * sizeof(_Atomic int) + 63) & ~(size_t)63;
}

size_t slim_qgemm_scratch_bytes(int64_t m, int64_t k)
{
    return rows_bytes(m, k) + (size_t)m * (sizeof(float) + sizeof(int32_t)) + flags_bytes(m) +
           (size_t)m * (size_t)xo_cap(k) * sizeof(float);
}

/* The product of a's rows: quantized here into scratch when qx is NULL,
 * else already quantized (qx, zx: slim_qgemm_u8). */
static void run_panels(const slim_qgemm_args *a, void *scratch, const uint8_t *qx,
                       const int32_t *zx)
{
    qgemm_run q = {.a = a};
    qgemm_job *j = &q.j;
    j->a = a;
    j->k4 = slim_qgemm_k4(a->k);
    j->n16 = slim_qgemm_n16(a->n);
    j->isa = slim_qgemm_get_isa();
    j->panels = j->n16 / SLIM_QGEMM_PANEL + (j->n16 % SLIM_QGEMM_PANEL != 0);
    /* AMX only pays for whole 16-row tiles of full panels. */
    j->amx = j->isa == SLIM_QGEMM_AVX512VNNI && a->m >= 16 && j->n16 >= SLIM_QGEMM_PANEL &&
             slim_qgemm_amx_active();
    j->rows_per_chunk = j->amx ? AMX_CHUNK : ROW_CHUNK;
    j->chunks = (a->m + j->rows_per_chunk - 1) / j->rows_per_chunk;
    q.n_tasks = j->panels * j->chunks;
    if (!qx) {
        size_t rows = rows_bytes(a->m, a->k);
        q.qx = scratch;
        q.sx = (float *)((char *)scratch + rows);
        q.zx = (int32_t *)((char *)scratch + rows + (size_t)a->m * sizeof(float));
        q.ready = (_Atomic int *)((char *)scratch + rows +
                                  (size_t)a->m * (sizeof(float) + sizeof(int32_t)));
        for (int64_t c = 0; c < j->chunks; c++)
            atomic_store_explicit(&q.ready[c], 0, memory_order_relaxed);
        if (a->n_outl > 0 && a->n_outl <= xo_cap(a->k) && a->y &&
            j->isa == SLIM_QGEMM_AVX512VNNI) {
            q.xo = (float *)((char *)q.ready + flags_bytes(a->m));
            j->xo = q.xo;
        }
        if (a->n_sp > 0 && a->y && j->isa == SLIM_QGEMM_AVX512VNNI) {
            j->sparse = true;
            j->xt_chunk = (int64_t)slim__qgemm_sparse_xt_floats(1, j->rows_per_chunk, a->k);
            /* raw: the call's transposed rows (x's size), freed at its end;
             * without them the sums are made per element */
            q.xt = aligned_alloc(64, slim__qgemm_sparse_xt_floats(j->chunks, j->rows_per_chunk,
                                                                 a->k) * sizeof(float));
            j->xt = q.xt;
            j->sums_early = j->chunks >= 2 * slim_num_threads();
        }
        q.n_tasks += j->chunks;
        q.quantize = slim__qgemm_quantizer(j->isa);
        j->qx = q.qx;
        j->sx = q.sx;
        j->zx = q.zx;
    } else {
        j->qx = qx;
        j->zx = zx;
    }
    atomic_store_explicit(&q.next, 0, memory_order_relaxed);
    /* Under about 2^19 multiply-adds (a few microseconds) waking a worker
     * costs more than it saves. */
    double work = (double)a->m * (double)j->n16 * (double)(j->k4 ? j->k4 : 4);
    if (work < (double)(1 << 19) || slim_num_threads() == 1)
        qgemm_worker(0, 1, &q);
    else
        slim_parallel_for(slim_num_threads(), 1, qgemm_worker, &q);
    free(q.xt);
}

/* The side product of the outlier channels, row by row (so that a row's
 * result never depends on the others), then the activation. Every path
 * computes, per output, acc = fma(x[k_o], q[o], acc) over o in order from
 * 0, then y = fma(acc, scale, y): the same roundings, so they agree bit for
 * bit. (The build targets baseline x86-64, where fmaf is a libm call: the C
 * path is exact but slow, the vector paths use the FMA instruction.) The
 * AVX-512 VNNI path does it in the product's epilogue (vnni_epilogue),
 * while the outputs are still in registers; the C and AVX2 paths in this
 * second pass over y, a tile of outputs in registers over all o (looping
 * over o outside, a first version streamed the output row through memory
 * once per outlier and took 30% of the encoder's product time for 1.6% of
 * its multiply-adds). */
static void outlier_rows_c(const slim_qgemm_args *a, int64_t r, int nr)
{
    for (int i = 0; i < nr; i++) {
        const float *x = a->x + (r + i) * a->ldx;
        float *y = a->y + (r + i) * a->ldy;
        for (int64_t c = 0; c < a->n; c++) {
            float acc = 0.0f;
            for (int64_t o = 0; o < a->n_outl; o++)
                acc = fmaf(x[a->outl_idx[o]], (float)a->outl_q[o * a->n + c], acc);
            y[c] = fmaf(acc, a->outl_scale[c], y[c]);
        }
    }
}

#ifdef QGEMM_X86
AVX2_TARGET
static void outlier_rows_avx2(const slim_qgemm_args *a, int64_t r, int nr)
{
    int64_t n8 = a->n & ~(int64_t)7;
    for (int i = 0; i < nr; i++) {
        const float *x = a->x + (r + i) * a->ldx;
        float *y = a->y + (r + i) * a->ldy;
        for (int64_t c = 0; c < n8; c += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int64_t o = 0; o < a->n_outl; o++) {
                __m128i q8 = _mm_loadl_epi64((const __m128i *)(a->outl_q + o * a->n + c));
                acc = _mm256_fmadd_ps(_mm256_set1_ps(x[a->outl_idx[o]]),
                                      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), acc);
            }
            _mm256_storeu_ps(y + c, _mm256_fmadd_ps(acc, _mm256_loadu_ps(a->outl_scale + c),
                                                    _mm256_loadu_ps(y + c)));
        }
        for (int64_t c = n8; c < a->n; c++) {
            float acc = 0.0f;
            for (int64_t o = 0; o < a->n_outl; o++)
                acc = fmaf(x[a->outl_idx[o]], (float)a->outl_q[o * a->n + c], acc);
            y[c] = fmaf(acc, a->outl_scale[c], y[c]);
        }
    }
}
#endif

/* Rows [4 begin, 4 end). */
static void outlier_part(int64_t begin, int64_t end, void *user)
{
    const slim_qgemm_args *a = user;
    slim_qgemm_isa isa = slim_qgemm_get_isa();
    for (int64_t t = begin; t < end; t++) {
        int64_t r = t * 4;
        int nr = a->m - r < 4 ? (int)(a->m - r) : 4;
#ifdef QGEMM_X86
        if (a->n_outl > 0 && isa == SLIM_QGEMM_AVX2)
            outlier_rows_avx2(a, r, nr);
        else
#endif
        if (a->n_outl > 0)
            outlier_rows_c(a, r, nr);
        if (a->n_sp > 0)
            slim__qgemm_sparse_rows_c(a, r, nr);
        if (a->act != SLIM_QGEMM_ACT_NONE)
            for (int i = 0; i < nr; i++) {
                float *y = a->y + (r + i) * a->ldy;
                for (int64_t c = 0; c < a->n; c++)
                    y[c] = act_c(y[c], a->act);
            }
    }
    (void)isa;
}

void slim_qgemm(const slim_qgemm_args *a, void *scratch)
{
    if (a->m <= 0 || a->n <= 0)
        return;
    /* The VNNI epilogue adds the outlier channels and sparse entries itself. */
    if ((a->n_outl <= 0 && a->n_sp <= 0) || slim_qgemm_get_isa() == SLIM_QGEMM_AVX512VNNI) {
        run_panels(a, scratch, NULL, NULL);
        return;
    }
    slim_qgemm_args b = *a;
    b.act = SLIM_QGEMM_ACT_NONE; /* after the side products */
    run_panels(&b, scratch, NULL, NULL);
    int64_t side = 4 * a->n * ((a->n_outl > 0 ? a->n_outl : 0) + (a->n_sp > 0 ? a->n_sp : 0));
    slim_parallel_for((a->m + 3) / 4, 1 + 16384 / (side + 1), outlier_part, (void *)a);
}

void slim_qgemm_u8(const slim_qgemm_args *a, const uint8_t *qx, const int32_t *zx)
{
    if (a->m > 0 && a->n > 0) {
        slim_qgemm_args b = *a;
        b.n_outl = 0; /* y_i32 has no float epilogue to add them to */
        b.n_sp = 0;
        run_panels(&b, NULL, qx, zx);
    }
}
