/*
 * reduce_impl.h - what reduce.c, reduce_search.c and cumsum.c share: the
 * element access in double or int64, the [outer, r, inner] view around one
 * axis, the tasks' grain, and the entry points reduce.c's op table names.
 */
#ifndef SLIM_REDUCE_IMPL_H
#define SLIM_REDUCE_IMPL_H

#include "kernel.h"

#include <string.h>

#define CHUNK 256

/* ---- element access ------------------------------------------------------ */

/* Widen n contiguous elements starting at element off. */
static inline void load_f64(slim_dtype dt, const void *base, int64_t off, int64_t n, double *dst)
{
    if (dt == SLIM_F32) {
        const float *p = (const float *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i];
    } else if (dt == SLIM_F64) {
        memcpy(dst, (const double *)base + off, (size_t)n * sizeof(double));
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = slim_load_f64(dt, base, off + i);
    }
}

static inline void load_i64(slim_dtype dt, const void *base, int64_t off, int64_t n, int64_t *dst)
{
    if (dt == SLIM_I64) {
        memcpy(dst, (const int64_t *)base + off, (size_t)n * sizeof(int64_t));
    } else if (dt == SLIM_I32) {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = slim_load_i64(dt, base, off + i);
    }
}

static inline void store_f64(slim_dtype dt, void *base, int64_t off, int64_t n, const double *src)
{
    if (dt == SLIM_F32) {
        float *p = (float *)base + off;
        for (int64_t i = 0; i < n; i++)
            p[i] = (float)src[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            slim_store_f64(dt, base, off + i, src[i]);
    }
}

static inline void store_i64(slim_dtype dt, void *base, int64_t off, int64_t n, const int64_t *src)
{
    for (int64_t i = 0; i < n; i++)
        slim_store_i64(dt, base, off + i, src[i]);
}

/* Integer types (and bool) are compared and summed exactly in int64. */
static inline bool is_intlike(slim_dtype dt)
{
    return slim_dtype_is_int(dt) || dt == SLIM_BOOL;
}

static inline void int_range(slim_dtype dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case SLIM_BOOL: *lo = 0; *hi = 1; break;
    case SLIM_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case SLIM_U8: *lo = 0; *hi = UINT8_MAX; break;
    case SLIM_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case SLIM_U16: *lo = 0; *hi = UINT16_MAX; break;
    case SLIM_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case SLIM_U32: *lo = 0; *hi = UINT32_MAX; break;
    case SLIM_U64: *lo = 0; *hi = INT64_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* Splits x's dims around one axis into [outer, r, inner]. */
static inline void split_at_axis(const slim_tensor *x, int axis, int64_t *outer, int64_t *r,
                                 int64_t *inner)
{
    *outer = slim_shape_numel(axis, x->dims);
    *r = x->ndim ? x->dims[axis] : 1;
    *inner = x->ndim ? slim_shape_numel(x->ndim - axis - 1, x->dims + axis + 1) : 1;
}

/* Task grain so that one task touches at least ~32K elements. */
static inline int64_t grain_for(int64_t elems_per_unit)
{
    int64_t g = 32768 / (elems_per_unit > 0 ? elems_per_unit : 1);
    return g > 0 ? g : 1;
}

/* ArgMax, ArgMin and TopK (reduce_search.c). */
slim_status slim__arg_prepare(slim_node *node, void **state, slim_err *err);
slim_status slim__arg_infer(slim_op_ctx *ctx);
slim_status slim__arg_exec(slim_op_ctx *ctx);
slim_status slim__topk_prepare(slim_node *node, void **state, slim_err *err);
slim_status slim__topk_infer(slim_op_ctx *ctx);
slim_status slim__topk_exec(slim_op_ctx *ctx);

/* CumSum and CumProd (cumsum.c). */
slim_status slim__cumsum_infer(slim_op_ctx *ctx);
slim_status slim__cumsum_exec(slim_op_ctx *ctx);

#endif
