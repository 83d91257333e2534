/*
 * shape.c - ops that only re-view a tensor, or that build small tensors
 * from shapes, attributes and scalars.
 *
 *   views:      Reshape Flatten Squeeze Unsqueeze Identity Dropout
 *   shapes:     Shape Size
 *   generators: Constant ConstantOfShape Range EyeLike OneHot Trilu NonZero
 *
 * The view ops carry SLIM_OP_ALIAS0, so the executor gives output 0 the
 * input's buffer and no bytes move. Their exec still copies when the two
 * buffers differ: an executor that decides not to alias (the input is a graph
 * output it must keep, say) gets a correct result either way, and Dropout
 * needs exec anyway to fill its optional mask.
 *
 * Everything here works on raw bytes by element size, or through the
 * widening slim_load_* and slim_store_* helpers where values must be read, so
 * every dtype works without per-type code.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static slim_tensor *opt_out(const slim_op_ctx *ctx, int i)
{
    return i < ctx->n_out ? ctx->out[i] : NULL;
}

/* Copies src's bytes into dst unless the executor already aliased them. */
static void copy_view(slim_tensor *dst, const slim_tensor *src)
{
    size_t n = slim_tensor_nbytes(src);
    if (dst && n && dst->data != src->data)
        memcpy(dst->data, src->data, n);
}

static slim_status exec_view(slim_op_ctx *ctx)
{
    copy_view(ctx->out[0], ctx->in[0]);
    return SLIM_OK;
}


/* Reads an int list that is an attribute before opset `input_since` and an
 * optional input (index `slot`) from then on. *given is false if absent. */
static slim_status read_ints_attr_or_input(slim_op_ctx *ctx, const char *name, int input_since,
                                           int slot, int64_t *out, int *n, bool *given)
{
    *given = false;
    *n = 0;
    if (ctx->node->opset < input_since) {
        int k = slim_attr_ints(ctx->node, name, out, SLIM_MAX_DIMS);
        if (k < 0)
            return SLIM_OK;
        if (k > SLIM_MAX_DIMS)
            return slim_errf(ctx->err, SLIM_EINVAL, "attribute %s has %d values, at most %d",
                             name, k, SLIM_MAX_DIMS);
        *n = k;
        *given = true;
        return SLIM_OK;
    }
    const slim_tensor *t = slim_opt_in(ctx, slot);
    if (!t)
        return SLIM_OK;
    *given = true;
    return slim_read_ints(t, name, out, SLIM_MAX_DIMS, n, ctx->err);
}

/* ---- Reshape ------------------------------------------------------------ */

static slim_status reshape_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t shape[SLIM_MAX_DIMS];
    int n;
    bool given;
    slim_status st = read_ints_attr_or_input(ctx, "shape", 5, 1, shape, &n, &given);
    if (st)
        return st;
    if (!given)
        return slim_errf(ctx->err, SLIM_EINVAL, "the target shape is missing");
    bool allowzero = slim_attr_int(ctx->node, "allowzero", 0) != 0;

    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->ndim)
                return slim_errf(ctx->err, SLIM_ESHAPE,
                                 "shape[%d] = 0 copies input dim %d, but the input has rank %d",
                                 i, i, x->ndim);
            shape[i] = x->dims[i];
        }
        if (shape[i] == -1) {
            if (infer_at >= 0)
                return slim_errf(ctx->err, SLIM_EINVAL, "shape has more than one -1");
            infer_at = i;
            continue;
        }
        if (shape[i] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "shape[%d] = %lld is negative", i,
                             (long long)shape[i]);
        if (__builtin_mul_overflow(known, shape[i], &known))
            return slim_errf(ctx->err, SLIM_EINVAL, "shape overflows int64");
    }
    int64_t numel = slim_tensor_numel(x);
    char a[128], b[128];
    if (infer_at >= 0) {
        if (known == 0 || numel % known != 0)
            return slim_errf(ctx->err, SLIM_ESHAPE, "cannot reshape %s into %s",
                             slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                             slim_shape_str(n, shape, b, sizeof(b)));
        shape[infer_at] = numel / known;
    } else if (known != numel) {
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot reshape %s (%lld elements) into %s",
                         slim_shape_str(x->ndim, x->dims, a, sizeof(a)), (long long)numel,
                         slim_shape_str(n, shape, b, sizeof(b)));
    }
    slim_tensor_set_shape(ctx->out[0], x->dtype, n, shape);
    return SLIM_OK;
}

