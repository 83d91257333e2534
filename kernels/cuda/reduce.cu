/*
 * reduce.cu - ReduceSum, ReduceMean, ReduceMax, ReduceMin over any set of
 * axes: one thread per output element walks its reduced elements in a
 * fixed order, accumulating in fp32, so a result never depends on what
 * else is in the tensor. Axes are an attribute (ReduceSum before opset 13,
 * the others before 18) or input 1, read on the host.
 */
#include "common.cuh"

#include <string.h>

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN } red_op;

typedef struct red_geom {
    int nk, nr;                 /* kept and reduced axes */
    int64_t kdims[SLIM_MAX_DIMS], kstr[SLIM_MAX_DIMS];
    int64_t rdims[SLIM_MAX_DIMS], rstr[SLIM_MAX_DIMS];
    int64_t rcount;
} red_geom;

__global__ void reduce_kernel(const void *x, void *y, int64_t n_out, red_geom g, int op, int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_out;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, base = 0;
        for (int d = g.nk - 1; d >= 0; d--) {
            base += (rem % g.kdims[d]) * g.kstr[d];
            rem /= g.kdims[d];
        }
        float acc = op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : 0.0f;
        for (int64_t j = 0; j < g.rcount; j++) {
            int64_t r = j, off = base;
            for (int d = g.nr - 1; d >= 0; d--) {
                off += (r % g.rdims[d]) * g.rstr[d];
                r /= g.rdims[d];
            }
            float v = slim_ld(x, off, dt);
            if (op == R_MAX)
                acc = (v > acc || v != v) ? v : acc;
            else if (op == R_MIN)
                acc = (v < acc || v != v) ? v : acc;
            else
                acc += v;
        }
        if (op == R_MEAN)
            acc /= (float)g.rcount;
        slim_st(y, i, dt, acc);
    }
}

static slim_status reduce_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu, int op, int axes_since)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n_out = slim_tensor_numel(y);
    if (n_out == 0)
        return SLIM_OK;
    int64_t axes[SLIM_MAX_DIMS];
    int n_axes = -1;
    slim_status st;
    if (ctx->node->opset >= axes_since) {
        if (ctx->n_in > 1 && ctx->in[1] &&
            (st = slim_read_ints(ctx->in[1], "axes", axes, SLIM_MAX_DIMS, &n_axes, ctx->err)))
            return st;
    } else {
        n_axes = slim_attr_ints(ctx->node, "axes", axes, SLIM_MAX_DIMS);
    }
    bool reduce[SLIM_MAX_DIMS] = {false};
    if (n_axes <= 0) {
        if (slim_attr_int(ctx->node, "noop_with_empty_axes", 0)) {
            SLIM_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, slim_tensor_nbytes(y),
                                            cudaMemcpyDeviceToDevice, cu->stream), ctx->err);
            return SLIM_OK;
        }
        for (int d = 0; d < x->ndim; d++)
            reduce[d] = true;
    }
    for (int a = 0; a < n_axes; a++) {
        int ax;
        if ((st = slim_norm_axis(axes[a], x->ndim, &ax, ctx->err)))
            return st;
        reduce[ax] = true;
    }
    int64_t str[SLIM_MAX_DIMS];
    slim_contiguous_strides(x->ndim, x->dims, str);
    red_geom g;
    memset(&g, 0, sizeof(g));
    g.rcount = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (reduce[d]) {
            g.rdims[g.nr] = x->dims[d];
            g.rstr[g.nr++] = str[d];
            g.rcount *= x->dims[d];
        } else {
            g.kdims[g.nk] = x->dims[d];
            g.kstr[g.nk++] = str[d];
        }
    }
    reduce_kernel<<<slim_cuda_blocks(n_out, 128), 128, 0, cu->stream>>>(x->data, y->data, n_out,
                                                                      g, op, x->dtype);
    return SLIM_OK;
}

#define REDUCE(name, op, since)                                        \
    static slim_status name##_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu) \
    {                                                                  \
        return reduce_exec(ctx, cu, op, since);                        \
    }
REDUCE(sum, R_SUM, 13)
REDUCE(mean, R_MEAN, 18)
REDUCE(max, R_MAX, 18)
REDUCE(min, R_MIN, 18)

static bool float_in(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]);
}

extern "C" const slim_cuda_op slim__cuda_ops_reduce[] = {
    {"ReduceSum", 1, 0, float_in, sum_exec},
    {"ReduceSum", 13, 0x2, float_in, sum_exec},
    {"ReduceMean", 1, 0, float_in, mean_exec},
    {"ReduceMean", 18, 0x2, float_in, mean_exec},
    {"ReduceMax", 1, 0, float_in, max_exec},
    {"ReduceMax", 18, 0x2, float_in, max_exec},
    {"ReduceMin", 1, 0, float_in, min_exec},
    {"ReduceMin", 18, 0x2, float_in, min_exec},
    {NULL, 0, 0, NULL, NULL},
};
