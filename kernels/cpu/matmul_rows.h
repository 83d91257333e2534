/*
 * matmul_rows.h - FusedMatMul's row-invariant product (matmul_rows.c),
 * the mode a model the server batches runs in:
 *
 *     slim__fmm_rows *r = slim__fmm_rows_make(engine, k, &parts, act);
 *     slim__fmm_rows_run(r, a, wp, bias, y, m);   // Y [m, N] = act(A W + B)
 *     slim__fmm_rows_free(r);
 *
 * Every call of a given node runs the same oneDNN primitives, made once
 * for SLIM_FMM_ROW_TILE rows whatever m is, so a row's result does not
 * depend on the rows that came with it. Built with oneDNN only.
 */
#ifndef SLIM_MATMUL_ROWS_H
#define SLIM_MATMUL_ROWS_H

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLIM_FMM_ROW_TILE 16

/* The packed weight, as matmul_dnnl.c laid it out: n_parts column parts,
 * part p holding columns [n0[p], n0[p + 1]) at float offset off[p] in the
 * layout wmd[p]. */
typedef struct slim__fmm_rows_parts {
    int n_parts;
    const int64_t *n0;
    const size_t *off;
    const dnnl_memory_desc_t *wmd;
} slim__fmm_rows_parts;

typedef struct slim__fmm_rows slim__fmm_rows;

/* NULL when the layout cannot be cut into column blocks (not N-blocks
 * outermost) or oneDNN has no fast kernel for them: the caller then keeps
 * its per-part tiles. act is SLIM_FMM_ACT_*. */
slim__fmm_rows *slim__fmm_rows_make(dnnl_engine_t engine, int64_t k,
                                    const slim__fmm_rows_parts *parts, int act);
void slim__fmm_rows_free(slim__fmm_rows *r);

/* Y [m, N] from A [m, K] on the kernel threads; false when oneDNN failed
 * or scratch memory could not be had. stream() gives the calling thread's
 * oneDNN stream. */
bool slim__fmm_rows_run(const slim__fmm_rows *r, dnnl_stream_t (*stream)(void), const float *a,
                        const float *wp, const float *bias, float *y, int64_t m);

/* SLIM_FMM_ROWS=0 keeps the per-part tiles (to compare). */
bool slim__fmm_rows_enabled(void);

#endif
