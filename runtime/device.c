/* device.c - the CPU device and refcounted buffers. */
#include "device.h"

#include <stdlib.h>

#define SLIM_CPU_ALIGN 64

static void *cpu_alloc(slim_device *dev, size_t size, slim_status *status)
{
    /* aligned_alloc wants a multiple of the alignment. */
    size_t rounded = (size + SLIM_CPU_ALIGN - 1) & ~(size_t)(SLIM_CPU_ALIGN - 1);
    void *p = aligned_alloc(SLIM_CPU_ALIGN, rounded ? rounded : SLIM_CPU_ALIGN);
    if (!p) {
        *status = SLIM_ENOMEM;
        return NULL;
    }
    size_t now = atomic_fetch_add(&dev->bytes_in_use, size) + size;
    size_t peak = atomic_load(&dev->peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&dev->peak_bytes, &peak, now))
        ;
    return p;
}

static void cpu_free(slim_device *dev, void *ptr, size_t size)
{
    free(ptr);
    atomic_fetch_sub(&dev->bytes_in_use, size);
}

static const slim_device_iface cpu_iface = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
};

static slim_device cpu_device = {.iface = &cpu_iface};

slim_device *slim_device_cpu(void)
{
    return &cpu_device;
}

slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err)
{
    slim_buffer *b = malloc(sizeof(*b));
    if (!b)
        return slim_errf(err, SLIM_ENOMEM, "cannot allocate a buffer header");
    b->dev = dev;
    b->size = size;
    b->ptr = NULL;
    atomic_init(&b->refs, 1);
    if (size > 0) {
        slim_status st = SLIM_OK;
        b->ptr = dev->iface->alloc(dev, size, &st);
        if (!b->ptr) {
            free(b);
            return slim_errf(err, st ? st : SLIM_ENOMEM,
                             "cannot allocate %zu bytes on %s", size, dev->iface->name);
        }
    }
    *out = b;
    return SLIM_OK;
}

void slim_buffer_ref(slim_buffer *b)
{
    if (b)
        atomic_fetch_add(&b->refs, 1);
}

void slim_buffer_unref(slim_buffer *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    if (b->ptr)
        b->dev->iface->free(b->dev, b->ptr, b->size);
    free(b);
}
