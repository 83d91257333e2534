/*
 * elementwise.cu - arithmetic with numpy broadcasting, activations, Cast.
 *
 * Every kernel computes in fp32 and stores in the output's type (fp32,
 * fp16 or bf16). Broadcasting has three fast shapes -- same shape, one
 * operand a scalar, one operand a row broadcast along the last axis (the
 * bias of [N, C] + [C]) -- and a general strided path over up to 8 dims.
 */
#include "common.cuh"

#include <string.h>

typedef enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_POW, BIN_MAX, BIN_MIN } bin_op;

__device__ __forceinline__ float bin_apply(int op, float a, float b)
{
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return a / b;
    case BIN_POW: return powf(a, b);
    case BIN_MAX: return a != a || b != b ? a + b : fmaxf(a, b); /* NaN propagates */
    default: return a != a || b != b ? a + b : fminf(a, b);
    }
}

/* How operand x maps onto an output index: 0 same, 1 scalar, 2 row (i % n),
 * 3 strided. */
typedef struct bin_map {
    int kind;
    int64_t n;
    slim_cuda_shape s;   /* for kind 3: out dims, x's broadcast strides */
} bin_map;

__device__ __forceinline__ int64_t map_index(const bin_map &m, int64_t i)
{
    switch (m.kind) {
    case 0: return i;
    case 1: return 0;
    case 2: return i % m.n;
    default: {
        int64_t off = 0;
        for (int d = m.s.ndim - 1; d >= 0; d--) {
            int64_t idx = i % m.s.dims[d];
            i /= m.s.dims[d];
            off += idx * m.s.strides[d];
        }
        return off;
    }
    }
}

__global__ void binary_kernel(int op, const void *a, bin_map ma, const void *b, bin_map mb,
                              void *y, int64_t n, int dt_a, int dt_y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        slim_st(y, i, dt_y, bin_apply(op, slim_ld(a, map_index(ma, i), dt_a),
                                      slim_ld(b, map_index(mb, i), dt_a)));
}

/* The common shapes (same shape, scalar, row bias) for one storage type,
 * with 32-bit indices: the generic kernel's per-element dtype switch and
 * 64-bit division cost more than the memory traffic of these ops. */
template <typename T>
__device__ __forceinline__ float to_f(T v) { return (float)v; }
template <>
__device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v) { return (T)v; }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, int OP>
__global__ void binary_fast_kernel(const T *a, int ka, const T *b, int kb, T *y, unsigned n,
                                   unsigned row)
{
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned ia = ka == 0 ? i : ka == 1 ? 0u : i % row;
        unsigned ib = kb == 0 ? i : kb == 1 ? 0u : i % row;
        y[i] = from_f<T>(bin_apply(OP, to_f<T>(a[ia]), to_f<T>(b[ib])));
    }
}

template <typename T, int OP>
static void launch_fast(const void *a, int ka, const void *b, int kb, void *y, int64_t n,
                        int64_t row, cudaStream_t st)
{
    binary_fast_kernel<T, OP><<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, st>>>(
        (const T *)a, ka, (const T *)b, kb, (T *)y, (unsigned)n, (unsigned)(row ? row : 1));
}

template <typename T>
static void launch_fast_op(int op, const void *a, int ka, const void *b, int kb, void *y,
                           int64_t n, int64_t row, cudaStream_t st)
{
    switch (op) {
    case BIN_ADD: launch_fast<T, BIN_ADD>(a, ka, b, kb, y, n, row, st); break;
    case BIN_SUB: launch_fast<T, BIN_SUB>(a, ka, b, kb, y, n, row, st); break;
    case BIN_MUL: launch_fast<T, BIN_MUL>(a, ka, b, kb, y, n, row, st); break;
    case BIN_DIV: launch_fast<T, BIN_DIV>(a, ka, b, kb, y, n, row, st); break;
    case BIN_POW: launch_fast<T, BIN_POW>(a, ka, b, kb, y, n, row, st); break;
    case BIN_MAX: launch_fast<T, BIN_MAX>(a, ka, b, kb, y, n, row, st); break;
    default: launch_fast<T, BIN_MIN>(a, ka, b, kb, y, n, row, st); break;
    }
}

