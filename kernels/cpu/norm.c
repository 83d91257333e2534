/*
 * norm.c - normalizations: LayerNormalization, RMSNormalization,
 * GroupNormalization, InstanceNormalization, BatchNormalization,
 * LpNormalization and MeanVarianceNormalization (Softmax, LogSoftmax and
 * Hardmax, which share the row helpers of norm_impl.h, are in softmax.c).
 *
 * Each op normalizes "rows": a run of elements that share one statistic
 * (a mean and variance, a norm). Rows are gathered into a double scratch
 * buffer, computed there and scattered back, so that every float type
 * (float16 and bfloat16 included) shares one accurate code path; the
 * hottest case, float32 LayerNormalization rows without stashed
 * statistics, has a direct float32 path (slim_ln_rows_f32). Statistics use
 * two passes (mean, then squared deviations), which unlike E[x^2] -
 * E[x]^2 does not cancel catastrophically for large offsets.
 */
#include "kernel.h"
#include "norm_impl.h"
#include "norm_simd.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

/* A parameter (scale, bias) must broadcast to `dims` from the right; extra
 * leading dims of size 1 are allowed. */
static slim_status check_param(const slim_tensor *p, int nd, const int64_t *dims,
                               const char *what, slim_err *err)
{
    slim_status s = slim_check_dtype(p, what, err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    for (int i = 0; i < p->ndim; i++) {
        int j = i - (p->ndim - nd);
        int64_t want = j < 0 ? 1 : dims[j];
        if (p->dims[i] != want && p->dims[i] != 1) {
            char a[128], b[128];
            return slim_errf(err, SLIM_ESHAPE, "%s has shape %s, which does not broadcast to %s",
                             what, slim_shape_str(p->ndim, p->dims, a, sizeof(a)),
                             slim_shape_str(nd, dims, b, sizeof(b)));
        }
    }
    return SLIM_OK;
}

/* Expands p (checked by check_param) to prod(dims) doubles; NULL p gives
 * `fill`. Returns NULL when out of memory. */
static double *expand_param(const slim_tensor *p, int nd, const int64_t *dims, double fill)
{
    int64_t total = slim_shape_numel(nd, dims);
    double *dst = slim_scratch_malloc(sizeof(double) * (size_t)(total > 0 ? total : 1));
    if (!dst || total == 0)
        return dst;
    if (!p) {
        for (int64_t i = 0; i < total; i++)
            dst[i] = fill;
        return dst;
    }
    /* Drop p's leading size-1 dims beyond nd, then broadcast. */
    int skip = p->ndim > nd ? p->ndim - nd : 0;
    int64_t strides[SLIM_MAX_DIMS], idx[SLIM_MAX_DIMS] = {0}, off = 0;
    slim_broadcast_strides(p->ndim - skip, p->dims + skip, nd, dims, strides);
    for (int64_t e = 0; e < total; e++) {
        dst[e] = slim_load_f64(p->dtype, p->data, off);
        for (int k = nd - 1; k >= 0; k--) {
            off += strides[k];
            if (++idx[k] < dims[k])
                break;
            off -= strides[k] * dims[k];
            idx[k] = 0;
        }
    }
    return dst;
}

/* Mean and 1/sqrt(var + eps) of n doubles. rms: no centring, the "variance"
 * is the mean square. */
static void row_stats(const double *v, int64_t n, double eps, bool rms, double *mean,
                      double *inv_std)
{
    double m = 0, ss = 0;
    if (!rms) {
        for (int64_t i = 0; i < n; i++)
            m += v[i];
        m /= (double)n;
    }
    for (int64_t i = 0; i < n; i++)
        ss += (v[i] - m) * (v[i] - m);
    *mean = m;
    *inv_std = 1.0 / sqrt(ss / (double)n + eps);
}

/* ---- LayerNormalization / RMSNormalization ------------------------------- */

/* Both normalize rows of prod(dims[axis:]) elements: LayerNormalization
 * with mean and variance, RMSNormalization with the mean square only. */
typedef struct {
    bool rms;
    int64_t axis;
    float epsilon;
    slim_dtype stash; /* dtype of the Mean / InvStdDev outputs */
} ln_state;

static slim_status ln_prepare(slim_node *node, void **state, slim_err *err)
{
    ln_state *st = calloc(1, sizeof(*st)); /* load-time state, fixed size */
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->rms = strcmp(node->op_type, "RMSNormalization") == 0;
    st->axis = slim_attr_int(node, "axis", -1);
    st->epsilon = slim_attr_float(node, "epsilon", 1e-5f);
    int64_t stash = slim_attr_int(node, "stash_type", 1);
    st->stash = slim_dtype_from_onnx((int)stash);
    if (!slim_dtype_is_float(st->stash)) {
        free(st);
        return slim_errf(err, SLIM_EUNSUPPORTED, "stash_type %lld is not a float type",
                         (long long)stash);
    }
    *state = st;
    return SLIM_OK;
}

static slim_status ln_infer(slim_op_ctx *ctx)
{
    const ln_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = check_float(x, "input X", ctx->err);
    if (s || (s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err)))
        return s;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X is a scalar; needs rank >= 1");
    if (ctx->n_in < 2 || !ctx->in[1])
        return slim_errf(ctx->err, SLIM_EINVAL, "input Scale is missing");
    int nd = x->ndim - axis;
    if ((s = check_param(ctx->in[1], nd, x->dims + axis, "input Scale", ctx->err)))
        return s;
    if (!st->rms && ctx->n_in > 2 && ctx->in[2] &&
        (s = check_param(ctx->in[2], nd, x->dims + axis, "input B", ctx->err)))
        return s;
    slim_tensor_set_like(ctx->out[0], x);
    int64_t dims[SLIM_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        dims[i] = i < axis ? x->dims[i] : 1;
    for (int k = 1; k < ctx->n_out && k < 3; k++)
        if (ctx->out[k])
            slim_tensor_set_shape(ctx->out[k], st->stash, x->ndim, dims);
    return SLIM_OK;
}

typedef struct {
    const ln_state *st;
    const slim_tensor *x;
    slim_tensor *y, *mean, *inv_std;
    const double *scale, *bias; /* expanded to r */
    const float *scale_f, *bias_f; /* the float32 rows' (bias_f NULL: none) */
    int64_t r;
    bool failed;
} ln_job;

/* 1: the AVX-512 rows; SLIM_LN_PORTABLE=1 keeps the portable ones (tests).
 *
 * The pool's threads call this at once for the first LayerNormalization
 * (rows split across them), and the two kinds of rows round differently.
 * So the choice is made in a local and published with one atomic store:
 * a thread sees "not chosen yet" (and makes the same choice itself) or the
 * final one. It used to store 0 into the cache and then 1, and a thread
 * that read the cache between the two ran its chunk with the portable rows:
 * the rows of a batch that chunk held then differed from the same rows run
 * alone, against --batch-invariant (format_e2e failed now and then). */
static int ln_kernel(void)
{
    static _Atomic int chosen = -1;
    int k = atomic_load(&chosen);
    if (k >= 0)
        return k;
    k = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    const char *env = getenv("SLIM_LN_PORTABLE");
    if (!(env && strcmp(env, "1") == 0) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl"))
        k = 1;
#endif
    atomic_store(&chosen, k);
    return k;
}

/* float32 in and out, no stashed statistics: the rows are read in place
 * rather than widened through gather / scatter one element at a time,
 * which cost more than the arithmetic (a BERT layer norm of 16 x 768 took
 * 0.37 ms), and computed in float32 with the correction norm_simd.c
 * describes. */
void slim_ln_rows_f32(const float *xs, float *ys, int64_t rows, int64_t r, bool rms, float eps,
                      const float *scale, const float *bias)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (ln_kernel() == 1) {
        slim_ln_rows_f32_avx512(xs, ys, rows, r, rms, eps, scale, bias);
        return;
    }
#endif
    for (int64_t o = 0; o < rows; o++) {
        const float *x = xs + o * r;
        float *y = ys + o * r;
        float m = 0, c = 0, q = 0;
        if (!rms) {
            for (int64_t i = 0; i < r; i++)
                m += x[i];
            m /= (float)r;
        }
        for (int64_t i = 0; i < r; i++) {
            float d = x[i] - m;
            c += d;
            q += d * d;
        }
        if (rms)
            c = 0;
        float var = (q - c * (c / (float)r)) / (float)r;
        float inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
        float mean = m + c / (float)r;
        for (int64_t i = 0; i < r; i++)
            y[i] = (x[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0.0f);
    }
}

/* Scale or bias as r floats for the rows above: the tensor's own data when
 * it is float32 with r elements (the usual [r]), else expanded from the
 * double parameter into *own (freed by the caller). */
static const float *ln_param_f32(const slim_tensor *p, const double *expanded, int64_t r,
                                 float **own)
{
    if (p && p->dtype == SLIM_F32 && slim_tensor_numel(p) == r)
        return p->data;
    float *f = slim_scratch_malloc(sizeof(float) * (size_t)(r > 0 ? r : 1));
    for (int64_t i = 0; f && i < r; i++)
        f[i] = (float)expanded[i];
    *own = f;
    return f;
}

static void ln_task(int64_t begin, int64_t end, void *user)
{
    ln_job *j = user;
    if (j->scale_f) {
        slim_ln_rows_f32((const float *)j->x->data + begin * j->r,
                         (float *)j->y->data + begin * j->r, end - begin, j->r, j->st->rms,
                         (float)j->st->epsilon, j->scale_f, j->bias_f);
        return;
    }
    /* One row, per chunk on a kernel thread (which has no account to
     * charge): bounded by the input's row. */
    double *row = malloc(sizeof(double) * (size_t)j->r);
    if (!row) {
        j->failed = true;
        return;
    }
    for (int64_t o = begin; o < end; o++) {
        double mean, inv;
        gather(j->x->dtype, j->x->data, o * j->r, 1, j->r, row);
        row_stats(row, j->r, j->st->epsilon, j->st->rms, &mean, &inv);
        for (int64_t i = 0; i < j->r; i++)
            row[i] = (row[i] - mean) * inv * j->scale[i] + j->bias[i];
        scatter(j->y->dtype, j->y->data, o * j->r, 1, j->r, row);
        if (j->mean)
            slim_store_f64(j->mean->dtype, j->mean->data, o, mean);
        if (j->inv_std)
            slim_store_f64(j->inv_std->dtype, j->inv_std->data, o, inv);
    }
    free(row);
}

static slim_status ln_exec(slim_op_ctx *ctx)
{
    const ln_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err);
    if (s)
        return s;
    ln_job j = {.st = st, .x = x, .y = ctx->out[0],
                .mean = ctx->n_out > 1 ? ctx->out[1] : NULL,
                .inv_std = ctx->n_out > 2 ? ctx->out[2] : NULL};
    int nd = x->ndim - axis;
    int64_t outer = slim_shape_numel(axis, x->dims);
    j.r = slim_shape_numel(nd, x->dims + axis);
    if (outer * j.r == 0)
        return SLIM_OK;
    const slim_tensor *bias = !st->rms && ctx->n_in > 2 ? ctx->in[2] : NULL;
    bool rows_f32 = x->dtype == SLIM_F32 && j.y->dtype == SLIM_F32 && !j.mean && !j.inv_std;
    double *scale = NULL, *b = NULL;
    float *own_s = NULL, *own_b = NULL;
    /* The float32 rows read a float32 [r] scale and bias where they are;
     * everything else goes through the double expansion. */
    bool direct = rows_f32 && ctx->in[1]->dtype == SLIM_F32 &&
                  slim_tensor_numel(ctx->in[1]) == j.r &&
                  (!bias || (bias->dtype == SLIM_F32 && slim_tensor_numel(bias) == j.r));
    if (!direct) {
        scale = expand_param(ctx->in[1], nd, x->dims + axis, 1.0);
        b = expand_param(bias, nd, x->dims + axis, 0.0);
        if (!scale || !b)
            goto oom;
    }
    j.scale = scale;
    j.bias = b;
    if (rows_f32) {
        j.scale_f = ln_param_f32(ctx->in[1], scale, j.r, &own_s);
        j.bias_f = bias ? ln_param_f32(bias, b, j.r, &own_b) : NULL;
        if (!j.scale_f || (bias && !j.bias_f))
            goto oom;
    }
    /* ~8 KiB of rows a chunk (see add_layernorm.c). */
    slim_parallel_for(outer, grain_for(j.r * 16), ln_task, &j);
    slim_scratch_free(scale);
    slim_scratch_free(b);
    slim_scratch_free(own_s);
    slim_scratch_free(own_b);
    if (j.failed)
        return slim_scratch_oom(ctx->err);
    return SLIM_OK;
oom:
    slim_scratch_free(scale);
    slim_scratch_free(b);
    slim_scratch_free(own_s);
    slim_scratch_free(own_b);
    return slim_scratch_oom(ctx->err);
}

/* ---- GroupNormalization / InstanceNormalization -------------------------- */

/* x is [N, C, spatial...]; channels split into G groups of C/G, each
 * normalized over its channels and spatial extent, then scaled per
 * channel. InstanceNormalization is the case G = C. */
typedef struct {
    const slim_tensor *x;
    slim_tensor *y;
    const double *scale, *bias; /* per channel */
    int64_t groups, cpg, spatial; /* channels per group */
    double eps;
    bool failed;
} gn_job;

static void gn_task(int64_t begin, int64_t end, void *user)
{
    gn_job *j = user;
    int64_t len = j->cpg * j->spatial;
    double *row = malloc(sizeof(double) * (size_t)len); /* one row on a kernel thread, as ln_task */
    if (!row) {
        j->failed = true;
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        double mean, inv;
        int64_t c0 = (u % j->groups) * j->cpg;
        gather(j->x->dtype, j->x->data, u * len, 1, len, row);
        row_stats(row, len, j->eps, false, &mean, &inv);
        for (int64_t c = 0; c < j->cpg; c++) {
            double a = inv * j->scale[c0 + c], b = j->bias[c0 + c] - mean * a;
            double *p = row + c * j->spatial;
            for (int64_t i = 0; i < j->spatial; i++)
                p[i] = p[i] * a + b;
        }
        scatter(j->y->dtype, j->y->data, u * len, 1, len, row);
    }
    free(row);
}

static slim_status gn_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    bool instance = strcmp(ctx->node->op_type, "InstanceNormalization") == 0;
    slim_status s = check_float(x, "input X", ctx->err);
    if (s)
        return s;
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X has %d dims, expected [N, C, ...]",
                         x->ndim);
    if (ctx->n_in < 3 || !ctx->in[1] || !ctx->in[2])
        return slim_errf(ctx->err, SLIM_EINVAL, "inputs scale and bias are required");
    int64_t c = x->dims[1], want = c;
    if (!instance) {
        int64_t g = slim_attr_int(ctx->node, "num_groups", 0);
        if (g <= 0 || c % g != 0)
            return slim_errf(ctx->err, SLIM_EINVAL,
                             "num_groups %lld must be positive and divide the %lld channels",
                             (long long)g, (long long)c);
        if (ctx->node->opset < 21)
            want = g; /* opset 18: scale and bias are per group */
    }
    for (int k = 1; k <= 2; k++) {
        const slim_tensor *p = ctx->in[k];
        const char *what = k == 1 ? "input scale" : "input bias";
        if ((s = check_float(p, what, ctx->err)))
            return s;
        if (p->ndim != 1 || p->dims[0] != want)
            return slim_errf(ctx->err, SLIM_ESHAPE, "%s must have shape [%lld]", what,
                             (long long)want);
    }
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

