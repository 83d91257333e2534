/*
 * backend.c - the CUDA backend's core: devices, their caching allocators,
 * per-thread streams and library handles, copies, and the op tables.
 *
 * This file and the .cu files build libslim_cuda.so, which the runtime
 * loads with dlopen (runtime/backend.c, from the entry in the list of
 * backends, pipeline/devices.c) only when a GPU is asked for; its one
 * exported entry point is slim_cuda_backend_open.
 *
 * Memory: each GPU gets the runtime's caching allocator (alloc.c) with a
 * cudaMalloc/cudaFree segment source, so the GPU has PyTorch's caching
 * policy, the same statistics and limits, and the same OOM path: when
 * cudaMalloc fails the allocator frees its cached segments and retries
 * before it reports SLIM_EOOM, and the batcher halves the batch.
 *
 * Streams: every thread that runs models has its own non-blocking stream
 * per device (a server instance is a thread), with its own cuBLAS handle
 * bound to it. PyTorch keeps cached blocks per stream so
 * that a block freed on one stream is not reused by another while the
 * first may still use it. slimserve gets the same safety more simply: the
 * executor holds every device buffer a run frees until the run's stream
 * has synchronized (it must synchronize to hand results back anyway), so
 * any block in the cache is idle and one pool serves every stream.
 */
#include "cuda_impl.h"

#include "device.h"
#include "op_registry.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define SLIM_CUDA_MAX_DEVICES 16
/* cuBLAS's workspace for a run, or SLIM_CUDA_WORKSPACE_MIB (1 to 1024),
 * read once: the size must not change within a process, since the kernels
 * chosen depend on it. 16 MiB, half what NVIDIA suggests for Hopper: on an
 * H100 (bench/gpu_workspace.py, 2026-11-26) BERT-base fp16 took 1.124 /
 * 1.593 / 3.799 ms at batch 1 / 8 / 32 with 32 MiB and 1.143 / 1.599 /
 * 3.945 ms with 16, holding 657 and 641 MiB of the GPU at batch 1
 * (onnxruntime-gpu: 937): the 16 MiB are worth more as memory. */
#define SLIM_CUBLAS_WORKSPACE_DEFAULT ((size_t)16 << 20)
static size_t workspace_bytes;
static pthread_once_t workspace_once = PTHREAD_ONCE_INIT;

static void workspace_init(void)
{
    const char *e = getenv("SLIM_CUDA_WORKSPACE_MIB");
    long mib = e ? strtol(e, NULL, 10) : 0;
    workspace_bytes = mib >= 1 && mib <= 1024 ? (size_t)mib << 20 : SLIM_CUBLAS_WORKSPACE_DEFAULT;
}
/* Pinned staging for host-to-device copies, per thread and device. */
#define SLIM_PINNED_BYTES ((size_t)16 << 20)

typedef struct cuda_device {
    slim_device dev;           /* first: the runtime sees this */
    char name[16];
    int ordinal;
    int sm_count;
    bool limits_set;           /* device_limits ran (under limits_mu) */
    char uuid[48];             /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; "" unknown */
} cuda_device;

static cuda_device devices[SLIM_CUDA_MAX_DEVICES];
static slim_device *device_ptrs[SLIM_CUDA_MAX_DEVICES];
static slim_backend_iface iface;

/* ---- the allocator's segment source --------------------------------------- */

static void *segment_alloc(void *ctx, size_t size)
{
    cuda_device *d = ctx;
    void *p = NULL;
    if (cudaSetDevice(d->ordinal) != cudaSuccess)
        return NULL;
    if (cudaMalloc(&p, size) != cudaSuccess) {
        (void)cudaGetLastError(); /* an OOM is not sticky; clear it */
        return NULL;
    }
    return p;
}

static void segment_free(void *ctx, void *ptr, size_t size)
{
    cuda_device *d = ctx;
    cudaSetDevice(d->ordinal);
    /* Blocks reach the cache only after their stream synchronized, but a
     * segment may hold blocks of several streams: wait for the device. */
    cudaDeviceSynchronize();
    cudaFree(ptr);
}

/* ---- pinned host memory for copies back ----------------------------------- */

