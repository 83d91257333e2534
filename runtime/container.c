/* container.c - sequence and optional values (container.h). */
#include "container.h"
#include "device.h"

#include <stdlib.h>
#include <string.h>

const char *slim_kind_name(slim_kind k)
{
    switch (k) {
    case SLIM_KIND_TENSOR: return "tensor";
    case SLIM_KIND_SEQUENCE: return "sequence";
    case SLIM_KIND_OPTIONAL: return "optional";
    }
    return "unknown";
}

/* The buffer's release callback: the last reference to the container drops
 * its elements, then gives the header's block back to the allocator. */
static void container_release(slim_buffer *b)
{
    slim_container *c = b->ptr;
    for (int i = 0; i < c->n; i++)
        slim_tensor_release(&c->elems[i]);
    if (b->block)
        slim_allocator_free(b->dev->alloc, b->block);
    free(b);
}

slim_status slim_container_new(slim_kind kind, slim_dtype dtype, int cap, slim_tensor *out,
                               slim_err *err)
{
    memset(out, 0, sizeof(*out));
    if (kind != SLIM_KIND_SEQUENCE && kind != SLIM_KIND_OPTIONAL)
        return slim_errf(err, SLIM_EINTERNAL, "a container is a sequence or an optional");
    if (kind == SLIM_KIND_OPTIONAL)
        cap = 1;
    if (cap < 0 || cap > SLIM_CONTAINER_MAX)
        return slim_errf(err, SLIM_EINVAL, "a sequence of %d tensors: at most %d supported", cap,
                         SLIM_CONTAINER_MAX);
    slim_buffer *b;
    size_t bytes = sizeof(slim_container) + sizeof(slim_tensor) * (size_t)cap;
    slim_status st = slim_buffer_new(slim_device_cpu(), bytes, &b, err);
    if (st)
        return st;
    slim_container *c = b->ptr;
    memset(c, 0, bytes);
    c->self = b;
    c->kind = kind;
    c->dtype = dtype;
    c->cap = cap;
    b->release = container_release;
    out->kind = kind;
    out->dtype = dtype;
    out->ndim = 0;
    out->data = c;
    out->buf = b;
    return SLIM_OK;
}

const slim_container *slim_container_get(const slim_tensor *t)
{
    return slim_is_container(t) ? t->data : NULL;
}

/* The container being built in t, checked for room and elem's kind. */
static slim_status check_add(slim_tensor *t, const slim_tensor *elem, slim_container **out,
                             slim_err *err)
{
    slim_container *c = slim_is_container(t) ? t->data : NULL;
    *out = c;
    if (!c)
        return slim_errf(err, SLIM_EINTERNAL, "adding to a value that is no container");
    if (c->n == c->cap)
        return slim_errf(err, SLIM_EINTERNAL, "the %s is full (%d elements)",
                         slim_kind_name(c->kind), c->cap);
    if (elem->kind == SLIM_KIND_OPTIONAL ||
        (elem->kind == SLIM_KIND_SEQUENCE && c->kind != SLIM_KIND_OPTIONAL))
        return slim_errf(err, SLIM_ETYPE, "a %s cannot hold a%s %s", slim_kind_name(c->kind),
                         elem->kind == SLIM_KIND_OPTIONAL ? "n" : "", slim_kind_name(elem->kind));
    if (elem->kind == SLIM_KIND_SEQUENCE) {
        if (!elem->data)
            return slim_errf(err, SLIM_EINVAL, "the sequence has no data");
        return SLIM_OK;
    }
    if (elem->ndim < 0 || elem->ndim > SLIM_MAX_DIMS || elem->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "the tensor has no type or shape");
    if (elem->device)
        return slim_errf(err, SLIM_EUNSUPPORTED, "a %s holds host tensors, this one is on %s",
                         slim_kind_name(c->kind), ((const slim_device *)elem->device)->name);
    if (slim_tensor_numel(elem) > 0 && !elem->data)
        return slim_errf(err, SLIM_EINVAL, "the tensor has no data");
    if (c->kind == SLIM_KIND_SEQUENCE && c->dtype != SLIM_DTYPE_UNDEFINED &&
        elem->dtype != c->dtype)
        return slim_errf(err, SLIM_ETYPE, "a sequence of %s cannot hold a %s tensor",
                         slim_dtype_name(c->dtype), slim_dtype_name(elem->dtype));
    return SLIM_OK;
}

/* Stores the element and takes its dtype for a sequence that had none. */
static void store(slim_tensor *t, slim_container *c, const slim_tensor *elem)
{
    c->elems[c->n++] = *elem;
    if (c->dtype == SLIM_DTYPE_UNDEFINED && elem->dtype != SLIM_DTYPE_UNDEFINED) {
        c->dtype = elem->dtype;
        t->dtype = elem->dtype;
    }
}

void slim_container_ref(const slim_tensor *src, slim_tensor *dst)
{
    const slim_container *c = src->data;
    *dst = *src;
    dst->buf = c->self;
    slim_buffer_ref(c->self);
}

void slim_value_share(const slim_tensor *src, slim_tensor *dst)
{
    if (slim_is_container(src)) {
        slim_container_ref(src, dst);
        return;
    }
    *dst = *src;
    slim_buffer_ref(dst->buf);
}

slim_status slim_container_add_copy(slim_tensor *t, const slim_tensor *elem, slim_err *err)
{
    slim_container *c;
    slim_status st = check_add(t, elem, &c, err);
    if (st)
        return st;
    slim_tensor e;
    if (slim_is_container(elem)) {
        slim_container_ref(elem, &e);
    } else {
        memset(&e, 0, sizeof(e));
        e.dtype = elem->dtype;
        e.ndim = elem->ndim;
        memcpy(e.dims, elem->dims, sizeof(int64_t) * (size_t)elem->ndim);
        if ((st = slim_tensor_alloc(&e, err)))
            return st;
        if (slim_tensor_nbytes(&e))
            memcpy(e.data, elem->data, slim_tensor_nbytes(&e));
    }
    store(t, c, &e);
    return SLIM_OK;
}

slim_status slim_container_add_shared(slim_tensor *t, const slim_tensor *elem, slim_err *err)
{
    slim_container *c;
    slim_status st = check_add(t, elem, &c, err);
    if (st)
        return st;
    slim_tensor e;
    slim_value_share(elem, &e);
    store(t, c, &e);
    return SLIM_OK;
}

slim_status slim_container_take(slim_tensor *t, slim_tensor *elem, slim_err *err)
{
    slim_container *c;
    slim_status st = check_add(t, elem, &c, err);
    if (!st && !slim_is_container(elem) && !elem->buf && slim_tensor_nbytes(elem))
        st = slim_errf(err, SLIM_EINTERNAL, "a tensor moved into a %s must own its buffer",
                       slim_kind_name(c->kind));
    if (st) {
        slim_tensor_release(elem);
        return st;
    }
    store(t, c, elem);
    memset(elem, 0, sizeof(*elem));
    return SLIM_OK;
}