static slim_status gn_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    bool instance = strcmp(ctx->node->op_type, "InstanceNormalization") == 0;
    int64_t c = x->dims[1];
    gn_job j = {.x = x, .y = ctx->out[0],
                .groups = instance ? c : slim_attr_int(ctx->node, "num_groups", 1),
                .spatial = slim_shape_numel(x->ndim - 2, x->dims + 2),
                .eps = slim_attr_float(ctx->node, "epsilon", 1e-5f)};
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    j.cpg = c / j.groups;
    double *sb = slim_scratch_malloc(sizeof(double) * 2 * (size_t)c);
    if (!sb)
        return slim_scratch_oom(ctx->err);
    bool per_group = ctx->in[1]->dims[0] != c;
    for (int64_t i = 0; i < c; i++) {
        int64_t at = per_group ? i / j.cpg : i;
        sb[i] = slim_load_f64(ctx->in[1]->dtype, ctx->in[1]->data, at);
        sb[c + i] = slim_load_f64(ctx->in[2]->dtype, ctx->in[2]->data, at);
    }
    j.scale = sb;
    j.bias = sb + c;
    slim_parallel_for(x->dims[0] * j.groups, grain_for(j.cpg * j.spatial * 3), gn_task, &j);
    slim_scratch_free(sb);
    if (j.failed)
        return slim_scratch_oom(ctx->err);
    return SLIM_OK;
}

