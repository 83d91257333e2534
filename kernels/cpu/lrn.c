/*
 * lrn.c - LRN, local response normalization across channels (AlexNet,
 * GoogLeNet and the Caffe-era models exported from them).
 *
 * y[n,c,...] = x[n,c,...] / (bias + alpha / size * sum_{c'} x[n,c',...]^2)^beta
 * with c' over [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to the
 * channels. Each window is summed afresh in double rather than slid (add
 * one square, drop one): windows are small (5 in AlexNet) and a sliding
 * sum's subtractions can leave a slightly negative sum where the squares
 * are far apart in magnitude, which pow() then turns into NaN.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t size;
    double alpha, beta, bias;
} lrn_state;

static slim_status lrn_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "size");
    if (!a || a->type != SLIM_ATTR_INT)
        return slim_errf(err, SLIM_EINVAL, "attribute size (an int) is required");
    if (a->i < 1 || a->i > (1 << 20))
        return slim_errf(err, SLIM_EINVAL, "size = %lld, must be in [1, 1048576]",
                         (long long)a->i);
    /* raw: fixed-size load-time state, freed with the model */
    lrn_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->size = a->i;
    st->alpha = slim_attr_float(node, "alpha", 1e-4f);
    st->beta = slim_attr_float(node, "beta", 0.75f);
    st->bias = slim_attr_float(node, "bias", 1.0f);
    *state = st;
    return SLIM_OK;
}

static slim_status lrn_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_ESHAPE,
                         "X has %d dims, expected at least 2 (N, C, ...)", x->ndim);
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

typedef struct {
    const lrn_state *st;
    const slim_tensor *x;
    slim_tensor *y;
    int64_t C, inner;
    bool failed;
} lrn_job;

/* Images [begin, end): one image at a time, all its spatial positions
 * together so that the loops over `inner` stay contiguous. */
static void lrn_task(int64_t begin, int64_t end, void *user)
{
    lrn_job *j = user;
    const int64_t C = j->C, inner = j->inner;
    const int64_t lo = (j->st->size - 1) / 2, hi = j->st->size - 1 - lo;
    const double k = j->st->alpha / (double)j->st->size;
    /* raw (both): per chunk on a kernel thread, which has no account to charge (parallel.c
     * carries only the cancel token); one image of the input */
    double *sq = malloc(sizeof(double) * (size_t)(C * inner)); /* squares */
    double *win = malloc(sizeof(double) * (size_t)inner);      /* window sums */
    if (!sq || !win) {
        j->failed = true;
        free(sq);
        free(win);
        return;
    }
    for (int64_t n = begin; n < end; n++) {
        const int64_t base = n * C * inner;
        for (int64_t i = 0; i < C * inner; i++) {
            double v = slim_load_f64(j->x->dtype, j->x->data, base + i);
            sq[i] = v * v;
        }
        for (int64_t c = 0; c < C; c++) {
            int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
            memset(win, 0, sizeof(double) * (size_t)inner);
            for (int64_t w = c0; w <= c1; w++)
                for (int64_t p = 0; p < inner; p++)
                    win[p] += sq[w * inner + p];
            for (int64_t p = 0; p < inner; p++) {
                double v = slim_load_f64(j->x->dtype, j->x->data, base + c * inner + p);
                double d = pow(j->st->bias + k * win[p], j->st->beta);
                slim_store_f64(j->y->dtype, j->y->data, base + c * inner + p, v / d);
            }
        }
    }
    free(sq);
    free(win);
}

static slim_status lrn_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    lrn_job j = {ctx->state, x, ctx->out[0], x->dims[1], 1, false};
    for (int d = 2; d < x->ndim; d++)
        j.inner *= x->dims[d];
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    slim_parallel_for(x->dims[0], 1, lrn_task, &j);
    if (j.failed)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory for the LRN window");
    return SLIM_OK;
}

const slim_op_def slim__ops_lrn[] = {
    {"LRN", 1, lrn_prepare, free, lrn_infer, lrn_exec, 0},
    {0},
};
