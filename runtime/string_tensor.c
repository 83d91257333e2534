/* string_tensor.c - string tensors: slots in one block, bytes in chunks (string_tensor.h). */
#include "string_tensor.h"

#include <stdlib.h>
#include <string.h>

/* The block starts with this header, padded so the slots stay 64-byte
 * aligned like any tensor data. */
#define HDR_BYTES 64
#define FIRST_CHUNK 256
#define MAX_CHUNK ((size_t)1 << 20)

typedef struct strheap {
    slim_buffer **chunks;
    int n_chunks, cap_chunks;
    char *cur;                  /* free bytes of the last chunk */
    size_t left;
} strheap;

_Static_assert(sizeof(strheap) <= HDR_BYTES, "string header must fit its padding");
_Static_assert(sizeof(slim_str) == 16, "slim_str is the 16-byte element of SLIM_STRING");

static void string_release(slim_buffer *b)
{
    strheap *h = b->ptr;
    for (int i = 0; i < h->n_chunks; i++)
        slim_buffer_unref(h->chunks[i]);
    free(h->chunks);
    if (b->block)
        slim_allocator_free(b->dev->alloc, b->block);
    free(b);
}

bool slim__tensor_string_is_owned(const slim_tensor *t)
{
    return t && t->dtype == SLIM_STRING && t->buf && t->buf->release == string_release;
}

static strheap *heap_of(const slim_tensor *t)
{
    return slim__tensor_string_is_owned(t) ? t->buf->ptr : NULL;
}

slim_status slim__tensor_string_alloc(slim_tensor *t, slim_err *err)
{
    int64_t n = slim_tensor_numel(t);
    size_t slots;
    if (n < 0 || __builtin_mul_overflow((size_t)n, sizeof(slim_str), &slots) ||
        slots > SIZE_MAX / 4)
        return slim_errf(err, SLIM_ESHAPE, "a string tensor of %lld elements is too large",
                         (long long)n);
    slim_buffer *b;
    slim_status st = slim_buffer_new(slim_device_cpu(), HDR_BYTES + slots, &b, err);
    if (st)
        return st;
    memset(b->ptr, 0, HDR_BYTES + slots);
    b->release = string_release;
    t->buf = b;
    t->data = (char *)b->ptr + HDR_BYTES;
    t->device = NULL;
    return SLIM_OK;
}

/* A new chunk of at least `need` bytes becomes the one sets carve from. */
static slim_status heap_grow(strheap *h, size_t need, slim_err *err)
{
    size_t size = need;
    if (size < MAX_CHUNK) {
        size_t step = (size_t)FIRST_CHUNK << (h->n_chunks < 12 ? h->n_chunks : 12);
        if (step > MAX_CHUNK)
            step = MAX_CHUNK;
        if (size < step)
            size = step;
    }
    if (h->n_chunks == h->cap_chunks) {
        int cap = h->cap_chunks ? h->cap_chunks * 2 : 4;
        slim_buffer **c = realloc(h->chunks, sizeof(*c) * (size_t)cap);
        if (!c)
            return slim_errf(err, SLIM_ENOMEM, "cannot grow a string tensor's chunk list");
        h->chunks = c;
        h->cap_chunks = cap;
    }
    slim_buffer *b;
    slim_status st = slim_buffer_new(slim_device_cpu(), size, &b, err);
    if (st)
        return slim_err_prefix(err, "string bytes: ");
    h->chunks[h->n_chunks++] = b;
    h->cur = b->ptr;
    h->left = size;
    return SLIM_OK;
}

slim_status slim_tensor_string_reserve(slim_tensor *t, size_t bytes, slim_err *err)
{
    strheap *h = heap_of(t);
    if (!h)
        return slim_errf(err, SLIM_ETYPE, "not a string tensor made by slim_tensor_alloc");
    if (bytes <= h->left)
        return SLIM_OK;
    return heap_grow(h, bytes, err);
}

