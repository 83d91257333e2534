/*
 * hgemm.c - float32 x half-precision weights (hgemm.h): packing and three
 * code paths chosen at run time by CPUID.
 *
 * The build targets baseline x86-64, so the AVX-512 paths are functions
 * compiled with target attributes, called only once __builtin_cpu_supports
 * says the CPU (and OS) has them. The float32 paths keep two sums per
 * channel, one over even k and one over odd k, because the packed layout
 * puts a channel's pair of halves side by side (what vdpbf16ps wants): a
 * vector of 16 lanes is 8 channels x 2 parities, each lane one fused
 * multiply-add per pair, and the two sums are added once at the end. The C
 * path does exactly those operations in that order, so it and the AVX-512
 * path agree bit for bit.
 *
 * Work is split over (panel of 64 output channels) x (chunk of rows), panel
 * major, as in qgemm.c; each row's operations are the same whatever chunk
 * or micro-tile it falls in, so the split never changes a result.
 */
#include "hgemm.h"
#include "gelu_poly.h"

#include "kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define HGEMM_X86 1
#include <immintrin.h>
#endif

#define MR_MAX 4
#define MR_F32 6        /* rows per float32-path micro-tile */
#ifndef HGEMM_W_ROWS
#define HGEMM_W_ROWS 8 /* see slim_hgemm */
#endif
#define ROW_CHUNK 48    /* rows per task: a multiple of MR_MAX and MR_F32 */

int64_t slim_hgemm_k2(int64_t k)
{
    return (k + 1) & ~(int64_t)1;
}

int64_t slim_hgemm_n16(int64_t n)
{
    return (n + 15) & ~(int64_t)15;
}

size_t slim_hgemm_packed_elems(int64_t n, int64_t k)
{
    return (size_t)slim_hgemm_n16(n) * (size_t)slim_hgemm_k2(k);
}

static int64_t panel_width(int64_t n16, int64_t p)
{
    int64_t w = n16 - p * SLIM_HGEMM_PANEL;
    return w < SLIM_HGEMM_PANEL ? w : SLIM_HGEMM_PANEL;
}

static size_t packed_index(int64_t n16, int64_t k2, int64_t j, int64_t kk)
{
    int64_t p = j / SLIM_HGEMM_PANEL, w = panel_width(n16, p);
    return (size_t)(p * SLIM_HGEMM_PANEL * k2 + (kk / 2) * w * 2 + (j % SLIM_HGEMM_PANEL) * 2 +
                    kk % 2);
}

static inline float half_to_f32(uint16_t h, slim_dtype wtype)
{
    return wtype == SLIM_F16 ? slim_f16_to_f32(h) : slim_bf16_to_f32(h);
}

void slim_hgemm_pack(const float *w, int64_t n, int64_t k, int64_t sj, int64_t sk,
                     slim_dtype wtype, uint16_t *packed)
{
    int64_t n16 = slim_hgemm_n16(n), k2 = slim_hgemm_k2(k);
    memset(packed, 0, slim_hgemm_packed_elems(n, k) * sizeof(uint16_t));
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++) {
            float v = w[j * sj + kk * sk];
            packed[packed_index(n16, k2, j, kk)] =
                wtype == SLIM_F16 ? slim_f32_to_f16(v) : slim_f32_to_bf16(v);
        }
}

float slim_hgemm_packed_get(const uint16_t *packed, int64_t n, int64_t k, slim_dtype wtype,
                            int64_t j, int64_t kk)
{
    return half_to_f32(packed[packed_index(slim_hgemm_n16(n), slim_hgemm_k2(k), j, kk)], wtype);
}

/* ---- path selection ------------------------------------------------------ */

static _Atomic int forced_isa = SLIM_HGEMM_AUTO;

bool slim_hgemm_isa_supported(slim_hgemm_isa isa)
{
    switch (isa) {
    case SLIM_HGEMM_AUTO:
    case SLIM_HGEMM_C:
        return true;
#ifdef HGEMM_X86
    case SLIM_HGEMM_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               slim_cpu_has_f16c() && __builtin_cpu_supports("fma");
    case SLIM_HGEMM_AVX512BF16:
        return slim_hgemm_isa_supported(SLIM_HGEMM_AVX512) &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#endif
    default:
        return false;
    }
}

const char *slim_hgemm_isa_name(slim_hgemm_isa isa)
{
    switch (isa) {
    case SLIM_HGEMM_C: return "c";
    case SLIM_HGEMM_AVX512: return "avx512";
    case SLIM_HGEMM_AVX512BF16: return "avx512bf16";
    default: return "auto";
    }
}

