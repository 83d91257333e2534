/*
 * test_random.c - the random generators (kernels/cpu/random.c) by their
 * statistics: over 10^5 draws, means, variances and frequencies fall
 * within a few standard errors of what the distribution says (bounds of
 * 5 sigma or more, so a correct generator fails about never, while an off
 * by one in a range, a wrong scale or a biased sampler is far outside).
 * A seed makes runs repeat; no seed makes them differ.
 */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 100000

static slim_model *one_node(const char *op, int opset, int n_in, const char *const *ins)
{
    slim_graph *g = tu_graph(op, opset, n_in, ins, 1);
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* Builds op with attributes set by fn, runs it once on in. */
static slim_tensor run_once(slim_model *m, int n_in, const char *const *names,
                            const slim_tensor *in)
{
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, n_in, names, in, &out, &n_out, &err) == SLIM_OK, "%s",
                  err.msg);
    slim_tensor t = out[0];
    memset(&out[0], 0, sizeof(out[0]));
    slim_tensors_free(out, n_out);
    return t;
}

static void moments(const slim_tensor *t, double *mean, double *var)
{
    int64_t n = slim_tensor_numel(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = slim_load_f64(t->dtype, t->data, i);
        s += v;
        s2 += v * v;
    }
    *mean = s / (double)n;
    *var = s2 / (double)n - *mean * *mean;
}

static slim_graph *gen_graph(const char *op, float seed, bool seeded)
{
    slim_graph *g = tu_graph(op, 1, 0, NULL, 1);
    tu_attr_ints(tu_node0(g), "shape", 2, (int64_t[]){100, N / 100});
    if (seeded)
        tu_attr_f(tu_node0(g), "seed", seed);
    return g;
}

START_TEST(test_uniform_statistics_and_seed)
{
    slim_graph *g = gen_graph("RandomUniform", 7.0f, true);
    tu_attr_f(tu_node0(g), "low", -2.0f);
    tu_attr_f(tu_node0(g), "high", 3.0f);
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor a = run_once(m, 0, NULL, NULL), b = run_once(m, 0, NULL, NULL);
    tu_assert_shape(&a, 2, (int64_t[]){100, N / 100});
    ck_assert_int_eq(a.dtype, SLIM_F32);
    const float *x = a.data;
    for (int i = 0; i < N; i++)
        ck_assert(x[i] >= -2.0f && x[i] <= 3.0f);
    double mean, var;
    moments(&a, &mean, &var);
    /* U(-2, 3): mean 0.5, variance 25/12; standard error of the mean
     * sqrt(25/12 / N) = 0.0046. */
    ck_assert_msg(fabs(mean - 0.5) < 0.025, "mean %g", mean);
    ck_assert_msg(fabs(var - 25.0 / 12) < 0.06, "variance %g", var);
    /* A seed repeats the draws run after run. */
    ck_assert_int_eq(memcmp(a.data, b.data, slim_tensor_nbytes(&a)), 0);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_model_free(m);
    /* Without a seed two runs differ. */
    m = NULL;
    ck_assert_int_eq(slim_model_from_graph(gen_graph("RandomUniform", 0, false), &m, &err),
                     SLIM_OK);
    a = run_once(m, 0, NULL, NULL);
    b = run_once(m, 0, NULL, NULL);
    ck_assert_int_ne(memcmp(a.data, b.data, slim_tensor_nbytes(&a)), 0);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_model_free(m);
}
END_TEST

START_TEST(test_normal_statistics)
{
    slim_graph *g = gen_graph("RandomNormal", 3.0f, true);
    tu_attr_f(tu_node0(g), "mean", 1.0f);
    tu_attr_f(tu_node0(g), "scale", 2.0f);
    tu_attr_i(tu_node0(g), "dtype", 11); /* double */
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor a = run_once(m, 0, NULL, NULL);
    ck_assert_int_eq(a.dtype, SLIM_F64);
    double mean, var;
    moments(&a, &mean, &var);
    /* N(1, 4): standard error of the mean 2 / sqrt(N) = 0.0063; of the
     * variance about 4 * sqrt(2 / N) = 0.018. */
    ck_assert_msg(fabs(mean - 1.0) < 0.035, "mean %g", mean);
    ck_assert_msg(fabs(var - 4.0) < 0.1, "variance %g", var);
    /* 68.27% within one sigma (standard error 0.0015). */
    int64_t in1 = 0;
    for (int i = 0; i < N; i++)
        in1 += fabs(((double *)a.data)[i] - 1.0) < 2.0;
    ck_assert_msg(fabs((double)in1 / N - 0.6827) < 0.008, "within 1 sigma: %g",
                  (double)in1 / N);
    slim_tensor_release(&a);
    slim_model_free(m);
}
END_TEST

