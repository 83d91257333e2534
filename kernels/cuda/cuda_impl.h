/*
 * cuda_impl.h - what the CUDA backend's files share (internal to
 * libslim_cuda.so; nothing outside kernels/cuda includes it).
 *
 * Each op family is one .cu file in three parts, as ggml's CUDA backend
 * writes them: `__global__` kernels, `static` launchers that take the
 * stream, and one exec function per operator that reads the node, checks
 * what it must and launches. A file exports one table of slim_cuda_op,
 * ended by an entry with op_type NULL; backend.c lists the tables.
 *
 * How a CUDA kernel sees a node:
 *   - The CPU def's infer() has already set every output's dtype and shape
 *     (shape inference is the same on every device), and the executor has
 *     allocated the outputs on the GPU. exec only computes.
 *   - in[k]->data and out[k]->data are device pointers, except the inputs
 *     named in host_inputs (shape-like operands that infer reads: Reshape's
 *     shape, Slice's starts...), which stay in host memory.
 *   - Attributes are read from ctx->node (slim_attr_int & co.); the CPU
 *     kernel's prepared state is private to its file and is not used.
 *   - Work goes on cu->stream and nothing synchronizes: the executor does
 *     at the end of the run. Temporary device memory comes from
 *     slim_cuda_scratch; it is the node's until its exec returns, then the
 *     next node's, and goes back to the allocator after that sync.
 *   - Failures return a status with a message (SLIM_CUDA_CHECK and
 *     friends name the statement, file and line); nothing aborts.
 *
 * supports(node, in_dtypes) answers at load whether this kernel can run the
 * node with these input dtypes (SLIM_DTYPE_UNDEFINED for an absent
 * optional input); the partition pass puts the node on the CPU otherwise.
 * It may look at attributes (an auto_pad mode the kernel lacks, say) but
 * not at shapes, which vary per request: exec must handle every shape the
 * CPU kernel accepts, or fail with SLIM_EUNSUPPORTED and a message.
 * exec NULL marks a view op (SLIM_OP_ALIAS0 on the CPU side: Reshape,
 * Flatten, ...): the executor shares the input's device buffer.
 */
#ifndef SLIM_CUDA_IMPL_H
#define SLIM_CUDA_IMPL_H

#ifdef __cplusplus
extern "C" {
#endif
#include "kernel.h"
#ifdef __cplusplus
}
#endif

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

struct slim_device;

/* Per-thread execution state: each thread that runs models on the GPU (a
 * server instance, say) has its own stream and library handles. */
typedef struct slim_cuda_ctx {
    int device;                 /* CUDA ordinal */
    struct slim_device *dev;    /* the slimserve device, for its allocator */
    cudaStream_t stream;
    cublasHandle_t cublas;      /* bound to stream; workspace set by slim_cuda_blas */
    int sm_count;
    bool tf32_env;              /* SLIM_CUDA_TF32 is not "0" */
    bool allow_tf32;            /* fp32 products may use TF32 now (set per node: op_exec) */
    /* Scratch chunks held for the current run (backend.c); the node being
     * run takes bytes from chunk scratch_cur at scratch_off on. */
    int n_scratch, cap_scratch;
    struct slim_buffer **scratch;
    int scratch_cur;
    size_t scratch_off;
    struct slim_buffer *run_workspace; /* cuBLAS's, for the current run */
    void *ws;                   /* run_workspace's memory and size, for cuBLASLt */
    size_t ws_bytes;
    struct slim_cuda_lt *lt;    /* cuBLASLt's handle and plans (matmul_lt.cu), or NULL */
    struct slim_cuda_dnn *dnn;  /* cuDNN's handle and plans (conv_cudnn.cu), or NULL */
} slim_cuda_ctx;

typedef struct slim_cuda_op {
    const char *op_type;
    int since;                  /* lowest opset this entry implements */
    unsigned host_inputs;       /* bit k: input k stays in host memory */
    bool (*supports)(const slim_node *n, const slim_dtype *in_dtypes);
    slim_status (*exec)(slim_op_ctx *ctx, slim_cuda_ctx *cu);
} slim_cuda_op;

/* Device memory for the node being run: valid for the kernels its exec
 * queues, reused by the next node on this stream (which runs after them),
 * returned to the allocator after the run's stream synchronizes. Charged to
 * the running model; fails with SLIM_EOOM like any allocation, so a full GPU
 * halves a batch instead of failing it. Contents are undefined. */
slim_status slim_cuda_scratch(slim_cuda_ctx *cu, size_t bytes, void **ptr, slim_err *err);

/* Call before the first cuBLAS call of an op: gives cu->cublas its
 * workspace for the rest of the run (charged to the running model, freed
 * after the run's stream synchronizes). SLIM_EOOM when there is no room. */
slim_status slim_cuda_blas(slim_cuda_ctx *cu, slim_err *err);

/* Grid size for n elements at `block` threads each, capped so that a
 * grid-stride loop covers the rest (kernels must loop). */
