/*
 * test_conv_winograd.c - FusedConv's stored Winograd (kernels/cpu/
 * conv_wino.c): with SLIM_CONV_WINO_STORED=1, 3x3 stride-1 convs on
 * planes from 14x14 to 28x28 get W transformed at load for oneDNN's
 * F(2x2, 3x3), in place of the packed W. The answer must be the
 * reference's within float rounding, different bits from the kernel it
 * replaced (so it did run), the same bits for an image alone or in a
 * batch; the model's weight bytes must be the transformed W's (16/9 of
 * the packed, no packed copy beside it); planes outside the range must be
 * untouched by it, and another plane must be refused with a clear error.
 *
 * Also the blocked residual (conv_dnnl_build.c, res_binary): read in place
 * by a binary-add post-op, or with SLIM_CONV_RES_BINARY=0 copied into the
 * output for a sum post-op; both must give the reference's answer within
 * float rounding, an image's bits alone as in a batch, on direct and
 * Winograd planes and with channels padded to 16. And Y planned over R
 * where R is read for the last time (SLIM_OP_INPLACE3): a sum over what Y
 * holds, no copy; with R blocked, or plain under a blocked Y (copied aside
 * first), it must still give the reference's answer.
 */
#include "testutil.h"

#include "footprint.h"
#include "model.h"
#include "plan.h"
#include "pipeline.h"
#ifdef SLIM_HAVE_DNNL
#include "conv_dnnl.h"
#endif
#include "slim_init.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng_state;

static void add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims, float lo,
                     float hi)
{
    tu_init_f32(g, &rng_state, name, ndim, dims, lo, hi);
}

/* x[N,C,H,W] -> Conv 3x3 C->C + bias -> Relu (h) -> Conv 3x3 C->C
 * + bias + h -> Relu -> y: two stride-1 3x3 convs, the second with a
 * residual sum (oneDNN's sum post-op). */
static slim_graph *two_convs(int64_t ch, int64_t side)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 41;
    const char *names[2][4] = {{"c1.w", "c1.b", "c1", "x"}, {"c2.w", "c2.b", "c2", "h"}};
    for (int i = 0; i < 2; i++) {
        add_init(g, names[i][0], 4, (int64_t[]){ch, ch, 3, 3}, -0.1f, 0.1f);
        add_init(g, names[i][1], 1, (int64_t[]){ch}, -0.2f, 0.2f);
        int id = slim_graph_add_node(g, names[i][2], "Conv", "", 3,
                                     (const char *[]){names[i][3], names[i][0], names[i][1]}, 1,
                                     (const char *[]){names[i][2]});
        g->nodes[id].opset = 17;
        tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){3, 3});
        tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){1, 1, 1, 1});
    }
    int id = slim_graph_add_node(g, "relu1", "Relu", "", 1, (const char *[]){"c1"}, 1,
                                 (const char *[]){"h"});
    g->nodes[id].opset = 17;
    id = slim_graph_add_node(g, "add", "Add", "", 2, (const char *[]){"c2", "h"}, 1,
                             (const char *[]){"sum"});
    g->nodes[id].opset = 17;
    id = slim_graph_add_node(g, "relu2", "Relu", "", 1, (const char *[]){"sum"}, 1,
                             (const char *[]){"y"});
    g->nodes[id].opset = 17;
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    g->values[x].info.ndim = 4; /* the batch dynamic, the plane known at load */
    memcpy(g->values[x].info.dims, (int64_t[]){-1, ch, side, side}, 4 * sizeof(int64_t));
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

/* As the plan stage makes it: the graph's model, then stored Winograd
 * (which reads its switch now). */
static slim_model *load(bool passes, int64_t ch, int64_t side, bool stored)
{
    slim_graph *g = two_convs(ch, side);
    slim_model *m = tu_model(g, passes);
    if (passes)
        ck_assert_int_eq(tu_count_op(m->graph, "FusedConv"), 2);
#ifdef SLIM_HAVE_DNNL
    slim_err err = {0};
    if (stored)
        setenv("SLIM_CONV_WINO_STORED", "1", 1);
    ck_assert_msg(slim_fconv_store_winograd(m, &err) == SLIM_OK, "%s", err.msg);
    unsetenv("SLIM_CONV_WINO_STORED");
#else
    (void)stored;
#endif
    return m;
}

static slim_tensor run(slim_model *m, const slim_tensor *x)
{
    slim_tensor *out = NULL, y;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    y = out[0];
    for (int i = 1; i < n_out; i++)
        slim_tensor_release(&out[i]);
    free(out);
    return y;
}

/* The largest |a - ref| over the largest |ref|. */
static double rel_err(const slim_tensor *a, const slim_tensor *ref)
{
    int64_t n = slim_tensor_numel(ref);
    ck_assert_int_eq(slim_tensor_numel(a), n);
    double mx = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        float u = ((const float *)a->data)[i], v = ((const float *)ref->data)[i];
        mx = fmax(mx, fabs(v));
        worst = fmax(worst, fabs((double)u - v));
    }
    ck_assert(mx > 0.1); /* a graph that outputs zeros would prove nothing */
    return worst / mx;
}

