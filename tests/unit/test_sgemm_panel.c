/* test_sgemm_panel.c - the panel product (kernels/cpu/sgemm_panel.c) that
 * runs the attention core's products: against a double reference over
 * shapes with tails of rows and columns, both layouts of B, alpha and beta,
 * leading dimensions wider than the matrices; a row's result bitwise the
 * same whatever rows share the call; slim_sgemm_serial routed to it. */
#include "testutil.h"

#include "cpu/sgemm_panel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345;

static float *rand_matrix(int64_t rows, int64_t ld)
{
    float *p = malloc(sizeof(float) * (size_t)(rows * ld + 1));
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < rows * ld; i++)
        p[i] = tu_rndf(&rng);
    return p;
}

/* Checks c against alpha * A op(B) + beta * c0 in double, each element
 * within a bound scaled by the sum of the magnitudes of its terms. */
static void check_product(bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta)
{
    const int64_t lda = k + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    float *a = rand_matrix(m, lda), *b = rand_matrix(tb ? n : k, ldb);
    float *c = rand_matrix(m, ldc), *c0 = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    memcpy(c0, c, sizeof(float) * (size_t)(m * ldc));
    if (!slim__sgemm_panel(tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) {
        free(a), free(b), free(c), free(c0);
        return; /* no AVX-512 here: the caller takes BLAS, checked elsewhere */
    }
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double t = (double)a[i * lda + p] * b[tb ? j * ldb + p : p * ldb + j];
                sum += t;
                mag += fabs(t);
            }
            double want = alpha * sum + (beta != 0 ? beta * (double)c0[i * ldc + j] : 0);
            /* a float sum of k terms, then alpha and beta: at most k + 3
             * roundings of 2^-24 each on the magnitudes */
            double tol = (double)(k + 3) * 6e-8 * (fabs(alpha) * mag +
                                                    fabs(beta * c0[i * ldc + j])) + 1e-12;
            ck_assert_msg(fabs(c[i * ldc + j] - want) <= tol,
                          "%s %lldx%lldx%lld: c[%lld][%lld] = %.9g, want %.9g", tb ? "NT" : "NN",
                          (long long)m, (long long)n, (long long)k, (long long)i, (long long)j,
                          c[i * ldc + j], want);
        }
        /* the padding between rows of C is not written */
        for (int64_t j = n; j < ldc; j++)
            ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
    }
    free(a), free(b), free(c), free(c0);
}

START_TEST(test_against_reference)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {5, 17, 3},  {13, 33, 7},  {6, 64, 16}, {17, 65, 9},   {12, 32, 40},
        {128, 128, 32}, {128, 32, 128}, {31, 200, 5}, {3, 48, 0}, {25, 130, 64},
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int tb = 0; tb < 2; tb++) {
            check_product(tb, shapes[s][0], shapes[s][1], shapes[s][2], 0.17f, 0.0f);
            check_product(tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.5f);
        }
}
END_TEST

/* Each row alone (m = 1) gives the bits it gives among 37 rows: the
 * attention core's answer for a batch item cannot depend on the others. */
START_TEST(test_rows_independent)
{
    for (int tb = 0; tb < 2; tb++) {
        const int64_t m = 37, n = 77, k = 29;
        const int64_t ldb = tb ? k : n;
        float *a = rand_matrix(m, k), *b = rand_matrix(tb ? n : k, ldb);
        float *all = calloc((size_t)(m * n), sizeof(float)), one[77];
        if (!slim__sgemm_panel(tb, m, n, k, 0.5f, a, k, b, ldb, 0.0f, all, n)) {
            free(a), free(b), free(all);
            return;
        }
        for (int64_t i = 0; i < m; i++) {
            ck_assert(slim__sgemm_panel(tb, 1, n, k, 0.5f, a + i * k, k, b, ldb, 0.0f, one, n));
            ck_assert_msg(memcmp(one, all + i * n, sizeof(one)) == 0, "row %lld differs alone",
                          (long long)i);
        }
        free(a), free(b), free(all);
    }
}
END_TEST

/* slim_sgemm_serial takes the panel where it can run (no oneDNN JIT). */
START_TEST(test_serial_routed)
{
    const int64_t m = 40, n = 128, k = 32;
    float *a = rand_matrix(m, k), *b = rand_matrix(n, k);
    float *x = calloc((size_t)(m * n), sizeof(float)), *y = calloc((size_t)(m * n), sizeof(float));
    if (slim__sgemm_panel(true, m, n, k, 0.25f, a, k, b, k, 0.0f, x, n)) {
        slim_sgemm_serial(false, true, m, n, k, 0.25f, a, k, b, k, 0.0f, y, n);
        ck_assert(memcmp(x, y, sizeof(float) * (size_t)(m * n)) == 0);
    }
    free(a), free(b), free(x), free(y);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sgemm_panel");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_against_reference);
    tcase_add_test(tc, test_rows_independent);
    tcase_add_test(tc, test_serial_routed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