static bin_map make_map(const slim_tensor *x, const slim_tensor *y)
{
    bin_map m;
    memset(&m, 0, sizeof(m));
    int64_t nx = slim_tensor_numel(x), ny = slim_tensor_numel(y);
    if (nx == ny) {
        m.kind = 0;
    } else if (nx == 1) {
        m.kind = 1;
    } else if (x->ndim >= 1 && y->ndim >= 1 && x->dims[x->ndim - 1] == y->dims[y->ndim - 1] &&
               nx == x->dims[x->ndim - 1]) {
        m.kind = 2;
        m.n = nx;
    } else {
        m.kind = 3;
        m.s.ndim = y->ndim;
        for (int d = 0; d < y->ndim; d++)
            m.s.dims[d] = y->dims[d];
        slim_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, m.s.strides);
    }
    return m;
}

static slim_status binary_to(slim_cuda_ctx *cu, int op, const slim_tensor *a,
                             const slim_tensor *b, slim_tensor *y)
{
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    bin_map ma = make_map(a, y), mb = make_map(b, y);
    if (ma.kind != 3 && mb.kind != 3 && n <= INT32_MAX && a->dtype == y->dtype &&
        (ma.kind != 2 || mb.kind != 2 || ma.n == mb.n)) {
        int64_t row = ma.kind == 2 ? ma.n : mb.n;
        if (y->dtype == SLIM_F16)
            launch_fast_op<__half>(op, a->data, ma.kind, b->data, mb.kind, y->data, n, row,
                                   cu->stream);
        else if (y->dtype == SLIM_BF16)
            launch_fast_op<__nv_bfloat16>(op, a->data, ma.kind, b->data, mb.kind, y->data, n,
                                          row, cu->stream);
        else
            launch_fast_op<float>(op, a->data, ma.kind, b->data, mb.kind, y->data, n, row,
                                  cu->stream);
        return SLIM_OK;
    }
    binary_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        op, a->data, ma, b->data, mb, y->data, n, a->dtype, y->dtype);
    return SLIM_OK;
}

static slim_status binary(slim_op_ctx *ctx, slim_cuda_ctx *cu, int op)
{
    slim_status st = binary_to(cu, op, ctx->in[0], ctx->in[1], ctx->out[0]);
    if (!st)
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    return st;
}

extern "C" slim_status slim_cuda_add(slim_cuda_ctx *cu, const slim_tensor *a,
                                     const slim_tensor *b, slim_tensor *y, slim_err *err)
{
    slim_status st = binary_to(cu, BIN_ADD, a, b, y);
    if (!st)
        SLIM_CUDA_LAUNCH_CHECK(err);
    return st;
}

#define BINARY(name, op)                                               \
    static slim_status name##_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu) \
    {                                                                  \
        return binary(ctx, cu, op);                                    \
    }
BINARY(add, BIN_ADD)
BINARY(sub, BIN_SUB)
BINARY(mul, BIN_MUL)
BINARY(div, BIN_DIV)
BINARY(pow, BIN_POW)

/* Max/Min take 1..N inputs: folded pairwise into the output. */
static slim_status variadic(slim_op_ctx *ctx, slim_cuda_ctx *cu, int op)
{
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(y);
    if (n == 0)
        return SLIM_OK;
    if (ctx->n_in == 1) {
        SLIM_CUDA_CHECK(cudaMemcpyAsync(y->data, ctx->in[0]->data, slim_tensor_nbytes(y),
                                        cudaMemcpyDeviceToDevice, cu->stream), ctx->err);
        return SLIM_OK;
    }
    bin_map same;
    memset(&same, 0, sizeof(same));
    const slim_tensor *a = ctx->in[0];
    binary_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        op, a->data, make_map(a, y), ctx->in[1]->data, make_map(ctx->in[1], y), y->data, n,
        a->dtype, y->dtype);
    for (int k = 2; k < ctx->n_in; k++)
        binary_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
            op, y->data, same, ctx->in[k]->data, make_map(ctx->in[k], y), y->data, n, y->dtype,
            y->dtype);
    return SLIM_OK;
}