/* ---- BatchNormalization -------------------------------------------------- */

/* Inference: y = x * a[c] + b[c] with a = scale / sqrt(var + eps) and
 * b = bias - mean * a. training_mode (opset 14+) normalizes with the batch
 * statistics and also returns the updated running mean and variance. */
static bool bn_training(const slim_node *n)
{
    return n->opset >= 14 && slim_attr_int(n, "training_mode", 0) != 0;
}

static slim_status bn_prepare(slim_node *node, void **state, slim_err *err)
{
    if (node->opset < 9 && slim_attr_int(node, "spatial", 1) == 0)
        return slim_errf(err, SLIM_EUNSUPPORTED, "spatial=0 (per-activation statistics)");
    return SLIM_OK;
}

static slim_status bn_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    bool train = bn_training(ctx->node);
    slim_status s = check_float(x, "input X", ctx->err);
    if (s)
        return s;
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X has %d dims, expected [N, C, ...]",
                         x->ndim);
    static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (int k = 1; k < 5; k++) {
        const slim_tensor *p = k < ctx->n_in ? ctx->in[k] : NULL;
        if (!p)
            return slim_errf(ctx->err, SLIM_EINVAL, "input %s is missing", names[k]);
        if ((s = check_float(p, names[k], ctx->err)))
            return s;
        if (p->ndim != 1 || p->dims[0] != x->dims[1])
            return slim_errf(ctx->err, SLIM_ESHAPE, "input %s must have shape [%lld]",
                             names[k], (long long)x->dims[1]);
    }
    for (int k = 1; k < ctx->n_out; k++) {
        if (!ctx->out[k])
            continue;
        if (!train || k > 2)
            return slim_errf(ctx->err, SLIM_EUNSUPPORTED,
                             "output %d (training statistics) outside training_mode", k);
        slim_tensor_set_like(ctx->out[k], ctx->in[k + 2]);
    }
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

