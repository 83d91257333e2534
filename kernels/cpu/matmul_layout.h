/*
 * matmul_layout.h - how a FusedMatMul's packed weight is laid out, in words
 * a file can carry: FusedMatMul (matmul_dnnl.c) packs W [K, N] into column
 * parts, each in the blocked layout oneDNN's matmul picked for it on the
 * machine that packed it. A `.slim` file stores the packed bytes (loaded in
 * place, shared between processes) with the node attributes
 *
 *     parts   int64[P + 1]    column bounds: 0 = n0 < n1 < ... < nP = N
 *     layout  int64[P * SLIM_FMM_DESC]   each part's layout, below
 *
 * A load compares the layout with what oneDNN picks here and keeps the
 * bytes when they agree; otherwise (another ISA or oneDNN build, a build
 * without oneDNN, a GPU) it unpacks them to plain W with this module, which
 * needs no oneDNN and trusts nothing it reads: the description is checked
 * and every offset it yields is bounded by the part's size.
 *
 * A part's layout, for its [K, np] slice (oneDNN's blocked memory format:
 * outer strides, then dense inner blocks, outermost block first):
 *
 *     pad_k, pad_n          the padded extents (multiples of the blocks)
 *     stride_k, stride_n    between outer blocks (elements)
 *     nblks                 0 to 4 inner blocks
 *     blk[4], idx[4]        their sizes and dims (0 = k, 1 = n); unused 0
 *     floats                the part's size in floats
 */
#ifndef SLIM_MATMUL_LAYOUT_H
#define SLIM_MATMUL_LAYOUT_H

#include "kernel.h"

/* FusedMatMul's "activation" attribute. */
enum { SLIM_FMM_ACT_NONE = 0, SLIM_FMM_ACT_RELU = 1, SLIM_FMM_ACT_GELU_ERF = 2 };

#define SLIM_FMM_DESC 14
#define SLIM_FMM_MAX_PARTS 64

/* Checks part p's description (desc points at its SLIM_FMM_DESC ints) for
 * a [k, np] slice: every element maps inside its floats, no two to the
 * same place. */
slim_status slim_fmm_desc_check(const int64_t *desc, int64_t k, int64_t np, slim_err *err);

/* The offset of element (kk, j) of a part laid out as desc (checked). */
int64_t slim_fmm_desc_offset(const int64_t *desc, int64_t kk, int64_t j);

/* Checks parts/layout for W [k, n] stored in packed_floats floats; fills
 * n_parts. The message names what is wrong. */
slim_status slim_fmm_layout_check(const int64_t *parts, int n_bounds, const int64_t *layout,
                                  int n_layout, int64_t k, int64_t n, int64_t packed_floats,
                                  int *n_parts, slim_err *err);

/* W [k, n] (row-major) from packed (checked with slim_fmm_layout_check). */
void slim_fmm_unpack(const float *packed, const int64_t *parts, int n_parts,
                     const int64_t *layout, int64_t k, int64_t n, float *w);

#endif