static slim_hgemm_isa best_isa(void)
{
    static _Atomic int best = -1;
    int b = atomic_load(&best);
    if (b >= 0)
        return (slim_hgemm_isa)b;
    b = SLIM_HGEMM_C;
    if (slim_hgemm_isa_supported(SLIM_HGEMM_AVX512BF16))
        b = SLIM_HGEMM_AVX512BF16;
    else if (slim_hgemm_isa_supported(SLIM_HGEMM_AVX512))
        b = SLIM_HGEMM_AVX512;
    /* The variable can only lower the path (benchmarks, bug hunts). */
    const char *env = getenv("SLIM_HALF_ISA");
    for (int i = SLIM_HGEMM_C; env && i < b; i++)
        if (strcmp(env, slim_hgemm_isa_name((slim_hgemm_isa)i)) == 0)
            b = i;
    atomic_store(&best, b);
    return (slim_hgemm_isa)b;
}

slim_hgemm_isa slim_hgemm_get_isa(slim_dtype wtype)
{
    int f = atomic_load(&forced_isa);
    slim_hgemm_isa isa = f != SLIM_HGEMM_AUTO ? (slim_hgemm_isa)f : best_isa();
    /* vdpbf16ps multiplies bf16 only; fp16 weights take the float32 path. */
    return isa == SLIM_HGEMM_AVX512BF16 && wtype != SLIM_BF16 ? SLIM_HGEMM_AVX512 : isa;
}

bool slim_hgemm_set_isa(slim_hgemm_isa isa)
{
    if (!slim_hgemm_isa_supported(isa))
        return false;
    atomic_store(&forced_isa, (int)isa);
    return true;
}

/* ---- the product --------------------------------------------------------- */

typedef struct {
    const slim_hgemm_args *a;
    const uint16_t *xb;       /* AVX512BF16: m rows of k2 bf16 */
    int64_t k2, n16, chunks;
    slim_hgemm_isa isa;
    int64_t tasks;            /* panels x chunks, panel major */
    _Atomic int64_t next;     /* the next task to hand out */
} hgemm_job;

static inline float finish(float even, float odd, const slim_hgemm_args *a, int64_t c)
{
    float y = even + odd;
    if (a->bias)
        y = y + a->bias[c];
    if (a->act == SLIM_HGEMM_ACT_GELU)
        return slim_gelu_poly(y);
    return a->act == SLIM_HGEMM_ACT_RELU ? (y > 0 ? y : 0.0f) : y;
}

/* Rows [r0, r1) against panel p, the portable way. */
static void panel_c(const hgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    const slim_hgemm_args *a = j->a;
    int64_t w = panel_width(j->n16, p), n0 = p * SLIM_HGEMM_PANEL;
    const uint16_t *b = a->packed + p * SLIM_HGEMM_PANEL * j->k2;
    float acc[2 * SLIM_HGEMM_PANEL];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->ldx;
        memset(acc, 0, sizeof(acc));
        for (int64_t g = 0; g < j->k2 / 2; g++) {
            const uint16_t *bg = b + g * w * 2;
            float x0 = x[2 * g], x1 = 2 * g + 1 < a->k ? x[2 * g + 1] : 0.0f;
            for (int64_t c = 0; c < 2 * w; c += 2) {
                acc[c] = fmaf(x0, half_to_f32(bg[c], a->wtype), acc[c]);
                acc[c + 1] = fmaf(x1, half_to_f32(bg[c + 1], a->wtype), acc[c + 1]);
            }
        }
        for (int64_t c = 0; c < w && n0 + c < a->n; c++)
            a->y[r * a->ldy + n0 + c] = finish(acc[2 * c], acc[2 * c + 1], a, n0 + c);
    }
}

#ifdef HGEMM_X86
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,f16c,fma")))
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

/* 16 halves (8 channels x 2 parities) widened to float32. */
AVX512_TARGET __attribute__((always_inline))
static inline __m512 load_half(const uint16_t *p, slim_dtype wtype)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (wtype == SLIM_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The channel's even + odd sums, bias, activation; stores 16 channels from
 * the lane pairs of lo (channels 0-7) and hi (8-15). */
AVX512_TARGET __attribute__((always_inline))
static inline void store16(const slim_hgemm_args *a, int64_t r, int64_t c, __m512 lo, __m512 hi)
{
    if (c >= a->n)
        return;
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                         31);
    __mmask16 mk = a->n - c >= 16 ? 0xFFFF : (__mmask16)((1u << (a->n - c)) - 1);
    __m512 y = _mm512_add_ps(_mm512_permutex2var_ps(lo, ie, hi),
                             _mm512_permutex2var_ps(lo, io, hi));
    if (a->bias)
        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mk, a->bias + c));
    if (a->act == SLIM_HGEMM_ACT_RELU)
        y = _mm512_max_ps(y, _mm512_setzero_ps());
    else if (a->act == SLIM_HGEMM_ACT_GELU)
        y = slim_gelu_poly16(y);
    _mm512_mask_storeu_ps(a->y + r * a->ldy + c, mk, y);
}

