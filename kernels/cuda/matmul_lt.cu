/*
 * matmul_lt.cu - MatMulBias (kernels/cpu/matmul_bias.c) through cuBLASLt,
 * the bias and the Relu applied in the product's epilogue: one kernel
 * where MatMul + Add [+ Relu] were two or three, each a pass over the
 * activation.
 *
 * Row-major Y[m,n] = A[m,k] W[k,n] + bias is column-major
 * Y^T = W^T A^T + bias, the bias a vector over the rows of Y^T, which is
 * what CUBLASLT_EPILOGUE_BIAS adds. cuBLASLt asks for a heuristic query per
 * shape (tens of microseconds, more than the product at batch 1), so each
 * thread keeps its plans: descriptors and the algorithm chosen, per dtype,
 * shape, activation and pointer alignment, the least recently used
 * replaced when full.
 *
 * In row-invariant mode (a model the server batches) the product goes
 * through the same fixed 64-row blocks as MatMul (matmul.cu) and the bias
 * is a separate pass: an epilogue's rounding is part of whichever kernel
 * the shape picked. So is a shape with no cuBLASLt algorithm.
 */
#include "common.cuh"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define LT_PLANS 64

typedef struct lt_plan {
    bool used, ok;              /* ok: an algorithm was found */
    slim_dtype dt;
    int64_t m, n, k;
    bool relu;
    unsigned align;             /* lowest alignment of the four pointers */
    uint64_t last;              /* for least-recently-used replacement */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

struct slim_cuda_lt {
    cublasLtHandle_t handle;
    uint64_t clock;
    lt_plan plans[LT_PLANS];
};

static void plan_clear(lt_plan *p)
{
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld)
        cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof(*p));
}

extern "C" void slim_cuda_lt_release(slim_cuda_ctx *cu)
{
    struct slim_cuda_lt *lt = cu->lt;
    if (!lt)
        return;
    for (int i = 0; i < LT_PLANS; i++)
        plan_clear(&lt->plans[i]);
    if (lt->handle)
        cublasLtDestroy(lt->handle);
    free(lt);
    cu->lt = NULL;
}

static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p | 256;
    return (unsigned)(a & -a);
}

/* Builds p for its key: descriptors, then the heuristic's first choice
 * for a workspace of ws bytes. p->ok false when cuBLASLt has none. */
static slim_status plan_build(struct slim_cuda_lt *lt, lt_plan *p, const void *bias, size_t ws,
                              slim_err *err)
{
    cudaDataType_t t = p->dt == SLIM_F16 ? CUDA_R_16F : p->dt == SLIM_BF16 ? CUDA_R_16BF
                                                                            : CUDA_R_32F;
    cublasOperation_t no = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &no,
                                                     sizeof(no)), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &no,
                                                     sizeof(no)), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                     sizeof(epi)), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)), err);
    /* Column-major: W^T is n x k (ld n), A^T k x m (ld k), Y^T n x m. */
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, t, (uint64_t)p->n, (uint64_t)p->k,
                                                 p->n), err);
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, t, (uint64_t)p->k, (uint64_t)p->m,
                                                 p->k), err);
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, t, (uint64_t)p->n, (uint64_t)p->m,
                                                 p->n), err);
    cublasLtMatmulPreference_t pref;
    SLIM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), err);
    uint32_t al = p->align;
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->la, p->lb, p->ld, p->ld, pref,
                                           1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    /* No algorithm is an answer, not an error: the caller falls back. */
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found < 1)) {
        p->ok = false;
        return SLIM_OK;
    }
    SLIM_CUBLAS_CHECK(s, err);
    p->algo = res.algo;
    p->ok = true;
    return SLIM_OK;
}

