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

typedef struct slim_device {
    const char *name;           /* "cpu" */
    slim_allocator *alloc;      /* the one caching allocator of this device */
} slim_device;

typedef struct slim_buffer {
    slim_device *dev;
    void *ptr;
    size_t size;                /* bytes asked for */
    slim_block *block;          /* NULL when size is 0 */
    atomic_int refs;
} slim_buffer;

slim_device *slim_device_cpu(void);

/* A new buffer with one reference, from dev's allocator, charged to the
 * calling thread's current account. size 0 gives a buffer with ptr NULL.
 * Fails with SLIM_EOOM (message from the allocator) or SLIM_ENOMEM. */
slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err);
void slim_buffer_ref(slim_buffer *b);
void slim_buffer_unref(slim_buffer *b);

#endif
