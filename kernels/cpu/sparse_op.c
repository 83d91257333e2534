/*
 * sparse_op.c - com.slimserve SparseMatMul, the operator the pruning pass
 * (quant/prune.c) puts in place of a MatMul or Gemm whose pruned weight is
 * cheaper sparse (kernels/sparse.h has the encodings):
 *
 *   SparseMatMul(X, values, indices[, rowptr][, bias][, scale]) -> Y
 *       attrs: encoding ("csr" | "2:4"), K (int)
 *       csr: values [nnz], indices [nnz] (uint16 for K <= 65536, else int32),
 *            rowptr int32 [N + 1]
 *       2:4: values [N, 2 ceil(K/4)], indices uint8 [N, ceil(ceil(K/4) / 2)],
 *            no rowptr (an empty input)
 *       values and bias float32, float16 or bfloat16; X float32, float16 or
 *       bfloat16 [..., K]; Y has X's type, [..., N].
 *       Or int8 values (codes) with scale float32 [N] (quant/int8_sparse.c):
 *       channel j's weight is its codes x scale[j]. The product kernel has
 *       no int8 path, so the codes are widened once, at the first run, to a
 *       float16 copy (exact: |code| <= 127) the kernel reads; its chain runs
 *       over the codes and the scale comes after, fma(chain, scale, bias).
 *       Memory: 2 bytes a kept value beside the 1 in the (mapped) file.
 *
 * The operands are ordinary tensors, so a .slim file stores them raw and
 * maps them in place. Shapes and dtypes are checked before a byte is read;
 * the contents (index ranges, row pointer order) once, at the first run,
 * since a forged file could point anywhere. Once is enough because the
 * weight's operands must be initializers (runtime/validate.c refuses
 * anything else).
 */
#include "kernel.h"
#include "sparse.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    slim_sparse_enc enc;
    int64_t k;
    _Atomic int checked; /* the constant operands passed slim_sparse_check */
    uint16_t *_Atomic wide; /* int8 codes as float16, made at the first run */
} sparse_state;

static void sparse_free(void *state)
{
    sparse_state *s = state;
    if (s)
        free(atomic_load(&s->wide));
    free(s);
}

static slim_status sparse_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *enc = slim_attr_str(node, "encoding", "");
    int64_t k = slim_attr_int(node, "K", 0);
    /* raw: fixed-size load-time state, freed with the model */
    sparse_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (strcmp(enc, "csr") == 0)
        s->enc = SLIM_SPARSE_CSR;
    else if (strcmp(enc, "2:4") == 0)
        s->enc = SLIM_SPARSE_24;
    else {
        free(s);
        return slim_errf(err, SLIM_EINVAL, "encoding \"%s\" is not \"csr\" or \"2:4\"", enc);
    }
    if (k < 1 || k > (1LL << 31) - 1) {
        free(s);
        return slim_errf(err, SLIM_EINVAL, "attribute K = %lld must be from 1 to 2^31 - 1",
                         (long long)k);
    }
    s->k = k;
    *state = s;
    return SLIM_OK;
}

static bool is_float(const slim_tensor *t)
{
    return t->dtype == SLIM_F32 || t->dtype == SLIM_F16 || t->dtype == SLIM_BF16;
}

/* Fills w's geometry from the operands after checking their dtypes and
 * shapes; data pointers are set but not read. */
static slim_status operands(const slim_op_ctx *ctx, slim_sparse_w *w, int64_t *nnz)
{
    const sparse_state *s = ctx->state;
    const slim_tensor *v = ctx->in[1], *ix = ctx->in[2];
    const slim_tensor *rp = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *scale = ctx->n_in > 5 ? ctx->in[5] : NULL;
    if (!v || !ix)
        return slim_errf(ctx->err, SLIM_EINVAL, "values and indices are required");
    if (!is_float(v) && v->dtype != SLIM_I8)
        return slim_errf(ctx->err, SLIM_ETYPE, "values must be float32, float16, bfloat16 "
                         "or int8, not %s", slim_dtype_name(v->dtype));
    if ((v->dtype == SLIM_I8) != (scale != NULL))
        return slim_errf(ctx->err, SLIM_EINVAL, "int8 values take their scales (input 5), "
                         "float values none");
    return slim_sparse_operands(s->enc, s->k, v, ix, rp, bias, scale, 'N', true, w, nnz,
                                ctx->err);
}

static slim_status sparse_infer(slim_op_ctx *ctx)
{
    const sparse_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (!is_float(x))
        return slim_errf(ctx->err, SLIM_ETYPE, "input X must be float32, float16 or bfloat16, "
                         "not %s", slim_dtype_name(x->dtype));
    if (x->ndim < 1 || x->dims[x->ndim - 1] != s->k)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X's last dim must be K = %lld",
                         (long long)s->k);
    slim_sparse_w w;
    int64_t nnz;
    slim_status st = operands(ctx, &w, &nnz);
    if (st)
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    dims[x->ndim - 1] = w.n;
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

