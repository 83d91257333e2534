/*
 * matmul.cu - MatMul and Gemm through cuBLAS.
 *
 * ONNX tensors are row-major and cuBLAS is column-major, so C = A B is
 * computed as C^T = B^T A^T: the operands swap places and nothing is
 * transposed in memory. fp32 runs on TF32 tensor cores (fp32 itself for
 * a model loaded "fp32-strict": slim_cuda_compute); fp16 and bf16 run on
 * tensor cores with fp32 accumulation.
 *
 * Batch invariance: cuBLAS picks its kernel by shape, so the rows of a
 * merged batch could round differently from the same rows alone. In
 * row-invariant mode (set by the executor for models the server batches)
 * a product over many independent rows is cut into fixed blocks of
 * SLIM_CUDA_ROW_BLOCK rows, the last one zero-padded in scratch: every
 * block is the same GEMM shape, so a row's result does not depend on how
 * many rows shared the call.
 *
 * Grouped (the default; SLIM_CUDA_GROUPED=0 sends one block per call): the
 * same fixed items, 64-row blocks of a product with a weight or
 * the items of a batched product, go G at a time through one
 * cublasGemmBatchedEx, its pointer arrays written on the device. G depends
 * on the item's shape only, never on how many items there are, and the last
 * group is padded with items that read item 0 and write scratch, so every
 * call of a product has the same parameters and cuBLAS picks the same
 * kernel; within a call every item runs the same code. A 4096-row product
 * then takes 64 / G calls instead of 64, and a batched one items / G
 * instead of one call per item.
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

#define GROUP_MAX 64          /* items per grouped call */
#define GROUP_TILES 256       /* about two waves of 128 x 128 tiles on an H100 */

/* On an H100 (2026-11-26, BERT-base fp16, seq 128, row-invariant) grouping
 * took batch 32 from 122 ms to 9.2 ms and batch 1 from 6.2 to 2.7 ms. */
static bool grouped_on(void)
{
    const char *e = getenv("SLIM_CUDA_GROUPED");
    return !(e && e[0] == '0');
}

/* Items per grouped call for items of m x n outputs: enough 128 x 128
 * tiles to fill the GPU about twice, rounded down to a power of two. A
 * function of the item's shape only. The rounding is for the padding: a
 * request's rows are 64-row blocks, so item counts come in multiples of
 * seq / 64 times the batch, mostly powers of two, which a power-of-two G
 * divides. BERT-base at seq 128 (a 768-wide output: 6 tiles) had G = 42:
 * batch 32's 64 blocks went as 2 calls of 42 with 20 padding items, now 2
 * calls of 32 with none (not yet timed on a GPU). */
static int group_size(int64_t m, int64_t n)
{
    int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
    int64_t g = GROUP_TILES / (tiles > 0 ? tiles : 1);
    if (g > GROUP_MAX)
        g = GROUP_MAX;
    int64_t p = 1;
    while (p * 2 <= g)
        p *= 2;
    return (int)p;
}

/* Where the items of a grouped product are, in bytes: item i's batch index
 * decomposes over bdims (row-major) into offsets by astr / bstr; its C is
 * at c + i * cstr. Item tail (if >= 0) reads tail_a and writes tail_c (a
 * short last row block, zero-padded in scratch). Items from n_items on are
 * padding: they read pad_a / pad_b and write their own slot of pad_c (C
 * matrices of one call must not overlap), pad_cstr apart. */
typedef struct group_items {
    const char *a, *b;
    char *c;
    int64_t n_items, cstr, tail;
    const char *tail_a;
    char *tail_c;
    const char *pad_a, *pad_b;
    char *pad_c;
    int64_t pad_cstr;
    int nb;
    int64_t bdims[SLIM_MAX_DIMS], astr[SLIM_MAX_DIMS], bstr[SLIM_MAX_DIMS];
} group_items;

/* One thread per slot of one group; group `group` covers items from
 * group * G. ptrs holds, per group, G pointers for A, then B, then C. */