/* The outputs of copies to the host (executor.c) come from a caching
 * allocator of its own over cudaHostAlloc: page-locked memory the DMA
 * writes at the link's full speed, where a pageable destination goes
 * through the driver's staging. Pinning costs milliseconds per segment,
 * so the cache (the same policy as every device's) is what makes it pay.
 * It is host memory: its label "cpu" charges it to the running model's
 * host account, as the pageable blocks it replaces were; its segments are
 * portable (any device's copies may use them) and given back on trim
 * (slim_device_pinned_host). One per process, made with the devices;
 * SLIM_CUDA_PINNED_OUT=0 leaves it out (copies back to pageable memory). */
static slim_device pinned_dev;

static void *pinned_segment_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = NULL;
    if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void pinned_segment_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size;
    /* A block reaches the cache only after its copy landed (the copy
     * synchronizes) and its tensor was released. */
    cudaFreeHost(ptr);
}

/* ---- per-thread state --------------------------------------------------- */

typedef struct thread_state {
    slim_cuda_ctx ctx[SLIM_CUDA_MAX_DEVICES];
    bool ready[SLIM_CUDA_MAX_DEVICES];
    void *pinned[SLIM_CUDA_MAX_DEVICES];   /* SLIM_PINNED_BYTES each, or NULL */
    size_t pinned_used[SLIM_CUDA_MAX_DEVICES];
    cudaEvent_t pinned_done[SLIM_CUDA_MAX_DEVICES];
} thread_state;

static pthread_key_t thread_key;

static void free_scratch(slim_cuda_ctx *cu)
{
    for (int i = 0; i < cu->n_scratch; i++)
        slim_buffer_unref(cu->scratch[i]);
    cu->n_scratch = 0;
    cu->scratch_cur = 0;
    cu->scratch_off = 0;
}

static void thread_state_free(void *p)
{
    thread_state *ts = p;
    for (int i = 0; i < SLIM_CUDA_MAX_DEVICES; i++) {
        if (!ts->ready[i])
            continue;
        slim_cuda_ctx *cu = &ts->ctx[i];
        cudaSetDevice(i);
        cudaStreamSynchronize(cu->stream);
        free_scratch(cu);
        free(cu->scratch);
        slim_cuda_lt_release(cu);
#ifdef SLIM_HAVE_CUDNN
        slim_cuda_dnn_release(cu);
#endif
        cublasDestroy(cu->cublas);
        slim_buffer_unref(cu->run_workspace);
        if (ts->pinned[i])
            cudaFreeHost(ts->pinned[i]);
        cudaEventDestroy(ts->pinned_done[i]);
        cudaStreamDestroy(cu->stream);
    }
    free(ts);
}

/* Undoes what a failed thread_ctx_init made, so that the next try starts
 * clean instead of leaking the stream and handles. */
static void thread_ctx_undo(thread_state *ts, int i)
{
    slim_cuda_ctx *cu = &ts->ctx[i];
    if (cu->cublas)
        cublasDestroy(cu->cublas);
    if (ts->pinned_done[i])
        cudaEventDestroy(ts->pinned_done[i]);
    if (cu->stream)
        cudaStreamDestroy(cu->stream);
    cu->cublas = NULL;
    ts->pinned_done[i] = NULL;
    cu->stream = NULL;
    (void)cudaGetLastError();
}

static slim_status thread_ctx_init(thread_state *ts, cuda_device *d, slim_cuda_ctx *cu,
                                   slim_err *err);

/* The calling thread's context on device d, made on first use. */
static slim_status thread_ctx(cuda_device *d, slim_cuda_ctx **out, slim_err *err)
{
    thread_state *ts = pthread_getspecific(thread_key);
    if (!ts) {
        ts = calloc(1, sizeof(*ts));
        if (!ts)
            return slim_errf(err, SLIM_ENOMEM, "out of host memory for CUDA thread state");
        pthread_setspecific(thread_key, ts);
    }
    int i = d->ordinal;
    slim_cuda_ctx *cu = &ts->ctx[i];
    SLIM_CUDA_CHECK(cudaSetDevice(i), err);
    if (ts->ready[i]) {
        *out = cu;
        return SLIM_OK;
    }
    slim_status st = thread_ctx_init(ts, d, cu, err);
    if (st) {
        thread_ctx_undo(ts, i);
        return st;
    }
    ts->ready[i] = true;
    *out = cu;
    return SLIM_OK;
}

