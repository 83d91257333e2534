/*
 * elementwise_impl.h - what the two halves of the elementwise ops share:
 * elementwise_loops.c (the typed inner loops and each op's description)
 * and elementwise.c (dtype dispatch, broadcasting, the runners, Where and
 * the op table). Private to them.
 */
#ifndef SLIM_ELEMENTWISE_IMPL_H
#define SLIM_ELEMENTWISE_IMPL_H

#include "kernel.h"

/* Attribute values an inner loop may read; copied into a local before the
 * loop so that stores through float pointers cannot force reloads. */
typedef struct ew_params {
    float alpha, beta, gamma;
    int64_t i;          /* Mod: fmod. BitShift: 1 = left. Gelu: 1 = tanh.
                         * IsInf: 1 = detect +inf, 2 = -inf. Mean: count. */
    double lo, hi;      /* Clip bounds for float types */
    int64_t lo_i, hi_i; /* Clip bounds for integer types (uint64 as bits) */
    slim_dtype ta, tb;  /* Pow with base and exponent of different types */
} ew_params;

typedef void (*un_loop)(const void *x, void *y, int64_t n, const ew_params *prm);
/* sa, sb: element strides of a and b along the row, 0 when broadcast. */
typedef void (*bin_loop)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                         int64_t n, const ew_params *prm);

typedef enum { EW_UNARY, EW_CLIP, EW_BINARY, EW_POW, EW_VARIADIC, EW_MEAN, EW_WHERE } ew_kind;

typedef struct ew_desc {
    const char *op;
    ew_kind kind;
    const un_loop *un;   /* [SLIM_DTYPE_COUNT], UNARY and CLIP */
    const bin_loop *bin; /* [SLIM_DTYPE_COUNT], BINARY, POW, VARIADIC, MEAN */
    bool to_bool;        /* output is bool whatever the input type */
    /* Float attributes read into alpha, beta, gamma; a NULL name fixes the
     * parameter at its default. */
    const char *attr[3];
    float dflt[3];
    slim_status (*parse)(const slim_node *n, ew_params *p, slim_err *err);
} ew_desc;

/* The description of elementwise op `op` (an ONNX op type), or NULL. */
const ew_desc *slim__ew_find(const char *op);

/* Mean's division of the sum by the input count (ew_params.i), per dtype:
 * a unary loop, run in place. */
extern const un_loop slim__ew_mean_div[SLIM_DTYPE_COUNT];

/* Pow with base and exponent of different types (ew_params.ta, .tb): through
 * double, or exact integer powers when both are integers. */
void slim__ew_pow_any(const void *pa, int64_t sa, const void *pb, int64_t sb, void *py,
                      int64_t n, const ew_params *prm);

#endif
