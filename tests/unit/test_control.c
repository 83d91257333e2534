/*
 * test_control.c - If, Loop and Scan with subgraphs: outer-scope values,
 * branches whose outputs differ in shape, nesting, loop-carried values and
 * scan outputs, and the failure paths (a branch or an iteration that fails
 * at run time, a bad cond, malformed bodies). Under ASan (make test) a leak
 * on any of these paths fails the test binary.
 */
#include "testutil.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

/* A one-node graph: op(ins...) -> out, with `out` its only output. Names
 * it reads but does not define are outer-scope values. */
static slim_graph *body(const char *op, int n_in, const char *const *ins, const char *out)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = 16;
    int id = slim_graph_add_node(g, "body_node", op, "", n_in, ins, 1, (const char *[]){out});
    ck_assert_int_ge(id, 0);
    g->nodes[id].opset = 16;
    ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, out)), SLIM_OK);
    return g;
}

static void add_init_i64(slim_graph *g, const char *name, int n, const int64_t *v)
{
    int id = slim_graph_value(g, name);
    ck_assert_int_ge(id, 0);
    g->values[id].kind = SLIM_VALUE_INITIALIZER;
    g->values[id].init = tu_i64(1, (int64_t[]){n}, v);
}

static void attach(slim_node *n, const char *name, slim_graph *sub)
{
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (size_t)(n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->type = SLIM_ATTR_GRAPH;
    a->g = sub;
}

/* Parent: inputs c (bool) and x, If(c) -> y0 with the given branches. */
static slim_graph *if_model(slim_graph *then_g, slim_graph *else_g)
{
    slim_graph *g = tu_graph("If", 16, 1, (const char *[]){"c"}, 1);
    int x = slim_graph_value(g, "x");
    ck_assert_int_eq(slim_graph_add_input(g, x), SLIM_OK);
    attach(tu_node0(g), "then_branch", then_g);
    attach(tu_node0(g), "else_branch", else_g);
    slim_err err = {0};
    ck_assert_int_eq(slim_graph_capture_outer(g, 0, &err), SLIM_OK);
    return g;
}

static slim_status run_if(slim_model *m, bool cond, const float *x, int64_t nx,
                          slim_tensor **out, int *n_out, slim_err *err)
{
    uint8_t c = cond;
    slim_tensor in[2] = {tu_tensor(SLIM_BOOL, 0, NULL, &c), tu_f32(1, (int64_t[]){nx}, x)};
    slim_status st = slim_model_run(m, 2, (const char *[]){"c", "x"}, in, out, n_out, err);
    tu_free_inputs(in, 2);
    return st;
}

START_TEST(test_if_reads_outer_scope)
{
    slim_graph *g = if_model(body("Add", 2, (const char *[]){"x", "x"}, "t"),
                             body("Mul", 2, (const char *[]){"x", "x"}, "e"));
    ck_assert_int_eq(tu_node0(g)->n_implicit, 1);
    ck_assert_int_eq(tu_node0(g)->n_in, 2);
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor *out;
    int n_out;
    const float x[3] = {1, 2, 3};
    ck_assert_int_eq(run_if(m, true, x, 3, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){2, 4, 6}, 3, 1e-6);
    slim_tensors_free(out, n_out);
    ck_assert_int_eq(run_if(m, false, x, 3, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){1, 4, 9}, 3, 1e-6);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_if_branch_shapes_differ)
{
    /* then: x as it is ([4]); else: x reshaped to [2, 2]. */
    slim_graph *else_g = body("Reshape", 2, (const char *[]){"x", "shape"}, "e");
    add_init_i64(else_g, "shape", 2, (int64_t[]){2, 2});
    slim_graph *g = if_model(body("Identity", 1, (const char *[]){"x"}, "t"), else_g);
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor *out;
    int n_out;
    const float x[4] = {1, 2, 3, 4};
    ck_assert_int_eq(run_if(m, true, x, 4, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 1, (int64_t[]){4});
    slim_tensors_free(out, n_out);
    ck_assert_int_eq(run_if(m, false, x, 4, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 2, (int64_t[]){2, 2});
    tu_assert_close_f32(&out[0], x, 4, 0);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_if_nested_reads_two_levels_up)
{
    /* then_branch is itself If(c) whose branches read x, defined two
     * scopes up; the inner captures go first, as the loader does them. */
    slim_graph *inner = tu_graph("If", 16, 1, (const char *[]){"c"}, 1);
    inner->n_inputs = 0; /* c is the outer c here, not an input */
    inner->values[slim_graph_find_value(inner, "c")].kind = SLIM_VALUE_INTERMEDIATE;
    attach(tu_node0(inner), "then_branch", body("Neg", 1, (const char *[]){"x"}, "n"));
    attach(tu_node0(inner), "else_branch", body("Abs", 1, (const char *[]){"x"}, "a"));
    slim_err err = {0};
    ck_assert_int_eq(slim_graph_capture_outer(inner, 0, &err), SLIM_OK);
    slim_graph *g = if_model(inner, body("Identity", 1, (const char *[]){"x"}, "e"));
    ck_assert_int_eq(tu_node0(g)->n_implicit, 2); /* c and x */
    slim_model *m;
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor *out;
    int n_out;
    ck_assert_int_eq(run_if(m, true, (float[]){-1, 2}, 2, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){1, -2}, 2, 0);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_if_failing_branch_frees_everything)
{
    /* else: an Add feeding a Reshape that cannot work for 3 elements; the
     * Add's output is in the branch's arena when the Reshape fails. */
    slim_graph *else_g = slim_graph_new();
    else_g->opset = 16;
    int a = slim_graph_add_node(else_g, "sum", "Add", "", 2, (const char *[]){"x", "x"}, 1,
                                (const char *[]){"s"});
    int r = slim_graph_add_node(else_g, "bad_reshape", "Reshape", "", 2,
                                (const char *[]){"s", "shape"}, 1, (const char *[]){"e"});
    else_g->nodes[a].opset = else_g->nodes[r].opset = 16;
    add_init_i64(else_g, "shape", 2, (int64_t[]){4, 4});
    ck_assert_int_eq(slim_graph_add_output(else_g, slim_graph_find_value(else_g, "e")), SLIM_OK);
    slim_graph *g = if_model(body("Identity", 1, (const char *[]){"x"}, "t"), else_g);
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    slim_tensor *out = NULL;
    int n_out = 0;
    const float x[3] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(run_if(m, false, x, 3, &out, &n_out, &err), SLIM_ESHAPE);
        ck_assert_ptr_null(out);
        ck_assert_ptr_nonnull(strstr(err.msg, "else_branch"));
        ck_assert_ptr_nonnull(strstr(err.msg, "bad_reshape"));
    }
    /* The model still serves the other branch. */
    ck_assert_int_eq(run_if(m, true, x, 3, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], x, 3, 0);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_if_bad_cond)
{
    slim_graph *g = if_model(body("Identity", 1, (const char *[]){"x"}, "t"),
                             body("Identity", 1, (const char *[]){"x"}, "e"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    uint8_t c[2] = {1, 0};
    slim_tensor in[2] = {tu_tensor(SLIM_BOOL, 1, (int64_t[]){2}, c),
                         tu_f32(1, (int64_t[]){1}, (float[]){1})};
    slim_tensor *out = NULL;
    int n_out = 0;
    ck_assert_int_eq(slim_model_run(m, 2, (const char *[]){"c", "x"}, in, &out, &n_out, &err),
                     SLIM_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "cond"));
    tu_free_inputs(in, 2);
    slim_model_free(m);
}
END_TEST

START_TEST(test_if_branch_output_count_mismatch)
{
    slim_graph *then_g = body("Identity", 1, (const char *[]){"x"}, "t");
    slim_graph_add_output(then_g, slim_graph_find_value(then_g, "x")); /* two outputs */
    slim_graph *g = if_model(then_g, body("Identity", 1, (const char *[]){"x"}, "e"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "then_branch has 2 output"));
}
END_TEST

START_TEST(test_if_undefined_outer_name)
{
    /* The branch reads "z", which no scope defines. */
    slim_graph *g = if_model(body("Neg", 1, (const char *[]){"z"}, "t"),
                             body("Identity", 1, (const char *[]){"x"}, "e"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"z\""));
}
END_TEST

/* Loop body(i, cond_in, v_in) -> (cond_out, v_out, s) with
 * v_out = step(v_in) and s = post(v_out); reads the outer x when asked. */
static slim_graph *loop_body(const char *step, const char *const *step_in, int n_step_in,
                             const char *post, const char *const *post_in, int n_post_in)
{
    slim_graph *g = slim_graph_new();
    g->opset = 16;
    for (int i = 0; i < 3; i++) {
        const char *names[3] = {"i", "cond_in", "v_in"};
        ck_assert_int_eq(slim_graph_add_input(g, slim_graph_value(g, names[i])), SLIM_OK);
    }
    int a = slim_graph_add_node(g, "keep_going", "Identity", "", 1, (const char *[]){"cond_in"},
                                1, (const char *[]){"cond_out"});
    int b = slim_graph_add_node(g, "step", step, "", n_step_in, step_in, 1,
                                (const char *[]){"v_out"});
    int c = slim_graph_add_node(g, "post", post, "", n_post_in, post_in, 1, (const char *[]){"s"});
    g->nodes[a].opset = g->nodes[b].opset = g->nodes[c].opset = 16;
    const char *outs[3] = {"cond_out", "v_out", "s"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, outs[i])), SLIM_OK);
    return g;
}

/* Parent: Loop(M, cond, v0) -> (y0 final v, y1 stacked s), and input x. */
static slim_model *loop_model(slim_graph *body_g)
{
    slim_graph *g = tu_graph("Loop", 16, 3, (const char *[]){"M", "cond", "v0"}, 2);
    ck_assert_int_eq(slim_graph_add_input(g, slim_graph_value(g, "x")), SLIM_OK);
    attach(tu_node0(g), "body", body_g);
    slim_err err = {0};
    ck_assert_int_eq(slim_graph_capture_outer(g, 0, &err), SLIM_OK);
    slim_model *m;
    ck_assert_int_eq(slim_model_from_graph(g, &m, &err), SLIM_OK);
    return m;
}

static slim_status run_loop(slim_model *m, int64_t trip, const float *v0, const float *x,
                            slim_tensor **out, int *n_out, slim_err *err)
{
    uint8_t c = 1;
    slim_tensor in[4] = {tu_i64(0, NULL, &trip), tu_tensor(SLIM_BOOL, 0, NULL, &c),
                         tu_f32(1, (int64_t[]){1}, v0), tu_f32(1, (int64_t[]){1}, x)};
    slim_status st = slim_model_run(m, 4, (const char *[]){"M", "cond", "v0", "x"}, in, out,
                                    n_out, err);
    tu_free_inputs(in, 4);
    return st;
}

START_TEST(test_loop_carries_and_stacks)
{
    /* v <- v + x (x from the outer scope); s = v. */
    slim_model *m = loop_model(loop_body("Add", (const char *[]){"v_in", "x"}, 2, "Identity",
                                         (const char *[]){"v_out"}, 1));
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(run_loop(m, 3, (float[]){1}, (float[]){2}, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){7}, 1, 0);
    tu_assert_shape(&out[1], 2, (int64_t[]){3, 1});
    tu_assert_close_f32(&out[1], (float[]){3, 5, 7}, 3, 0);
    slim_tensors_free(out, n_out);
    /* No iterations: v0 comes back, the scan output is empty. */
    ck_assert_int_eq(run_loop(m, 0, (float[]){1}, (float[]){2}, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){1}, 1, 0);
    ck_assert_int_eq(slim_tensor_numel(&out[1]), 0);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_loop_failing_iteration_frees_everything)
{
    /* v <- concat(v, v) doubles each time; s = reshape(v, [2]) works in
     * iteration 0 only, so iteration 1 fails holding a carried value and a
     * kept scan output. */
    slim_graph *body_g = loop_body("Concat", (const char *[]){"v_in", "v_in"}, 2, "Reshape",
                                   (const char *[]){"v_out", "two"}, 2);
    tu_attr_i(&body_g->nodes[1], "axis", 0);
    add_init_i64(body_g, "two", 1, (int64_t[]){2});
    slim_model *m = loop_model(body_g);
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err = {0};
    ck_assert_int_eq(run_loop(m, 5, (float[]){1}, (float[]){0}, &out, &n_out, &err), SLIM_ESHAPE);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err.msg, "iteration 1"));
    ck_assert_int_eq(run_loop(m, 1, (float[]){1}, (float[]){0}, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){1, 1}, 2, 0);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
}
END_TEST

