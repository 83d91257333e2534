/* test_alloc_accounts.c - the caching allocator's accounts (runtime/alloc.c),
 * the CPU device's buffers over it (runtime/device.c) and the allocator's
 * text helpers (parse, format, summary). The allocator's own policy is
 * tested in test_alloc.c. */
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

/* ---- accounts ------------------------------------------------------------------ */

START_TEST(test_account_limit)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_mem_account *acct = slim_mem_account_new("model \"resnet\"", 4 * KiB);
    ck_assert_ptr_nonnull(acct);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    ck_assert_ptr_eq(slim_mem_account_current(), acct);

    slim_block *b = must_alloc(a, 2000);
    ck_assert_uint_eq(atomic_load(&acct->current), 2048);
    ck_assert_int_eq(atomic_load(&acct->refs), 2);
    slim_err err = {0};
    slim_block *none;
    ck_assert_ptr_null(slim_allocator_alloc(a, 3000, &none, &err));
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "model \"resnet\" holds 2.0 KiB of its 4.0 KiB limit and asked "
                                  "for 2.9 KiB (3000 bytes)"), "%s", err.msg);
    ck_assert_uint_eq(atomic_load(&acct->ooms), 1);
    ck_assert_uint_eq(atomic_load(&acct->current), 2048);
    slim_mem_stats s = stats_of(a);
    ck_assert_uint_eq(s.num_ooms, 1);
    ck_assert_uint_eq(s.num_alloc_retries, 0);
    /* Exactly up to the limit is allowed. */
    slim_block *c = must_alloc(a, 2048);
    ck_assert_uint_eq(atomic_load(&acct->current), 4096);

    slim_allocator_free(a, b);
    slim_allocator_free(a, c);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);
    ck_assert_uint_eq(atomic_load(&acct->peak), 4096);
    ck_assert_int_eq(atomic_load(&acct->refs), 1);
    ck_assert_ptr_eq(slim_mem_account_enter(prev), acct);
    slim_mem_account_unref(acct);
    slim_allocator_free_all(a);
}
END_TEST

/* A device OOM is charged to the account that asked. */
START_TEST(test_account_counts_device_oom)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_mem_account *acct = slim_mem_account_new("model \"x\"", 0);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    tb.refuse = true;
    slim_err err = {0};
    slim_block *none;
    ck_assert_ptr_null(slim_allocator_alloc(a, 5 * MiB, &none, &err));
    ck_assert_uint_eq(atomic_load(&acct->ooms), 1);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);  /* the charge was undone */
    ck_assert_int_eq(atomic_load(&acct->refs), 1);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
    slim_allocator_free_all(a);
}
END_TEST

/* An account keeps figures per device, each with its own limit beside the
 * total's: a model may be held to so much of a GPU whatever it holds on the
 * host. */