static slim_status max_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return variadic(ctx, cu, BIN_MAX);
}

static slim_status min_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return variadic(ctx, cu, BIN_MIN);
}

/* ---- unary ------------------------------------------------------------- */

typedef enum {
    UN_RELU, UN_SIGMOID, UN_TANH, UN_ERF, UN_EXP, UN_LOG, UN_SQRT, UN_NEG, UN_ABS, UN_RECIP,
    UN_LEAKY, UN_GELU, UN_GELU_TANH, UN_HSWISH, UN_HSIGMOID, UN_CLIP, UN_SOFTPLUS, UN_ELU,
    UN_FLOOR, UN_CEIL
} un_op;

__device__ __forceinline__ float un_apply(int op, float x, float p, float q)
{
    switch (op) {
    case UN_RELU: return x > 0.0f ? x : (x != x ? x : 0.0f);
    case UN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case UN_TANH: return tanhf(x);
    case UN_ERF: return erff(x);
    case UN_EXP: return expf(x);
    case UN_LOG: return logf(x);
    case UN_SQRT: return sqrtf(x);
    case UN_NEG: return -x;
    case UN_ABS: return fabsf(x);
    case UN_RECIP: return 1.0f / x;
    case UN_LEAKY: return x >= 0.0f ? x : p * x;
    case UN_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case UN_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case UN_HSWISH: return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
    case UN_HSIGMOID: return fmaxf(0.0f, fminf(1.0f, p * x + q));
    case UN_CLIP: return x != x ? x : fminf(fmaxf(x, p), q);
    case UN_SOFTPLUS: return x > 20.0f ? x : log1pf(expf(x));
    case UN_ELU: return x >= 0.0f ? x : p * (expf(x) - 1.0f);
    case UN_FLOOR: return floorf(x);
    default: return ceilf(x);
    }
}

__global__ void unary_kernel(int op, const void *x, void *y, int64_t n, float p, float q,
                             int dt_x, int dt_y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        slim_st(y, i, dt_y, un_apply(op, slim_ld(x, i, dt_x), p, q));
}

/* One storage type in and out with 32-bit indices, the op a template
 * argument: as with binary_fast_kernel, the dtype and op switches and the
 * 64-bit index of unary_kernel cost more than the memory traffic (BERT's
 * Gelu at fp16 batch 32 ran at a third of the H100's bandwidth). */
template <typename T, int OP>
__global__ void unary_fast_kernel(const T *x, T *y, unsigned n, float p, float q)
{
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = from_f<T>(un_apply(OP, to_f<T>(x[i]), p, q));
}

template <typename T>
static void launch_unary_fast(int op, const void *x, void *y, int64_t n, float p, float q,
                              cudaStream_t st)
{
    unsigned blocks = slim_cuda_blocks(n, SLIM_CUDA_BLOCK);
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    switch (op) {
#define UNARY_CASE(o)                                                                            case o:                                                                                          unary_fast_kernel<T, o><<<blocks, SLIM_CUDA_BLOCK, 0, st>>>(xt, yt, (unsigned)n, p, q);         break;
    UNARY_CASE(UN_RELU) UNARY_CASE(UN_SIGMOID) UNARY_CASE(UN_TANH) UNARY_CASE(UN_ERF)
    UNARY_CASE(UN_EXP) UNARY_CASE(UN_LOG) UNARY_CASE(UN_SQRT) UNARY_CASE(UN_NEG)
    UNARY_CASE(UN_ABS) UNARY_CASE(UN_RECIP) UNARY_CASE(UN_LEAKY) UNARY_CASE(UN_GELU)
    UNARY_CASE(UN_GELU_TANH) UNARY_CASE(UN_HSWISH) UNARY_CASE(UN_HSIGMOID) UNARY_CASE(UN_CLIP)
    UNARY_CASE(UN_SOFTPLUS) UNARY_CASE(UN_ELU) UNARY_CASE(UN_FLOOR) UNARY_CASE(UN_CEIL)
#undef UNARY_CASE
    default: break;
    }
}

