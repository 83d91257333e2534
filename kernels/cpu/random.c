/*
 * random.c - random generators: RandomUniform, RandomNormal, their *Like
 * forms, Bernoulli and Multinomial.
 *
 * The generator is xoshiro256** seeded through splitmix64. With a `seed`
 * attribute every run of the node draws the same values (the model is
 * shared read-only by concurrent runs, so no generator state lives in it);
 * without one, each run takes a fresh seed from a process-wide counter
 * mixed with the clock. Uniform doubles take the top 53 bits; normal
 * values come from Box-Muller on two uniforms. Values match no other
 * runtime's, which is why the conformance runner compares these nodes'
 * outputs by type and shape only; tests/unit/test_random.c checks their
 * statistics instead.
 */
#include "kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* [0, 1) */
static double rng_uniform(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static double rng_normal(rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* The node's seed attribute (a float) when present, else a fresh one. */
static void rng_init(rng *r, const slim_node *n)
{
    static _Atomic uint64_t counter;
    uint64_t x;
    const slim_attr *a = slim_node_attr(n, "seed");
    if (a && a->type == SLIM_ATTR_FLOAT) {
        double s = a->f;
        memcpy(&x, &s, sizeof(x));
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = atomic_fetch_add(&counter, 1) * 0x2545f4914f6cdd1dull ^
            ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    }
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

/* The output dtype: the dtype attribute (an ONNX code), or dflt. */
static slim_status out_dtype(const slim_op_ctx *ctx, slim_dtype dflt, bool float_only,
                             slim_dtype *out)
{
    const slim_attr *a = slim_node_attr(ctx->node, "dtype");
    *out = dflt;
    if (a && a->type == SLIM_ATTR_INT)
        *out = a->i >= 0 && a->i < 64 ? slim_dtype_from_onnx((int)a->i) : SLIM_DTYPE_UNDEFINED;
    if (*out == SLIM_DTYPE_UNDEFINED || (float_only && !slim_dtype_is_float(*out)))
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "dtype %lld is not supported here%s",
                         a ? (long long)a->i : 0LL, float_only ? " (a float type is)" : "");
    return SLIM_OK;
}

/* RandomUniform / RandomNormal: the shape attribute; the *Like forms: the
 * input's. */
static slim_status gen_infer(slim_op_ctx *ctx)
{
    slim_dtype dt;
    slim_status st;
    if (ctx->n_in > 0 && ctx->in[0]) {
        if (slim_dtype_size(ctx->in[0]->dtype) == 0)
            return slim_errf(ctx->err, SLIM_ETYPE, "input has no numeric type");
        if ((st = out_dtype(ctx, slim_dtype_is_float(ctx->in[0]->dtype) ? ctx->in[0]->dtype
                                                                        : SLIM_F32,
                            true, &dt)))
            return st;
        slim_tensor_set_shape(ctx->out[0], dt, ctx->in[0]->ndim, ctx->in[0]->dims);
        return SLIM_OK;
    }
    if ((st = out_dtype(ctx, SLIM_F32, true, &dt)))
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    int nd = slim_attr_ints(ctx->node, "shape", dims, SLIM_MAX_DIMS);
    const slim_attr *a = slim_node_attr(ctx->node, "shape");
    if (nd < 0 || !a || a->type != SLIM_ATTR_INTS)
        return slim_errf(ctx->err, SLIM_EINVAL, "attribute shape (ints) is required");
    if (a->n > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "shape has %d dims, at most %d supported",
                         a->n, SLIM_MAX_DIMS);
    for (int d = 0; d < nd; d++)
        if (dims[d] < 0)
            return slim_errf(ctx->err, SLIM_EINVAL, "shape has a negative dimension");
    slim_tensor_set_shape(ctx->out[0], dt, nd, dims);
    return SLIM_OK;
}

static slim_status uniform_exec(slim_op_ctx *ctx)
{
    slim_tensor *o = ctx->out[0];
    double lo = slim_attr_float(ctx->node, "low", 0.0f);
    double hi = slim_attr_float(ctx->node, "high", 1.0f);
    rng r;
    rng_init(&r, ctx->node);
    int64_t n = slim_tensor_numel(o);
    for (int64_t i = 0; i < n; i++)
        slim_store_f64(o->dtype, o->data, i, lo + (hi - lo) * rng_uniform(&r));
    return SLIM_OK;
}

static slim_status normal_exec(slim_op_ctx *ctx)
{
    slim_tensor *o = ctx->out[0];
    double mean = slim_attr_float(ctx->node, "mean", 0.0f);
    double scale = slim_attr_float(ctx->node, "scale", 1.0f);
    rng r;
    rng_init(&r, ctx->node);
    int64_t n = slim_tensor_numel(o);
    for (int64_t i = 0; i < n; i++)
        slim_store_f64(o->dtype, o->data, i, mean + scale * rng_normal(&r));
    return SLIM_OK;
}

/* ---- Bernoulli ----------------------------------------------------------- */

static slim_status bernoulli_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                      SLIM_BF16, SLIM_DTYPE_UNDEFINED);
    slim_dtype dt;
    if (st || (st = out_dtype(ctx, x->dtype, false, &dt)))
        return st;
    slim_tensor_set_shape(ctx->out[0], dt, x->ndim, x->dims);
    return SLIM_OK;
}