static bool same_bits(const slim_tensor *a, const slim_tensor *b)
{
    return slim_tensor_numel(a) == slim_tensor_numel(b) &&
           memcmp(a->data, b->data, sizeof(float) * (size_t)slim_tensor_numel(a)) == 0;
}

/* Plane sides and channels: 14 and 28 are in the stored range, 7 and 40
 * not; 256 channels at 14x14 make 2 parts of 64 per thread
 * (conv_dnnl_build.c, parts_per_thread). */
static const int64_t cases[][2] = {{14, 64}, {28, 64}, {7, 64}, {40, 64}, {14, 256}};

START_TEST(wino_stored_matches)
{
    int64_t side = cases[_i][0], ch = cases[_i][1];
    bool stored = side >= 14 && side <= 28;
    slim_model *ref = load(false, ch, side, false), *wino = load(true, ch, side, true);
    slim_model *off = load(true, ch, side, false);
    /* Stored: two W of ch x ch x 3x3 as 4x4 tiles (16/9 of the packed
     * bytes), the packed ones gone; out of range the packed ones stay. */
    size_t packed = 2 * sizeof(float) * (size_t)(ch * ch * 9), biases = 2 * sizeof(float) * ch;
    ck_assert_uint_eq(off->weight_bytes, packed + biases);
    ck_assert_uint_eq(wino->weight_bytes, stored ? packed / 9 * 16 + biases : packed + biases);
    slim_footprint fp; /* and the footprint (a budget's figure) counts them */
    slim_model_footprint(wino, 1, &fp);
    ck_assert_uint_eq(fp.weight_bytes, wino->weight_bytes);
    slim_model_set_batch_invariant(wino, true);
    int64_t per_in = ch * side * side;
    slim_tensor x = tu_input(&rng_state, 7, 4, (int64_t[]){3, ch, side, side});
    slim_tensor a = run(ref, &x);
    slim_tensor b = run(wino, &x);
    slim_tensor c = run(off, &x);
    ck_assert_int_eq(b.dims[1], ch);
    ck_assert_int_eq(b.dims[2], side);
    double eb = rel_err(&b, &a), ec = rel_err(&c, &a);
    ck_assert_msg(eb < 1e-5, "side %lld: stored Winograd off by %g", (long long)side, eb);
    ck_assert_msg(ec < 1e-5, "side %lld: the other kernel off by %g", (long long)side, ec);
    /* in range it ran (other bits); out of range nothing changed */
    ck_assert_msg(same_bits(&b, &c) != stored, "side %lld: stored Winograd %s", (long long)side,
                  stored ? "did not run" : "ran out of its range");
    int64_t per_out = slim_tensor_numel(&b) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, ch, side, side},
                                 (const float *)x.data + n * per_in);
        slim_tensor y = run(wino, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)b.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    /* a second run reads the same transformed W */
    slim_tensor b2 = run(wino, &x);
    ck_assert(same_bits(&b, &b2));
    slim_tensor_release(&b2);
    if (stored) { /* another plane: refused (the declared plane, then
                   * FusedConv's own check), never run on the wrong W */
        slim_tensor other = tu_f32(4, (int64_t[]){1, ch, side + 2, side + 2}, NULL);
        slim_tensor *out = NULL;
        int n_out;
        slim_err err = {0};
        ck_assert_int_eq(slim_model_run(wino, 1, (const char *[]){"x"}, &other, &out, &n_out,
                                        &err), SLIM_ESHAPE);
        ck_assert_msg(strstr(err.msg, "expects") || strstr(err.msg, "Winograd"), "%s", err.msg);
        slim_tensor_release(&other);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&c);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(wino);
    slim_model_free(off);
}
END_TEST

/* Runs m on x with SLIM_CONV_RES_BINARY set to v while its primitives are
 * made (the first run), then checks every image alone gives its bits. */
static slim_tensor run_res(slim_model *m, const slim_tensor *x, const char *v)
{
    setenv("SLIM_CONV_RES_BINARY", v, 1);
    slim_tensor y = run(m, x);
    unsetenv("SLIM_CONV_RES_BINARY");
    int64_t per_in = slim_tensor_numel(x) / x->dims[0], per_out = slim_tensor_numel(&y) / y.dims[0];
    for (int64_t n = 0; n < x->dims[0]; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, x->dims[1], x->dims[2], x->dims[3]},
                                 (const float *)x->data + n * per_in);
        slim_tensor y1 = run(m, &one);
        ck_assert_msg(memcmp(y1.data, (const float *)y.data + n * per_out,
                             sizeof(float) * (size_t)per_out) == 0,
                      "RES_BINARY=%s: image %lld alone differs from it in the batch", v,
                      (long long)n);
        slim_tensor_release(&y1);
        slim_tensor_release(&one);
    }
    return y;
}

/* side, channels: 14 and 7 run direct (the binary add), 56 Winograd
 * F(4x4) (which takes only the sum: the copy stays), 24 channels pad
 * the blocked residual to 32. */
static const int64_t res_cases[][2] = {{14, 64}, {7, 24}, {14, 256}, {56, 16}};

