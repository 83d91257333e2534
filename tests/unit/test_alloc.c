/* test_alloc.c - the caching allocator (runtime/alloc.c): its size policy,
 * split and merge, statistics, limits and refusals, cache trimming and
 * give-back, and many threads at once. Accounts, the CPU device's buffers
 * and the text helpers are in test_alloc_accounts.c.
 *
 * Private allocators run over a counting backend (test_alloc_util.c), so
 * each test sees every segment the allocator takes from or gives back to
 * its "device", and can make the device refuse. */
#include "test_alloc_util.h"
#include "alloc_trim.h"
#include "device.h"
#include "slim_init.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#include <sanitizer/asan_interface.h>
#endif

/* ---- size policy ----------------------------------------------------------- */

START_TEST(test_rounding_and_pools)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    ck_assert_str_eq(slim_allocator_device(a), "test");

    slim_block *b0 = must_alloc(a, 0);
    ck_assert_uint_eq(slim_block_size(b0), 512);
    ck_assert_uint_eq(tb.last_size, SLIM_ALLOC_SMALL_SEG);
    ck_assert_uint_eq(slim_block_size(must_alloc(a, 1)), 512);
    ck_assert_uint_eq(slim_block_size(must_alloc(a, 512)), 512);
    ck_assert_uint_eq(slim_block_size(must_alloc(a, 513)), 1024);
    slim_block *mib = must_alloc(a, MiB);        /* the largest small request */
    ck_assert_uint_eq(slim_block_size(mib), MiB);
    ck_assert_int_eq(tb.allocs, 1);
    slim_mem_stats s = stats_of(a);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_SMALL].current, (int64_t)(2 * MiB));
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_LARGE].current, 0);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_SMALL].current, (int64_t)(512 * 3 + 1024 + MiB));
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_SMALL].current, (int64_t)(0 + 1 + 512 + 513 + MiB));

    /* One byte more goes to the large pool, in a 20 MiB segment. */
    slim_block *big = must_alloc(a, MiB + 1);
    ck_assert_uint_eq(slim_block_size(big), MiB + 512);
    ck_assert_int_eq(tb.allocs, 2);
    ck_assert_uint_eq(tb.last_size, SLIM_ALLOC_LARGE_SEG);
    s = stats_of(a);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_LARGE].current, (int64_t)(20 * MiB));
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_LARGE].current, (int64_t)(MiB + 512));

    /* 9 MiB fits in what is left of that segment. */
    uint64_t hits = stats_of(a).num_cache_hits;
    must_alloc(a, 9 * MiB);
    ck_assert_int_eq(tb.allocs, 2);
    ck_assert_uint_eq(stats_of(a).num_cache_hits, hits + 1);
    /* From 10 MiB the segment is the request rounded up to 2 MiB. */
    slim_block *ten = must_alloc(a, 10 * MiB);
    ck_assert_int_eq(tb.allocs, 3);
    ck_assert_uint_eq(tb.last_size, 10 * MiB);
    ck_assert_uint_eq(slim_block_size(ten), 10 * MiB);
    must_alloc(a, 11 * MiB + 1);
    ck_assert_uint_eq(tb.last_size, 12 * MiB);
    /* Under 10 MiB: the first segment's rest while it has room, then a
     * fresh 20 MiB segment. */
    must_alloc(a, 9 * MiB);
    ck_assert_int_eq(tb.allocs, 4);
    must_alloc(a, 9 * MiB);
    ck_assert_int_eq(tb.allocs, 5);
    ck_assert_uint_eq(tb.last_size, 20 * MiB);
    ck_assert_int_eq(stats_of(a).segment[SLIM_POOL_LARGE].current, 4);
    ck_assert_int_eq(stats_of(a).segment[SLIM_POOL_SMALL].current, 1);
    slim_allocator_free_all(a);
    ck_assert_int_eq(tb.frees, tb.allocs);
    ck_assert_uint_eq(tb.live, 0);
}
END_TEST

