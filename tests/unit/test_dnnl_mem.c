/*
 * test_dnnl_mem.c - the per-thread oneDNN memory objects FusedConv binds
 * its buffers to (kernels/cpu/dnnl_mem.c): a kept memory is repointed, not
 * remade; it always has the descriptor asked for (also when a key's
 * contents change); two binds in one set never share an object, nor do two
 * threads; a repointed memory treats its buffer's padding as a new one
 * does; past the per-set limit a bind fails with an error, not a wrong
 * memory; many keys (past the table's size) still get the right ones.
 */
#include "testutil.h"

#include "slim_init.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef SLIM_HAVE_DNNL
#include "dnnl_mem.h"

static void md_of(dnnl_memory_desc_t *md, int64_t c, int64_t h, int64_t w, dnnl_format_tag_t tag)
{
    dnnl_dims_t d = {1, c, h, w};
    ck_assert_int_eq(dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag), dnnl_success);
}

static void *handle_of(dnnl_memory_t m)
{
    void *h = NULL;
    ck_assert_int_eq(dnnl_memory_get_data_handle(m, &h), dnnl_success);
    return h;
}

static bool has_md(dnnl_memory_t m, const dnnl_memory_desc_t *want)
{
    const dnnl_memory_desc_t *have = NULL;
    ck_assert_int_eq(dnnl_memory_get_memory_desc(m, &have), dnnl_success);
    return dnnl_memory_desc_equal(have, want) != 0;
}

START_TEST(kept_and_repointed)
{
    dnnl_memory_desc_t md;
    md_of(&md, 16, 4, 4, dnnl_nChw16c);
    float a[256], b[256];
    dnnl_memory_t m1, m2, m3;
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, a, &m1), dnnl_success);
    ck_assert_ptr_eq(handle_of(m1), a);
    /* same key, same set: in use, so another object */
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, b, &m2), dnnl_success);
    ck_assert_ptr_ne(m1, m2);
    ck_assert_ptr_eq(handle_of(m1), a);
    ck_assert_ptr_eq(handle_of(m2), b);
    /* next set: the kept object, pointed at the new buffer */
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, b, &m3), dnnl_success);
    ck_assert(m3 == m1 || m3 == m2);
    ck_assert_ptr_eq(handle_of(m3), b);
    ck_assert(has_md(m3, &md));
}
END_TEST

START_TEST(changed_key_gets_its_descriptor)
{
    dnnl_memory_desc_t md;
    md_of(&md, 16, 4, 4, dnnl_nChw16c);
    float buf[32 * 8 * 8];
    dnnl_memory_t m;
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, buf, &m), dnnl_success);
    /* the same address, other contents (a freed descriptor's address reused) */
    md_of(&md, 32, 8, 8, dnnl_nchw);
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, buf, &m), dnnl_success);
    ck_assert(has_md(m, &md));
}
END_TEST

/* 8 channels in nChw16c: channels 8..15 are padding, which oneDNN's kernels
 * read as zeros. Whatever a new memory does to a buffer's padding when it
 * is made, a repointed one must do the same. */
START_TEST(repointed_memory_pads_as_new)
{
    dnnl_memory_desc_t md;
    md_of(&md, 8, 2, 2, dnnl_nChw16c);
    size_t n = dnnl_memory_desc_get_size(&md) / sizeof(float);
    ck_assert_uint_eq(n, 16 * 4);
    float *fresh = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)),
          *b = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        fresh[i] = a[i] = b[i] = 7.0f;
    dnnl_engine_t eng;
    ck_assert_int_eq(dnnl_engine_create(&eng, dnnl_cpu, 0), dnnl_success);
    dnnl_memory_t made, m1, m2;
    ck_assert_int_eq(dnnl_memory_create(&made, &md, eng, fresh), dnnl_success);
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, a, &m1), dnnl_success);
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md, b, &m2), dnnl_success);
    ck_assert_ptr_eq(m1, m2); /* kept: b is the repointed memory's buffer */
    ck_assert_mem_eq(a, fresh, n * sizeof(float));
    ck_assert_mem_eq(b, fresh, n * sizeof(float));
    dnnl_memory_destroy(made);
    dnnl_engine_destroy(eng);
    free(fresh);
    free(a);
    free(b);
}
END_TEST

START_TEST(too_many_binds_fail)
{
    dnnl_memory_desc_t md[SLIM_DNNL_MEM_PER_EXEC + 1];
    float buf[16];
    dnnl_memory_t m;
    slim__dnnl_mem_begin();
    for (int i = 0; i <= SLIM_DNNL_MEM_PER_EXEC; i++) {
        md_of(&md[i], 16, 1, 1, dnnl_nchw);
        dnnl_status_t st = slim__dnnl_mem_bind(&md[i], buf, &m);
        ck_assert_int_eq(st, i < SLIM_DNNL_MEM_PER_EXEC ? dnnl_success : dnnl_runtime_error);
    }
    ck_assert_ptr_null(m);
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&md[0], buf, &m), dnnl_success);
}
END_TEST

/* Far more keys than the table holds: evicted ones are made again, and
 * every bind has its own key's descriptor. */
START_TEST(many_keys)
{
    enum { KEYS = 3000 };
    dnnl_memory_desc_t *md = malloc(sizeof(*md) * KEYS);
    float buf[64];
    for (int i = 0; i < KEYS; i++)
        md_of(&md[i], 1 + i % 64, 1, 1, dnnl_nchw);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < KEYS; i += 1 + round) {
            dnnl_memory_t m;
            slim__dnnl_mem_begin();
            ck_assert_int_eq(slim__dnnl_mem_bind(&md[i], buf, &m), dnnl_success);
            ck_assert(has_md(m, &md[i]));
        }
    free(md);
}
END_TEST

static dnnl_memory_desc_t shared_md;

static void *bind_in_thread(void *out)
{
    float buf[256];
    slim__dnnl_mem_begin();
    if (slim__dnnl_mem_bind(&shared_md, buf, (dnnl_memory_t *)out) != dnnl_success)
        *(dnnl_memory_t *)out = NULL;
    return NULL;
}

START_TEST(threads_do_not_share)
{
    md_of(&shared_md, 16, 4, 4, dnnl_nChw16c);
    float buf[256];
    dnnl_memory_t mine, theirs = NULL;
    slim__dnnl_mem_begin();
    ck_assert_int_eq(slim__dnnl_mem_bind(&shared_md, buf, &mine), dnnl_success);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, bind_in_thread, &theirs), 0);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(theirs);
    /* the thread's object went with it (its table's destructor); ours stays */
    ck_assert_ptr_ne(theirs, mine);
    ck_assert_ptr_eq(handle_of(mine), buf);
}
END_TEST
#endif

Suite *dnnl_mem_suite(void)
{
    Suite *s = suite_create("dnnl_mem");
    TCase *tc = tcase_create("dnnl_mem");
#ifdef SLIM_HAVE_DNNL
    tcase_add_test(tc, kept_and_repointed);
    tcase_add_test(tc, changed_key_gets_its_descriptor);
    tcase_add_test(tc, repointed_memory_pads_as_new);
    tcase_add_test(tc, too_many_binds_fail);
    tcase_add_test(tc, many_keys);
    tcase_add_test(tc, threads_do_not_share);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(dnnl_mem_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
