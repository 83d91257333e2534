/*
 * int8_impl.h - what the int8 pass's files (int8.c, int8_conv.c) share:
 * the pass's state and its graph helpers. Not a public interface.
 */
#ifndef SLIM_QUANT_INT8_IMPL_H
#define SLIM_QUANT_INT8_IMPL_H

#include "int8.h"

typedef struct slim__int8_pass {
    slim_graph *g;
    int *consumers;        /* per value: node input slots reading it */
    int *reader;           /* per value: the last node reading it */
    int *readers_before;   /* per value: consumers before the pass */
    bool *dead;            /* per node: fused away */
    slim_int8_report *rep;
    const slim_int8_opts *opts;
} slim__int8_pass;

/* Codes of one channel of k floats read with stride step (skip[i]: code 0,
 * left out of the scale); returns the scale, adds the squared error and
 * norm to *e2 and *w2. */
float slim__int8_quantize_channel(const float *w, int64_t k, int64_t step, const bool *skip,
                                  int8_t *q, double *e2, double *w2);
/* A 1-D or 2-D tensor (d1 unused for 1-D). */
slim_status slim__int8_alloc_tensor(slim_tensor *t, slim_dtype dt, int ndim, int64_t d0,
                                    int64_t d1, slim_err *err);
/* The host float32 initializer v, or NULL. */
const slim_value *slim__int8_const_f32(const slim_graph *g, int v);
bool slim__int8_excluded(const slim_int8_opts *o, const slim_node *n);
slim_status slim__int8_add_layer(slim__int8_pass *p, const slim_node *n, int weight,
                                 slim_int8_layer **out, slim_err *err);
/* The one live op_type node reading v when exactly one does and v is no
 * graph output. */
slim_node *slim__int8_sole_reader(slim__int8_pass *p, int v, const char *op_type);
bool slim__int8_over_budget(const slim__int8_pass *p, double error);
/* Makes n a com.slimserve op_type with these inputs, one output and attrs
 * (taken over, freed on failure too). */
slim_status slim__int8_rewrite(slim_node *n, const char *op_type, int n_in, const int *in,
                               int out, slim_attr *attrs, int na, slim_err *err);

/* Conv (int8_conv.c): why node n, a Conv with a constant 4-D float32
 * weight, stays float32, or NULL; and its rewrite to ConvInt8. */
const char *slim__int8_conv_why(const slim__int8_pass *p, const slim_node *n);
slim_status slim__int8_quantize_conv(slim__int8_pass *p, int id, slim_int8_layer *layer,
                                     slim_err *err);

#endif