START_TEST(test_large_pool_split_rule)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_block *b1 = must_alloc(a, 5 * MiB);
    ck_assert_uint_eq(slim_block_size(b1), 5 * MiB);
    /* The 15 MiB rest, asked for less 0.5 MiB: a remainder of 1 MiB or
     * less is not cut off, the block goes out whole. */
    slim_block *b2 = must_alloc(a, 14 * MiB + MiB / 2 + 1);
    ck_assert_uint_eq(slim_block_size(b2), 15 * MiB);
    ck_assert_ptr_eq(ptr_of(b2), ptr_of(b1) + 5 * MiB);
    slim_mem_stats s = stats_of(a);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].current, (int64_t)(20 * MiB));
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_ALL].current,
                     (int64_t)(5 * MiB + 14 * MiB + MiB / 2 + 1));
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current, 0);
    slim_allocator_free(a, b1);
    slim_allocator_free(a, b2);
    /* More than 1 MiB left over: split. */
    slim_block *b3 = must_alloc(a, 18 * MiB);
    ck_assert_uint_eq(slim_block_size(b3), 18 * MiB);
    s = stats_of(a);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_LARGE].current, (int64_t)(2 * MiB));
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_LARGE].current, 1);
    ck_assert_int_eq(tb.allocs, 1);
    slim_allocator_free_all(a);
}
END_TEST

/* ---- split, merge, best fit --------------------------------------------- */

START_TEST(test_split_and_merge)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_block *x = must_alloc(a, 1000), *y = must_alloc(a, 1000), *z = must_alloc(a, 1000);
    ck_assert_ptr_eq(ptr_of(y), ptr_of(x) + 1024);
    ck_assert_ptr_eq(ptr_of(z), ptr_of(y) + 1024);
    slim_mem_stats s = stats_of(a);
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_ALL].current, 1);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current, (int64_t)(2 * MiB - 3072));

    char *xp = ptr_of(x);
    slim_allocator_free(a, y);
    s = stats_of(a);
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current, (int64_t)(2 * MiB - 2048));
    /* x merges with the free y after it: still two free blocks. */
    slim_allocator_free(a, x);
    s = stats_of(a);
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current, (int64_t)(2 * MiB - 1024));
    /* The merged 2 KiB hole is the exact fit for 2 KiB. */
    slim_block *w = must_alloc(a, 2048);
    ck_assert_ptr_eq(ptr_of(w), xp);
    ck_assert_int_eq(stats_of(a).inactive_split[SLIM_POOL_ALL].current, 1);
    slim_allocator_free(a, w);
    slim_allocator_free(a, z);
    /* Everything merged back: one free block, the segment whole. */
    s = stats_of(a);
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_ALL].current, 0);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current, 0);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(2 * MiB));
    ck_assert_int_eq(tb.frees, 0);
    /* ... and a 1 MiB request starts at its base again. */
    slim_block *whole = must_alloc(a, MiB);
    ck_assert_ptr_eq(ptr_of(whole), xp);
    slim_allocator_free(a, whole);

    ck_assert_uint_eq(slim_allocator_empty_cache(a), 2 * MiB);
    ck_assert_int_eq(tb.frees, 1);
    s = stats_of(a);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, 0);
    ck_assert_int_eq(s.segment[SLIM_POOL_ALL].current, 0);
    ck_assert_int_eq(s.segment[SLIM_POOL_ALL].allocated, 1);
    ck_assert_int_eq(s.segment[SLIM_POOL_ALL].freed, 1);
    ck_assert_uint_eq(s.num_device_frees, 1);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_best_fit_reuse)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    /* Holes of 4, 2 and 8 KiB between blocks kept in use. */
    slim_block *h4 = must_alloc(a, 4 * KiB);
    must_alloc(a, 512);
    slim_block *h2 = must_alloc(a, 2 * KiB);
    must_alloc(a, 512);
    slim_block *h8 = must_alloc(a, 8 * KiB);
    must_alloc(a, 512);
    char *p4 = ptr_of(h4), *p2 = ptr_of(h2), *p8 = ptr_of(h8);
    slim_allocator_free(a, h8);
    slim_allocator_free(a, h4);
    slim_allocator_free(a, h2);
    uint64_t hits = stats_of(a).num_cache_hits;

    ck_assert_ptr_eq(ptr_of(must_alloc(a, 2 * KiB)), p2);
    ck_assert_ptr_eq(ptr_of(must_alloc(a, 3 * KiB)), p4);  /* not the 8 KiB hole */
    ck_assert_ptr_eq(ptr_of(must_alloc(a, 5 * KiB)), p8);
    ck_assert_ptr_eq(ptr_of(must_alloc(a, 1 * KiB)), p4 + 3 * KiB); /* the 4 KiB hole's rest */
    ck_assert_ptr_eq(ptr_of(must_alloc(a, 3 * KiB)), p8 + 5 * KiB); /* the 8 KiB hole's rest */
    ck_assert_uint_eq(stats_of(a).num_cache_hits, hits + 5);
    ck_assert_int_eq(tb.allocs, 1);
    slim_allocator_free_all(a);
}
END_TEST