START_TEST(test_like_forms_follow_input)
{
    slim_model *m = one_node("RandomNormalLike", 1, 1, (const char *[]){"x"});
    slim_tensor x = tu_tensor(SLIM_F64, 3, (int64_t[]){2, 3, 4}, NULL);
    memset(x.data, 0, slim_tensor_nbytes(&x));
    slim_tensor y = run_once(m, 1, (const char *[]){"x"}, &x);
    ck_assert_int_eq(y.dtype, SLIM_F64);
    tu_assert_shape(&y, 3, (int64_t[]){2, 3, 4});
    slim_tensor_release(&y);
    slim_model_free(m);
    m = one_node("RandomUniformLike", 1, 1, (const char *[]){"x"});
    y = run_once(m, 1, (const char *[]){"x"}, &x);
    for (int i = 0; i < 24; i++)
        ck_assert(((double *)y.data)[i] >= 0 && ((double *)y.data)[i] < 1);
    slim_tensor_release(&y);
    slim_tensor_release(&x);
    slim_model_free(m);
}
END_TEST

START_TEST(test_bernoulli_frequency)
{
    slim_graph *g = tu_graph("Bernoulli", 15, 1, (const char *[]){"p"}, 1);
    tu_attr_i(tu_node0(g), "dtype", 9); /* bool */
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    float *p = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        p[i] = i < 1000 ? 0.0f : i < 2000 ? 1.0f : 0.3f;
    slim_tensor in = tu_f32(1, (int64_t[]){N}, p);
    slim_tensor y = run_once(m, 1, (const char *[]){"p"}, &in);
    ck_assert_int_eq(y.dtype, SLIM_BOOL);
    const uint8_t *b = y.data;
    int64_t ones = 0;
    for (int i = 0; i < N; i++) {
        ck_assert(b[i] <= 1);
        if (i < 1000)
            ck_assert_int_eq(b[i], 0);
        else if (i < 2000)
            ck_assert_int_eq(b[i], 1);
        else
            ones += b[i];
    }
    /* p = 0.3 over 98000 draws: standard error 0.0015. */
    double f = (double)ones / (N - 2000);
    ck_assert_msg(fabs(f - 0.3) < 0.008, "frequency %g", f);
    slim_tensor_release(&y);
    /* A probability outside [0, 1] is an error naming the element. */
    p[5] = 1.5f;
    slim_tensor bad = tu_f32(1, (int64_t[]){N}, p);
    slim_tensor *out;
    int n_out;
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"p"}, &bad, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "input[5] = 1.5"), "%s", err.msg);
    tu_free_inputs(&in, 1);
    tu_free_inputs(&bad, 1);
    free(p);
    slim_model_free(m);
}
END_TEST

START_TEST(test_multinomial_frequency)
{
    slim_graph *g = tu_graph("Multinomial", 7, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "sample_size", N);
    tu_attr_i(tu_node0(g), "dtype", 7); /* int64 */
    tu_attr_f(tu_node0(g), "seed", 5.0f);
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    /* Unnormalized log-probabilities: row 0 is 0.1/0.2/0.7 shifted by a
     * constant (which must not matter), row 1 puts everything on class 2. */
    float lp[6] = {logf(0.1f) + 5, logf(0.2f) + 5, logf(0.7f) + 5, -INFINITY, -INFINITY, 0};
    slim_tensor in = tu_f32(2, (int64_t[]){2, 3}, lp);
    slim_tensor y = run_once(m, 1, (const char *[]){"x"}, &in);
    ck_assert_int_eq(y.dtype, SLIM_I64);
    tu_assert_shape(&y, 2, (int64_t[]){2, N});
    const int64_t *s = y.data;
    int64_t count[3] = {0};
    for (int i = 0; i < N; i++) {
        ck_assert(s[i] >= 0 && s[i] < 3);
        count[s[i]]++;
        ck_assert_int_eq(s[N + i], 2);
    }
    const double want[3] = {0.1, 0.2, 0.7};
    for (int c = 0; c < 3; c++)
        ck_assert_msg(fabs((double)count[c] / N - want[c]) < 0.008, "class %d: %g", c,
                      (double)count[c] / N);
    slim_tensor_release(&y);
    tu_free_inputs(&in, 1);
    slim_model_free(m);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("random");
    TCase *tc = tcase_create("random");
    tcase_add_test(tc, test_uniform_statistics_and_seed);
    tcase_add_test(tc, test_normal_statistics);
    tcase_add_test(tc, test_like_forms_follow_input);
    tcase_add_test(tc, test_bernoulli_frequency);
    tcase_add_test(tc, test_multinomial_frequency);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
