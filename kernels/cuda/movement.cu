/*
 * movement.cu - data movement: Transpose, Gather, Concat, and the view ops
 * (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout), which need no
 * kernel: the executor shares the input's device buffer.
 *
 * The movers copy elements by size (1, 2, 4 or 8 bytes), so they work for
 * every dtype.
 */
#include "common.cuh"
#include "transpose_plan.h"

#include <string.h>

/* ---- Transpose ----------------------------------------------------------- */

/* transpose_plan.h reduces the permutation first; then a plain copy, a
 * gather with 32-bit index arithmetic when the plan fits (64-bit division
 * costs tens of instructions per element and axis), or, for a batch of
 * 2-D transposes (attention's K^T), 32 x 32 tiles through shared memory so
 * that both the reads and the writes are coalesced. */

static_assert(SLIM_TRANSPOSE_MAX_DIMS == SLIM_MAX_DIMS, "a plan holds any tensor's axes");

/* Output element i reads input element sum(idx[d] * strides[d]). */
template <typename T, typename I>
__global__ void transpose_gather_kernel(const T *x, T *y, I n, slim_cuda_shape sh)
{
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I rem = i, off = 0;
        for (int d = sh.ndim - 1; d >= 0; d--) {
            I dim = (I)sh.dims[d];
            off += rem % dim * (I)sh.strides[d];
            rem /= dim;
        }
        y[i] = x[off];
    }
}

#define TP_TILE 32
#define TP_ROWS 8

/* Per batch item b (over batch's dims and input strides): out[b][a][c] =
 * in[base(b) + a + c * sc], out rows of C. Threads are TP_TILE x TP_ROWS; a
 * block moves one tile, reading along a and writing along c. */
template <typename T>
__global__ void transpose_tiled_kernel(const T *x, T *y, int64_t A, int64_t C, int64_t sc,
                                       slim_cuda_shape batch, int64_t n_batch)
{
    __shared__ T tile[TP_TILE][TP_TILE + 1];
    int64_t a0 = (int64_t)blockIdx.x * TP_TILE, c0 = (int64_t)blockIdx.y * TP_TILE;
    for (int64_t b = blockIdx.z; b < n_batch; b += gridDim.z) {
        int64_t rem = b, base = 0;
        for (int d = batch.ndim - 1; d >= 0; d--) {
            base += rem % batch.dims[d] * batch.strides[d];
            rem /= batch.dims[d];
        }
        const T *xb = x + base;
        T *yb = y + b * A * C;
        for (int k = 0; k < TP_TILE; k += TP_ROWS) {
            int64_t a = a0 + threadIdx.x, c = c0 + threadIdx.y + k;
            if (a < A && c < C)
                tile[threadIdx.y + k][threadIdx.x] = xb[a + c * sc];
        }
        __syncthreads();
        for (int k = 0; k < TP_TILE; k += TP_ROWS) {
            int64_t a = a0 + threadIdx.y + k, c = c0 + threadIdx.x;
            if (a < A && c < C)
                yb[a * C + c] = tile[threadIdx.x][threadIdx.y + k];
        }
        __syncthreads();
    }
}

template <typename T>
static void launch_transpose_gather(const void *x, void *y, const slim_transpose_plan &p,
                                    cudaStream_t st)
{
    slim_cuda_shape sh;
    memset(&sh, 0, sizeof(sh));
    sh.ndim = p.ndim;
    for (int d = 0; d < p.ndim; d++) {
        sh.dims[d] = p.dims[d];
        sh.strides[d] = p.strides[d];
    }
    unsigned g = slim_cuda_blocks(p.n, SLIM_CUDA_BLOCK);
    /* Every input offset is below n: 32 bits do when n does. */
    if (p.n <= INT32_MAX)
        transpose_gather_kernel<T, uint32_t><<<g, SLIM_CUDA_BLOCK, 0, st>>>(
            (const T *)x, (T *)y, (uint32_t)p.n, sh);
    else
        transpose_gather_kernel<T, int64_t><<<g, SLIM_CUDA_BLOCK, 0, st>>>(
            (const T *)x, (T *)y, p.n, sh);
}

template <typename T>
static void launch_tiled(const void *x, void *y, const slim_transpose_plan &p, dim3 grid,
                         cudaStream_t st)
{
    slim_cuda_shape batch;
    memset(&batch, 0, sizeof(batch));
    batch.ndim = p.ndim - 2;
    int64_t n_batch = 1;
    for (int d = 0; d < batch.ndim; d++) {
        batch.dims[d] = p.dims[d];
        batch.strides[d] = p.strides[d];
        n_batch *= p.dims[d];
    }
    transpose_tiled_kernel<T><<<grid, dim3(TP_TILE, TP_ROWS), 0, st>>>(
        (const T *)x, (T *)y, p.dims[p.ndim - 2], p.dims[p.ndim - 1], p.strides[p.ndim - 1],
        batch, n_batch);
}

