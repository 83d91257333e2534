/*
 * test_matmul_small.c - FusedMatMul's loop for a few rows (matmul_small.c):
 * an MLP whose shapes leave ragged edges everywhere (K = 200, not a
 * multiple of the layout's 16; N = 200 and 72, so the last block of a
 * column part is short) gives, at every row count it takes (1 to 16), what
 * the unfused MatMul + Add + GELU / Relu give up to rounding, and each row
 * bitwise the same whatever rows came with it. Without oneDNN it runs no
 * case.
 */
#include "testutil.h"
#include "test_passes_util.h"

#include "kernel.h"

#include <stdlib.h>
#include <string.h>

#ifdef SLIM_HAVE_DNNL
#define K 200
#define H 200
#define NO 72

/* x [1, rows, K] -> MatMul(w1 [K, H]) + b1 -> GELU (erf form)
 *   -> MatMul(w2 [H, NO]) + b2 -> Relu -> y */
static slim_graph *mlp(void)
{
    return tp_mlp(&(tp_mlp_spec){.seed = 5, .k = K, .h = H, .no = NO, .w = 0.2f, .b1 = 0.5f});
}

START_TEST(small_rows_match_and_stay_put)
{
    slim_model *ref = tu_model(mlp(), false), *opt = tu_model(mlp(), true);
    ck_assert_int_eq(tu_count_op(opt->graph, "FusedMatMul"), 2);
    slim_tensor all = tp_input(3, 3, (int64_t[]){1, 16, K});
    slim_tensor y16 = tp_run(opt, &all), want = tp_run(ref, &all);
    tp_assert_close(&y16, &want, 1e-5);
    const float *x = all.data, *yall = y16.data;
    /* Without AVX-512 the loop is not used: oneDNN's products are made per
     * row count and promise nothing across them. */
    if (!slim_cpu_has_avx512f())
        goto done;
    /* Every row count the loop takes, from every starting row that fits:
     * each row's output bitwise as inside all 16. */
    for (int64_t rows = 1; rows <= 16; rows++)
        for (int64_t r0 = 0; r0 + rows <= 16; r0 += rows == 16 ? 16 : rows > 4 ? 16 - rows : 3) {
            slim_tensor part = tu_f32(3, (int64_t[]){1, rows, K}, x + r0 * K);
            slim_tensor y = tp_run(opt, &part);
            ck_assert_msg(memcmp(y.data, yall + r0 * NO, sizeof(float) * (size_t)(rows * NO)) == 0,
                          "rows %lld..%lld alone differ from the same rows among 16",
                          (long long)r0, (long long)(r0 + rows - 1));
            slim_tensor_release(&y);
            slim_tensor_release(&part);
        }
done:
    slim_tensor_release(&y16);
    slim_tensor_release(&want);
    slim_tensor_release(&all);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST
#endif

static Suite *small_suite(void)
{
    Suite *s = suite_create("matmul_small");
    TCase *tc = tcase_create("core");
#ifdef SLIM_HAVE_DNNL
    tcase_add_test(tc, small_rows_match_and_stay_put);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tp_main(small_suite());
}
