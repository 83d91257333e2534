/*
 * unpool.c - the inverses of sliding windows: Col2Im (the sum of column
 * blocks back into an image, undoing im2col) and MaxUnpool (maxima put
 * back where MaxPool found them).
 *
 * MaxUnpool's indices are MaxPool's: flat offsets into the whole
 * [N, C, spatial...] tensor of the shape the window geometry implies.
 * When output_shape asks for a larger tensor, that implied tensor fills its
 * leading corner (ONNX's reference and its node test agree on this; PyTorch
 * instead reads the indices against output_shape).
 */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

#define UNPOOL_MAX_RANK (SLIM_MAX_DIMS - 2)

/* ---- MaxUnpool ----------------------------------------------------------- */

typedef struct {
    int r;
    int64_t implied[SLIM_MAX_DIMS], out[SLIM_MAX_DIMS];
} unpool_shape;

static slim_status unpool_shape_get(slim_op_ctx *ctx, unpool_shape *u)
{
    const slim_tensor *x = ctx->in[0], *idx = ctx->in[1];
    const slim_tensor *os = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t k[UNPOOL_MAX_RANK], st[UNPOOL_MAX_RANK], pads[2 * UNPOOL_MAX_RANK];
    int nk, ns, np;
    char a[128], b[128];
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(idx, "I", ctx->err, SLIM_I64, SLIM_DTYPE_UNDEFINED)))
        return s;
    u->r = x->ndim - 2;
    if (u->r < 1 || idx->ndim != x->ndim ||
        memcmp(idx->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X %s and I %s must have one shape [N, C, ...]",
                         slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(idx->ndim, idx->dims, b, sizeof(b)));
    if ((s = slim_attr_geometry(ctx->node, "kernel_shape", k, UNPOOL_MAX_RANK, 1, &nk, ctx->err)) ||
        (s = slim_attr_geometry(ctx->node, "strides", st, UNPOOL_MAX_RANK, 1, &ns, ctx->err)) ||
        (s = slim_attr_geometry(ctx->node, "pads", pads, 2 * UNPOOL_MAX_RANK, 0, &np, ctx->err)))
        return s;
    if (nk != u->r || (ns >= 0 && ns != u->r) || (np >= 0 && np != 2 * u->r))
        return slim_errf(ctx->err, SLIM_EINVAL, "kernel_shape, strides and pads must have %d, %d "
                         "and %d values", u->r, u->r, 2 * u->r);
    u->implied[0] = x->dims[0];
    u->implied[1] = x->dims[1];
    for (int i = 0; i < u->r; i++) {
        int64_t stride = ns < 0 ? 1 : st[i];
        int64_t pad = np < 0 ? 0 : pads[i] + pads[u->r + i];
        u->implied[2 + i] = (x->dims[2 + i] - 1) * stride - pad + k[i];
        if (u->implied[2 + i] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "pads leave spatial dim %d negative", i);
    }
    memcpy(u->out, u->implied, sizeof(u->out));
    if (os) {
        int64_t want[SLIM_MAX_DIMS];
        int n;
        if ((s = slim_read_ints(os, "output_shape", want, SLIM_MAX_DIMS, &n, ctx->err)))
            return s;
        if (n != x->ndim)
            return slim_errf(ctx->err, SLIM_ESHAPE, "output_shape has %d values, expected %d", n,
                             x->ndim);
        for (int i = 0; i < n; i++)
            if (want[i] < u->implied[i] || want[i] > (int64_t)1 << 31 ||
                (i < 2 && want[i] != u->implied[i]))
                return slim_errf(ctx->err, SLIM_ESHAPE, "output_shape %s is smaller than %s, "
                                 "the shape the windows imply (or changes N or C)",
                                 slim_shape_str(n, want, a, sizeof(a)),
                                 slim_shape_str(x->ndim, u->implied, b, sizeof(b)));
        memcpy(u->out, want, sizeof(int64_t) * (size_t)n);
    }
    return SLIM_OK;
}

static slim_status unpool_infer(slim_op_ctx *ctx)
{
    unpool_shape u;
    slim_status s = unpool_shape_get(ctx, &u);
    if (!s)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, ctx->in[0]->ndim, u.out);
    return s;
}

static slim_status unpool_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *idx = ctx->in[1];
    slim_tensor *y = ctx->out[0];
    unpool_shape u;
    slim_status s = unpool_shape_get(ctx, &u);
    if (s)
        return s;
    const int nd = x->ndim;
    const int64_t total = slim_shape_numel(nd, u.implied), n = slim_tensor_numel(x);
    const size_t es = slim_dtype_size(x->dtype);
    memset(y->data, 0, slim_tensor_nbytes(y));
    for (int64_t e = 0; e < n; e++) {
        int64_t at = ((const int64_t *)idx->data)[e];
        if (at < 0 || at >= total)
            return slim_errf(ctx->err, SLIM_EINVAL, "index %lld is outside the %lld elements of "
                             "the unpooled tensor", (long long)at, (long long)total);
        /* Position in the implied shape, then offset in the output's. */
        int64_t off = 0, rem = at, mul = 1;
        for (int d = nd - 1; d >= 0; d--) {
            off += (rem % u.implied[d]) * mul;
            rem /= u.implied[d];
            mul *= u.out[d];
        }
        memcpy((uint8_t *)y->data + (size_t)off * es, (const uint8_t *)x->data + (size_t)e * es, es);
    }
    return SLIM_OK;
}

/* ---- Col2Im -------------------------------------------------------------- */