/* The context reserves local memory for every thread the GPU can hold:
 * the per-thread stack limit times 2048 threads times the SMs, 264 MiB on
 * an H100 at CUDA's default of 1 KiB, before any model is loaded. slimserve's
 * kernels use no stack (ptxas: 0 bytes stack frame); a library kernel that
 * needs more makes the driver grow the reservation at its launch. So the
 * limit starts at SLIM_CUDA_STACK_BYTES (default below), once per device. */
#define SLIM_CUDA_STACK_DEFAULT 256

static pthread_mutex_t limits_mu = PTHREAD_MUTEX_INITIALIZER;

static slim_status device_limits(cuda_device *d, slim_err *err)
{
    pthread_mutex_lock(&limits_mu);
    cudaError_t e = cudaSuccess;
    if (!d->limits_set) {
        const char *env = getenv("SLIM_CUDA_STACK_BYTES");
        long v = env && *env ? strtol(env, NULL, 10) : SLIM_CUDA_STACK_DEFAULT;
        if (v >= 0) /* negative: leave CUDA's default */
            e = cudaDeviceSetLimit(cudaLimitStackSize, (size_t)v);
        d->limits_set = e == cudaSuccess;
    }
    pthread_mutex_unlock(&limits_mu);
    SLIM_CUDA_CHECK(e, err);
    return SLIM_OK;
}

static slim_status thread_ctx_init(thread_state *ts, cuda_device *d, slim_cuda_ctx *cu,
                                   slim_err *err)
{
    int i = d->ordinal;
    memset(cu, 0, sizeof(*cu));
    cu->device = i;
    cu->dev = &d->dev;
    cu->sm_count = d->sm_count;
    /* TF32 by default, as onnxruntime-gpu and cuDNN do (PyTorch's matmuls
     * do not): fp32 products at tensor-core speed, each operand keeping 10
     * of its 23 mantissa bits, sums in fp32. A model loaded "fp32-strict"
     * turns it off for its runs (op_exec); SLIM_CUDA_TF32=0 for the whole
     * process. Read per thread, so set it before the first run. */
    const char *tf32 = getenv("SLIM_CUDA_TF32");
    cu->tf32_env = !(tf32 && tf32[0] == '0');
    slim_status st = device_limits(d, err);
    if (st)
        return st;
    SLIM_CUDA_CHECK(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), err);
    SLIM_CUDA_CHECK(cudaEventCreateWithFlags(&ts->pinned_done[i], cudaEventDisableTiming), err);
    SLIM_CUBLAS_CHECK(cublasCreate(&cu->cublas), err);
    SLIM_CUBLAS_CHECK(cublasSetStream(cu->cublas, cu->stream), err);
    /* Pinned staging is an optimization: without it copies still work. */
    if (cudaHostAlloc(&ts->pinned[i], SLIM_PINNED_BYTES, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        ts->pinned[i] = NULL;
    }
    return SLIM_OK;
}

/* The workspace lives for one run, like scratch: an idle thread holds
 * none (a server has a thread per instance and model, so a workspace per
 * thread was 32 MiB each, held for good), and between runs the block is in
 * the cache for any thread, or for the device under pressure. It is always
 * the same size: cuBLAS's kernel choice reads the workspace size, so a run
 * without one could round differently; when it cannot be had the run fails
 * with SLIM_EOOM and the batcher halves, as for any allocation. */
slim_status slim_cuda_blas(slim_cuda_ctx *cu, slim_err *err)
{
    if (cu->run_workspace)
        return SLIM_OK;
    slim_buffer *b;
    pthread_once(&workspace_once, workspace_init);
    slim_status st = slim_buffer_new(cu->dev, workspace_bytes, &b, err);
    if (st)
        return st;
    cublasStatus_t s = cublasSetWorkspace(cu->cublas, b->ptr, workspace_bytes);
    if (s != CUBLAS_STATUS_SUCCESS) {
        slim_buffer_unref(b);
        return slim_errf(err, SLIM_EINTERNAL, "cublasSetWorkspace failed: %s (%s:%d)",
                         slim_cublas_status_name(s), __FILE__, __LINE__);
    }
    cu->run_workspace = b;
    cu->ws = b->ptr;
    cu->ws_bytes = workspace_bytes;
    return SLIM_OK;
}

