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
 * Row-invariant mode (a model the server batches; matmul.cu's comment):
 * cuBLAS picks its kernel, tile and split-K by the shape, so a row's bits
 * could depend on how many rows came with it. Here the algorithm is pinned
 * instead: chosen once per (dtype, n, k, transposition, epilogue) for a
 * fixed reference of LT_ROWS_MREF rows, among those that do not split K,
 * and used for every m. A tiled kernel computes each output tile from its
 * rows of A alone, in a K order fixed by the algorithm, so a row's result
 * is the same whatever else shares the call, and the whole product is one
 * call instead of matmul.cu's 64-row blocks (the fallback: no such
 * algorithm, pointers under LT_ROWS_ALIGN, or SLIM_CUDA_LT_ROWS=0). The
 * bias epilogue is pinned with it. Batched products (attention's) pin one
 * algorithm per item shape for any item count the same way. On an H100
 * served BERT-base fp16 went from 0.95 / 1.15 / 0.73x onnxruntime-gpu at
 * batch 1 / 8 / 32 to 1.40 / 1.25 / 0.98x with the weight products pinned
 * (docs/benchmarks.md, gpu_h100_2026-11-26b_served).
 */
#include "common.cuh"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define LT_PLANS 64

/* Pinned plans: chosen for this many rows, at this pointer alignment. */
#define LT_ROWS_MREF 1024
#define LT_ROWS_ALIGN 64u

typedef enum { EPI_NONE, EPI_BIAS, EPI_RELU_BIAS } lt_epi;

/* Batched products pinned for this many items. */
#define LT_BATCH_REF 64

/* What a plan is for: compared field by field. m is 0 for a pinned
 * (row-invariant) plan, which any m uses; batched, for a pinned plan over
 * items [m, k] x [k, n] contiguous in A, B and C, any item count. */
typedef struct lt_key {
    slim_dtype dt;
    bool tf32;                  /* fp32 operands rounded to TF32 */
    int64_t m, n, k;
    bool batched;
    bool tb;                    /* B is [n, k] (Gemm's transB) */
    lt_epi epi;
    unsigned align;             /* lowest alignment of the pointers */
} lt_key;

typedef struct lt_plan {
    bool used, ok;              /* ok: an algorithm was found */
    lt_key key;
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

static bool key_eq(const lt_key *a, const lt_key *b)
{
    return a->dt == b->dt && a->tf32 == b->tf32 && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->batched == b->batched && a->tb == b->tb && a->epi == b->epi &&
           a->align == b->align;
}

/* Whether the algorithm splits K (its partial sums would be combined in
 * an order that may follow the shape). */
static bool splits_k(const cublasLtMatmulAlgo_t *algo)
{
    uint32_t splits = 0;
    size_t got = 0;
    cublasStatus_t s = cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                            &splits, sizeof(splits), &got);
    return s != CUBLAS_STATUS_SUCCESS || splits > 1;
}

/* Builds p for its key: descriptors, then the heuristic's first choice
 * for a workspace of ws bytes (for a pinned plan: the first that does not
 * split K, for LT_ROWS_MREF rows). p->ok false when cuBLASLt has none. */
static slim_status plan_build(struct slim_cuda_lt *lt, lt_plan *p, const void *bias, size_t ws,
                              slim_err *err)
{
    const lt_key *key = &p->key;
    bool pinned = key->m == 0 || key->batched;
    uint64_t m = key->m == 0 ? LT_ROWS_MREF : (uint64_t)key->m;
    cudaDataType_t t = key->dt == SLIM_F16 ? CUDA_R_16F : key->dt == SLIM_BF16 ? CUDA_R_16BF
                                                                                : CUDA_R_32F;
    cublasOperation_t ta = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N, no = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = key->epi == EPI_RELU_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS
                           : key->epi == EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS
                                                  : CUBLASLT_EPILOGUE_DEFAULT;
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F,
                                               CUDA_R_32F), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                     sizeof(ta)), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &no,
                                                     sizeof(no)), err);
    SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                     sizeof(epi)), err);
    if (key->epi != EPI_NONE)
        SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias, sizeof(bias)), err);
    /* Column-major: op(W^T) is n x k (W^T stored n x k, ld n; or with tb,
     * W stored k x n, ld k, transposed), A^T k x m (ld k), Y^T n x m. */
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, t, key->tb ? key->k : key->n,
                                                 key->tb ? key->n : key->k,
                                                 key->tb ? key->k : key->n), err);
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, t, (uint64_t)key->k, m, key->k), err);
    SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, t, (uint64_t)key->n, m, key->n), err);
    if (key->batched) { /* items one after another in each operand */
        int32_t count = LT_BATCH_REF;
        int64_t strides[3] = {key->k * key->n, key->m * key->k, key->m * key->n};
        cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->ld};
        for (int i = 0; i < 3; i++) {
            SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
                                  ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                  sizeof(count)), err);
            SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
                                  ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                  sizeof(strides[i])), err);
        }
    }
    cublasLtMatmulPreference_t pref;
    SLIM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), err);
    uint32_t al = key->align;
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->la, p->lb, p->ld, p->ld, pref,
                                           pinned ? 8 : 1, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->ok = false;
    /* No algorithm is an answer, not an error: the caller falls back. */
    if (s == CUBLAS_STATUS_NOT_SUPPORTED)
        return SLIM_OK;
    SLIM_CUBLAS_CHECK(s, err);
    for (int i = 0; i < found && !p->ok; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || (pinned && splits_k(&res[i].algo)))
            continue;
        p->algo = res[i].algo;
        p->ok = true;
    }
    return SLIM_OK;
}

