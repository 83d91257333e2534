/*
 * reduce_search.c - ArgMax, ArgMin and TopK: searches along one axis of the
 * [outer, r, inner] view that reduce.c's reductions use (reduce_impl.h).
 * Their op table entries stay in reduce.c (slim__ops_reduce).
 */
#include "reduce_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ArgMax / ArgMin ----------------------------------------------------- */

typedef struct {
    bool is_max, keepdims, last; /* select_last_index */
    int64_t axis;
} arg_state;

slim_status slim__arg_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    arg_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->is_max = strcmp(node->op_type, "ArgMax") == 0;
    st->keepdims = slim_attr_int(node, "keepdims", 1) != 0;
    st->last = slim_attr_int(node, "select_last_index", 0) != 0;
    st->axis = slim_attr_int(node, "axis", 0);
    *state = st;
    return SLIM_OK;
}

slim_status slim__arg_infer(slim_op_ctx *ctx)
{
    const arg_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input data", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_I8, SLIM_U8, SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input data is a scalar; needs rank >= 1");
    int axis;
    if ((s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err)))
        return s;
    if (x->dims[axis] == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "axis %d has size 0: no element to select",
                         axis);
    int64_t dims[SLIM_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != axis)
            dims[nd++] = x->dims[i];
        else if (st->keepdims)
            dims[nd++] = 1;
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, nd, dims);
    return SLIM_OK;
}

typedef struct {
    const arg_state *st;
    const slim_tensor *x;
    int64_t *y;
    int64_t r, inner;
} arg_job;

/* long double holds every int64, uint64 and double exactly on the
 * platforms we build for (x87 extended or binary128), so one comparison
 * path serves every dtype. */
static long double load_key(slim_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case SLIM_I64: return ((const int64_t *)data)[i];
    case SLIM_U64: return ((const uint64_t *)data)[i];
    default: return slim_load_f64(dt, data, i);
    }
}

static void arg_task(int64_t begin, int64_t end, void *user)
{
    const arg_job *j = user;
    bool is_max = j->st->is_max, last = j->st->last;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->inner, i = u % j->inner, base = o * j->r * j->inner + i;
        int64_t best = 0;
        if (j->x->dtype == SLIM_F32) {
            const float *p = (const float *)j->x->data + base;
            float bv = p[0];
            for (int64_t k = 1; k < j->r; k++) {
                float v = p[k * j->inner];
                bool better = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                if (better) {
                    bv = v;
                    best = k;
                }
            }
        } else {
            long double bv = load_key(j->x->dtype, j->x->data, base);
            for (int64_t k = 1; k < j->r; k++) {
                long double v = load_key(j->x->dtype, j->x->data, base + k * j->inner);
                bool better = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                if (better) {
                    bv = v;
                    best = k;
                }
            }
        }
        j->y[u] = best;
    }
}

slim_status slim__arg_exec(slim_op_ctx *ctx)
{
    const arg_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err);
    if (s)
        return s;
    arg_job j = {.st = st, .x = x, .y = ctx->out[0]->data};
    int64_t outer;
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    slim_parallel_for(outer * j.inner, grain_for(j.r), arg_task, &j);
    return SLIM_OK;
}

/* ---- TopK ---------------------------------------------------------------- */

typedef struct {
    int64_t axis, k; /* k: attribute of opset 1, else -1 */
    bool largest, sorted;
} topk_state;

slim_status slim__topk_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    topk_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->axis = slim_attr_int(node, "axis", -1);
    st->k = node->opset < 10 ? slim_attr_int(node, "k", -1) : -1;
    st->largest = slim_attr_int(node, "largest", 1) != 0;
    st->sorted = slim_attr_int(node, "sorted", 1) != 0;
    if (node->opset < 10 && st->k < 0) {
        free(st);
        return slim_errf(err, SLIM_EINVAL, "attribute k is missing or negative");
    }
    *state = st;
    return SLIM_OK;
}