START_TEST(test_account_device_limits)
{
    ck_assert_int_eq(slim_mem_device_slot("cpu"), 0);
    ck_assert_int_eq(slim_mem_device_slot("cuda:0"), 1);
    ck_assert_int_eq(slim_mem_device_slot("cuda:15"), 16);
    ck_assert_int_eq(slim_mem_device_slot("cuda:16"), -1);
    ck_assert_int_eq(slim_mem_device_slot("cuda:"), -1);
    ck_assert_int_eq(slim_mem_device_slot("cuda:-1"), -1);
    ck_assert_int_eq(slim_mem_device_slot("cuda:1x"), -1);
    ck_assert_int_eq(slim_mem_device_slot("tpu:0"), -1);
    char name[16];
    ck_assert_str_eq(slim_mem_device_slot_name(16, name, sizeof(name)), "cuda:15");

    test_backend tb_cpu, tb_gpu, tb_other;
    slim_allocator *cpu = new_allocator(&tb_cpu, "cpu");
    slim_allocator *gpu = new_allocator(&tb_gpu, "cuda:1");
    slim_allocator *other = new_allocator(&tb_other, "test");
    slim_mem_account *acct = slim_mem_account_new("model \"g\"", 0);
    ck_assert_ptr_nonnull(acct);
    slim_err err = {0};
    ck_assert_int_eq(slim_mem_account_set_device_limit(acct, "cuda:1", 8 * KiB, &err), SLIM_OK);
    ck_assert_int_eq(slim_mem_account_set_device_limit(acct, "tpu:0", KiB, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"tpu:0\""), "%s", err.msg);
    slim_mem_account *prev = slim_mem_account_enter(acct);

    slim_block *g1 = must_alloc(gpu, 6 * KiB);
    slim_block *none;
    err = (slim_err){0};
    ck_assert_ptr_null(slim_allocator_alloc(gpu, 4 * KiB, &none, &err));
    ck_assert_int_eq(err.status, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "out of memory on cuda:1: model \"g\" holds 6.0 KiB of its "
                                  "8.0 KiB limit there"), "%s", err.msg);
    ck_assert_uint_eq(atomic_load(&acct->ooms), 1);
    /* The refused charge left neither the total nor the slot raised. */
    ck_assert_uint_eq(atomic_load(&acct->current), 6 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[2].current), 6 * KiB);
    /* The host has no limit of its own; a device without a slot charges
     * only the total. */
    slim_block *c1 = must_alloc(cpu, 20 * KiB);
    slim_block *o1 = must_alloc(other, 2 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[0].current), 20 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[2].current), 6 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->current), 28 * KiB);
    /* The total's limit still caps the sum over devices. */
    atomic_store(&acct->limit, 29 * KiB);
    err = (slim_err){0};
    ck_assert_ptr_null(slim_allocator_alloc(cpu, 2 * KiB, &none, &err));
    ck_assert_msg(strstr(err.msg, "holds 28.0 KiB of its 29.0 KiB limit and asked"), "%s",
                  err.msg);
    ck_assert_uint_eq(atomic_load(&acct->dev[0].current), 20 * KiB);
    /* Exactly up to the device limit is allowed. */
    slim_block *g2 = must_alloc(gpu, KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[2].current), 7 * KiB);
    /* A limit below what the account holds there is refused. */
    err = (slim_err){0};
    ck_assert_int_eq(slim_mem_account_set_device_limit(acct, "cuda:1", 4 * KiB, &err), SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "below the 7.0 KiB it already holds there"), "%s", err.msg);
    ck_assert_uint_eq(atomic_load(&acct->dev[2].limit), 8 * KiB);
    slim_mem_account_enter(prev);

    /* Frees from any thread credit the slot they were charged to. */
    slim_allocator_free(gpu, g1);
    slim_allocator_free(gpu, g2);
    slim_allocator_free(cpu, c1);
    slim_allocator_free(other, o1);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++)
        ck_assert_uint_eq(atomic_load(&acct->dev[i].current), 0);
    ck_assert_uint_eq(atomic_load(&acct->dev[0].peak), 20 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[2].peak), 7 * KiB);
    ck_assert_uint_eq(atomic_load(&acct->dev[1].peak), 0);
    ck_assert_uint_eq(atomic_load(&acct->peak), 29 * KiB);
    ck_assert_int_eq(atomic_load(&acct->refs), 1);
    slim_mem_account_unref(acct);
    slim_allocator_free_all(cpu);
    slim_allocator_free_all(gpu);
    slim_allocator_free_all(other);
}
END_TEST

typedef struct {
    slim_allocator *a;
    slim_mem_account *acct;
    slim_block *blocks[3];
} producer_args;

static void *producer(void *arg)
{
    producer_args *pa = arg;
    slim_mem_account *prev = slim_mem_account_enter(pa->acct);
    for (int i = 0; i < 3; i++)
        pa->blocks[i] = must_alloc(pa->a, 1000);
    slim_mem_account_enter(prev);
    return NULL;
}

