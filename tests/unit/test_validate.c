/*
 * test_validate.c - nodes that break their operator's schema are refused at
 * load with a message naming the node, the slot and the problem
 * (runtime/validate.c). The cases are the patterns a mutation fuzzer found
 * crashing kernels before the check existed (issue 9).
 */
#include "testutil.h"
#include "validate.h"
#include "slim_init.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A graph with one node; every named input is a graph input, every named
 * output a graph output. "" marks an empty slot. */
static slim_graph *one_node(const char *op, int opset, int n_in, const char *const *in,
                            int n_out, const char *const *out)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = opset;
    int id = slim_graph_add_node(g, "n0", op, "", n_in, in, n_out, out);
    ck_assert_int_ge(id, 0);
    g->nodes[id].opset = opset;
    for (int i = 0; i < n_in; i++)
        if (in[i][0] && slim_graph_find_value(g, in[i]) >= 0 &&
            g->values[slim_graph_find_value(g, in[i])].kind != SLIM_VALUE_INPUT)
            ck_assert_int_eq(slim_graph_add_input(g, slim_graph_find_value(g, in[i])), SLIM_OK);
    for (int i = 0; i < n_out; i++)
        if (out[i][0])
            ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, out[i])), SLIM_OK);
    return g;
}

/* Loads g (consumed) and asserts it is refused with status st and a
 * message containing each of the NULL-terminated fragments. */
static void assert_refused(slim_graph *g, slim_status st, ...)
{
    slim_model *m = NULL;
    slim_err err = {0};
    slim_status got = slim_model_from_graph(g, &m, &err);
    ck_assert_ptr_null(m);
    ck_assert_msg(got == st, "status %d, want %d: %s", got, st, err.msg);
    va_list ap;
    va_start(ap, st);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err.msg, frag), "message \"%s\" lacks \"%s\"", err.msg, frag);
    va_end(ap);
}

static void assert_loads(slim_graph *g)
{
    slim_model *m = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    slim_model_free(m);
}

#define NAMES(...) (const char *const[]){__VA_ARGS__}

START_TEST(test_too_few_inputs)
{
    assert_refused(one_node("Transpose", 13, 0, NAMES(""), 1, NAMES("y")), SLIM_EPARSE,
                   "node \"n0\" (Transpose)", "has 0 inputs", "needs at least 1", NULL);
    assert_refused(one_node("Softmax", 13, 0, NAMES(""), 1, NAMES("y")), SLIM_EPARSE,
                   "needs at least 1", NULL);
    assert_refused(one_node("MatMul", 13, 1, NAMES("a"), 1, NAMES("y")), SLIM_EPARSE,
                   "has 1 input,", "needs at least 2", NULL);
    assert_refused(one_node("Conv", 11, 1, NAMES("w"), 1, NAMES("y")), SLIM_EPARSE,
                   "(Conv)", "needs at least 2", NULL);
    assert_refused(one_node("Resize", 13, 0, NAMES(""), 1, NAMES("y")), SLIM_EPARSE,
                   "(Resize)", "needs at least 1", NULL);
    /* A trailing empty name is no input at all. */
    assert_refused(one_node("Add", 14, 2, NAMES("a", ""), 1, NAMES("y")), SLIM_EPARSE,
                   "has 1 input,", NULL);
}
END_TEST

START_TEST(test_too_many)
{
    assert_refused(one_node("Relu", 14, 2, NAMES("a", "b"), 1, NAMES("y")), SLIM_EPARSE,
                   "has 2 inputs", "takes at most 1", NULL);
    assert_refused(one_node("Relu", 14, 1, NAMES("a"), 2, NAMES("y", "z")), SLIM_EPARSE,
                   "has 2 outputs", "produces at most 1", NULL);
    assert_refused(one_node("Relu", 14, 1, NAMES("a"), 0, NAMES("")), SLIM_EPARSE,
                   "has 0 outputs", "produces at least 1", NULL);
}
END_TEST

START_TEST(test_empty_required_slot)
{
    /* Gemm's C is optional, B is not. */
    assert_refused(one_node("Gemm", 13, 3, NAMES("a", "", "c"), 1, NAMES("y")), SLIM_EPARSE,
                   "(Gemm)", "input 1 is required, but its name is empty", NULL);
    /* Resize 13: roi and scales may be empty, sizes given. */
    slim_graph *g = one_node("Resize", 13, 4, NAMES("x", "", "", "sizes"), 1, NAMES("y"));
    assert_loads(g);
    /* Resize 11: roi was required then. */
    assert_refused(one_node("Resize", 11, 3, NAMES("x", "", "scales"), 1, NAMES("y")),
                   SLIM_EPARSE, "input 1 is required", NULL);
    /* Every input of a variadic operator is read. */
    assert_refused(one_node("Concat", 13, 3, NAMES("a", "", "b"), 1, NAMES("y")), SLIM_EPARSE,
                   "(Concat)", "input 1 is required", NULL);
    /* TopK's indices output is not optional. */
    assert_refused(one_node("TopK", 11, 2, NAMES("x", "k"), 2, NAMES("v", "")), SLIM_EPARSE,
                   "output 1 is required, but its name is empty", NULL);
    /* Dropout's mask is. */
    assert_loads(one_node("Dropout", 13, 1, NAMES("x"), 2, NAMES("y", "")));
}
END_TEST