/* Scratch is bump-allocated from chunks the run keeps: each node starts
 * again at the first chunk (op_exec), since its kernels follow the previous
 * node's on the same stream. So a run holds about the most scratch any one
 * node needs instead of the sum over nodes (grouped products and batched
 * convolutions ask for some at every node). Chunks go back to the shared
 * cache only after the stream's sync: another thread's stream could
 * otherwise get a block this one is still writing. */
#define SCRATCH_ALIGN 256
#define SCRATCH_MIN_CHUNK ((size_t)1 << 20)

slim_status slim_cuda_scratch(slim_cuda_ctx *cu, size_t bytes, void **ptr, slim_err *err)
{
    *ptr = NULL;
    if (bytes > SIZE_MAX - SCRATCH_ALIGN)
        return slim_errf(err, SLIM_EOOM, "scratch of %zu bytes is past any device", bytes);
    bytes = (bytes + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1);
    for (; cu->scratch_cur < cu->n_scratch; cu->scratch_cur++, cu->scratch_off = 0) {
        slim_buffer *c = cu->scratch[cu->scratch_cur];
        if (c->size - cu->scratch_off >= bytes) {
            *ptr = (char *)c->ptr + cu->scratch_off;
            cu->scratch_off += bytes;
            return SLIM_OK;
        }
    }
    if (cu->n_scratch == cu->cap_scratch) {
        int cap = cu->cap_scratch ? cu->cap_scratch * 2 : 16;
        slim_buffer **s = realloc(cu->scratch, sizeof(*s) * (size_t)cap);
        if (!s)
            return slim_errf(err, SLIM_ENOMEM, "out of host memory for scratch bookkeeping");
        cu->scratch = s;
        cu->cap_scratch = cap;
    }
    slim_buffer *b;
    slim_status st = slim_buffer_new(cu->dev, bytes < SCRATCH_MIN_CHUNK ? SCRATCH_MIN_CHUNK : bytes,
                                     &b, err);
    if (st)
        return st;
    cu->scratch[cu->n_scratch] = b;
    cu->scratch_cur = cu->n_scratch++;
    cu->scratch_off = bytes;
    *ptr = b->ptr;
    return SLIM_OK;
}

const char *slim_cublas_status_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

/* ---- kernels ------------------------------------------------------------ */

/* The default domain's tables, then com.slimserve's: operators the GPU
 * passes make (passes/pass.c). Any other domain has no CUDA kernel. */
static const slim_op_table tables[] = {
    SLIM_OP_TABLE("", slim__cuda_ops_elementwise), SLIM_OP_TABLE("", slim__cuda_ops_norm),
    SLIM_OP_TABLE("", slim__cuda_ops_reduce),      SLIM_OP_TABLE("", slim__cuda_ops_movement),
    SLIM_OP_TABLE("", slim__cuda_ops_pool),        SLIM_OP_TABLE("", slim__cuda_ops_matmul),
    SLIM_OP_TABLE("", slim__cuda_ops_conv),
    SLIM_OP_TABLE("com.slimserve", slim__cuda_ops_slimserve_matmul),
    SLIM_OP_TABLE("com.slimserve", slim__cuda_ops_slimserve_norm),
    SLIM_OP_TABLE("com.slimserve", slim__cuda_ops_slimserve_attention),
};

_Static_assert(SLIM_OP_KEY_LAYOUT_OK(slim_cuda_op), "slim_cuda_op must start as slim_op_key");

static const void *op_lookup(slim_device *dev, const slim_node *n, const slim_dtype *in_dtypes,
                             unsigned *host_inputs, bool *view)
{
    const slim_cuda_op *best = slim_op_tables_find(tables, sizeof(tables) / sizeof(tables[0]),
                                                   n->domain, n->op_type, n->opset);
    if (!best || (best->supports && !best->supports(n, in_dtypes)))
        return NULL;
    *host_inputs = best->host_inputs;
    *view = best->exec == NULL;
    return best;
}