/* The thread's plan for this key, built on first use. */
static slim_status plan_get(slim_cuda_ctx *cu, const lt_key *key, const void *bias, size_t ws,
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
        if (p->used && key_eq(&p->key, key)) {
            p->last = lt->clock;
            *out = p;
            return SLIM_OK;
        }
        if (!p->used || (victim->used && p->last < victim->last))
            victim = p;
    }
    plan_clear(victim);
    victim->used = true;
    victim->key = *key;
    victim->last = lt->clock;
    slim_status st = plan_build(lt, victim, bias, ws, err);
    if (st) {
        plan_clear(victim);
        return st;
    }
    *out = victim;
    return SLIM_OK;
}

/* Runs p for m rows (or, batched, m items): C = alpha * A op(W) [+ bias]
 * [Relu]. */
static slim_status plan_run(slim_cuda_ctx *cu, lt_plan *p, int64_t m, float alpha,
                            const void *a, const void *w, const void *bias, void *c,
                            slim_err *err)
{
    if (p->key.batched) { /* pinned: the same algorithm, this many items */
        int32_t count = (int32_t)m;
        cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->ld};
        for (int i = 0; i < 3; i++)
            SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
                                  ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                  sizeof(count)), err);
    } else if (p->key.m == 0) { /* pinned: the same algorithm, this many rows */
        uint64_t cols = (uint64_t)m;
        SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p->lb, CUBLASLT_MATRIX_LAYOUT_COLS,
                                                           &cols, sizeof(cols)), err);
        SLIM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p->ld, CUBLASLT_MATRIX_LAYOUT_COLS,
                                                           &cols, sizeof(cols)), err);
    }
    if (p->key.epi != EPI_NONE)
        SLIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias, sizeof(bias)), err);
    float zero = 0.0f;
    SLIM_CUBLAS_CHECK(cublasLtMatmul(cu->lt->handle, p->op, &alpha, w, p->la, a, p->lb, &zero, c,
                                     p->ld, c, p->ld, &p->algo, cu->ws, cu->ws_bytes, cu->stream),
                      err);
    return SLIM_OK;
}

static bool lt_rows_on(void)
{
    const char *e = getenv("SLIM_CUDA_LT_ROWS");
    return !(e && e[0] == '0');
}

