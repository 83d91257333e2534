/*
 * qgemm_panel.h - inside the int8 product: what the scheduler (qgemm.c)
 * and the x86 panels (qgemm_x86.c) share: the job one call's tasks read,
 * the row blockings, the portable epilogue every path computes, and the
 * x86 panel entries.
 *
 * A panel entry computes rows [r0, r1) of the job against panel p (64
 * output channels) and writes their outputs (float epilogue, or the int32
 * sums of slim_qgemm_u8); run it only where its path is supported.
 */
#ifndef SLIM_QGEMM_PANEL_H
#define SLIM_QGEMM_PANEL_H

#include "qgemm.h"
#include "qgemm_impl.h"
#include "gelu_poly.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Rows per micro-kernel call on panels narrower than 64 channels
 * (micro_vnni's accumulator arrays; with 6 rows GCC spilled them). */
#define MR_MAX 4
/* Rows per call of the full-panel loop (wide_loop: 24 named accumulators). */
#define WIDE_MR 6
#define ROW_CHUNK 24    /* rows per task: a multiple of MR_MAX and of WIDE_MR */
/* Rows per task on AMX tiles: two 16-row tiles (a task loads and releases
 * the tile configuration once); more than ROW_CHUNK, so flags_bytes holds. */
#define AMX_CHUNK 32

/* One call's product, as its tasks read it. */
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

/* The activation. slim_gelu_poly is slim_qgemm_gelu's body, called here
 * directly so that it inlines in qgemm_x86.c too (with the AVX2 path's
 * hardware fma and round rather than libm calls, as when both were in one
 * file; the same correctly rounded operations, so the same bits). */
static inline float act_c(float v, slim_qgemm_act act)
{
    if (act == SLIM_QGEMM_ACT_RELU)
        return v > 0 ? v : 0.0f;
    return act == SLIM_QGEMM_ACT_GELU ? slim_gelu_poly(v) : v;
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

#ifdef QGEMM_X86
void slim__qgemm_panel_vnni(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1);
void slim__qgemm_panel_avx2(const qgemm_job *j, int64_t p, int64_t r0, int64_t r1);
#endif

#endif
