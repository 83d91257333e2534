/*
 * device.h - devices and refcounted buffers.
 *
 * Every tensor byte the runtime allocates goes through a device's caching
 * allocator (alloc.h), so one place sees it all. The CPU device always
 * exists; the CUDA backend adds a device of its own with a cudaMalloc
 * segment source behind the same allocator.
 *
 * A slim_buffer is shared by the tensors that view it (Reshape output and
 * its input, an activation and the run's arena) and its block goes back to
 * the device's allocator when the last reference is dropped with
 * slim_buffer_unref.
 */
#ifndef SLIM_DEVICE_H
#define SLIM_DEVICE_H

#include "alloc.h"
#include "graph.h"
#include "slim.h"

#include <stdatomic.h>

struct slim_node;
struct slim_op_ctx;
struct slim_device;

/* What a device backend gives the runtime: the CPU's (kernels/cpu/backend.c,
 * built in), CUDA's (kernels/cuda/backend.c, in its own shared library),
 * emul's (device_emul.c, for tests). Every device, the CPU included, has
 * one, and the executor runs every node through its device's table. On a
 * GPU every function works on the calling thread's stream: each thread
 * that runs models has its own, so server instances overlap on one GPU. */
typedef enum { SLIM_COPY_H2D, SLIM_COPY_D2H, SLIM_COPY_D2D } slim_copy_kind;

typedef struct slim_backend_iface {
    int abi;                    /* SLIM_BACKEND_ABI of the runtime it was built with */
    const char *name;           /* "cpu", "cuda": the kind (slim_device_kind) */
    int n_devices;
    struct slim_device **devices;
    /* This device's kernel for the node with these input dtypes (UNDEFINED
     * for absent inputs), or NULL; *host_inputs gets the inputs it reads on
     * the host, *view whether it is a view (no kernel runs). */
    const void *(*lookup)(struct slim_device *dev, const struct slim_node *n,
                          const slim_dtype *in_dtypes, unsigned *host_inputs, bool *view);
    slim_status (*exec)(struct slim_device *dev, const void *kernel, struct slim_op_ctx *ctx);
    /* Queues a copy on the thread's stream. A D2H copy has landed when it
     * returns; an H2D copy's source may be reused at once. */
    slim_status (*copy)(struct slim_device *dev, void *dst, const void *src, size_t n,
                        slim_copy_kind kind, slim_err *err);
    /* Waits for the thread's stream, then frees the run's scratch. */
    slim_status (*sync)(struct slim_device *dev, slim_err *err);
    /* The device's own view of its memory (cudaMemGetInfo). */
    void (*mem_info)(struct slim_device *dev, size_t *free_bytes, size_t *total_bytes);
    /* Host memory the device copies to at full speed (page-locked), or
     * NULL: a host-kind device (the CPU backend's) whose caching allocator
     * the outputs of its D2H copies come from (executor.c). */
    struct slim_device *pinned_host;
    /* Optional (NULL: not offered): maps another process's device buffer
     * from its IPC handle (a cudaIpcMemHandle_t, handle_len bytes) into
     * this process; *ptr gets its device address. ipc_close unmaps it. The
     * server's cuda_shared_memory regions (server/shm.c) come from here. */
    slim_status (*ipc_open)(struct slim_device *dev, const void *handle, size_t handle_len,
                            void **ptr, slim_err *err);
    void (*ipc_close)(struct slim_device *dev, void *ptr);
    /* Optional (NULL: not offered): the device's UUID as its vendor's tools
     * write it ("GPU-5f2e6c1a-...", as nvidia-smi -L and Triton's gpu_uuid
     * metric label), owned by the backend; NULL when it is not known. */
    const char *(*uuid)(struct slim_device *dev);
} slim_backend_iface;

/* 2: slim_tensor gained kind (sequences and optionals, container.h)
 * 3: pinned_host
 * 4: the CPU has a backend too; slim_op_ctx carries row_invariant and
 *    fp32_strict (runtime/op.h)
 * 5: ipc_open, ipc_close (CUDA shared memory)
 * 6: uuid */
#define SLIM_BACKEND_ABI 6

typedef struct slim_device {
    const char *name;           /* "cpu", "cuda:0" */
    slim_allocator *alloc;      /* the one caching allocator of this device */
    const slim_backend_iface *backend; /* set once slim_init registered it */
    int ordinal;
    char description[320];      /* "NVIDIA H100 80GB HBM3, sm_90, 132 SMs" */
} slim_device;

typedef struct slim_buffer {
    slim_device *dev;
    void *ptr;
    size_t size;                /* bytes asked for */
    slim_block *block;          /* NULL when size is 0 */
    atomic_int refs;
    /* Memory the allocator did not give (a mapped model file): called at
     * the last unref instead of freeing a block; it frees b too. */
    void (*release)(struct slim_buffer *b);
    bool huge;                  /* slim_buffer_advise_whole asked for huge pages */
} slim_buffer;

slim_device *slim_device_cpu(void);
/* The loaded GPU backend's pinned host device (pinned_host above), or NULL
 * when none is loaded: for who lists or trims every allocator. */
slim_device *slim_device_pinned_host(void);
/* "emul:0": the host placed as a device, for tests (device_emul.c). */
slim_device *slim_device_emul(void);
/* Its backend, made on first use: a slim_backend_open_fn for the list of
 * backends (pipeline/devices.c). */
const struct slim_backend_iface *slim_emul_backend_open(int abi, slim_err *err);

