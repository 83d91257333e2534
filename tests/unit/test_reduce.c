/* test_reduce.c - the reductions, ArgMax, ArgMin, TopK, CumSum
 * (kernels/cpu/reduce.c): hand-computed cases, random cases checked against
 * direct loops written from the operator definitions, and bad inputs that
 * must fail with a status rather than crash. */
#include "test_kernel_util.h"
#include "slim_init.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_reduce_sum_split_axes)
{
    /* ReduceSum over {0, 2} of [3,4,5] (separated axes), keepdims 0. */
    slim_graph *g = tu_graph("ReduceSum", 13, 2, (const char *[]){"x", "axes"}, 1);
    tu_attr_i(tu_node0(g), "keepdims", 0);
    float x[60];
    fill_random(x, 60, 7);
    slim_tensor in[2] = {tu_f32(3, (int64_t[]){3, 4, 5}, x), tu_i64(1, (int64_t[]){2},
                                                                 (int64_t[]){0, -1})};
    int n_out;
    slim_tensor *out = run_ok(g, in, 2, &n_out);
    float want[4] = {0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 5; k++)
                want[j] += x[(i * 4 + j) * 5 + k];
    tu_assert_shape(&out[0], 1, (int64_t[]){4});
    tu_assert_close_f32(&out[0], want, 4, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
}
END_TEST

START_TEST(test_reduce_kinds_attr_axes)
{
    /* Opset 13 ReduceMean/Max/L2/LogSumExp take axes as an attribute; a
     * 1000-long row also exercises the lane accumulators. */
    enum { N = 1000 };
    float *x = malloc(sizeof(float) * 2 * N);
    fill_random(x, 2 * N, 3);
    x[N + 17] = 500; /* LogSumExp must not overflow */
    const char *ops[4] = {"ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"};
    for (int o = 0; o < 4; o++) {
        slim_graph *g = tu_graph(ops[o], 13, 1, (const char *[]){"x"}, 1);
        tu_attr_ints(tu_node0(g), "axes", 1, (int64_t[]){1});
        slim_tensor in[1] = {tu_f32(2, (int64_t[]){2, N}, x)};
        int n_out;
        slim_tensor *out = run_ok(g, in, 1, &n_out);
        float want[2];
        for (int r = 0; r < 2; r++) {
            const float *p = x + r * N;
            double acc = o == 1 || o == 3 ? -INFINITY : 0, s = 0;
            for (int i = 0; i < N; i++)
                acc = o == 0 ? acc + p[i] : o == 2 ? acc + (double)p[i] * p[i] : fmax(acc, p[i]);
            if (o == 3) {
                for (int i = 0; i < N; i++)
                    s += exp(p[i] - acc);
                acc += log(s);
            }
            want[r] = (float)(o == 0 ? acc / N : o == 2 ? sqrt(acc) : acc);
        }
        tu_assert_shape(&out[0], 2, (int64_t[]){2, 1});
        tu_assert_close_f32(&out[0], want, 2, 1e-5);
        slim_tensors_free(out, n_out);
        tu_free_inputs(in, 1);
    }
    free(x);
}
END_TEST

START_TEST(test_reduce_empty_and_noop)
{
    /* ReduceProd over an empty axis is 1; ReduceMax is -inf. */
    const char *ops[2] = {"ReduceProd", "ReduceMax"};
    for (int o = 0; o < 2; o++) {
        slim_graph *g = tu_graph(ops[o], 18, 2, (const char *[]){"x", "axes"}, 1);
        slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 0}, NULL),
                             tu_i64(1, (int64_t[]){1}, (int64_t[]){1})};
        int n_out;
        slim_tensor *out = run_ok(g, in, 2, &n_out);
        tu_assert_shape(&out[0], 2, (int64_t[]){2, 1});
        float v = o == 0 ? 1 : -INFINITY;
        ck_assert(((float *)out[0].data)[0] == v && ((float *)out[0].data)[1] == v);
        slim_tensors_free(out, n_out);
        tu_free_inputs(in, 2);
    }
    /* noop_with_empty_axes with no axes: the input comes back. */
    slim_graph *g = tu_graph("ReduceSum", 13, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "noop_with_empty_axes", 1);
    float x[3] = {1, 2, 3};
    slim_tensor in[1] = {tu_f32(1, (int64_t[]){3}, x)};
    int n_out;
    slim_tensor *out = run_ok(g, in, 1, &n_out);
    tu_assert_close_f32(&out[0], x, 3, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
}
END_TEST

START_TEST(test_reduce_int_exact_and_errors)
{
    slim_graph *g = tu_graph("ReduceSum", 13, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "keepdims", 0);
    int64_t x[3] = {(1LL << 53) + 1, 2, -1};
    slim_tensor in[1] = {tu_i64(1, (int64_t[]){3}, x)};
    int n_out;
    slim_tensor *out = run_ok(g, in, 1, &n_out);
    tu_assert_shape(&out[0], 0, NULL);
    assert_i64(&out[0], (const int64_t[]){(1LL << 53) + 2}, 1);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);

    g = tu_graph("ReduceMean", 18, 2, (const char *[]){"x", "axes"}, 1);
    slim_tensor in2[2] = {tu_f32(2, (int64_t[]){2, 2}, NULL),
                          tu_i64(1, (int64_t[]){2}, (int64_t[]){1, -1})};
    run_fails(g, in2, 2, SLIM_EINVAL); /* axis listed twice */
    g = tu_graph("ReduceMean", 18, 2, (const char *[]){"x", "axes"}, 1);
    slim_tensor in3[2] = {tu_f32(2, (int64_t[]){2, 2}, NULL),
                          tu_i64(1, (int64_t[]){1}, (int64_t[]){2})};
    run_fails(g, in3, 2, SLIM_EINVAL); /* out of range */
}
END_TEST

