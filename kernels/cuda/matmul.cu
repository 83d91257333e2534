/*
 * matmul.cu - MatMul and Gemm through cuBLAS.
 *
 * ONNX tensors are row-major and cuBLAS is column-major, so C = A B is
 * computed as C^T = B^T A^T: the operands swap places and nothing is
 * transposed in memory. fp32 runs in fp32 (TF32 when the context allows
 * it); fp16 and bf16 run on tensor cores with fp32 accumulation.
 *
 * Batch invariance: cuBLAS picks its kernel by shape, so the rows of a
 * merged batch could round differently from the same rows alone. In
 * row-invariant mode (set by the executor for models the server batches)
 * a product over many independent rows is cut into fixed blocks of
 * SLIM_CUDA_ROW_BLOCK rows, the last one zero-padded in scratch: every
 * block is the same GEMM shape, so a row's result does not depend on how
 * many rows shared the call.
 */
#include "common.cuh"

#include <string.h>

#define SLIM_CUDA_ROW_BLOCK 64

static bool dtype_of(slim_dtype dt, cudaDataType_t *t)
{
    switch (dt) {
    case SLIM_F32: *t = CUDA_R_32F; return true;
    case SLIM_F16: *t = CUDA_R_16F; return true;
    case SLIM_BF16: *t = CUDA_R_16BF; return true;
    default: return false;
    }
}

static cublasComputeType_t compute_of(slim_dtype dt, const slim_cuda_ctx *cu)
{
    if (dt == SLIM_F32 && cu->allow_tf32)
        return CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_COMPUTE_32F;
}

/* Row-major C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C. */
static slim_status gemm_rm(slim_cuda_ctx *cu, slim_dtype dt, bool ta, bool tb, int64_t m,
                           int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                           const void *b, int64_t ldb, float beta, void *c, int64_t ldc,
                           slim_err *err)
{
    if (m == 0 || n == 0)
        return SLIM_OK;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return slim_errf(err, SLIM_EUNSUPPORTED, "matrix product of %lld x %lld x %lld is past "
                         "cuBLAS's 32-bit sizes", (long long)m, (long long)n, (long long)k);
    cudaDataType_t t = CUDA_R_32F;
    dtype_of(dt, &t);
    SLIM_CUBLAS_CHECK(cublasGemmEx(cu->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                                   b, t, (int)ldb, a, t, (int)lda, &beta, c, t, (int)ldc,
                                   compute_of(dt, cu), CUBLAS_GEMM_DEFAULT), err);
    return SLIM_OK;
}

/* As gemm_rm for A not transposed, with the rows of A independent items:
 * in row-invariant mode cut into fixed blocks (file comment). */
static slim_status gemm_rows(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m, int64_t n,
                             int64_t k, float alpha, const void *a, const void *b, int64_t ldb,
                             float beta, void *c, slim_err *err)
{
    if (!slim_gemm_row_invariant() || beta != 0.0f)
        return gemm_rm(cu, dt, false, tb, m, n, k, alpha, a, k, b, ldb, beta, c, n, err);
    size_t es = slim_dtype_size(dt);
    const int64_t R = SLIM_CUDA_ROW_BLOCK;
    int64_t full = m / R * R;
    slim_status st;
    for (int64_t r = 0; r < full; r += R)
        if ((st = gemm_rm(cu, dt, false, tb, R, n, k, alpha, (const char *)a + r * k * es, k, b,
                          ldb, 0.0f, (char *)c + r * n * es, n, err)))
            return st;
    int64_t rest = m - full;
    if (rest == 0)
        return SLIM_OK;
    void *pa, *pc;
    if ((st = slim_cuda_scratch(cu, (size_t)(R * k) * es, &pa, err)) ||
        (st = slim_cuda_scratch(cu, (size_t)(R * n) * es, &pc, err)))
        return st;
    SLIM_CUDA_CHECK(cudaMemsetAsync(pa, 0, (size_t)(R * k) * es, cu->stream), err);
    SLIM_CUDA_CHECK(cudaMemcpyAsync(pa, (const char *)a + full * k * es, (size_t)(rest * k) * es,
                                    cudaMemcpyDeviceToDevice, cu->stream), err);
    if ((st = gemm_rm(cu, dt, false, tb, R, n, k, alpha, pa, k, b, ldb, 0.0f, pc, n, err)))
        return st;
    SLIM_CUDA_CHECK(cudaMemcpyAsync((char *)c + full * n * es, pc, (size_t)(rest * n) * es,
                                    cudaMemcpyDeviceToDevice, cu->stream), err);
    return SLIM_OK;
}

static bool supports_float(const slim_node *n, const slim_dtype *in)
{
    cudaDataType_t t;
    return dtype_of(in[0], &t) && in[1] == in[0] &&
           (n->n_in < 3 || in[2] == SLIM_DTYPE_UNDEFINED || in[2] == in[0]);
}

/* ---- MatMul ------------------------------------------------------------ */