/* Mapped model files whose descriptors stay open (slim_reader.c registers
 * each .slim mapping). A kernel that reads a few rows of a large weight
 * (Gather on an embedding) preads them rather than touching the mapping: on
 * recent kernels a fault maps the whole page-cache folio around it, so 128
 * token rows of 3 KiB put 77 MiB of a BERT vocabulary into the process
 * (measured on Linux 6.18, ext4, warm cache). lookup: whether [p, p+n) lies
 * in a registered mapping; if so its descriptor and the file offset of p. */
void slim_file_map_register(const void *base, size_t size, int fd);
void slim_file_map_unregister(const void *base);
bool slim_file_map_lookup(const void *p, size_t n, int *fd, int64_t *offset);

/* ---- the device registry (backend.c) ------------------------------------
 *
 * Backends are registered by name at start-up (slim_init, pipeline/
 * devices.c, which holds the list); a device is found as "name" (= name:0)
 * or "name:N". A backend is either built in (iface) or a shared library
 * opened on the first request for one of its devices, so one build runs
 * on machines with and without a GPU (or a driver, or the toolkit's
 * libraries) and says which of those is missing instead of failing to
 * start. The library resolves the runtime's symbols (allocator, errors,
 * graph helpers) from the executable, which exports them. */
typedef const slim_backend_iface *(*slim_backend_open_fn)(int abi, slim_err *err);

typedef struct slim_backend_reg {
    const char *name;           /* "cpu", "cuda" */
    const char *title;          /* "CUDA": for messages */
    /* Built in: the backend itself, or a function that starts it on the
     * first request for one of its devices. */
    const slim_backend_iface *iface;
    slim_backend_open_fn open;
    /* Or a library: looked for beside the executable, in ../lib and
     * ../lib/slimserve from it, then on the library path; library_env
     * names a variable whose value (a path) overrides the search. */
    const char *library;        /* "libslim_cuda.so" */
    const char *library_env;    /* "SLIM_CUDA_BACKEND" */
    const char *open_symbol;    /* a slim_backend_open_fn */
    const char *missing_hint;   /* said when the library is nowhere, or NULL */
    bool unlisted;              /* found by name only, never listed (emul) */
} slim_backend_reg;

/* Registers a backend (the struct is copied; its strings must stay). A
 * built-in backend's devices get their backend pointer set here. Not
 * thread-safe against lookups: call it from slim_init. SLIM_EINVAL for a
 * name registered twice or a full registry. */
slim_status slim_backend_register(const slim_backend_reg *reg, slim_err *err);

/* "cpu", "cuda" (= "cuda:0") or "cuda:N": any registered name. The first
 * request for a library backend's device loads it; a build or machine
 * without it gets SLIM_ENOTFOUND and a message that says why (no library,
 * no driver, no device). */
slim_status slim_device_get(const char *name, slim_device **out, slim_err *err);
/* Every listed device: the CPU first, then the other backends' devices
 * if they start. Returns how many (at most cap stored); *why_none (may be
 * NULL) says why a backend has no devices, NULL when it has some. With
 * load false, a backend started on demand is listed only if something
 * already started it (a model placed on a GPU): a CPU-only server's
 * /metrics never starts CUDA. */
int slim_device_list(slim_device **out, int cap, bool load, const char **why_none);

/* The device's kind, its backend's name: "cpu", "cuda", "emul". NULL is
 * the CPU (a node's or tensor's device NULL is shorthand for it). */
static inline const char *slim_device_kind(const slim_device *d)
{
    return d && d->backend ? d->backend->name : "cpu";
}
/* The one place the NULL shorthand is resolved: d, or the CPU for NULL. */
static inline slim_device *slim_device_or_cpu(slim_device *d)
{
    return d ? d : slim_device_cpu();
}
/* The inverse, for what a tensor records as its device: NULL for the
 * CPU's memory, which every kernel reads; the device otherwise. */
static inline slim_device *slim_device_tag(slim_device *d)
{
    return d == slim_device_cpu() ? NULL : d;
}
/* The device node n runs on and its kernel there (an entry of that
 * backend's lookup; for the CPU the node's own def). */
static inline slim_device *slim_node_device(const slim_node *n)
{
    return slim_device_or_cpu(n->device);
}
static inline const void *slim_node_kernel(const slim_node *n)
{
    return n->device ? n->dev_kernel : (const void *)n->op;
}

/* A new buffer with one reference, from dev's allocator, charged to the
 * calling thread's current account. size 0 gives a buffer with ptr NULL.
 * Fails with SLIM_EOOM (message from the allocator) or SLIM_ENOMEM. */
slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err);
void slim_buffer_ref(slim_buffer *b);
/* For a host buffer its owner writes whole, at once, and keeps (packed
 * weights, read whole on every run): asks the kernel for transparent huge
 * pages on the 2 MiB pages lying wholly inside it. Call it before the
 * first write: what those pages held is dropped (a block reused from the
 * cache keeps its small pages otherwise). They would all be resident on
 * small pages too, so the resident size does not grow; the TLB and the
 * prefetchers gain. Does nothing for another
 * device's buffer, with SLIM_THP=0, or where the host gives no huge pages;
 * runtime/device.c says more. Undone when the buffer is freed. */
void slim_buffer_advise_whole(slim_buffer *b);
/* slim_tensor_alloc on a device (NULL or the CPU: host memory); sets
 * t->device (NULL for the CPU's memory, which every kernel reads). */
slim_status slim_tensor_alloc_on(slim_tensor *t, slim_device *dev, slim_err *err);
void slim_buffer_unref(slim_buffer *b);

#endif
