/*
 * softmax.c - Softmax, LogSoftmax and Hardmax over one axis. Rows (the
 * elements along the axis) are gathered into double scratch and computed
 * there, so every float type shares one accurate path; a contiguous
 * float32 row (the axis last) has a direct one, sm_row_f32.
 */
#include "kernel.h"
#include "norm_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SM_SOFT, SM_LOG, SM_HARD } sm_kind;

typedef struct {
    sm_kind kind;
    int64_t axis;
    bool coerce_2d; /* opset < 13: flatten to [prod(dims[:axis]), prod(dims[axis:])] */
} sm_state;

static slim_status sm_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    sm_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->kind = strcmp(node->op_type, "Softmax") == 0      ? SM_SOFT
               : strcmp(node->op_type, "LogSoftmax") == 0 ? SM_LOG
                                                          : SM_HARD;
    st->coerce_2d = node->opset < 13;
    st->axis = slim_attr_int(node, "axis", st->coerce_2d ? 1 : -1);
    *state = st;
    return SLIM_OK;
}

static slim_status sm_infer(slim_op_ctx *ctx)
{
    const sm_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = check_float(x, "input", ctx->err);
    if (s || (s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err)))
        return s;
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

typedef struct {
    sm_kind kind;
    const slim_tensor *x;
    slim_tensor *y;
    int64_t r, inner;
    int64_t width, n_blocks; /* columns per task block, blocks per outer row */
    bool failed;
} sm_job;

/* The hot case: one contiguous float32 row, in float with expf. */
static void sm_row_f32(sm_kind kind, const float *x, float *y, int64_t n)
{
    float m = x[0];
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m) {
            m = x[i];
            best = i;
        }
    double sum = 0;
    if (kind == SM_SOFT) {
        for (int64_t i = 0; i < n; i++) {
            y[i] = expf(x[i] - m);
            sum += y[i];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < n; i++)
            y[i] *= inv;
    } else if (kind == SM_LOG) {
        for (int64_t i = 0; i < n; i++)
            sum += exp((double)x[i] - m);
        double ls = log(sum);
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)((double)x[i] - m - ls);
    } else {
        memset(y, 0, sizeof(float) * (size_t)n);
        y[best] = 1;
    }
}

/* A block of r rows by w columns (v[k * w + c]), each column normalized
 * along k. Working row by row keeps the loops contiguous; `tmp` holds 3w
 * doubles. */
static void sm_block(sm_kind kind, double *v, int64_t r, int64_t w, double *tmp)
{
    double *m = tmp, *sum = tmp + w, *best = tmp + 2 * w;
    for (int64_t c = 0; c < w; c++) {
        m[c] = v[c];
        sum[c] = 0;
        best[c] = 0;
    }
    for (int64_t k = 1; k < r; k++)
        for (int64_t c = 0; c < w; c++)
            if (v[k * w + c] > m[c]) {
                m[c] = v[k * w + c];
                best[c] = (double)k;
            }
    if (kind == SM_HARD) {
        for (int64_t k = 0; k < r; k++)
            for (int64_t c = 0; c < w; c++)
                v[k * w + c] = best[c] == (double)k;
        return;
    }
    for (int64_t k = 0; k < r; k++)
        for (int64_t c = 0; c < w; c++) {
            double e = exp(v[k * w + c] - m[c]);
            sum[c] += e;
            if (kind == SM_SOFT)
                v[k * w + c] = e;
            else
                v[k * w + c] -= m[c];
        }
    for (int64_t c = 0; c < w; c++)
        sum[c] = kind == SM_SOFT ? 1.0 / sum[c] : log(sum[c]);
    for (int64_t k = 0; k < r; k++)
        for (int64_t c = 0; c < w; c++)
            v[k * w + c] = kind == SM_SOFT ? v[k * w + c] * sum[c] : v[k * w + c] - sum[c];
}

static void sm_task(int64_t begin, int64_t end, void *user)
{
    sm_job *j = user;
    slim_dtype dt = j->x->dtype;
    if (dt == SLIM_F32 && j->inner == 1) {
        for (int64_t o = begin; o < end; o++)
            sm_row_f32(j->kind, (const float *)j->x->data + o * j->r,
                       (float *)j->y->data + o * j->r, j->r);
        return;
    }
    /* raw: per chunk on a kernel thread, which has no account to charge (parallel.c carries only the cancel token); one row of the input */
    double *buf = malloc(sizeof(double) * (size_t)((j->r + 3) * j->width));
    if (!buf) {
        j->failed = true;
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_blocks, c0 = (u % j->n_blocks) * j->width;
        int64_t w = j->inner - c0 < j->width ? j->inner - c0 : j->width;
        /* A block spanning whole rows is one contiguous run. */
        int64_t runs = w == j->inner ? 1 : j->r, len = w == j->inner ? j->r * w : w;
        for (int64_t k = 0; k < runs; k++)
            gather(dt, j->x->data, (o * j->r + k) * j->inner + c0, 1, len, buf + k * w);
        sm_block(j->kind, buf, j->r, w, buf + j->r * j->width);
        for (int64_t k = 0; k < runs; k++)
            scatter(dt, j->y->data, (o * j->r + k) * j->inner + c0, 1, len, buf + k * w);
    }
    free(buf);
}

static slim_status sm_exec(slim_op_ctx *ctx)
{
    const sm_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    int axis;
    slim_status s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err);
    if (s)
        return s;
    sm_job j = {.kind = st->kind, .x = x, .y = ctx->out[0]};
    int64_t outer = slim_shape_numel(axis, x->dims);
    if (st->coerce_2d || x->ndim == 0) {
        j.r = slim_tensor_numel(x) / outer;
        j.inner = 1;
    } else {
        j.r = x->dims[axis];
        j.inner = slim_shape_numel(x->ndim - axis - 1, x->dims + axis + 1);
    }
    /* Blocks of about 4K values (one column when r alone is larger), so
     * that a block stays in cache between its passes. */
    j.width = 4096 / j.r;
    j.width = j.width < 1 ? 1 : j.width > j.inner ? j.inner : j.width;
    j.n_blocks = (j.inner + j.width - 1) / j.width;
    slim_parallel_for(outer * j.n_blocks, grain_for(j.r * j.width * 4), sm_task, &j);
    if (j.failed)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    return SLIM_OK;
}

const slim_op_def slim__ops_softmax[] = {
    {"Softmax", 1, sm_prepare, free, sm_infer, sm_exec, 0},
    {"LogSoftmax", 1, sm_prepare, free, sm_infer, sm_exec, 0},
    {"Hardmax", 1, sm_prepare, free, sm_infer, sm_exec, 0},
    {0},
};
