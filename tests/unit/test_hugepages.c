/*
 * test_hugepages.c - transparent huge pages on the CPU device
 * (runtime/device.c): by default only the 2 MiB pages wholly inside a
 * buffer its owner writes whole (slim_buffer_advise_whole: packed weights),
 * with SLIM_THP=1 every large segment, with SLIM_THP=0 none.
 *
 * What the kernel does with the advice depends on the host's setting
 * (/sys/kernel/mm/transparent_hugepage/enabled): with "never" (or no THP
 * at all) there is nothing to see and the cases say so and pass; with
 * "madvise" a buffer gets huge pages exactly when asked; with "always" it
 * gets them either way, so only the "asked" half is checked. The kernel
 * may also lack free 2 MiB pages at the moment: a fresh mapping of 64 MiB,
 * written whole, on a host that is not out of memory, gets some.
 */
#include "testutil.h"

#include "alloc.h"
#include "device.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define BIG ((size_t)64 << 20)

/* The host's THP mode: 'a'lways, 'm'advise, 'n'ever (or unknown). */
static char thp_mode(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = {0};
    if (!f)
        return 'n';
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    if (strstr(line, "[always]"))
        return 'a';
    if (strstr(line, "[madvise]"))
        return 'm';
    return 'n';
}

/* AnonHugePages (kB) summed over the mappings that overlap [p, p + n)
 * (advice on part of a mapping splits it in several), or -1 when none
 * does. */
static long huge_kb_in(const void *p, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool in = false;
    long total = -1;
    const unsigned long a = (unsigned long)p, z = a + n;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo < z && hi > a;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            total = (total < 0 ? 0 : total) + kb;
    }
    fclose(f);
    return total;
}

static long huge_kb_at(const void *p)
{
    return huge_kb_in(p, 1);
}

/* A new buffer of BIG bytes from a cache emptied first (a cached segment
 * would have been mapped under the earlier setting), written whole. */
static slim_buffer *fresh_big(void)
{
    slim_allocator_empty_cache(slim_device_cpu()->alloc);
    slim_buffer *b = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_buffer_new(slim_device_cpu(), BIG, &b, &err) == SLIM_OK, "%s", err.msg);
    memset(b->ptr, 1, BIG);
    return b;
}

START_TEST(test_large_segment_asks)
{
    setenv("SLIM_THP", "1", 1);
    char mode = thp_mode();
    if (mode == 'n') {
        printf("THP is off on this host: nothing to check\n");
        return;
    }
    slim_buffer *b = fresh_big();
    long kb = huge_kb_at(b->ptr);
    ck_assert_msg(kb > 0, "a %zu MiB buffer has %ld kB of huge pages (THP mode %c)",
                  BIG >> 20, kb, mode);
    slim_buffer_unref(b);
    unsetenv("SLIM_THP");
}
END_TEST

START_TEST(test_off_does_not_ask)
{
    unsetenv("SLIM_THP"); /* the default: a buffer not advised whole (an arena) is not asked */
    char mode = thp_mode();
    slim_buffer *b = fresh_big();
    long kb = huge_kb_at(b->ptr);
    ck_assert_msg(kb >= 0, "the buffer's mapping is not in /proc/self/smaps");
    if (mode == 'm')
        ck_assert_msg(kb == 0, "SLIM_THP unset, yet %ld kB of huge pages", kb);
    slim_buffer_unref(b);
    unsetenv("SLIM_THP");
}
END_TEST

static bool kernel_at_least(int major, int minor)
{
    struct utsname u;
    int ma = 0, mi = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
        return false;
    return ma > major || (ma == major && mi >= minor);
}

/* A buffer of 64 MiB + 1 MiB (a segment of its own, 66 MiB, 2 MiB-aligned)
 * advised whole under the default: huge pages on its first 64 MiB at most,
 * never on the last megabyte it shares with the segment's unused tail. */
