/*
 * matmul_bias.c - MatMulBias (domain com.slimserve), which the
 * fuse_matmul_bias pass puts in place of MatMul -> Add [-> Relu] in models
 * placed on a GPU, where cuBLASLt adds the bias (and the Relu) in the
 * product's epilogue instead of a second pass over the activation
 * (kernels/cuda/matmul_lt.cu):
 *
 *   MatMulBias(A, W, Bias) -> Y          attrs: activation ("" | "Relu")
 *       A [..., K], W [K, N], Bias [N], all float32, float16 or bfloat16;
 *       Y [..., N] = A W + Bias, each row of A on its own.
 *
 * This CPU kernel is the reference the GPU kernel is tested against and
 * what runs it where the GPU cannot (the emulated device, a dtype the GPU
 * kernel refuses). It computes what the two nodes did: the product in
 * float32 rounded to the tensor's type, then the sum rounded again.
 */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    bool relu;
} mmb_state;

static slim_status mmb_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *act = slim_attr_str(node, "activation", "");
    if (act[0] && strcmp(act, "Relu") != 0)
        return slim_errf(err, SLIM_EINVAL, "activation \"%s\" is not one of \"\", \"Relu\"", act);
    /* raw: fixed-size load-time state, freed with the model */
    mmb_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->relu = act[0] != 0;
    *state = s;
    return SLIM_OK;
}

static void mmb_release(void *state)
{
    free(state);
}

static slim_status mmb_infer(slim_op_ctx *ctx)
{
    if (ctx->n_in != 3)
        return slim_errf(ctx->err, SLIM_EINVAL, "MatMulBias takes 3 inputs (A, W, Bias), got %d",
                         ctx->n_in);
    const slim_tensor *a = ctx->in[0], *w = ctx->in[1], *b = ctx->in[2];
    slim_status s = slim_check_dtype(a, "input A", ctx->err, SLIM_F32, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (w->dtype != a->dtype || b->dtype != a->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "A is %s but W is %s and Bias %s",
                         slim_dtype_name(a->dtype), slim_dtype_name(w->dtype),
                         slim_dtype_name(b->dtype));
    if (a->ndim < 1 || w->ndim != 2 || b->ndim != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "A must have at least 1 dim, W 2 and Bias 1; "
                         "got %d, %d and %d", a->ndim, w->ndim, b->ndim);
    int64_t k = a->dims[a->ndim - 1], n = w->dims[1];
    if (w->dims[0] != k || b->dims[0] != n)
        return slim_errf(ctx->err, SLIM_ESHAPE, "A's last dim %lld, W [%lld, %lld] and Bias "
                         "[%lld] do not agree", (long long)k, (long long)w->dims[0],
                         (long long)n, (long long)b->dims[0]);
    if (k > INT32_MAX || n > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "W [%lld, %lld] is past 32-bit sizes",
                         (long long)k, (long long)n);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    dims[a->ndim - 1] = n;
    slim_tensor_set_shape(ctx->out[0], a->dtype, a->ndim, dims);
    return SLIM_OK;
}

/* x widened to float32: itself for float32, else a copy (NULL when out of
 * memory; *owned is what to free). */
static const float *widen(const slim_tensor *x, float **owned)
{
    *owned = NULL;
    if (x->dtype == SLIM_F32)
        return x->data;
    int64_t n = slim_tensor_numel(x);
    float *f = slim_scratch_malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f)
        return NULL;
    const uint16_t *h = x->data;
    for (int64_t i = 0; i < n; i++)
        f[i] = x->dtype == SLIM_F16 ? slim_f16_to_f32(h[i]) : slim_bf16_to_f32(h[i]);
    *owned = f;
    return f;
}

/* v rounded to dt and back, as a tensor of dt would hold it. */
static float round_to(slim_dtype dt, float v)
{
    if (dt == SLIM_F16)
        return slim_f16_to_f32(slim_f32_to_f16(v));
    if (dt == SLIM_BF16)
        return slim_bf16_to_f32(slim_f32_to_bf16(v));
    return v;
}

static slim_status mmb_exec(slim_op_ctx *ctx)
{
    const mmb_state *s = ctx->state;
    const slim_tensor *a = ctx->in[0], *w = ctx->in[1], *b = ctx->in[2];
    slim_tensor *y = ctx->out[0];
    int64_t n = w->dims[1], k = w->dims[0];
    int64_t rows = n ? slim_tensor_numel(y) / n : 0;
    if (rows == 0 || n == 0)
        return SLIM_OK;
    slim_dtype dt = y->dtype;
    float *own_a, *own_w, *own_b, *acc = NULL;
    const float *fa = widen(a, &own_a), *fw = widen(w, &own_w), *fb = widen(b, &own_b);
    float *fy = dt == SLIM_F32 ? y->data : (acc = slim_scratch_malloc(sizeof(float) * (size_t)(rows * n)));
    slim_status st = SLIM_OK;
    if (!fa || !fw || !fb || !fy) {
        st = slim_scratch_oom(ctx->err);
        goto done;
    }
    if (k == 0)
        memset(fy, 0, sizeof(float) * (size_t)(rows * n));
    else
        slim_sgemm_rows(false, false, rows, n, k, 1.0f, fa, k, fw, n, 0.0f, fy, n);
    for (int64_t r = 0; r < rows; r++) {
        float *row = fy + r * n;
        for (int64_t j = 0; j < n; j++) {
            float v = round_to(dt, round_to(dt, row[j]) + fb[j]);
            row[j] = s->relu && v < 0.0f ? 0.0f : v;
        }
    }
    if (dt != SLIM_F32) {
        uint16_t *h = y->data;
        for (int64_t i = 0; i < rows * n; i++)
            h[i] = dt == SLIM_F16 ? slim_f32_to_f16(fy[i]) : slim_f32_to_bf16(fy[i]);
    }
done:
    slim_scratch_free(own_a);
    slim_scratch_free(own_w);
    slim_scratch_free(own_b);
    slim_scratch_free(acc);
    return st;
}

const slim_op_def slim__ops_matmul_bias[] = {
    {"MatMulBias", 1, mmb_prepare, mmb_release, mmb_infer, mmb_exec, 0},
    {0},
};
