/* tensor.c - tensor shapes and host allocation. */
#include "device.h"
#include "string_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t slim_shape_numel(int ndim, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    return n;
}

int64_t slim_tensor_numel(const slim_tensor *t)
{
    return slim_shape_numel(t->ndim, t->dims);
}

size_t slim_tensor_nbytes(const slim_tensor *t)
{
    return (size_t)slim_tensor_numel(t) * slim_dtype_size(t->dtype);
}

char *slim_shape_str(int ndim, const int64_t *dims, char *buf, size_t cap)
{
    size_t used = 0;
    used += snprintf(buf + used, cap - used, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

slim_status slim_tensor_alloc(slim_tensor *t, slim_err *err)
{
    return slim_tensor_alloc_on(t, NULL, err);
}

slim_status slim_tensor_alloc_on(slim_tensor *t, slim_device *dev, slim_err *err)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] < 0)
            return slim_errf(err, SLIM_ESHAPE, "cannot allocate a tensor with dimension %d = %lld",
                             i, (long long)t->dims[i]);
    if (t->dtype == SLIM_STRING) {
        /* Strings live in host memory: no kernel on a device reads them. */
        if (slim_device_tag(slim_device_or_cpu(dev)))
            return slim_errf(err, SLIM_EUNSUPPORTED, "string tensors live in host memory, "
                             "not on %s", dev->name);
        return slim__tensor_string_alloc(t, err);
    }
    size_t n = slim_tensor_nbytes(t);
    slim_buffer *b;
    slim_status st = slim_buffer_new(slim_device_or_cpu(dev), n, &b, err);
    if (st)
        return st;
    t->buf = b;
    t->data = b->ptr;
    t->device = slim_device_tag(b->dev);
    return SLIM_OK;
}

void slim_tensor_release(slim_tensor *t)
{
    if (!t)
        return;
    slim_buffer_unref(t->buf);
    t->buf = NULL;
    t->data = NULL;
    t->device = NULL;
}

void slim_tensors_free(slim_tensor *ts, int n)
{
    if (!ts)
        return;
    for (int i = 0; i < n; i++)
        slim_tensor_release(&ts[i]);
    free(ts);
}
