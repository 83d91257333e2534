/*
 * norm.cu - LayerNormalization, Softmax/LogSoftmax, BatchNormalization.
 *
 * LayerNorm and Softmax normalize rows: one block per row, a fixed
 * reduction tree (warp shuffles, then across warps), statistics in fp32
 * for every storage type. A row's result depends only on that row, so it
 * is the same whatever batch the row ran in. Softmax over an axis that is
 * not the last is viewed as [outer, axis, inner] and strided. Rows of at
 * most 1024 contiguous elements (attention's scores) go a warp per row
 * instead, the row in registers, typed loads, shuffles only: a block per
 * 128-element row left half its threads idle and synchronized four times.
 */
#include "common.cuh"

#define NORM_THREADS 256

/* Sum over the block of v; every thread gets the total. */
__device__ float block_sum(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? shared[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float block_max(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- LayerNormalization ---------------------------------------------------- */

/* Two passes over the row (mean, then centred variance): stabler than
 * E[x^2] - E[x]^2 when the mean is large. */
__global__ void layernorm_kernel(const void *x, const void *scale, const void *bias, void *y,
                                 float *mean_out, float *inv_out, int64_t cols, float eps,
                                 int dt, int dt_s, int dt_b)
{
    __shared__ float shared[32];
    int64_t row = blockIdx.x;
    int64_t base = row * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += slim_ld(x, base + c, dt);
    float mean = block_sum(s, shared) / (float)cols;
    float v = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = slim_ld(x, base + c, dt) - mean;
        v += d * d;
    }
    float inv = rsqrtf(block_sum(v, shared) / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float o = (slim_ld(x, base + c, dt) - mean) * inv * slim_ld(scale, c, dt_s);
        if (bias)
            o += slim_ld(bias, c, dt_b);
        slim_st(y, base + c, dt, o);
    }
    if (threadIdx.x == 0) {
        if (mean_out)
            mean_out[row] = mean;
        if (inv_out)
            inv_out[row] = inv;
    }
}

static slim_status layernorm_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0], *scale = ctx->in[1];
    const slim_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", -1), x->ndim, &axis, ctx->err);
    if (st)
        return st;
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < x->ndim; d++)
        (d < axis ? rows : cols) *= x->dims[d];
    if (rows == 0 || cols == 0)
        return SLIM_OK;
    if (slim_tensor_numel(scale) != cols || (bias && slim_tensor_numel(bias) != cols))
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "LayerNormalization on the GPU needs scale "
                         "and bias of the normalized shape (%lld elements), not broadcast ones",
                         (long long)cols);
    if (rows > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "too many rows for one launch");
    float *mean = ctx->n_out > 1 && ctx->out[1] ? (float *)ctx->out[1]->data : NULL;
    float *inv = ctx->n_out > 2 && ctx->out[2] ? (float *)ctx->out[2]->data : NULL;
    int threads = cols >= NORM_THREADS ? NORM_THREADS : (int)((cols + 31) / 32 * 32);
    layernorm_kernel<<<(unsigned)rows, threads, 0, cu->stream>>>(
        x->data, scale->data, bias ? bias->data : NULL, ctx->out[0]->data, mean, inv, cols,
        slim_attr_float(ctx->node, "epsilon", 1e-5f), x->dtype, scale->dtype,
        bias ? bias->dtype : x->dtype);
    return SLIM_OK;
}

static bool layernorm_ok(const slim_node *n, const slim_dtype *in)
{
    if (!slim_cuda_is_float(in[0]) || !slim_cuda_is_float(in[1]))
        return false;
    if (n->n_in > 2 && in[2] != SLIM_DTYPE_UNDEFINED && !slim_cuda_is_float(in[2]))
        return false;
    /* Mean and InvStdDev outputs are written as fp32 only. */
    return n->n_out < 2 || slim_attr_int(n, "stash_type", 1) == 1;
}

/* ---- Softmax / LogSoftmax ------------------------------------------------ */

