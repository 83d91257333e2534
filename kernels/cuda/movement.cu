/*
 * movement.cu - data movement: Transpose, Gather, Concat, and the view ops
 * (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout), which need no
 * kernel: the executor shares the input's device buffer.
 *
 * The movers copy elements by size (1, 2, 4 or 8 bytes), so they work for
 * every dtype.
 */
#include "common.cuh"

#include <string.h>

template <typename T>
__global__ void transpose_kernel(const T *x, T *y, int64_t n, slim_cuda_shape out,
                                 slim_cuda_shape in_str)
{
    /* out.dims: output dims; in_str.strides[d]: input stride of output axis d. */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = out.ndim - 1; d >= 0; d--) {
            int64_t idx = rem % out.dims[d];
            rem /= out.dims[d];
            off += idx * in_str.strides[d];
        }
        y[i] = x[off];
    }
}

template <typename T>
static void launch_transpose(const void *x, void *y, int64_t n, const slim_cuda_shape &o,
                             const slim_cuda_shape &s, cudaStream_t st)
{
    transpose_kernel<T><<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, st>>>(
        (const T *)x, (T *)y, n, o, s);
}

/* Launches the generic strided gather of es-byte elements. */
static slim_status strided_copy(const void *x, void *y, int64_t n, const slim_cuda_shape &o,
                                const slim_cuda_shape &s, size_t es, cudaStream_t st,
                                slim_err *err)
{
    switch (es) {
    case 1: launch_transpose<uint8_t>(x, y, n, o, s, st); break;
    case 2: launch_transpose<uint16_t>(x, y, n, o, s, st); break;
    case 4: launch_transpose<uint32_t>(x, y, n, o, s, st); break;
    case 8: launch_transpose<uint64_t>(x, y, n, o, s, st); break;
    default:
        return slim_errf(err, SLIM_EUNSUPPORTED, "no GPU copy for %zu-byte elements", es);
    }
    return SLIM_OK;
}

static slim_status transpose_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    int64_t perm[SLIM_MAX_DIMS];
    int np = slim_attr_ints(ctx->node, "perm", perm, SLIM_MAX_DIMS);
    if (np < 0) { /* default: reverse the axes */
        np = x->ndim;
        for (int d = 0; d < x->ndim; d++)
            perm[d] = x->ndim - 1 - d;
    }
    int64_t xstr[SLIM_MAX_DIMS];
    slim_contiguous_strides(x->ndim, x->dims, xstr);
    slim_cuda_shape o, s;
    memset(&o, 0, sizeof(o));
    memset(&s, 0, sizeof(s));
    o.ndim = s.ndim = y->ndim;
    for (int d = 0; d < y->ndim; d++) {
        o.dims[d] = y->dims[d];
        s.strides[d] = xstr[perm[d]];
    }
    return strided_copy(x->data, y->data, n, o, s, slim_dtype_size(x->dtype), cu->stream,
                        ctx->err);
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
        if (w && outer)
            SLIM_CUDA_CHECK(cudaMemcpy2DAsync((char *)y->data + at, row, x->data, w, w,
                                              (size_t)outer, cudaMemcpyDeviceToDevice,
                                              cu->stream), ctx->err);
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
