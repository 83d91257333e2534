/*
 * pad.c - Pad (constant, reflect, edge and wrap; negative pads crop) and
 * CenterCropPad, which is a Pad with constant zeros whose begin/end come
 * from the target shape, centered.
 *
 * Works on raw bytes by element size, so every dtype comes for free. Each
 * output row is copied from its source row (the clamped, reflected or
 * wrapped one) with the pad elements written around it; rows are the work
 * items handed to slim_parallel_for.
 */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

#define GRAIN_BYTES (64 * 1024) /* below this, a thread is not worth waking */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

static int pad_mode(const slim_node *node)
{
    const char *m = slim_attr_str(node, "mode", "constant");
    return !strcmp(m, "constant") ? PAD_CONSTANT : !strcmp(m, "reflect") ? PAD_REFLECT
         : !strcmp(m, "edge") ? PAD_EDGE : !strcmp(m, "wrap") ? PAD_WRAP : -1;
}

static slim_status pad_prepare(slim_node *node, void **state, slim_err *err)
{
    if (pad_mode(node) < 0)
        return slim_errf(err, SLIM_EUNSUPPORTED, "mode \"%s\" is not supported",
                         slim_attr_str(node, "mode", ""));
    return SLIM_OK;
}

/* begin/end padding per axis (negative crops); the attribute/input forms
 * changed at opsets 2, 11 and 18. */
static slim_status pad_geometry(slim_op_ctx *ctx, int64_t *begin, int64_t *end)
{
    const slim_tensor *x = ctx->in[0];
    int r = x->ndim, n, na = -1;
    int64_t pads[2 * SLIM_MAX_DIMS], axes[SLIM_MAX_DIMS];
    slim_status st;
    if (ctx->node->opset < 11) {
        n = slim_attr_ints(ctx->node, ctx->node->opset < 2 ? "paddings" : "pads", pads,
                           2 * SLIM_MAX_DIMS);
        if (n < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "attribute pads is missing");
        if (n > 2 * SLIM_MAX_DIMS)
            n = 2 * SLIM_MAX_DIMS + 1;
    } else {
        if (!slim_opt_in(ctx, 1))
            return slim_errf(ctx->err, SLIM_EINVAL, "input pads is missing");
        if ((st = slim_read_ints(ctx->in[1], "pads", pads, 2 * SLIM_MAX_DIMS, &n, ctx->err)))
            return st;
        if (ctx->node->opset >= 18 && slim_opt_in(ctx, 3) &&
            (st = slim_read_ints(ctx->in[3], "axes", axes, SLIM_MAX_DIMS, &na, ctx->err)))
            return st;
    }
    int k = na >= 0 ? na : r;
    if (n != 2 * k)
        return slim_errf(ctx->err, SLIM_EINVAL, "pads has %d values, expected %d", n, 2 * k);
    for (int d = 0; d < r; d++)
        begin[d] = end[d] = 0;
    for (int i = 0; i < k; i++) {
        int a = i;
        if (na >= 0 && (st = slim_norm_axis(axes[i], r, &a, ctx->err)))
            return st;
        begin[a] = pads[i];
        end[a] = pads[i + k];
        if (x->dims[a] + begin[a] + end[a] < 0)
            return slim_errf(ctx->err, SLIM_ESHAPE, "pads crop axis %d below zero", a);
        if (x->dims[a] == 0 && pad_mode(ctx->node) != PAD_CONSTANT && begin[a] + end[a] > 0)
            return slim_errf(ctx->err, SLIM_ESHAPE, "cannot %s-pad the empty axis %d",
                             slim_attr_str(ctx->node, "mode", ""), a);
    }
    return SLIM_OK;
}

