/*
 * test_pass_bias.c - the fuse_matmul_bias pass (GPU placements) and the
 * CPU kernel of its MatMulBias: MatMul by a constant weight + a constant
 * bias [+ Relu] becomes one node computing what the nodes did, the bias on
 * either side of the Add, in float32 and (after the half pass, as a GPU
 * load runs it) float16; near misses stay; the host leaves them alone; a
 * hand-made node with bad operands gets an error naming them.
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

#define K 37
#define N 19

enum { V_PLAIN, V_BIAS_FIRST, V_RELU, V_OUT_READ };

/* x [3, 5, K] -> MatMul(x, w [K, N]) -> Add(., b [N]) [-> Relu] -> y.
 * V_OUT_READ: the sum is also a graph output (still fused). */
static int g_variant;
static void build(void)
{
    begin();
    rng_state = 41;
    init_f32("w", 2, (int64_t[]){K, N}, -0.5f, 0.5f);
    init_f32("b", 1, (int64_t[]){N}, -1.0f, 1.0f);
    op("MatMul", "p", 2, "x", "w");
    if (g_variant == V_BIAS_FIRST)
        op("Add", "s", 2, "b", "p");
    else
        op("Add", "s", 2, "p", "b");
    if (g_variant == V_RELU) {
        op("Relu", "y", 1, "s");
        slim_graph_add_output(G, slim_graph_find_value(G, "y"));
    } else {
        op("Neg", "y", 1, "s");
        slim_graph_add_output(G, slim_graph_find_value(G, "y"));
        if (g_variant == V_OUT_READ)
            slim_graph_add_output(G, slim_graph_find_value(G, "s"));
    }
}

/* The graph built, with the GPU's passes or none, then made half. */
static slim_model *load(bool passes, bool half)
{
    build();
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run_for(G, false, &err) == SLIM_OK, "%s", err.msg);
    if (half)
        ck_assert_msg(slim_quant_half(G, SLIM_F16, NULL, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(G, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

static double at(const slim_tensor *t, int64_t i)
{
    if (t->dtype == SLIM_F16)
        return slim_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

static void compare(slim_model *ref, slim_model *opt, double tol)
{
    int64_t dims[3] = {3, 5, K}, n = 3 * 5 * K;
    float *d = malloc(sizeof(float) * (size_t)n);
    rng_state = 1234;
    for (int64_t i = 0; i < n; i++)
        d[i] = 2.0f * rndf();
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
        ck_assert_int_eq(a[o].dtype, b[o].dtype);
        ck_assert_int_eq(slim_tensor_numel(&a[o]), slim_tensor_numel(&b[o]));
        double mx = 0;
        for (int64_t i = 0; i < slim_tensor_numel(&a[o]); i++)
            mx = fmax(mx, fabs(at(&a[o], i)));
        ck_assert(mx > 0.5); /* outputs of zeros would prove nothing */
        for (int64_t i = 0; i < slim_tensor_numel(&a[o]); i++)
            ck_assert_msg(fabs(at(&a[o], i) - at(&b[o], i)) <= tol * mx, "variant %d output %d "
                          "element %lld: %g vs %g", g_variant, o, (long long)i, at(&b[o], i),
                          at(&a[o], i));
    }
    slim_tensors_free(a, na);
    slim_tensors_free(b, nb);
    slim_tensor_release(&x);
}

/* Float32 within a product's rounding; float16 bitwise: the kernel rounds
 * the product, then the sum, as MatMul and Add each did. */
START_TEST(fused_matches)
{
    g_variant = _i % 4;
    bool half = _i >= 4;
    slim_model *ref = load(false, half), *opt = load(true, half);
    ck_assert_int_eq(count_op(opt->graph, "MatMulBias"), 1);
    ck_assert_int_eq(count_op(opt->graph, "MatMul"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Add"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Relu"), 0);
    compare(ref, opt, half ? 0 : 1e-6);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* Left as they are: on the host (fuse_matmul's); a [1, N] bias (it would
 * broadcast rows); a bias that is no constant; a product read twice;
 * SLIM_FUSE_BIAS=0. */
START_TEST(near_misses_left)
{
    g_variant = V_RELU;
    for (int c = 0; c < 5; c++) {
        build();
        int b = slim_graph_find_value(G, "b");
        if (c == 1) {
            G->values[b].init.ndim = 2;
            G->values[b].init.dims[0] = 1;
            G->values[b].init.dims[1] = N;
        } else if (c == 2) {
            G->values[b].kind = SLIM_VALUE_INTERMEDIATE;
            slim_tensor_release(&G->values[b].init);
            op("Sin", "b", 1, "x"); /* wrong width: never run */
        } else if (c == 3) {
            op("Neg", "q", 1, "p");
            slim_graph_add_output(G, slim_graph_find_value(G, "q"));
        }
        if (c == 4)
            setenv("SLIM_FUSE_BIAS", "0", 1);
        slim_err err = {0};
        ck_assert_msg(slim_passes_run_for(G, c == 0, &err) == SLIM_OK, "%s", err.msg);
        unsetenv("SLIM_FUSE_BIAS");
        ck_assert_msg(count_op(G, "MatMulBias") == 0, "case %d fused", c);
        slim_graph_free(G);
    }
}
END_TEST

/* A hand-made node (a file's): operands that disagree, or an activation
 * the kernel lacks, are refused by name. */
START_TEST(bad_operands_refused)
{
    for (int c = 0; c < 2; c++) {
        begin();
        rng_state = 3;
        init_f32("w", 2, (int64_t[]){K, N}, -1, 1);
        init_f32("b", 1, (int64_t[]){c == 0 ? N + 1 : N}, -1, 1);
        int id = slim_graph_add_node(G, "mmb", "MatMulBias", "com.slimserve", 3,
                                     (const char *[]){"x", "w", "b"}, 1, (const char *[]){"y"});
        G->nodes[id].opset = 1;
        if (c == 1)
            tu_attr_s(&G->nodes[id], "activation", "Tanh");
        slim_graph_add_output(G, slim_graph_find_value(G, "y"));
        slim_model *m;
        slim_err err = {0};
        slim_status st = slim_model_from_graph(G, &m, &err);
        if (c == 1) {
            ck_assert_int_eq(st, SLIM_EINVAL);
            ck_assert_ptr_nonnull(strstr(err.msg, "Tanh"));
            continue;
        }
        ck_assert_msg(st == SLIM_OK, "%s", err.msg);
        float d[2 * K] = {0};
        slim_tensor x = tu_f32(2, (int64_t[]){2, K}, d), *out = NULL;
        int n_out;
        ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                         SLIM_ESHAPE);
        ck_assert_ptr_nonnull(strstr(err.msg, "do not agree"));
        slim_tensor_release(&x);
        slim_model_free(m);
    }
}
END_TEST

static Suite *bias_suite(void)
{
    Suite *s = suite_create("pass_bias");
    TCase *tc = tcase_create("bias");
    tcase_add_loop_test(tc, fused_matches, 0, 8);
    tcase_add_test(tc, near_misses_left);
    tcase_add_test(tc, bad_operands_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(bias_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
