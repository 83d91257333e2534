/*
 * test_flex_attention.c - FlexAttention (kernels/cpu/flex_attention.c)
 * against a direct computation: grouped query heads, a score_mod subgraph
 * that reads an outer-scope value, and the errors a wrong graph gets (head
 * counts that do not divide, a score_mod whose output has the wrong size).
 */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void attach(slim_node *n, const char *name, slim_graph *sub)
{
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (size_t)(n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->type = SLIM_ATTR_GRAPH;
    a->g = sub;
}

/* Q [1,4,2,2] (4 query heads), K and V [1,2,3,2] (2 kv heads). */
static slim_graph *flex_graph(void)
{
    slim_graph *g = tu_graph("FlexAttention", 1, 3, (const char *[]){"q", "k", "v"}, 1);
    free(tu_node0(g)->domain);
    tu_node0(g)->domain = strdup("ai.onnx.preview");
    return g;
}

static void inputs(slim_tensor in[3], int64_t hkv)
{
    float q[16], k[12], v[12];
    for (int i = 0; i < 16; i++)
        q[i] = (float)((i * 7) % 5) * 0.25f - 0.5f;
    for (int i = 0; i < 12; i++) {
        k[i] = (float)((i * 3) % 4) * 0.5f - 0.75f;
        v[i] = (float)i;
    }
    in[0] = tu_f32(4, (int64_t[]){1, 4, 2, 2}, q);
    in[1] = tu_f32(4, (int64_t[]){1, hkv, 12 / (2 * hkv), 2}, k);
    in[2] = tu_f32(4, (int64_t[]){1, hkv, 12 / (2 * hkv), 2}, v);
}

/* softmax(q k^T / sqrt(2) + bias) v, query head h reading kv head h / 2. */
static void reference(const slim_tensor in[3], float bias, float *out)
{
    const float *q = in[0].data, *k = in[1].data, *v = in[2].data;
    for (int h = 0; h < 4; h++)
        for (int i = 0; i < 2; i++) {
            double s[3], mx = -INFINITY, sum = 0;
            for (int j = 0; j < 3; j++) {
                s[j] = bias;
                for (int e = 0; e < 2; e++)
                    s[j] += q[(h * 2 + i) * 2 + e] * k[((h / 2) * 3 + j) * 2 + e] / sqrt(2.0);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < 3; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < 2; e++) {
                double acc = 0;
                for (int j = 0; j < 3; j++)
                    acc += s[j] / sum * v[((h / 2) * 3 + j) * 2 + e];
                out[(h * 2 + i) * 2 + e] = (float)acc;
            }
        }
}

START_TEST(test_grouped_heads)
{
    slim_tensor in[3], *out;
    int n_out;
    slim_err err = {0};
    inputs(in, 2);
    float want[16];
    reference(in, 0, want);
    ck_assert_msg(tu_run(flex_graph(), in, 3, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 4, 2, 2});
    tu_assert_close_f32(&out[0], want, 16, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
}
END_TEST

/* score_mod adds an outer-scope weight b (an initializer of the parent). */
START_TEST(test_score_mod_reads_outer_scope)
{
    slim_graph *g = flex_graph();
    int b = slim_graph_value(g, "b");
    g->values[b].kind = SLIM_VALUE_INITIALIZER;
    g->values[b].init = tu_f32(0, NULL, (float[]){0.5f});
    slim_graph *mod = slim_graph_new();
    mod->opset = 20;
    int id = slim_graph_add_node(mod, "add_b", "Add", "", 2, (const char *[]){"s", "b"}, 1,
                                 (const char *[]){"t"});
    mod->nodes[id].opset = 20;
    ck_assert_int_eq(slim_graph_add_input(mod, slim_graph_value(mod, "s")), SLIM_OK);
    ck_assert_int_eq(slim_graph_add_output(mod, slim_graph_find_value(mod, "t")), SLIM_OK);
    attach(tu_node0(g), "score_mod", mod);
    slim_err err = {0};
    ck_assert_int_eq(slim_graph_capture_outer(g, 0, &err), SLIM_OK);
    ck_assert_int_eq(tu_node0(g)->n_implicit, 1);
    slim_tensor in[3], *out;
    int n_out;
    inputs(in, 2);
    float want[16];
    reference(in, 0.5f, want); /* a constant bias cancels in the softmax */
    ck_assert_msg(tu_run(g, in, 3, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_close_f32(&out[0], want, 16, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
}
END_TEST

START_TEST(test_wrong_graphs_are_errors)
{
    /* 4 query heads over 3 kv heads. */
    slim_tensor in[3], *out;
    int n_out;
    slim_err err = {0};
    inputs(in, 2);
    slim_tensor_release(&in[1]);
    slim_tensor_release(&in[2]);
    float kv[18] = {0};
    in[1] = tu_f32(4, (int64_t[]){1, 3, 3, 2}, kv);
    in[2] = tu_f32(4, (int64_t[]){1, 3, 3, 2}, kv);
    ck_assert_int_eq(tu_run(flex_graph(), in, 3, &out, &n_out, &err), SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "not a multiple of 3"), "%s", err.msg);
    tu_free_inputs(in, 3);
    /* A score_mod that reduces the scores to one value. */
    slim_graph *g = flex_graph();
    slim_graph *mod = slim_graph_new();
    mod->opset = 18;
    int id = slim_graph_add_node(mod, "sum", "ReduceSum", "", 1, (const char *[]){"s"}, 1,
                                 (const char *[]){"t"});
    mod->nodes[id].opset = 18;
    ck_assert_int_eq(slim_graph_add_input(mod, slim_graph_value(mod, "s")), SLIM_OK);
    ck_assert_int_eq(slim_graph_add_output(mod, slim_graph_find_value(mod, "t")), SLIM_OK);
    attach(tu_node0(g), "score_mod", mod);
    ck_assert_int_eq(slim_graph_capture_outer(g, 0, &err), SLIM_OK);
    inputs(in, 2);
    ck_assert_int_eq(tu_run(g, in, 3, &out, &n_out, &err), SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "score_mod gave 1 values, expected 24"), "%s", err.msg);
    tu_free_inputs(in, 3);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("flex_attention");
    TCase *tc = tcase_create("flex_attention");
    tcase_add_test(tc, test_grouped_heads);
    tcase_add_test(tc, test_score_mod_reads_outer_scope);
    tcase_add_test(tc, test_wrong_graphs_are_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