extern "C" slim_status slim_cuda_lt_rows(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m,
                                         int64_t n, int64_t k, float alpha, const void *a,
                                         const void *w, const void *bias, bool relu, void *c,
                                         bool *done, slim_err *err)
{
    *done = false;
    uintptr_t any = (uintptr_t)a | (uintptr_t)w | (uintptr_t)c | (uintptr_t)bias;
    if (!lt_rows_on() || !cu->ws || m < 1 || k < 1 || m > INT32_MAX || n > INT32_MAX ||
        k > INT32_MAX || (any & (LT_ROWS_ALIGN - 1)))
        return SLIM_OK;
    lt_key key = {dt, slim_cuda_compute(dt, cu) == CUBLAS_COMPUTE_32F_FAST_TF32, 0, n, k, false,
                  tb, !bias ? EPI_NONE : relu ? EPI_RELU_BIAS : EPI_BIAS, LT_ROWS_ALIGN};
    lt_plan *p = NULL;
    slim_status st = plan_get(cu, &key, bias, cu->ws_bytes, &p, err);
    if (st || !p->ok)
        return st;
    if ((st = plan_run(cu, p, m, alpha, a, w, bias, c, err)))
        return st;
    *done = true;
    return SLIM_OK;
}

extern "C" slim_status slim_cuda_lt_batched(slim_cuda_ctx *cu, slim_dtype dt, int64_t items,
                                            int64_t m, int64_t n, int64_t k, const void *a,
                                            const void *b, void *c, bool *done, slim_err *err)
{
    *done = false;
    size_t es = slim_dtype_size(dt);
    /* Every item's pointer aligned: the bases and the strides. */
    uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)(m * k * es) |
                    (uintptr_t)(k * n * es) | (uintptr_t)(m * n * es);
    if (!lt_rows_on() || !cu->ws || items < 1 || items > INT32_MAX || m < 1 || n < 1 || k < 1 ||
        m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || (any & (LT_ROWS_ALIGN - 1)))
        return SLIM_OK;
    lt_key key = {dt, slim_cuda_compute(dt, cu) == CUBLAS_COMPUTE_32F_FAST_TF32, m, n, k, true,
                  false, EPI_NONE, LT_ROWS_ALIGN};
    lt_plan *p = NULL;
    slim_status st = plan_get(cu, &key, NULL, cu->ws_bytes, &p, err);
    if (st || !p->ok)
        return st;
    if ((st = plan_run(cu, p, items, 1.0f, a, b, NULL, c, err)))
        return st;
    *done = true;
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
    if (k > 0 && slim_gemm_row_invariant()) {
        bool done = false;
        if ((st = slim_cuda_lt_rows(cu, dt, false, m, n, k, 1.0f, A->data, W->data, B->data,
                                    relu, Y->data, &done, ctx->err)) || done)
            return st;
    } else if (k > 0 && m <= INT32_MAX) {
        unsigned align = align_of(A->data);
        unsigned a2 = align_of(W->data), a3 = align_of(Y->data), a4 = align_of(B->data);
        align = align < a2 ? align : a2;
        align = align < a3 ? align : a3;
        align = align < a4 ? align : a4;
        lt_key key = {dt, slim_cuda_compute(dt, cu) == CUBLAS_COMPUTE_32F_FAST_TF32, m, n, k,
                      false, false, relu ? EPI_RELU_BIAS : EPI_BIAS, align};
        lt_plan *p = NULL;
        if ((st = plan_get(cu, &key, B->data, cu->ws_bytes, &p, ctx->err)))
            return st;
        if (p->ok)
            return plan_run(cu, p, m, 1.0f, A->data, W->data, B->data, Y->data, ctx->err);
    }
    /* No cuBLASLt algorithm: the product, then the bias as MatMul + Add do. */
    if (k > 0 && (st = slim_cuda_gemm_rows(cu, dt, false, m, n, k, 1.0f, A->data, W->data, n,
                                           Y->data, ctx->err)))
        return st;
    bias_rows_kernel<<<slim_cuda_blocks(m * n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                       cu->stream>>>(Y->data, B->data, m, n, k > 0, relu, dt);
    SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    return SLIM_OK;
}

extern "C" const slim_cuda_op slim__cuda_ops_slimserve_matmul[] = {
    {"MatMulBias", 1, 0, mmb_supports, mmb_exec},
    {NULL, 0, 0, NULL, NULL},
};