__global__ void group_ptrs_kernel(group_items it, int G, const void **ptrs)
{
    int64_t group = blockIdx.x;
    int j = threadIdx.x;
    if (j >= G)
        return;
    const void **pa = ptrs + group * 3 * G, **pb = pa + G;
    void **pc = (void **)(pb + G);
    int64_t item = group * G + j;
    if (item >= it.n_items) {
        pa[j] = it.pad_a;
        pb[j] = it.pad_b;
        pc[j] = it.pad_c + (item - it.n_items) * it.pad_cstr;
        return;
    }
    int64_t rem = item, oa = 0, ob = 0;
    for (int i = it.nb - 1; i >= 0; i--) {
        int64_t idx = rem % it.bdims[i];
        rem /= it.bdims[i];
        oa += idx * it.astr[i];
        ob += idx * it.bstr[i];
    }
    pa[j] = item == it.tail ? it.tail_a : it.a + oa;
    pb[j] = it.b + ob;
    pc[j] = item == it.tail ? it.tail_c : it.c + item * it.cstr;
}

/* Row-major C_i[m,n] = alpha * A_i[m,k] op(B_i)[k,n] for every item, G
 * items per call (file comment). lda = k, ldc = n. */
static slim_status gemm_grouped(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m, int64_t n,
                                int64_t k, float alpha, int64_t ldb, group_items *it,
                                slim_err *err)
{
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return slim_errf(err, SLIM_EUNSUPPORTED, "matrix product of %lld x %lld x %lld is past "
                         "cuBLAS's 32-bit sizes", (long long)m, (long long)n, (long long)k);
    if (it->n_items == 0 || m == 0 || n == 0)
        return SLIM_OK;
    size_t es = slim_dtype_size(dt);
    int G = group_size(m, n);
    int64_t groups = (it->n_items + G - 1) / G, pads = groups * G - it->n_items;
    void *ptrs, *junk = NULL;
    slim_status st;
    if ((st = slim_cuda_scratch(cu, (size_t)(groups * 3 * G) * sizeof(void *), &ptrs, err)) ||
        (pads && (st = slim_cuda_scratch(cu, (size_t)(pads * m * n) * es, &junk, err))))
        return st;
    it->pad_a = it->tail == 0 ? it->tail_a : it->a;
    it->pad_b = it->b;
    it->pad_c = (char *)junk;
    it->pad_cstr = m * n * (int64_t)es;
    group_ptrs_kernel<<<(unsigned)groups, GROUP_MAX, 0, cu->stream>>>(*it, G,
                                                                     (const void **)ptrs);
    SLIM_CUDA_LAUNCH_CHECK(err);
    cudaDataType_t t = CUDA_R_32F;
    dtype_of(dt, &t);
    float beta = 0.0f;
    for (int64_t g = 0; g < groups; g++) {
        const void **pa = (const void **)ptrs + g * 3 * G, **pb = pa + G;
        void **pc = (void **)(pb + G);
        /* Column-major C^T = op(B)^T A^T: B's pointers first (gemm_rm). */
        SLIM_CUBLAS_CHECK(cublasGemmBatchedEx(cu->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                              CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, pb, t,
                                              (int)ldb, pa, t, (int)k, &beta, pc, t, (int)n, G,
                                              slim_cuda_compute(dt, cu), CUBLAS_GEMM_DEFAULT),
                          err);
    }
    return SLIM_OK;
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
                                   slim_cuda_compute(dt, cu), CUBLAS_GEMM_DEFAULT), err);
    return SLIM_OK;
}

/* gemm_rows in groups: the 64-row blocks are the items, the last one
 * zero-padded in scratch when short. */
