/*
 * movement.c - ops that move elements without computing on them:
 * Transpose, DepthToSpace, SpaceToDepth, Slice, Expand, Tile, Concat and
 * Split. Pad and CenterCropPad live in pad.c, the index-driven ops in
 * gather.c.
 *
 * Everything works on raw bytes by element size, so every dtype comes for
 * free.
 *
 * Most of these ops are one "strided view" copy: the output is contiguous and
 * each of its axes walks the source with some stride (permuted for Transpose,
 * scaled by the step for Slice, 0 for the broadcast axes of Expand and the
 * repeat axes of Tile). view_copy first fuses axes that are contiguous in the
 * source, so most copies end as a few long memcpy rows; when the innermost
 * output axis is strided in the source it copies 32x32 tiles so that both
 * sides stay in cache (the classic blocked transpose).
 */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

#define VIEW_MAX (2 * SLIM_MAX_DIMS) /* Tile splits every axis in two */
#define TILE 32
#define GRAIN_BYTES (64 * 1024)    /* below this, a thread is not worth waking */

typedef struct {
    int ndim;
    int64_t dims[VIEW_MAX];   /* output (destination) shape */
    int64_t stride[VIEW_MAX]; /* source stride in elements per output axis */
    int64_t dstride[VIEW_MAX];
    int plane;                /* tiled path: axis whose source stride is 1 */
    const char *src;          /* source element that lands at dst[0] */
    char *dst;                /* contiguous */
    size_t es;
} strided_view;

static void copy_row(char *dst, const char *src, int64_t n, int64_t stride, size_t es)
{
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    if (stride == 0) {
        slim_fill_elems(dst, n, src, es);
        return;
    }
#define COPY_ROW(T)                                                  \
    for (int64_t i = 0; i < n; i++)                                  \
        ((T *)dst)[i] = *(const T *)(src + i * stride * (int64_t)es); \
    break;
    switch (es) {
    case 1: COPY_ROW(uint8_t)
    case 2: COPY_ROW(uint16_t)
    case 4: COPY_ROW(uint32_t)
    case 8: COPY_ROW(uint64_t)
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * (int64_t)es, src + i * stride * (int64_t)es, es);
    }
#undef COPY_ROW
}

/* Drops unit axes and fuses an axis into its outer neighbour when the pair
 * walks the source as one axis would. */
static void view_simplify(strided_view *v)
{
    int n = 0;
    for (int i = 0; i < v->ndim; i++) {
        if (v->dims[i] == 1)
            continue;
        if (n > 0 && v->stride[n - 1] == v->stride[i] * v->dims[i]) {
            v->dims[n - 1] *= v->dims[i];
            v->stride[n - 1] = v->stride[i];
            continue;
        }
        v->dims[n] = v->dims[i];
        v->stride[n] = v->stride[i];
        n++;
    }
    v->ndim = n;
    slim_contiguous_strides(n, v->dims, v->dstride);
}

/* Rows of the innermost axis; [begin, end) are row numbers. */
static void view_rows_job(int64_t begin, int64_t end, void *user)
{
    const strided_view *v = user;
    int last = v->ndim - 1;
    int64_t inner = v->dims[last], idx[VIEW_MAX], off = 0, r = begin;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = r % v->dims[d];
        r /= v->dims[d];
        off += idx[d] * v->stride[d];
    }
    size_t es = v->es;
    char *dst = v->dst + begin * inner * (int64_t)es;
    for (int64_t row = begin; row < end; row++) {
        copy_row(dst, v->src + off * (int64_t)es, inner, v->stride[last], es);
        dst += inner * (int64_t)es;
        for (int d = last - 1; d >= 0; d--) {
            off += v->stride[d];
            if (++idx[d] < v->dims[d])
                break;
            off -= v->stride[d] * v->dims[d];
            idx[d] = 0;
        }
    }
}

/* Work item = one TILE-high band of the plane axis at one outer position;
 * the band is walked in TILE x TILE squares. */