typedef struct {
    const slim_tensor *x;
    slim_tensor *y;
    const double *a, *b;
    int64_t c, spatial;
    bool failed;
} bn_job;

static void bn_task(int64_t begin, int64_t end, void *user)
{
    bn_job *j = user;
    if (j->x->dtype == SLIM_F32) {
        for (int64_t u = begin; u < end; u++) {
            const float *p = (const float *)j->x->data + u * j->spatial;
            float *q = (float *)j->y->data + u * j->spatial;
            float a = (float)j->a[u % j->c], b = (float)j->b[u % j->c];
            for (int64_t i = 0; i < j->spatial; i++)
                q[i] = p[i] * a + b;
        }
        return;
    }
    double *row = malloc(sizeof(double) * (size_t)j->spatial); /* one plane on a kernel thread, as ln_task */
    if (!row) {
        j->failed = true;
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        gather(j->x->dtype, j->x->data, u * j->spatial, 1, j->spatial, row);
        for (int64_t i = 0; i < j->spatial; i++)
            row[i] = row[i] * j->a[u % j->c] + j->b[u % j->c];
        scatter(j->y->dtype, j->y->data, u * j->spatial, 1, j->spatial, row);
    }
    free(row);
}

/* Batch mean and (biased) variance of channel ch over N and spatial. */
static void bn_batch_stats(const slim_tensor *x, int64_t ch, double *mean, double *var)
{
    int64_t n = x->dims[0], c = x->dims[1], sp = slim_shape_numel(x->ndim - 2, x->dims + 2);
    double s = 0, ss = 0, count = (double)(n * sp);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < sp; k++)
            s += slim_load_f64(x->dtype, x->data, (i * c + ch) * sp + k);
    *mean = s / count;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < sp; k++) {
            double d = slim_load_f64(x->dtype, x->data, (i * c + ch) * sp + k) - *mean;
            ss += d * d;
        }
    *var = ss / count;
}