/* y = x (ndim dims, es-byte elements) with its axes permuted. */
static slim_status transpose_run(slim_cuda_ctx *cu, const void *x, void *y, int ndim,
                                 const int64_t *dims, const int64_t *perm, size_t es,
                                 slim_err *err)
{
    uintptr_t addr = (uintptr_t)x | (uintptr_t)y;
    slim_transpose_plan p;
    slim_transpose_plan_make(ndim, dims, perm, es, addr ? (size_t)(addr & (~addr + 1)) : 256, &p);
    if (p.n == 0)
        return SLIM_OK;
    int last = p.ndim - 1;
    if (p.ndim == 1 && p.strides[0] == 1) {
        SLIM_CUDA_CHECK(cudaMemcpyAsync(y, x, (size_t)p.n * p.es, cudaMemcpyDeviceToDevice,
                                        cu->stream), err);
        return SLIM_OK;
    }
    int64_t n_batch = 1;
    for (int d = 0; d + 2 < p.ndim; d++)
        n_batch *= p.dims[d];
    int64_t gx = p.ndim >= 2 ? (p.dims[last - 1] + TP_TILE - 1) / TP_TILE : 0;
    int64_t gy = (p.dims[last] + TP_TILE - 1) / TP_TILE;
    if (p.ndim >= 2 && p.strides[last] != 1 && p.strides[last - 1] == 1 && p.es <= 8 &&
        gx <= INT32_MAX && gy <= 65535) {
        dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)(n_batch < 65535 ? n_batch : 65535));
        switch (p.es) {
        case 1: launch_tiled<uint8_t>(x, y, p, grid, cu->stream); break;
        case 2: launch_tiled<uint16_t>(x, y, p, grid, cu->stream); break;
        case 4: launch_tiled<uint32_t>(x, y, p, grid, cu->stream); break;
        default: launch_tiled<uint64_t>(x, y, p, grid, cu->stream); break;
        }
        SLIM_CUDA_LAUNCH_CHECK(err);
        return SLIM_OK;
    }
    switch (p.es) {
    case 1: launch_transpose_gather<uint8_t>(x, y, p, cu->stream); break;
    case 2: launch_transpose_gather<uint16_t>(x, y, p, cu->stream); break;
    case 4: launch_transpose_gather<uint32_t>(x, y, p, cu->stream); break;
    case 8: launch_transpose_gather<uint64_t>(x, y, p, cu->stream); break;
    case 16: launch_transpose_gather<uint4>(x, y, p, cu->stream); break;
    default:
        return slim_errf(err, SLIM_EUNSUPPORTED, "no GPU copy for %zu-byte elements", p.es);
    }
    SLIM_CUDA_LAUNCH_CHECK(err);
    return SLIM_OK;
}

static slim_status transpose_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (slim_tensor_numel(y) == 0)
        return SLIM_OK;
    int64_t perm[SLIM_MAX_DIMS];
    int np = slim_attr_ints(ctx->node, "perm", perm, SLIM_MAX_DIMS);
    if (np < 0) { /* default: reverse the axes */
        np = x->ndim;
        for (int d = 0; d < x->ndim; d++)
            perm[d] = x->ndim - 1 - d;
    }
    return transpose_run(cu, x->data, y->data, x->ndim, x->dims, perm,
                         slim_dtype_size(x->dtype), ctx->err);
}

/* ---- Gather ------------------------------------------------------------ */

template <typename T, typename I>
__global__ void gather_kernel(const T *x, const I *idx, T *y, int64_t n, int64_t n_idx,
                              int64_t axis_len, int64_t inner)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t in_i = i % inner;
        int64_t j = (i / inner) % n_idx;
        int64_t o = i / (inner * n_idx);
        int64_t k = (int64_t)idx[j];
        if (k < 0)
            k += axis_len;
        /* Out-of-range indices were refused by the CPU check only when the
         * index data was on the host; on the GPU they read zero. */
        y[i] = (k >= 0 && k < axis_len) ? x[(o * axis_len + k) * inner + in_i] : T(0);
    }
}