static slim_status unary(slim_op_ctx *ctx, slim_cuda_ctx *cu, int op, float p, float q)
{
    int64_t n = slim_tensor_numel(ctx->out[0]);
    if (n == 0)
        return SLIM_OK;
    slim_dtype dt = ctx->out[0]->dtype;
    if (ctx->in[0]->dtype == dt && n <= INT32_MAX) {
        const void *x = ctx->in[0]->data;
        void *y = ctx->out[0]->data;
        if (dt == SLIM_F16)
            launch_unary_fast<__half>(op, x, y, n, p, q, cu->stream);
        else if (dt == SLIM_BF16)
            launch_unary_fast<__nv_bfloat16>(op, x, y, n, p, q, cu->stream);
        else
            launch_unary_fast<float>(op, x, y, n, p, q, cu->stream);
        SLIM_CUDA_LAUNCH_CHECK(ctx->err);
        return SLIM_OK;
    }
    unary_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        op, ctx->in[0]->data, ctx->out[0]->data, n, p, q, ctx->in[0]->dtype, ctx->out[0]->dtype);
    return SLIM_OK;
}

#define UNARY(name, op)                                                \
    static slim_status name##_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu) \
    {                                                                  \
        return unary(ctx, cu, op, 0.0f, 0.0f);                         \
    }
UNARY(relu, UN_RELU)
UNARY(sigmoid, UN_SIGMOID)
UNARY(tanh, UN_TANH)
UNARY(erf, UN_ERF)
UNARY(exp, UN_EXP)
UNARY(log, UN_LOG)
UNARY(sqrt, UN_SQRT)
UNARY(neg, UN_NEG)
UNARY(abs, UN_ABS)
UNARY(recip, UN_RECIP)
UNARY(hswish, UN_HSWISH)
UNARY(softplus, UN_SOFTPLUS)
UNARY(floor, UN_FLOOR)
UNARY(ceil, UN_CEIL)

static slim_status leaky_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return unary(ctx, cu, UN_LEAKY, slim_attr_float(ctx->node, "alpha", 0.01f), 0.0f);
}

static slim_status elu_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return unary(ctx, cu, UN_ELU, slim_attr_float(ctx->node, "alpha", 1.0f), 0.0f);
}

static slim_status hsigmoid_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    return unary(ctx, cu, UN_HSIGMOID, slim_attr_float(ctx->node, "alpha", 0.2f),
                 slim_attr_float(ctx->node, "beta", 0.5f));
}

static slim_status gelu_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const char *approx = slim_attr_str(ctx->node, "approximate", "none");
    return unary(ctx, cu, strcmp(approx, "tanh") == 0 ? UN_GELU_TANH : UN_GELU, 0.0f, 0.0f);
}

/* Clip: min and max are attributes before opset 11, optional host inputs
 * (scalars) since. */
static slim_status clip_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    float lo = -INFINITY, hi = INFINITY;
    if (ctx->node->opset < 11) {
        lo = slim_attr_float(ctx->node, "min", -INFINITY);
        hi = slim_attr_float(ctx->node, "max", INFINITY);
    } else {
        double v;
        if (ctx->n_in > 1 && ctx->in[1]) {
            slim_status st = slim_read_scalar_f64(ctx->in[1], "min", &v, ctx->err);
            if (st)
                return st;
            lo = (float)v;
        }
        if (ctx->n_in > 2 && ctx->in[2]) {
            slim_status st = slim_read_scalar_f64(ctx->in[2], "max", &v, ctx->err);
            if (st)
                return st;
            hi = (float)v;
        }
    }
    return unary(ctx, cu, UN_CLIP, lo, hi);
}

