/*
 * test_strings.c - string tensors (runtime/string_tensor.c): elements set
 * and read back, bytes charged to the account and given back with the
 * tensor, copies that outlive their source, hostile slots refused, and
 * the string operators (kernels/cpu/strings*.c).
 */
#include "testutil.h"
#include "alloc.h"
#include "slim_init.h"
#include "npy.h"
#include "plan.h"
#include "string_tensor.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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


/* ---- operators: refusals and limits -------------------------------------- */

START_TEST(test_numeric_op_refuses_strings)
{
    slim_graph *g = tu_graph("Add", 14, 2, (const char *[]){"a", "b"}, 1);
    slim_tensor in[2] = {str_tensor(1, (int64_t[]){1}, (const char *[]){"1"}),
                         str_tensor(1, (int64_t[]){1}, (const char *[]){"2"})};
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_ne(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    ck_assert_msg(strstr(err.msg, "string"), "%s", err.msg);
    tu_free_inputs(in, 2);
}
END_TEST

START_TEST(test_split_huge_count_refused)
{
    /* 300 strings, one with a million delimiters: 3e8 strings out, refused
     * by count before anything is sized from it. */
    size_t big = 1000000;
    char *s = malloc(big + 1);
    memset(s, ',', big);
    s[big] = 0;
    const char *v[300];
    for (int i = 0; i < 300; i++)
        v[i] = i ? "x" : s;
    slim_graph *g = tu_graph("StringSplit", 20, 1, (const char *[]){"x"}, 2);
    tu_attr_s(tu_node0(g), "delimiter", ",");
    slim_tensor x = str_tensor(1, (int64_t[]){300}, v);
    free(s);
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "more than 268435456 strings out"), "%s", err.msg);
    tu_free_inputs(&x, 1);
}
END_TEST

START_TEST(test_regex_bad_pattern_and_no_blowup)
{
    slim_graph *g = tu_graph("RegexFullMatch", 20, 1, (const char *[]){"x"}, 1);
    tu_attr_s(tu_node0(g), "pattern", "(a+");
    slim_tensor x = str_tensor(1, (int64_t[]){1}, (const char *[]){"aaa"});
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    /* Refused at load (prepare), naming the pattern and what is wrong. */
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "pattern \"(a+\"") && strstr(err.msg, "missing )"), "%s",
                  err.msg);
    tu_free_inputs(&x, 1);

    /* (a+)+$ over 30 a's and a b: 2^30 paths for a backtracking engine. */
    char s[64];
    memset(s, 'a', 30);
    strcpy(s + 30, "b");
    g = tu_graph("RegexFullMatch", 20, 1, (const char *[]){"x"}, 1);
    tu_attr_s(tu_node0(g), "pattern", "(a+)+$");
    x = str_tensor(1, (int64_t[]){2}, (const char *[]){s, "aaaa"});
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms < 1000, "took %.1f ms", ms);
    ck_assert_int_eq(((uint8_t *)out[0].data)[0], 0);
    ck_assert_int_eq(((uint8_t *)out[0].data)[1], 1);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&x, 1);
}
END_TEST

START_TEST(test_bad_text_named)
{
    /* Cast of a string that holds no number names the element. */
    slim_graph *g = tu_graph("Cast", 21, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "to", 1);
    slim_tensor x = str_tensor(1, (int64_t[]){3}, (const char *[]){"1.5", " -2", "abc"});
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "element 2, \"abc\", is not a number"), "%s", err.msg);
    tu_free_inputs(&x, 1);
    /* Invalid UTF-8 where a case change needs code points. */
    g = tu_graph("StringNormalizer", 10, 1, (const char *[]){"x"}, 1);
    tu_attr_s(tu_node0(g), "case_change_action", "UPPER");
    x = str_tensor(1, (int64_t[]){2}, (const char *[]){"ok", "a\xc3(b"});
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "invalid UTF-8 at byte 1"), "%s", err.msg);
    tu_free_inputs(&x, 1);
}
END_TEST

/* ---- the planner and the account ------------------------------------------ */

/* x (one string) doubles through a chain of StringConcat while a float
 * chain runs beside it in the arena; y joins them. */
