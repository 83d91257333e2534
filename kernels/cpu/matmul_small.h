/*
 * matmul_small.h - FusedMatMul for a few rows (matmul_small.c): the
 * product over oneDNN's packed weight, read in place, in our own AVX-512
 * loop, for the row counts where the run streams its weights from memory
 * (BERT-base at 16 tokens: 85M weights a run for 16 rows):
 *
 *     slim__fmm_small *s = slim__fmm_small_make(k, &parts);  // NULL: not this layout
 *     if (m <= slim__fmm_small_max_rows())
 *         slim__fmm_small_run(s, a, wp, bias, y, m, act);    // Y [m, N]
 *     slim__fmm_small_free(s);
 *
 * Every element of Y is one chain of fused multiply-adds over k in order,
 * then the bias, then the activation, whatever m is and wherever its row
 * sits: a row's result does not depend on the rows that came with it.
 * Built with oneDNN only (the layout is oneDNN's).
 */
#ifndef SLIM_MATMUL_SMALL_H
#define SLIM_MATMUL_SMALL_H

#include "matmul_rows.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct slim__fmm_small slim__fmm_small;

/* NULL when a part's layout is not K rows of 64 columns per N-block
 * (oneDNN's BA16a64b, the one brgemm picks with AVX-512), or when this CPU
 * has no AVX-512. */
slim__fmm_small *slim__fmm_small_make(int64_t k, const slim__fmm_rows_parts *parts);
void slim__fmm_small_free(slim__fmm_small *s);

/* Y [m, N] = act(A [m, K] W + bias) on the kernel threads, for m up to
 * slim__fmm_small_max_rows(); act is SLIM_FMM_ACT_*. */
void slim__fmm_small_run(const slim__fmm_small *s, const float *a, const float *wp,
                         const float *bias, float *y, int64_t m, int act);

/* The most rows it takes: SLIM_FMM_SMALL rows (0 turns it off, to
 * compare), 16 by default, at most SLIM_FMM_SMALL_CAP. */
#define SLIM_FMM_SMALL_CAP 64
int64_t slim__fmm_small_max_rows(void);

#endif