/* ---- Flatten ------------------------------------------------------------ */

static slim_status flatten_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axis = slim_attr_int(ctx->node, "axis", 1);
    if (axis < -x->ndim || axis > x->ndim)
        return slim_errf(ctx->err, SLIM_EINVAL, "axis %lld is out of range for rank %d",
                         (long long)axis, x->ndim);
    if (axis < 0)
        axis += x->ndim;
    int64_t dims[2] = {slim_shape_numel((int)axis, x->dims),
                       slim_shape_numel(x->ndim - (int)axis, x->dims + axis)};
    slim_tensor_set_shape(ctx->out[0], x->dtype, 2, dims);
    return SLIM_OK;
}

/* ---- Squeeze / Unsqueeze ------------------------------------------------ */

static slim_status squeeze_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axes[SLIM_MAX_DIMS];
    int n;
    bool given;
    slim_status st = read_ints_attr_or_input(ctx, "axes", 13, 1, axes, &n, &given);
    if (st)
        return st;
    given = given && n > 0; /* empty axes squeeze every unit dim, like none */
    bool drop[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = slim_norm_axis(axes[i], x->ndim, &a, ctx->err)))
            return st;
        if (x->ndim == 0 || x->dims[a] != 1)
            return slim_errf(ctx->err, SLIM_ESHAPE, "cannot squeeze axis %lld of size %lld",
                             (long long)axes[i], (long long)(x->ndim ? x->dims[a] : 0));
        drop[a] = true;
    }
    int64_t dims[SLIM_MAX_DIMS];
    int r = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!(given ? drop[i] : x->dims[i] == 1))
            dims[r++] = x->dims[i];
    slim_tensor_set_shape(ctx->out[0], x->dtype, r, dims);
    return SLIM_OK;
}

static slim_status unsqueeze_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axes[SLIM_MAX_DIMS];
    int n;
    bool given;
    slim_status st = read_ints_attr_or_input(ctx, "axes", 13, 1, axes, &n, &given);
    if (st)
        return st;
    if (!given)
        return slim_errf(ctx->err, SLIM_EINVAL, "axes are missing");
    int rank = x->ndim + n;
    if (rank > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "output rank %d exceeds %d", rank,
                         SLIM_MAX_DIMS);
    bool ins[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = slim_norm_axis(axes[i], rank, &a, ctx->err)))
            return st;
        if (ins[a])
            return slim_errf(ctx->err, SLIM_EINVAL, "axis %lld is repeated", (long long)axes[i]);
        ins[a] = true;
    }
    int64_t dims[SLIM_MAX_DIMS];
    for (int i = 0, j = 0; i < rank; i++)
        dims[i] = ins[i] ? 1 : x->dims[j++];
    slim_tensor_set_shape(ctx->out[0], x->dtype, rank, dims);
    return SLIM_OK;
}

/* ---- Identity / Dropout ------------------------------------------------- */

static slim_status identity_infer(slim_op_ctx *ctx)
{
    slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return SLIM_OK;
}

/* Dropout at inference is the identity. From opset 12 a training_mode input
 * may ask for real dropout; we refuse that rather than silently ignore it.
 * The value is checked only once known: it never changes any shape. */
static slim_status dropout_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *training = ctx->node->opset >= 12 ? slim_opt_in(ctx, 2) : NULL;
    const slim_tensor *ratio = slim_opt_in(ctx, 1);
    bool train = training && slim_tensor_numel(training) > 0 && training->data &&
                 slim_load_f64(training->dtype, training->data, 0) != 0;
    /* training with ratio 0 drops nothing: still the identity */
    bool no_drop = ratio && slim_tensor_numel(ratio) > 0 && ratio->data &&
                   slim_load_f64(ratio->dtype, ratio->data, 0) == 0;
    if (train && !no_drop)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED,
                         "training_mode = true (training-time dropout) is not supported");
    if (ctx->out[0])
        slim_tensor_set_like(ctx->out[0], x);
    slim_tensor *mask = opt_out(ctx, 1);
    if (mask) /* bool since opset 10, the input's type before */
        slim_tensor_set_shape(mask, ctx->node->opset >= 10 ? SLIM_BOOL : x->dtype, x->ndim,
                              x->dims);
    return SLIM_OK;
}

