/*
 * container.h - sequence and optional values.
 *
 *     slim_tensor seq;
 *     slim_container_new(SLIM_KIND_SEQUENCE, SLIM_F32, 2, &seq, &err);
 *     slim_container_add_copy(&seq, &a, &err);   (a's bytes copied)
 *     slim_container_take(&seq, &b);              (b's buffer moved in)
 *     ... slim_container_len(&seq), slim_container_at(&seq, 1)
 *     slim_tensor_release(&seq);                  (frees the elements too)
 *
 * A container value is a slim_tensor of kind SEQUENCE or OPTIONAL whose
 * data is a slim_container and whose buf owns it. The container is not an
 * arena-planned activation: its header and element slots come from the CPU
 * allocator in one block (so they are charged to the current memory
 * account like any tensor), and a release callback on that buffer drops
 * every element when the last reference goes. Elements are tensors with
 * buffers of their own (never in a run's arena, whose bytes are reused as
 * soon as the value is dead), or, in an optional, a sequence.
 *
 * A container is immutable once built: the ops that "modify" one
 * (SequenceInsert, SequenceErase) build a new one sharing the unchanged
 * elements' buffers by reference, so a sequence grown in a Loop costs one
 * slot array per iteration, not a copy of its tensors. Borrowing a
 * container (buf NULL, as the executor does with caller inputs) is safe
 * because the header knows its own buffer: slim_container_ref takes a
 * reference from data alone.
 */
#ifndef SLIM_CONTAINER_H
#define SLIM_CONTAINER_H

#include "slim.h"

struct slim_buffer;

typedef struct slim_container {
    struct slim_buffer *self; /* the buffer holding this header */
    slim_kind kind;           /* SEQUENCE or OPTIONAL */
    slim_dtype dtype;         /* of the element tensors; UNDEFINED: not known */
    int n, cap;               /* elements held, slots (an OPTIONAL has 1) */
    slim_tensor elems[];      /* each owns its storage */
} slim_container;

/* A sequence holds at most this many tensors (a hostile Loop could grow
 * one without end otherwise; the memory account caps the bytes). */
#define SLIM_CONTAINER_MAX 1000000

static inline bool slim_is_container(const slim_tensor *t)
{
    return t && t->kind != SLIM_KIND_TENSOR;
}

/* "tensor", "sequence", "optional" */
const char *slim_kind_name(slim_kind k);

/* *out becomes an empty container of kind (SEQUENCE, or OPTIONAL with
 * cap 1) with room for cap elements, holding one reference. */
slim_status slim_container_new(slim_kind kind, slim_dtype dtype, int cap, slim_tensor *out,
                               slim_err *err);
/* The container in t, or NULL when t is no container or has no data. */
const slim_container *slim_container_get(const slim_tensor *t);
static inline int slim_container_len(const slim_tensor *t)
{
    const slim_container *c = slim_container_get(t);
    return c ? c->n : 0;
}
static inline const slim_tensor *slim_container_at(const slim_tensor *t, int i)
{
    const slim_container *c = slim_container_get(t);
    return c && i >= 0 && i < c->n ? &c->elems[i] : NULL;
}

/* Adding elements (only to a container being built, before anyone else
 * sees it). The element must be a host tensor, or a sequence going into an
 * optional; a sequence's elements must share its dtype (an UNDEFINED
 * dtype takes the first element's). Each fails with a message naming what
 * is wrong and leaves the container as it was.
 *
 * add_copy: a tensor's bytes are copied into a new buffer (its source may
 * be a borrowed input or an arena activation); a sequence is referenced.
 * add_shared: elem is an element of another container: its buffer is
 * shared by reference.
 * take: elem owns its buffer (or is a container); it is moved in and
 * cleared, or released on failure. */
slim_status slim_container_add_copy(slim_tensor *c, const slim_tensor *elem, slim_err *err);
slim_status slim_container_add_shared(slim_tensor *c, const slim_tensor *elem, slim_err *err);
slim_status slim_container_take(slim_tensor *c, slim_tensor *elem, slim_err *err);

/* dst becomes a new owning reference to src's container (src may be
 * borrowed). */
void slim_container_ref(const slim_tensor *src, slim_tensor *dst);

/* dst becomes an owning reference to src, a tensor or a container, without
 * copying bytes: src must own its buffer (an element of a container). */
void slim_value_share(const slim_tensor *src, slim_tensor *dst);

#endif
