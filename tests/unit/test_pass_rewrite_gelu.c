/*
 * test_pass_rewrite_gelu.c - the rewriting passes that find GELU and the
 * attention scale: fuse_gelu (erf and tanh forms, near misses, rounded
 * constants, before the GPU's float16 conversion), fold_attention_scale,
 * and patterns over nodes with too few inputs. As in test_pass_rewrite.c,
 * each small graph is loaded twice, as written and after every pass, and
 * run on the same input: the outputs must agree, and the optimized graph
 * must hold what the rewrite makes - or, for a near miss, the pattern must
 * still be there.
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

/* ==== fold_attention_scale (GPU placements) =============================== */

static float attn_c;
static int attn_div, attn_q_bias, attn_scores_out;

/* x[2,4,16]: Q and K projections (MatMul [+ Add], Reshape to 2 heads of 8,
 * Transpose), S = Q K^T scaled by attn_c (Mul, or Div by 1 / attn_c),
 * Softmax. attn_scores_out: S is a graph output too. */
static void build_attention(void)
{
    begin(3, (int64_t[]){2, 4, 16});
    rng_state = 9;
    float wd[256];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 256; i++)
            wd[i] = rndf() * 0.5f;
        init(k ? "wk" : "wq", tu_f32(2, (int64_t[]){16, 16}, wd));
    }
    vec("bq", 16, -0.5f, 0.5f);
    vec("bk", 16, -0.5f, 0.5f);
    ints("heads", 4, (int64_t[]){2, 4, 2, 8});
    op("MatMul", "qm", 2, "x", "wq");
    if (attn_q_bias)
        op("Add", "qb", 2, "qm", "bq");
    op("Reshape", "qr", 2, attn_q_bias ? "qb" : "qm", "heads");
    tu_attr_ints(op("Transpose", "q", 1, "qr"), "perm", 4, (int64_t[]){0, 2, 1, 3});
    op("MatMul", "km", 2, "x", "wk");
    op("Add", "kb", 2, "bk", "km");
    op("Reshape", "kr", 2, "kb", "heads");
    tu_attr_ints(op("Transpose", "kt", 1, "kr"), "perm", 4, (int64_t[]){0, 2, 3, 1});
    op("MatMul", "s", 2, "q", "kt");
    scalar("c", attn_div ? 1.0f / attn_c : attn_c);
    op(attn_div ? "Div" : "Mul", "ss", 2, "s", "c");
    tu_attr_i(op("Softmax", "y", 1, "ss"), "axis", -1);
    output("y");
    if (attn_scores_out)
        output("s");
}