static slim_status dropout_exec(slim_op_ctx *ctx)
{
    copy_view(ctx->out[0], ctx->in[0]);
    slim_tensor *mask = opt_out(ctx, 1);
    if (mask && slim_tensor_numel(mask) > 0) {
        /* every element is kept: the mask is all ones of its type */
        unsigned char one[8];
        slim_store_f64(mask->dtype, one, 0, 1.0);
        slim_fill_elems(mask->data, slim_tensor_numel(mask), one, slim_dtype_size(mask->dtype));
    }
    return SLIM_OK;
}

/* ---- Shape / Size ------------------------------------------------------- */

static void shape_range(const slim_op_ctx *ctx, int rank, int *start, int *end)
{
    int64_t s = slim_attr_int(ctx->node, "start", 0);
    int64_t e = slim_attr_int(ctx->node, "end", rank);
    if (s < 0)
        s += rank;
    if (e < 0)
        e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    *start = (int)s;
    *end = e > s ? (int)e : (int)s;
}

static slim_status shape_infer(slim_op_ctx *ctx)
{
    int s, e;
    shape_range(ctx, ctx->in[0]->ndim, &s, &e);
    int64_t n = e - s;
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, 1, &n);
    return SLIM_OK;
}

static slim_status shape_exec(slim_op_ctx *ctx)
{
    int s, e;
    shape_range(ctx, ctx->in[0]->ndim, &s, &e);
    if (e > s)
        memcpy(ctx->out[0]->data, ctx->in[0]->dims + s, sizeof(int64_t) * (size_t)(e - s));
    return SLIM_OK;
}

static slim_status size_infer(slim_op_ctx *ctx)
{
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, 0, NULL);
    return SLIM_OK;
}

static slim_status size_exec(slim_op_ctx *ctx)
{
    *(int64_t *)ctx->out[0]->data = slim_tensor_numel(ctx->in[0]);
    return SLIM_OK;
}

/* ---- Constant ----------------------------------------------------------- */

/* The state is a tensor that borrows the attribute's memory: the node
 * outlives every run, so nothing is copied at load. */
static slim_status constant_prepare(slim_node *node, void **state, slim_err *err)
{
    static const char *const unsupported[] = {"sparse_value", "value_string", "value_strings"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (slim_node_attr(node, unsupported[i]))
            return slim_errf(err, SLIM_EUNSUPPORTED, "attribute %s is not supported",
                             unsupported[i]);
    /* raw: load time: the Constant's header (its data stays in the model) */
    slim_tensor *t = calloc(1, sizeof(*t));
    if (!t)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    const slim_attr *a;
    if ((a = slim_node_attr(node, "value")) && a->type == SLIM_ATTR_TENSOR && a->t) {
        *t = *a->t;
        t->buf = NULL;
    } else if ((a = slim_node_attr(node, "value_float"))) {
        *t = (slim_tensor){.dtype = SLIM_F32, .ndim = 0, .data = (void *)&a->f};
    } else if ((a = slim_node_attr(node, "value_floats"))) {
        *t = (slim_tensor){.dtype = SLIM_F32, .ndim = 1, .dims = {a->n}, .data = a->floats};
    } else if ((a = slim_node_attr(node, "value_int"))) {
        *t = (slim_tensor){.dtype = SLIM_I64, .ndim = 0, .data = (void *)&a->i};
    } else if ((a = slim_node_attr(node, "value_ints"))) {
        *t = (slim_tensor){.dtype = SLIM_I64, .ndim = 1, .dims = {a->n}, .data = a->ints};
    } else {
        free(t);
        return slim_errf(err, SLIM_EINVAL, "no value attribute");
    }
    if (slim_dtype_size(t->dtype) == 0) {
        free(t);
        return slim_errf(err, SLIM_EUNSUPPORTED, "the value attribute has an unsupported data type");
    }
    if (slim_tensor_nbytes(t) && !t->data) {
        free(t);
        return slim_errf(err, SLIM_EINVAL, "the value attribute has no data");
    }
    *state = t;
    return SLIM_OK;
}

static slim_status constant_infer(slim_op_ctx *ctx)
{
    slim_tensor_set_like(ctx->out[0], ctx->state);
    return SLIM_OK;
}

static slim_status constant_exec(slim_op_ctx *ctx)
{
    copy_view(ctx->out[0], ctx->state);
    return SLIM_OK;
}

/* ---- ConstantOfShape ---------------------------------------------------- */

typedef struct {
    slim_dtype dtype;
    unsigned char value[8];
} fill_state;

static slim_status cos_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    fill_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->dtype = SLIM_F32; /* the default value is float 0 */
    const slim_attr *a = slim_node_attr(node, "value");
    if (a) {
        if (a->type != SLIM_ATTR_TENSOR || !a->t || slim_tensor_numel(a->t) != 1 ||
            !a->t->data || slim_dtype_size(a->t->dtype) > sizeof(s->value)) {
            free(s);
            return slim_errf(err, SLIM_EINVAL, "attribute value must be a one-element tensor");
        }
        s->dtype = a->t->dtype;
        memcpy(s->value, a->t->data, slim_dtype_size(s->dtype));
    }
    *state = s;
    return SLIM_OK;
}

