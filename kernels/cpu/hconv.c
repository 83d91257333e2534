/*
 * hconv.c - ConvHalf (domain com.slimserve), which the half-weights pass
 * (quant/half.c) puts in place of Conv:
 *
 *   ConvHalf(X, W[, B]) -> Y        Conv's attributes
 *       X float32; W float16 or bfloat16, Conv's [M, C/group, k...] layout;
 *       B float32 [M]. Y float32, as Conv computes it.
 *
 * The weights stay half at rest (the memory and file size the pass is
 * for); each run widens them into a transient float32 buffer and runs the
 * float32 Conv kernel on it, so the results are Conv's own on the rounded
 * weights. The widening costs M * C/group * k elements per run, small next
 * to the convolution's N * M * C/group * k * spatial multiply-adds. A half
 * convolution in oneDNN (bf16 src reordered, f32 dst) would save the
 * widening but also rounds activations; not done here.
 */
#include "kernel.h"
#include "hgemm.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const slim_op_def *conv;  /* the float Conv the node runs as */
    void *state;              /* its prepared attributes */
} conv_half_state;

static slim_status conv_half_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_op_def *d = slim_op_lookup("", "Conv", 22);
    if (!d)
        return slim_errf(err, SLIM_EUNSUPPORTED, "no Conv kernel to run ConvHalf with");
    /* raw: fixed-size load-time state, freed with the model */
    conv_half_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->conv = d;
    slim_status st = d->prepare ? d->prepare(node, &s->state, err) : SLIM_OK;
    if (st) {
        free(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

static void conv_half_release(void *state)
{
    conv_half_state *s = state;
    if (s && s->conv->release)
        s->conv->release(s->state);
    free(s);
}

/* ctx with W replaced by w (a float32 tensor of W's shape) and Conv's state. */
static void shadow_ctx(const slim_op_ctx *ctx, const slim_tensor *w, const slim_tensor **ins,
                       slim_op_ctx *out)
{
    const conv_half_state *s = ctx->state;
    for (int i = 0; i < ctx->n_in; i++)
        ins[i] = ctx->in[i];
    ins[1] = w;
    *out = *ctx;
    out->state = s->state;
    out->in = ins;
}

static slim_status check_operands(const slim_op_ctx *ctx)
{
    if (ctx->n_in < 2 || ctx->n_in > 3 || !ctx->in[0] || !ctx->in[1])
        return slim_errf(ctx->err, SLIM_EINVAL, "ConvHalf takes X, W and an optional B");
    slim_status st = slim_check_dtype(ctx->in[0], "input X", ctx->err, SLIM_F32,
                                      SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(ctx->in[1], "weight W", ctx->err, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED)))
        return st;
    return SLIM_OK;
}

static slim_status conv_half_infer(slim_op_ctx *ctx)
{
    const conv_half_state *s = ctx->state;
    slim_status st = check_operands(ctx);
    if (st)
        return st;
    slim_tensor w = *ctx->in[1];
    w.dtype = SLIM_F32;
    w.data = NULL; /* Conv's infer reads shapes only */
    const slim_tensor *ins[3];
    slim_op_ctx c;
    shadow_ctx(ctx, &w, ins, &c);
    return s->conv->infer(&c);
}

static slim_status conv_half_exec(slim_op_ctx *ctx)
{
    const conv_half_state *s = ctx->state;
    slim_status st = check_operands(ctx);
    if (st)
        return st;
    const slim_tensor *h = ctx->in[1];
    slim_tensor w = {.dtype = SLIM_F32, .ndim = h->ndim};
    memcpy(w.dims, h->dims, sizeof(w.dims));
    if ((st = slim_tensor_alloc(&w, ctx->err)))
        return st;
    slim_half_widen(h->data, h->dtype, w.data, slim_tensor_numel(h));
    const slim_tensor *ins[3];
    slim_op_ctx c;
    shadow_ctx(ctx, &w, ins, &c);
    st = s->conv->exec(&c);
    slim_tensor_release(&w);
    return st;
}

const slim_op_def slim__ops_hconv[] = {
    {"ConvHalf", 1, conv_half_prepare, conv_half_release, conv_half_infer, conv_half_exec, 0},
    {0},
};
