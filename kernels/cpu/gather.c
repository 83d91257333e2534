/*
 * gather.c - ops that pick elements by index: Gather, GatherElements,
 * GatherND, ScatterElements (and the old Scatter), ScatterND.
 *
 * They work on raw bytes by element size, so every dtype comes for free;
 * only the scatter reductions read values. Every index is range-checked:
 * an out-of-range index is an error naming it, never a stray read.
 */
#include "kernel.h"
#include "device.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GRAIN_BYTES (64 * 1024) /* below this, a thread is not worth waking */

/* ---- Gather family ------------------------------------------------------
 * Indices are validated before anything is written: an index out of range
 * is the caller's mistake and gets a message, never a stray read. */

static slim_status check_index_dtype(const slim_tensor *ind, slim_err *err)
{
    return slim_check_dtype(ind, "indices", err, SLIM_I64, SLIM_I32, SLIM_DTYPE_UNDEFINED);
}

static slim_status index_at(const slim_tensor *ind, int64_t i, int64_t dim, int64_t *out,
                            slim_err *err)
{
    int64_t k = slim_load_i64(ind->dtype, ind->data, i);
    if (k < -dim || k >= dim)
        return slim_errf(err, SLIM_EINVAL, "index %lld is out of range for an axis of size %lld",
                         (long long)k, (long long)dim);
    *out = k < 0 ? k + dim : k;
    return SLIM_OK;
}

static slim_status gather_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, &axis, ctx->err);
    if (st || (st = check_index_dtype(ind, ctx->err)))
        return st;
    if (x->ndim == 0 || x->ndim - 1 + ind->ndim > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_ESHAPE, "data rank %d with indices rank %d is not "
                         "supported", x->ndim, ind->ndim);
    int64_t dims[SLIM_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < axis; d++)
        dims[r++] = x->dims[d];
    for (int d = 0; d < ind->ndim; d++)
        dims[r++] = ind->dims[d];
    for (int d = axis + 1; d < x->ndim; d++)
        dims[r++] = x->dims[d];
    slim_tensor_set_shape(ctx->out[0], x->dtype, r, dims);
    return SLIM_OK;
}

typedef struct {
    const char *src;
    char *dst;
    const int64_t *idx;
    int64_t nidx, dim, block; /* block: bytes per index */
} gather_plan;

static void gather_job(int64_t begin, int64_t end, void *user)
{
    const gather_plan *p = user;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / p->nidx, j = item % p->nidx;
        memcpy(p->dst + item * p->block, p->src + (o * p->dim + p->idx[j]) * p->block,
               (size_t)p->block);
    }
}

/* Rows of a table in a mapped model file, read with pread (see
 * slim_file_map_lookup): only the bytes gathered reach the process. A failed
 * read falls back to the mapping, which gives the same bytes or the same
 * fault. */
typedef struct {
    gather_plan p;
    int fd;
    int64_t file_off; /* of p.src */
} gather_file_plan;

static void gather_file_job(int64_t begin, int64_t end, void *user)
{
    const gather_file_plan *f = user;
    const gather_plan *p = &f->p;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / p->nidx, j = item % p->nidx;
        int64_t at = (o * p->dim + p->idx[j]) * p->block;
        char *dst = p->dst + item * p->block;
        size_t done = 0;
        while (done < (size_t)p->block) {
            ssize_t n = pread(f->fd, dst + done, (size_t)p->block - done,
                              (off_t)(f->file_off + at) + (off_t)done);
            if (n <= 0)
                break;
            done += (size_t)n;
        }
        if (done < (size_t)p->block)
            memcpy(dst, p->src + at, (size_t)p->block);
    }
}

/* Worth it for a large table in a mapped file of which a small part is
 * gathered; a whole table read row by row is faster through the mapping. */
static bool gather_by_pread(const slim_tensor *x, int64_t rows_bytes, int *fd, int64_t *off)
{
    size_t nbytes = slim_tensor_nbytes(x);
    return !x->device && nbytes >= ((size_t)4 << 20) && (uint64_t)rows_bytes * 8 <= nbytes &&
           slim_file_map_lookup(x->data, nbytes, fd, off);
}