/* mr rows x nv vectors (nv / 2 x 16 channels starting at panel column c0).
 * Inlined into one copy per (mr, nv) so the accumulators stay in
 * registers: up to 6 x 4 of them, 4 weight vectors, one broadcast (29 of
 * the 32; 6 rows measured a few percent faster than 4 on the encoder, and
 * widening a task's panel once into float32 scratch instead of per tile
 * measured slower: the FMAs, not the widening, bound this path). Tried
 * again: a 32-channel block widened once per thread and reused over
 * successive row chunks (106-109 GFLOP/s a thread against 107-110), the
 * same in K blocks of 64-256 pairs that stay in L1 with the tiles' sums
 * kept in scratch between blocks (100-103 against 111-112 at m = 128),
 * and 12 x 2 or 3 x 8 tiles (93, 102-106): none beat this 6 x 4 tile,
 * which runs within ~5% of the FMA peak (~116). Needs -O3 (the kernel sources get it) to unroll the
 * i and v loops; at -O2 acc[] lives in memory, 2.7x slower. */
AVX512_TARGET __attribute__((always_inline))
static inline void micro_f32(const hgemm_job *j, int mr, int nv, int64_t r, int64_t p,
                             int64_t c0, slim_dtype wtype)
{
    const slim_hgemm_args *a = j->a;
    int64_t w = panel_width(j->n16, p);
    const uint16_t *b = a->packed + p * SLIM_HGEMM_PANEL * j->k2 + c0 * 2;
    __m512 acc[MR_F32][4];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_setzero_ps();
    int64_t full = a->k / 2;
    for (int64_t g = 0; g < full; g++) {
        __m512 wv[4];
        for (int v = 0; v < nv; v++)
            wv[v] = load_half(b + g * w * 2 + v * 16, wtype);
        for (int i = 0; i < mr; i++) {
            double pair;
            memcpy(&pair, a->x + (r + i) * a->ldx + 2 * g, sizeof(pair));
            __m512 xv = _mm512_castpd_ps(_mm512_set1_pd(pair));
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_fmadd_ps(xv, wv[v], acc[i][v]);
        }
    }
    if (full < j->k2 / 2) { /* odd k: the last pair's second input is 0 */
        __m512 wv[4];
        for (int v = 0; v < nv; v++)
            wv[v] = load_half(b + full * w * 2 + v * 16, wtype);
        for (int i = 0; i < mr; i++) {
            float pair[2] = {a->x[(r + i) * a->ldx + 2 * full], 0.0f};
            double d;
            memcpy(&d, pair, sizeof(d));
            __m512 xv = _mm512_castpd_ps(_mm512_set1_pd(d));
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_fmadd_ps(xv, wv[v], acc[i][v]);
        }
    }
    int64_t c = p * SLIM_HGEMM_PANEL + c0;
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v += 2)
            store16(a, r + i, c + v * 8, acc[i][v], acc[i][v + 1]);
}

#define MICRO_CASE(MR, NV) \
    case (MR) * 8 + (NV): micro_f32(j, MR, NV, r, p, c0, wtype); break;
#define MICRO_ROW(MR) MICRO_CASE(MR, 2) MICRO_CASE(MR, 4)

AVX512_TARGET __attribute__((always_inline))
static inline void panel_f32(const hgemm_job *j, int64_t p, int64_t r0, int64_t r1,
                             slim_dtype wtype)
{
    int64_t w = panel_width(j->n16, p);
    for (int64_t c0 = 0; c0 < w; c0 += 32) {
        int nv = w - c0 >= 32 ? 4 : 2;
        for (int64_t r = r0; r < r1; r += MR_F32) {
            int mr = r1 - r < MR_F32 ? (int)(r1 - r) : MR_F32;
            switch (mr * 8 + nv) {
                MICRO_ROW(1) MICRO_ROW(2) MICRO_ROW(3) MICRO_ROW(4) MICRO_ROW(5) MICRO_ROW(6)
            default: break;
            }
        }
    }
}
#undef MICRO_ROW
#undef MICRO_CASE

/* One copy per weight type, so the widening is not a branch in the loop. */
AVX512_TARGET
static void panel_f16(const hgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    panel_f32(j, p, r0, r1, SLIM_F16);
}

