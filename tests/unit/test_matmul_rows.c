/*
 * test_matmul_rows.c - FusedMatMul in row-invariant mode (the mode of a
 * model the server batches): a product large enough to be cut into
 * several column blocks per part and several groups of row tiles
 * (matmul_rows.c) gives each item's rows bitwise as when the item runs
 * alone or with fewer items, and what the unfused MatMul + Add gives up to
 * rounding. The ctest runs it twice, the second time with SLIM_FMM_ROWS=0
 * (the per-part tiles of matmul_dnnl.c), so both paths keep the guarantee.
 */
#include "testutil.h"

#include "pass.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 1024 x 640 in two column parts of 320 (five N-blocks of 64 each): about
 * 1 MiB of weights per block gives two blocks per part, of 128 and 192
 * columns; a tile of 16 rows of A is 64 KiB, so 32 tiles a group. */
#define K 1024
#define N 640
#define ROWS_PER_ITEM 4

static uint32_t rng_state;

/* x [n, ROWS_PER_ITEM, K] -> MatMul(w [K, N]) -> Add(b [N]) -> Relu -> y */
static slim_model *load(bool passes)
{
    slim_graph *g = tu_graph_x();
    rng_state = 7;
    tu_init_f32(g, &rng_state, "w", 2, (int64_t[]){K, N}, -0.05f, 0.05f);
    tu_init_f32(g, &rng_state, "b", 1, (int64_t[]){N}, -0.5f, 0.5f);
    tu_op(g, "MatMul", "p", 2, "x", "w");
    tu_op(g, "Add", "s", 2, "p", "b");
    tu_op(g, "Relu", "y", 1, "s");
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_model *m = tu_model(g, passes);
    if (passes)
        ck_assert_int_eq(tu_count_op(m->graph, "FusedMatMul"), 1);
    slim_model_set_batch_invariant(m, passes);
    return m;
}

static slim_tensor input(int64_t items, const float *from)
{
    return tu_f32(3, (int64_t[]){items, ROWS_PER_ITEM, K}, from);
}

static slim_tensor run(slim_model *m, const slim_tensor *x)
{
    slim_tensor *out = NULL, y;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    y = out[0];
    free(out);
    return y;
}

/* 161 items: 644 rows, 41 tiles (the last one 4 rows, padded), 2 groups. */
START_TEST(rows_bitwise_in_any_batch)
{
    const int64_t items = 161, per_in = ROWS_PER_ITEM * K, per_out = ROWS_PER_ITEM * N;
    float *data = malloc(sizeof(float) * (size_t)(items * per_in));
    for (int64_t i = 0; i < items * per_in; i++)
        data[i] = tu_rndf(&rng_state);
    slim_model *ref = load(false), *opt = load(true);
    slim_tensor x = input(items, data), all = run(opt, &x), want = run(ref, &x);
    tu_assert_shape(&all, 3, (int64_t[]){items, ROWS_PER_ITEM, N});
    tu_assert_close_f32(&all, want.data, items * per_out, 1e-4);
    int positive = 0;
    for (int64_t i = 0; i < items * per_out; i++)
        positive += ((const float *)all.data)[i] > 0.1f;
    ck_assert_int_gt(positive, items * per_out / 8); /* Relu left something to compare */
    /* Alone, and the first 17 items (68 rows: a short last tile, 1 group). */
    const int64_t alone[] = {0, 127, 128, 160};
    for (int i = 0; i < 4; i++) {
        slim_tensor one = input(1, data + alone[i] * per_in), y = run(opt, &one);
        ck_assert_msg(memcmp(y.data, (const float *)all.data + alone[i] * per_out,
                             sizeof(float) * (size_t)per_out) == 0,
                      "item %lld alone differs from its rows in the batch", (long long)alone[i]);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor some = input(17, data), y = run(opt, &some);
    ck_assert(memcmp(y.data, all.data, sizeof(float) * (size_t)(17 * per_out)) == 0);
    slim_tensor_release(&y);
    slim_tensor_release(&some);
    slim_tensor_release(&all);
    slim_tensor_release(&want);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
    free(data);
}
END_TEST

static Suite *rows_suite(void)
{
    Suite *s = suite_create("matmul_rows");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rows_bitwise_in_any_batch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    setenv("SLIM_NUM_THREADS", "2", 1); /* FusedMatMul's column parts: one per thread */
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    SRunner *sr = srunner_create(rows_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