/* Half x and bias widened to float32 (exact), element by element: the
 * generic slim_f32_in goes through double per element, which had cost a
 * 128-row fp16 layer more than its product. */
static slim_status widen(const slim_tensor *t, slim_tensor *tmp, const float **out, slim_err *err)
{
    if (!t || t->dtype == SLIM_F32)
        return slim_f32_in(t, tmp, out, err);
    memset(tmp, 0, sizeof(*tmp));
    slim_tensor_set_shape(tmp, SLIM_F32, t->ndim, t->dims);
    slim_status st = slim_tensor_alloc(tmp, err);
    if (st)
        return st;
    const uint16_t *h = t->data;
    float *f = tmp->data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        f[i] = t->dtype == SLIM_F16 ? slim_f16_to_f32(h[i]) : slim_bf16_to_f32(h[i]);
    *out = f;
    return SLIM_OK;
}

/* The int8 codes of t as float16, once: a copy made by the first run
 * that gets there (another one racing it frees its own). */
static slim_status widen_codes(sparse_state *s, const slim_tensor *t, slim_err *err)
{
    if (atomic_load(&s->wide))
        return SLIM_OK;
    int64_t n = slim_tensor_numel(t);
    /* raw: load-time state of the model's constant weight, freed with it */
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    if (!h)
        return slim_errf(err, SLIM_ENOMEM, "out of memory widening int8 sparse values");
    const int8_t *q = t->data;
    for (int64_t i = 0; i < n; i++)
        h[i] = slim_f32_to_f16((float)q[i]);
    uint16_t *none = NULL;
    if (!atomic_compare_exchange_strong(&s->wide, &none, h))
        free(h);
    return SLIM_OK;
}

/* y[i][j] = fma(y[i][j], scale[j], bias[j]) (y x scale[j] without bias):
 * the int8 layer's chain over its codes, scaled once, per element. */
static void scale_rows(float *y, int64_t m, int64_t n, const float *scale, const float *bias)
{
    for (int64_t i = 0; i < m; i++) {
        float *r = y + i * n;
        for (int64_t j = 0; j < n; j++)
            r[j] = bias ? fmaf(r[j], scale[j], bias[j]) : r[j] * scale[j];
    }
}

static slim_status sparse_exec(slim_op_ctx *ctx)
{
    sparse_state *s = (sparse_state *)ctx->state;
    slim_sparse_w w;
    int64_t nnz;
    slim_status st = operands(ctx, &w, &nnz);
    if (st)
        return st;
    /* The operands are the node's constant weights: checked once. */
    if (!atomic_load(&s->checked)) {
        if ((st = slim_sparse_check(&w, nnz, ctx->err)))
            return st;
        atomic_store(&s->checked, 1);
    }
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    int64_t m = slim_tensor_numel(x) / s->k;
    if (m == 0)
        return SLIM_OK;
    const float *scale = w.scale;
    if (scale) { /* the kernel reads the codes as float16, scaled after it */
        if ((st = widen_codes(s, ctx->in[1], ctx->err)))
            return st;
        w.values = atomic_load(&s->wide);
        w.vdtype = SLIM_F16;
        w.scale = NULL;
    }
    slim_tensor xt, yt, bt;
    const float *xf, *bf;
    float *yf;
    if ((st = widen(x, &xt, &xf, ctx->err)))
        return st;
    if ((st = widen(bias, &bt, &bf, ctx->err))) {
        slim_tensor_release(&xt);
        return st;
    }
    if ((st = slim_f32_out(ctx->out[0], &yt, &yf, ctx->err))) {
        slim_tensor_release(&xt);
        slim_tensor_release(&bt);
        return st;
    }
    w.bias = scale ? NULL : bf;
    st = slim_sparse_matmul(&w, m, xf, s->k, yf, w.n, ctx->err);
    if (!st && scale)
        scale_rows(yf, m, w.n, scale, bf);
    slim_tensor *y = ctx->out[0];
    if (!st && y->dtype != SLIM_F32) { /* rounded to nearest even, as the helpers do */
        uint16_t *h = y->data;
        for (int64_t i = 0; i < m * w.n; i++)
            h[i] = y->dtype == SLIM_F16 ? slim_f32_to_f16(yf[i]) : slim_f32_to_bf16(yf[i]);
    }
    slim_tensor_release(&xt);
    slim_tensor_release(&bt);
    slim_tensor_release(&yt);
    return st;
}

const slim_op_def slim__ops_sparse[] = {
    {"SparseMatMul", 1, sparse_prepare, sparse_free, sparse_infer, sparse_exec, 0},
    {0},
};
