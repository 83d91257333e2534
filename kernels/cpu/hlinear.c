/*
 * hlinear.c - slimserve's half-weight operators (domain com.slimserve),
 * which the half-weights pass (quant/half.c) puts in place of float layers:
 *
 *   MatMulHalf(X, W[, bias]) -> Y        attrs: K, N (ints), activation ("" | "Relu" |
 *                                        "Gelu": ONNX Gelu, approximate "none")
 *       X float32 [..., K]; W float16 or bfloat16, N x K packed as hgemm.h
 *       lays it out (dims [N rounded up to 16, K rounded up to 2]); bias
 *       float32 [N]. Y float32 [..., N], each row computed on its own.
 *   GatherHalf(table, indices) -> Y
 *       table float16 or bfloat16 [V, D]; Y float32 [indices..., D], the
 *       rows widened as gathered.
 *
 * The graph may come from an untrusted file, so every operand's dtype and
 * shape is checked against the others before a byte is read.
 */
#include "kernel.h"
#include "hgemm.h"

#include <stdlib.h>
#include <string.h>

/* Past this, k2 x n16 could overflow the index arithmetic on 32-bit size. */
#define MAX_DIM ((int64_t)1 << 31)

typedef struct {
    int64_t k, n;
    slim_hgemm_act act;
} matmul_half_state;

static slim_status matmul_half_prepare(slim_node *node, void **state, slim_err *err)
{
    int64_t k = slim_attr_int(node, "K", 0), n = slim_attr_int(node, "N", 0);
    if (k < 1 || k > MAX_DIM)
        return slim_errf(err, SLIM_EINVAL, "attribute K = %lld, must be from 1 to 2^31",
                         (long long)k);
    if (n < 1 || n > MAX_DIM)
        return slim_errf(err, SLIM_EINVAL, "attribute N = %lld, must be from 1 to 2^31",
                         (long long)n);
    const char *act = slim_attr_str(node, "activation", "");
    slim_hgemm_act a;
    if (!act[0])
        a = SLIM_HGEMM_ACT_NONE;
    else if (strcmp(act, "Relu") == 0)
        a = SLIM_HGEMM_ACT_RELU;
    else if (strcmp(act, "Gelu") == 0)
        a = SLIM_HGEMM_ACT_GELU;
    else
        return slim_errf(err, SLIM_EINVAL, "activation \"%s\" is not one of \"\", \"Relu\", "
                         "\"Gelu\"", act);
    /* raw: fixed-size load-time state, freed with the model */
    matmul_half_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->k = k;
    st->n = n;
    st->act = a;
    *state = st;
    return SLIM_OK;
}

static slim_status matmul_half_infer(slim_op_ctx *ctx)
{
    const matmul_half_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_status st = slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(w, "weight W", ctx->err, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED)))
        return st;
    if (x->ndim < 1 || x->dims[x->ndim - 1] != s->k)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X's last dim must be K = %lld",
                         (long long)s->k);
    if (w->ndim != 2 || w->dims[0] != slim_hgemm_n16(s->n) || w->dims[1] != slim_hgemm_k2(s->k))
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed weight W must be [%lld, %lld] for N = "
                         "%lld, K = %lld", (long long)slim_hgemm_n16(s->n),
                         (long long)slim_hgemm_k2(s->k), (long long)s->n, (long long)s->k);
    if (bias) {
        if ((st = slim_check_dtype(bias, "bias", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED)))
            return st;
        if (bias->ndim != 1 || bias->dims[0] != s->n)
            return slim_errf(ctx->err, SLIM_ESHAPE, "bias must be 1-D with N = %lld elements",
                             (long long)s->n);
    }
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    dims[x->ndim - 1] = s->n;
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, x->ndim, dims);
    return SLIM_OK;
}

static slim_status matmul_half_exec(slim_op_ctx *ctx)
{
    const matmul_half_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t m = slim_tensor_numel(x) / s->k;
    if (m == 0)
        return SLIM_OK;
    /* The bf16 copy of x: scratch from the allocator (64-byte aligned,
     * counted in /metrics and in the memory limit), as other kernels'. */
    slim_tensor scratch = {.dtype = SLIM_U8, .ndim = 1,
                           .dims = {(int64_t)slim_hgemm_scratch_bytes(m, s->k) + 64}};
    slim_status st = slim_tensor_alloc(&scratch, ctx->err);
    if (st) /* the allocator's message: bytes asked, held and allowed */
        return st;
    slim_hgemm_args a = {
        .m = m, .n = s->n, .k = s->k, .x = x->data, .ldx = s->k, .packed = w->data,
        .wtype = w->dtype, .bias = bias ? bias->data : NULL, .act = s->act,
        .y = ctx->out[0]->data, .ldy = s->n,
    };
    slim_hgemm(&a, scratch.data);
    slim_tensor_release(&scratch);
    return SLIM_OK;
}

/* ---- GatherHalf ---------------------------------------------------------- */