/* ---- statistics ------------------------------------------------------------- */

START_TEST(test_stats_fields_and_peaks)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_block *s1 = must_alloc(a, 1000);
    slim_block *l1 = must_alloc(a, 3 * MiB);
    slim_mem_stats s = stats_of(a);
    const int64_t both = 1024 + 3 * MiB;
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].current, both);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_SMALL].current, 1024);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_LARGE].current, (int64_t)(3 * MiB));
    ck_assert_int_eq(s.active_bytes[SLIM_POOL_ALL].current, both);
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_ALL].current, (int64_t)(1000 + 3 * MiB));
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(22 * MiB));
    ck_assert_int_eq(s.allocation[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.allocation[SLIM_POOL_SMALL].current, 1);
    ck_assert_int_eq(s.active[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.segment[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_ALL].current, 2);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_ALL].current,
                     (int64_t)(2 * MiB - 1024 + 17 * MiB));
    ck_assert_uint_eq(s.num_cache_hits, 0);
    ck_assert_uint_eq(s.limit_bytes, 0);

    slim_allocator_free(a, l1);
    s = stats_of(a);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].current, 1024);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].peak, both);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].allocated, both);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].freed, (int64_t)(3 * MiB));
    ck_assert_int_eq(s.allocation[SLIM_POOL_LARGE].allocated, 1);
    ck_assert_int_eq(s.allocation[SLIM_POOL_LARGE].freed, 1);
    ck_assert_int_eq(s.active[SLIM_POOL_ALL].current, 1);
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_ALL].current, 1000);
    /* The large segment is whole again: its free block is not "split". */
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_LARGE].current, 0);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_LARGE].current, 0);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_LARGE].peak, (int64_t)(17 * MiB));
    ck_assert_int_eq(s.inactive_split[SLIM_POOL_SMALL].current, 1);

    slim_allocator_reset_peaks(a);
    s = stats_of(a);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].peak, 1024);
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_ALL].peak, 1000);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].peak, (int64_t)(22 * MiB));
    ck_assert_int_eq(s.allocation[SLIM_POOL_ALL].peak, 1);
    ck_assert_int_eq(s.inactive_split_bytes[SLIM_POOL_LARGE].peak, 0);
    /* Totals survive a peak reset. */
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].allocated, both);

    ck_assert_uint_eq(slim_allocator_empty_cache(a), 20 * MiB);
    s = stats_of(a);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(2 * MiB));
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].peak, (int64_t)(22 * MiB));
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_LARGE].freed, (int64_t)(20 * MiB));
    ck_assert_int_eq(s.segment[SLIM_POOL_LARGE].freed, 1);

    slim_allocator_free(a, s1);
    must_alloc(a, 700);
    s = stats_of(a);
    ck_assert_uint_eq(s.num_cache_hits, 1);
    ck_assert_uint_eq(s.num_alloc_retries, 0);
    ck_assert_uint_eq(s.num_ooms, 0);
    ck_assert_int_eq(s.requested_bytes[SLIM_POOL_ALL].current, 700);
    slim_allocator_free_all(a);
}
END_TEST