static void view_tiles_job(int64_t begin, int64_t end, void *user)
{
    const strided_view *v = user;
    int last = v->ndim - 1, p = v->plane;
    int64_t A = v->dims[p], B = v->dims[last], bands = (A + TILE - 1) / TILE;
    int64_t bstride = v->stride[last], adst = v->dstride[p];
    size_t es = v->es;
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / bands, a0 = (item % bands) * TILE;
        int64_t a1 = a0 + TILE < A ? a0 + TILE : A, soff = 0, doff = 0;
        for (int d = last - 1; d >= 0; d--) {
            if (d == p)
                continue;
            int64_t i = o % v->dims[d];
            o /= v->dims[d];
            soff += i * v->stride[d];
            doff += i * v->dstride[d];
        }
        for (int64_t b0 = 0; b0 < B; b0 += TILE) {
            int64_t b1 = b0 + TILE < B ? b0 + TILE : B;
#define COPY_TILE(T)                                                          \
    {                                                                         \
        const T *s = (const T *)v->src + soff;                               \
        T *t = (T *)v->dst + doff;                                           \
        for (int64_t a = a0; a < a1; a++)                                     \
            for (int64_t b = b0; b < b1; b++)                                 \
                t[a * adst + b] = s[a + b * bstride];                        \
    }                                                                         \
    break;
            switch (es) {
            case 1: COPY_TILE(uint8_t)
            case 2: COPY_TILE(uint16_t)
            case 4: COPY_TILE(uint32_t)
            default: COPY_TILE(uint64_t)
            }
#undef COPY_TILE
        }
    }
}

static void view_copy(strided_view *v)
{
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i] == 0)
            return;
    view_simplify(v);
    if (v->ndim == 0) {
        memcpy(v->dst, v->src, v->es);
        return;
    }
    int last = v->ndim - 1;
    int64_t numel = v->dims[0] * v->dstride[0];
    int64_t grain_elems = GRAIN_BYTES / (int64_t)v->es;
    v->plane = -1;
    if (v->stride[last] != 1 && v->stride[last] != 0 && v->es <= 8 &&
        ((v->es & (v->es - 1)) == 0))
        for (int d = last - 1; d >= 0; d--)
            if (v->stride[d] == 1)
                v->plane = d;
    if (v->plane >= 0 && v->dims[v->plane] >= 4) {
        int64_t items = numel / v->dims[last] / v->dims[v->plane] *
                        ((v->dims[v->plane] + TILE - 1) / TILE);
        int64_t item_elems = TILE * v->dims[last];
        slim_parallel_for(items, 1 + grain_elems / item_elems, view_tiles_job, v);
        return;
    }
    int64_t rows = numel / v->dims[last];
    slim_parallel_for(rows, 1 + grain_elems / v->dims[last], view_rows_job, v);
}

/* Output axis i walks input axis perm[i]; in_dims is contiguous. */
static void view_permuted(strided_view *v, int ndim, const int64_t *in_dims, const int *perm)
{
    int64_t s[VIEW_MAX];
    slim_contiguous_strides(ndim, in_dims, s);
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v->dims[i] = in_dims[perm[i]];
        v->stride[i] = s[perm[i]];
    }
}

/* ---- Transpose ---------------------------------------------------------- */

static slim_status transpose_perm(slim_op_ctx *ctx, int *perm)
{
    int rank = ctx->in[0]->ndim;
    int64_t p[SLIM_MAX_DIMS];
    int n = slim_attr_ints(ctx->node, "perm", p, SLIM_MAX_DIMS);
    if (n < 0) {
        for (int i = 0; i < rank; i++)
            perm[i] = rank - 1 - i;
        return SLIM_OK;
    }
    if (n != rank)
        return slim_errf(ctx->err, SLIM_EINVAL, "perm has %d entries for an input of rank %d",
                         n, rank);
    bool seen[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= rank || seen[p[i]])
            return slim_errf(ctx->err, SLIM_EINVAL, "perm is not a permutation of 0..%d",
                             rank - 1);
        seen[p[i]] = true;
        perm[i] = (int)p[i];
    }
    return SLIM_OK;
}

static slim_status transpose_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int perm[SLIM_MAX_DIMS];
    slim_status st = transpose_perm(ctx, perm);
    if (st)
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        dims[i] = x->dims[perm[i]];
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