static slim_status op_exec(slim_device *dev, const void *kernel, slim_op_ctx *ctx)
{
    const slim_cuda_op *op = kernel;
    slim_cuda_ctx *cu;
    slim_status st = thread_ctx((cuda_device *)dev, &cu, ctx->err);
    if (st)
        return st;
    if (!op->exec)
        return SLIM_OK;
    cu->allow_tf32 = cu->tf32_env && !ctx->fp32_strict;
    cu->scratch_cur = 0; /* this node's kernels queue after the last one's */
    cu->scratch_off = 0;
    /* The .cu launchers read row invariance where they choose a product
     * (slim_gemm_row_invariant), as the CPU's kernels do. */
    bool prev = slim_gemm_set_row_invariant(ctx->row_invariant);
    st = op->exec(ctx, cu);
    slim_gemm_set_row_invariant(prev);
    if (st)
        return st;
    /* A bad launch shows here; a fault inside a kernel shows at the sync. */
    SLIM_CUDA_LAUNCH_CHECK(ctx->err);
    return SLIM_OK;
}

/* ---- copies and synchronization ------------------------------------------ */

static slim_status dev_copy(slim_device *dev, void *dst, const void *src, size_t n,
                            slim_copy_kind kind, slim_err *err)
{
    cuda_device *d = (cuda_device *)dev;
    slim_cuda_ctx *cu;
    slim_status st = thread_ctx(d, &cu, err);
    if (st || n == 0)
        return st;
    thread_state *ts = pthread_getspecific(thread_key);
    int i = d->ordinal;
    if (kind == SLIM_COPY_D2D) {
        SLIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, cu->stream), err);
        return SLIM_OK;
    }
    if (kind == SLIM_COPY_H2D) {
        /* Through pinned staging, so the copy is truly asynchronous and the
         * caller's buffer is free at once. The staging area is a bump
         * region; when it is full, wait for the copies already queued. */
        if (ts->pinned[i] && n <= SLIM_PINNED_BYTES) {
            if (ts->pinned_used[i] + n > SLIM_PINNED_BYTES) {
                SLIM_CUDA_CHECK(cudaEventSynchronize(ts->pinned_done[i]), err);
                ts->pinned_used[i] = 0;
            }
            char *stage = (char *)ts->pinned[i] + ts->pinned_used[i];
            memcpy(stage, src, n);
            ts->pinned_used[i] += (n + 255) & ~(size_t)255;
            SLIM_CUDA_CHECK(cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, cu->stream),
                            err);
            SLIM_CUDA_CHECK(cudaEventRecord(ts->pinned_done[i], cu->stream), err);
            return SLIM_OK;
        }
        SLIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cu->stream), err);
        SLIM_CUDA_CHECK(cudaStreamSynchronize(cu->stream), err);
        return SLIM_OK;
    }
    SLIM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cu->stream), err);
    SLIM_CUDA_CHECK(cudaStreamSynchronize(cu->stream), err);
    return SLIM_OK;
}

static slim_status dev_sync(slim_device *dev, slim_err *err)
{
    cuda_device *d = (cuda_device *)dev;
    slim_cuda_ctx *cu;
    slim_status st = thread_ctx(d, &cu, err);
    if (st)
        return st;
    thread_state *ts = pthread_getspecific(thread_key);
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    ts->pinned_used[d->ordinal] = 0;
    free_scratch(cu);
    slim_buffer_unref(cu->run_workspace);
    cu->run_workspace = NULL;
    cu->ws = NULL;
    cu->ws_bytes = 0;
    SLIM_CUDA_CHECK(e, err);
    return SLIM_OK;
}