/* ---- limits and refusals -------------------------------------------------- */

START_TEST(test_limit_cuts_segment_then_fails)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_allocator_set_limit(a, 4 * MiB);
    ck_assert_uint_eq(slim_allocator_limit(a), 4 * MiB);
    /* A 20 MiB segment would pass the limit; the request alone fits. */
    slim_block *b = must_alloc(a, 3 * MiB);
    ck_assert_uint_eq(tb.last_size, 3 * MiB);
    slim_mem_stats s = stats_of(a);
    ck_assert_uint_eq(s.num_alloc_retries, 1);
    ck_assert_uint_eq(s.limit_bytes, 4 * MiB);

    slim_block *none = (slim_block *)1;
    slim_err err = {0};
    ck_assert_ptr_null(slim_allocator_alloc(a, 2 * MiB, &none, &err));
    ck_assert_ptr_null(none);
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "out of memory on test: tried to allocate 2.0 MiB (2097152 bytes)")
                  && strstr(err.msg, "3.0 MiB allocated") && strstr(err.msg, "limit 4.0 MiB"),
                  "%s", err.msg);
    s = stats_of(a);
    ck_assert_uint_eq(s.num_ooms, 1);
    ck_assert_uint_eq(s.num_alloc_retries, 2);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].current, (int64_t)(3 * MiB));

    slim_allocator_set_limit(a, 0);
    slim_allocator_free(a, must_alloc(a, 2 * MiB));
    slim_allocator_free(a, b);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_limit_flushes_cache_first)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_allocator_set_limit(a, 24 * MiB);
    slim_allocator_free(a, must_alloc(a, 5 * MiB));     /* 20 MiB cached */
    ck_assert_uint_eq(stats_of(a).num_alloc_retries, 0);
    /* A 22 MiB segment fits only once the cached 20 MiB is gone. */
    slim_block *b = must_alloc(a, 22 * MiB);
    ck_assert_int_eq(tb.frees, 1);
    slim_mem_stats s = stats_of(a);
    ck_assert_uint_eq(s.num_alloc_retries, 1);
    ck_assert_uint_eq(s.num_device_frees, 1);
    ck_assert_uint_eq(s.num_ooms, 0);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(22 * MiB));
    slim_allocator_free(a, b);

    /* Flushing is not always enough: 2 MiB in use, 22 MiB cached, 23 MiB
     * asked for. The cache goes back and the request still fails. */
    slim_block *small = must_alloc(a, KiB);
    slim_err err = {0};
    slim_block *none;
    ck_assert_ptr_null(slim_allocator_alloc(a, 23 * MiB, &none, &err));
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "(24117248 bytes)") && strstr(err.msg, "1.0 KiB allocated")
                  && strstr(err.msg, "2.0 MiB reserved") && strstr(err.msg, "limit 24.0 MiB"),
                  "%s", err.msg);
    ck_assert_int_eq(tb.frees, 2);
    ck_assert_uint_eq(stats_of(a).num_ooms, 1);
    slim_allocator_free(a, small);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_device_refusal)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    tb.refuse = true;
    slim_err err = {0};
    slim_block *none;
    ck_assert_ptr_null(slim_allocator_alloc(a, 1000, &none, &err));
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "out of memory on test: tried to allocate 1000 B (1000 bytes)")
                  && strstr(err.msg, "the device refused") && !strstr(err.msg, "limit"),
                  "%s", err.msg);
    slim_mem_stats s = stats_of(a);
    ck_assert_uint_eq(s.num_ooms, 1);
    ck_assert_uint_eq(s.num_alloc_retries, 1);
    ck_assert_int_ge(tb.refusals, 2);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, 0);

    /* A device that has room only once the cache is given back. */
    tb.refuse = false;
    tb.budget = 21 * MiB;
    slim_allocator_free(a, must_alloc(a, 5 * MiB));     /* 20 MiB cached */
    slim_block *b = must_alloc(a, 1000);               /* a 2 MiB small segment */
    ck_assert_int_eq(tb.frees, 1);
    ck_assert_uint_eq(stats_of(a).num_alloc_retries, 2);
    ck_assert_uint_eq(stats_of(a).num_ooms, 1);
    slim_allocator_free(a, b);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_impossible_sizes)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_err err = {0};
    slim_block *none;
    ck_assert_ptr_null(slim_allocator_alloc(a, SIZE_MAX, &none, &err));
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "out of memory on test"), "%s", err.msg);
    ck_assert_ptr_null(slim_allocator_alloc(a, SIZE_MAX / 2, &none, &err));
    ck_assert_int_eq(tb.allocs + tb.refusals, 0);
    ck_assert_uint_eq(stats_of(a).num_ooms, 2);
    slim_allocator_free_all(a);
}
END_TEST

