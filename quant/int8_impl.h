/*
 * int8_impl.h - what the int8 pass's files (int8.c, int8_conv.c) share:
 * the pass's state and its helpers (the graph rewriting is the rewrite kit, passes/rewrite.h).
 * Not a public interface.
 */
#ifndef SLIM_QUANT_INT8_IMPL_H
#define SLIM_QUANT_INT8_IMPL_H

#include "int8.h"
#include "rewrite.h"

typedef struct slim__int8_pass {
    slim_rewrite rw;       /* the graph, its readers, the fused nodes */
    slim_int8_report *rep;
    const slim_int8_opts *opts;
} slim__int8_pass;

/* Codes of one channel of k floats read with stride step (skip[i]: code 0,
 * left out of the scale); returns the scale, adds the squared error and
 * norm to *e2 and *w2. */
float slim__int8_quantize_channel(const float *w, int64_t k, int64_t step, const bool *skip,
                                  int8_t *q, double *e2, double *w2);
slim_status slim__int8_add_layer(slim__int8_pass *p, const slim_node *n, int weight,
                                 slim_int8_layer **out, slim_err *err);
bool slim__int8_over_budget(const slim__int8_pass *p, double error);

/* Conv (int8_conv.c): why node n, a Conv with a constant 4-D float32
 * weight, stays float32, or NULL; and its rewrite to ConvInt8. */
const char *slim__int8_conv_why(const slim__int8_pass *p, const slim_node *n);
slim_status slim__int8_quantize_conv(slim__int8_pass *p, int id, slim_int8_layer *layer,
                                     slim_err *err);

/* A layer the pruning pass made sparse (int8_sparse.c): SparseConv and
 * SparseMatMul values become int8 codes with per-output-channel scales
 * (input 6, input 5). Adds the layer to the report. */
slim_status slim__int8_quantize_sparse(slim__int8_pass *p, int id, slim_err *err);

/* A product's kind, as SLIM_INT8_RESIDUAL and SLIM_INT8_SPARSE name them,
 * from its K and its N per part (a merged Q/K/V product counts by its
 * parts): "down" (K >= 2 N: FFN out), "up" (N >= 2 K: FFN in), else
 * "square" (Q, K, V, attention out). */
const char *slim__int8_kind(int64_t k, int64_t n);

/* Whether a product of that kind gets a second int8 weight for the first
 * one's rounding error (SLIM_INT8_RESIDUAL: off, all, or a list of kinds). */
bool slim__int8_use_residual(const char *kind);

/* Sparse float32 entries (int8_entries.c): how many per channel of k
 * inputs of a product of that kind (SLIM_INT8_SPARSE; -1: the spec is
 * malformed); the nsp largest of channel c (k floats) to
 * idx[t * ld] and val[t * ld], 0 left in c; channel w (stride sk; skip:
 * outlier rows) gathered into c with outlier rows and its entries 0, their
 * squared norm added to *w2. */
int64_t slim__int8_sparse_count(int64_t k, const char *kind);
void slim__int8_take_largest(float *c, int64_t k, int64_t nsp, int32_t *idx, float *val,
                             int64_t ld);
void slim__int8_gather_main(const float *w, int64_t k, int64_t sk, const bool *skip, int64_t nsp,
                            const int32_t *idx, const float *val, int64_t ld, float *c,
                            double *w2);

#endif