static void check_whole(bool reused)
{
    const size_t size = BIG + ((size_t)1 << 20);
    slim_allocator_empty_cache(slim_device_cpu()->alloc);
    slim_buffer *b = NULL;
    slim_err err = {0};
    if (reused) {
        /* Its memory touched on small pages first and back in the cache:
         * the advice drops them, and a kernel that frees the emptied page
         * tables (6.14+) gives huge ones at the next touch. */
        ck_assert(slim_buffer_new(slim_device_cpu(), size, &b, &err) == SLIM_OK);
        memset(b->ptr, 3, size);
        void *first = b->ptr;
        slim_buffer_unref(b);
        ck_assert(slim_buffer_new(slim_device_cpu(), size, &b, &err) == SLIM_OK);
        ck_assert_msg(b->ptr == first, "the cached block was not reused");
    } else {
        ck_assert_msg(slim_buffer_new(slim_device_cpu(), size, &b, &err) == SLIM_OK, "%s", err.msg);
    }
    slim_buffer_advise_whole(b);
    memset(b->ptr, 1, size);
    ck_assert_msg(b->huge, "advise_whole did not take a %zu MiB host buffer", size >> 20);
    const long kb = huge_kb_in(b->ptr, size);
    if (!reused || kernel_at_least(6, 14))
        ck_assert_msg(kb > 0, "a buffer advised whole has %ld kB of huge pages (reused %d)", kb,
                      reused);
    else
        printf("reused memory on a kernel before 6.14: %ld kB huge (khugepaged's to do)\n", kb);
    ck_assert_msg(kb <= (long)(BIG >> 10), "%ld kB of huge pages in a buffer whose whole "
                  "2 MiB pages hold %zu kB", kb, BIG >> 10);
    ck_assert_int_eq(((unsigned char *)b->ptr)[size - 1], 1);
    slim_buffer_unref(b);
}

START_TEST(test_whole_buffer_asks_by_default)
{
    unsetenv("SLIM_THP");
    if (thp_mode() == 'n') {
        printf("THP is off on this host: nothing to check\n");
        return;
    }
    check_whole(false);
    check_whole(true);
}
END_TEST

START_TEST(test_whole_buffer_off)
{
    setenv("SLIM_THP", "0", 1);
    char mode = thp_mode();
    slim_buffer *b = fresh_big();
    slim_buffer_advise_whole(b);
    ck_assert_msg(!b->huge, "SLIM_THP=0, yet advise_whole took the buffer");
    if (mode == 'm')
        ck_assert_msg(huge_kb_in(b->ptr, BIG) == 0, "SLIM_THP=0, yet huge pages");
    slim_buffer_unref(b);
    /* Not the CPU's, or nothing: nothing to do, and no crash. */
    slim_buffer_advise_whole(NULL);
    unsetenv("SLIM_THP");
}
END_TEST

START_TEST(test_small_buffer_unchanged)
{
    /* The small pool's buffers still come back usable and zero-sized ones
     * still work: the advice touches nothing else. */
    unsetenv("SLIM_THP");
    slim_buffer *b = NULL;
    slim_err err = {0};
    ck_assert(slim_buffer_new(slim_device_cpu(), 4096, &b, &err) == SLIM_OK);
    memset(b->ptr, 7, 4096);
    ck_assert_int_eq(((unsigned char *)b->ptr)[4095], 7);
    slim_buffer_unref(b);
    ck_assert(slim_buffer_new(slim_device_cpu(), 0, &b, &err) == SLIM_OK);
    slim_buffer_unref(b);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("hugepages");
    TCase *tc = tcase_create("thp");
    tcase_add_test(tc, test_large_segment_asks);
    tcase_add_test(tc, test_off_does_not_ask);
    tcase_add_test(tc, test_whole_buffer_asks_by_default);
    tcase_add_test(tc, test_whole_buffer_off);
    tcase_add_test(tc, test_small_buffer_unchanged);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