static slim_status gather_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int axis;
    slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, &axis, NULL);
    int64_t nidx = slim_tensor_numel(ind), outer = slim_shape_numel(axis, x->dims);
    int64_t block = slim_shape_numel(x->ndim - axis - 1, x->dims + axis + 1) *
                    (int64_t)slim_dtype_size(x->dtype);
    if (nidx == 0 || outer == 0 || block == 0)
        return SLIM_OK;
    int64_t *idx = slim_scratch_malloc(sizeof(int64_t) * (size_t)nidx);
    if (!idx)
        return slim_scratch_oom(ctx->err);
    slim_status st = SLIM_OK;
    for (int64_t i = 0; i < nidx && !st; i++)
        st = index_at(ind, i, x->dims[axis], &idx[i], ctx->err);
    if (!st) {
        gather_plan p = {x->data, ctx->out[0]->data, idx, nidx, x->dims[axis], block};
        int fd;
        int64_t off;
        if (gather_by_pread(x, outer * nidx * block, &fd, &off)) {
            gather_file_plan f = {p, fd, off};
            slim_parallel_for(outer * nidx, 1 + GRAIN_BYTES / block, gather_file_job, &f);
        } else {
            slim_parallel_for(outer * nidx, 1 + GRAIN_BYTES / block, gather_job, &p);
        }
    }
    slim_scratch_free(idx);
    return st;
}

/* GatherElements and ScatterElements index one axis per element; indices
 * (and updates) have the data's rank and no larger extent elsewhere. */
static slim_status elements_check(slim_op_ctx *ctx, const slim_tensor *x, const slim_tensor *ind,
                                  int *axis)
{
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, axis, ctx->err);
    if (st || (st = check_index_dtype(ind, ctx->err)))
        return st;
    if (ind->ndim != x->ndim || x->ndim == 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "indices have rank %d, data %d", ind->ndim,
                         x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (d != *axis && ind->dims[d] > x->dims[d])
            return slim_errf(ctx->err, SLIM_ESHAPE, "indices dim %d (%lld) exceeds data's (%lld)",
                             d, (long long)ind->dims[d], (long long)x->dims[d]);
    return SLIM_OK;
}

/* Source offsets of every element of `ind`, walked in order: calls back
 * with the flat element number and the data offset it addresses. */
typedef slim_status (*element_fn)(int64_t i, int64_t off, void *user);

static slim_status for_each_element(const slim_tensor *x, const slim_tensor *ind, int axis,
                                    element_fn fn, void *user, slim_err *err)
{
    int64_t xs[SLIM_MAX_DIMS], c[SLIM_MAX_DIMS] = {0}, n = slim_tensor_numel(ind), base = 0;
    slim_contiguous_strides(x->ndim, x->dims, xs);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        slim_status st = index_at(ind, i, x->dims[axis], &k, err);
        if (st || (st = fn(i, base + k * xs[axis], user)))
            return st;
        for (int d = ind->ndim - 1; d >= 0; d--) {
            if (d != axis)
                base += xs[d];
            if (++c[d] < ind->dims[d])
                break;
            if (d != axis)
                base -= xs[d] * c[d];
            c[d] = 0;
        }
    }
    return SLIM_OK;
}

typedef struct {
    char *dst;
    const char *src;
    size_t es;
    int reduction;
    slim_dtype dtype;
} element_copy;

static slim_status gather_element(int64_t i, int64_t off, void *user)
{
    element_copy *p = user;
    memcpy(p->dst + i * (int64_t)p->es, p->src + off * (int64_t)p->es, p->es);
    return SLIM_OK;
}

static slim_status gather_elements_infer(slim_op_ctx *ctx)
{
    int axis;
    slim_status st = elements_check(ctx, ctx->in[0], ctx->in[1], &axis);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, ctx->in[1]->ndim, ctx->in[1]->dims);
    return st;
}

static slim_status gather_elements_exec(slim_op_ctx *ctx)
{
    int axis;
    slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), ctx->in[0]->ndim, &axis, NULL);
    element_copy p = {.dst = ctx->out[0]->data, .src = ctx->in[0]->data,
                      .es = slim_dtype_size(ctx->in[0]->dtype)};
    return for_each_element(ctx->in[0], ctx->in[1], axis, gather_element, &p, ctx->err);
}