static slim_status cos_infer(slim_op_ctx *ctx)
{
    const fill_state *s = ctx->state;
    int64_t dims[SLIM_MAX_DIMS];
    int n;
    slim_status st = slim_read_ints(ctx->in[0], "input shape", dims, SLIM_MAX_DIMS, &n, ctx->err);
    if (st)
        return st;
    for (int i = 0; i < n; i++)
        if (dims[i] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "shape[%d] = %lld is negative", i,
                             (long long)dims[i]);
    slim_tensor_set_shape(ctx->out[0], s->dtype, n, dims);
    return SLIM_OK;
}

static slim_status cos_exec(slim_op_ctx *ctx)
{
    const fill_state *s = ctx->state;
    slim_fill_elems(ctx->out[0]->data, slim_tensor_numel(ctx->out[0]), s->value,
               slim_dtype_size(s->dtype));
    return SLIM_OK;
}

/* ---- Range -------------------------------------------------------------- */

static slim_status range_count(slim_op_ctx *ctx, int64_t *count)
{
    const slim_tensor *start = ctx->in[0], *limit = ctx->in[1], *delta = ctx->in[2];
    slim_status st = slim_check_dtype(start, "start", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                      SLIM_BF16, SLIM_I16, SLIM_I32, SLIM_I64,
                                      SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (limit->dtype != start->dtype || delta->dtype != start->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "start, limit and delta must share a type");
    if (slim_dtype_is_int(start->dtype)) {
        int64_t s, l, d;
        if ((st = slim_read_scalar_i64(start, "start", &s, ctx->err)) ||
            (st = slim_read_scalar_i64(limit, "limit", &l, ctx->err)) ||
            (st = slim_read_scalar_i64(delta, "delta", &d, ctx->err)))
            return st;
        if (d == 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "delta is 0");
        __int128 span = (__int128)l - s, n = span / d;
        if (span % d != 0 && (span > 0) == (d > 0))
            n++; /* division truncated toward zero; we want the ceiling */
        *count = n > 0 ? (int64_t)n : 0;
        return SLIM_OK;
    }
    double s, l, d;
    if ((st = slim_read_scalar_f64(start, "start", &s, ctx->err)) ||
        (st = slim_read_scalar_f64(limit, "limit", &l, ctx->err)) ||
        (st = slim_read_scalar_f64(delta, "delta", &d, ctx->err)))
        return st;
    double n = ceil((l - s) / d);
    if (d == 0 || !isfinite(n) || n > 1e15)
        return slim_errf(ctx->err, SLIM_EINVAL, "range(%g, %g, %g) has no finite length", s, l,
                         d);
    *count = n > 0 ? (int64_t)n : 0;
    return SLIM_OK;
}

static slim_status range_infer(slim_op_ctx *ctx)
{
    int64_t n;
    slim_status st = range_count(ctx, &n);
    if (st)
        return st;
    slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, 1, &n);
    return SLIM_OK;
}

static slim_status range_exec(slim_op_ctx *ctx)
{
    slim_tensor *y = ctx->out[0];
    const slim_tensor *start = ctx->in[0], *delta = ctx->in[2];
    int64_t n = slim_tensor_numel(y);
    if (slim_dtype_is_int(y->dtype)) {
        int64_t s = slim_load_i64(start->dtype, start->data, 0);
        int64_t d = slim_load_i64(delta->dtype, delta->data, 0);
        for (int64_t i = 0; i < n; i++)
            slim_store_i64(y->dtype, y->data, i, s + i * d);
    } else {
        double s = slim_load_f64(start->dtype, start->data, 0);
        double d = slim_load_f64(delta->dtype, delta->data, 0);
        for (int64_t i = 0; i < n; i++)
            slim_store_f64(y->dtype, y->data, i, s + (double)i * d);
    }
    return SLIM_OK;
}

/* ---- EyeLike ------------------------------------------------------------ */

