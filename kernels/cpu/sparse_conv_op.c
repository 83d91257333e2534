/*
 * sparse_conv_op.c - com.slimserve SparseConv, the operator the pruning
 * pass (quant/prune.c) puts in place of a 2-D Conv whose pruned weight is
 * cheaper sparse, with the Conv's epilogue fused in:
 *
 *   SparseConv(X, values, indices[, rowptr][, bias][, R][, scale]) -> Y
 *       attrs: encoding ("csr" | "2:4"), K = C/group * kh * kw,
 *              kernel_shape [kh, kw], strides, dilations, pads (4, explicit),
 *              group, activation (0 none, 1 Relu, 2 Clip to [alpha, beta])
 *       values, indices, rowptr: SparseMatMul's encodings (kernels/sparse.h)
 *              of the weight [M, C/group, kh, kw] seen as M rows of K;
 *              float32 values, or int8 codes with scale float32 [M] (the
 *              quantization pass, quant/int8_sparse.c: channel j's weight
 *              is its codes times scale[j])
 *       bias float32 [M]; R (a residual Add, fused) float32 of Y's shape
 *       X float32 [N, C, H, W]; Y float32 [N, M, OH, OW]
 *       Y = act(conv(X) + bias + R)
 *
 * Like SparseMatMul the weight's operands must be initializers
 * (runtime/validate.c), so their contents (row pointers monotone, every k
 * below K) are checked once, at the first run, and trusted after.
 */
#include "kernel.h"
#include "sparse.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    slim_sparse_enc enc;
    int64_t k, kh, kw, s[2], d[2], p[4], group;
    int act;
    float lo, hi;
    _Atomic int checked;
} sconv_state;