static slim_status transpose_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int perm[SLIM_MAX_DIMS];
    slim_status st = transpose_perm(ctx, perm);
    if (st)
        return st;
    strided_view v = {.src = x->data, .dst = ctx->out[0]->data, .es = slim_dtype_size(x->dtype)};
    view_permuted(&v, x->ndim, x->dims, perm);
    view_copy(&v);
    return SLIM_OK;
}

/* ---- DepthToSpace / SpaceToDepth ----------------------------------------
 * Both are a reshape to 6-D, a transpose, and a reshape back. */

static slim_status space_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *mode = slim_attr_str(node, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return slim_errf(err, SLIM_EUNSUPPORTED, "mode \"%s\" is not supported", mode);
    int64_t b = slim_attr_int(node, "blocksize", 0);
    if (b < 1 || b > (1 << 20))
        return slim_errf(err, SLIM_EINVAL, "blocksize %lld is out of range", (long long)b);
    return SLIM_OK;
}

/* Fills the 6-D view of the input and the permutation; sets out dims. */
static slim_status space_geometry(slim_op_ctx *ctx, bool to_space, int64_t *view6, int *perm,
                                  int64_t *out)
{
    const slim_tensor *x = ctx->in[0];
    int64_t b = slim_attr_int(ctx->node, "blocksize", 0);
    if (x->ndim != 4)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has rank %d, expected 4", x->ndim);
    int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
    if (to_space) {
        if (c % (b * b))
            return slim_errf(ctx->err, SLIM_ESHAPE, "channels %lld are not divisible by %lld",
                             (long long)c, (long long)(b * b));
        bool crd = strcmp(slim_attr_str(ctx->node, "mode", "DCR"), "CRD") == 0;
        int64_t c2 = c / (b * b);
        int64_t dcr[6] = {n, b, b, c2, h, w}, crd6[6] = {n, c2, b, b, h, w};
        int pd[6] = {0, 3, 4, 1, 5, 2}, pc[6] = {0, 1, 4, 2, 5, 3};
        memcpy(view6, crd ? crd6 : dcr, sizeof(dcr));
        memcpy(perm, crd ? pc : pd, sizeof(pd));
        int64_t o[4] = {n, c2, h * b, w * b};
        memcpy(out, o, sizeof(o));
    } else {
        if (h % b || w % b)
            return slim_errf(ctx->err, SLIM_ESHAPE, "height %lld and width %lld must be "
                             "divisible by blocksize %lld", (long long)h, (long long)w,
                             (long long)b);
        int64_t v[6] = {n, c, h / b, b, w / b, b}, o[4] = {n, c * b * b, h / b, w / b};
        int p[6] = {0, 3, 5, 1, 2, 4};
        memcpy(view6, v, sizeof(v));
        memcpy(perm, p, sizeof(p));
        memcpy(out, o, sizeof(o));
    }
    return SLIM_OK;
}

static slim_status space_infer_common(slim_op_ctx *ctx, bool to_space)
{
    int64_t v[6], out[4];
    int perm[6];
    slim_status st = space_geometry(ctx, to_space, v, perm, out);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, 4, out);
    return st;
}

static slim_status space_exec_common(slim_op_ctx *ctx, bool to_space)
{
    int64_t v6[6], out[4];
    int perm[6];
    slim_status st = space_geometry(ctx, to_space, v6, perm, out);
    if (st)
        return st;
    const slim_tensor *x = ctx->in[0];
    strided_view v = {.src = x->data, .dst = ctx->out[0]->data, .es = slim_dtype_size(x->dtype)};
    view_permuted(&v, 6, v6, perm);
    view_copy(&v);
    return SLIM_OK;
}

static slim_status d2s_infer(slim_op_ctx *ctx) { return space_infer_common(ctx, true); }
static slim_status d2s_exec(slim_op_ctx *ctx) { return space_exec_common(ctx, true); }
static slim_status s2d_infer(slim_op_ctx *ctx) { return space_infer_common(ctx, false); }
static slim_status s2d_exec(slim_op_ctx *ctx) { return space_exec_common(ctx, false); }

/* ---- Slice -------------------------------------------------------------- */