AVX512_TARGET
static void panel_bf16w(const hgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    panel_f32(j, p, r0, r1, SLIM_BF16);
}

/* mr rows x nv vectors of 16 channels: k2 / 2 steps of vdpbf16ps. */
BF16_TARGET __attribute__((always_inline))
static inline void micro_dp(const hgemm_job *j, int mr, int nv, int64_t r, int64_t p)
{
    const slim_hgemm_args *a = j->a;
    int64_t w = panel_width(j->n16, p);
    const uint16_t *b = a->packed + p * SLIM_HGEMM_PANEL * j->k2;
    __m512 acc[MR_MAX][4];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = _mm512_setzero_ps();
    int64_t pairs = j->k2 / 2;
    for (int64_t g = 0; g < pairs; g++) {
        __m512i wv[4];
        for (int v = 0; v < nv; v++)
            wv[v] = _mm512_loadu_si512(b + g * w * 2 + v * 32);
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, j->xb + (r + i) * j->k2 + 2 * g, sizeof(pair));
            __m512i xv = _mm512_set1_epi32(pair);
            for (int v = 0; v < nv; v++)
                acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)xv, (__m512bh)wv[v]);
        }
    }
    int64_t n0 = p * SLIM_HGEMM_PANEL;
    for (int v = 0; v < nv; v++) {
        int64_t c = n0 + v * 16;
        if (c >= a->n)
            break;
        __mmask16 mk = a->n - c >= 16 ? 0xFFFF : (__mmask16)((1u << (a->n - c)) - 1);
        __m512 bias = a->bias ? _mm512_maskz_loadu_ps(mk, a->bias + c) : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            __m512 y = a->bias ? _mm512_add_ps(acc[i][v], bias) : acc[i][v];
            if (a->act == SLIM_HGEMM_ACT_RELU)
                y = _mm512_max_ps(y, _mm512_setzero_ps());
            else if (a->act == SLIM_HGEMM_ACT_GELU)
                y = slim_gelu_poly16(y);
            _mm512_mask_storeu_ps(a->y + (r + i) * a->ldy + c, mk, y);
        }
    }
}

#define MICRO_CASE(MR, NV) \
    case (MR) * 8 + (NV): micro_dp(j, MR, NV, r, p); break;
#define MICRO_ROW(MR) MICRO_CASE(MR, 1) MICRO_CASE(MR, 2) MICRO_CASE(MR, 3) MICRO_CASE(MR, 4)

BF16_TARGET
static void panel_dp(const hgemm_job *j, int64_t p, int64_t r0, int64_t r1)
{
    int nv = (int)(panel_width(j->n16, p) / 16);
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

/* One row of x to bf16 pairs, rounded to nearest even (vcvtneps2bf16, which
 * also flushes subnormal inputs to zero as vdpbf16ps would); the pad is 0. */
BF16_TARGET
static void row_to_bf16(const float *x, int64_t k, uint16_t *xb)
{
    int64_t i = 0;
    for (; i < k; i += 16) {
        __mmask16 mk = k - i >= 16 ? 0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
        _mm256_mask_storeu_epi16(xb + i, mk, (__m256i)h);
    }
    if (k & 1)
        xb[k] = 0;
}
#endif

#ifdef HGEMM_X86
AVX512_TARGET
static void widen_avx512(const uint16_t *src, slim_dtype wtype, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, load_half(src + i, wtype));
    for (; i < n; i++)
        dst[i] = half_to_f32(src[i], wtype);
}
#endif

/* Widening reads 2 and writes 4 bytes an element: a memory stream, so a
 * block of 4096 (24 KiB) per step. A thread is woken per 32 blocks: at 8
 * the example resnet's small layers (<= 37k weights) took 4% longer at
 * batch 1, the wake-up costing more than the half of the widening saved. */
#define WIDEN_BLOCK 4096

typedef struct {
    const uint16_t *src;
    slim_dtype wtype;
    float *dst;
    int64_t n;
    bool simd;
} widen_job;

static void widen_part(int64_t begin, int64_t end, void *user)
{
    const widen_job *q = user;
    int64_t i0 = begin * WIDEN_BLOCK, i1 = end * WIDEN_BLOCK < q->n ? end * WIDEN_BLOCK : q->n;
#ifdef HGEMM_X86
    if (q->simd) { /* constant types, so the conversion is not a branch per vector */
        if (q->wtype == SLIM_F16)
            widen_avx512(q->src + i0, SLIM_F16, q->dst + i0, i1 - i0);
        else
            widen_avx512(q->src + i0, SLIM_BF16, q->dst + i0, i1 - i0);
        return;
    }
#endif
    for (int64_t i = i0; i < i1; i++)
        q->dst[i] = half_to_f32(q->src[i], q->wtype);
}