START_TEST(test_undefined_name)
{
    /* "a" is neither an input nor produced: one_node makes it an input, so
     * build the graph by hand. */
    slim_graph *g = slim_graph_new();
    g->opset = 14;
    ck_assert_int_ge(slim_graph_add_node(g, "n0", "Relu", "", 1, NAMES("ghost"), 1, NAMES("y")), 0);
    g->nodes[0].opset = 14;
    ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, "y")), SLIM_OK);
    assert_refused(g, SLIM_EPARSE, "input \"ghost\" is not a graph input", NULL);

    /* Two nodes writing one value. */
    g = slim_graph_new();
    g->opset = 14;
    ck_assert_int_ge(slim_graph_add_node(g, "n0", "Relu", "", 1, NAMES("x"), 1, NAMES("y")), 0);
    ck_assert_int_ge(slim_graph_add_node(g, "n1", "Neg", "", 1, NAMES("x"), 1, NAMES("y")), 0);
    g->nodes[0].opset = g->nodes[1].opset = 14;
    ck_assert_int_eq(slim_graph_add_input(g, slim_graph_find_value(g, "x")), SLIM_OK);
    ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, "y")), SLIM_OK);
    assert_refused(g, SLIM_EPARSE, "already produced elsewhere", NULL);
}
END_TEST

START_TEST(test_attribute_types)
{
    slim_graph *g = one_node("Transpose", 13, 1, NAMES("x"), 1, NAMES("y"));
    tu_attr_f(tu_node0(g), "perm", 1.0f);
    assert_refused(g, SLIM_EPARSE, "(Transpose)", "attribute \"perm\" must be INTS",
                   "gives FLOAT", NULL);

    g = one_node("Softmax", 13, 1, NAMES("x"), 1, NAMES("y"));
    tu_attr_s(tu_node0(g), "axis", "1");
    assert_refused(g, SLIM_EPARSE, "attribute \"axis\" must be INT", "gives STRING", NULL);

    g = one_node("Relu", 14, 1, NAMES("x"), 1, NAMES("y"));
    tu_attr_i(tu_node0(g), "alpha", 1);
    assert_refused(g, SLIM_EPARSE, "has no attribute \"alpha\"", NULL);

    g = one_node("Cast", 13, 1, NAMES("x"), 1, NAMES("y"));
    assert_refused(g, SLIM_EPARSE, "required attribute \"to\" is missing", NULL);

    g = one_node("Softmax", 13, 1, NAMES("x"), 1, NAMES("y"));
    tu_attr_i(tu_node0(g), "axis", 1);
    tu_attr_i(tu_node0(g), "axis", 0);
    assert_refused(g, SLIM_EPARSE, "attribute \"axis\" is given twice", NULL);

    /* Right types load. */
    g = one_node("Transpose", 13, 1, NAMES("x"), 1, NAMES("y"));
    tu_attr_ints(tu_node0(g), "perm", 2, (int64_t[]){1, 0});
    assert_loads(g);
}
END_TEST

/* The schema picked is the one in force at the model's opset. */
START_TEST(test_schema_versions)
{
    const slim_op_schema *s = slim_op_schema_find("", "Resize", 12);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->since, 11);
    ck_assert_int_eq(s->min_in, 3);
    s = slim_op_schema_find("ai.onnx", "Resize", 13);
    ck_assert_int_eq(s->since, 13);
    ck_assert_int_eq(s->min_in, 1);
    ck_assert_ptr_null(slim_op_schema_find("", "Resize", 9));
    ck_assert_ptr_null(slim_op_schema_find("", "NoSuchOp", 20));
    ck_assert_ptr_null(slim_op_schema_find("com.example", "Relu", 20));
    ck_assert_ptr_nonnull(slim_op_schema_find("com.slimserve", "MemcpyToHost", 1));
}
END_TEST

/* Every operator slimserve implements has a schema at the version it was
 * registered for, so none is refused for want of one. */
static void check_def(const slim_op_def *d, void *user)
{
    int *missing = user;
    if (!slim_op_schema_find("", d->op_type, d->since)) {
        fprintf(stderr, "no schema for %s since %d\n", d->op_type, d->since);
        (*missing)++;
    }
}

START_TEST(test_every_op_has_a_schema)
{
    int missing = 0;
    slim_op_foreach(check_def, &missing);
    ck_assert_int_eq(missing, 0);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("validate");
    tcase_add_test(tc, test_too_few_inputs);
    tcase_add_test(tc, test_too_many);
    tcase_add_test(tc, test_empty_required_slot);
    tcase_add_test(tc, test_undefined_name);
    tcase_add_test(tc, test_attribute_types);
    tcase_add_test(tc, test_schema_versions);
    tcase_add_test(tc, test_every_op_has_a_schema);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