static slim_status pad_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t b[SLIM_MAX_DIMS], e[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    slim_status st = pad_geometry(ctx, b, e);
    if (st)
        return st;
    for (int d = 0; d < x->ndim; d++)
        dims[d] = x->dims[d] + b[d] + e[d];
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

typedef struct {
    const slim_tensor *x;
    slim_tensor *y;
    int64_t *map[SLIM_MAX_DIMS]; /* output coordinate -> source coordinate, -1 = constant */
    int64_t stride[SLIM_MAX_DIMS];
    int64_t lo, hi;              /* output run of the last axis that copies straight */
    unsigned char value[8];
} pad_plan;

static int64_t pad_source(int mode, int64_t c, int64_t dim)
{
    if (c >= 0 && c < dim)
        return c;
    switch (mode) {
    case PAD_EDGE: return c < 0 ? 0 : dim - 1;
    case PAD_WRAP: return (c % dim + dim) % dim;
    case PAD_REFLECT: {
        if (dim == 1)
            return 0;
        int64_t period = 2 * (dim - 1), m = (c % period + period) % period;
        return m < dim ? m : period - m;
    }
    default: return -1;
    }
}

static void pad_rows_job(int64_t begin, int64_t end, void *user)
{
    const pad_plan *p = user;
    int last = p->y->ndim - 1;
    int64_t w = p->y->dims[last];
    size_t es = slim_dtype_size(p->x->dtype);
    const char *src = p->x->data;
    for (int64_t row = begin; row < end; row++) {
        char *dst = (char *)p->y->data + row * w * (int64_t)es;
        int64_t off = 0, r = row;
        bool outside = false;
        for (int d = last - 1; d >= 0; d--) {
            int64_t m = p->map[d][r % p->y->dims[d]];
            r /= p->y->dims[d];
            outside |= m < 0;
            off += m * p->stride[d];
        }
        if (outside) {
            slim_fill_elems(dst, w, p->value, es);
            continue;
        }
        for (int64_t o = 0; o < w; o++) {
            if (o == p->lo && p->hi > p->lo) { /* the straight run in one go */
                memcpy(dst + o * (int64_t)es, src + (off + p->map[last][o]) * (int64_t)es,
                       (size_t)(p->hi - p->lo) * es);
                o = p->hi - 1;
                continue;
            }
            int64_t m = p->map[last][o];
            memcpy(dst + o * (int64_t)es, m < 0 ? (const char *)p->value
                                                : src + (off + m) * (int64_t)es, es);
        }
    }
}

/* Pads (or crops, for negative amounts) x into y; shared by Pad and
 * CenterCropPad. value is one element of x's type. */
static slim_status pad_run(const slim_tensor *x, slim_tensor *y, const int64_t *b, int mode,
                           const unsigned char *value, slim_err *err)
{
    size_t es = slim_dtype_size(x->dtype);
    int64_t total = slim_tensor_numel(y);
    if (total == 0)
        return SLIM_OK;
    if (x->ndim == 0) {
        memcpy(y->data, x->data, es);
        return SLIM_OK;
    }
    pad_plan p = {.x = x, .y = y};
    memcpy(p.value, value, es);
    int64_t sum = 0;
    for (int d = 0; d < y->ndim; d++)
        sum += y->dims[d];
    int64_t *maps = slim_scratch_malloc(sizeof(int64_t) * (size_t)sum);
    if (!maps)
        return slim_scratch_oom(err);
    int64_t at = 0;
    for (int d = 0; d < y->ndim; at += y->dims[d], d++) {
        p.map[d] = maps + at;
        for (int64_t o = 0; o < y->dims[d]; o++)
            p.map[d][o] = pad_source(mode, o - b[d], x->dims[d]);
    }
    slim_contiguous_strides(x->ndim, x->dims, p.stride);
    int last = y->ndim - 1;
    p.lo = b[last] > 0 ? b[last] : 0;
    p.hi = b[last] + x->dims[last] < y->dims[last] ? b[last] + x->dims[last] : y->dims[last];
    int64_t w = y->dims[last];
    slim_parallel_for(total / w, 1 + GRAIN_BYTES / (w * (int64_t)es), pad_rows_job, &p);
    slim_scratch_free(maps);
    return SLIM_OK;
}

static slim_status pad_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t b[SLIM_MAX_DIMS], e[SLIM_MAX_DIMS];
    slim_status st = pad_geometry(ctx, b, e);
    if (st)
        return st;
    unsigned char value[8] = {0};
    const slim_tensor *cv = ctx->node->opset >= 11 ? slim_opt_in(ctx, 2) : NULL;
    if (cv && slim_tensor_numel(cv) > 0) {
        if (!cv->data)
            return slim_errf(ctx->err, SLIM_ENEEDVALUE, "constant_value is not known");
        if (cv->dtype == x->dtype)
            memcpy(value, cv->data, slim_dtype_size(x->dtype));
        else if (slim_dtype_is_float(x->dtype))
            slim_store_f64(x->dtype, value, 0, slim_load_f64(cv->dtype, cv->data, 0));
        else
            slim_store_i64(x->dtype, value, 0, slim_load_i64(cv->dtype, cv->data, 0));
    } else if (ctx->node->opset < 11) {
        slim_store_f64(x->dtype, value, 0, slim_attr_float(ctx->node, "value", 0.0f));
    }
    return pad_run(x, ctx->out[0], b, pad_mode(ctx->node), value, ctx->err);
}

/* CenterCropPad: each listed axis is cropped or zero-padded to the target
 * size around its centre (the extra element, if any, goes after). */
static slim_status ccp_geometry(slim_op_ctx *ctx, int64_t *begin, int64_t *out)
{
    const slim_tensor *x = ctx->in[0];
    int64_t shape[SLIM_MAX_DIMS], axes[SLIM_MAX_DIMS];
    int n, na = slim_attr_ints(ctx->node, "axes", axes, SLIM_MAX_DIMS);
    slim_status st = slim_read_ints(ctx->in[1], "shape", shape, SLIM_MAX_DIMS, &n, ctx->err);
    if (st)
        return st;
    if (na > SLIM_MAX_DIMS || (na >= 0 ? na : x->ndim) != n)
        return slim_errf(ctx->err, SLIM_EINVAL, "shape has %d values for %d axes", n,
                         na >= 0 ? na : x->ndim);
    for (int d = 0; d < x->ndim; d++) {
        begin[d] = 0;
        out[d] = x->dims[d];
    }
    for (int i = 0; i < n; i++) {
        int a = i;
        if (na >= 0 && (st = slim_norm_axis(axes[i], x->ndim, &a, ctx->err)))
            return st;
        if (shape[i] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "shape[%d] is negative", i);
        int64_t diff = shape[i] - x->dims[a];
        begin[a] = diff >= 0 ? diff / 2 : -(-diff / 2);
        out[a] = shape[i];
    }
    return SLIM_OK;
}

static slim_status ccp_infer(slim_op_ctx *ctx)
{
    int64_t b[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    slim_status st = ccp_geometry(ctx, b, dims);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, ctx->in[0]->ndim, dims);
    return st;
}

static slim_status ccp_exec(slim_op_ctx *ctx)
{
    int64_t b[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    unsigned char zero[8] = {0};
    slim_status st = ccp_geometry(ctx, b, dims);
    return st ? st : pad_run(ctx->in[0], ctx->out[0], b, PAD_CONSTANT, zero, ctx->err);
}

const slim_op_def slim__ops_pad[] = {
    {"Pad", 1, pad_prepare, NULL, pad_infer, pad_exec, 0},
    {"CenterCropPad", 18, NULL, NULL, ccp_infer, ccp_exec, 0},
    {0},
};