/* Per input axis: first element, element count and step. */
static slim_status slice_geometry(slim_op_ctx *ctx, int64_t *first, int64_t *count,
                                  int64_t *step)
{
    const slim_tensor *x = ctx->in[0];
    int64_t starts[SLIM_MAX_DIMS], ends[SLIM_MAX_DIMS], axes[SLIM_MAX_DIMS], steps[SLIM_MAX_DIMS];
    int n, ne, na = -1, ns = -1;
    slim_status st;
    if (ctx->node->opset < 10) {
        n = slim_attr_ints(ctx->node, "starts", starts, SLIM_MAX_DIMS);
        ne = slim_attr_ints(ctx->node, "ends", ends, SLIM_MAX_DIMS);
        na = slim_attr_ints(ctx->node, "axes", axes, SLIM_MAX_DIMS);
        if (n < 0 || ne < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "attributes starts and ends are required");
        if (n > SLIM_MAX_DIMS || ne > SLIM_MAX_DIMS || na > SLIM_MAX_DIMS)
            return slim_errf(ctx->err, SLIM_EINVAL, "more slice axes than dimensions");
    } else {
        if (ctx->n_in < 3 || !ctx->in[1] || !ctx->in[2])
            return slim_errf(ctx->err, SLIM_EINVAL, "inputs starts and ends are required");
        if ((st = slim_read_ints(ctx->in[1], "starts", starts, SLIM_MAX_DIMS, &n, ctx->err)) ||
            (st = slim_read_ints(ctx->in[2], "ends", ends, SLIM_MAX_DIMS, &ne, ctx->err)))
            return st;
        if (slim_opt_in(ctx, 3) &&
            (st = slim_read_ints(ctx->in[3], "axes", axes, SLIM_MAX_DIMS, &na, ctx->err)))
            return st;
        if (slim_opt_in(ctx, 4) &&
            (st = slim_read_ints(ctx->in[4], "steps", steps, SLIM_MAX_DIMS, &ns, ctx->err)))
            return st;
    }
    if (ne != n || (na >= 0 && na != n) || (ns >= 0 && ns != n))
        return slim_errf(ctx->err, SLIM_EINVAL, "starts, ends, axes and steps differ in length");
    for (int d = 0; d < x->ndim; d++) {
        first[d] = 0;
        count[d] = x->dims[d];
        step[d] = 1;
    }
    bool seen[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = slim_norm_axis(na >= 0 ? axes[i] : i, x->ndim, &a, ctx->err)))
            return st;
        if (x->ndim == 0 || seen[a])
            return slim_errf(ctx->err, SLIM_EINVAL, "axis %d is sliced twice", a);
        seen[a] = true;
        int64_t dim = x->dims[a], s = starts[i], e = ends[i], k = ns >= 0 ? steps[i] : 1;
        if (k == 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "step of axis %d is 0", a);
        if (k < -INT64_MAX)
            k = -INT64_MAX;
        s = s < 0 ? s + dim : s;
        e = e < 0 ? e + dim : e;
        int64_t c = 0;
        if (k > 0) { /* clamp into [0, dim] */
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            c = e > s ? (e - s - 1) / k + 1 : 0;
        } else if (dim > 0) { /* walking back: start in [0, dim-1], end in [-1, dim-1] */
            s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            c = s > e ? (s - e - 1) / -k + 1 : 0;
        }
        first[a] = c ? s : 0;
        count[a] = c;
        step[a] = k;
    }
    return SLIM_OK;
}

static slim_status slice_infer(slim_op_ctx *ctx)
{
    int64_t first[SLIM_MAX_DIMS], count[SLIM_MAX_DIMS], step[SLIM_MAX_DIMS];
    slim_status st = slice_geometry(ctx, first, count, step);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, ctx->in[0]->ndim, count);
    return st;
}