static slim_status bernoulli_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *o = ctx->out[0];
    rng r;
    rng_init(&r, ctx->node);
    int64_t n = slim_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        double p = slim_load_f64(x->dtype, x->data, i);
        if (!(p >= 0.0 && p <= 1.0))
            return slim_errf(ctx->err, SLIM_EINVAL, "input[%lld] = %g is not a probability in "
                             "[0, 1]", (long long)i, p);
        slim_store_f64(o->dtype, o->data, i, rng_uniform(&r) < p ? 1.0 : 0.0);
    }
    return SLIM_OK;
}

/* ---- Multinomial --------------------------------------------------------- */

static slim_status multinomial_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                      SLIM_BF16, SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (x->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input must be [batch, classes], it has %d dims",
                         x->ndim);
    slim_dtype dt;
    if ((st = out_dtype(ctx, SLIM_I32, false, &dt)))
        return st;
    if (dt != SLIM_I32 && dt != SLIM_I64)
        return slim_errf(ctx->err, SLIM_ETYPE, "dtype must be int32 or int64");
    int64_t k = slim_attr_int(ctx->node, "sample_size", 1);
    if (k < 1 || k > ((int64_t)1 << 31))
        return slim_errf(ctx->err, SLIM_EINVAL, "sample_size %lld must be in [1, 2^31]",
                         (long long)k);
    slim_tensor_set_shape(ctx->out[0], dt, 2, (int64_t[]){x->dims[0], k});
    return SLIM_OK;
}

/* Each row's unnormalized log-probabilities become a CDF; a sample is the
 * first class whose cumulative weight passes u * total. */
static slim_status multinomial_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *o = ctx->out[0];
    const int64_t batch = x->dims[0], classes = x->dims[1], k = o->dims[1];
    if (classes == 0 && batch > 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has no classes to draw from");
    double *cdf = slim_scratch_malloc(sizeof(double) * (size_t)(classes ? classes : 1));
    if (!cdf)
        return slim_scratch_oom(ctx->err);
    rng r;
    rng_init(&r, ctx->node);
    for (int64_t b = 0; b < batch; b++) {
        double mx = -INFINITY, total = 0;
        for (int64_t c = 0; c < classes; c++) {
            double v = slim_load_f64(x->dtype, x->data, b * classes + c);
            mx = v > mx ? v : mx;
        }
        for (int64_t c = 0; c < classes && isfinite(mx); c++) {
            total += exp(slim_load_f64(x->dtype, x->data, b * classes + c) - mx);
            cdf[c] = total;
        }
        if (!(total > 0) || !isfinite(total)) {
            slim_scratch_free(cdf);
            return slim_errf(ctx->err, SLIM_EINVAL, "row %lld has no finite probabilities",
                             (long long)b);
        }
        for (int64_t s = 0; s < k; s++) {
            double u = rng_uniform(&r) * total;
            int64_t lo = 0, hi = classes - 1;
            while (lo < hi) { /* the first c with cdf[c] > u */
                int64_t mid = lo + (hi - lo) / 2;
                if (cdf[mid] > u)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            slim_store_i64(o->dtype, o->data, b * k + s, lo);
        }
    }
    slim_scratch_free(cdf);
    return SLIM_OK;
}

const slim_op_def slim__ops_random[] = {
    {"RandomUniform", 1, NULL, NULL, gen_infer, uniform_exec, 0},
    {"RandomNormal", 1, NULL, NULL, gen_infer, normal_exec, 0},
    {"RandomUniformLike", 1, NULL, NULL, gen_infer, uniform_exec, 0},
    {"RandomNormalLike", 1, NULL, NULL, gen_infer, normal_exec, 0},
    {"Bernoulli", 15, NULL, NULL, bernoulli_infer, bernoulli_exec, 0},
    {"Multinomial", 7, NULL, NULL, multinomial_infer, multinomial_exec, 0},
    {NULL, 0, NULL, NULL, NULL, NULL, 0},
};