/* ---- empty_cache ---------------------------------------------------------------- */

/* A tightened cache cap gives back cached segments only until what is
 * reserved fits under it; segments in use stay, and allocations are not
 * refused by it; a segment freed over the cap goes back at once. */
START_TEST(test_cache_cap_frees_only_what_it_takes)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_block *keep = must_alloc(a, 15 * MiB);          /* 16 MiB segment */
    slim_block *d1 = must_alloc(a, 12 * MiB);            /* 12 MiB segment */
    slim_block *d2 = must_alloc(a, 11 * MiB);            /* 12 MiB segment */
    slim_allocator_free(a, d1);
    slim_allocator_free(a, d2);
    ck_assert_int_eq(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(40 * MiB));
    ck_assert_uint_eq(slim_allocator_set_cache_cap(a, 50 * MiB), 0);
    ck_assert_uint_eq(slim_allocator_set_cache_cap(a, 30 * MiB), 12 * MiB);
    ck_assert_int_eq(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(28 * MiB));
    /* below what is in use: every free segment goes, the live one stays */
    ck_assert_uint_eq(slim_allocator_set_cache_cap(a, 10 * MiB), 12 * MiB);
    ck_assert_uint_eq(tb.live, 16 * MiB);
    slim_block *over = must_alloc(a, 12 * MiB);          /* not refused by the cap */
    ck_assert_uint_eq(tb.live, 28 * MiB);
    slim_allocator_free(a, over);                        /* over the cap: given back */
    ck_assert_uint_eq(tb.live, 16 * MiB);
    ck_assert_uint_eq(slim_allocator_set_cache_cap(a, 0), 0);
    over = must_alloc(a, 12 * MiB);
    slim_allocator_free(a, over);                        /* no cap: cached */
    ck_assert_uint_eq(tb.live, 28 * MiB);
    slim_allocator_free(a, keep);
    slim_allocator_free_all(a);
}
END_TEST

/* The cache slack: large requests get segments of their own size, and the
 * cache (reserved less allocated) never stays over max(slack, 10% of
 * allocated); allocations are not refused by it. */
