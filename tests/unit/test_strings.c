/*
 * test_strings.c - string tensors (runtime/string_tensor.c): elements set
 * and read back, bytes charged to the account and given back with the
 * tensor, copies that outlive their source, hostile slots refused, and
 * the string operators (kernels/cpu/strings*.c).
 */
#include "testutil.h"
#include "alloc.h"
#include "slim_init.h"
#include "string_tensor.h"

#include <stdlib.h>
#include <string.h>

/* A string tensor of n elements from NUL-terminated strings. */
static slim_tensor str_tensor(int ndim, const int64_t *dims, const char *const *s)
{
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = ndim};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)ndim);
    slim_err err = {0};
    ck_assert_int_eq(slim_tensor_alloc(&t, &err), SLIM_OK);
    for (int64_t i = 0; i < slim_tensor_numel(&t); i++)
        ck_assert_int_eq(slim_tensor_string_set(&t, i, s[i], strlen(s[i]), &err), SLIM_OK);
    return t;
}

static void assert_strings(const slim_tensor *t, int64_t n, const char *const *want)
{
    ck_assert_int_eq(t->dtype, SLIM_STRING);
    ck_assert_int_eq(slim_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(t, i, &len);
        ck_assert_msg(len == strlen(want[i]) && (!len || memcmp(s, want[i], len) == 0),
                      "element %lld: got \"%.*s\", want \"%s\"", (long long)i, (int)len,
                      s ? s : "", want[i]);
    }
}

START_TEST(test_layout_set_get_account)
{
    slim_mem_account *acct = slim_mem_account_new("strings", 0);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_err err = {0};
    const char *v[] = {"", "a", "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac"};
    slim_tensor t = str_tensor(2, (int64_t[]){2, 2}, v);
    assert_strings(&t, 4, v);
    ck_assert_uint_eq(slim_tensor_string_total(&t), 0 + 1 + 6 + 6);
    ck_assert_uint_eq(slim_tensor_nbytes(&t), 4 * sizeof(slim_str));
    /* Bytes with a NUL inside are kept whole. */
    ck_assert_int_eq(slim_tensor_string_set(&t, 0, "x\0y", 3, &err), SLIM_OK);
    size_t len;
    const char *s = slim_tensor_string_get(&t, 0, &len);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(memcmp(s, "x\0y", 3), 0);
    /* Out of range, too long, not a string tensor: refused with a reason. */
    ck_assert_int_eq(slim_tensor_string_set(&t, 4, "z", 1, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "element 4 of 4"), "%s", err.msg);
    ck_assert_int_eq(slim_tensor_string_set(&t, 1, "z", SLIM_STRING_MAX_LEN + 1, &err),
                     SLIM_EINVAL);
    ck_assert_ptr_null(slim_tensor_string_get(&t, -1, &len));
    slim_tensor f = tu_f32(1, (int64_t[]){1}, (float[]){1});
    ck_assert_int_eq(slim_tensor_string_set(&f, 0, "z", 1, &err), SLIM_ETYPE);
    slim_tensor_release(&f);
    /* A copy outlives its source. */
    slim_tensor c;
    ck_assert_int_eq(slim_tensor_string_copy(&c, &t, &err), SLIM_OK);
    ck_assert(acct->current > 0);
    slim_tensor_release(&t);
    s = slim_tensor_string_get(&c, 2, &len);
    ck_assert_uint_eq(len, 6);
    ck_assert_int_eq(memcmp(s, "h\xc3\xa9llo", 6), 0);
    slim_tensor_release(&c);
    /* Slots and bytes went back: the account holds nothing. */
    ck_assert_uint_eq(acct->current, 0);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
}
END_TEST

START_TEST(test_bytes_charged_under_limit)
{
    /* 1 MiB limit: a 4 MiB element does not fit, a small one does. */
    slim_mem_account *acct = slim_mem_account_new("strings", 1 << 20);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_err err = {0};
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = 1, .dims = {2}};
    ck_assert_int_eq(slim_tensor_alloc(&t, &err), SLIM_OK);
    size_t big = (size_t)4 << 20;
    char *buf = calloc(big, 1);
    ck_assert_int_eq(slim_tensor_string_set(&t, 0, buf, big, &err), SLIM_EOOM);
    ck_assert_int_eq(slim_tensor_string_set(&t, 1, buf, 1000, &err), SLIM_OK);
    free(buf);
    slim_tensor_release(&t);
    ck_assert_uint_eq(acct->current, 0);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
}
END_TEST

START_TEST(test_own_copies_foreign_bytes)
{
    const char *v[] = {"alpha", "beta", ""};
    slim_tensor a = str_tensor(1, (int64_t[]){3}, v);
    slim_tensor b = {.dtype = SLIM_STRING, .ndim = 1, .dims = {3}};
    slim_err err = {0};
    ck_assert_int_eq(slim_tensor_alloc(&b, &err), SLIM_OK);
    /* What a Gather does: whole slots copied, pointing at a's bytes. */
    memcpy(b.data, a.data, 3 * sizeof(slim_str));
    ck_assert_int_eq(slim_tensor_string_set(&b, 2, "own", 3, &err), SLIM_OK);
    ck_assert_int_eq(slim__tensor_string_own(&b, &err), SLIM_OK);
    slim_tensor_release(&a);
    assert_strings(&b, 3, (const char *[]){"alpha", "beta", "own"});
    /* A slot with a length and no bytes is refused, not read. */
    ((slim_str *)b.data)[0] = (slim_str){NULL, 5};
    ck_assert_int_eq(slim__tensor_string_own(&b, &err), SLIM_EINTERNAL);
    slim_tensor_release(&b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("strings");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layout_set_get_account);
    tcase_add_test(tc, test_bytes_charged_under_limit);
    tcase_add_test(tc, test_own_copies_foreign_bytes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
