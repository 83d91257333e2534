/*
 * select.c - operators that pick, reorder or overwrite slices of a tensor
 * along one axis: Compress, Unique, ReverseSequence and TensorScatter.
 *
 * All of them move whole elements without reading them as numbers (Unique
 * compares them), so they work on any dtype by copying elem-size bytes.
 * The tensor is viewed as [outer, n, inner] around the axis, as in
 * reduce.c; a slice k is the outer x inner elements with index k.
 *
 * Compress and Unique have output shapes that depend on input values: their
 * infer returns SLIM_ENEEDVALUE until the data is there, and the executor
 * sizes the outputs at run time.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void split_axis(const slim_tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++)
        *outer *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++)
        *inner *= x->dims[d];
    *n = x->dims[axis];
}

/* ---- Compress ------------------------------------------------------------ */

/* The axis, or -1 for "flatten first"; *count the slices kept. */
static slim_status compress_plan(slim_op_ctx *ctx, int *axis, int64_t *count)
{
    const slim_tensor *x = ctx->in[0], *c = ctx->in[1];
    slim_status s = slim_check_dtype(c, "condition", ctx->err, SLIM_BOOL, SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (c->ndim != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "condition has %d dims, expected 1", c->ndim);
    *axis = -1;
    if (slim_node_attr(ctx->node, "axis") &&
        (s = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, axis, ctx->err)))
        return s;
    int64_t extent = *axis < 0 ? slim_tensor_numel(x) : x->dims[*axis];
    /* Like numpy.compress: a shorter condition drops the slices past its
     * end; a longer one is a mistake. */
    if (c->dims[0] > extent)
        return slim_errf(ctx->err, SLIM_ESHAPE, "condition has %lld entries but the %s has %lld",
                         (long long)c->dims[0], *axis < 0 ? "flattened input" : "axis",
                         (long long)extent);
    if (c->dims[0] > 0 && !c->data)
        return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the output size depends on the condition");
    *count = 0;
    for (int64_t i = 0; i < c->dims[0]; i++)
        *count += ((const uint8_t *)c->data)[i] != 0;
    return SLIM_OK;
}

static slim_status compress_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int axis;
    int64_t count;
    slim_status s = compress_plan(ctx, &axis, &count);
    if (s)
        return s;
    if (axis < 0) {
        slim_tensor_set_shape(ctx->out[0], x->dtype, 1, &count);
    } else {
        slim_tensor_set_like(ctx->out[0], x);
        ctx->out[0]->dims[axis] = count;
    }
    return SLIM_OK;
}

static slim_status compress_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *c = ctx->in[1];
    int axis;
    int64_t count, outer = 1, n = slim_tensor_numel(x), inner = 1;
    slim_status s = compress_plan(ctx, &axis, &count);
    if (s)
        return s;
    if (axis >= 0)
        split_axis(x, axis, &outer, &n, &inner);
    const size_t es = slim_dtype_size(x->dtype), row = es * (size_t)inner;
    const uint8_t *cond = c->data, *src = x->data;
    uint8_t *dst = ctx->out[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < c->dims[0]; k++)
            if (cond[k]) {
                memcpy(dst, src + (size_t)(o * n + k) * row, row);
                dst += row;
            }
    return SLIM_OK;
}

/* ---- Unique -------------------------------------------------------------- */

/* Items are elements (no axis) or slices along the axis, compared
 * lexicographically over their elements in row-major order, as
 * numpy.unique(axis=) does. */
typedef struct {
    const slim_tensor *x;
    int64_t outer, n, inner;
} uniq_view;

static int uniq_cmp(const uniq_view *v, int64_t a, int64_t b)
{
    for (int64_t o = 0; o < v->outer; o++)
        for (int64_t i = 0; i < v->inner; i++) {
            int64_t ia = (o * v->n + a) * v->inner + i, ib = (o * v->n + b) * v->inner + i;
            if (slim_dtype_is_float(v->x->dtype)) {
                double x = slim_load_f64(v->x->dtype, v->x->data, ia);
                double y = slim_load_f64(v->x->dtype, v->x->data, ib);
                if (x != y)
                    return x < y ? -1 : 1;
            } else if (v->x->dtype == SLIM_U64) {
                uint64_t x = ((const uint64_t *)v->x->data)[ia];
                uint64_t y = ((const uint64_t *)v->x->data)[ib];
                if (x != y)
                    return x < y ? -1 : 1;
            } else {
                int64_t x = slim_load_i64(v->x->dtype, v->x->data, ia);
                int64_t y = slim_load_i64(v->x->dtype, v->x->data, ib);
                if (x != y)
                    return x < y ? -1 : 1;
            }
        }
    return 0;
}