static slim_status matmul_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *A = ctx->in[0], *B = ctx->in[1];
    slim_tensor *Y = ctx->out[0];
    if (slim_tensor_numel(Y) == 0)
        return SLIM_OK;
    slim_dtype dt = A->dtype;
    size_t es = slim_dtype_size(dt);
    /* numpy semantics: a 1-D A is a row, a 1-D B a column. */
    int64_t m = A->ndim >= 2 ? A->dims[A->ndim - 2] : 1;
    int64_t k = A->dims[A->ndim - 1];
    int64_t n = B->ndim >= 2 ? B->dims[B->ndim - 1] : 1;
    int a_b = A->ndim > 2 ? A->ndim - 2 : 0, b_b = B->ndim > 2 ? B->ndim - 2 : 0;
    int nb = a_b > b_b ? a_b : b_b;
    int64_t bdims[SLIM_MAX_DIMS], astr[SLIM_MAX_DIMS], bstr[SLIM_MAX_DIMS];
    int64_t batch = 1, a_count = 1, b_count = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - a_b), ib = i - (nb - b_b);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        bdims[i] = da > db ? da : db;
        batch *= bdims[i];
        a_count *= da;
        b_count *= db;
    }
    /* Element strides of each batch index into A and B (0 on broadcast). */
    int64_t sa = m * k, sb = k * n;
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - a_b), ib = i - (nb - b_b);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        astr[i] = da == 1 ? 0 : sa;
        bstr[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    if (b_count == 1) /* one weight for every row of A: a single product */
        return gemm_rows(cu, dt, false, a_count * m, n, k, 1.0f, A->data, B->data, n, 0.0f,
                         Y->data, ctx->err);
    if (a_count == batch && b_count == batch && !slim_gemm_row_invariant()) {
        cudaDataType_t t = CUDA_R_32F;
        dtype_of(dt, &t);
        float one = 1.0f, zero = 0.0f;
        SLIM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
                              cu->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                              B->data, t, (int)n, k * n, A->data, t, (int)k, m * k, &zero,
                              Y->data, t, (int)n, m * n, (int)batch, compute_of(dt, cu),
                              CUBLAS_GEMM_DEFAULT),
                          ctx->err);
        return SLIM_OK;
    }
    /* Broadcast batch dims (or invariant mode): one product per item, the
     * same shape each time. */
    for (int64_t bi = 0; bi < batch; bi++) {
        int64_t rem = bi, oa = 0, ob = 0;
        for (int i = nb - 1; i >= 0; i--) {
            int64_t idx = rem % bdims[i];
            rem /= bdims[i];
            oa += idx * astr[i];
            ob += idx * bstr[i];
        }
        slim_status st = gemm_rm(cu, dt, false, false, m, n, k, 1.0f,
                                 (const char *)A->data + oa * es, k,
                                 (const char *)B->data + ob * es, n, 0.0f,
                                 (char *)Y->data + bi * m * n * es, n, ctx->err);
        if (st)
            return st;
    }
    return SLIM_OK;
}

/* ---- Gemm -------------------------------------------------------------- */

/* y[r, c] += beta * C broadcast to [m, n] (C is [n], [1, n], [m, 1], [m, n]
 * or a scalar). A separate pass so that the product itself is the same
 * whatever the bias, and row-invariant. */
__global__ void add_bias_kernel(void *y, const void *c, int64_t m, int64_t n, int64_t cm,
                                int64_t cn, float beta, int dt)
{
    int64_t total = m * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n, col = i % n;
        int64_t ci = (cm == 1 ? 0 : r) * cn + (cn == 1 ? 0 : col);
        slim_st(y, i, dt, slim_ld(y, i, dt) + beta * slim_ld(c, ci, dt));
    }
}

static slim_status gemm_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *A = ctx->in[0], *B = ctx->in[1];
    const slim_tensor *C = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *Y = ctx->out[0];
    bool ta = slim_attr_int(ctx->node, "transA", 0) != 0;
    bool tb = slim_attr_int(ctx->node, "transB", 0) != 0;
    float alpha = slim_attr_float(ctx->node, "alpha", 1.0f);
    float beta = slim_attr_float(ctx->node, "beta", 1.0f);
    int64_t m = Y->dims[0], n = Y->dims[1];
    int64_t k = ta ? A->dims[0] : A->dims[1];
    if (m == 0 || n == 0)
        return SLIM_OK;
    slim_status st = SLIM_OK;
    if (k == 0)
        SLIM_CUDA_CHECK(cudaMemsetAsync(Y->data, 0, slim_tensor_nbytes(Y), cu->stream), ctx->err);
    else if (!ta)
        st = gemm_rows(cu, A->dtype, tb, m, n, k, alpha, A->data, B->data, tb ? k : n, 0.0f,
                       Y->data, ctx->err);
    else
        st = gemm_rm(cu, A->dtype, ta, tb, m, n, k, alpha, A->data, m, B->data, tb ? k : n,
                     0.0f, Y->data, n, ctx->err);
    if (k != 0 && st)
        return st;
    if (C && beta != 0.0f && slim_tensor_numel(C) > 0) {
        int64_t cm = C->ndim == 2 ? C->dims[0] : 1;
        int64_t cn = C->ndim >= 1 ? C->dims[C->ndim - 1] : 1;
        add_bias_kernel<<<slim_cuda_blocks(m * n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0,
                          cu->stream>>>(Y->data, C->data, m, n, cm, cn, beta, Y->dtype);
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    }
    return SLIM_OK;
}

extern "C" const slim_cuda_op slim__cuda_ops_matmul[] = {
    {"MatMul", 1, 0, supports_float, matmul_exec},
    {"Gemm", 1, 0, supports_float, gemm_exec},
    {NULL, 0, 0, NULL, NULL},
};