/* Rows of `len` elements `inner` apart; block per (outer, inner) pair. */
__global__ void softmax_kernel(const void *x, void *y, int64_t len, int64_t inner, bool logsm,
                               int dt)
{
    __shared__ float shared[32];
    int64_t o = blockIdx.x / inner, in = blockIdx.x % inner;
    int64_t base = o * len * inner + in;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < len; c += blockDim.x)
        m = fmaxf(m, slim_ld(x, base + c * inner, dt));
    m = block_max(m, shared);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < len; c += blockDim.x)
        s += expf(slim_ld(x, base + c * inner, dt) - m);
    s = block_sum(s, shared);
    float ls = logf(s), inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < len; c += blockDim.x) {
        float d = slim_ld(x, base + c * inner, dt) - m;
        slim_st(y, base + c * inner, dt, logsm ? d - ls : expf(d) * inv);
    }
}

#define SM_WARPS 8  /* rows per block */

/* One warp per row of len <= 32 * VPL contiguous elements. */
template <typename T, int VPL>
__global__ void softmax_warp_kernel(const T *x, T *y, int64_t rows, int len, bool logsm)
{
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5);
    if (row >= rows)
        return; /* the whole warp: its shuffles stay full */
    const T *xr = x + row * len;
    T *yr = y + row * len;
    float v[VPL];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        int c = j * 32 + lane;
        v[j] = c < len ? to_f32(xr[c]) : -INFINITY;
        m = fmaxf(m, v[j]);
    }
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL; j++)
        if (j * 32 + lane < len) {
            v[j] -= m;
            s += expf(v[j]);
        }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    float ls = logf(s), inv = 1.0f / s;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        int c = j * 32 + lane;
        if (c < len)
            from_f32(&yr[c], logsm ? v[j] - ls : expf(v[j]) * inv);
    }
}

template <typename T>
static void launch_softmax_warp(const void *x, void *y, int64_t rows, int len, bool logsm,
                                cudaStream_t st)
{
    unsigned blocks = (unsigned)((rows + SM_WARPS - 1) / SM_WARPS);
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    if (len <= 128)
        softmax_warp_kernel<T, 4><<<blocks, 32 * SM_WARPS, 0, st>>>(xt, yt, rows, len, logsm);
    else if (len <= 256)
        softmax_warp_kernel<T, 8><<<blocks, 32 * SM_WARPS, 0, st>>>(xt, yt, rows, len, logsm);
    else if (len <= 512)
        softmax_warp_kernel<T, 16><<<blocks, 32 * SM_WARPS, 0, st>>>(xt, yt, rows, len, logsm);
    else
        softmax_warp_kernel<T, 32><<<blocks, 32 * SM_WARPS, 0, st>>>(xt, yt, rows, len, logsm);
}

static slim_status softmax_any(slim_op_ctx *ctx, slim_cuda_ctx *cu, bool logsm)
{
    const slim_tensor *x = ctx->in[0];
    int opset = ctx->node->opset;
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", opset < 13 ? 1 : -1),
                                    x->ndim ? x->ndim : 1, &axis, ctx->err);
    if (st)
        return st;
    int64_t outer = 1, len = 1, inner = 1;
    if (opset < 13) { /* coerced to 2-D at axis: rows are everything after it */
        for (int d = 0; d < x->ndim; d++)
            (d < axis ? outer : len) *= x->dims[d];
    } else {
        for (int d = 0; d < x->ndim; d++) {
            if (d < axis)
                outer *= x->dims[d];
            else if (d == axis)
                len = x->dims[d];
            else
                inner *= x->dims[d];
        }
    }
    int64_t blocks = outer * inner;
    if (blocks == 0 || len == 0)
        return SLIM_OK;
    if (inner == 1 && len <= 1024 && outer / SM_WARPS < INT32_MAX) {
        const void *x_d = x->data;
        void *y_d = ctx->out[0]->data;
        if (x->dtype == SLIM_F16)
            launch_softmax_warp<__half>(x_d, y_d, outer, (int)len, logsm, cu->stream);
        else if (x->dtype == SLIM_BF16)
            launch_softmax_warp<__nv_bfloat16>(x_d, y_d, outer, (int)len, logsm, cu->stream);
        else
            launch_softmax_warp<float>(x_d, y_d, outer, (int)len, logsm, cu->stream);
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
        return SLIM_OK;
    }
    if (blocks > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "too many rows for one launch");
    int threads = len >= NORM_THREADS ? NORM_THREADS : (int)((len + 31) / 32 * 32);
    softmax_kernel<<<(unsigned)blocks, threads, 0, cu->stream>>>(x->data, ctx->out[0]->data, len,
                                                                 inner, logsm, x->dtype);
    return SLIM_OK;
}

