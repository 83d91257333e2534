/*
 * loss.c - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: models
 * exported with their loss (evaluation graphs, scoring services) compute
 * it at inference too.
 *
 * Input [N, C, d...], target [N, d...] of class indices, optional weight
 * [C]. Each position's loss is -weight[t] * input[n, t, d] (of the log
 * softmax over C for SoftmaxCrossEntropyLoss), zero where t is
 * ignore_index. "mean" divides by the summed weights when weights apply
 * (given, or an ignore_index), else by the count, as the ONNX reference
 * does (for NegativeLogLikelihoodLoss an ignore_index of -1 counts as none
 * there, and so it does here). Sums run in double.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { RED_NONE, RED_SUM, RED_MEAN };

typedef struct {
    int reduction;
    bool has_ignore;
    int64_t ignore;
    bool softmax;
} loss_state;

static slim_status loss_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *r = slim_attr_str(node, "reduction", "mean");
    int red = strcmp(r, "none") == 0 ? RED_NONE : strcmp(r, "sum") == 0 ? RED_SUM
              : strcmp(r, "mean") == 0 ? RED_MEAN : -1;
    if (red < 0)
        return slim_errf(err, SLIM_EINVAL, "reduction \"%s\" is not none, sum or mean", r);
    /* raw: fixed-size load-time state, freed with the model */
    loss_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->reduction = red;
    st->has_ignore = slim_node_attr(node, "ignore_index") != NULL;
    st->ignore = slim_attr_int(node, "ignore_index", 0);
    st->softmax = strcmp(node->op_type, "SoftmaxCrossEntropyLoss") == 0;
    *state = st;
    return SLIM_OK;
}

static slim_status loss_check(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *t = ctx->in[1];
    const slim_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    char a[128], b[128];
    slim_status s = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(t, "target", ctx->err, SLIM_I32, SLIM_I64, SLIM_DTYPE_UNDEFINED)))
        return s;
    bool ok = x->ndim >= 2 && t->ndim == x->ndim - 1 && t->dims[0] == x->dims[0];
    for (int d = 1; ok && d < t->ndim; d++)
        ok = t->dims[d] == x->dims[d + 1];
    if (!ok)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input %s and target %s must be [N, C, d...] and "
                         "[N, d...]", slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(t->ndim, t->dims, b, sizeof(b)));
    if (w && (w->dtype != x->dtype || w->ndim != 1 || w->dims[0] != x->dims[1]))
        return slim_errf(ctx->err, SLIM_ESHAPE, "weight must be %s [%lld]",
                         slim_dtype_name(x->dtype), (long long)x->dims[1]);
    return SLIM_OK;
}

static slim_status loss_infer(slim_op_ctx *ctx)
{
    const loss_state *st = ctx->state;
    slim_status s = loss_check(ctx);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0], *t = ctx->in[1];
    if (st->reduction == RED_NONE)
        slim_tensor_set_shape(ctx->out[0], x->dtype, t->ndim, t->dims);
    else
        slim_tensor_set_shape(ctx->out[0], x->dtype, 0, NULL);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_like(ctx->out[1], x);
    return SLIM_OK;
}

static slim_status loss_exec(slim_op_ctx *ctx)
{
    const loss_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0], *t = ctx->in[1];
    const slim_tensor *w = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *y = ctx->out[0];
    slim_tensor *lp = ctx->n_out > 1 ? ctx->out[1] : NULL;
    const int64_t N = x->dims[0], C = x->dims[1], D = slim_tensor_numel(x) / (N * C > 0 ? N * C : 1);
    /* The log-probabilities (SoftmaxCrossEntropyLoss) or the input, as
     * doubles [N, C, D]. */
    const int64_t total = slim_tensor_numel(x);
    double *v = slim_scratch_malloc(sizeof(double) * (size_t)(total > 0 ? total : 1));
    if (!v)
        return slim_scratch_oom(ctx->err);
    for (int64_t i = 0; i < total; i++)
        v[i] = slim_load_f64(x->dtype, x->data, i);
    if (st->softmax)
        for (int64_t n = 0; n < N; n++)
            for (int64_t d = 0; d < D; d++) {
                double m = -INFINITY, sum = 0;
                for (int64_t c = 0; c < C; c++)
                    m = fmax(m, v[(n * C + c) * D + d]);
                for (int64_t c = 0; c < C; c++)
                    sum += exp(v[(n * C + c) * D + d] - m);
                double ls = log(sum);
                for (int64_t c = 0; c < C; c++)
                    v[(n * C + c) * D + d] -= m + ls;
            }
    if (lp)
        for (int64_t i = 0; i < total; i++)
            slim_store_f64(lp->dtype, lp->data, i, v[i]);
    /* NLL's reference treats ignore_index -1 as absent for the mean. */
    const bool weighted = w || (st->softmax ? st->has_ignore : !st->has_ignore || st->ignore != -1);
    double sum = 0, wsum = 0;
    slim_status s = SLIM_OK;
    for (int64_t n = 0; n < N && !s; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t cls = slim_load_i64(t->dtype, t->data, n * D + d);
            double l = 0, wt = 0;
            if (!(st->has_ignore && cls == st->ignore)) {
                if (cls < 0 || cls >= C) {
                    s = slim_errf(ctx->err, SLIM_EINVAL, "target holds class %lld, outside [0, "
                                  "%lld) (and not ignore_index)", (long long)cls, (long long)C);
                    break;
                }
                wt = w ? slim_load_f64(w->dtype, w->data, cls) : 1.0;
                l = -wt * v[(n * C + cls) * D + d];
            }
            if (st->reduction == RED_NONE)
                slim_store_f64(y->dtype, y->data, n * D + d, l);
            sum += l;
            wsum += wt;
        }
    if (!s && st->reduction != RED_NONE) {
        double r = sum;
        if (st->reduction == RED_MEAN)
            r = weighted ? sum / wsum : sum / (double)(N * D);
        slim_store_f64(y->dtype, y->data, 0, r);
    }
    slim_scratch_free(v);
    return s;
}

const slim_op_def slim__ops_loss[] = {
    {"NegativeLogLikelihoodLoss", 12, loss_prepare, free, loss_infer, loss_exec, 0},
    {"SoftmaxCrossEntropyLoss", 12, loss_prepare, free, loss_infer, loss_exec, 0},
    {0},
};