/* The thread's plan for this product, built on first use. */
static slim_status plan_get(slim_cuda_ctx *cu, slim_dtype dt, int64_t m, int64_t n, int64_t k,
                            bool relu, unsigned align, const void *bias, size_t ws,
                            lt_plan **out, slim_err *err)
{
    struct slim_cuda_lt *lt = cu->lt;
    if (!lt) {
        lt = (struct slim_cuda_lt *)calloc(1, sizeof(*lt));
        if (!lt)
            return slim_errf(err, SLIM_ENOMEM, "out of memory for cuBLASLt's plans");
        cublasStatus_t s = cublasLtCreate(&lt->handle);
        if (s != CUBLAS_STATUS_SUCCESS) {
            free(lt);
            return slim_errf(err, s == CUBLAS_STATUS_ALLOC_FAILED ? SLIM_EOOM : SLIM_EINTERNAL,
                             "cublasLtCreate failed: %s", slim_cublas_status_name(s));
        }
        cu->lt = lt;
    }
    lt_plan *victim = &lt->plans[0];
    lt->clock++;
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &lt->plans[i];
        if (p->used && p->dt == dt && p->m == m && p->n == n && p->k == k && p->relu == relu &&
            p->align == align) {
            p->last = lt->clock;
            *out = p;
            return SLIM_OK;
        }
        if (!p->used || (victim->used && p->last < victim->last))
            victim = p;
    }
    plan_clear(victim);
    victim->used = true;
    victim->dt = dt;
    victim->m = m;
    victim->n = n;
    victim->k = k;
    victim->relu = relu;
    victim->align = align;
    victim->last = lt->clock;
    slim_status st = plan_build(lt, victim, bias, ws, err);
    if (st) {
        plan_clear(victim);
        return st;
    }
    *out = victim;
    return SLIM_OK;
}

/* y[r, c] = (add ? y[r, c] : 0) + bias[c], then Relu if asked: the bias
 * pass where the epilogue does not take it. */
__global__ void bias_rows_kernel(void *y, const void *bias, int64_t rows, int64_t n, bool add,
                                 bool relu, int dt)
{
    int64_t total = rows * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = (add ? slim_ld(y, i, dt) : 0.0f) + slim_ld(bias, i % n, dt);
        if (relu && v < 0.0f)
            v = 0.0f;
        slim_st(y, i, dt, v);
    }
}

static bool mmb_supports(const slim_node *n, const slim_dtype *in)
{
    const char *act = slim_attr_str(n, "activation", "");
    return (in[0] == SLIM_F32 || in[0] == SLIM_F16 || in[0] == SLIM_BF16) && in[1] == in[0] &&
           in[2] == in[0] && (!act[0] || strcmp(act, "Relu") == 0);
}

static slim_status mmb_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    slim_status st = slim_cuda_blas(cu, ctx->err);
    if (st)
        return st;
    const slim_tensor *A = ctx->in[0], *W = ctx->in[1], *B = ctx->in[2];
    slim_tensor *Y = ctx->out[0];
    bool relu = slim_attr_str(ctx->node, "activation", "")[0] != 0;
    int64_t k = W->dims[0], n = W->dims[1];
    int64_t m = n ? slim_tensor_numel(Y) / n : 0;
    if (m == 0 || n == 0)
        return SLIM_OK;
    slim_dtype dt = Y->dtype;
    bool add = k > 0;
    if (k > 0 && !slim_gemm_row_invariant() && m <= INT32_MAX) {
        unsigned align = align_of(A->data);
        unsigned a2 = align_of(W->data), a3 = align_of(Y->data), a4 = align_of(B->data);
        align = align < a2 ? align : a2;
        align = align < a3 ? align : a3;
        align = align < a4 ? align : a4;
        size_t ws = cu->ws_bytes;
        lt_plan *p = NULL;
        if ((st = plan_get(cu, dt, m, n, k, relu, align, B->data, ws, &p, ctx->err)))
            return st;
        if (p->ok) {
            const void *bias = B->data;
            float one = 1.0f, zero = 0.0f;
            SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                                  p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                              ctx->err);
            SLIM_CUBLAS_CHECK(cublasLtMatmul(cu->lt->handle, p->op, &one, W->data, p->la,
                                             A->data, p->lb, &zero, Y->data, p->ld, Y->data,
                                             p->ld, &p->algo, cu->ws, ws,
                                             cu->stream),
                              ctx->err);
            return SLIM_OK;
        }
    }
    if (k > 0 && (st = slim_cuda_gemm_rows(cu, dt, false, m, n, k, 1.0f, A->data, W->data, n,
                                           Y->data, ctx->err)))
        return st;
    bias_rows_kernel<<<slim_cuda_blocks(m * n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                       cu->stream>>>(Y->data, B->data, m, n, add, relu, dt);
    SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    return SLIM_OK;
}

extern "C" const slim_cuda_op slim__cuda_ops_slimserve_matmul[] = {
    {"MatMulBias", 1, 0, mmb_supports, mmb_exec},
    {NULL, 0, 0, NULL, NULL},
};