static slim_status softmax_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return softmax_any(ctx, cu, false);
}

static slim_status logsoftmax_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return softmax_any(ctx, cu, true);
}

/* ---- BatchNormalization (inference) -------------------------------------- */

__global__ void batchnorm_kernel(const void *x, const void *scale, const void *bias,
                                 const void *mean, const void *var, void *y, int64_t n,
                                 int64_t channels, int64_t spatial, float eps, int dt, int dt_p)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / spatial) % channels;
        float inv = rsqrtf(slim_ld(var, c, dt_p) + eps) * slim_ld(scale, c, dt_p);
        float v = (slim_ld(x, i, dt) - slim_ld(mean, c, dt_p)) * inv + slim_ld(bias, c, dt_p);
        slim_st(y, i, dt, v);
    }
}

static slim_status batchnorm_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0];
    int64_t n = slim_tensor_numel(x);
    if (n == 0)
        return SLIM_OK;
    int64_t channels = x->ndim > 1 ? x->dims[1] : 1, spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->dims[d];
    batchnorm_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        x->data, ctx->in[1]->data, ctx->in[2]->data, ctx->in[3]->data, ctx->in[4]->data,
        ctx->out[0]->data, n, channels, spatial, slim_attr_float(ctx->node, "epsilon", 1e-5f),
        x->dtype, ctx->in[1]->dtype);
    return SLIM_OK;
}

static bool batchnorm_ok(const slim_node *n, const slim_dtype *in)
{
    if (n->n_in != 5 || n->n_out != 1 || slim_attr_int(n, "training_mode", 0) != 0)
        return false;
    if (!slim_cuda_is_float(in[0]))
        return false;
    for (int k = 2; k < 5; k++)
        if (in[k] != in[1] || !slim_cuda_is_float(in[k]))
            return false;
    return true;
}

/* ---- AddLayerNorm (com.slimserve) ------------------------------------------ */

/* Values a thread keeps in registers: rows up to 8 x 256 elements. */
#define ALN_PER 8

/* One block per row: the sum A + B rounded to T as Add stores it (and
 * written out when Sum is read), kept in registers, then normalized as
 * layernorm_kernel does with the same threads: the same sums in the same
 * order, so the same bits as the Add and LayerNormalization nodes, with
 * one pass over memory instead of an Add's and a LayerNorm's three. */
template <typename T>
__global__ void add_layernorm_kernel(const T *a, const T *b, const T *scale, const T *bias,
                                     T *y, T *sum, int cols, float eps)
{
    __shared__ float shared[32];
    int64_t base = (int64_t)blockIdx.x * cols;
    float v[ALN_PER];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ALN_PER; j++) {
        int c = threadIdx.x + j * blockDim.x;
        v[j] = 0.0f;
        if (c < cols) {
            T t;
            from_f32(&t, to_f32(a[base + c]) + to_f32(b[base + c]));
            if (sum)
                sum[base + c] = t;
            v[j] = to_f32(t);
            s += v[j];
        }
    }
    float mean = block_sum(s, shared) / (float)cols;
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < ALN_PER; j++)
        if (threadIdx.x + j * blockDim.x < cols) {
            float d = v[j] - mean;
            q += d * d;
        }
    float inv = rsqrtf(block_sum(q, shared) / (float)cols + eps);