START_TEST(test_cache_slack_bounds_the_cache)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    ck_assert_uint_eq(slim_allocator_set_cache_slack(a, 8 * MiB), 0);
    slim_block *keep = must_alloc(a, 3 * MiB);           /* its own 4 MiB, not 20 */
    ck_assert_uint_eq(tb.live, 4 * MiB);
    slim_block *x = must_alloc(a, 9 * MiB);              /* 10 MiB segment */
    ck_assert_uint_eq(tb.live, 14 * MiB);
    slim_allocator_free(a, x);                           /* cache 10 MiB > 8: given back */
    ck_assert_uint_eq(tb.live, 4 * MiB);
    slim_block *y = must_alloc(a, 5 * MiB);              /* 6 MiB segment */
    slim_allocator_free(a, y);                           /* cache 6 MiB: kept */
    ck_assert_uint_eq(tb.live, 10 * MiB);
    y = must_alloc(a, 5 * MiB);                          /* from the cache */
    ck_assert_uint_eq(tb.live, 10 * MiB);
    slim_allocator_free(a, y);
    ck_assert_uint_eq(slim_allocator_set_cache_slack(a, 2 * MiB), 6 * MiB);
    ck_assert_uint_eq(tb.live, 4 * MiB);
    ck_assert_uint_eq(slim_allocator_set_cache_slack(a, 0), 0);
    y = must_alloc(a, 5 * MiB);                          /* no slack: 20 MiB segments */
    ck_assert_uint_eq(tb.live, 24 * MiB);
    slim_allocator_free(a, y);                           /* and cached */
    ck_assert_uint_eq(tb.live, 24 * MiB);
    slim_allocator_free(a, keep);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_empty_cache_keeps_segments_in_use)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_block *keep = must_alloc(a, 15 * MiB);          /* 16 MiB segment */
    slim_block *drop = must_alloc(a, 12 * MiB);          /* 12 MiB segment */
    slim_block *small_keep = must_alloc(a, 1000);        /* 2 MiB segment ... */
    slim_block *small_drop = must_alloc(a, 1000);        /* ... shared */
    slim_allocator_free(a, drop);
    slim_allocator_free(a, small_drop);
    ck_assert_uint_eq(slim_allocator_empty_cache(a), 12 * MiB);
    ck_assert_int_eq(tb.frees, 1);
    ck_assert_uint_eq(tb.live, 18 * MiB);
    ck_assert_int_eq(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, (int64_t)(18 * MiB));
    ck_assert_uint_eq(slim_allocator_empty_cache(a), 0);
    slim_allocator_free(a, keep);
    slim_allocator_free(a, small_keep);
    ck_assert_uint_eq(slim_allocator_empty_cache(a), 18 * MiB);
    ck_assert_uint_eq(tb.live, 0);
    ck_assert_uint_eq(stats_of(a).num_device_frees, 3);
    slim_allocator_free_all(a);
}
END_TEST

/* slim_memory_give_back (alloc_trim.c): the CPU device's allocator keeps
 * only segments with a live block, whatever the load left cached. */
START_TEST(test_give_back_trims_the_cpu_allocator)
{
    slim_allocator *a = slim_device_cpu()->alloc;
    slim_memory_give_back();
    int64_t base = stats_of(a).reserved_bytes[SLIM_POOL_ALL].current;
    slim_err err;
    slim_block *keep, *drop;
    ck_assert_ptr_nonnull(slim_allocator_alloc(a, 3 * MiB, &keep, &err));
    ck_assert_ptr_nonnull(slim_allocator_alloc(a, 40 * MiB, &drop, &err));
    slim_allocator_free(a, drop);
    ck_assert_int_ge(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, base + (int64_t)(60 * MiB));
    ck_assert_uint_ge(slim_memory_give_back(), 40 * MiB);
    /* keep's 20 MiB segment stays: it holds a live block. */
    ck_assert_int_eq(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, base + (int64_t)(20 * MiB));
    slim_allocator_free(a, keep);
    ck_assert_uint_eq(slim_allocator_trim(a), 20 * MiB);
    ck_assert_uint_eq(slim_allocator_trim(NULL), 0);
    ck_assert_int_eq(stats_of(a).reserved_bytes[SLIM_POOL_ALL].current, base);
}
END_TEST

/* The idle hooks (alloc_trim.h) run on a give-back only when no allocator
 * holds a live block: never while a model could still use a library's
 * cache (oneDNN's primitives, matmul_dnnl.c). */
static int idle_calls;
static void count_idle(void)
{
    idle_calls++;
}