static slim_status set_slot(strheap *h, slim_str *slot, const char *s, size_t len,
                            slim_err *err)
{
    if (len == 0) {
        *slot = (slim_str){NULL, 0};
        return SLIM_OK;
    }
    if (len > h->left) {
        slim_status st = heap_grow(h, len, err);
        if (st)
            return st;
    }
    memcpy(h->cur, s, len);
    *slot = (slim_str){h->cur, len};
    h->cur += len;
    h->left -= len;
    return SLIM_OK;
}

slim_status slim_tensor_string_set(slim_tensor *t, int64_t i, const char *s, size_t len,
                                   slim_err *err)
{
    strheap *h = heap_of(t);
    if (!h)
        return slim_errf(err, SLIM_ETYPE, "not a string tensor made by slim_tensor_alloc");
    int64_t n = slim_tensor_numel(t);
    if (i < 0 || i >= n)
        return slim_errf(err, SLIM_EINVAL, "string element %lld of %lld", (long long)i,
                         (long long)n);
    if (len > SLIM_STRING_MAX_LEN)
        return slim_errf(err, SLIM_EINVAL, "a string of %zu bytes: at most %llu per element",
                         len, (unsigned long long)SLIM_STRING_MAX_LEN);
    if (len && !s)
        return slim_errf(err, SLIM_EINVAL, "a string of %zu bytes with no data", len);
    return set_slot(h, (slim_str *)t->data + i, s, len, err);
}

char *slim__tensor_string_make(slim_tensor *t, int64_t i, size_t len, slim_err *err)
{
    static char none[1];
    strheap *h = heap_of(t);
    if (!h) {
        slim_errf(err, SLIM_ETYPE, "not a string tensor made by slim_tensor_alloc");
        return NULL;
    }
    if (i < 0 || i >= slim_tensor_numel(t) || len > SLIM_STRING_MAX_LEN) {
        slim_errf(err, SLIM_EINVAL, "string element %lld of %lld, %zu bytes", (long long)i,
                  (long long)slim_tensor_numel(t), len);
        return NULL;
    }
    slim_str *slot = (slim_str *)t->data + i;
    if (len == 0) {
        *slot = (slim_str){NULL, 0};
        return none; /* nothing to write */
    }
    if (len > h->left && heap_grow(h, len, err))
        return NULL;
    char *p = h->cur;
    *slot = (slim_str){p, len};
    h->cur += len;
    h->left -= len;
    return p;
}

const char *slim_tensor_string_get(const slim_tensor *t, int64_t i, size_t *len)
{
    *len = 0;
    if (!t || t->dtype != SLIM_STRING || !t->data || i < 0 || i >= slim_tensor_numel(t))
        return NULL;
    const slim_str *e = (const slim_str *)t->data + i;
    *len = (size_t)e->len;
    return e->ptr;
}

size_t slim_tensor_string_total(const slim_tensor *t)
{
    if (!t || t->dtype != SLIM_STRING || !t->data)
        return 0;
    size_t sum = 0;
    const slim_str *e = t->data;
    for (int64_t i = 0, n = slim_tensor_numel(t); i < n; i++)
        sum += (size_t)e[i].len;
    return sum;
}

slim_status slim__tensor_string_check(const slim_tensor *t, const char *what, slim_err *err)
{
    const slim_str *e = t->data;
    for (int64_t i = 0, n = slim_tensor_numel(t); i < n; i++)
        if (e[i].len > SLIM_STRING_MAX_LEN || (e[i].len && !e[i].ptr))
            return slim_errf(err, SLIM_EINVAL, "%s: string element %lld has length %llu%s", what,
                             (long long)i, (unsigned long long)e[i].len,
                             e[i].len > SLIM_STRING_MAX_LEN ? " (too long)" : " and no data");
    return SLIM_OK;
}

static bool in_chunks(const strheap *h, const slim_str *e)
{
    for (int c = h->n_chunks - 1; c >= 0; c--) {
        const char *p = h->chunks[c]->ptr;
        if (e->ptr >= p && e->len <= h->chunks[c]->size &&
            e->ptr - p <= (ptrdiff_t)(h->chunks[c]->size - e->len))
            return true;
    }
    return false;
}

