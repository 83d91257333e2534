/* test_alloc_util.c - the allocator tests' counting backend and checks
 * (see test_alloc_util.h). */
#include "test_alloc_util.h"

#include <stdlib.h>
#include <string.h>

/* Called with the allocator's lock held, so no lock of its own. */
static void *tb_alloc(void *ctx, size_t size)
{
    test_backend *tb = ctx;
    if (tb->refuse || (tb->budget && tb->live + size > tb->budget)) {
        tb->refusals++;
        return NULL;
    }
    void *p = aligned_alloc(64, size);
    ck_assert_ptr_nonnull(p);
    tb->allocs++;
    tb->live += size;
    tb->last_size = size;
    return p;
}

static void tb_free(void *ctx, void *ptr, size_t size)
{
    test_backend *tb = ctx;
    ck_assert_uint_ge(tb->live, size);
    tb->frees++;
    tb->live -= size;
    free(ptr);
}

/* device "cpu" turns on ASan poisoning of free blocks: the threaded test
 * uses it to show that nothing writes into memory it does not own. */
slim_allocator *new_allocator(test_backend *tb, const char *device)
{
    memset(tb, 0, sizeof(*tb));
    slim_alloc_backend be = {.device = device, .segment_alloc = tb_alloc,
                             .segment_free = tb_free, .ctx = tb};
    slim_allocator *a = slim_allocator_new(&be);
    ck_assert_ptr_nonnull(a);
    return a;
}

slim_mem_stats stats_of(slim_allocator *a)
{
    slim_mem_stats s;
    slim_allocator_stats(a, &s);
    return s;
}

slim_block *must_alloc(slim_allocator *a, size_t size)
{
    slim_block *b = NULL;
    slim_err err = {0};
    void *p = slim_allocator_alloc(a, size, &b, &err);
    ck_assert_msg(p != NULL, "alloc %zu: %s", size, err.msg);
    ck_assert_ptr_eq(p, slim_block_ptr(b));
    return b;
}

char *ptr_of(const slim_block *b)
{
    return slim_block_ptr(b);
}