START_TEST(test_give_back_idle_hooks)
{
    slim_allocator *a = slim_device_cpu()->alloc;
    ck_assert(slim_memory_on_idle(count_idle));
    ck_assert(slim_memory_on_idle(count_idle)); /* once per hook */
    slim_err err;
    slim_block *live;
    ck_assert_ptr_nonnull(slim_allocator_alloc(a, 1 * MiB, &live, &err));
    idle_calls = 0;
    slim_memory_give_back();
    ck_assert_int_eq(idle_calls, 0);
    ck_assert(!slim_memory_idle());
    slim_allocator_free(a, live);
    ck_assert(slim_memory_idle());
    slim_memory_give_back();
    ck_assert_int_eq(idle_calls, 1);
}
END_TEST

/* Paging out a library's clean pages (an idle hook's tool): every file
 * mapping of the object holding the address is advised, an anonymous
 * address (the heap, the stack) is no object's and nothing is. The code
 * stays callable: its pages come back from the file. */
START_TEST(test_page_out_object)
{
#if defined(__linux__) && defined(__GLIBC__)
    /* A string of libc's read-only data: libc's file is the object. */
    size_t n = slim_memory_page_out_object(gnu_get_libc_version());
    ck_assert_uint_gt(n, 0);
#endif
    ck_assert_uint_eq(strlen("still runs"), 10);
    int on_stack = 0;
    ck_assert_uint_eq(slim_memory_page_out_object(&on_stack), 0);
    void *heap = malloc(64);
    ck_assert_uint_eq(slim_memory_page_out_object(heap), 0);
    free(heap);
    ck_assert_uint_eq(slim_memory_page_out_object(NULL), 0);
}
END_TEST

/* ---- many threads ---------------------------------------------------------------- */

#define STRESS_THREADS 8
#define STRESS_OPS 20000
#define STRESS_SLOTS 48

typedef struct {
    slim_allocator *a;
    slim_mem_account *acct;
    unsigned seed;
    long allocs;
} stress_args;