static slim_status eyelike_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    if (x->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has rank %d, expected 2", x->ndim);
    slim_dtype dt = x->dtype;
    const slim_attr *a = slim_node_attr(ctx->node, "dtype");
    if (a && (dt = slim_dtype_from_onnx((int)a->i)) == SLIM_DTYPE_UNDEFINED)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "dtype %lld is not supported",
                         (long long)a->i);
    slim_tensor_set_shape(ctx->out[0], dt, 2, x->dims);
    return SLIM_OK;
}

static slim_status eyelike_exec(slim_op_ctx *ctx)
{
    slim_tensor *y = ctx->out[0];
    int64_t rows = y->dims[0], cols = y->dims[1];
    int64_t k = slim_attr_int(ctx->node, "k", 0);
    if (rows * cols == 0)
        return SLIM_OK;
    memset(y->data, 0, slim_tensor_nbytes(y));
    for (int64_t i = 0; i < rows; i++)
        if (k > -rows && k < cols && i + k >= 0 && i + k < cols)
            slim_store_f64(y->dtype, y->data, i * cols + i + k, 1.0);
    return SLIM_OK;
}

/* ---- OneHot ------------------------------------------------------------- */

static slim_status onehot_geometry(slim_op_ctx *ctx, int *axis, int64_t *depth)
{
    const slim_tensor *ind = ctx->in[0], *dep = ctx->in[1], *vals = ctx->in[2];
    if (slim_tensor_numel(dep) != 1 || dep->ndim > 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "depth must be a scalar");
    if (vals->ndim != 1 || vals->dims[0] != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "values must hold [off, on]");
    if (ind->ndim + 1 > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "indices rank %d is too large", ind->ndim);
    double d;
    slim_status st = slim_read_scalar_f64(dep, "depth", &d, ctx->err);
    if (st)
        return st;
    if (!(d >= 1) || d > 1e12)
        return slim_errf(ctx->err, SLIM_EINVAL, "depth %g is not a positive count", d);
    *depth = (int64_t)d;
    return slim_norm_axis(slim_attr_int(ctx->node, "axis", -1), ind->ndim + 1, axis, ctx->err);
}

static slim_status onehot_infer(slim_op_ctx *ctx)
{
    const slim_tensor *ind = ctx->in[0];
    int axis;
    int64_t depth;
    slim_status st = onehot_geometry(ctx, &axis, &depth);
    if (st)
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    for (int i = 0, j = 0; i <= ind->ndim; i++)
        dims[i] = i == axis ? depth : ind->dims[j++];
    slim_tensor_set_shape(ctx->out[0], ctx->in[2]->dtype, ind->ndim + 1, dims);
    return SLIM_OK;
}

static slim_status onehot_exec(slim_op_ctx *ctx)
{
    const slim_tensor *ind = ctx->in[0], *vals = ctx->in[2];
    slim_tensor *y = ctx->out[0];
    int axis;
    int64_t depth;
    slim_status st = onehot_geometry(ctx, &axis, &depth);
    if (st)
        return st;
    size_t es = slim_dtype_size(y->dtype);
    const char *off = vals->data, *on = (const char *)vals->data + es;
    slim_fill_elems(y->data, slim_tensor_numel(y), off, es);
    /* y viewed as [outer, depth, inner]; indices as [outer, inner] */
    int64_t outer = slim_shape_numel(axis, ind->dims);
    int64_t inner = slim_shape_numel(ind->ndim - axis, ind->dims + axis);
    bool negative_ok = ctx->node->opset >= 11;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t k = slim_load_i64(ind->dtype, ind->data, o * inner + i);
            if (k < 0 && negative_ok)
                k += depth;
            if (k >= 0 && k < depth) /* out-of-range indices leave the row off */
                memcpy((char *)y->data + ((o * depth + k) * inner + i) * es, on, es);
        }
    return SLIM_OK;
}

/* ---- Trilu -------------------------------------------------------------- */

static slim_status trilu_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *k = slim_opt_in(ctx, 1);
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has rank %d, expected at least 2",
                         x->ndim);
    if (k && slim_tensor_numel(k) != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "k must be a scalar");
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

