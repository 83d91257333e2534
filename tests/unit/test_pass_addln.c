/*
 * test_pass_addln.c - the fuse_add_layernorm pass and its AddLayerNorm
 * kernel: Add -> LayerNormalization(axis -1) becomes one node computing
 * bitwise what the two did, over same-shape operands, a [D] and an [S, D]
 * operand repeating by rows, a [N, 1, D] one broadcast in the middle, with
 * and without the LayerNorm's bias, with the sum read elsewhere too; and
 * near misses (another axis, a non-constant scale, Mean as an output) left
 * as they are.
 */
#include "testutil.h"

#include "fp16.h"
#include "pass.h"
#include "pipeline.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static slim_graph *G;
static uint32_t rng_state;

static float rndf(void)
{
    return tu_rndf(&rng_state);
}

static void begin(void)
{
    G = tu_graph_x();
}

static void init_f32(const char *name, int ndim, const int64_t *dims, float lo, float hi)
{
    tu_init_f32(G, &rng_state, name, ndim, dims, lo, hi);
}

#define op(...) tu_op(G, __VA_ARGS__)
#define count_op tu_count_op

#define D 37 /* not a multiple of 16: the vector rows' tails */

enum { B_SAME, B_ROW, B_PLANE, B_MIDDLE, B_FIRST };

/* x [3, 5, D] -> a = Mul(x, 1.5); b as `kind`; LN(Add(a, b)) -> y; with
 * `read_sum` also Relu(sum) -> r, an output; `bias` the LN's B. */
static int g_kind;
static bool g_read_sum, g_bias;
static void build(void)
{
    begin();
    rng_state = 77;
    init_f32("c", 0, NULL, 1.5f, 1.5f);
    op("Mul", "a", 2, "x", "c");
    switch (g_kind) {
    case B_SAME:
        op("Sin", "b", 1, "x");
        break;
    case B_ROW:
        init_f32("b", 1, (int64_t[]){D}, -2.0f, 2.0f);
        break;
    case B_PLANE:
        init_f32("b", 2, (int64_t[]){5, D}, -2.0f, 2.0f);
        break;
    case B_MIDDLE: { /* [3, 1, D]: broadcast along the middle dim */
        slim_node *r = op("ReduceMax", "b", 1, "x");
        tu_attr_ints(r, "axes", 1, (int64_t[]){1});
        break;
    }
    case B_FIRST:
        init_f32("b", 1, (int64_t[]){D}, -2.0f, 2.0f);
        break;
    }
    init_f32("gamma", 1, (int64_t[]){D}, 0.5f, 1.5f);
    init_f32("beta", 1, (int64_t[]){D}, -0.3f, 0.3f);
    if (g_kind == B_FIRST)
        op("Add", "s", 2, "b", "a"); /* the broadcast operand first */
    else
        op("Add", "s", 2, "a", "b");
    slim_node *ln = g_bias ? op("LayerNormalization", "y", 3, "s", "gamma", "beta")
                           : op("LayerNormalization", "y", 2, "s", "gamma");
    tu_attr_f(ln, "epsilon", 1e-3f);
    slim_graph_add_output(G, slim_graph_find_value(G, "y"));
    if (g_read_sum) {
        op("Relu", "r", 1, "s");
        slim_graph_add_output(G, slim_graph_find_value(G, "r"));
    }
}

static slim_model *load(bool passes)
{
    build();
    return tu_model(G, passes);
}