static slim_status bn_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t c = x->dims[1];
    double eps = slim_attr_float(ctx->node, "epsilon", 1e-5f);
    double momentum = slim_attr_float(ctx->node, "momentum", 0.9f);
    bool train = bn_training(ctx->node);
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    double *ab = slim_scratch_malloc(sizeof(double) * 2 * (size_t)c);
    if (!ab)
        return slim_scratch_oom(ctx->err);
    for (int64_t i = 0; i < c; i++) {
        double scale = slim_load_f64(ctx->in[1]->dtype, ctx->in[1]->data, i);
        double bias = slim_load_f64(ctx->in[2]->dtype, ctx->in[2]->data, i);
        double mean = slim_load_f64(ctx->in[3]->dtype, ctx->in[3]->data, i);
        double var = slim_load_f64(ctx->in[4]->dtype, ctx->in[4]->data, i);
        if (train) {
            double bm = 0, bv = 0;
            bn_batch_stats(x, i, &bm, &bv);
            if (ctx->n_out > 1 && ctx->out[1])
                slim_store_f64(ctx->out[1]->dtype, ctx->out[1]->data, i,
                               mean * momentum + bm * (1 - momentum));
            if (ctx->n_out > 2 && ctx->out[2])
                slim_store_f64(ctx->out[2]->dtype, ctx->out[2]->data, i,
                               var * momentum + bv * (1 - momentum));
            mean = bm;
            var = bv;
        }
        ab[i] = scale / sqrt(var + eps);
        ab[c + i] = bias - mean * ab[i];
    }
    bn_job j = {.x = x, .y = ctx->out[0], .a = ab, .b = ab + c, .c = c,
                .spatial = slim_shape_numel(x->ndim - 2, x->dims + 2)};
    slim_parallel_for(x->dims[0] * c, grain_for(j.spatial), bn_task, &j);
    slim_scratch_free(ab);
    if (j.failed)
        return slim_scratch_oom(ctx->err);
    return SLIM_OK;
}