/* A stable merge sort of item ids (qsort is neither stable nor takes a
 * context portably); equal items keep their order, so the first of each
 * run is the first occurrence. */
static void uniq_sort(const uniq_view *v, int64_t *ids, int64_t *tmp, int64_t n)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    uniq_sort(v, ids, tmp, h);
    uniq_sort(v, ids + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = uniq_cmp(v, ids[j], ids[i]) < 0 ? ids[j++] : ids[i++];
    while (i < h)
        tmp[k++] = ids[i++];
    while (j < n)
        tmp[k++] = ids[j++];
    memcpy(ids, tmp, sizeof(int64_t) * (size_t)n);
}

/* The result of one Unique: first[u] the item that represents unique value
 * u, inverse[item] its u, count[u]. */
typedef struct {
    uniq_view v;
    int axis; /* -1: flattened */
    int64_t n_unique;
    int64_t *first, *inverse, *count;
} uniq_result;

static void uniq_free(uniq_result *r)
{
    slim_scratch_free(r->first);
    slim_scratch_free(r->inverse);
    slim_scratch_free(r->count);
}

static slim_status uniq_compute(slim_op_ctx *ctx, uniq_result *r)
{
    const slim_tensor *x = ctx->in[0];
    memset(r, 0, sizeof(*r));
    r->axis = -1;
    slim_status s;
    if (slim_node_attr(ctx->node, "axis") &&
        (s = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, &r->axis, ctx->err)))
        return s;
    if (x->dtype == SLIM_DTYPE_UNDEFINED || (!slim_dtype_is_float(x->dtype) &&
                                            !slim_dtype_is_int(x->dtype) && x->dtype != SLIM_BOOL))
        return slim_errf(ctx->err, SLIM_ETYPE, "X has type %s, expected a number or bool",
                         slim_dtype_name(x->dtype));
    r->v.x = x;
    if (r->axis < 0) {
        r->v.outer = r->v.inner = 1;
        r->v.n = slim_tensor_numel(x);
    } else {
        split_axis(x, r->axis, &r->v.outer, &r->v.n, &r->v.inner);
    }
    if (slim_tensor_numel(x) > 0 && !x->data)
        return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the output size depends on the input values");
    const int64_t n = r->v.n;
    size_t bytes = sizeof(int64_t) * (size_t)(n > 0 ? n : 1);
    int64_t *ids = slim_scratch_malloc(bytes), *tmp = slim_scratch_malloc(bytes);
    r->first = slim_scratch_malloc(bytes);
    r->inverse = slim_scratch_malloc(bytes);
    r->count = slim_scratch_malloc(bytes);
    if (!ids || !tmp || !r->first || !r->inverse || !r->count) {
        slim_scratch_free(ids);
        slim_scratch_free(tmp);
        uniq_free(r);
        return slim_scratch_oom(ctx->err);
    }
    for (int64_t i = 0; i < n; i++)
        ids[i] = i;
    /* An empty slice (outer or inner of 0) makes every item equal. */
    uniq_sort(&r->v, ids, tmp, n);
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || uniq_cmp(&r->v, ids[i - 1], ids[i]) != 0) {
            r->first[r->n_unique] = ids[i];
            r->count[r->n_unique++] = 0;
        }
        r->inverse[ids[i]] = r->n_unique - 1;
        r->count[r->n_unique - 1]++;
    }
    if (!slim_attr_int(ctx->node, "sorted", 1)) {
        /* Renumber unique values by first occurrence: walking items in
         * order meets each value's first item first. */
        int64_t *map = tmp, next = 0; /* map: sorted rank -> new rank */
        for (int64_t u = 0; u < r->n_unique; u++)
            map[u] = -1;
        for (int64_t i = 0; i < n; i++)
            if (map[r->inverse[i]] < 0)
                map[r->inverse[i]] = next++;
        for (int64_t u = 0; u < r->n_unique; u++)
            ids[map[u]] = r->first[u];
        int64_t *cnt = slim_scratch_malloc(bytes);
        if (!cnt) {
            slim_scratch_free(ids);
            slim_scratch_free(tmp);
            uniq_free(r);
            return slim_scratch_oom(ctx->err);
        }
        for (int64_t u = 0; u < r->n_unique; u++)
            cnt[map[u]] = r->count[u];
        for (int64_t i = 0; i < n; i++)
            r->inverse[i] = map[r->inverse[i]];
        memcpy(r->first, ids, sizeof(int64_t) * (size_t)r->n_unique);
        memcpy(r->count, cnt, sizeof(int64_t) * (size_t)r->n_unique);
        slim_scratch_free(cnt);
    }
    slim_scratch_free(ids);
    slim_scratch_free(tmp);
    return SLIM_OK;
}