/* The passes a GPU placement runs (host false) against none. */
static pair both_for_device(build_fn build, int ndim, const int64_t *dims, double tol)
{
    pair p = {load(build, false), NULL};
    build();
    slim_err err = {0};
    ck_assert_msg(slim_passes_run_for(G, false, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_msg(slim_model_from_graph(G, &p.opt, &err) == SLIM_OK, "%s", err.msg);
    agree(&p, ndim, dims, 2.0f, tol);
    return p;
}

START_TEST(fold_attention_scale_forms)
{
    int64_t dims[3] = {2, 4, 16};
    /* 1/8, a power of two: exact, so bitwise; 1/sqrt(8) by Div: rounded
     * once; Q without a bias (K, with its bias first, is not tried). */
    const struct { float c; int div, q_bias; double tol; } cases[] = {
        {0.125f, 0, 1, 0.0}, {0.35355339f, 1, 1, 1e-6}, {0.125f, 0, 0, 0.0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        attn_c = cases[i].c;
        attn_div = cases[i].div;
        attn_q_bias = cases[i].q_bias;
        attn_scores_out = 0;
        pair p = both_for_device(build_attention, 3, dims, cases[i].tol);
        ck_assert_int_eq(count_op(p.opt->graph, "Mul") + count_op(p.opt->graph, "Div"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Softmax"), 1);
        pair_free(&p);
    }
    /* Near miss: the scores are read twice (an output too): nothing moves. */
    attn_c = 0.125f;
    attn_div = 0;
    attn_q_bias = 1;
    attn_scores_out = 1;
    pair p = both_for_device(build_attention, 3, dims, 0.0);
    ck_assert_int_eq(count_op(p.opt->graph, "Mul"), 1);
    pair_free(&p);
}
END_TEST

/* ==== fuse_gelu ============================================================ */

enum { G_X_S_HALF, G_X_HALF_S, G_S_HALF_X };

static int gelu_group, gelu_div_scale, gelu_div_two, gelu_leak, gelu_cube_mul;
static float gelu_c = 0.70710678f, gelu_half = 0.5f, gelu_k = 0.7978845608f, gelu_a = 0.044715f;

/* x * 0.5 * (1 + s), grouped as gelu_group says, writing y. */
static void gelu_product(const char *s)
{
    scalar("half", gelu_half);
    scalar("two", 1.0f / gelu_half);
    const char *h = gelu_div_two ? "two" : "half", *hop = gelu_div_two ? "Div" : "Mul";
    if (gelu_group == G_X_S_HALF) {
        op("Mul", "p", 2, s, "x");
        op(hop, "y", 2, "p", h);
    } else if (gelu_group == G_X_HALF_S) {
        op(hop, "p", 2, "x", h);
        op("Mul", "y", 2, "p", s);
    } else {
        op("Mul", "p", 2, "half", s);
        op("Mul", "y", 2, "x", "p");
    }
    output("y");
}

static void build_gelu_erf(void)
{
    begin(2, (int64_t[]){-1, 64});
    scalar("c", gelu_div_scale ? 1.0f / gelu_c : gelu_c);
    scalar("one", 1.0f);
    if (gelu_div_scale)
        op("Div", "t", 2, "x", "c");
    else
        op("Mul", "t", 2, "c", "x");
    op("Erf", "e", 1, "t");
    op("Add", "s", 2, "one", "e");
    if (gelu_leak)
        output("e");
    gelu_product("s");
}

static void build_gelu_tanh(void)
{
    begin(2, (int64_t[]){-1, 64});
    scalar("k", gelu_k);
    scalar("a", gelu_a);
    scalar("three", 3.0f);
    scalar("one", 1.0f);
    if (gelu_cube_mul) {
        op("Mul", "x2", 2, "x", "x");
        op("Mul", "x3", 2, "x2", "x");
    } else {
        op("Pow", "x3", 2, "x", "three");
    }
    op("Mul", "ax3", 2, "a", "x3");
    op("Add", "in", 2, "x", "ax3");
    op("Mul", "t", 2, "in", "k");
    op("Tanh", "th", 1, "t");
    op("Add", "s", 2, "th", "one");
    if (gelu_leak)
        output("in");
    gelu_product("s");
}

static void gelu_reset(void)
{
    gelu_group = G_X_S_HALF;
    gelu_div_scale = gelu_div_two = gelu_leak = gelu_cube_mul = 0;
    gelu_c = 0.70710678f;
    gelu_half = 0.5f;
    gelu_k = 0.7978845608f;
    gelu_a = 0.044715f;
}

static void assert_gelu(const slim_graph *g, const char *approximate)
{
    ck_assert_int_eq(g->n_nodes, 1);
    ck_assert_str_eq(g->nodes[0].op_type, "Gelu");
    ck_assert_str_eq(slim_attr_str(&g->nodes[0], "approximate", "none"), approximate);
    ck_assert_str_eq(g->values[g->nodes[0].in[0]].name, "x");
    ck_assert_str_eq(g->values[g->nodes[0].out[0]].name, "y");
}

START_TEST(fuse_gelu_erf_orders)
{
    int64_t dims[2] = {3, 64};
    for (int grp = G_X_S_HALF; grp <= G_S_HALF_X; grp++)
        for (int div = 0; div < 2; div++)
            for (int two = 0; two < 2; two++) {
                if (grp == G_S_HALF_X && two)
                    continue; /* that grouping is built with Mul(0.5, s) only */
                gelu_reset();
                gelu_group = grp;
                gelu_div_scale = div;
                gelu_div_two = two;
                pair p = both(build_gelu_erf, 2, dims, 4.0f, 1e-6);
                assert_gelu(p.opt->graph, "none");
                pair_free(&p);
            }
}
END_TEST

/* The server's conversion cache, converting on the host for a GPU (fp16,
 * the whole graph half, no host passes): GELU is fused before the graph
 * goes half, since the passes match float32 constants only. The file keeps
 * the ONNX Gelu node, cast to half, and no Erf chain. */
START_TEST(gpu_conversion_fuses_before_half)
{
    gelu_reset();
    build_gelu_erf();
    char path[] = "/tmp/slim_gelu_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    slim_err err = {0};
    ck_assert_msg(slim_format_write(G, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(G);
    G = NULL;
    slim_load_opts o = {.compress.precision = "fp16", .optimize.no_passes = true,
                        .compress.half.whole_graph = true};
    slim_model *m;
    ck_assert_msg(slim_model_load(path, &o, &m, &err) == SLIM_OK, "%s", err.msg);
    unlink(path);
    const slim_graph *g = m->graph;
    ck_assert_int_eq(count_op(g, "Erf"), 0);
    ck_assert_int_eq(count_op(g, "Gelu"), 1);
    /* Gelu reads x cast to half (the float32 input keeps its type). */
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "Gelu") == 0) {
            int producer = g->values[g->nodes[i].in[0]].producer;
            ck_assert_int_ge(producer, 0);
            ck_assert_str_eq(g->nodes[producer].op_type, "Cast");
            ck_assert_int_eq(slim_attr_int(&g->nodes[producer], "to", 0), 10); /* FLOAT16 */
        }
    slim_model_free(m);
}
END_TEST

START_TEST(fuse_gelu_tanh_forms)
{
    int64_t dims[2] = {3, 64};
    for (int grp = G_X_S_HALF; grp <= G_S_HALF_X; grp++)
        for (int cube = 0; cube < 2; cube++) {
            gelu_reset();
            gelu_group = grp;
            gelu_cube_mul = cube;
            pair p = both(build_gelu_tanh, 2, dims, 4.0f, 1e-6);
            assert_gelu(p.opt->graph, "tanh");
            pair_free(&p);
        }
}
END_TEST

START_TEST(fuse_gelu_near_misses)
{
    int64_t dims[2] = {3, 64};
    for (int c = 0; c < 5; c++) {
        gelu_reset();
        if (c == 0)
            gelu_c = 0.6f; /* erf(0.6 x): another function */
        else if (c == 1)
            gelu_c = 0.7072f; /* 1.3e-4 off: past the tolerance */
        else if (c == 2)
            gelu_half = 0.25f;
        else if (c == 3)
            gelu_leak = 1;
        else
            gelu_group = G_X_HALF_S, gelu_c = 1.702f; /* sigmoid-GELU's constant */
        pair p = both(build_gelu_erf, 2, dims, 4.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Gelu"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Erf"), 1);
        pair_free(&p);
    }
    for (int c = 0; c < 3; c++) {
        gelu_reset();
        if (c == 0)
            gelu_a = 0.05f;
        else if (c == 1)
            gelu_k = 0.75f;
        else
            gelu_leak = 1;
        pair p = both(build_gelu_tanh, 2, dims, 4.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Gelu"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Tanh"), 1);
        pair_free(&p);
    }
}
END_TEST

/* The constants of a typed-out GELU within tolerance still match:
 * 1.4142 and 0.70711 as a person writes them. */
START_TEST(fuse_gelu_rounded_constants)
{
    int64_t dims[2] = {3, 64};
    gelu_reset();
    gelu_div_scale = 1;
    gelu_c = 1.0f / 1.4142f;
    pair p = both(build_gelu_erf, 2, dims, 4.0f, 1e-4);
    assert_gelu(p.opt->graph, "none");
    pair_free(&p);
}
END_TEST

/* Nodes with too few inputs reach the passes before finalize checks them
 * against their schema: the matchers must not read past them (ASan). */
START_TEST(patterns_with_short_nodes)
{
    for (int c = 0; c < 4; c++) {
        begin(2, (int64_t[]){-1, 16});
        scalar("c", 0.70710678f);
        scalar("one", 1.0f);
        scalar("two", 2.0f);
        scalar("eps", 1e-5f);
        slim_node *m = op("ReduceMean", "m", 1, "x");
        tu_attr_ints(m, "axes", 1, (int64_t[]){-1});
        op("Sub", "d", 2, "x", "m");
        op("Pow", "sq", c == 0 ? 1 : 2, "d", "two");
        m = op("ReduceMean", "v", c == 1 ? 0 : 1, "sq");
        tu_attr_ints(m, "axes", 1, (int64_t[]){-1});
        op("Add", "e", 2, "v", "eps");
        op("Sqrt", "s", 1, "e");
        op("Div", "n", c == 2 ? 1 : 2, "d", "s");
        op("Mul", "t", 2, "n", "c");
        op("Erf", "er", 1, "t");
        op("Add", "a", 2, "er", "one");
        op("Mul", "p", 2, "a", "n");
        op("Div", "y", c == 3 ? 1 : 2, "p", "two");
        output("y");
        slim_err err = {0};
        slim_passes_run(G, &err);
        slim_model *mdl;
        ck_assert_int_ne(slim_model_from_graph(G, &mdl, &err), SLIM_OK); /* frees G */
    }
}
END_TEST

Suite *rewrite_gelu_suite(void)
{
    Suite *s = suite_create("pass_rewrite_gelu");
    TCase *tc = tcase_create("rewrite");
    tcase_add_test(tc, fuse_gelu_erf_orders);
    tcase_add_test(tc, gpu_conversion_fuses_before_half);
    tcase_add_test(tc, fold_attention_scale_forms);
    tcase_add_test(tc, fuse_gelu_tanh_forms);
    tcase_add_test(tc, fuse_gelu_near_misses);
    tcase_add_test(tc, fuse_gelu_rounded_constants);
    tcase_add_test(tc, patterns_with_short_nodes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(rewrite_gelu_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