static slim_status sconv_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *enc = slim_attr_str(node, "encoding", "");
    /* raw: fixed-size load-time state, freed with the model */
    sconv_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    int64_t ks[2] = {0, 0};
    int n;
    s->s[0] = s->s[1] = s->d[0] = s->d[1] = 1;
    if (strcmp(enc, "csr") == 0)
        s->enc = SLIM_SPARSE_CSR;
    else if (strcmp(enc, "2:4") == 0)
        s->enc = SLIM_SPARSE_24;
    else
        st = slim_errf(err, SLIM_EINVAL, "encoding \"%s\" is not \"csr\" or \"2:4\"", enc);
    if (!st && ((st = slim_attr_geometry(node, "kernel_shape", ks, 2, 1, &n, err)) || n != 2))
        st = st ? st : slim_errf(err, SLIM_EINVAL, "kernel_shape must hold 2 values");
    if (!st && ((st = slim_attr_geometry(node, "strides", s->s, 2, 1, &n, err)) ||
                (n >= 0 && n != 2)))
        st = st ? st : slim_errf(err, SLIM_EINVAL, "strides must hold 2 values");
    if (!st && ((st = slim_attr_geometry(node, "dilations", s->d, 2, 1, &n, err)) ||
                (n >= 0 && n != 2)))
        st = st ? st : slim_errf(err, SLIM_EINVAL, "dilations must hold 2 values");
    if (!st && ((st = slim_attr_geometry(node, "pads", s->p, 4, 0, &n, err)) ||
                (n >= 0 && n != 4)))
        st = st ? st : slim_errf(err, SLIM_EINVAL, "pads must hold 4 values");
    s->kh = ks[0];
    s->kw = ks[1];
    s->k = slim_attr_int(node, "K", 0);
    s->group = slim_attr_int(node, "group", 1);
    s->act = (int)slim_attr_int(node, "activation", 0);
    s->lo = slim_attr_float(node, "alpha", 0.0f);
    s->hi = slim_attr_float(node, "beta", 0.0f);
    if (!st && (s->k < 1 || s->k > (1LL << 31) - 1 || s->k % (s->kh * s->kw)))
        st = slim_errf(err, SLIM_EINVAL, "attribute K = %lld must be from 1 to 2^31 - 1 and a "
                       "multiple of kh * kw = %lld", (long long)s->k, (long long)(s->kh * s->kw));
    if (!st && (s->group < 1 || s->group > (1LL << 31) - 1))
        st = slim_errf(err, SLIM_EINVAL, "group = %lld must be at least 1",
                       (long long)s->group);
    if (!st && (s->act < 0 || s->act > 2))
        st = slim_errf(err, SLIM_EINVAL, "activation = %d is not 0 (none), 1 (Relu) or 2 (Clip)",
                       s->act);
    if (st) {
        free(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

/* The weight's geometry from the operands' dtypes and shapes (data not
 * read), and the conv's from X. */
static slim_status geometry(const slim_op_ctx *ctx, slim_sparse_conv *c, int64_t *nnz)
{
    const sconv_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *v = ctx->in[1], *ix = ctx->in[2];
    const slim_tensor *rp = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *scale = ctx->n_in > 6 ? ctx->in[6] : NULL;
    memset(c, 0, sizeof(*c));
    slim_sparse_w *w = &c->w;
    if (x->dtype != SLIM_F32 || x->ndim != 4)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X must be float32 [N, C, H, W]");
    if (!v || !ix || (v->dtype != SLIM_F32 && v->dtype != SLIM_I8))
        return slim_errf(ctx->err, SLIM_ETYPE, "float32 or int8 values and indices are "
                         "required");
    if ((v->dtype == SLIM_I8) != (scale != NULL))
        return slim_errf(ctx->err, SLIM_EINVAL, "int8 values take their scales (input 6), "
                         "float32 values none");
    slim_status st = slim_sparse_operands(s->enc, s->k, v, ix, rp, bias, scale, 'M', false, w,
                                          nnz, ctx->err);
    if (st)
        return st;
    w->bias = bias ? bias->data : NULL;
    int64_t cg = s->k / (s->kh * s->kw);
    if (w->n % s->group || x->dims[1] != cg * s->group)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X has %lld channels and the weight %lld "
                         "outputs; expected %lld channels (K / (kh kw) x group) and outputs "
                         "a multiple of group %lld", (long long)x->dims[1], (long long)w->n,
                         (long long)(cg * s->group), (long long)s->group);
    c->c = x->dims[1];
    c->h = x->dims[2];
    c->wd = x->dims[3];
    c->kh = s->kh;
    c->kw = s->kw;
    c->sh = s->s[0];
    c->sw = s->s[1];
    c->dh = s->d[0];
    c->dw = s->d[1];
    c->pt = s->p[0];
    c->pl = s->p[1];
    c->group = s->group;
    c->act = s->act;
    c->lo = s->lo;
    c->hi = s->hi;
    int64_t eh = c->h + s->p[0] + s->p[2] - (s->d[0] * (s->kh - 1) + 1);
    int64_t ew = c->wd + s->p[1] + s->p[3] - (s->d[1] * (s->kw - 1) + 1);
    if (eh < 0 || ew < 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "the %lldx%lld window (dilated) is larger than "
                         "the padded %lldx%lld input", (long long)s->kh, (long long)s->kw,
                         (long long)c->h, (long long)c->wd);
    c->oh = eh / c->sh + 1;
    c->ow = ew / c->sw + 1;
    return SLIM_OK;
}

static slim_status sconv_infer(slim_op_ctx *ctx)
{
    slim_sparse_conv c;
    int64_t nnz;
    slim_status st = geometry(ctx, &c, &nnz);
    if (st)
        return st;
    int64_t dims[4] = {ctx->in[0]->dims[0], c.w.n, c.oh, c.ow};
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, 4, dims);
    return SLIM_OK;
}

static slim_status sconv_exec(slim_op_ctx *ctx)
{
    sconv_state *s = (sconv_state *)ctx->state;
    slim_sparse_conv c;
    int64_t nnz;
    slim_status st = geometry(ctx, &c, &nnz);
    if (st)
        return st;
    if (!atomic_load(&s->checked)) {
        if ((st = slim_sparse_check(&c.w, nnz, ctx->err)))
            return st;
        atomic_store(&s->checked, 1);
    }
    slim_tensor *y = ctx->out[0];
    const slim_tensor *r = ctx->n_in > 5 ? ctx->in[5] : NULL;
    if (r) {
        bool same = r->dtype == SLIM_F32 && r->ndim == 4;
        for (int d = 0; same && d < 4; d++)
            same = r->dims[d] == y->dims[d];
        if (!same)
            return slim_errf(ctx->err, SLIM_ESHAPE, "the fused residual (input 5) must be "
                             "float32 of the output's shape");
    }
    return slim_sparse_conv_run(&c, ctx->in[0]->dims[0], ctx->in[0]->data, r ? r->data : NULL,
                                y->data, ctx->err);
}

const slim_op_def slim__ops_sparse_conv[] = {
    {"SparseConv", 1, sconv_prepare, free, sconv_infer, sconv_exec, 0},
    {0},
};