/* ---- Cast among float types -------------------------------------------- */

__global__ void cast_kernel(const void *x, void *y, int64_t n, int dt_x, int dt_y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        slim_st(y, i, dt_y, slim_ld(x, i, dt_x));
}

static slim_status cast_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    int64_t n = slim_tensor_numel(ctx->out[0]);
    if (n == 0)
        return SLIM_OK;
    if (ctx->in[0]->dtype == ctx->out[0]->dtype) {
        SLIM_CUDA_CHECK(cudaMemcpyAsync(ctx->out[0]->data, ctx->in[0]->data,
                                        slim_tensor_nbytes(ctx->out[0]), cudaMemcpyDeviceToDevice,
                                        cu->stream), ctx->err);
        return SLIM_OK;
    }
    cast_kernel<<<slim_cuda_blocks(n, SLIM_CUDA_BLOCK), SLIM_CUDA_BLOCK, 0, cu->stream>>>(
        ctx->in[0]->data, ctx->out[0]->data, n, ctx->in[0]->dtype, ctx->out[0]->dtype);
    return SLIM_OK;
}

/* ---- support ----------------------------------------------------------- */

static bool all_same_float(const slim_node *n, const slim_dtype *in)
{
    if (!slim_cuda_is_float(in[0]))
        return false;
    for (int k = 1; k < n->n_in; k++)
        if (in[k] != SLIM_DTYPE_UNDEFINED && in[k] != in[0])
            return false;
    return true;
}

static bool first_float(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]);
}

static bool clip_ok(const slim_node *n, const slim_dtype *in)
{
    return slim_cuda_is_float(in[0]);
}

static bool cast_ok(const slim_node *n, const slim_dtype *in)
{
    int to = (int)slim_attr_int(n, "to", 0);
    slim_dtype t = slim_dtype_from_onnx(to);
    return slim_cuda_is_float(in[0]) && slim_cuda_is_float(t);
}

extern "C" const slim_cuda_op slim__cuda_ops_elementwise[] = {
    {"Add", 7, 0, all_same_float, add_exec},
    {"Sub", 7, 0, all_same_float, sub_exec},
    {"Mul", 7, 0, all_same_float, mul_exec},
    {"Div", 7, 0, all_same_float, div_exec},
    {"Pow", 7, 0, all_same_float, pow_exec},
    {"Max", 8, 0, all_same_float, max_exec},
    {"Min", 8, 0, all_same_float, min_exec},
    {"Relu", 6, 0, first_float, relu_exec},
    {"Sigmoid", 6, 0, first_float, sigmoid_exec},
    {"Tanh", 6, 0, first_float, tanh_exec},
    {"Erf", 9, 0, first_float, erf_exec},
    {"Exp", 6, 0, first_float, exp_exec},
    {"Log", 6, 0, first_float, log_exec},
    {"Sqrt", 6, 0, first_float, sqrt_exec},
    {"Neg", 6, 0, first_float, neg_exec},
    {"Abs", 6, 0, first_float, abs_exec},
    {"Reciprocal", 6, 0, first_float, recip_exec},
    {"Floor", 6, 0, first_float, floor_exec},
    {"Ceil", 6, 0, first_float, ceil_exec},
    {"LeakyRelu", 6, 0, first_float, leaky_exec},
    {"Elu", 6, 0, first_float, elu_exec},
    {"HardSigmoid", 6, 0, first_float, hsigmoid_exec},
    {"HardSwish", 14, 0, first_float, hswish_exec},
    {"Softplus", 1, 0, first_float, softplus_exec},
    {"Gelu", 20, 0, first_float, gelu_exec},
    {"Clip", 6, 0, clip_ok, clip_exec},
    {"Clip", 11, 0x6, clip_ok, clip_exec},
    {"Cast", 6, 0, cast_ok, cast_exec},
    {NULL, 0, 0, NULL, NULL},
};