slim_status slim__tensor_string_own(slim_tensor *t, slim_err *err)
{
    strheap *h = heap_of(t);
    if (!h)
        return slim_errf(err, SLIM_EINTERNAL, "a string output without string storage");
    /* A kernel wrote a bad slot: the engine's bug, not the caller's. */
    slim_status st = slim__tensor_string_check(t, "string output", err);
    if (st)
        return err ? (err->status = SLIM_EINTERNAL) : SLIM_EINTERNAL;
    slim_str *e = t->data;
    int64_t n = slim_tensor_numel(t);
    size_t foreign = 0;
    for (int64_t i = 0; i < n; i++)
        if (e[i].len && !in_chunks(h, &e[i]))
            foreign += (size_t)e[i].len;
    if (!foreign)
        return SLIM_OK;
    /* One chunk for every foreign byte, then the slots move to it. */
    if (foreign > h->left && (st = heap_grow(h, foreign, err)))
        return st;
    int own = h->n_chunks;
    for (int64_t i = 0; i < n; i++) {
        if (!e[i].len)
            continue;
        bool mine = false;
        for (int c = 0; c < own && !mine; c++) {
            const char *p = h->chunks[c]->ptr;
            /* The chunk being filled is ours too, but only below cur. */
            mine = e[i].ptr >= p && e[i].ptr < p + h->chunks[c]->size;
        }
        if (!mine && (st = set_slot(h, &e[i], e[i].ptr, (size_t)e[i].len, err)))
            return st;
    }
    return SLIM_OK;
}

slim_status slim_tensor_string_copy(slim_tensor *dst, const slim_tensor *src, slim_err *err)
{
    memset(dst, 0, sizeof(*dst));
    if (!src || src->dtype != SLIM_STRING || src->kind != SLIM_KIND_TENSOR)
        return slim_errf(err, SLIM_ETYPE, "copying a string tensor: the source is not one");
    dst->dtype = SLIM_STRING;
    dst->ndim = src->ndim;
    memcpy(dst->dims, src->dims, sizeof(dst->dims));
    slim_status st = slim__tensor_string_alloc(dst, err);
    if (st)
        return st;
    int64_t n = slim_tensor_numel(src);
    if (n && !src->data)
        st = slim_errf(err, SLIM_EINVAL, "copying a string tensor with no data");
    if (!st)
        st = slim__tensor_string_check(src, "copied tensor", err);
    if (!st)
        st = slim_tensor_string_reserve(dst, slim_tensor_string_total(src), err);
    const slim_str *e = src->data;
    for (int64_t i = 0; !st && i < n; i++)
        st = set_slot(dst->buf->ptr, (slim_str *)dst->data + i, e[i].ptr, (size_t)e[i].len, err);
    if (st)
        slim_tensor_release(dst);
    return st;
}

/* These kernels copy elements by their byte size and never look inside:
 * on strings they copy slots, which the executor then makes the output's
 * own. Each was checked to have no per-type arithmetic on the way. */
static const char *const element_movers[] = {
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size",
    "Gather", "GatherElements", "GatherND", "Concat", "Slice", "Split", "Transpose",
    "Expand", "Tile", "Where", "Compress", "If", "Loop", "Scan",
    "SequenceConstruct", "SequenceEmpty", "SequenceAt", "SequenceInsert", "SequenceErase",
    "SequenceLength", "SplitToSequence", "ConcatFromSequence", "Optional",
    "OptionalGetElement", "OptionalHasElement",
};

bool slim__op_takes_strings(const slim_op_def *op)
{
    if (op->flags & SLIM_OP_STRINGS)
        return true;
    for (size_t i = 0; i < sizeof(element_movers) / sizeof(element_movers[0]); i++)
        if (strcmp(op->op_type, element_movers[i]) == 0)
            return true;
    return false;
}