#pragma unroll
    for (int j = 0; j < ALN_PER; j++) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < cols) {
            float o = (v[j] - mean) * inv * to_f32(scale[c]);
            if (bias)
                o += to_f32(bias[c]);
            from_f32(&y[base + c], o);
        }
    }
}

template <typename T>
static void launch_add_layernorm(const slim_tensor *a, const slim_tensor *b,
                                 const slim_tensor *sc, const slim_tensor *bi, slim_tensor *y,
                                 slim_tensor *sum, int64_t rows, int cols, int threads, float eps,
                                 cudaStream_t st)
{
    add_layernorm_kernel<T><<<(unsigned)rows, threads, 0, st>>>(
        (const T *)a->data, (const T *)b->data, (const T *)sc->data,
        bi ? (const T *)bi->data : NULL, (T *)y->data, sum ? (T *)sum->data : NULL, cols, eps);
}

static slim_status add_layernorm_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *sc = ctx->in[2];
    const slim_tensor *bi = ctx->n_in > 3 && ctx->in[3] ? ctx->in[3] : NULL;
    slim_tensor *y = ctx->out[0], *sum = ctx->n_out > 1 ? ctx->out[1] : NULL;
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    int64_t cols = y->dims[y->ndim - 1], rows = n / cols;
    if (rows > INT32_MAX || cols > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "AddLayerNorm on the GPU: %lld rows of "
                         "%lld is past one launch", (long long)rows, (long long)cols);
    int threads = cols >= NORM_THREADS ? NORM_THREADS : (int)((cols + 31) / 32 * 32);
    float eps = slim_attr_float(ctx->node, "epsilon", 1e-5f);
    if (slim_tensor_numel(a) == n && slim_tensor_numel(b) == n &&
        cols <= (int64_t)threads * ALN_PER) {
        if (y->dtype == SLIM_F16)
            launch_add_layernorm<__half>(a, b, sc, bi, y, sum, rows, (int)cols, threads, eps,
                                         cu->stream);
        else if (y->dtype == SLIM_BF16)
            launch_add_layernorm<__nv_bfloat16>(a, b, sc, bi, y, sum, rows, (int)cols, threads,
                                                eps, cu->stream);
        else
            launch_add_layernorm<float>(a, b, sc, bi, y, sum, rows, (int)cols, threads, eps,
                                        cu->stream);
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
        return SLIM_OK;
    }
    /* A broadcast operand or a long row: the sum through memory (into Sum,
     * or Y normalized in place: each thread reads its elements before
     * writing them). */
    slim_tensor *dst = sum ? sum : y;
    slim_status st = slim_cuda_add(cu, a, b, dst, ctx->err);
    if (st)
        return st;
    layernorm_kernel<<<(unsigned)rows, threads, 0, cu->stream>>>(
        dst->data, sc->data, bi ? bi->data : NULL, y->data, NULL, NULL, cols, eps, y->dtype,
        sc->dtype, bi ? bi->dtype : y->dtype);
    SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    return SLIM_OK;
}

static bool add_layernorm_ok(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]) && in[1] == in[0] && in[2] == in[0] &&
           (n->n_in < 4 || in[3] == SLIM_DTYPE_UNDEFINED || in[3] == in[0]);
}

extern "C" const slim_cuda_op slim__cuda_ops_slimserve_norm[] = {
    {"AddLayerNorm", 1, 0, add_layernorm_ok, add_layernorm_exec},
    {NULL, 0, 0, NULL, NULL},
};

static bool float_in(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]);
}

extern "C" const slim_cuda_op slim__cuda_ops_norm[] = {
    {"LayerNormalization", 17, 0, layernorm_ok, layernorm_exec},
    {"Softmax", 1, 0, float_in, softmax_exec},
    {"LogSoftmax", 1, 0, float_in, logsoftmax_exec},
    {"BatchNormalization", 6, 0, batchnorm_ok, batchnorm_exec},
    {NULL, 0, 0, NULL, NULL},
};