static slim_status uniq_infer(slim_op_ctx *ctx)
{
    uniq_result r;
    slim_status s = uniq_compute(ctx, &r);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0];
    if (r.axis < 0) {
        slim_tensor_set_shape(ctx->out[0], x->dtype, 1, &r.n_unique);
    } else {
        slim_tensor_set_like(ctx->out[0], x);
        ctx->out[0]->dims[r.axis] = r.n_unique;
    }
    for (int i = 1; i < ctx->n_out; i++)
        if (ctx->out[i])
            slim_tensor_set_shape(ctx->out[i], SLIM_I64, 1,
                                  i == 2 ? &r.v.n : &r.n_unique);
    uniq_free(&r);
    return SLIM_OK;
}

static slim_status uniq_exec(slim_op_ctx *ctx)
{
    uniq_result r;
    slim_status s = uniq_compute(ctx, &r);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0];
    const size_t row = slim_dtype_size(x->dtype) * (size_t)r.v.inner;
    uint8_t *dst = ctx->out[0]->data;
    for (int64_t o = 0; o < r.v.outer; o++)
        for (int64_t u = 0; u < r.n_unique; u++) {
            memcpy(dst, (const uint8_t *)x->data + (size_t)(o * r.v.n + r.first[u]) * row, row);
            dst += row;
        }
    const int64_t *src[4] = {NULL, r.first, r.inverse, r.count};
    for (int i = 1; i < ctx->n_out && i < 4; i++)
        if (ctx->out[i] && ctx->out[i]->data)
            memcpy(ctx->out[i]->data, src[i], sizeof(int64_t) * (size_t)slim_tensor_numel(ctx->out[i]));
    uniq_free(&r);
    return SLIM_OK;
}

/* ---- ReverseSequence ----------------------------------------------------- */

static slim_status revseq_axes(slim_op_ctx *ctx, int *batch, int *time)
{
    const slim_tensor *x = ctx->in[0], *lens = ctx->in[1];
    slim_status s;
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has %d dims, expected at least 2", x->ndim);
    if ((s = slim_norm_axis(slim_attr_int(ctx->node, "batch_axis", 1), x->ndim, batch, ctx->err)) ||
        (s = slim_norm_axis(slim_attr_int(ctx->node, "time_axis", 0), x->ndim, time, ctx->err)))
        return s;
    if (*batch > 1 || *time > 1 || *batch == *time)
        return slim_errf(ctx->err, SLIM_EINVAL, "batch_axis = %d and time_axis = %d must be 0 and "
                         "1 or 1 and 0", *batch, *time);
    if ((s = slim_check_dtype(lens, "sequence_lens", ctx->err, SLIM_I64, SLIM_DTYPE_UNDEFINED)))
        return s;
    if (lens->ndim != 1 || lens->dims[0] != x->dims[*batch])
        return slim_errf(ctx->err, SLIM_ESHAPE, "sequence_lens has shape [%lld...] (rank %d), "
                         "expected [%lld]", (long long)(lens->ndim ? lens->dims[0] : 0),
                         lens->ndim, (long long)x->dims[*batch]);
    return SLIM_OK;
}

static slim_status revseq_infer(slim_op_ctx *ctx)
{
    int b, t;
    slim_status s = revseq_axes(ctx, &b, &t);
    if (!s)
        slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return s;
}

static slim_status revseq_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int ba, ta;
    slim_status s = revseq_axes(ctx, &ba, &ta);
    if (s)
        return s;
    const int64_t *lens = ctx->in[1]->data;
    const int64_t B = x->dims[ba], T = x->dims[ta];
    int64_t inner = 1;
    for (int d = 2; d < x->ndim; d++)
        inner *= x->dims[d];
    const size_t row = slim_dtype_size(x->dtype) * (size_t)inner;
    for (int64_t b = 0; b < B; b++)
        if (lens[b] < 0 || lens[b] > T)
            return slim_errf(ctx->err, SLIM_EINVAL, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                             (long long)b, (long long)lens[b], (long long)T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
            /* Offsets of (b, t) in the [dim0, dim1, inner] view. */
            int64_t dst = ba == 0 ? b * T + t : t * B + b;
            int64_t src = ba == 0 ? b * T + from : from * B + b;
            memcpy((uint8_t *)ctx->out[0]->data + (size_t)dst * row,
                   (const uint8_t *)x->data + (size_t)src * row, row);
        }
    return SLIM_OK;
}

/* ---- TensorScatter ------------------------------------------------------- */

/* Writes `update` into a copy of `past_cache` along `axis` at each batch
 * entry's write index: a KV cache's present from its past. */