static slim_status gather_half_infer(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *ind = ctx->in[1];
    slim_status st = slim_check_dtype(t, "table", ctx->err, SLIM_F16, SLIM_BF16,
                                      SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(ind, "indices", ctx->err, SLIM_I64, SLIM_I32,
                                     SLIM_DTYPE_UNDEFINED)))
        return st;
    if (t->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "table must be 2-D, not %d-D", t->ndim);
    if (ind->ndim + 1 > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_ESHAPE, "indices rank %d is not supported", ind->ndim);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, ind->dims, sizeof(int64_t) * (size_t)ind->ndim);
    dims[ind->ndim] = t->dims[1];
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, ind->ndim + 1, dims);
    return SLIM_OK;
}

typedef struct {
    const uint16_t *table;
    const int64_t *idx;
    float *y;
    int64_t d;
    bool f16;
} gather_half_job;

static void gather_half_part(int64_t begin, int64_t end, void *user)
{
    const gather_half_job *j = user;
    for (int64_t i = begin; i < end; i++) {
        slim_half_widen(j->table + j->idx[i] * j->d, j->f16 ? SLIM_F16 : SLIM_BF16,
                        j->y + i * j->d, j->d);
    }
}

static slim_status gather_half_exec(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *ind = ctx->in[1];
    int64_t n = slim_tensor_numel(ind), v = t->dims[0], d = t->dims[1];
    if (n == 0 || d == 0)
        return SLIM_OK;
    int64_t *idx = slim_scratch_malloc(sizeof(int64_t) * (size_t)n);
    if (!idx)
        return slim_scratch_oom(ctx->err);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = slim_load_i64(ind->dtype, ind->data, i);
        if (k < -v || k >= v) {
            slim_scratch_free(idx);
            return slim_errf(ctx->err, SLIM_EINVAL, "index %lld is out of range for %lld rows",
                             (long long)k, (long long)v);
        }
        idx[i] = k < 0 ? k + v : k;
    }
    gather_half_job j = {t->data, idx, ctx->out[0]->data, d, t->dtype == SLIM_F16};
    slim_parallel_for(n, 1 + 16384 / d, gather_half_part, &j);
    slim_scratch_free(idx);
    return SLIM_OK;
}

/* ---- HalfCast -------------------------------------------------------------- */

/* HalfCast(X) -> Y, attr to (ONNX code of float32, float16 or bfloat16):
 * a float X converted to `to`; any other X passed through as it is. The
 * activations pass (quant/half_guard.c) puts it where float32 and half
 * parts of a graph meet, before types are known: a reduction may just as
 * well be summing int64 shape values. */
static slim_status half_cast_prepare(slim_node *node, void **state, slim_err *err)
{
    int64_t to = slim_attr_int(node, "to", 0);
    slim_dtype dt = to == 1 ? SLIM_F32 : to == 10 ? SLIM_F16 : to == 16 ? SLIM_BF16
                                                                        : SLIM_DTYPE_UNDEFINED;
    if (dt == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "attribute to = %lld, must be 1 (float), 10 "
                         "(float16) or 16 (bfloat16)", (long long)to);
    /* raw: fixed-size load-time state, freed with the model */
    slim_dtype *st = malloc(sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    *st = dt;
    *state = st;
    return SLIM_OK;
}

static bool is_f32_or_half(slim_dtype t)
{
    return t == SLIM_F32 || t == SLIM_F16 || t == SLIM_BF16;
}

static slim_status half_cast_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_dtype to = *(const slim_dtype *)ctx->state;
    slim_tensor_set_shape(ctx->out[0], is_f32_or_half(x->dtype) ? to : x->dtype, x->ndim,
                          x->dims);
    return SLIM_OK;
}

static slim_status half_cast_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(x);
    if (x->dtype == y->dtype) {
        if (slim_tensor_nbytes(x))
            memcpy(y->data, x->data, slim_tensor_nbytes(x));
        return SLIM_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        float f = x->dtype == SLIM_F32 ? ((const float *)x->data)[i]
                  : x->dtype == SLIM_F16 ? slim_f16_to_f32(((const uint16_t *)x->data)[i])
                                         : slim_bf16_to_f32(((const uint16_t *)x->data)[i]);
        if (y->dtype == SLIM_F32)
            ((float *)y->data)[i] = f;
        else
            ((uint16_t *)y->data)[i] = y->dtype == SLIM_F16 ? slim_f32_to_f16(f)
                                                            : slim_f32_to_bf16(f);
    }
    return SLIM_OK;
}

const slim_op_def slim__ops_half[] = {
    {"HalfCast", 1, half_cast_prepare, free, half_cast_infer, half_cast_exec, 0},
    {"MatMulHalf", 1, matmul_half_prepare, free, matmul_half_infer, matmul_half_exec, 0},
    {"GatherHalf", 1, NULL, NULL, gather_half_infer, gather_half_exec, 0},
    {0},
};
