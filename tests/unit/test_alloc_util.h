/* test_alloc_util.h - what the allocator tests (test_alloc.c,
 * test_alloc_accounts.c) share: a counting backend for private allocators
 * and the few checks every case repeats.
 *
 *     test_backend tb;
 *     slim_allocator *a = new_allocator(&tb, "test");
 *     slim_block *b = must_alloc(a, 1000);   // fails the test when refused
 *     ck_assert_int_eq(tb.allocs, 1);
 *     slim_allocator_free_all(a);
 *
 * Private allocators run over the counting backend, so each test sees every
 * segment the allocator takes from or gives back to its "device", and can
 * make the device refuse. */
#ifndef SLIM_TEST_ALLOC_UTIL_H
#define SLIM_TEST_ALLOC_UTIL_H

#include "testutil.h"
#include "alloc.h"

#include <stdbool.h>
#include <stddef.h>
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef struct test_backend {
    int allocs, frees, refusals;
    size_t live;                /* bytes of segments handed out and not back */
    size_t last_size;           /* of the last segment handed out */
    bool refuse;                /* refuse every segment */
    size_t budget;              /* 0, or refuse segments that would pass it */
} test_backend;

/* device "cpu" turns on ASan poisoning of free blocks: the threaded test
 * uses it to show that nothing writes into memory it does not own. */
slim_allocator *new_allocator(test_backend *tb, const char *device);
slim_mem_stats stats_of(slim_allocator *a);
/* Allocates or fails the test with the allocator's message. */
slim_block *must_alloc(slim_allocator *a, size_t size);
char *ptr_of(const slim_block *b);

#endif