START_TEST(test_account_attribution_across_threads)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    producer_args pa = {.a = a, .acct = slim_mem_account_new("model \"b\"", 0)};
    ck_assert_ptr_nonnull(pa.acct);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, producer, &pa), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    /* The other thread's account is not this thread's. */
    ck_assert_ptr_null(slim_mem_account_current());
    ck_assert_uint_eq(atomic_load(&pa.acct->current), 3 * 1024);
    ck_assert_int_eq(atomic_load(&pa.acct->refs), 4);

    /* This thread's own allocations charge nobody. */
    slim_block *mine = must_alloc(a, 5000);
    ck_assert_uint_eq(atomic_load(&pa.acct->current), 3 * 1024);

    /* The owner lets go; the blocks keep the account alive, and freeing
     * them here credits it. ASan would see a use after free or a leak. */
    slim_mem_account *acct = pa.acct;
    slim_mem_account_unref(acct);
    ck_assert_int_eq(atomic_load(&acct->refs), 3);
    slim_allocator_free(a, pa.blocks[0]);
    slim_allocator_free(a, pa.blocks[1]);
    ck_assert_uint_eq(atomic_load(&acct->current), 1024);
    ck_assert_int_eq(atomic_load(&acct->refs), 1);
    slim_allocator_free(a, pa.blocks[2]);     /* the last reference goes */
    slim_allocator_free(a, mine);
    ck_assert_int_eq(stats_of(a).allocated_bytes[SLIM_POOL_ALL].current, 0);
    slim_allocator_free_all(a);
}
END_TEST

START_TEST(test_free_all_credits_accounts)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_mem_account *acct = slim_mem_account_new("model \"c\"", 0);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    must_alloc(a, 1000);
    must_alloc(a, 3 * MiB);
    slim_mem_account_enter(prev);
    ck_assert_int_eq(atomic_load(&acct->refs), 3);
    slim_allocator_free_all(a);
    ck_assert_int_eq(tb.frees, tb.allocs);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);
    ck_assert_int_eq(atomic_load(&acct->refs), 1);
    slim_mem_account_unref(acct);
}
END_TEST

START_TEST(test_account_null_safe)
{
    slim_mem_account_ref(NULL);
    slim_mem_account_unref(NULL);
    ck_assert_ptr_null(slim_mem_account_enter(NULL));
    ck_assert_ptr_null(slim_mem_account_current());
    /* A name longer than the field is cut, not overrun. */
    char name[300];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    slim_mem_account *acct = slim_mem_account_new(name, 0);
    ck_assert_uint_eq(strlen(acct->name), sizeof(acct->name) - 1);
    slim_mem_account_unref(acct);
}
END_TEST

/* ---- the CPU device ------------------------------------------------------------------ */

START_TEST(test_cpu_device_buffers)
{
    slim_device *dev = slim_device_cpu();
    ck_assert_ptr_eq(dev, slim_device_cpu());
    ck_assert_ptr_nonnull(dev->alloc);
    ck_assert_str_eq(dev->name, "cpu");
    ck_assert_str_eq(slim_allocator_device(dev->alloc), "cpu");
    slim_mem_account *acct = slim_mem_account_new("model \"dev\"", 0);
    slim_mem_account *prev = slim_mem_account_enter(acct);

    slim_buffer *b;
    slim_err err = {0};
    ck_assert_int_eq(slim_buffer_new(dev, 1000, &b, &err), SLIM_OK);
    ck_assert_ptr_nonnull(b->ptr);
    ck_assert_uint_eq((uintptr_t)b->ptr % 64, 0);
    ck_assert_uint_eq(b->size, 1000);
    ck_assert_uint_eq(slim_block_size(b->block), 1024);
    memset(b->ptr, 0xab, 1000);
    ck_assert_uint_eq(atomic_load(&acct->current), 1024);
    slim_buffer_ref(b);
    slim_buffer_unref(b);
    ck_assert_uint_eq(atomic_load(&acct->current), 1024);
#ifdef TEST_ASAN
    /* Cached memory stays guarded: addressable up to the 64-byte multiple
     * past what was asked for, poisoned beyond and after the unref. */
    slim_buffer *odd;
    ck_assert_int_eq(slim_buffer_new(dev, 900, &odd, &err), SLIM_OK);
    char *q = odd->ptr;
    ck_assert(!__asan_address_is_poisoned(q) && !__asan_address_is_poisoned(q + 959));
    ck_assert(__asan_address_is_poisoned(q + 960));
    slim_buffer_unref(odd);
    ck_assert(__asan_address_is_poisoned(q));
    char *p = b->ptr;
#endif
    slim_buffer_unref(b);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);