static void dev_mem_info(slim_device *dev, size_t *free_bytes, size_t *total_bytes)
{
    cuda_device *d = (cuda_device *)dev;
    *free_bytes = *total_bytes = 0;
    if (cudaSetDevice(d->ordinal) != cudaSuccess ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ---- IPC handles (the server's cuda_shared_memory) ---------------------- */

/* Another process's buffer, mapped here by its cudaIpcMemHandle_t. Peer
 * access is enabled lazily, so a buffer on another GPU than dev still maps
 * when the two can reach each other. */
static slim_status dev_ipc_open(slim_device *dev, const void *handle, size_t handle_len,
                                void **ptr, slim_err *err)
{
    cuda_device *d = (cuda_device *)dev;
    cudaIpcMemHandle_t h;
    *ptr = NULL;
    if (handle_len != sizeof(h))
        return slim_errf(err, SLIM_EINVAL, "raw_handle has %zu bytes; a CUDA IPC handle has %zu",
                         handle_len, sizeof(h));
    memcpy(&h, handle, sizeof(h));
    cudaError_t e = cudaSetDevice(d->ordinal);
    if (e == cudaSuccess)
        e = cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = NULL;
        return slim_errf(err, SLIM_EINVAL, "cannot open the CUDA IPC handle on %s: %s (%s)",
                         d->name, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return SLIM_OK;
}

static void dev_ipc_close(slim_device *dev, void *ptr)
{
    cuda_device *d = (cuda_device *)dev;
    if (cudaSetDevice(d->ordinal) != cudaSuccess || cudaIpcCloseMemHandle(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

/* The UUID as nvidia-smi writes it (read once, at open: the metrics ask
 * for it on every scrape). */
static void format_uuid(const unsigned char b[16], char *out, size_t cap)
{
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static const char *dev_uuid(slim_device *dev)
{
    const cuda_device *d = (const cuda_device *)dev;
    return d->uuid[0] ? d->uuid : NULL;
}

/* ---- the entry point ---------------------------------------------------- */

__attribute__((visibility("default")))
const slim_backend_iface *slim_cuda_backend_open(int abi, slim_err *err)
{
    if (abi != SLIM_BACKEND_ABI) {
        slim_errf(err, SLIM_EINVAL, "libslim_cuda.so was built for backend ABI %d, the "
                  "runtime speaks %d: rebuild both", SLIM_BACKEND_ABI, abi);
        return NULL;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        slim_errf(err, SLIM_ENOTFOUND, "no CUDA device: %s (%s)", cudaGetErrorString(e),
                  cudaGetErrorName(e));
        return NULL;
    }
    if (n == 0) {
        slim_errf(err, SLIM_ENOTFOUND, "no CUDA device: the driver reports none");
        return NULL;
    }
    if (n > SLIM_CUDA_MAX_DEVICES)
        n = SLIM_CUDA_MAX_DEVICES;
    if (pthread_key_create(&thread_key, thread_state_free) != 0) {
        slim_errf(err, SLIM_ENOMEM, "cannot create the CUDA thread key");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        cuda_device *d = &devices[i];
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            slim_errf(err, SLIM_EINTERNAL, "cudaGetDeviceProperties(%d) failed", i);
            return NULL;
        }
        d->ordinal = i;
        d->sm_count = prop.multiProcessorCount;
        snprintf(d->name, sizeof(d->name), "cuda:%d", i);
        d->dev.name = d->name;
        d->dev.backend = &iface;
        d->dev.ordinal = i;
        snprintf(d->dev.description, sizeof(d->dev.description), "%s, sm_%d%d, %d SMs",
                 prop.name, prop.major, prop.minor, prop.multiProcessorCount);
        format_uuid((const unsigned char *)prop.uuid.bytes, d->uuid, sizeof(d->uuid));
        const slim_alloc_backend src = {
            .device = d->name, .segment_alloc = segment_alloc, .segment_free = segment_free,
            .ctx = d,
        };
        d->dev.alloc = slim_allocator_new(&src);
        if (!d->dev.alloc) {
            slim_errf(err, SLIM_ENOMEM, "out of host memory creating the %s allocator", d->name);
            return NULL;
        }
        device_ptrs[i] = &d->dev;
    }
    const slim_alloc_backend pinned_src = {
        .device = "cpu", .segment_alloc = pinned_segment_alloc,
        .segment_free = pinned_segment_free, .ctx = NULL,
    };
    /* Host memory: the CPU's backend (copies are memcpy) serves it. */
    pinned_dev = (slim_device){.name = "cuda-pinned", .ordinal = -1,
                               .backend = slim_device_cpu()->backend};
    snprintf(pinned_dev.description, sizeof(pinned_dev.description),
             "page-locked host memory for copies from the GPUs");
    const char *pin = getenv("SLIM_CUDA_PINNED_OUT");
    pinned_dev.alloc = pin && pin[0] == '0' ? NULL : slim_allocator_new(&pinned_src);
    iface = (slim_backend_iface){
        .abi = SLIM_BACKEND_ABI, .name = "cuda", .n_devices = n, .devices = device_ptrs,
        .lookup = op_lookup, .exec = op_exec, .copy = dev_copy, .sync = dev_sync,
        .mem_info = dev_mem_info, .pinned_host = pinned_dev.alloc ? &pinned_dev : NULL,
        .ipc_open = dev_ipc_open, .ipc_close = dev_ipc_close, .uuid = dev_uuid,
    };
    return &iface;
}