static slim_graph *chain_graph(int steps)
{
    slim_graph *g = slim_graph_new();
    g->opset = 20;
    const char *ins[2] = {"x", "n"};
    slim_dtype dts[2] = {SLIM_STRING, SLIM_F32};
    for (int i = 0; i < 2; i++) {
        int v = slim_graph_value(g, ins[i]);
        slim_graph_add_input(g, v);
        g->values[v].kind = SLIM_VALUE_INPUT;
        g->values[v].info.dtype = dts[i];
    }
    char prev[16] = "x", name[16];
    for (int k = 0; k < steps; k++) {
        snprintf(name, sizeof(name), "s%d", k);
        tu_op(g, "StringConcat", name, 2, prev, "x");
        strcpy(prev, name);
    }
    tu_op(g, "Add", "f0", 2, "n", "n");
    tu_op(g, "Mul", "f1", 2, "f0", "f0");
    tu_op(g, "Add", "f2", 2, "f1", "n");
    tu_op(g, "Mul", "f3", 2, "f2", "f2");
    tu_attr_s(tu_op(g, "RegexFullMatch", "m", 1, prev), "pattern", "(ab)+");
    tu_attr_i(tu_op(g, "Cast", "mf", 1, "m"), "to", 1);
    tu_op(g, "Add", "y", 2, "f3", "mf");
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

START_TEST(test_planner_frees_and_accounts_strings)
{
    const int steps = 6;
    const size_t mib = (size_t)1 << 20;
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(chain_graph(steps), &m, &err), SLIM_OK);
    /* x of 1 MiB: s_k is k + 2 MiB. */
    char *big = malloc(mib + 1);
    for (size_t i = 0; i < mib; i++)
        big[i] = i % 2 ? 'b' : 'a';
    big[mib] = 0;
    slim_tensor in[2] = {str_tensor(1, (int64_t[]){1}, (const char *[]){big}),
                         tu_f32(1, (int64_t[]){256}, NULL)};
    free(big);
    for (int i = 0; i < 256; i++)
        ((float *)in[1].data)[i] = (float)i;

    /* The plan: strings left out of the arena, the float chain in it with
     * its slots reused (the arena is smaller than the values laid end to
     * end). */
    const slim_plan *p;
    bool owned;
    ck_assert_int_eq(slim_model_plan(m, in, &p, &owned, &err), SLIM_OK);
    const slim_graph *g = m->graph;
    int f0 = slim_graph_find_value(g, "f0"), f2 = slim_graph_find_value(g, "f2");
    ck_assert_int_lt(p->buffer_of_value[slim_graph_find_value(g, "s0")], 0);
    ck_assert_int_ge(p->buffer_of_value[f0], 0);
    ck_assert_int_ge(p->buffer_of_value[f2], 0);
    ck_assert_uint_lt(p->arena_bytes, p->naive_bytes);
    if (owned)
        slim_plan_free((slim_plan *)p);

    size_t base = m->account->current;
    atomic_store(&m->account->peak, base);
    slim_tensor *out;
    int n_out;
    const char *names[2] = {"x", "n"};
    for (int run = 0; run < 3; run++) {
        ck_assert_int_eq(slim_model_run(m, 2, names, in, &out, &n_out, &err), SLIM_OK);
        /* n = 3: ((3+3)^2 + 3)^2 = 1521, + 1 for the match of (ab)+. */
        ck_assert_float_eq(((float *)out[0].data)[3], 1522.0f);
        slim_tensors_free(out, n_out);
        /* Everything the run held went back: the account is where it was. */
        ck_assert_uint_eq(m->account->current, base);
    }
    /* Kept alive together, s_0..s_5 would be 2+3+...+7 = 27 MiB; freed after
     * their last reader, at most two neighbours (6 + 7 MiB) at once. */
    size_t peak = m->account->peak - base;
    ck_assert_msg(peak > 13 * mib && peak < 18 * mib, "peak %zu MiB", peak / mib);
    tu_free_inputs(in, 2);
    slim_model_free(m);
}
END_TEST

/* ---- .npy ----------------------------------------------------------------- */

START_TEST(test_npy_strings_round_trip)
{
    const char *v[] = {"h\xc3\xa9llo", "", "\xe6\x97\xa5"};
    slim_tensor t = str_tensor(1, (int64_t[]){3}, v);
    char path[] = "/tmp/slim_test_strings_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    slim_err err = {0};
    ck_assert_int_eq(slim_npy_save(path, &t, &err), SLIM_OK);
    slim_tensor back;
    ck_assert_int_eq(slim_npy_load(path, &back, &err), SLIM_OK);
    assert_strings(&back, 3, v);
    slim_tensor_release(&back);
    /* Bytes that are not UTF-8 go out as '|S', and come back the same. */
    ck_assert_int_eq(slim_tensor_string_set(&t, 1, "\xff", 1, &err), SLIM_OK);
    ck_assert_int_eq(slim_npy_save(path, &t, &err), SLIM_OK);
    ck_assert_int_eq(slim_npy_load(path, &back, &err), SLIM_OK);
    assert_strings(&back, 3, (const char *[]){"h\xc3\xa9llo", "\xff", "\xe6\x97\xa5"});
    slim_tensor_release(&back);
    unlink(path);
    slim_tensor_release(&t);

    /* '<U1' holding 0x110000: not Unicode, refused naming the element. */
    unsigned char file[128] = "\x93NUMPY\x01\x00";
    const char *hdr = "{'descr': '<U1', 'fortran_order': False, 'shape': (2,), }";
    size_t hl = 118 - 10;
    file[8] = (unsigned char)hl;
    memset(file + 10, ' ', hl);
    memcpy(file + 10, hdr, strlen(hdr));
    file[10 + hl - 1] = '\n';
    unsigned char cps[8] = {'a', 0, 0, 0, 0x00, 0x00, 0x11, 0x00};
    unsigned char buf[136];
    memcpy(buf, file, 118);
    memcpy(buf + 118, cps, 8);
    ck_assert_int_eq(slim_npy_parse(buf, 126, "bad.npy", &back, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "element 1 holds code point 0x110000"), "%s", err.msg);

    /* Width 0 and 4e9 elements: no data backs them, refused before 64 GB
     * of slots are asked for (a fuzz_npy find). */
    const char *hdr0 = "{'descr': '|S0', 'fortran_order': False, 'shape': (4000000000,), }";
    memset(file + 10, ' ', hl);
    memcpy(file + 10, hdr0, strlen(hdr0));
    file[10 + hl - 1] = '\n';
    ck_assert_int_eq(slim_npy_parse(file, 118, "zero.npy", &back, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "strings of width 0 ('|S0')"), "%s", err.msg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("strings");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layout_set_get_account);
    tcase_add_test(tc, test_bytes_charged_under_limit);
    tcase_add_test(tc, test_own_copies_foreign_bytes);
    tcase_add_test(tc, test_numeric_op_refuses_strings);
    tcase_add_test(tc, test_split_huge_count_refused);
    tcase_add_test(tc, test_regex_bad_pattern_and_no_blowup);
    tcase_add_test(tc, test_bad_text_named);
    tcase_add_test(tc, test_planner_frees_and_accounts_strings);
    tcase_add_test(tc, test_npy_strings_round_trip);
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