static slim_status slice_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t first[SLIM_MAX_DIMS], count[SLIM_MAX_DIMS], step[SLIM_MAX_DIMS], s[SLIM_MAX_DIMS];
    slim_status st = slice_geometry(ctx, first, count, step);
    if (st)
        return st;
    /* Nothing to copy; x->data may be NULL then (an empty input), and
     * offsetting a null pointer is undefined. */
    if (slim_tensor_numel(ctx->out[0]) == 0)
        return SLIM_OK;
    slim_contiguous_strides(x->ndim, x->dims, s);
    strided_view v = {.ndim = x->ndim, .dst = ctx->out[0]->data, .es = slim_dtype_size(x->dtype)};
    int64_t off = 0;
    for (int d = 0; d < x->ndim; d++) {
        off += first[d] * s[d];
        v.dims[d] = count[d];
        v.stride[d] = s[d] * step[d];
    }
    v.src = (const char *)x->data + off * (int64_t)v.es;
    view_copy(&v);
    return SLIM_OK;
}

/* ---- Expand / Tile ------------------------------------------------------ */

static slim_status expand_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t shape[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    int n, nd;
    slim_status st = slim_read_ints(ctx->in[1], "shape", shape, SLIM_MAX_DIMS, &n, ctx->err);
    if (st || (st = slim_broadcast_shape(x->ndim, x->dims, n, shape, &nd, dims, ctx->err)))
        return st;
    slim_tensor_set_shape(ctx->out[0], x->dtype, nd, dims);
    return SLIM_OK;
}

static slim_status expand_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    strided_view v = {.ndim = y->ndim, .src = x->data, .dst = y->data,
                      .es = slim_dtype_size(x->dtype)};
    memcpy(v.dims, y->dims, sizeof(int64_t) * (size_t)y->ndim);
    slim_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, v.stride);
    view_copy(&v);
    return SLIM_OK;
}

static slim_status tile_repeats(slim_op_ctx *ctx, int64_t *reps)
{
    const slim_tensor *x = ctx->in[0];
    int n;
    slim_status st = slim_read_ints(ctx->in[1], "repeats", reps, SLIM_MAX_DIMS, &n, ctx->err);
    if (st)
        return st;
    if (n != x->ndim)
        return slim_errf(ctx->err, SLIM_ESHAPE, "repeats has %d values for rank %d", n, x->ndim);
    for (int i = 0; i < n; i++)
        if (reps[i] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "repeats[%d] = %lld is negative", i,
                             (long long)reps[i]);
    return SLIM_OK;
}

static slim_status tile_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t reps[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    slim_status st = tile_repeats(ctx, reps);
    if (st)
        return st;
    for (int i = 0; i < x->ndim; i++)
        dims[i] = x->dims[i] * reps[i];
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

/* Output axis i of size r*d is viewed as two axes [r, d]: the repeat axis
 * walks the source with stride 0. */
static slim_status tile_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t reps[SLIM_MAX_DIMS], s[SLIM_MAX_DIMS];
    slim_status st = tile_repeats(ctx, reps);
    if (st)
        return st;
    slim_contiguous_strides(x->ndim, x->dims, s);
    strided_view v = {.ndim = 2 * x->ndim, .src = x->data, .dst = ctx->out[0]->data,
                      .es = slim_dtype_size(x->dtype)};
    for (int i = 0; i < x->ndim; i++) {
        v.dims[2 * i] = reps[i];
        v.stride[2 * i] = 0;
        v.dims[2 * i + 1] = x->dims[i];
        v.stride[2 * i + 1] = s[i];
    }
    view_copy(&v);
    return SLIM_OK;
}

/* ---- Concat / Split ----------------------------------------------------- */

static slim_status concat_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x0 = ctx->in[0];
    if (ctx->n_in < 1 || !x0)
        return slim_errf(ctx->err, SLIM_EINVAL, "no inputs");
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 1), x0->ndim, &axis,
                                    ctx->err);
    if (st)
        return st;
    if (x0->ndim == 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot concatenate scalars");
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x0->dims, sizeof(dims));
    dims[axis] = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        const slim_tensor *x = ctx->in[i];
        if (!x || x->dtype != x0->dtype || x->ndim != x0->ndim)
            return slim_errf(ctx->err, SLIM_ESHAPE, "input %d differs from input 0 in type or "
                             "rank", i);
        for (int d = 0; d < x->ndim; d++)
            if (d != axis && x->dims[d] != x0->dims[d]) {
                char a[128], b[128];
                return slim_errf(ctx->err, SLIM_ESHAPE, "input %d has shape %s, input 0 %s",
                                 i, slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                                 slim_shape_str(x0->ndim, x0->dims, b, sizeof(b)));
            }
        dims[axis] += x->dims[axis];
    }
    slim_tensor_set_shape(ctx->out[0], x0->dtype, x0->ndim, dims);
    return SLIM_OK;
}