#ifdef TEST_ASAN
    ck_assert(__asan_address_is_poisoned(p));
#endif

    slim_buffer *empty;
    ck_assert_int_eq(slim_buffer_new(dev, 0, &empty, &err), SLIM_OK);
    ck_assert_ptr_null(empty->ptr);
    ck_assert_ptr_null(empty->block);
    slim_buffer_unref(empty);

    /* Under a device limit the allocator's message comes through. */
    size_t old = slim_allocator_limit(dev->alloc);
    slim_allocator_set_limit(dev->alloc, 64 * MiB);
    slim_buffer *none = (slim_buffer *)1;
    ck_assert_int_eq(slim_buffer_new(dev, 100 * MiB, &none, &err), SLIM_EOOM);
    ck_assert_ptr_null(none);
    ck_assert_msg(strstr(err.msg, "out of memory on cpu: tried to allocate 100.0 MiB "
                                  "(104857600 bytes)") && strstr(err.msg, "limit 64.0 MiB"),
                  "%s", err.msg);
    /* No err given: the status alone still says why. */
    ck_assert_int_eq(slim_buffer_new(dev, 100 * MiB, &none, NULL), SLIM_EOOM);
    ck_assert_uint_eq(atomic_load(&acct->ooms), 2);
    ck_assert_uint_eq(atomic_load(&acct->current), 0);
    slim_allocator_set_limit(dev->alloc, old);

    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
}
END_TEST

/* ---- text ------------------------------------------------------------------------------ */

START_TEST(test_parse_bytes)
{
    static const struct { const char *text; size_t bytes; } good[] = {
        {"0", 0},
        {"1000000", 1000000},
        {"2GiB", (size_t)2 << 30},
        {"512Mi", (size_t)512 << 20},
        {"1.5g", (size_t)3 << 29},
        {"2g", (size_t)2 << 30},
        {"64k", 64 << 10},
        {"64KIB", 64 << 10},
        {"10MB", 10000000},
        {"10mb", 10000000},
        {"1KB", 1000},
        {"3T", (size_t)3 << 40},
        {"1tb", 1000000000000ull},
        {" 2 GiB ", (size_t)2 << 30},
        {"100B", 100},
        {"0.5k", 512},
        {".5m", (size_t)1 << 19},
        {"7.", 7},
        {"1.0", 1},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        size_t out = 12345;
        slim_err err = {0};
        ck_assert_msg(slim_parse_bytes(good[i].text, &out, &err), "%s: %s", good[i].text, err.msg);
        ck_assert_msg(out == good[i].bytes, "%s: %zu, expected %zu", good[i].text, out,
                      good[i].bytes);
    }
    static const char *const bad[] = {
        "", "   ", "abc", "-1", "12q", "1..5", "GiB", "2 G B", "1.5", "0x10", "1e9",
        "99999999999999999999", "20000000T", "2GiBs", "+5",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t out = 12345;
        slim_err err = {0};
        ck_assert_msg(!slim_parse_bytes(bad[i], &out, &err), "\"%s\" parsed as %zu", bad[i], out);
        ck_assert_int_eq(err.status, SLIM_EINVAL);
        char quoted[64];
        snprintf(quoted, sizeof(quoted), "\"%s\"", bad[i]);
        ck_assert_msg(strstr(err.msg, quoted), "message does not name %s: %s", quoted, err.msg);
        ck_assert_uint_eq(out, 12345);
    }
    slim_err err = {0};
    size_t out;
    ck_assert(!slim_parse_bytes(NULL, &out, &err));
    ck_assert_int_eq(err.status, SLIM_EINVAL);
    ck_assert(!slim_parse_bytes("12q", &out, &err));
    ck_assert_msg(strstr(err.msg, "unknown unit \"q\""), "%s", err.msg);
}
END_TEST