/* GatherND: output = indices.shape[:-1] + data.shape[b+k:]. */
static slim_status gather_nd_geometry(slim_op_ctx *ctx, int *b, int *k)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int64_t bd = slim_attr_int(ctx->node, "batch_dims", 0);
    slim_status st = check_index_dtype(ind, ctx->err);
    if (st)
        return st;
    if (ind->ndim < 1 || bd < 0 || bd >= ind->ndim || bd >= x->ndim)
        return slim_errf(ctx->err, SLIM_ESHAPE, "batch_dims %lld does not fit data rank %d and "
                         "indices rank %d", (long long)bd, x->ndim, ind->ndim);
    *b = (int)bd;
    int64_t kk = ind->dims[ind->ndim - 1];
    if (kk < 1 || kk > x->ndim - bd)
        return slim_errf(ctx->err, SLIM_ESHAPE, "index tuples of length %lld do not fit data "
                         "rank %d", (long long)kk, x->ndim);
    *k = (int)kk;
    if (ind->ndim - 1 + x->ndim - bd - kk > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "the output rank exceeds %d", SLIM_MAX_DIMS);
    for (int d = 0; d < bd; d++)
        if (ind->dims[d] != x->dims[d])
            return slim_errf(ctx->err, SLIM_ESHAPE, "batch dim %d differs: %lld vs %lld", d,
                             (long long)ind->dims[d], (long long)x->dims[d]);
    return SLIM_OK;
}

static slim_status gather_nd_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int b, k;
    slim_status st = gather_nd_geometry(ctx, &b, &k);
    if (st)
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < ind->ndim - 1; d++)
        dims[r++] = ind->dims[d];
    for (int d = b + k; d < x->ndim; d++)
        dims[r++] = x->dims[d];
    slim_tensor_set_shape(ctx->out[0], x->dtype, r, dims);
    return SLIM_OK;
}

/* Data offset (in elements) of index tuple t; k coordinates from axis b. */
static slim_status nd_offset(const slim_tensor *x, const slim_tensor *ind, int b, int k,
                             const int64_t *xs, int64_t t, int64_t *off, slim_err *err)
{
    int64_t o = 0;
    for (int j = 0; j < k; j++) {
        int64_t c = 0;
        slim_status st = index_at(ind, t * k + j, x->dims[b + j], &c, err);
        if (st)
            return st;
        o += c * xs[b + j];
    }
    *off = o;
    return SLIM_OK;
}

static slim_status gather_nd_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int b, k;
    slim_status st = gather_nd_geometry(ctx, &b, &k);
    if (st)
        return st;
    int64_t xs[SLIM_MAX_DIMS];
    slim_contiguous_strides(x->ndim, x->dims, xs);
    int64_t batches = slim_shape_numel(b, x->dims);
    int64_t per_batch = slim_shape_numel(ind->ndim - 1 - b, ind->dims + b);
    size_t es = slim_dtype_size(x->dtype);
    int64_t slice = slim_shape_numel(x->ndim - b - k, x->dims + b + k) * (int64_t)es;
    int64_t batch_stride = slim_shape_numel(x->ndim - b, x->dims + b);
    char *dst = ctx->out[0]->data;
    if (slice == 0)
        return SLIM_OK;
    for (int64_t bi = 0; bi < batches; bi++)
        for (int64_t m = 0; m < per_batch; m++) {
            int64_t t = bi * per_batch + m, off;
            if ((st = nd_offset(x, ind, b, k, xs, t, &off, ctx->err)))
                return st;
            memcpy(dst + t * slice, (const char *)x->data + (bi * batch_stride + off) * (int64_t)es,
                   (size_t)slice);
        }
    return SLIM_OK;
}

/* ---- Scatter family ----------------------------------------------------- */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static int reduction_of(const slim_node *node)
{
    const char *r = slim_attr_str(node, "reduction", "none");
    return !strcmp(r, "none") ? RED_NONE : !strcmp(r, "add") ? RED_ADD
         : !strcmp(r, "mul") ? RED_MUL : !strcmp(r, "max") ? RED_MAX
         : !strcmp(r, "min") ? RED_MIN : -1;
}

static slim_status scatter_prepare(slim_node *node, void **state, slim_err *err)
{
    if (reduction_of(node) < 0)
        return slim_errf(err, SLIM_EUNSUPPORTED, "reduction \"%s\" is not supported",
                         slim_attr_str(node, "reduction", ""));
    return SLIM_OK;
}

/* dst[di] = dst[di] (reduction) src[si]; values are widened only to combine. */
static void scatter_apply(const element_copy *p, int64_t di, int64_t si)
{
    slim_dtype t = p->dtype;
    if (p->reduction == RED_NONE) {
        memcpy(p->dst + di * (int64_t)p->es, p->src + si * (int64_t)p->es, p->es);
    } else if (slim_dtype_is_float(t)) {
        /* one float op rounded through double equals the float op */
        double a = slim_load_f64(t, p->dst, di), b = slim_load_f64(t, p->src, si);
        double r = p->reduction == RED_ADD ? a + b : p->reduction == RED_MUL ? a * b
                 : p->reduction == RED_MAX ? (b > a ? b : a) : (b < a ? b : a);
        slim_store_f64(t, p->dst, di, r);
    } else {
        int64_t a = slim_load_i64(t, p->dst, di), b = slim_load_i64(t, p->src, si), r;
        bool less = t == SLIM_U64 ? (uint64_t)b < (uint64_t)a : b < a;
        switch (p->reduction) {
        case RED_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
        case RED_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
        case RED_MAX: r = less ? a : b; break;
        default: r = less ? b : a; break;
        }
        slim_store_i64(t, p->dst, di, r);
    }
}