/* ---- LpNormalization ----------------------------------------------------- */

static slim_status lp_prepare(slim_node *node, void **state, slim_err *err)
{
    int64_t p = slim_attr_int(node, "p", 2);
    if (p != 1 && p != 2)
        return slim_errf(err, SLIM_EINVAL, "p = %lld; only 1 and 2 are defined", (long long)p);
    return SLIM_OK;
}

static slim_status lp_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = check_float(x, "input", ctx->err);
    if (s || (s = slim_norm_axis(slim_attr_int(ctx->node, "axis", -1), x->ndim, &axis,
                                 ctx->err)))
        return s;
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

static slim_status lp_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int axis;
    slim_status s = slim_norm_axis(slim_attr_int(ctx->node, "axis", -1), x->ndim, &axis,
                                   ctx->err);
    if (s)
        return s;
    bool l1 = slim_attr_int(ctx->node, "p", 2) == 1;
    int64_t outer = slim_shape_numel(axis, x->dims);
    int64_t r = x->ndim ? x->dims[axis] : 1;
    int64_t inner = x->ndim ? slim_shape_numel(x->ndim - axis - 1, x->dims + axis + 1) : 1;
    if (outer * r * inner == 0)
        return SLIM_OK;
    double *row = slim_scratch_malloc(sizeof(double) * (size_t)r);
    if (!row)
        return slim_scratch_oom(ctx->err);
    for (int64_t u = 0; u < outer * inner; u++) {
        if (r >= 1024 ? slim_cancel_check() : slim_cancel_poll())
            break; /* one thread over the whole tensor; the executor reports it */
        int64_t off = (u / inner) * r * inner + u % inner;
        double norm = 0;
        gather(x->dtype, x->data, off, inner, r, row);
        for (int64_t i = 0; i < r; i++)
            norm += l1 ? fabs(row[i]) : row[i] * row[i];
        norm = l1 ? norm : sqrt(norm);
        for (int64_t i = 0; i < r; i++)
            row[i] = norm == 0 ? 0 : row[i] / norm; /* a zero vector stays zero */
        scatter(y->dtype, y->data, off, inner, r, row);
    }
    slim_scratch_free(row);
    return SLIM_OK;
}