static slim_status gemm_rows_grouped(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const void *a,
                                     const void *b, int64_t ldb, void *c, slim_err *err)
{
    size_t es = slim_dtype_size(dt);
    const int64_t R = SLIM_CUDA_ROW_BLOCK;
    int64_t blocks = (m + R - 1) / R, rest = m - (m / R) * R;
    group_items it;
    memset(&it, 0, sizeof(it));
    it.a = (const char *)a;
    it.b = (const char *)b;
    it.c = (char *)c;
    it.n_items = blocks;
    it.cstr = R * n * (int64_t)es;
    it.tail = -1;
    it.nb = 1;
    it.bdims[0] = blocks;
    it.astr[0] = R * k * (int64_t)es;
    it.bstr[0] = 0;
    slim_status st;
    if (rest) {
        void *pa, *pc;
        if ((st = slim_cuda_scratch(cu, (size_t)(R * k) * es, &pa, err)) ||
            (st = slim_cuda_scratch(cu, (size_t)(R * n) * es, &pc, err)))
            return st;
        SLIM_CUDA_CHECK(cudaMemsetAsync(pa, 0, (size_t)(R * k) * es, cu->stream), err);
        SLIM_CUDA_CHECK(cudaMemcpyAsync(pa, (const char *)a + (m - rest) * k * es,
                                        (size_t)(rest * k) * es, cudaMemcpyDeviceToDevice,
                                        cu->stream), err);
        it.tail = blocks - 1;
        it.tail_a = (const char *)pa;
        it.tail_c = (char *)pc;
    }
    if ((st = gemm_grouped(cu, dt, tb, R, n, k, alpha, ldb, &it, err)))
        return st;
    if (rest)
        SLIM_CUDA_CHECK(cudaMemcpyAsync((char *)c + (m - rest) * n * es, it.tail_c,
                                        (size_t)(rest * n) * es, cudaMemcpyDeviceToDevice,
                                        cu->stream), err);
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
    bool done = false;
    slim_status lt = slim_cuda_lt_rows(cu, dt, tb, m, n, k, alpha, a, b, NULL, false, c, &done,
                                       err);
    if (lt || done)
        return lt;
    if (grouped_on())
        return gemm_rows_grouped(cu, dt, tb, m, n, k, alpha, a, b, ldb, c, err);
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

extern "C" slim_status slim_cuda_gemm_rows(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m,
                                           int64_t n, int64_t k, float alpha, const void *a,
                                           const void *b, int64_t ldb, void *c, slim_err *err)
{
    return gemm_rows(cu, dt, tb, m, n, k, alpha, a, b, ldb, 0.0f, c, err);
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
    slim_status blas = slim_cuda_blas(cu, ctx->err);
    if (blas)
        return blas;
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
    if (k == 0) { /* empty sums; cuBLAS refuses a leading dimension of 0 */
        SLIM_CUDA_CHECK(cudaMemsetAsync(Y->data, 0, slim_tensor_nbytes(Y), cu->stream), ctx->err);
        return SLIM_OK;
    }
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
                              Y->data, t, (int)n, m * n, (int)batch, slim_cuda_compute(dt, cu),
                              CUBLAS_GEMM_DEFAULT),
                          ctx->err);
        return SLIM_OK;
    }
    if (slim_gemm_row_invariant() && a_count == batch && b_count == batch) {
        bool done = false;
        slim_status st = slim_cuda_lt_batched(cu, dt, batch, m, n, k, A->data, B->data, Y->data,
                                              &done, ctx->err);
        if (st || done)
            return st;
    }
    if (slim_gemm_row_invariant() && grouped_on()) {
        group_items it;
        memset(&it, 0, sizeof(it));
        it.a = (const char *)A->data;
        it.b = (const char *)B->data;
        it.c = (char *)Y->data;
        it.n_items = batch;
        it.cstr = m * n * (int64_t)es;
        it.tail = -1;
        it.nb = nb;
        for (int i = 0; i < nb; i++) {
            it.bdims[i] = bdims[i];
            it.astr[i] = astr[i] * (int64_t)es;
            it.bstr[i] = bstr[i] * (int64_t)es;
        }
        return gemm_grouped(cu, dt, false, m, n, k, 1.0f, n, &it, ctx->err);
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
    slim_status blas = slim_cuda_blas(cu, ctx->err);
    if (blas)
        return blas;
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
    else /* with transA, A's first axis is K, not the batch: nothing to block */
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