static slim_status topk_params(const slim_op_ctx *ctx, int *axis, int64_t *k)
{
    const topk_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X is a scalar; needs rank >= 1");
    slim_status s = slim_norm_axis(st->axis, x->ndim, axis, ctx->err);
    if (s)
        return s;
    *k = st->k;
    if (st->k < 0) {
        if (ctx->n_in < 2 || !ctx->in[1])
            return slim_errf(ctx->err, SLIM_EINVAL, "input K is missing");
        int n;
        if ((s = slim_read_ints(ctx->in[1], "input K", k, 1, &n, ctx->err)))
            return s;
        if (n != 1)
            return slim_errf(ctx->err, SLIM_EINVAL, "input K must hold one value");
    }
    if (*k < 0 || *k > x->dims[*axis])
        return slim_errf(ctx->err, SLIM_EINVAL, "k = %lld is outside [0, %lld] (axis %d)",
                         (long long)*k, (long long)x->dims[*axis], *axis);
    return SLIM_OK;
}

slim_status slim__topk_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_I8, SLIM_U8, SLIM_I16, SLIM_U16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    int axis;
    int64_t k;
    if ((s = topk_params(ctx, &axis, &k)))
        return s;
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(int64_t) * x->ndim);
    dims[axis] = k;
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_I64, x->ndim, dims);
    return SLIM_OK;
}

typedef struct {
    long double key;
    int64_t idx;
} topk_item;

/* The order TopK emits: larger key first, the lower index on ties. NaN
 * counts as larger than everything so that the order stays total (qsort
 * must never see an inconsistent comparison). */
static bool topk_before(const topk_item *a, const topk_item *b)
{
    bool an = isnan(a->key), bn = isnan(b->key);
    if (an != bn)
        return an;
    if (!an && a->key != b->key)
        return a->key > b->key;
    return a->idx < b->idx;
}

static int topk_cmp(const void *pa, const void *pb)
{
    return topk_before(pa, pb) ? -1 : topk_before(pb, pa) ? 1 : 0;
}

/* Min-heap under topk_before: the root is the worst of the kept k. */
static void heap_sift_down(topk_item *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && topk_before(&h[w], &h[l]))
            w = l;
        if (r < n && topk_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        topk_item t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

typedef struct {
    const slim_tensor *x;
    slim_tensor *vals, *idxs;
    int64_t r, inner, k;
    bool largest;
    bool failed;
} topk_job;

static void topk_task(int64_t begin, int64_t end, void *user)
{
    topk_job *j = user;
    /* A heap of k beats sorting all r only when k is small against r. */
    bool use_heap = j->k * 4 < j->r;
    /* raw: per chunk on a kernel thread, which has no account to charge (parallel.c carries only the cancel token); one row of the input */
    topk_item *items = malloc(sizeof(topk_item) * (size_t)(use_heap ? j->k : j->r));
    if (!items) {
        j->failed = true;
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->inner, i = u % j->inner, base = o * j->r * j->inner + i;
        int64_t n = 0;
        for (int64_t e = 0; e < j->r; e++) {
            long double v = load_key(j->x->dtype, j->x->data, base + e * j->inner);
            topk_item it = {j->largest ? v : -v, e};
            if (!use_heap) {
                items[n++] = it;
            } else if (n < j->k) {
                items[n++] = it;
                if (n == j->k)
                    for (int64_t h = n / 2 - 1; h >= 0; h--)
                        heap_sift_down(items, n, h);
            } else if (topk_before(&it, &items[0])) {
                items[0] = it;
                heap_sift_down(items, n, 0);
            }
        }
        qsort(items, (size_t)n, sizeof(topk_item), topk_cmp);
        int64_t out_base = o * j->k * j->inner + i;
        for (int64_t e = 0; e < j->k; e++) {
            int64_t at = out_base + e * j->inner, src = base + items[e].idx * j->inner;
            if (j->vals) {
                size_t es = slim_dtype_size(j->x->dtype);
                memcpy((char *)j->vals->data + at * es, (const char *)j->x->data + src * es, es);
            }
            if (j->idxs)
                ((int64_t *)j->idxs->data)[at] = items[e].idx;
        }
    }
    free(items);
}

slim_status slim__topk_exec(slim_op_ctx *ctx)
{
    const topk_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    int64_t k, outer;
    slim_status s = topk_params(ctx, &axis, &k);
    if (s)
        return s;
    topk_job j = {.x = x, .vals = ctx->out[0], .idxs = ctx->n_out > 1 ? ctx->out[1] : NULL,
                  .k = k, .largest = st->largest};
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    if (k == 0 || outer * j.inner == 0)
        return SLIM_OK;
    slim_parallel_for(outer * j.inner, grain_for(j.r * 8), topk_task, &j);
    if (j.failed)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory sorting %lld elements",
                         (long long)j.r);
    return SLIM_OK;
}