START_TEST(test_format_bytes)
{
    char buf[32];
    ck_assert_str_eq(slim_format_bytes(0, buf, sizeof(buf)), "0 B");
    ck_assert_str_eq(slim_format_bytes(1023, buf, sizeof(buf)), "1023 B");
    ck_assert_str_eq(slim_format_bytes(1024, buf, sizeof(buf)), "1.0 KiB");
    ck_assert_str_eq(slim_format_bytes(12 * MiB, buf, sizeof(buf)), "12.0 MiB");
    ck_assert_str_eq(slim_format_bytes(MiB - 1, buf, sizeof(buf)), "1.0 MiB");
    ck_assert_str_eq(slim_format_bytes((size_t)3 << 29, buf, sizeof(buf)), "1.5 GiB");
    ck_assert_str_eq(slim_format_bytes((size_t)2 << 40, buf, sizeof(buf)), "2.0 TiB");
    ck_assert_str_eq(slim_format_bytes(SIZE_MAX, buf, sizeof(buf)), "16.0 EiB");
    char tiny[4];
    ck_assert_str_eq(slim_format_bytes(12 * MiB, tiny, sizeof(tiny)), "12.");
}
END_TEST

START_TEST(test_summary)
{
    test_backend tb;
    slim_allocator *a = new_allocator(&tb, "test");
    slim_allocator_set_limit(a, (size_t)2 << 30);
    slim_block *b = must_alloc(a, 3 * MiB);
    must_alloc(a, 1000);
    slim_allocator_free(a, b);
    slim_mem_stats s = stats_of(a);
    char *text = slim_mem_stats_summary(&s, slim_allocator_device(a));
    ck_assert_ptr_nonnull(text);
    static const char *const want[] = {
        "test", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed", "Allocated memory",
        "Active memory", "Requested memory", "Reserved memory",
        "Non-releasable memory (inactive split)", "Allocations", "Active allocs",
        "Reserved segments", "Non-releasable allocs", "from large pool", "from small pool",
        "22.0 MiB", "OOMs 0", "limit 2.0 GiB",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(text, want[i]), "summary lacks \"%s\":\n%s", want[i], text);
    /* Allocated memory: 1.0 KiB now, 3.0 MiB + 1.0 KiB at the peak. */
    const char *row = strstr(text, "Allocated memory");
    ck_assert_msg(strstr(row, "1.0 KiB") && strstr(row, "3.0 MiB"), "%s", text);
    free(text);
    slim_allocator_free_all(a);
}
END_TEST

static Suite *alloc_accounts_suite(void)
{
    Suite *s = suite_create("alloc_accounts");
    TCase *tc = tcase_create("accounts");
    tcase_add_test(tc, test_account_limit);
    tcase_add_test(tc, test_account_device_limits);
    tcase_add_test(tc, test_account_counts_device_oom);
    tcase_add_test(tc, test_account_attribution_across_threads);
    tcase_add_test(tc, test_free_all_credits_accounts);
    tcase_add_test(tc, test_account_null_safe);
    suite_add_tcase(s, tc);
    tc = tcase_create("device");
    tcase_add_test(tc, test_cpu_device_buffers);
    suite_add_tcase(s, tc);
    tc = tcase_create("text");
    tcase_add_test(tc, test_parse_bytes);
    tcase_add_test(tc, test_format_bytes);
    tcase_add_test(tc, test_summary);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(alloc_accounts_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
