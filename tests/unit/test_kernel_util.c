/* test_kernel_util.c - the operator tests' shared runs and checks (see
 * test_kernel_util.h). */
#include "test_kernel_util.h"
void fill_random(float *v, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* Runs g, asserting success. */
slim_tensor *run_ok(slim_graph *g, slim_tensor *in, int n_in, int *n_out)
{
    slim_tensor *out;
    slim_err err;
    slim_status s = tu_run(g, in, n_in, &out, n_out, &err);
    if (s)
        ck_abort_msg("run failed: %s", err.msg);
    return out;
}

/* Runs g, asserting it fails with status `want`. */
void run_fails(slim_graph *g, slim_tensor *in, int n_in, slim_status want)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, n_in, &out, &n_out, &err), want);
    tu_free_inputs(in, n_in);
}

void assert_i64(const slim_tensor *t, const int64_t *want, int64_t n)
{
    ck_assert_int_eq(t->dtype, SLIM_I64);
    ck_assert_int_eq(slim_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_eq(((const int64_t *)t->data)[i], want[i]);
}