static slim_status trilu_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *kt = slim_opt_in(ctx, 1);
    slim_tensor *y = ctx->out[0];
    int64_t k = 0;
    slim_status st;
    if (kt && (st = slim_read_scalar_i64(kt, "k", &k, ctx->err)))
        return st;
    bool upper = slim_attr_int(ctx->node, "upper", 1) != 0;
    int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1];
    int64_t mats = slim_shape_numel(x->ndim - 2, x->dims);
    size_t es = slim_dtype_size(x->dtype);
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    /* clamping k first keeps i + k from overflowing for absurd k */
    int64_t lim = rows + cols + 1;
    k = k < -lim ? -lim : k > lim ? lim : k;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            const char *src = (const char *)x->data + ((m * rows + i) * cols) * es;
            char *dst = (char *)y->data + ((m * rows + i) * cols) * es;
            /* upper keeps j >= i + k; lower keeps j <= i + k */
            int64_t cut = upper ? i + k : i + k + 1;
            cut = cut < 0 ? 0 : cut > cols ? cols : cut;
            int64_t zero_lo = upper ? 0 : cut, zero_hi = upper ? cut : cols;
            int64_t keep_lo = upper ? cut : 0, keep_hi = upper ? cols : cut;
            memset(dst + zero_lo * es, 0, (size_t)(zero_hi - zero_lo) * es);
            if (src != dst)
                memcpy(dst + keep_lo * es, src + keep_lo * es, (size_t)(keep_hi - keep_lo) * es);
        }
    return SLIM_OK;
}

/* ---- NonZero ------------------------------------------------------------ */

static bool elem_nonzero(slim_dtype dt, const void *data, int64_t i)
{
    /* floats compare by value so that -0.0 counts as zero */
    return slim_dtype_is_float(dt) ? slim_load_f64(dt, data, i) != 0
                                   : slim_load_i64(dt, data, i) != 0;
}

static slim_status nonzero_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t n = slim_tensor_numel(x), nnz = 0;
    if (n > 0 && !x->data)
        return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the output size depends on the input values");
    for (int64_t i = 0; i < n; i++)
        nnz += elem_nonzero(x->dtype, x->data, i);
    /* a scalar reports as if it were 1-D, like numpy's atleast_1d */
    int64_t dims[2] = {x->ndim ? x->ndim : 1, nnz};
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, 2, dims);
    return SLIM_OK;
}

static slim_status nonzero_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(x), nnz = y->dims[1], col = 0;
    int rank = x->ndim;
    int64_t *out = y->data, idx[SLIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n && col < nnz; i++) {
        if (elem_nonzero(x->dtype, x->data, i)) {
            for (int d = 0; d < rank; d++)
                out[d * nnz + col] = idx[d];
            if (rank == 0)
                out[col] = 0;
            col++;
        }
        for (int d = rank - 1; d >= 0 && ++idx[d] == x->dims[d]; d--)
            idx[d] = 0;
    }
    return SLIM_OK;
}

/* ---- table -------------------------------------------------------------- */

const slim_op_def slim__ops_shape[] = {
    {"Reshape", 1, NULL, NULL, reshape_infer, exec_view, SLIM_OP_ALIAS0},
    {"Flatten", 1, NULL, NULL, flatten_infer, exec_view, SLIM_OP_ALIAS0},
    {"Squeeze", 1, NULL, NULL, squeeze_infer, exec_view, SLIM_OP_ALIAS0},
    {"Unsqueeze", 1, NULL, NULL, unsqueeze_infer, exec_view, SLIM_OP_ALIAS0},
    {"Identity", 1, NULL, NULL, identity_infer, exec_view, SLIM_OP_ALIAS0 | SLIM_OP_CONTAINERS},
    {"Dropout", 1, NULL, NULL, dropout_infer, dropout_exec, SLIM_OP_ALIAS0},
    {"Shape", 1, NULL, NULL, shape_infer, shape_exec, SLIM_OP_SHAPE_ONLY},
    {"Size", 1, NULL, NULL, size_infer, size_exec, SLIM_OP_SHAPE_ONLY},
    {"Constant", 1, constant_prepare, free, constant_infer, constant_exec, 0},
    {"ConstantOfShape", 9, cos_prepare, free, cos_infer, cos_exec, 0},
    {"Range", 11, NULL, NULL, range_infer, range_exec, 0},
    {"EyeLike", 9, NULL, NULL, eyelike_infer, eyelike_exec, 0},
    {"OneHot", 9, NULL, NULL, onehot_infer, onehot_exec, 0},
    {"Trilu", 14, NULL, NULL, trilu_infer, trilu_exec, 0},
    {"NonZero", 9, NULL, NULL, nonzero_infer, nonzero_exec, 0},
    {0},
};