static slim_status scatter_element(int64_t i, int64_t off, void *user)
{
    scatter_apply(user, off, i);
    return SLIM_OK;
}

static slim_status scatter_elements_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1], *upd = ctx->in[2];
    int axis;
    slim_status st = elements_check(ctx, x, ind, &axis);
    if (st)
        return st;
    if (upd->dtype != x->dtype || upd->ndim != ind->ndim ||
        memcmp(upd->dims, ind->dims, sizeof(int64_t) * (size_t)ind->ndim))
        return slim_errf(ctx->err, SLIM_ESHAPE, "updates must match indices in shape and data "
                         "in type");
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

static element_copy scatter_begin(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (y->data != x->data && slim_tensor_nbytes(x))
        memcpy(y->data, x->data, slim_tensor_nbytes(x));
    return (element_copy){y->data, ctx->in[2]->data, slim_dtype_size(x->dtype),
                          reduction_of(ctx->node), x->dtype};
}

static slim_status scatter_elements_exec(slim_op_ctx *ctx)
{
    int axis;
    slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), ctx->in[0]->ndim, &axis, NULL);
    element_copy p = scatter_begin(ctx);
    return for_each_element(ctx->in[0], ctx->in[1], axis, scatter_element, &p, ctx->err);
}

/* ScatterND: updates = indices.shape[:-1] + data.shape[k:]. */
static slim_status scatter_nd_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1], *upd = ctx->in[2];
    slim_status st = check_index_dtype(ind, ctx->err);
    if (st)
        return st;
    if (ind->ndim < 1 || ind->dims[ind->ndim - 1] > x->ndim)
        return slim_errf(ctx->err, SLIM_ESHAPE, "indices do not fit data rank %d", x->ndim);
    int k = (int)ind->dims[ind->ndim - 1];
    int64_t want[2 * SLIM_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < ind->ndim - 1; d++)
        want[r++] = ind->dims[d];
    for (int d = k; d < x->ndim; d++)
        want[r++] = x->dims[d];
    if (upd->dtype != x->dtype || upd->ndim != r ||
        memcmp(upd->dims, want, sizeof(int64_t) * (size_t)r))
        return slim_errf(ctx->err, SLIM_ESHAPE, "updates have the wrong shape or type");
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

static slim_status scatter_nd_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *ind = ctx->in[1];
    int k = (int)ind->dims[ind->ndim - 1];
    int64_t xs[SLIM_MAX_DIMS], tuples = slim_shape_numel(ind->ndim - 1, ind->dims);
    int64_t slice = slim_shape_numel(x->ndim - k, x->dims + k);
    slim_contiguous_strides(x->ndim, x->dims, xs);
    element_copy p = scatter_begin(ctx);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off;
        slim_status st = nd_offset(x, ind, 0, k, xs, t, &off, ctx->err);
        if (st)
            return st;
        if (slice == 0)
            continue; /* still validates every index */
        if (p.reduction == RED_NONE)
            memcpy(p.dst + off * (int64_t)p.es, p.src + t * slice * (int64_t)p.es,
                   (size_t)slice * p.es);
        else
            for (int64_t e = 0; e < slice; e++)
                scatter_apply(&p, off + e, t * slice + e);
    }
    return SLIM_OK;
}

/* ---- table -------------------------------------------------------------- */

const slim_op_def slim__ops_gather[] = {
    {"Gather", 1, NULL, NULL, gather_infer, gather_exec, 0},
    {"GatherElements", 11, NULL, NULL, gather_elements_infer, gather_elements_exec, 0},
    {"GatherND", 11, NULL, NULL, gather_nd_infer, gather_nd_exec, 0},
    {"Scatter", 9, scatter_prepare, NULL, scatter_elements_infer, scatter_elements_exec, 0},
    {"ScatterElements", 11, scatter_prepare, NULL, scatter_elements_infer,
     scatter_elements_exec, 0},
    {"ScatterND", 11, scatter_prepare, NULL, scatter_nd_infer, scatter_nd_exec, 0},
    {0},
};
