/*
 * test_pass_rewrite.c - the rewriting passes: fold_constants,
 * simplify_shapes, fuse_layernorm (fuse_gelu and fold_attention_scale:
 * test_pass_rewrite_gelu.c). Each small graph is loaded twice, as written
 * and after every pass (slim_passes_run, as a load does), and run on the
 * same input: the outputs must agree, and the optimized graph must hold
 * what the rewrite makes - or, for a near miss (a wrong constant, a wrong
 * axis, a value read in the middle of the pattern), the pattern must still
 * be there.
 */
#include "test_pass_rewrite_util.h"

#include "pass.h"
#include "slim_format.h"
#include "pipeline.h"
#include "slim_init.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ==== fold_constants ======================================================= */

/* x[2,3] static. c = Constant(2.5); w = Add(a, c) of weights -> folds;
 * the shape arithmetic Shape(x) -> Gather(scalar 1) -> Unsqueeze ->
 * Concat([-1], .) -> Reshape(x * w, .) folds down to a constant [-1, 3]. */
static void build_fold(void)
{
    begin(2, (int64_t[]){2, 3});
    slim_node *c = op("Constant", "c", 0);
    tu_attr_f(c, "value_float", 2.5f);
    rng_state = 5;
    vec("a", 3, -1, 1);
    op("Add", "w", 2, "a", "c");
    op("Mul", "xw", 2, "x", "w");
    op("Shape", "sh", 1, "x");
    init("one", tu_i64(0, NULL, (int64_t[]){1}));
    op("Gather", "d1", 2, "sh", "one");
    ints("axis0", 1, (int64_t[]){0});
    op("Unsqueeze", "d1u", 2, "d1", "axis0");
    ints("minus1", 1, (int64_t[]){-1});
    slim_node *cc = op("Concat", "shape", 2, "minus1", "d1u");
    tu_attr_i(cc, "axis", 0);
    op("Reshape", "y", 2, "xw", "shape");
    output("y");
}