/* Concat and Split both copy, for each outer index, a run of bytes per
 * part: part i's run sits at offset[i] inside the joined row. */
typedef struct {
    int n;
    char *joined;            /* Concat: output; Split: input */
    int64_t joined_row;      /* bytes */
    char **part;             /* NULL parts are skipped (unused Split outputs) */
    const int64_t *part_row; /* bytes */
    const int64_t *offset;
    bool to_joined;
} rows_plan;

static void join_job(int64_t begin, int64_t end, void *user)
{
    const rows_plan *p = user;
    for (int64_t o = begin; o < end; o++)
        for (int i = 0; i < p->n; i++) {
            if (!p->part[i] || !p->part_row[i])
                continue;
            char *j = p->joined + o * p->joined_row + p->offset[i];
            char *q = p->part[i] + o * p->part_row[i];
            if (p->to_joined)
                memcpy(j, q, (size_t)p->part_row[i]);
            else
                memcpy(q, j, (size_t)p->part_row[i]);
        }
}

static slim_status run_rows_plan(rows_plan *p, int64_t outer, int axis, const slim_tensor *whole,
                                 const int64_t *sizes, slim_err *err)
{
    size_t es = slim_dtype_size(whole->dtype);
    int64_t inner = slim_shape_numel(whole->ndim - axis - 1, whole->dims + axis + 1) * (int64_t)es;
    int64_t *buf = slim_scratch_malloc(sizeof(int64_t) * 2 * (size_t)(p->n ? p->n : 1));
    if (!buf)
        return slim_scratch_oom(err);
    int64_t *row = buf, *off = buf + p->n, at = 0;
    for (int i = 0; i < p->n; i++) {
        row[i] = sizes[i] * inner;
        off[i] = at;
        at += row[i];
    }
    p->joined_row = at;
    p->part_row = row;
    p->offset = off;
    if (outer > 0 && at > 0)
        slim_parallel_for(outer, 1 + GRAIN_BYTES / at, join_job, p);
    slim_scratch_free(buf);
    return SLIM_OK;
}

static slim_status concat_exec(slim_op_ctx *ctx)
{
    slim_tensor *y = ctx->out[0];
    int axis;
    slim_norm_axis(slim_attr_int(ctx->node, "axis", 1), y->ndim, &axis, NULL);
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    char **parts = malloc(sizeof(char *) * (size_t)ctx->n_in);
    int64_t *sizes = malloc(sizeof(int64_t) * (size_t)ctx->n_in);
    slim_status st = SLIM_OK;
    if (!parts || !sizes) {
        st = slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    } else {
        for (int i = 0; i < ctx->n_in; i++) {
            parts[i] = ctx->in[i]->data;
            sizes[i] = ctx->in[i]->dims[axis];
        }
        rows_plan p = {.n = ctx->n_in, .joined = y->data, .part = parts, .to_joined = true};
        st = run_rows_plan(&p, slim_shape_numel(axis, y->dims), axis, y, sizes, ctx->err);
    }
    free(parts);
    free(sizes);
    return st;
}