static inline unsigned slim_cuda_blocks(int64_t n, int block)
{
    int64_t b = (n + block - 1) / block;
    if (b < 1)
        b = 1;
    if (b > 65535LL * 8)
        b = 65535LL * 8;
    return (unsigned)b;
}

const char *slim_cublas_status_name(cublasStatus_t s);

/* cuBLAS's compute type for a product of dt operands: fp32 products on
 * TF32 tensor cores unless the running model is fp32-strict (or the
 * process said SLIM_CUDA_TF32=0); halves accumulate in fp32. */
static inline cublasComputeType_t slim_cuda_compute(slim_dtype dt, const slim_cuda_ctx *cu)
{
    return dt == SLIM_F32 && cu->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* Return a status naming the failed statement, file and line. A CUDA
 * out-of-memory becomes SLIM_EOOM, so the batcher halves. */
#define SLIM_CUDA_CHECK(call, err)                                                        \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            (void)cudaGetLastError();                                                     \
            return slim_errf((err), e_ == cudaErrorMemoryAllocation ? SLIM_EOOM           \
                                                                    : SLIM_EINTERNAL,     \
                             "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e_),   \
                             cudaGetErrorString(e_), #call, __FILE__, __LINE__);          \
        }                                                                                 \
    } while (0)

/* After a kernel launch: launch configuration errors show up here. */
#define SLIM_CUDA_LAUNCH_CHECK(err) SLIM_CUDA_CHECK(cudaGetLastError(), err)

#define SLIM_CUBLAS_CHECK(call, err)                                                      \
    do {                                                                                  \
        cublasStatus_t s_ = (call);                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return slim_errf((err), s_ == CUBLAS_STATUS_ALLOC_FAILED ? SLIM_EOOM          \
                                                                     : SLIM_EINTERNAL,    \
                             "cuBLAS error %s in %s at %s:%d", slim_cublas_status_name(s_), \
                             #call, __FILE__, __LINE__);                                  \
    } while (0)

/* Row-major C[m,n] = alpha * A[m,k] op(B)[k,n], A's rows independent
 * items: in row-invariant mode cut into fixed blocks (matmul.cu). */
slim_status slim_cuda_gemm_rows(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m, int64_t n,
                                int64_t k, float alpha, const void *a, const void *b,
                                int64_t ldb, void *c, slim_err *err);
#ifdef SLIM_HAVE_CUDNN
/* Y = conv(X, W) (no bias) through cuDNN when it is loaded and takes this
 * convolution: *done says whether it ran; when false nothing was queued
 * and the caller runs im2col (conv_cudnn.cu). pads are ONNX's [4]. */
slim_status slim_cuda_conv_dnn(slim_cuda_ctx *cu, const slim_tensor *x, const slim_tensor *w,
                               slim_tensor *y, int64_t group, const int64_t *strides,
                               const int64_t *pads, const int64_t *dilations, bool *done,
                               slim_err *err);
void slim_cuda_dnn_release(slim_cuda_ctx *cu);
#endif
/* y = a + b with numpy broadcasting, y's shape and dtype (elementwise.cu). */
slim_status slim_cuda_add(slim_cuda_ctx *cu, const slim_tensor *a, const slim_tensor *b,
                          slim_tensor *y, slim_err *err);
/* Row-invariant C[m,n] = alpha * A[m,k] op(W) [+ bias[n]] [Relu] as one
 * cuBLASLt call with an algorithm pinned per shape (matmul_lt.cu); *done
 * false when it does not apply (nothing queued: the caller falls back). */
slim_status slim_cuda_lt_rows(slim_cuda_ctx *cu, slim_dtype dt, bool tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const void *a, const void *w,
                              const void *bias, bool relu, void *c, bool *done, slim_err *err);
/* Row-invariant products of `items` items, A [m,k] x B [k,n] -> C [m,n],
 * each contiguous after the last, one call with a pinned algorithm; *done
 * as for slim_cuda_lt_rows. */
slim_status slim_cuda_lt_batched(slim_cuda_ctx *cu, slim_dtype dt, int64_t items, int64_t m,
                                 int64_t n, int64_t k, const void *a, const void *b, void *c,
                                 bool *done, slim_err *err);
/* Frees cu's cuBLASLt handle and plans, if any (matmul_lt.cu). */
void slim_cuda_lt_release(slim_cuda_ctx *cu);

/* The op tables, one per .cu file (backend.c lists them). */
extern const slim_cuda_op slim__cuda_ops_elementwise[];
extern const slim_cuda_op slim__cuda_ops_norm[];
extern const slim_cuda_op slim__cuda_ops_reduce[];
extern const slim_cuda_op slim__cuda_ops_movement[];
extern const slim_cuda_op slim__cuda_ops_pool[];
extern const slim_cuda_op slim__cuda_ops_matmul[];
extern const slim_cuda_op slim__cuda_ops_conv[];
/* com.slimserve operators the passes make for GPUs. */
extern const slim_cuda_op slim__cuda_ops_slimserve_matmul[];
extern const slim_cuda_op slim__cuda_ops_slimserve_norm[];
extern const slim_cuda_op slim__cuda_ops_slimserve_attention[];

#ifdef __cplusplus
}
#endif
#endif
