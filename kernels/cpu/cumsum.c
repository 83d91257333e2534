/*
 * cumsum.c - CumSum and CumProd: one scan along an axis of the
 * [outer, r, inner] view (reduce_impl.h), + or *. Their op table entries
 * stay in reduce.c (slim__ops_reduce).
 */
#include "reduce_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- CumSum, CumProd: one scan, + or * ------------------------------------ */

slim_status slim__cumsum_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input x", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (ctx->n_in < 2 || !ctx->in[1])
        return slim_errf(ctx->err, SLIM_EINVAL, "input axis is missing");
    if ((s = slim_check_dtype(ctx->in[1], "input axis", ctx->err, SLIM_I32, SLIM_I64,
                              SLIM_DTYPE_UNDEFINED)))
        return s;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input x is a scalar; needs rank >= 1");
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

typedef struct {
    slim_dtype dt;
    const void *x;
    void *y;
    int64_t r, inner, n_blocks;
    bool exclusive, reverse, prod;
} cumsum_job;

/* Integer products wrap (as ONNX Runtime's do) instead of overflowing,
 * which would be undefined behaviour in signed C arithmetic. */
static inline int64_t scan_mul_i64(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
static inline double scan_mul_f64(double a, double b)
{
    return a * b;
}
#define SCAN_MUL(a, b) _Generic((a), int64_t: scan_mul_i64, default: scan_mul_f64)(a, b)

#define CUMSUM_UNIT(T, load, store)                                                   \
    static void cumsum_unit_##T(const cumsum_job *j, int64_t o, int64_t i0, int64_t n) \
    {                                                                                 \
        T acc[CHUNK], row[CHUNK];                                                     \
        for (int64_t i = 0; i < n; i++)                                               \
            acc[i] = j->prod ? 1 : 0;                                                 \
        for (int64_t step = 0; step < j->r; step++) {                                 \
            int64_t k = j->reverse ? j->r - 1 - step : step;                          \
            int64_t off = (o * j->r + k) * j->inner + i0;                             \
            load(j->dt, j->x, off, n, row);                                           \
            if (j->exclusive) {                                                       \
                store(j->dt, j->y, off, n, acc);                                      \
                for (int64_t i = 0; i < n; i++)                                       \
                    acc[i] = j->prod ? SCAN_MUL(acc[i], row[i]) : acc[i] + row[i];     \
            } else {                                                                  \
                for (int64_t i = 0; i < n; i++)                                       \
                    acc[i] = j->prod ? SCAN_MUL(acc[i], row[i]) : acc[i] + row[i];     \
                store(j->dt, j->y, off, n, acc);                                      \
            }                                                                         \
        }                                                                             \
    }

CUMSUM_UNIT(double, load_f64, store_f64)
CUMSUM_UNIT(int64_t, load_i64, store_i64)

static void cumsum_task(int64_t begin, int64_t end, void *user)
{
    const cumsum_job *j = user;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_blocks, i0 = (u % j->n_blocks) * CHUNK;
        int64_t n = j->inner - i0 < CHUNK ? j->inner - i0 : CHUNK;
        if (is_intlike(j->dt))
            cumsum_unit_int64_t(j, o, i0, n);
        else
            cumsum_unit_double(j, o, i0, n);
    }
}

slim_status slim__cumsum_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axis_v, outer;
    int axis;
    slim_status s = slim_read_scalar_i64(ctx->in[1], "input axis", &axis_v, ctx->err);
    if (s || (s = slim_norm_axis(axis_v, x->ndim, &axis, ctx->err)))
        return s;
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    cumsum_job j = {.dt = x->dtype, .x = x->data, .y = ctx->out[0]->data,
                    .exclusive = slim_attr_int(ctx->node, "exclusive", 0) != 0,
                    .reverse = slim_attr_int(ctx->node, "reverse", 0) != 0,
                    .prod = strcmp(ctx->node->op_type, "CumProd") == 0};
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    j.n_blocks = (j.inner + CHUNK - 1) / CHUNK;
    int64_t per_unit = j.r * (j.inner < CHUNK ? j.inner : CHUNK);
    slim_parallel_for(outer * j.n_blocks, grain_for(per_unit), cumsum_task, &j);
    return SLIM_OK;
}