/* On the kernel threads when large: ConvHalf widens a layer's weights
 * every run, ResNet-50's largest 2.4M of them, while the convolution
 * itself runs on all the threads. */
void slim_half_widen(const uint16_t *src, slim_dtype wtype, float *dst, int64_t n)
{
    if (n <= 0)
        return;
    widen_job q = {src, wtype, dst, n, slim_hgemm_get_isa(wtype) != SLIM_HGEMM_C};
    slim_parallel_for((n + WIDEN_BLOCK - 1) / WIDEN_BLOCK, 32, widen_part, &q);
}

static void hgemm_task(const hgemm_job *j, int64_t t)
{
    int64_t p = t / j->chunks, c = t % j->chunks;
    int64_t r0 = c * ROW_CHUNK, r1 = r0 + ROW_CHUNK < j->a->m ? r0 + ROW_CHUNK : j->a->m;
#ifdef HGEMM_X86
    if (j->isa == SLIM_HGEMM_AVX512BF16) {
        panel_dp(j, p, r0, r1);
        return;
    }
    if (j->isa == SLIM_HGEMM_AVX512) {
        if (j->a->wtype == SLIM_F16)
            panel_f16(j, p, r0, r1);
        else
            panel_bf16w(j, p, r0, r1);
        return;
    }
#endif
    panel_c(j, p, r0, r1);
}

/* One loop per thread, each taking the next task until none are left. The
 * pool hands out an eighth of its range at a time (at 2 threads), so a
 * thread that was preempted, or just started later, on a shared machine
 * left the other idle for up to that eighth; one task at a time bounds the
 * idle tail by one task (~50 us at k = 768). Which loop runs a task changes
 * nothing in its result. */
static void hgemm_loop(int64_t begin, int64_t end, void *user)
{
    hgemm_job *j = user;
    for (int64_t i = begin; i < end; i++)
        for (;;) {
            int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
            if (t >= j->tasks)
                break;
            hgemm_task(j, t);
        }
}

#ifdef HGEMM_X86
typedef struct {
    const slim_hgemm_args *a;
    uint16_t *xb;
    int64_t k2;
} convert_job;

static void convert_part(int64_t begin, int64_t end, void *user)
{
    const convert_job *q = user;
    for (int64_t r = begin; r < end; r++)
        row_to_bf16(q->a->x + r * q->a->ldx, q->a->k, q->xb + r * q->k2);
}
#endif

size_t slim_hgemm_scratch_bytes(int64_t m, int64_t k)
{
    return ((size_t)m * (size_t)slim_hgemm_k2(k) * sizeof(uint16_t) + 63) & ~(size_t)63;
}

void slim_hgemm(const slim_hgemm_args *a, void *scratch)
{
    if (a->m <= 0 || a->n <= 0)
        return;
    hgemm_job j = {a, scratch, slim_hgemm_k2(a->k), slim_hgemm_n16(a->n), 0,
                   slim_hgemm_get_isa(a->wtype), 0, 0};
    j.chunks = (a->m + ROW_CHUNK - 1) / ROW_CHUNK;
#ifdef HGEMM_X86
    if (j.isa == SLIM_HGEMM_AVX512BF16) {
        convert_job q = {a, scratch, j.k2};
        slim_parallel_for(a->m, 1 + 16384 / j.k2, convert_part, &q);
    }
#endif
    int64_t panels = (j.n16 + SLIM_HGEMM_PANEL - 1) / SLIM_HGEMM_PANEL;
    j.tasks = panels * j.chunks;
    /* A task is up to ROW_CHUNK x 64 x k multiply-adds; a thread is worth
     * waking for ~2^18 of them. Each weight a task reads costs about as
     * much as HGEMM_W_ROWS rows' multiply-adds (loaded and widened, or
     * paired, once per task), which is what a few rows are made of: an MLP's
     * 784 x 256 layer at one row ran on one thread, 1.6x the float32 sgemm
     * that splits it. */
    int64_t work = ((a->m < ROW_CHUNK ? a->m : ROW_CHUNK) + HGEMM_W_ROWS) * SLIM_HGEMM_PANEL * j.k2;
    int64_t grain = 1 + (1 << 18) / (work ? work : 1);
    int64_t loops = (j.tasks + grain - 1) / grain;
    if (loops > slim_num_threads())
        loops = slim_num_threads();
    slim_parallel_for(loops > 1 ? loops : 1, 1, hgemm_loop, &j);
}