START_TEST(fold_constants_static_shapes)
{
    pair p = both(build_fold, 2, (int64_t[]){2, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    /* Constant, Add, Shape, Gather, Unsqueeze, Concat folded; Mul and
     * Reshape stay. */
    ck_assert_int_eq(g->n_nodes, 2);
    ck_assert_int_eq(count_op(g, "Mul"), 1);
    ck_assert_int_eq(count_op(g, "Reshape"), 1);
    int shape = slim_graph_find_value(g, "shape");
    ck_assert_int_eq(g->values[shape].kind, SLIM_VALUE_INITIALIZER);
    const int64_t *s = g->values[shape].init.data;
    ck_assert_int_eq(s[0], -1);
    ck_assert_int_eq(s[1], 3);
    pair_free(&p);
}
END_TEST

/* The same graph with x[?, 3]: Gather picks the static dim 1, but Shape
 * of a dynamic value never folds. */
static void build_fold_dynamic(void)
{
    build_fold();
    int x = slim_graph_find_value(G, "x");
    G->values[x].info.dims[0] = -1;
}

START_TEST(fold_constants_dynamic_shape_stays)
{
    pair p = both(build_fold_dynamic, 2, (int64_t[]){4, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "Shape"), 1);
    ck_assert_int_eq(count_op(g, "Gather"), 1);
    ck_assert_int_eq(count_op(g, "Unsqueeze"), 1);
    ck_assert_int_eq(count_op(g, "Concat"), 1);
    ck_assert_int_eq(count_op(g, "Constant"), 0);
    ck_assert_int_eq(count_op(g, "Add"), 0);
    pair_free(&p);
}
END_TEST

/* Not folded: a random op, a result over the size cap (ConstantOfShape of
 * 8 MiB), and a constant node that is a graph output (its name stays a
 * node's output). */
static void build_no_fold(void)
{
    begin(2, (int64_t[]){2, 3});
    slim_node *r = op("RandomUniform", "noise", 0);
    tu_attr_ints(r, "shape", 2, (int64_t[]){2, 3});
    tu_attr_f(r, "low", 0.0f);
    tu_attr_f(r, "high", 0.0f); /* always 0, so both models agree */
    op("Add", "y", 2, "x", "noise");
    ints("big_shape", 2, (int64_t[]){1024, 2048});
    op("ConstantOfShape", "big", 1, "big_shape");
    op("ReduceMax", "big_max", 1, "big");
    op("Add", "y2", 2, "x", "big_max");
    slim_node *c = op("Constant", "c_out", 0);
    tu_attr_f(c, "value_float", 1.5f);
    output("y");
    output("y2");
    output("c_out");
}

START_TEST(fold_constants_left_alone)
{
    pair p = both(build_no_fold, 2, (int64_t[]){2, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "RandomUniform"), 1);
    ck_assert_int_eq(count_op(g, "ConstantOfShape"), 1);
    ck_assert_int_eq(count_op(g, "ReduceMax"), 1);
    ck_assert_int_eq(count_op(g, "Constant"), 1);
    pair_free(&p);
}
END_TEST

/* A kernel failing on constant inputs would fail every request: the load
 * fails, naming the node. */
START_TEST(fold_constants_error_names_node)
{
    begin(2, (int64_t[]){2, 3});
    rng_state = 1;
    vec("a", 6, -1, 1);
    ints("bad_shape", 2, (int64_t[]){4, 4});
    op("Reshape", "bad_reshape", 2, "a", "bad_shape");
    op("Add", "y", 2, "x", "bad_reshape");
    output("y");
    slim_err err = {0};
    ck_assert_int_ne(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad_reshape"));
    slim_graph_free(G);

    /* An index out of range in a constant Gather. */
    begin(1, (int64_t[]){3});
    vec("table", 3, -1, 1);
    ints("idx", 1, (int64_t[]){7});
    op("Gather", "bad_gather", 2, "table", "idx");
    op("Add", "y", 2, "x", "bad_gather");
    output("y");
    ck_assert_int_ne(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad_gather"));
    slim_graph_free(G);
}
END_TEST

/* Hostile graphs: a cycle of constant-looking nodes and a node whose
 * output is also an initializer are left for finalize to refuse. */
START_TEST(fold_constants_hostile_graphs)
{
    begin(1, (int64_t[]){3});
    scalar("k", 2.0f);
    op("Add", "p", 2, "q", "k");
    op("Add", "q", 2, "p", "k");
    op("Add", "y", 2, "x", "q");
    output("y");
    slim_err err = {0};
    ck_assert_int_eq(slim_passes_run(G, &err), SLIM_OK);
    slim_model *m;
    ck_assert_int_ne(slim_model_from_graph(G, &m, &err), SLIM_OK); /* frees G */

    begin(1, (int64_t[]){3});
    scalar("k", 2.0f);
    scalar("w", 1.0f);
    op("Add", "w", 2, "k", "k"); /* writes over an initializer */
    op("Add", "y", 2, "x", "w");
    output("y");
    ck_assert_int_eq(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_int_ne(slim_model_from_graph(G, &m, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "already produced"));
}
END_TEST

/* ==== simplify_shapes ====================================================== */

/* x[?,3,4]: Identity, Transpose and its inverse, Reshape of Reshape,
 * Squeeze of Unsqueeze, Cast to float32 of float32: Reshape(x, [-1,4,3])
 * + 1 in the end, and y2 (a graph output made by an Identity) keeps its
 * name. */
static void build_movement(void)
{
    begin(3, (int64_t[]){-1, 3, 4});
    op("Identity", "i1", 1, "x");
    slim_node *t = op("Transpose", "t1", 1, "i1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){1, 2, 0});
    t = op("Transpose", "t2", 1, "t1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){2, 0, 1});
    ints("flat", 2, (int64_t[]){-1, 12});
    ints("back", 3, (int64_t[]){-1, 4, 3});
    op("Reshape", "r1", 2, "t2", "flat");
    op("Reshape", "r2", 2, "r1", "back");
    ints("ax", 1, (int64_t[]){1});
    op("Unsqueeze", "u", 2, "r2", "ax");
    op("Squeeze", "s", 2, "u", "ax");
    slim_node *c = op("Cast", "c", 1, "s");
    tu_attr_i(c, "to", 1); /* FLOAT */
    scalar("one", 1.0f);
    op("Add", "y", 2, "c", "one");
    op("Identity", "y2", 1, "y");
    output("y2");
}

START_TEST(simplify_removes_movement)
{
    pair p = both(build_movement, 3, (int64_t[]){2, 3, 4}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(g->n_nodes, 2);
    const slim_node *r = &g->nodes[0], *add = &g->nodes[1];
    ck_assert_str_eq(r->op_type, "Reshape");
    ck_assert_str_eq(g->values[r->in[0]].name, "x");
    ck_assert_str_eq(add->op_type, "Add");
    ck_assert_int_eq(add->in[0], r->out[0]);
    ck_assert_str_eq(g->values[add->out[0]].name, "y2");
    pair_free(&p);
}
END_TEST

/* Two transposes that are not inverse become one; a value read in the
 * middle (t1 also an output) keeps both. */
static void build_transposes(void)
{
    begin(3, (int64_t[]){2, 3, 4});
    slim_node *t = op("Transpose", "t1", 1, "x");
    tu_attr_ints(t, "perm", 3, (int64_t[]){1, 0, 2});
    t = op("Transpose", "y", 1, "t1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){0, 2, 1});
    t = op("Transpose", "m1", 1, "x");
    tu_attr_ints(t, "perm", 3, (int64_t[]){2, 1, 0});
    op("Transpose", "m2", 1, "m1"); /* no perm: reverse, the inverse */
    output("y");
    output("m1");
    output("m2");
}

START_TEST(simplify_transposes)
{
    pair p = both(build_transposes, 3, (int64_t[]){2, 3, 4}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    /* y = one Transpose of x; m1 stays (an output); m2 = x needs a node to
     * keep its name, and x is a graph input: it stays too. */
    ck_assert_int_eq(count_op(g, "Transpose"), 3);
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->values[g->nodes[i].out[0]].name, "y") == 0) {
            ck_assert_str_eq(g->values[g->nodes[i].in[0]].name, "x");
            int64_t perm[3];
            ck_assert_int_eq(slim_attr_ints(&g->nodes[i], "perm", perm, 3), 3);
            ck_assert_int_eq(perm[0], 1);
            ck_assert_int_eq(perm[1], 2);
            ck_assert_int_eq(perm[2], 0);
        }
    pair_free(&p);
}
END_TEST

/* Near misses: a Reshape whose shape holds 0 (a dim of the first
 * Reshape's output), Squeeze on other axes than the Unsqueeze's, a Cast
 * to another type and back. */
static void build_movement_kept(void)
{
    begin(3, (int64_t[]){2, 3, 4});
    ints("s1", 3, (int64_t[]){3, 2, 4});
    ints("s2", 2, (int64_t[]){0, -1});
    op("Reshape", "r1", 2, "x", "s1");
    op("Reshape", "r2", 2, "r1", "s2"); /* [3, 8], where x would give [2, 12] */
    ints("a02", 2, (int64_t[]){0, 2});
    ints("a0", 1, (int64_t[]){0});
    op("Unsqueeze", "u", 2, "r2", "a02"); /* [1, 3, 1, 8] */
    op("Squeeze", "s", 2, "u", "a0");     /* [3, 1, 8] */
    slim_node *c = op("Cast", "c", 1, "s");
    tu_attr_i(c, "to", 6); /* INT32: truncates */
    c = op("Cast", "y", 1, "c");
    tu_attr_i(c, "to", 1);
    output("y");
}

START_TEST(simplify_near_misses)
{
    pair p = both(build_movement_kept, 3, (int64_t[]){2, 3, 4}, 4.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "Reshape"), 2);
    ck_assert_int_eq(count_op(g, "Unsqueeze"), 1);
    ck_assert_int_eq(count_op(g, "Squeeze"), 1);
    ck_assert_int_eq(count_op(g, "Cast"), 2);
    pair_free(&p);
}
END_TEST

/* ==== fuse_layernorm ======================================================= */

enum { LN_POW, LN_MUL_SQUARE };
enum { LN_DIV, LN_RECIPROCAL, LN_ONE_OVER, LN_POW_HALF };

static int ln_square, ln_norm, ln_beta = 1, ln_axis = -1, ln_sub_swapped, ln_leak, ln_constant_nodes,
    ln_two_subs;
static float ln_exponent = 2.0f;

/* x[N,5,16] -> LayerNorm spelled out over the last axis -> y. */
static void build_ln(void)
{
    begin(3, (int64_t[]){-1, 5, 16});
    rng_state = 77;
    vec("gamma", 16, 0.5f, 1.5f);
    vec("beta", 16, -0.3f, 0.3f);
    if (ln_constant_nodes) { /* as torch.onnx writes Python scalars */
        tu_attr_f(op("Constant", "eps", 0), "value_float", 1e-5f);
        tu_attr_f(op("Constant", "two", 0), "value_float", ln_exponent);
    } else {
        scalar("eps", 1e-5f);
        scalar("two", ln_exponent);
    }
    scalar("one", 1.0f);
    scalar("mhalf", -0.5f);
    slim_node *m = op("ReduceMean", "m", 1, "x");
    tu_attr_ints(m, "axes", 1, (int64_t[]){ln_axis});
    if (ln_sub_swapped)
        op("Sub", "d", 2, "m", "x");
    else
        op("Sub", "d", 2, "x", "m");
    const char *dn = "d"; /* the divided difference */
    if (ln_two_subs) { /* x - m again for the division */
        op("Sub", "d2", 2, "x", "m");
        dn = "d2";
    }
    if (ln_square == LN_POW)
        op("Pow", "sq", 2, "d", "two");
    else
        op("Mul", "sq", 2, "d", "d");
    m = op("ReduceMean", "v", 1, "sq");
    tu_attr_ints(m, "axes", 1, (int64_t[]){ln_axis});
    op("Add", "e", 2, "eps", "v");
    if (ln_norm == LN_POW_HALF) {
        op("Pow", "r", 2, "e", "mhalf");
        op("Mul", "n", 2, "r", dn);
    } else {
        op("Sqrt", "s", 1, "e");
        if (ln_norm == LN_DIV)
            op("Div", "n", 2, dn, "s");
        else {
            if (ln_norm == LN_RECIPROCAL)
                op("Reciprocal", "r", 1, "s");
            else
                op("Div", "r", 2, "one", "s");
            op("Mul", "n", 2, dn, "r");
        }
    }
    op("Mul", ln_beta ? "g" : "y", 2, "gamma", "n");
    if (ln_beta)
        op("Add", "y", 2, "g", "beta");
    output("y");
    if (ln_leak)
        output("s"); /* read in the middle of the pattern */
}

static void ln_reset(void)
{
    ln_square = LN_POW;
    ln_norm = LN_DIV;
    ln_beta = 1;
    ln_axis = -1;
    ln_sub_swapped = ln_leak = ln_constant_nodes = ln_two_subs = 0;
    ln_exponent = 2.0f;
}

START_TEST(fuse_layernorm_variants)
{
    int64_t dims[3] = {3, 5, 16};
    for (int sq = LN_POW; sq <= LN_MUL_SQUARE; sq++)
        for (int nm = LN_DIV; nm <= LN_POW_HALF; nm++)
            for (int b = 0; b < 4; b++) {
                ln_reset();
                ln_square = sq;
                ln_norm = nm;
                ln_beta = b & 1;
                ln_two_subs = b >> 1;
                pair p = both(build_ln, 3, dims, 3.0f, 1e-5);
                const slim_graph *g = p.opt->graph;
                ck_assert_int_eq(g->n_nodes, 1);
                const slim_node *n = &g->nodes[0];
                ck_assert_str_eq(n->op_type, "LayerNormalization");
                ck_assert_int_eq(n->n_in, ln_beta ? 3 : 2);
                ck_assert_int_eq(slim_attr_int(n, "axis", 0), -1);
                ck_assert(slim_attr_float(n, "epsilon", 0) == 1e-5f);
                pair_free(&p);
            }
}
END_TEST

/* Epsilon and the exponent from Constant nodes: fold_constants makes them
 * initializers first. */
START_TEST(fuse_layernorm_constant_nodes)
{
    ln_reset();
    ln_constant_nodes = 1;
    pair p = both(build_ln, 3, (int64_t[]){2, 5, 16}, 3.0f, 1e-5);
    ck_assert_int_eq(p.opt->graph->n_nodes, 1);
    ck_assert_str_eq(p.opt->graph->nodes[0].op_type, "LayerNormalization");
    pair_free(&p);
}
END_TEST

START_TEST(fuse_layernorm_near_misses)
{
    int64_t dims[3] = {3, 5, 16};
    for (int c = 0; c < 4; c++) {
        ln_reset();
        if (c == 0)
            ln_exponent = 4.0f; /* a different function */
        else if (c == 1)
            ln_axis = 1; /* statistics over another axis */
        else if (c == 2)
            ln_sub_swapped = 1; /* m - x */
        else
            ln_leak = 1; /* sqrt(var + eps) is also an output */
        pair p = both(build_ln, 3, dims, 3.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "LayerNormalization"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "ReduceMean"), 2);
        pair_free(&p);
    }
}
END_TEST

Suite *rewrite_suite(void)
{
    Suite *s = suite_create("pass_rewrite");
    TCase *tc = tcase_create("rewrite");
    tcase_add_test(tc, fold_constants_static_shapes);
    tcase_add_test(tc, fold_constants_dynamic_shape_stays);
    tcase_add_test(tc, fold_constants_left_alone);
    tcase_add_test(tc, fold_constants_error_names_node);
    tcase_add_test(tc, fold_constants_hostile_graphs);
    tcase_add_test(tc, simplify_removes_movement);
    tcase_add_test(tc, simplify_transposes);
    tcase_add_test(tc, simplify_near_misses);
    tcase_add_test(tc, fuse_layernorm_variants);
    tcase_add_test(tc, fuse_layernorm_constant_nodes);
    tcase_add_test(tc, fuse_layernorm_near_misses);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(rewrite_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