typedef struct {
    int r;
    int64_t img[UNPOOL_MAX_RANK], blk[UNPOOL_MAX_RANK], dil[UNPOOL_MAX_RANK],
        st[UNPOOL_MAX_RANK], pads[2 * UNPOOL_MAX_RANK], cols[UNPOOL_MAX_RANK];
    int64_t C, K, L; /* channels, block elements, block positions */
} col2im_shape;

static slim_status col2im_shape_get(slim_op_ctx *ctx, col2im_shape *c)
{
    const slim_tensor *x = ctx->in[0];
    int ni, nb, nd, ns, np;
    char a[128];
    slim_status s = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_read_ints(ctx->in[1], "image_shape", c->img, UNPOOL_MAX_RANK, &ni, ctx->err)) ||
        (s = slim_read_ints(ctx->in[2], "block_shape", c->blk, UNPOOL_MAX_RANK, &nb, ctx->err)))
        return s;
    if (ni != nb || ni < 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "image_shape (%d values) and block_shape (%d) "
                         "must have one length", ni, nb);
    c->r = ni;
    if ((s = slim_attr_geometry(ctx->node, "dilations", c->dil, UNPOOL_MAX_RANK, 1, &nd, ctx->err)) ||
        (s = slim_attr_geometry(ctx->node, "strides", c->st, UNPOOL_MAX_RANK, 1, &ns, ctx->err)) ||
        (s = slim_attr_geometry(ctx->node, "pads", c->pads, 2 * UNPOOL_MAX_RANK, 0, &np, ctx->err)))
        return s;
    if ((nd >= 0 && nd != c->r) || (ns >= 0 && ns != c->r) || (np >= 0 && np != 2 * c->r))
        return slim_errf(ctx->err, SLIM_EINVAL, "dilations, strides and pads must have %d, %d and "
                         "%d values", c->r, c->r, 2 * c->r);
    c->K = 1;
    c->L = 1;
    for (int i = 0; i < c->r; i++) {
        if (nd < 0)
            c->dil[i] = 1;
        if (ns < 0)
            c->st[i] = 1;
        if (np < 0)
            c->pads[i] = c->pads[c->r + i] = 0;
        if (c->img[i] < 1 || c->blk[i] < 1 || c->img[i] > (1 << 24) || c->blk[i] > (1 << 24))
            return slim_errf(ctx->err, SLIM_EINVAL, "image_shape[%d] = %lld and block_shape[%d] "
                             "= %lld must be in [1, 2^24]", i, (long long)c->img[i], i,
                             (long long)c->blk[i]);
        int64_t span = c->dil[i] * (c->blk[i] - 1) + 1;
        c->cols[i] = (c->img[i] + c->pads[i] + c->pads[c->r + i] - span) / c->st[i] + 1;
        if (c->img[i] + c->pads[i] + c->pads[c->r + i] < span)
            return slim_errf(ctx->err, SLIM_EINVAL, "block %d spans %lld, more than the padded "
                             "image's %lld", i, (long long)span,
                             (long long)(c->img[i] + c->pads[i] + c->pads[c->r + i]));
        c->K *= c->blk[i];
        c->L *= c->cols[i];
    }
    if (x->ndim != 3 || x->dims[1] % c->K || x->dims[2] != c->L)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input %s must be [N, C * %lld, %lld] for these "
                         "image and block shapes", slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         (long long)c->K, (long long)c->L);
    c->C = x->dims[1] / c->K;
    return SLIM_OK;
}

static slim_status col2im_infer(slim_op_ctx *ctx)
{
    col2im_shape c;
    slim_status s = col2im_shape_get(ctx, &c);
    if (s)
        return s;
    int64_t dims[SLIM_MAX_DIMS] = {ctx->in[0]->dims[0], c.C};
    memcpy(dims + 2, c.img, sizeof(int64_t) * (size_t)c.r);
    slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, c.r + 2, dims);
    return SLIM_OK;
}

static slim_status col2im_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    col2im_shape c;
    slim_status s = col2im_shape_get(ctx, &c);
    if (s)
        return s;
    const int64_t N = x->dims[0], img = slim_shape_numel(c.r, c.img);
    double *acc = slim_scratch_calloc((size_t)(img > 0 ? img : 1), sizeof(double));
    if (!acc)
        return slim_scratch_oom(ctx->err);
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < c.C; ch++) {
            memset(acc, 0, sizeof(double) * (size_t)img);
            for (int64_t k = 0; k < c.K; k++)
                for (int64_t l = 0; l < c.L; l++) {
                    /* Block offset k and block position l, row-major. */
                    int64_t kr = k, lr = l, off = 0, mul = 1;
                    bool inside = true;
                    for (int d = c.r - 1; d >= 0; d--) {
                        int64_t kd = kr % c.blk[d], ld = lr % c.cols[d];
                        kr /= c.blk[d];
                        lr /= c.cols[d];
                        int64_t p = ld * c.st[d] - c.pads[d] + kd * c.dil[d];
                        if (p < 0 || p >= c.img[d]) {
                            inside = false;
                            break;
                        }
                        off += p * mul;
                        mul *= c.img[d];
                    }
                    if (inside)
                        acc[off] += slim_load_f64(x->dtype, x->data,
                                                  ((n * c.C + ch) * c.K + k) * c.L + l);
                }
            for (int64_t i = 0; i < img; i++)
                slim_store_f64(y->dtype, y->data, (n * c.C + ch) * img + i, acc[i]);
        }
    slim_scratch_free(acc);
    return SLIM_OK;
}

const slim_op_def slim__ops_unpool[] = {
    {"MaxUnpool", 9, NULL, NULL, unpool_infer, unpool_exec, 0},
    {"Col2Im", 18, NULL, NULL, col2im_infer, col2im_exec, 0},
    {0},
};
