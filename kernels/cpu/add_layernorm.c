/*
 * add_layernorm.c - AddLayerNorm (domain com.slimserve), which the
 * fuse_add_layernorm pass puts in place of Add -> LayerNormalization:
 *
 *   AddLayerNorm(A, B, Scale[, Bias]) -> Y[, Sum]     attrs: epsilon (float)
 *       A, B float32 (or float16, bfloat16: all four of one type), broadcast
 *       together as Add does; Sum = A + B; Y = LayerNormalization(Sum) over
 *       the last axis with Scale and Bias [D].
 *
 * Each row's sum is written once (into Sum when something reads it, else
 * into Y) and normalized in place by the LayerNormalization rows
 * (slim_ln_rows_f32): the same float additions and the same rows as the
 * two nodes, so the same bits, without Add's pass over the activation, its
 * node, or its wake of the thread pool. In an encoder every LayerNorm
 * reads a residual Add (25 of them in BERT-base).
 */
#include "kernel.h"
#include "norm_simd.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    float epsilon;
} aln_state;

static slim_status aln_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    aln_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->epsilon = slim_attr_float(node, "epsilon", 1e-5f);
    *state = s;
    return SLIM_OK;
}

static void aln_release(void *state)
{
    free(state);
}

/* out = broadcast(a, b), numpy's rules; false when they do not. */
static bool broadcast_dims(const slim_tensor *a, const slim_tensor *b, int *nd, int64_t *out)
{
    *nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < *nd; i++) {
        int ia = i - (*nd - a->ndim), ib = i - (*nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    return true;
}

static slim_status aln_infer(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *sc = ctx->in[2];
    const slim_tensor *bi = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_dtype dt = a->dtype;
    if ((dt != SLIM_F32 && dt != SLIM_F16 && dt != SLIM_BF16) || b->dtype != dt ||
        sc->dtype != dt || (bi && bi->dtype != dt))
        return slim_errf(ctx->err, SLIM_ETYPE, "AddLayerNorm takes A, B, Scale and Bias of one "
                         "type, float32, float16 or bfloat16; got %s, %s, %s%s%s",
                         slim_dtype_name(dt), slim_dtype_name(b->dtype),
                         slim_dtype_name(sc->dtype), bi ? ", " : "",
                         bi ? slim_dtype_name(bi->dtype) : "");
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    if (!broadcast_dims(a, b, &nd, dims))
        return slim_errf(ctx->err, SLIM_ESHAPE, "AddLayerNorm: A and B do not broadcast");
    if (nd == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "AddLayerNorm: A + B is a scalar; needs rank >= 1");
    int64_t d = dims[nd - 1];
    if (sc->ndim != 1 || sc->dims[0] != d || (bi && (bi->ndim != 1 || bi->dims[0] != d)))
        return slim_errf(ctx->err, SLIM_ESHAPE, "AddLayerNorm: Scale and Bias must be [%lld], "
                         "the last dim of A + B", (long long)d);
    for (int k = 0; k < ctx->n_out && k < 2; k++)
        if (ctx->out[k])
            slim_tensor_set_shape(ctx->out[k], dt, nd, dims);
    return SLIM_OK;
}

typedef struct {
    const float *a, *b;
    float *s, *y;          /* s: where the sums go (Sum, or Y itself) */
    int64_t d, na, nb;     /* row length; elements of A, B */
    int nd;
    int64_t dims[SLIM_MAX_DIMS], sa[SLIM_MAX_DIMS], sb[SLIM_MAX_DIMS]; /* 0: broadcast */
    bool plain;            /* A is the output's shape, B a suffix of it */
    float eps;
    const float *scale, *bias; /* bias NULL: none */
} aln_job;

/* restrict: s may be neither input (Sum and Y are outputs), so the loop
 * vectorizes without overlap checks; cloned for AVX-512 (chosen by CPUID
 * at load), where the baseline build's 4-wide adds cost as much as the
 * normalization of a short row. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "default")))
#endif
static void add_row(const float *restrict a, const float *restrict b, float *restrict s,
                    int64_t d)
{
    for (int64_t i = 0; i < d; i++)
        s[i] = a[i] + b[i];
}

static void aln_rows(int64_t begin, int64_t end, void *user)
{
    const aln_job *j = user;
    if (j->plain && j->nb == j->na) { /* the same shape: the chunk's rows in one call */
        int64_t base = begin * j->d;
        add_row(j->a + base, j->b + base, j->s + base, (end - begin) * j->d);
    }
    for (int64_t row = begin; row < end && !(j->plain && j->nb == j->na); row++) {
        float *s = j->s + row * j->d;
        int64_t base = row * j->d;
        if (j->plain) {
            add_row(j->a + base, j->b + base % j->nb, s, j->d); /* B's rows repeat */
        } else {
            for (int64_t i = 0; i < j->d; i++) {
                int64_t e = base + i, ia = 0, ib = 0;
                for (int k = j->nd - 1; k >= 0; k--) {
                    int64_t c = e % j->dims[k];
                    e /= j->dims[k];
                    ia += c * j->sa[k];
                    ib += c * j->sb[k];
                }
                s[i] = j->a[ia] + j->b[ib];
            }
        }
    }
    /* The chunk's rows at once (~32 KiB, still in cache): the rows' setup
     * is paid per call. */
    slim_ln_rows_f32(j->s + begin * j->d, j->y + begin * j->d, end - begin, j->d, false, j->eps,
                     j->scale, j->bias);
}

/* Element strides of t inside the broadcast shape (0 along broadcast dims). */
static void strides_in(const slim_tensor *t, int nd, const int64_t *dims, int64_t *st)
{
    int64_t acc = 1;
    for (int k = nd - 1; k >= 0; k--) {
        int kt = k - (nd - t->ndim);
        int64_t dt = kt >= 0 ? t->dims[kt] : 1;
        st[k] = dt == 1 && dims[k] != 1 ? 0 : acc;
        acc *= dt;
    }
}

