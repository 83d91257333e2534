/*
 * cpu_backend.c - the CPU behind the same table as every other device.
 *
 * Its kernels are the operator defs themselves (runtime/op.h): a node on
 * the CPU runs def->exec. What the executor once set for the whole run on
 * the calling thread, row invariance, comes in the op context and is
 * applied here around each kernel, through the thread-local that
 * slim_sgemm_rows reads (kernels/common.c): kernels deep inside a product
 * need not pass it down. Memory is the host's caching allocator
 * (slim_device_cpu, runtime/device.c); copies are memcpy and nothing is
 * asynchronous, so sync has nothing to wait for.
 */
#include "cpu_backend.h"

#include "kernel.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* A CPU node's kernel is its def, whatever the input dtypes: every op the
 * registry knows runs here. All inputs are read on the host. */
static const void *cpu_lookup(slim_device *dev, const slim_node *n, const slim_dtype *in_dtypes,
                              unsigned *host_inputs, bool *view)
{
    (void)dev;
    (void)in_dtypes;
    const slim_op_def *def = n->op ? n->op : slim_op_lookup(n->domain, n->op_type, n->opset);
    if (!def)
        return NULL;
    *host_inputs = ~0u;
    *view = (def->flags & SLIM_OP_ALIAS0) != 0;
    return def;
}

static slim_status cpu_exec(slim_device *dev, const void *kernel, slim_op_ctx *ctx)
{
    (void)dev;
    const slim_op_def *def = kernel;
    if (!def->exec)
        return slim_errf(ctx->err, SLIM_EINTERNAL, "operator has no CPU kernel");
    bool prev = slim_gemm_set_row_invariant(ctx->row_invariant);
    slim_status st = def->exec(ctx);
    slim_gemm_set_row_invariant(prev);
    return st;
}

static slim_status cpu_copy(slim_device *dev, void *dst, const void *src, size_t n,
                            slim_copy_kind kind, slim_err *err)
{
    (void)dev;
    (void)kind;
    (void)err;
    if (n)
        memcpy(dst, src, n);
    return SLIM_OK;
}

static slim_status cpu_sync(slim_device *dev, slim_err *err)
{
    (void)dev;
    (void)err;
    return SLIM_OK;
}

/* The host's physical memory and how much of it is free now. */
static void cpu_mem_info(slim_device *dev, size_t *free_bytes, size_t *total_bytes)
{
    (void)dev;
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES),
         total = sysconf(_SC_PHYS_PAGES);
    *free_bytes = page > 0 && avail > 0 ? (size_t)avail * (size_t)page : 0;
    *total_bytes = page > 0 && total > 0 ? (size_t)total * (size_t)page : 0;
}

static slim_device *cpu_devices[1];
static slim_backend_iface cpu_iface;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_backend_init(void)
{
    cpu_devices[0] = slim_device_cpu();
    cpu_iface = (slim_backend_iface){
        .abi = SLIM_BACKEND_ABI, .name = "cpu", .n_devices = 1, .devices = cpu_devices,
        .lookup = cpu_lookup, .exec = cpu_exec, .copy = cpu_copy, .sync = cpu_sync,
        .mem_info = cpu_mem_info, .pinned_host = NULL,
    };
}

const slim_backend_iface *slim_cpu_backend(void)
{
    pthread_once(&cpu_once, cpu_backend_init);
    return &cpu_iface;
}