/* ---- MeanVarianceNormalization ------------------------------------------- */

/* y = (x - mean) / (sqrt(var) + 1e-9) over `axes` (default N, H, W). Any
 * axes set is allowed, so statistics are gathered by walking x once with
 * each element's group (its index over the kept dims). Rare in practice,
 * hence single-threaded. */
static slim_status mvn_axes(const slim_op_ctx *ctx, bool *reduced)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axes[SLIM_MAX_DIMS + 1] = {0, 2, 3};
    int n = slim_attr_ints(ctx->node, "axes", axes, SLIM_MAX_DIMS + 1);
    if (n < 0)
        n = 3;
    if (n > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EINVAL, "attribute axes has too many entries");
    for (int i = 0; i < x->ndim; i++)
        reduced[i] = false;
    for (int k = 0; k < n; k++) {
        int a;
        slim_status s = slim_norm_axis(axes[k], x->ndim, &a, ctx->err);
        if (s)
            return s;
        if (x->ndim)
            reduced[a] = true;
    }
    return SLIM_OK;
}

static slim_status mvn_infer(slim_op_ctx *ctx)
{
    bool reduced[SLIM_MAX_DIMS];
    slim_status s = check_float(ctx->in[0], "input X", ctx->err);
    if (s || (s = mvn_axes(ctx, reduced)))
        return s;
    slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return SLIM_OK;
}

static slim_status mvn_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    bool reduced[SLIM_MAX_DIMS];
    slim_status s = mvn_axes(ctx, reduced);
    if (s)
        return s;
    int64_t total = slim_tensor_numel(x), n_groups = 1, gstride[SLIM_MAX_DIMS];
    if (total == 0)
        return SLIM_OK;
    for (int i = x->ndim - 1; i >= 0; i--) {
        gstride[i] = reduced[i] ? 0 : n_groups;
        n_groups *= reduced[i] ? 1 : x->dims[i];
    }
    double count = (double)(total / n_groups);
    double *stats = slim_scratch_calloc((size_t)n_groups * 2, sizeof(double)); /* mean, then 1/(std+eps) */
    if (!stats)
        return slim_scratch_oom(ctx->err);
    for (int pass = 0; pass < 3; pass++) {
        int64_t idx[SLIM_MAX_DIMS] = {0}, g = 0;
        for (int64_t e = 0; e < total; e++) {
            double v = slim_load_f64(x->dtype, x->data, e), d = v - stats[g];
            if (pass == 0)
                stats[g] += v / count;
            else if (pass == 1)
                stats[n_groups + g] += d * d / count;
            else
                slim_store_f64(y->dtype, y->data, e, d * stats[n_groups + g]);
            for (int k = x->ndim - 1; k >= 0; k--) {
                g += gstride[k];
                if (++idx[k] < x->dims[k])
                    break;
                g -= gstride[k] * x->dims[k];
                idx[k] = 0;
            }
        }
        if (pass == 1)
            for (int64_t i = 0; i < n_groups; i++)
                stats[n_groups + i] = 1.0 / (sqrt(stats[n_groups + i]) + 1e-9);
    }
    slim_scratch_free(stats);
    return SLIM_OK;
}

/* ---- table --------------------------------------------------------------- */

const slim_op_def slim__ops_norm[] = {
    {"LayerNormalization", 17, ln_prepare, free, ln_infer, ln_exec, 0},
    {"RMSNormalization", 23, ln_prepare, free, ln_infer, ln_exec, 0},
    {"GroupNormalization", 18, NULL, NULL, gn_infer, gn_exec, 0},
    {"InstanceNormalization", 1, NULL, NULL, gn_infer, gn_exec, 0},
    {"BatchNormalization", 1, bn_prepare, NULL, bn_infer, bn_exec, 0},
    {"LpNormalization", 1, lp_prepare, NULL, lp_infer, lp_exec, 0},
    {"MeanVarianceNormalization", 9, NULL, NULL, mvn_infer, mvn_exec, 0},
    {0},
};