template <typename T>
static void launch_gather(const slim_tensor *x, const slim_tensor *idx, slim_tensor *y,
                          int64_t n, int64_t n_idx, int64_t axis_len, int64_t inner,
                          cudaStream_t st)
{
    unsigned g = slim_cuda_blocks(n, SLIM_CUDA_BLOCK);
    if (idx->dtype == SLIM_I64)
        gather_kernel<T, int64_t><<<g, SLIM_CUDA_BLOCK, 0, st>>>(
            (const T *)x->data, (const int64_t *)idx->data, (T *)y->data, n, n_idx, axis_len,
            inner);
    else
        gather_kernel<T, int32_t><<<g, SLIM_CUDA_BLOCK, 0, st>>>(
            (const T *)x->data, (const int32_t *)idx->data, (T *)y->data, n, n_idx, axis_len,
            inner);
}

static slim_status gather_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0], *idx = ctx->in[1];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, &axis, ctx->err);
    if (st)
        return st;
    int64_t inner = 1;
    for (int d = axis + 1; d < x->ndim; d++)
        inner *= x->dims[d];
    int64_t n_idx = slim_tensor_numel(idx);
    switch (slim_dtype_size(x->dtype)) {
    case 1: launch_gather<uint8_t>(x, idx, y, n, n_idx, x->dims[axis], inner, cu->stream); break;
    case 2: launch_gather<uint16_t>(x, idx, y, n, n_idx, x->dims[axis], inner, cu->stream); break;
    case 4: launch_gather<uint32_t>(x, idx, y, n, n_idx, x->dims[axis], inner, cu->stream); break;
    case 8: launch_gather<uint64_t>(x, idx, y, n, n_idx, x->dims[axis], inner, cu->stream); break;
    default: return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "no GPU Gather for this dtype");
    }
    return SLIM_OK;
}

static bool gather_ok(const slim_node *n, const slim_dtype *in)
{
    return in[0] != SLIM_DTYPE_UNDEFINED && (in[1] == SLIM_I64 || in[1] == SLIM_I32);
}

/* ---- Concat: one 2-D copy per input ---------------------------------------- */

static slim_status concat_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    slim_tensor *y = ctx->out[0];
    if (slim_tensor_numel(y) == 0)
        return SLIM_OK;
    int axis;
    slim_status st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), y->ndim, &axis, ctx->err);
    if (st)
        return st;
    size_t es = slim_dtype_size(y->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= y->dims[d];
    for (int d = axis + 1; d < y->ndim; d++)
        inner *= y->dims[d];
    size_t row = (size_t)(y->dims[axis] * inner) * es, at = 0;
    for (int k = 0; k < ctx->n_in; k++) {
        const slim_tensor *x = ctx->in[k];
        if (!x)
            continue;
        size_t w = (size_t)(x->dims[axis] * inner) * es;
        /* One row is a plain copy; cudaMemcpy2D refuses pitches past the
         * device's limit (2 GiB), so wider rows go one by one. */
        if (w && outer == 1)
            SLIM_CUDA_CHECK(cudaMemcpyAsync((char *)y->data + at, x->data, w,
                                            cudaMemcpyDeviceToDevice, cu->stream), ctx->err);
        else if (w && outer && row <= (size_t)INT32_MAX)
            SLIM_CUDA_CHECK(cudaMemcpy2DAsync((char *)y->data + at, row, x->data, w, w,
                                              (size_t)outer, cudaMemcpyDeviceToDevice,
                                              cu->stream), ctx->err);
        else
            for (int64_t o = 0; w && o < outer; o++)
                SLIM_CUDA_CHECK(cudaMemcpyAsync((char *)y->data + at + (size_t)o * row,
                                                (const char *)x->data + (size_t)o * w, w,
                                                cudaMemcpyDeviceToDevice, cu->stream),
                                ctx->err);
        at += w;
    }
    return SLIM_OK;
}

/* ---- support ----------------------------------------------------------- */

static bool any_dtype(const slim_node *n, const slim_dtype *in)
{
    return in[0] != SLIM_DTYPE_UNDEFINED;
}

static bool one_output(const slim_node *n, const slim_dtype *in)
{
    return in[0] != SLIM_DTYPE_UNDEFINED && (n->n_out < 2 || n->out[1] < 0);
}

extern "C" const slim_cuda_op slim__cuda_ops_movement[] = {
    {"Transpose", 1, 0, any_dtype, transpose_exec},
    {"Gather", 1, 0, gather_ok, gather_exec},
    {"Concat", 1, 0, any_dtype, concat_exec},
    /* views: exec NULL, the executor shares the buffer */
    {"Reshape", 1, 0x2, any_dtype, NULL},
    {"Flatten", 1, 0, any_dtype, NULL},
    {"Squeeze", 1, 0x2, any_dtype, NULL},
    {"Unsqueeze", 1, 0x2, any_dtype, NULL},
    {"Identity", 1, 0, any_dtype, NULL},
    {"Dropout", 1, 0x6, one_output, NULL},
    {NULL, 0, 0, NULL, NULL},
};