/* x widened to float32 (a copy; NULL when out of memory). */
static float *widen(const slim_tensor *x)
{
    int64_t n = slim_tensor_numel(x);
    float *f = slim_scratch_malloc(sizeof(float) * (size_t)(n ? n : 1));
    const uint16_t *h = x->data;
    for (int64_t i = 0; f && i < n; i++)
        f[i] = x->dtype == SLIM_F16 ? slim_f16_to_f32(h[i]) : slim_bf16_to_f32(h[i]);
    return f;
}

static uint16_t narrow(slim_dtype dt, float v)
{
    return dt == SLIM_F16 ? slim_f32_to_f16(v) : slim_f32_to_bf16(v);
}

static float rounded(slim_dtype dt, float v)
{
    uint16_t h = narrow(dt, v);
    return dt == SLIM_F16 ? slim_f16_to_f32(h) : slim_bf16_to_f32(h);
}

/* Half operands (a model placed whole in half on a device the CPU
 * kernels stand in for, such as emul:0): what Add then LayerNormalization
 * compute there, the sum rounded to the type before it is normalized in
 * float32. Serial and by copies: not a path anything times. */
static slim_status aln_exec_half(slim_op_ctx *ctx, const aln_state *st)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *sc = ctx->in[2];
    const slim_tensor *bi = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor *y = ctx->out[0], *sum = ctx->n_out > 1 ? ctx->out[1] : NULL;
    slim_dtype dt = y->dtype;
    int64_t n = slim_tensor_numel(y), d = y->dims[y->ndim - 1];
    int64_t sa[SLIM_MAX_DIMS], sb[SLIM_MAX_DIMS];
    strides_in(a, y->ndim, y->dims, sa);
    strides_in(b, y->ndim, y->dims, sb);
    float *fa = widen(a), *fb = widen(b), *fs = widen(sc), *fbi = bi ? widen(bi) : NULL;
    float *s = slim_scratch_malloc(sizeof(float) * (size_t)n), *o = slim_scratch_malloc(sizeof(float) * (size_t)n);
    slim_status ret = SLIM_OK;
    if (!fa || !fb || !fs || (bi && !fbi) || !s || !o) {
        ret = slim_scratch_oom(ctx->err);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t e = i, ia = 0, ib = 0;
        for (int k = y->ndim - 1; k >= 0; k--) {
            int64_t c = e % y->dims[k];
            e /= y->dims[k];
            ia += c * sa[k];
            ib += c * sb[k];
        }
        s[i] = rounded(dt, fa[ia] + fb[ib]);
    }
    slim_ln_rows_f32(s, o, n / d, d, false, st->epsilon, fs, fbi);
    for (int64_t i = 0; i < n; i++) {
        ((uint16_t *)y->data)[i] = narrow(dt, o[i]);
        if (sum)
            ((uint16_t *)sum->data)[i] = narrow(dt, s[i]);
    }
done:
    slim_scratch_free(fa);
    slim_scratch_free(fb);
    slim_scratch_free(fs);
    slim_scratch_free(fbi);
    slim_scratch_free(s);
    slim_scratch_free(o);
    return ret;
}

static slim_status aln_exec(slim_op_ctx *ctx)
{
    const aln_state *st = ctx->state;
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *sc = ctx->in[2];
    const slim_tensor *bi = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor *y = ctx->out[0], *sum = ctx->n_out > 1 ? ctx->out[1] : NULL;
    if (slim_tensor_numel(y) == 0)
        return SLIM_OK;
    if (y->dtype != SLIM_F32)
        return aln_exec_half(ctx, st);
    /* A + B = B + A bit for bit: the operand of the output's shape first. */
    if (slim_tensor_numel(b) == slim_tensor_numel(y) && slim_tensor_numel(a) != slim_tensor_numel(y)) {
        const slim_tensor *t = a;
        a = b;
        b = t;
    }
    aln_job j = {.a = a->data, .b = b->data, .y = y->data, .s = sum ? sum->data : y->data,
                 .nd = y->ndim, .na = slim_tensor_numel(a), .nb = slim_tensor_numel(b),
                 .eps = st->epsilon};
    memcpy(j.dims, y->dims, sizeof(int64_t) * (size_t)y->ndim);
    j.d = y->dims[y->ndim - 1];
    strides_in(a, j.nd, j.dims, j.sa);
    strides_in(b, j.nd, j.dims, j.sb);
    /* B a suffix of the output's shape (the same shape, [D], [S, D]): its
     * rows repeat in order. */
    j.plain = j.na == slim_tensor_numel(y) && j.nb > 0 && j.nb % j.d == 0 && b->ndim <= y->ndim &&
              memcmp(b->dims, y->dims + (y->ndim - b->ndim), sizeof(int64_t) * (size_t)b->ndim) == 0;
    j.scale = sc->data;
    j.bias = bi ? bi->data : NULL;
    int64_t rows = slim_tensor_numel(y) / j.d;
    /* Chunks of ~8 KiB of rows, as LayerNormalization takes them: the
     * example transformer's 128 rows of 64 split in four, not run by one
     * thread (the pool's workers are still spinning between nodes, so the
     * split costs less than it saves: five nodes 25 -> 18 us). */
    int64_t grain = 8192 / (j.d * 4);
    slim_parallel_for(rows, grain > 0 ? grain : 1, aln_rows, &j);
    return SLIM_OK;
}

const slim_op_def slim__ops_add_layernorm[] = {
    {"AddLayerNorm", 1, aln_prepare, aln_release, aln_infer, aln_exec, 0},
    {0},
};