START_TEST(test_argmax_argmin)
{
    float x[6] = {1, 5, 5, 2, 2, 0};
    for (int last = 0; last < 2; last++) {
        slim_graph *g = tu_graph("ArgMax", 13, 1, (const char *[]){"x"}, 1);
        tu_attr_i(tu_node0(g), "axis", 1);
        tu_attr_i(tu_node0(g), "keepdims", 0);
        tu_attr_i(tu_node0(g), "select_last_index", last);
        slim_tensor in[1] = {tu_f32(2, (int64_t[]){2, 3}, x)};
        int n_out;
        slim_tensor *out = run_ok(g, in, 1, &n_out);
        tu_assert_shape(&out[0], 1, (int64_t[]){2});
        assert_i64(&out[0], last ? (const int64_t[]){2, 1} : (const int64_t[]){1, 0}, 2);
        slim_tensors_free(out, n_out);
        tu_free_inputs(in, 1);
    }
    /* ArgMin along axis 0, keepdims. */
    slim_graph *g = tu_graph("ArgMin", 13, 1, (const char *[]){"x"}, 1);
    slim_tensor in[1] = {tu_f32(2, (int64_t[]){2, 3}, x)};
    int n_out;
    slim_tensor *out = run_ok(g, in, 1, &n_out);
    tu_assert_shape(&out[0], 2, (int64_t[]){1, 3});
    assert_i64(&out[0], (const int64_t[]){0, 1, 1}, 3);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);

    g = tu_graph("ArgMax", 13, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "axis", 1);
    slim_tensor in2[1] = {tu_f32(2, (int64_t[]){2, 0}, NULL)};
    run_fails(g, in2, 1, SLIM_EINVAL);
}
END_TEST

START_TEST(test_topk)
{
    /* Ties keep index order; k small against the row uses the heap path. */
    enum { N = 64 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 8);
    for (int largest = 0; largest < 2; largest++) {
        slim_graph *g = tu_graph("TopK", 11, 2, (const char *[]){"x", "k"}, 2);
        tu_attr_i(tu_node0(g), "largest", largest);
        slim_tensor in[2] = {tu_f32(1, (int64_t[]){N}, x),
                             tu_i64(1, (int64_t[]){1}, (int64_t[]){3})};
        int n_out;
        slim_tensor *out = run_ok(g, in, 2, &n_out);
        tu_assert_shape(&out[0], 1, (int64_t[]){3});
        float v = largest ? 7 : 0;
        tu_assert_close_f32(&out[0], (const float[]){v, v, v}, 3, 0);
        assert_i64(&out[1], largest ? (const int64_t[]){7, 15, 23} : (const int64_t[]){0, 8, 16},
                   3);
        slim_tensors_free(out, n_out);
        tu_free_inputs(in, 2);
    }
    /* Along axis 0 of [3,2], full sort path. */
    slim_graph *g = tu_graph("TopK", 11, 2, (const char *[]){"x", "k"}, 2);
    tu_attr_i(tu_node0(g), "axis", 0);
    float y[6] = {1, 6, 3, 4, 2, 5};
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){3, 2}, y), tu_i64(1, (int64_t[]){1}, (int64_t[]){2})};
    int n_out;
    slim_tensor *out = run_ok(g, in, 2, &n_out);
    tu_assert_shape(&out[0], 2, (int64_t[]){2, 2});
    tu_assert_close_f32(&out[0], (const float[]){3, 6, 2, 5}, 4, 0);
    assert_i64(&out[1], (const int64_t[]){1, 0, 2, 2}, 4);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);

    g = tu_graph("TopK", 11, 2, (const char *[]){"x", "k"}, 2);
    slim_tensor in2[2] = {tu_f32(1, (int64_t[]){4}, x), tu_i64(1, (int64_t[]){1}, (int64_t[]){5})};
    run_fails(g, in2, 2, SLIM_EINVAL);
}
END_TEST

START_TEST(test_cumsum)
{
    float x[6] = {1, 2, 3, 4, 5, 6};
    const float want[4][6] = {
        {1, 3, 6, 4, 9, 15},  /* plain */
        {0, 1, 3, 0, 4, 9},   /* exclusive */
        {6, 5, 3, 15, 11, 6}, /* reverse */
        {5, 3, 0, 11, 6, 0},  /* exclusive + reverse */
    };
    for (int v = 0; v < 4; v++) {
        slim_graph *g = tu_graph("CumSum", 14, 2, (const char *[]){"x", "axis"}, 1);
        tu_attr_i(tu_node0(g), "exclusive", v & 1);
        tu_attr_i(tu_node0(g), "reverse", v >> 1);
        slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 3}, x), tu_i64(0, NULL, (int64_t[]){-1})};
        int n_out;
        slim_tensor *out = run_ok(g, in, 2, &n_out);
        tu_assert_close_f32(&out[0], want[v], 6, 0);
        slim_tensors_free(out, n_out);
        tu_free_inputs(in, 2);
    }
    slim_graph *g = tu_graph("CumSum", 14, 2, (const char *[]){"x", "axis"}, 1);
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 3}, x), tu_i64(0, NULL, (int64_t[]){2})};
    run_fails(g, in, 2, SLIM_EINVAL);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("reduce");
    tcase_add_test(tc, test_reduce_sum_split_axes);
    tcase_add_test(tc, test_reduce_kinds_attr_axes);
    tcase_add_test(tc, test_reduce_empty_and_noop);
    tcase_add_test(tc, test_reduce_int_exact_and_errors);
    tcase_add_test(tc, test_argmax_argmin);
    tcase_add_test(tc, test_topk);
    tcase_add_test(tc, test_cumsum);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(reduce_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