START_TEST(residual_binary_matches)
{
    int64_t side = res_cases[_i][0], ch = res_cases[_i][1];
    slim_model *ref = load(false, ch, side, false);
    slim_model *bin = load(true, ch, side, false), *sum = load(true, ch, side, false);
    slim_model_set_batch_invariant(bin, true);
    slim_model_set_batch_invariant(sum, true);
    slim_tensor x = tu_input(&rng_state, 11, 4, (int64_t[]){3, ch, side, side});
    slim_tensor a = run(ref, &x), b = run_res(bin, &x, "1"), c = run_res(sum, &x, "0");
    double eb = rel_err(&b, &a), ec = rel_err(&c, &a);
    ck_assert_msg(eb < 1e-5, "side %lld, %lld channels: binary residual off by %g",
                  (long long)side, (long long)ch, eb);
    ck_assert_msg(ec < 1e-5, "side %lld, %lld channels: copied residual off by %g",
                  (long long)side, (long long)ch, ec);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&c);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(bin);
    slim_model_free(sum);
}
END_TEST

static void add_conv(slim_graph *g, const char *name, const char *in, int64_t ch)
{
    char w[32], b[32];
    snprintf(w, sizeof(w), "%s.w", name);
    snprintf(b, sizeof(b), "%s.b", name);
    add_init(g, w, 4, (int64_t[]){ch, ch, 3, 3}, -0.1f, 0.1f);
    add_init(g, b, 1, (int64_t[]){ch}, -0.2f, 0.2f);
    int id = slim_graph_add_node(g, name, "Conv", "", 3, (const char *[]){in, w, b}, 1,
                                 (const char *[]){name});
    g->nodes[id].opset = 17;
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){3, 3});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){1, 1, 1, 1});
}

static void add_op(slim_graph *g, const char *op, const char *a, const char *b, const char *out)
{
    const char *in[2] = {a, b};
    int id = slim_graph_add_node(g, out, op, "", b ? 2 : 1, in, 1, (const char *[]){out});
    g->nodes[id].opset = 17;
}

/* x -> [Relu ->] h -> c1 -> Relu -> t -> c2, + h -> Relu -> s -> c3 -> y:
 * h's last reader is c2's residual, so c2's output s may take h's place.
 * With the Relu, h is plain (a Relu makes it) under a blocked s (c3 reads
 * it); without, h is x... so c0 makes h, blocked. */
static slim_graph *residual_last(int64_t ch, int64_t side, bool plain)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 43;
    if (plain)
        add_op(g, "Relu", "x", NULL, "h");
    else {
        add_conv(g, "c0", "x", ch);
        add_op(g, "Relu", "c0", NULL, "h");
    }
    add_conv(g, "c1", "h", ch);
    add_op(g, "Relu", "c1", NULL, "t");
    add_conv(g, "c2", "t", ch);
    add_op(g, "Add", "c2", "h", "sum");
    add_op(g, "Relu", "sum", NULL, "s");
    add_conv(g, "c3", "s", ch);
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    g->values[x].info.ndim = 4;
    memcpy(g->values[x].info.dims, (int64_t[]){-1, ch, side, side}, 4 * sizeof(int64_t));
    slim_graph_add_output(g, slim_graph_find_value(g, "c3"));
    return g;
}

START_TEST(residual_in_place_matches)
{
    int64_t side = 14, ch = _i == 2 ? 24 : 32;
    bool plain = _i == 1;
    slim_err err = {0};
    slim_model *ref, *m;
    ck_assert_msg(slim_model_from_graph(residual_last(ch, side, plain), &ref, &err) == SLIM_OK,
                  "%s", err.msg);
    slim_graph *g = residual_last(ch, side, plain);
    ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(tu_count_op(m->graph, "FusedConv"), plain ? 3 : 4);
    slim_model_set_batch_invariant(m, true);
    /* the planner put c2's output over h */
    slim_tensor sig = {.dtype = SLIM_F32, .ndim = 4, .dims = {3, ch, side, side}};
    slim_plan *p = NULL;
    ck_assert_msg(slim_plan_build(m, &sig, &p, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_ge(p->n_inplace, 1);
    slim_plan_free(p);
    slim_tensor x = tu_input(&rng_state, 13, 4, (int64_t[]){3, ch, side, side});
    slim_tensor a = run(ref, &x), b = run_res(m, &x, "1");
    double e = rel_err(&b, &a);
    ck_assert_msg(e < 1e-5, "case %d: Y over R off by %g", _i, e);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(m);
}
END_TEST

Suite *conv_winograd_suite(void)
{
    Suite *s = suite_create("conv_winograd");
    TCase *tc = tcase_create("conv_winograd");
#ifdef SLIM_HAVE_DNNL
    tcase_add_loop_test(tc, wino_stored_matches, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_loop_test(tc, residual_binary_matches, 0,
                        (int)(sizeof(res_cases) / sizeof(res_cases[0])));
    tcase_add_loop_test(tc, residual_in_place_matches, 0, 3);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    setenv("SLIM_NUM_THREADS", "2", 1); /* FusedConv's parts: as the benchmarks cut them */
    SRunner *sr = srunner_create(conv_winograd_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
