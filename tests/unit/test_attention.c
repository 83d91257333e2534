/*
 * test_attention.c - Attention, RotaryEmbedding and LRN beyond the ONNX node
 * tests: a grouped-query case checked against a hand computation, and the
 * malformed inputs that must be clear errors (never a crash): mismatched
 * heads, a mask that does not broadcast, a half-given cache, 3D inputs
 * without head counts, position ids past the caches, LRN without size.
 */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static slim_status run1(slim_graph *g, slim_tensor *in, int n, slim_tensor **out, int *n_out,
                        slim_err *err)
{
    slim_status st = tu_run(g, in, n, out, n_out, err);
    tu_free_inputs(in, n);
    return st;
}

START_TEST(test_gqa_matches_hand_computation)
{
    /* 2 query heads share 1 key/value head; T = 2 keys, D = 1. */
    slim_graph *g = tu_graph("Attention", 23, 3, (const char *[]){"q", "k", "v"}, 1);
    slim_tensor in[3] = {tu_f32(4, (int64_t[]){1, 2, 1, 1}, (float[]){1, -1}),
                         tu_f32(4, (int64_t[]){1, 1, 2, 1}, (float[]){0, 2}),
                         tu_f32(4, (int64_t[]){1, 1, 2, 1}, (float[]){10, 20})};
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(run1(g, in, 3, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 2, 1, 1});
    /* head 0: scores (0, 2), head 1: (0, -2); scale 1/sqrt(1). */
    double p0 = 1 / (1 + exp(-2.0)), p1 = 1 / (1 + exp(2.0));
    float want[2] = {(float)(10 * (1 - p0) + 20 * p0), (float)(10 * (1 - p1) + 20 * p1)};
    tu_assert_close_f32(&out[0], want, 2, 1e-5);
    slim_tensors_free(out, n_out);
}
END_TEST

static void expect_error(slim_graph *g, slim_tensor *in, int n, slim_status want,
                         const char *words)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err = {0};
    ck_assert_int_eq(run1(g, in, n, &out, &n_out, &err), want);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, words) != NULL, "message \"%s\" lacks \"%s\"", err.msg, words);
}

START_TEST(test_attention_refuses_malformed_inputs)
{
    /* 3 query heads cannot share 2 key/value heads. */
    slim_graph *g = tu_graph("Attention", 23, 3, (const char *[]){"q", "k", "v"}, 1);
    slim_tensor a[3] = {tu_f32(4, (int64_t[]){1, 3, 1, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 2, 1, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 2, 1, 2}, NULL)};
    expect_error(g, a, 3, SLIM_ESHAPE, "not a multiple");

    /* A mask with 3 query rows for 2 queries. */
    g = tu_graph("Attention", 23, 4, (const char *[]){"q", "k", "v", "m"}, 1);
    slim_tensor b[4] = {tu_f32(4, (int64_t[]){1, 1, 2, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 2, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 2, 2}, NULL),
                        tu_f32(2, (int64_t[]){3, 2}, NULL)};
    expect_error(g, b, 4, SLIM_ESHAPE, "attn_mask");

    /* past_key without past_value. */
    g = tu_graph("Attention", 23, 5, (const char *[]){"q", "k", "v", "", "pk"}, 1);
    slim_tensor c[4] = {tu_f32(4, (int64_t[]){1, 1, 1, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 1, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 1, 2}, NULL),
                        tu_f32(4, (int64_t[]){1, 1, 3, 2}, NULL)};
    expect_error(g, c, 4, SLIM_EINVAL, "together");

    /* 3D inputs need the head counts. */
    g = tu_graph("Attention", 23, 3, (const char *[]){"q", "k", "v"}, 1);
    slim_tensor d[3] = {tu_f32(3, (int64_t[]){1, 2, 4}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 4}, NULL),
                        tu_f32(3, (int64_t[]){1, 2, 4}, NULL)};
    expect_error(g, d, 3, SLIM_EINVAL, "q_num_heads");
}
END_TEST

START_TEST(test_rotary_refuses_bad_positions)
{
    slim_graph *g = tu_graph("RotaryEmbedding", 23, 4, (const char *[]){"x", "c", "s", "p"}, 1);
    slim_tensor in[4] = {tu_f32(4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4}),
                         tu_f32(2, (int64_t[]){4, 1}, (float[]){1, 1, 1, 1}),
                         tu_f32(2, (int64_t[]){4, 1}, (float[]){0, 0, 0, 0}),
                         tu_i64(2, (int64_t[]){1, 2}, (int64_t[]){0, 9})};
    expect_error(g, in, 4, SLIM_EINVAL, "position_ids holds 9");
}
END_TEST

START_TEST(test_lrn_needs_size)
{
    slim_graph *g = tu_graph("LRN", 13, 1, (const char *[]){"x"}, 1);
    slim_tensor in[1] = {tu_f32(4, (int64_t[]){1, 2, 1, 1}, (float[]){1, 2})};
    expect_error(g, in, 1, SLIM_EPARSE, "size");
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("attention");
    tcase_add_test(tc, test_gqa_matches_hand_computation);
    tcase_add_test(tc, test_attention_refuses_malformed_inputs);
    tcase_add_test(tc, test_rotary_refuses_bad_positions);
    tcase_add_test(tc, test_lrn_needs_size);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