START_TEST(test_scan_running_sum_reverse)
{
    /* Scan(state, xs): state <- state + x_t, y_t = state, over xs [3, 1]
     * read from the end. */
    slim_graph *body_g = slim_graph_new();
    body_g->opset = 16;
    ck_assert_int_eq(slim_graph_add_input(body_g, slim_graph_value(body_g, "st_in")), SLIM_OK);
    ck_assert_int_eq(slim_graph_add_input(body_g, slim_graph_value(body_g, "x_t")), SLIM_OK);
    int a = slim_graph_add_node(body_g, "acc", "Add", "", 2, (const char *[]){"st_in", "x_t"}, 1,
                                (const char *[]){"st_out"});
    int b = slim_graph_add_node(body_g, "emit", "Identity", "", 1, (const char *[]){"st_out"}, 1,
                                (const char *[]){"y_t"});
    body_g->nodes[a].opset = body_g->nodes[b].opset = 16;
    slim_graph_add_output(body_g, slim_graph_find_value(body_g, "st_out"));
    slim_graph_add_output(body_g, slim_graph_find_value(body_g, "y_t"));
    slim_graph *g = tu_graph("Scan", 16, 2, (const char *[]){"s0", "xs"}, 2);
    tu_attr_i(tu_node0(g), "num_scan_inputs", 1);
    tu_attr_ints(tu_node0(g), "scan_input_directions", 1, (int64_t[]){1});
    attach(tu_node0(g), "body", body_g);
    slim_err err = {0};
    ck_assert_int_eq(slim_graph_capture_outer(g, 0, &err), SLIM_OK);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){1}, (float[]){0}),
                         tu_f32(2, (int64_t[]){3, 1}, (float[]){1, 2, 3})};
    slim_tensor *out;
    int n_out;
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){6}, 1, 0);
    tu_assert_close_f32(&out[1], (float[]){3, 5, 6}, 3, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("control");
    TCase *tc = tcase_create("control");
    tcase_add_test(tc, test_if_reads_outer_scope);
    tcase_add_test(tc, test_if_branch_shapes_differ);
    tcase_add_test(tc, test_if_nested_reads_two_levels_up);
    tcase_add_test(tc, test_if_failing_branch_frees_everything);
    tcase_add_test(tc, test_if_bad_cond);
    tcase_add_test(tc, test_if_branch_output_count_mismatch);
    tcase_add_test(tc, test_if_undefined_outer_name);
    tcase_add_test(tc, test_loop_carries_and_stacks);
    tcase_add_test(tc, test_loop_failing_iteration_frees_everything);
    tcase_add_test(tc, test_scan_running_sum_reverse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
