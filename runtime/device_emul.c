/*
 * device_emul.c - "emul:0", a device that is the host in disguise, for
 * testing placement without a GPU.
 *
 * Placing a model on a GPU rebuilds its graph (partition.c): copies at
 * every crossing, weights uploaded, graph outputs renamed, control flow and
 * containers kept on the host, the passes run as for a device. None of that
 * runs on a machine without a GPU, which is where CI runs, and a bug there
 * once failed 44 ONNX node tests on the first GPU that tried them.
 *
 * emul:0 takes that whole path with host memory: its allocator hands out
 * host pages, copies are memcpy, and it claims every node the partition
 * pass would consider for a device (a tensor operator computing on
 * floating-point data, not control flow, containers or shape readers),
 * running the node's own CPU kernel. So `slim conformance DIR --device
 * emul:0` checks placement, copies, device-side allocation and the device
 * passes against every node test, on any machine. It is slow and proves
 * nothing about GPU kernels (tests/cuda does that, on a GPU).
 */
#include "device.h"
#include "op.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *emul_segment_alloc(void *ctx, size_t size)
{
    (void)ctx;
    return malloc(size);
}

static void emul_segment_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size;
    free(ptr);
}

/* The CPU kernel of node n, when a GPU backend could have one. */
static const void *emul_lookup(slim_device *dev, const slim_node *n, const slim_dtype *in_dtypes,
                               unsigned *host_inputs, bool *view)
{
    (void)dev;
    (void)in_dtypes;
    const slim_op_def *op = n->op;
    if (!op || !op->exec || (op->flags & (SLIM_OP_OWN_OUTPUTS | SLIM_OP_CONTAINERS)))
        return NULL;
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == SLIM_ATTR_GRAPH)
            return NULL;
    *host_inputs = 0;
    *view = false;
    return op;
}

/* The CPU backend runs it, so the run's modes apply as on the CPU. */
static slim_status emul_exec(slim_device *dev, const void *kernel, slim_op_ctx *ctx)
{
    (void)dev;
    slim_device *cpu = slim_device_cpu();
    return cpu->backend->exec(cpu, kernel, ctx);
}

static slim_status emul_copy(slim_device *dev, void *dst, const void *src, size_t n,
                             slim_copy_kind kind, slim_err *err)
{
    (void)dev;
    (void)kind;
    (void)err;
    if (n)
        memmove(dst, src, n);
    return SLIM_OK;
}

static slim_status emul_sync(slim_device *dev, slim_err *err)
{
    (void)dev;
    (void)err;
    return SLIM_OK;
}

static void emul_mem_info(slim_device *dev, size_t *free_bytes, size_t *total_bytes)
{
    (void)dev;
    *free_bytes = *total_bytes = 0;
}

static slim_device emul_device = {.name = "emul:0", .ordinal = 0,
                                  .description = "the host, placed as a device (for tests)"};
static slim_device *emul_devices[1] = {&emul_device};
static const slim_backend_iface emul_backend = {
    .abi = SLIM_BACKEND_ABI, .name = "emul", .n_devices = 1, .devices = emul_devices,
    .lookup = emul_lookup, .exec = emul_exec, .copy = emul_copy, .sync = emul_sync,
    .mem_info = emul_mem_info,
};
static pthread_once_t emul_once = PTHREAD_ONCE_INIT;

static void emul_init(void)
{
    const slim_alloc_backend src = {
        .device = "emul:0",
        .segment_alloc = emul_segment_alloc,
        .segment_free = emul_segment_free,
    };
    emul_device.alloc = slim_allocator_new(&src);
    emul_device.backend = &emul_backend;
}

slim_device *slim_device_emul(void)
{
    pthread_once(&emul_once, emul_init);
    return &emul_device;
}

/* Started on the first request for emul:0, not at slim_init: a process
 * that never asks for it holds no allocator for it. */
const slim_backend_iface *slim_emul_backend_open(int abi, slim_err *err)
{
    (void)abi;
    (void)err;
    return slim_device_emul()->backend;
}