static uint32_t xorshift(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Each live block carries its owner's tag at both ends; a tag changed by
 * the time the block is freed means two live blocks overlapped. */
static void *stress_worker(void *arg)
{
    stress_args *sa = arg;
    slim_mem_account *prev = slim_mem_account_enter(sa->acct);
    slim_block *slots[STRESS_SLOTS] = {0};
    size_t sizes[STRESS_SLOTS] = {0};
    uint32_t rng = sa->seed;
    bool ok = true;
    for (int op = 0; op < STRESS_OPS && ok; op++) {
        int i = (int)(xorshift(&rng) % STRESS_SLOTS);
        uint32_t tag = sa->seed * 2654435761u + (uint32_t)i;
        if (slots[i]) {
            char *p = slim_block_ptr(slots[i]);
            uint32_t head, tail;
            memcpy(&head, p, 4);
            memcpy(&tail, p + sizes[i] - 4, 4);
            ok = head == tag && tail == tag;
            slim_allocator_free(sa->a, slots[i]);
            slots[i] = NULL;
            continue;
        }
        uint32_t r = xorshift(&rng), kind = r % 100;
        size_t size = kind < 70 ? 8 + r % (64 * KiB)
                    : kind < 95 ? 64 * KiB + r % (MiB - 64 * KiB)
                    : MiB + r % (12 * MiB);
        slim_err err;
        if (!slim_allocator_alloc(sa->a, size, &slots[i], &err)) {
            fprintf(stderr, "%s\n", err.msg);
            ok = false;
            break;
        }
        char *p = slim_block_ptr(slots[i]);
        memcpy(p, &tag, 4);
        memcpy(p + size - 4, &tag, 4);
        sizes[i] = size;
        sa->allocs++;
    }
    for (int i = 0; i < STRESS_SLOTS; i++)
        slim_allocator_free(sa->a, slots[i]);
    slim_mem_account_enter(prev);
    return ok ? arg : NULL;
}

START_TEST(test_many_threads)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "cpu");
    slim_mem_account *accts[2] = {slim_mem_account_new("model \"even\"", 0),
                                  slim_mem_account_new("model \"odd\"", 0)};
    pthread_t threads[STRESS_THREADS];
    stress_args args[STRESS_THREADS];
    for (int t = 0; t < STRESS_THREADS; t++) {
        args[t] = (stress_args){.a = a, .acct = accts[t % 2], .seed = 0x9e3779b9u + (unsigned)t};
        ck_assert_int_eq(pthread_create(&threads[t], NULL, stress_worker, &args[t]), 0);
    }
    long total = 0;
    for (int t = 0; t < STRESS_THREADS; t++) {
        void *ret;
        ck_assert_int_eq(pthread_join(threads[t], &ret), 0);
        ck_assert_msg(ret == &args[t], "thread %d saw a corrupted or failed block", t);
        total += args[t].allocs;
    }
    ck_assert_int_gt(total, STRESS_THREADS * STRESS_OPS / 4);

    slim_mem_stats s = stats_of(a);
    for (int p = 0; p < SLIM_POOL_COUNT; p++) {
        ck_assert_int_eq(s.allocated_bytes[p].current, 0);
        ck_assert_int_eq(s.active_bytes[p].current, 0);
        ck_assert_int_eq(s.requested_bytes[p].current, 0);
        ck_assert_int_eq(s.allocation[p].current, 0);
        ck_assert_int_eq(s.active[p].current, 0);
        /* Every segment merged back whole: no free block is "split". */
        ck_assert_int_eq(s.inactive_split[p].current, 0);
        ck_assert_int_eq(s.inactive_split_bytes[p].current, 0);
        ck_assert_int_eq(s.allocated_bytes[p].allocated, s.allocated_bytes[p].freed);
    }
    ck_assert_int_eq(s.allocation[SLIM_POOL_ALL].allocated, total);
    ck_assert_int_eq(s.allocation[SLIM_POOL_ALL].allocated,
                     s.allocation[SLIM_POOL_SMALL].allocated + s.allocation[SLIM_POOL_LARGE].allocated);
    /* With no limit each allocation was a cache hit or took a new segment. */
    ck_assert_int_eq((int64_t)s.num_cache_hits + s.segment[SLIM_POOL_ALL].allocated, total);
    ck_assert_uint_eq(s.num_alloc_retries, 0);
    ck_assert_int_eq(s.reserved_bytes[SLIM_POOL_ALL].current, (int64_t)tb.live);
    ck_assert_int_eq(s.segment[SLIM_POOL_ALL].current, tb.allocs - tb.frees);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(atomic_load(&accts[i]->current), 0);
        ck_assert_int_eq(atomic_load(&accts[i]->refs), 1);
        slim_mem_account_unref(accts[i]);
    }
    ck_assert_uint_eq(slim_allocator_empty_cache(a), (size_t)s.reserved_bytes[SLIM_POOL_ALL].current);
    ck_assert_uint_eq(tb.live, 0);
    ck_assert_int_eq(tb.frees, tb.allocs);
    slim_allocator_free_all(a);
}
END_TEST

static Suite *alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("allocator");
    tcase_add_test(tc, test_rounding_and_pools);
    tcase_add_test(tc, test_large_pool_split_rule);
    tcase_add_test(tc, test_split_and_merge);
    tcase_add_test(tc, test_best_fit_reuse);
    tcase_add_test(tc, test_stats_fields_and_peaks);
    tcase_add_test(tc, test_limit_cuts_segment_then_fails);
    tcase_add_test(tc, test_limit_flushes_cache_first);
    tcase_add_test(tc, test_device_refusal);
    tcase_add_test(tc, test_impossible_sizes);
    tcase_add_test(tc, test_empty_cache_keeps_segments_in_use);
    tcase_add_test(tc, test_cache_cap_frees_only_what_it_takes);
    tcase_add_test(tc, test_cache_slack_bounds_the_cache);
    tcase_add_test(tc, test_give_back_trims_the_cpu_allocator);
    tcase_add_test(tc, test_give_back_idle_hooks);
    tcase_add_test(tc, test_page_out_object);
    tcase_add_test(tc, test_many_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(alloc_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
