/*
 * pool.cu - MaxPool and AveragePool over 2-D NCHW windows, and the global
 * pools over any spatial rank. One thread per output element; windows sum
 * in fp32. Output shapes (ceil_mode included) come from the CPU infer.
 */
#include "common.cuh"

#include <string.h>

typedef struct pool_geom {
    int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t ph_end, pw_end;     /* pads after the input (ONNX pads[2], pads[3]) */
    bool is_max, include_pad;
} pool_geom;

/* max that keeps a NaN, as the CPU kernels and ReduceMax do */
__device__ __forceinline__ float max_nan(float acc, float v)
{
    return (v > acc || v != v) ? v : acc;
}

__global__ void pool2d_kernel(const void *x, void *y, int64_t n, pool_geom g, int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
        const int64_t base = plane * g.h * g.w;
        float acc = g.is_max ? -INFINITY : 0.0f;
        int64_t count = 0; /* taps averaged over; for max, taps read */
        for (int64_t ky = 0; ky < g.kh; ky++) {
            int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            for (int64_t kx = 0; kx < g.kw; kx++) {
                int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                if (g.is_max) {
                    if (inside) {
                        acc = max_nan(acc, slim_ld(x, base + iy * g.w + ix, dt));
                        count++;
                    }
                } else {
                    /* count_include_pad counts pads, begin and end, but
                     * not the ceil_mode overhang past the padded input. */
                    if (inside)
                        acc += slim_ld(x, base + iy * g.w + ix, dt);
                    if (inside || (g.include_pad && iy < g.h + g.ph_end && ix < g.w + g.pw_end))
                        count++;
                }
            }
        }
        /* A window over padding alone gives 0, as on the CPU. */
        slim_st(y, i, dt, !count ? 0.0f : g.is_max ? acc : acc / (float)count);
    }
}

static slim_status pool_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    int64_t k[2], s[2] = {1, 1}, p[4] = {0, 0, 0, 0}, d[2] = {1, 1};
    slim_attr_ints(ctx->node, "kernel_shape", k, 2);
    slim_attr_ints(ctx->node, "strides", s, 2);
    slim_attr_ints(ctx->node, "pads", p, 4);
    slim_attr_ints(ctx->node, "dilations", d, 2);
    pool_geom g = {x->dims[2], x->dims[3], y->dims[2], y->dims[3], k[0], k[1], s[0], s[1],
                   p[0], p[1], d[0], d[1], p[2], p[3], strcmp(ctx->node->op_type, "MaxPool") == 0,
                   slim_attr_int(ctx->node, "count_include_pad", 0) != 0};
    pool2d_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        x->data, y->data, n, g, x->dtype);
    return SLIM_OK;
}

static bool pool_ok(const slim_node *n, const slim_dtype *in)
{
    if (!slim_cuda_is_float(in[0]) || (n->n_out > 1 && n->out[1] >= 0))
        return false;
    const char *pad = slim_attr_str(n, "auto_pad", "NOTSET");
    if (strcmp(pad, "NOTSET") != 0 && strcmp(pad, "VALID") != 0)
        return false;
    int64_t k[8];
    /* 2-D windows only; others stay on the CPU. */
    return slim_attr_ints(n, "kernel_shape", k, 8) == 2 &&
           slim_attr_int(n, "storage_order", 0) == 0;
}

/* ---- global pools: one block per (n, c) plane ------------------------------ */

__global__ void global_pool_kernel(const void *x, void *y, int64_t spatial, bool is_max, int dt)
{
    __shared__ float shared[32];
    int64_t plane = blockIdx.x;
    float acc = is_max ? -INFINITY : 0.0f;
    for (int64_t i = threadIdx.x; i < spatial; i += blockDim.x) {
        float v = slim_ld(x, plane * spatial + i, dt);
        acc = is_max ? max_nan(acc, v) : acc + v;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, acc, o);
        acc = is_max ? max_nan(acc, other) : acc + other;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        shared[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = shared[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            r = is_max ? max_nan(r, shared[w]) : r + shared[w];
        slim_st(y, plane, dt, is_max ? r : r / (float)spatial);
    }
}

static slim_status global_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_tensor *x = ctx->in[0];
    int64_t planes = x->ndim >= 2 ? x->dims[0] * x->dims[1] : 1, spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->dims[d];
    if (planes == 0)
        return SLIM_OK;
    if (planes > INT32_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "too many planes for one launch");
    global_pool_kernel<<<(unsigned)planes, 128, 0, cu->stream>>>(
        x->data, ctx->out[0]->data, spatial,
        strcmp(ctx->node->op_type, "GlobalMaxPool") == 0, x->dtype);
    return SLIM_OK;
}

static bool float_in(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]);
}

extern "C" const slim_cuda_op slim__cuda_ops_pool[] = {
    {"MaxPool", 1, 0, pool_ok, pool_exec},
    {"AveragePool", 1, 0, pool_ok, pool_exec},
    {"GlobalAveragePool", 1, 0, float_in, global_exec},
    {"GlobalMaxPool", 1, 0, float_in, global_exec},
    {NULL, 0, 0, NULL, NULL},
};
