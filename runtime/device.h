/*
 * device.h - devices behind a table of functions, and refcounted buffers.
 *
 * Every tensor byte the runtime allocates goes through a device's alloc, so
 * one place sees it all (the caching allocator of the memory issue plugs in
 * here; the CUDA backend adds a second device with the same table). The CPU
 * device always exists.
 *
 * A slim_buffer is shared by the tensors that view it (Reshape output and
 * its input, say) and is returned to its device when the last reference is
 * dropped with slim_buffer_unref.
 */
#ifndef SLIM_DEVICE_H
#define SLIM_DEVICE_H

#include "slim.h"

#include <stdatomic.h>

typedef struct slim_device slim_device;

typedef struct slim_device_iface {
    const char *name;
    /* Returns memory of at least size bytes, or NULL with *status set
     * (SLIM_EOOM under a limit, SLIM_ENOMEM when the system refuses). */
    void *(*alloc)(slim_device *dev, size_t size, slim_status *status);
    void (*free)(slim_device *dev, void *ptr, size_t size);
} slim_device_iface;

struct slim_device {
    const slim_device_iface *iface;
    void *impl;
    atomic_size_t bytes_in_use;
    atomic_size_t peak_bytes;
};

typedef struct slim_buffer {
    slim_device *dev;
    void *ptr;
    size_t size;
    atomic_int refs;
} slim_buffer;

slim_device *slim_device_cpu(void);

/* A new buffer with one reference. size 0 gives a buffer with ptr NULL. */
slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err);
void slim_buffer_ref(slim_buffer *b);
void slim_buffer_unref(slim_buffer *b);

#endif
