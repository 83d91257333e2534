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
#include "slim.h"

#include <stdatomic.h>

struct slim_node;
struct slim_op_ctx;
struct slim_device;

/* What a device backend (the CUDA one: kernels/cuda/backend.c, in its own
 * shared library) gives the runtime. Every function works on the calling
 * thread's stream: each thread that runs models has its own, so server
 * instances overlap on one GPU. */
typedef enum { SLIM_COPY_H2D, SLIM_COPY_D2H, SLIM_COPY_D2D } slim_copy_kind;

typedef struct slim_backend_iface {
    int abi;                    /* SLIM_BACKEND_ABI of the runtime it was built with */
    const char *name;           /* "cuda" */
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
     * NULL: a host-kind device (no backend) whose caching allocator the
     * outputs of its D2H copies come from (executor.c). */
    struct slim_device *pinned_host;
} slim_backend_iface;

/* 2: slim_tensor gained kind (sequences and optionals, container.h)
 * 3: pinned_host */
#define SLIM_BACKEND_ABI 3

typedef struct slim_device {
    const char *name;           /* "cpu", "cuda:0" */
    slim_allocator *alloc;      /* the one caching allocator of this device */
    const slim_backend_iface *backend; /* NULL for the CPU */
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
} slim_buffer;

slim_device *slim_device_cpu(void);
/* The loaded GPU backend's pinned host device (pinned_host above), or NULL
 * when none is loaded: for who lists or trims every allocator. */
slim_device *slim_device_pinned_host(void);
/* "emul:0": the host placed as a device, for tests (device_emul.c). */
slim_device *slim_device_emul(void);

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

/* "cpu", "cuda" (= "cuda:0") or "cuda:N". The first GPU request loads the
 * backend library (libslim_cuda.so beside the executable, or the path in
 * SLIM_CUDA_BACKEND); a build or machine without it gets SLIM_ENOTFOUND
 * and a message that says why (no library, no driver, no device). */
slim_status slim_device_get(const char *name, slim_device **out, slim_err *err);
/* Every device there is: the CPU first, then GPUs if the backend loads.
 * Returns how many (at most cap stored); *why_none (may be NULL) says why
 * there are no GPUs, NULL when there are some. With load false, GPUs are
 * listed only if something already started the backend (a model placed on
 * a GPU): a CPU-only server's /metrics never starts CUDA. */
int slim_device_list(slim_device **out, int cap, bool load, const char **why_none);
static inline bool slim_device_is_host(const slim_device *d)
{
    return !d || !d->backend;
}
/* The kind of device d is, as the load pipeline's pass registry matches
 * it: "cpu" (NULL too), or its backend's name ("cuda"). */
static inline const char *slim_device_kind(const slim_device *d)
{
    return d && d->backend ? d->backend->name : "cpu";
}

/* A new buffer with one reference, from dev's allocator, charged to the
 * calling thread's current account. size 0 gives a buffer with ptr NULL.
 * Fails with SLIM_EOOM (message from the allocator) or SLIM_ENOMEM. */
slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err);
void slim_buffer_ref(slim_buffer *b);
/* slim_tensor_alloc on a device (NULL or the CPU: host memory); sets
 * t->device. */
slim_status slim_tensor_alloc_on(slim_tensor *t, slim_device *dev, slim_err *err);
void slim_buffer_unref(slim_buffer *b);

#endif