/* Split sizes along the axis, one per output; caller frees *sizes. */
static slim_status split_geometry(slim_op_ctx *ctx, int *axis, int64_t **sizes)
{
    const slim_tensor *x = ctx->in[0];
    int n = ctx->n_out;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, axis, ctx->err);
    if (st)
        return st;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot split a scalar");
    /* raw: n + 1 offsets, n the node's outputs: sized by the graph */
    int64_t dim = x->dims[*axis], *s = calloc((size_t)n + 1, sizeof(int64_t));
    if (!s)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    const slim_tensor *split_in = ctx->node->opset >= 13 || ctx->node->opset < 2 ? slim_opt_in(ctx, 1)
                                                                                 : NULL;
    const slim_attr *split_attr = ctx->node->opset < 13 ? slim_node_attr(ctx->node, "split")
                                                        : NULL;
    int64_t num_outputs = ctx->node->opset >= 18 ? slim_attr_int(ctx->node, "num_outputs", 0) : 0;
    int given = -1;
    if (split_in) {
        if ((st = slim_read_ints(split_in, "split", s, n + 1, &given, ctx->err))) {
            free(s);
            return st;
        }
    } else if (split_attr && split_attr->type == SLIM_ATTR_INTS) {
        given = split_attr->n;
        if (given == n)
            memcpy(s, split_attr->ints, sizeof(int64_t) * (size_t)n);
    }
    int64_t sum = 0;
    if (given == 0 && n > 0)
        given = -1; /* an empty split input means "not given" */
    if (given >= 0) {
        if (given != n) {
            free(s);
            return slim_errf(ctx->err, SLIM_EINVAL, "split has %d sizes for %d outputs", given, n);
        }
        /* Each size within what the axis has left: a negative one, or a
         * hostile file's that would overflow the sum, cannot add up. */
        for (int i = 0; i < n && sum >= 0; i++)
            sum = s[i] >= 0 && s[i] <= dim - sum ? sum + s[i] : -1;
    } else if (num_outputs) {
        if (num_outputs != n) {
            free(s);
            return slim_errf(ctx->err, SLIM_EINVAL, "num_outputs is %lld but the node has %d "
                             "outputs", (long long)num_outputs, n);
        }
        int64_t chunk = (dim + n - 1) / n; /* the last part may be smaller */
        for (int i = 0; i < n; i++) {
            s[i] = dim - sum < chunk ? dim - sum : chunk;
            sum += s[i];
        }
    } else if (n > 0 && dim % n == 0) {
        for (int i = 0; i < n; i++)
            s[i] = dim / n;
        sum = dim;
    }
    if (sum != dim) {
        free(s);
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot split an axis of size %lld into %d parts",
                         (long long)dim, n);
    }
    *sizes = s;
    return SLIM_OK;
}

static slim_status split_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int axis;
    int64_t *sizes;
    slim_status st = split_geometry(ctx, &axis, &sizes);
    if (st)
        return st;
    for (int i = 0; i < ctx->n_out; i++)
        if (ctx->out[i]) {
            slim_tensor_set_like(ctx->out[i], x);
            ctx->out[i]->dims[axis] = sizes[i];
        }
    free(sizes);
    return SLIM_OK;
}

static slim_status split_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int axis;
    int64_t *sizes;
    slim_status st = split_geometry(ctx, &axis, &sizes);
    if (st)
        return st;
    /* raw: one entry per node or subgraph input/output: sized by the graph, not the tensors */
    char **parts = malloc(sizeof(char *) * (size_t)(ctx->n_out ? ctx->n_out : 1));
    if (!parts) {
        free(sizes);
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    }
    for (int i = 0; i < ctx->n_out; i++)
        parts[i] = ctx->out[i] ? ctx->out[i]->data : NULL;
    rows_plan p = {.n = ctx->n_out, .joined = x->data, .part = parts, .to_joined = false};
    st = run_rows_plan(&p, slim_shape_numel(axis, x->dims), axis, x, sizes, ctx->err);
    free(parts);
    free(sizes);
    return st;
}

/* ---- table -------------------------------------------------------------- */

const slim_op_def slim__ops_movement[] = {
    {"Transpose", 1, NULL, NULL, transpose_infer, transpose_exec, 0},
    {"DepthToSpace", 1, space_prepare, NULL, d2s_infer, d2s_exec, 0},
    {"SpaceToDepth", 1, space_prepare, NULL, s2d_infer, s2d_exec, 0},
    {"Slice", 1, NULL, NULL, slice_infer, slice_exec, 0},
    {"Expand", 8, NULL, NULL, expand_infer, expand_exec, 0},
    {"Tile", 6, NULL, NULL, tile_infer, tile_exec, 0},
    {"Concat", 1, NULL, NULL, concat_infer, concat_exec, 0},
    {"Split", 1, NULL, NULL, split_infer, split_exec, 0},
    {0},
};
