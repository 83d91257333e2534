/*
 * test_ml.c - the ai.onnx.ml operators on numbers (kernels/cpu/ml.c):
 * Binarizer, ArrayFeatureExtractor, and TreeEnsemble's modes, aggregation
 * and post transforms, plus the trees a hostile model can write (a child
 * out of range refused at load, a cycle refused at run time).
 */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static slim_graph *ml_graph(const char *op, int opset, int n_in, const char *const *ins)
{
    slim_graph *g = tu_graph(op, opset, n_in, ins, 1);
    free(tu_node0(g)->domain);
    tu_node0(g)->domain = strdup("ai.onnx.ml");
    return g;
}

static void attr_tensor(slim_node *n, const char *name, slim_dtype dt, int count,
                        const double *v)
{
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (size_t)(n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->type = SLIM_ATTR_TENSOR;
    a->t = malloc(sizeof(*a->t));
    *a->t = tu_tensor(dt, 1, (int64_t[]){count}, NULL);
    for (int i = 0; i < count; i++)
        slim_store_f64(dt, a->t->data, i, v[i]);
}

START_TEST(test_binarizer_and_feature_extractor)
{
    slim_graph *g = ml_graph("Binarizer", 1, 1, (const char *[]){"x"});
    tu_attr_f(tu_node0(g), "threshold", 1.0f);
    slim_tensor x = tu_f32(1, (int64_t[]){5}, (float[]){0.5f, 1.0f, 1.5f, -3, NAN});
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){0, 0, 1, 0, 0}, 5, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&x, 1);

    /* [2,3] with indices [2,0,2] -> [2,3]; an index past the axis fails. */
    g = ml_graph("ArrayFeatureExtractor", 1, 2, (const char *[]){"x", "y"});
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6}),
                         tu_i64(1, (int64_t[]){3}, (int64_t[]){2, 0, 2})};
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 2, (int64_t[]){2, 3});
    tu_assert_close_f32(&out[0], (float[]){3, 1, 3, 6, 4, 6}, 6, 0);
    slim_tensors_free(out, n_out);
    ((int64_t *)in[1].data)[1] = 3;
    g = ml_graph("ArrayFeatureExtractor", 1, 2, (const char *[]){"x", "y"});
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "index 3 in Y is out of range"), "%s", err.msg);
    tu_free_inputs(in, 2);
}
END_TEST

/* Two trees over 2 targets. Tree 0 (root 0): x0 <= 2 ? leaf 0 (t0, 1)
 * : node 1: x1 in {5, 7} ? leaf 1 (t1, 10) : leaf 2 (t0, 100). Tree 1
 * (root 2): x0 > 0 ? leaf 3 (t1, 1000) : leaf 4 (t0, 10000), and a NaN x0
 * goes to the true side. */
static slim_graph *forest(int agg, int post, int64_t bad_child)
{
    slim_graph *g = ml_graph("TreeEnsemble", 5, 1, (const char *[]){"x"});
    slim_node *n = tu_node0(g);
    tu_attr_i(n, "aggregate_function", agg);
    tu_attr_i(n, "post_transform", post);
    tu_attr_i(n, "n_targets", 2);
    tu_attr_ints(n, "nodes_featureids", 3, (int64_t[]){0, 1, 0});
    attr_tensor(n, "nodes_modes", SLIM_U8, 3, (double[]){0, 6, 3});
    attr_tensor(n, "nodes_splits", SLIM_F32, 3, (double[]){2, NAN, 0});
    attr_tensor(n, "membership_values", SLIM_F32, 3, (double[]){5, 7, NAN});
    tu_attr_ints(n, "nodes_truenodeids", 3, (int64_t[]){0, 1, 3});
    tu_attr_ints(n, "nodes_trueleafs", 3, (int64_t[]){1, 1, 1});
    tu_attr_ints(n, "nodes_falsenodeids", 3, (int64_t[]){bad_child, 2, 4});
    tu_attr_ints(n, "nodes_falseleafs", 3, (int64_t[]){0, 1, 1});
    tu_attr_ints(n, "nodes_missing_value_tracks_true", 3, (int64_t[]){0, 0, 1});
    tu_attr_ints(n, "leaf_targetids", 5, (int64_t[]){0, 1, 0, 1, 0});
    attr_tensor(n, "leaf_weights", SLIM_F64, 5, (double[]){1, 10, 100, 1000, 10000});
    tu_attr_ints(n, "tree_roots", 2, (int64_t[]){0, 2});
    return g;
}

static void run_forest(slim_graph *g, const float *expect)
{
    /* rows: (1, 0), (3, 7), (3, 6), (NaN, 5), (-1, 0) */
    slim_tensor x = tu_f32(2, (int64_t[]){5, 2}, (float[]){1, 0, 3, 7, 3, 6, NAN, 5, -1, 0});
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(tu_run(g, &x, 1, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&out[0], 2, (int64_t[]){5, 2});
    tu_assert_close_f32(&out[0], expect, 10, 1e-6);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&x, 1);
}

START_TEST(test_tree_ensemble)
{
    /* SUM: row 0: leaf 0 (t0 1) + leaf 3 (t1 1000); row 1: x1 = 7 is a
     * member: leaf 1 (t1 10) + leaf 3; row 2: leaf 2 (t0 100) + leaf 3;
     * row 3: NaN <= 2 is false, x1 = 5 a member: leaf 1, and NaN tracks
     * true in tree 1: leaf 3; row 4: leaf 0 + leaf 4 (t0 10000). */
    run_forest(forest(1, 0, 1), (float[]){1, 1000, 0, 1010, 100, 1000, 0, 1010, 10001, 0});
    /* AVERAGE halves it; MAX leaves untouched targets at -FLT_MAX. */
    run_forest(forest(0, 0, 1), (float[]){0.5f, 500, 0, 505, 50, 500, 0, 505, 5000.5f, 0});
    run_forest(forest(3, 0, 1), (float[]){1, 1000, -3.4028234663852886e38f, 1000, 100, 1000,
                                          -3.4028234663852886e38f, 1000, 10000,
                                          -3.4028234663852886e38f});
    /* LOGISTIC of the sums. */
    float lg[10];
    const double sums[10] = {1, 1000, 0, 1010, 100, 1000, 0, 1010, 10001, 0};
    for (int i = 0; i < 10; i++)
        lg[i] = (float)(1.0 / (1.0 + exp(-sums[i])));
    run_forest(forest(1, 2, 1), lg);
}
END_TEST

START_TEST(test_tree_ensemble_hostile)
{
    /* A false child past the node table is refused when the model loads. */
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(forest(1, 0, 7), &m, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "node 0 has a child out of range"), "%s", err.msg);
    /* Node 0's false side back to node 0 is a cycle: refused at run time
     * for a row that takes it (x0 > 2). */
    slim_graph *g = forest(1, 0, 0);
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor x = tu_f32(2, (int64_t[]){1, 2}, (float[]){5, 0});
    slim_tensor *out;
    int n_out;
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "cycle"), "%s", err.msg);
    tu_free_inputs(&x, 1);
    slim_model_free(m);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("ml");
    TCase *tc = tcase_create("ml");
    tcase_add_test(tc, test_binarizer_and_feature_extractor);
    tcase_add_test(tc, test_tree_ensemble);
    tcase_add_test(tc, test_tree_ensemble_hostile);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