static void same_bits(slim_model *ref, slim_model *opt)
{
    int64_t dims[3] = {3, 5, D}, n = 3 * 5 * D;
    float *d = malloc(sizeof(float) * (size_t)n);
    rng_state = 1234;
    for (int64_t i = 0; i < n; i++)
        d[i] = 3.0f * rndf();
    slim_tensor x = tu_f32(3, dims, d), *a = NULL, *b = NULL;
    free(d);
    int na, nb;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(ref, 1, (const char *[]){"x"}, &x, &a, &na, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_msg(slim_model_run(opt, 1, (const char *[]){"x"}, &x, &b, &nb, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(na, nb);
    for (int o = 0; o < na; o++) {
        ck_assert_int_eq(slim_tensor_numel(&a[o]), slim_tensor_numel(&b[o]));
        ck_assert_msg(memcmp(a[o].data, b[o].data, slim_tensor_nbytes(&a[o])) == 0,
                      "kind %d output %d differs", g_kind, o);
    }
    slim_tensors_free(a, na);
    slim_tensors_free(b, nb);
    slim_tensor_release(&x);
}

/* Every operand shape, with and without bias and a second reader. */
START_TEST(fused_bitwise)
{
    int kinds[] = {B_SAME, B_ROW, B_PLANE, B_MIDDLE, B_FIRST};
    g_kind = kinds[_i % 5];
    g_read_sum = (_i / 5) % 2;
    g_bias = _i / 10 == 0;
    slim_model *ref = load(false), *opt = load(true);
    ck_assert_int_eq(count_op(opt->graph, "AddLayerNorm"), 1);
    ck_assert_int_eq(count_op(opt->graph, "LayerNormalization"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Add"), 0);
    for (int i = 0; i < opt->graph->n_nodes; i++)
        if (strcmp(opt->graph->nodes[i].op_type, "AddLayerNorm") == 0)
            ck_assert_int_eq(opt->graph->nodes[i].n_out, g_read_sum ? 2 : 1);
    same_bits(ref, opt);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* A model placed on a GPU: the pass runs before the graph goes half, and
 * AddLayerNorm then takes float16 operands (its CPU kernel stands in for
 * the CUDA one here); it answers what Add and LayerNormalization in half
 * do, within a half's rounding of the normalized values. */
START_TEST(gpu_half_matches)
{
    int kinds[] = {B_SAME, B_ROW, B_MIDDLE};
    g_kind = kinds[_i % 3];
    g_read_sum = _i / 3;
    g_bias = true;
    slim_model *m[2];
    slim_err err = {0};
    for (int k = 0; k < 2; k++) {
        build();
        if (k)
            ck_assert_msg(slim_passes_run_for(G, false, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_quant_half(G, SLIM_F16, NULL, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_model_from_graph(G, &m[k], &err) == SLIM_OK, "%s", err.msg);
    }
    ck_assert_int_eq(count_op(m[1]->graph, "AddLayerNorm"), 1);
    ck_assert_int_eq(count_op(m[1]->graph, "LayerNormalization"), 0);
    int64_t dims[3] = {3, 5, D}, n = 3 * 5 * D;
    float *d = malloc(sizeof(float) * (size_t)n);
    rng_state = 99;
    for (int64_t i = 0; i < n; i++)
        d[i] = 3.0f * rndf();
    slim_tensor x = tu_f32(3, dims, d), *out[2];
    free(d);
    int n_out[2];
    for (int k = 0; k < 2; k++)
        ck_assert_msg(slim_model_run(m[k], 1, (const char *[]){"x"}, &x, &out[k], &n_out[k],
                                     &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(n_out[0], n_out[1]);
    for (int o = 0; o < n_out[0]; o++) {
        ck_assert_int_eq(out[0][o].dtype, SLIM_F16);
        ck_assert_int_eq(out[1][o].dtype, SLIM_F16);
        const uint16_t *u = out[0][o].data, *v = out[1][o].data;
        for (int64_t i = 0; i < n; i++) {
            float fu = slim_f16_to_f32(u[i]), fv = slim_f16_to_f32(v[i]);
            ck_assert_msg(fabsf(fu - fv) <= 4e-3f * (1.0f + fabsf(fu)), "kind %d output %d "
                          "element %lld: %g vs %g", g_kind, o, (long long)i, fv, fu);
        }
    }
    slim_tensors_free(out[0], n_out[0]);
    slim_tensors_free(out[1], n_out[1]);
    slim_tensor_release(&x);
    slim_model_free(m[0]);
    slim_model_free(m[1]);
}
END_TEST

/* Near misses stay: LN over axis 1; Mean as an output; a scale that is not
 * a constant; SLIM_FUSE_ADDLN=0. */
START_TEST(near_misses_left)
{
    g_kind = B_SAME;
    g_read_sum = false;
    g_bias = true;
    for (int c = 0; c < 4; c++) {
        build();
        for (int i = 0; i < G->n_nodes; i++) {
            slim_node *n = &G->nodes[i];
            if (strcmp(n->op_type, "LayerNormalization"))
                continue;
            if (c == 0) {
                tu_attr_i(n, "axis", 1);
            } else if (c == 1) {
                int *out = realloc(n->out, sizeof(int) * 2);
                ck_assert_ptr_nonnull(out);
                n->out = out;
                n->out[1] = slim_graph_value(G, "mean");
                n->n_out = 2;
            } else if (c == 2) {
                n->in[1] = slim_graph_find_value(G, "b"); /* Sin(x): no constant */
            }
        }
        if (c == 3)
            setenv("SLIM_FUSE_ADDLN", "0", 1);
        slim_err err = {0};
        ck_assert_msg(slim_passes_run(G, &err) == SLIM_OK, "%s", err.msg);
        unsetenv("SLIM_FUSE_ADDLN");
        ck_assert_msg(count_op(G, "AddLayerNorm") == 0, "case %d fused", c);
        ck_assert_int_eq(count_op(G, "LayerNormalization"), 1);
        slim_graph_free(G);
    }
}
END_TEST

/* Bad shapes reach the kernel only from a hand-made graph: an error naming
 * them, not a crash. */
START_TEST(bad_shapes_refused)
{
    begin();
    rng_state = 3;
    init_f32("b", 1, (int64_t[]){4}, -1, 1);
    init_f32("gamma", 1, (int64_t[]){D}, 0.5f, 1.5f);
    int id = slim_graph_add_node(G, "aln", "AddLayerNorm", "com.slimserve", 3,
                                 (const char *[]){"x", "b", "gamma"}, 1, (const char *[]){"y"});
    G->nodes[id].opset = 1;
    slim_graph_add_output(G, slim_graph_find_value(G, "y"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(G, &m, &err) == SLIM_OK, "%s", err.msg);
    float d[2 * D] = {0};
    slim_tensor x = tu_f32(2, (int64_t[]){2, D}, d), *out = NULL;
    int n_out;
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "broadcast"));
    slim_tensor_release(&x);
    slim_model_free(m);
}
END_TEST

static Suite *addln_suite(void)
{
    Suite *s = suite_create("pass_addln");
    TCase *tc = tcase_create("addln");
    tcase_add_loop_test(tc, fused_bitwise, 0, 20);
    tcase_add_loop_test(tc, gpu_half_matches, 0, 6);
    tcase_add_test(tc, near_misses_left);
    tcase_add_test(tc, bad_shapes_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(addln_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