typedef struct {
    int64_t axis;
    bool circular;
} tscatter_state;

static slim_status tscatter_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *mode = slim_attr_str(node, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return slim_errf(err, SLIM_EINVAL, "mode \"%s\" is not linear or circular", mode);
    /* raw: fixed-size load-time state, freed with the model */
    tscatter_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->axis = slim_attr_int(node, "axis", -2);
    st->circular = strcmp(mode, "circular") == 0;
    *state = st;
    return SLIM_OK;
}

static slim_status tscatter_check(slim_op_ctx *ctx, int *axis)
{
    const tscatter_state *st = ctx->state;
    const slim_tensor *c = ctx->in[0], *u = ctx->in[1];
    const slim_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    char a[128], b[128];
    slim_status s = slim_norm_axis(st->axis, c->ndim, axis, ctx->err);
    if (s)
        return s;
    if (*axis == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "axis 0 is the batch axis; the sequence axis "
                         "must come after it");
    if (u->dtype != c->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "update is %s but past_cache is %s",
                         slim_dtype_name(u->dtype), slim_dtype_name(c->dtype));
    bool ok = u->ndim == c->ndim;
    for (int d = 0; ok && d < c->ndim; d++)
        ok = d == *axis ? u->dims[d] <= c->dims[d] : u->dims[d] == c->dims[d];
    if (!ok)
        return slim_errf(ctx->err, SLIM_ESHAPE, "update %s does not fit past_cache %s along axis %d",
                         slim_shape_str(u->ndim, u->dims, a, sizeof(a)),
                         slim_shape_str(c->ndim, c->dims, b, sizeof(b)), *axis);
    if (w && ((s = slim_check_dtype(w, "write_indices", ctx->err, SLIM_I64, SLIM_DTYPE_UNDEFINED)) ||
              w->ndim != 1 || w->dims[0] != c->dims[0]))
        return s ? s : slim_errf(ctx->err, SLIM_ESHAPE, "write_indices %s must be [%lld]",
                                 slim_shape_str(w->ndim, w->dims, a, sizeof(a)),
                                 (long long)c->dims[0]);
    return SLIM_OK;
}

static slim_status tscatter_infer(slim_op_ctx *ctx)
{
    int axis;
    slim_status s = tscatter_check(ctx, &axis);
    if (!s)
        slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return s;
}

static slim_status tscatter_exec(slim_op_ctx *ctx)
{
    const tscatter_state *st = ctx->state;
    const slim_tensor *c = ctx->in[0], *u = ctx->in[1];
    const slim_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int axis;
    slim_status s = tscatter_check(ctx, &axis);
    if (s)
        return s;
    int64_t outer, n, inner, per_batch = 1;
    split_axis(c, axis, &outer, &n, &inner);
    for (int d = 1; d < axis; d++)
        per_batch *= c->dims[d];
    const int64_t S = u->dims[axis];
    const size_t row = slim_dtype_size(c->dtype) * (size_t)inner;
    for (int64_t b = 0; b < c->dims[0]; b++) {
        int64_t at = w ? ((const int64_t *)w->data)[b] : 0;
        if (!st->circular && (at < 0 || at > n - S))
            return slim_errf(ctx->err, SLIM_EINVAL, "write_indices[%lld] = %lld: %lld entries do "
                             "not fit in %lld", (long long)b, (long long)at, (long long)S,
                             (long long)n);
        if (st->circular && at < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "write_indices[%lld] = %lld is negative",
                             (long long)b, (long long)at);
    }
    uint8_t *y = ctx->out[0]->data;
    if (y != c->data && slim_tensor_nbytes(c))
        memcpy(y, c->data, slim_tensor_nbytes(c));
    for (int64_t o = 0; o < outer; o++) {
        int64_t b = o / (per_batch ? per_batch : 1);
        int64_t at = w ? ((const int64_t *)w->data)[b] : 0;
        for (int64_t t = 0; t < S; t++) {
            int64_t pos = st->circular ? (at + t) % n : at + t;
            memcpy(y + (size_t)(o * n + pos) * row,
                   (const uint8_t *)u->data + (size_t)(o * S + t) * row, row);
        }
    }
    return SLIM_OK;
}

const slim_op_def slim__ops_select[] = {
    {"Compress", 9, NULL, NULL, compress_infer, compress_exec, 0},
    {"Unique", 11, NULL, NULL, uniq_infer, uniq_exec, 0},
    {"ReverseSequence", 10, NULL, NULL, revseq_infer, revseq_exec, 0},
    {"TensorScatter", 24, tscatter_prepare, free, tscatter_infer, tscatter_exec, 0},
    {0},
};
