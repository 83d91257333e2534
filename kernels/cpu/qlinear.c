/*
 * qlinear.c - slimserve's own int8 operators (domain com.slimserve), which
 * the int8 pass (quant/int8.c) puts in place of float layers:
 *
 *   MatMulInt8(X, W, scale, colsum[, bias]) -> Y        attrs: K (int), activation ("" | "Relu")
 *       X float32 [..., K]; W int8, N x K packed as qgemm.h lays it out;
 *       scale float32 [N] (per output channel); colsum int32 [N] (the sums
 *       of each channel's int8 weights); bias float32 [N]. Y float32 [..., N].
 *       X is quantized per row at run time (qgemm.h), so no row's result
 *       depends on another's.
 *   GatherInt8(table, scale, indices) -> Y
 *       table int8 [V, D], scale float32 [V] (per row); Y float32
 *       [indices..., D] = table[i] * scale[i], dequantized as gathered.
 *
 * The graph may come from an untrusted file, so every operand's dtype and
 * shape is checked against the others before a byte is read.
 */
#include "kernel.h"
#include "qgemm.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t k;
    slim_qgemm_act act;
} matmul_int8_state;

static slim_status matmul_int8_prepare(slim_node *node, void **state, slim_err *err)
{
    int64_t k = slim_attr_int(node, "K", 0);
    if (k < 1 || k > SLIM_QGEMM_MAX_K)
        return slim_errf(err, SLIM_EINVAL, "attribute K = %lld, must be from 1 to %d",
                         (long long)k, SLIM_QGEMM_MAX_K);
    const char *act = slim_attr_str(node, "activation", "");
    slim_qgemm_act a;
    if (!act[0])
        a = SLIM_QGEMM_ACT_NONE;
    else if (strcmp(act, "Relu") == 0)
        a = SLIM_QGEMM_ACT_RELU;
    else
        return slim_errf(err, SLIM_EINVAL, "activation \"%s\" is not one of \"\", \"Relu\"", act);
    matmul_int8_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->k = k;
    st->act = a;
    *state = st;
    return SLIM_OK;
}

static slim_status check_vector(const slim_tensor *t, const char *what, slim_dtype dt, int64_t n,
                                slim_err *err)
{
    slim_status st = slim_check_dtype(t, what, err, dt, SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (t->ndim != 1 || t->dims[0] != n)
        return slim_errf(err, SLIM_ESHAPE, "%s must be 1-D with %lld elements", what,
                         (long long)n);
    return SLIM_OK;
}

static slim_status matmul_int8_infer(slim_op_ctx *ctx)
{
    const matmul_int8_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *scale = ctx->in[2], *cs = ctx->in[3];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    slim_status st = slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(w, "weight W", ctx->err, SLIM_I8, SLIM_DTYPE_UNDEFINED)))
        return st;
    if (x->ndim < 1 || x->dims[x->ndim - 1] != s->k)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X's last dim must be K = %lld",
                         (long long)s->k);
    if (scale->ndim != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "scale must be 1-D");
    int64_t n = scale->dims[0];
    if (n < 1 || n > (1LL << 31))
        return slim_errf(ctx->err, SLIM_ESHAPE, "scale has %lld channels", (long long)n);
    if ((st = check_vector(scale, "scale", SLIM_F32, n, ctx->err)) ||
        (st = check_vector(cs, "colsum", SLIM_I32, n, ctx->err)) ||
        (bias && (st = check_vector(bias, "bias", SLIM_F32, n, ctx->err))))
        return st;
    if (slim_tensor_nbytes(w) != slim_qgemm_packed_bytes(n, s->k))
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed weight W has %zu bytes, %zu expected for "
                         "%lld channels of K = %lld", slim_tensor_nbytes(w),
                         slim_qgemm_packed_bytes(n, s->k), (long long)n, (long long)s->k);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    dims[x->ndim - 1] = n;
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, x->ndim, dims);
    return SLIM_OK;
}

static slim_status matmul_int8_exec(slim_op_ctx *ctx)
{
    const matmul_int8_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    int64_t n = ctx->in[2]->dims[0], m = slim_tensor_numel(x) / s->k;
    if (m == 0)
        return SLIM_OK;
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, slim_qgemm_scratch_bytes(m, s->k)) != 0)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory quantizing %lld rows",
                         (long long)m);
    slim_qgemm_args a = {
        .m = m, .n = n, .k = s->k, .x = x->data, .ldx = s->k, .packed = ctx->in[1]->data,
        .colsum = ctx->in[3]->data, .w_scale = ctx->in[2]->data,
        .bias = bias ? bias->data : NULL, .act = s->act, .y = ctx->out[0]->data, .ldy = n,
    };
    slim_qgemm(&a, scratch);
    free(scratch);
    return SLIM_OK;
}

/* ---- GatherInt8 ---------------------------------------------------------- */

static slim_status gather_int8_infer(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *scale = ctx->in[1], *ind = ctx->in[2];
    slim_status st = slim_check_dtype(t, "table", ctx->err, SLIM_I8, SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(ind, "indices", ctx->err, SLIM_I64, SLIM_I32,
                                     SLIM_DTYPE_UNDEFINED)))
        return st;
    if (t->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "table must be 2-D, not %d-D", t->ndim);
    if ((st = check_vector(scale, "scale", SLIM_F32, t->dims[0], ctx->err)))
        return st;
    if (ind->ndim + 1 > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_ESHAPE, "indices rank %d is not supported", ind->ndim);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, ind->dims, sizeof(int64_t) * (size_t)ind->ndim);
    dims[ind->ndim] = t->dims[1];
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, ind->ndim + 1, dims);
    return SLIM_OK;
}

typedef struct {
    const int8_t *table;
    const float *scale;
    const int64_t *idx;
    float *y;
    int64_t d;
} gather_int8_job;

static void gather_int8_part(int64_t begin, int64_t end, void *user)
{
    const gather_int8_job *j = user;
    for (int64_t i = begin; i < end; i++) {
        const int8_t *row = j->table + j->idx[i] * j->d;
        float s = j->scale[j->idx[i]], *y = j->y + i * j->d;
        for (int64_t c = 0; c < j->d; c++)
            y[c] = (float)row[c] * s;
    }
}

static slim_status gather_int8_exec(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *ind = ctx->in[2];
    int64_t n = slim_tensor_numel(ind), v = t->dims[0], d = t->dims[1];
    if (n == 0 || d == 0)
        return SLIM_OK;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
    if (!idx)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        int64_t k = slim_load_i64(ind->dtype, ind->data, i);
        if (k < -v || k >= v) {
            free(idx);
            return slim_errf(ctx->err, SLIM_EINVAL, "index %lld is out of range for %lld rows",
                             (long long)k, (long long)v);
        }
        idx[i] = k < 0 ? k + v : k;
    }
    gather_int8_job j = {t->data, ctx->in[1]->data, idx, ctx->out[0]->data, d};
    slim_parallel_for(n, 1 + 16384 / d, gather_int8_part, &j);
    free(idx);
    return SLIM_OK;
}

const slim_op_def slim__ops_int8[] = {
    {"MatMulInt8", 1, matmul_int8_prepare, free, matmul_int8_infer, matmul_int8_exec, 0},
    {"GatherInt8", 1, NULL, NULL, gather_int8_infer, gather_int8_exec, 0},
    {0},
};
