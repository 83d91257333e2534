/*
 * qgemm.c - the int8 matrix product (qgemm.h): packing and three code
 * paths chosen at run time by CPUID (the rows' quantization is in
 * qgemm_quant.c, the AVX2 and AVX-512 VNNI panels in qgemm_x86.c).
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
#include "qgemm_panel.h"
#include "gelu_poly.h"

#include "kernel.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

/* The epilogue's Gelu: kernels/cpu/gelu_poly.h's polynomial, whose AVX-512
 * version (qgemm_x86.c) computes the same operations (bitwise equal). */
float slim_qgemm_gelu(float y)
{
    return slim_gelu_poly(y);
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
        slim__qgemm_panel_vnni(j, p, r0, r1);
        if (tiles)
            slim__qgemm_amx_end();
        return;
    }
    if (j->isa == SLIM_QGEMM_AVX2) {
        slim__qgemm_panel_avx2(j, p, r0, r1);
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
