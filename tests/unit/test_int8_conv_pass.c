/* test_int8_conv_pass.c - the int8 pass's Conv rewrite (quant/int8_conv.c)
 * on small graphs: Conv + BN + Relu folded into one ConvInt8, the convs
 * that stay float32 (depthwise, excluded, a depthwise conv's neighbours),
 * the pixel-major hand-over between consecutive ConvInt8, the residual Add
 * fused, and malformed ConvInt8 nodes refused with a message. The kernel
 * itself: test_int8_conv.c. */
#include "testutil.h"
#include "test_int8_conv_util.h"

#include "int8.h"
#include "qgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float rndf(void) /* in [-1, 1) */
{
    return tu_xrndf(&rng_state);
}

static void add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims, float lo,
                     float hi)
{
    int v = slim_graph_value(g, name);
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = lo + (hi - lo) * (rndf() + 1) / 2;
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(ndim, dims, d);
    free(d);
}

/* x[*, 6, 9, 9] -> Conv(3x3, stride 2, pad 1, group g) -> BN -> Relu -> y */
static slim_graph *conv_bn_relu(int64_t group, int64_t cout)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "conv", "Conv", "", 3, (const char *[]){"x", "w", "b"}, 1,
                        (const char *[]){"c"});
    slim_graph_add_node(g, "bn", "BatchNormalization", "", 5,
                        (const char *[]){"c", "gamma", "beta", "mean", "var"}, 1,
                        (const char *[]){"n"});
    slim_graph_add_node(g, "relu", "Relu", "", 1, (const char *[]){"n"}, 1,
                        (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_ints(&g->nodes[0], "kernel_shape", 2, (int64_t[]){3, 3});
    tu_attr_ints(&g->nodes[0], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[0], "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_i(&g->nodes[0], "group", group);
    rng_state = 77;
    add_init(g, "w", 4, (int64_t[]){cout, 6 / group, 3, 3}, -0.5f, 0.5f);
    add_init(g, "b", 1, (int64_t[]){cout}, -0.2f, 0.2f);
    add_init(g, "gamma", 1, (int64_t[]){cout}, 0.5f, 1.5f);
    add_init(g, "beta", 1, (int64_t[]){cout}, -0.3f, 0.3f);
    add_init(g, "mean", 1, (int64_t[]){cout}, -0.2f, 0.2f);
    add_init(g, "var", 1, (int64_t[]){cout}, 0.5f, 2.0f);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

/* Conv + BN + Relu becomes one ConvInt8 with the BN folded and the Relu
 * fused; its output is close to the float graph's, its measured error is
 * the one recomputed here, and every image of a batch of 3 gets bitwise
 * its result alone. */
START_TEST(test_pass_conv_bn_relu)
{
    enum { N = 3, PER = 6 * 9 * 9 };
    slim_tensor x = tu_xinput(&rng_state, 5, 4, (int64_t[]){N, 6, 9, 9});
    slim_err err;
    slim_tensor ref = tu_run1(conv_bn_relu(2, 10), "x", x, SLIM_OK, &err);

    slim_graph *g = conv_bn_relu(2, 10);
    slim_int8_samples smp = {1, (char *[]){"x"}, &x};
    slim_int8_opts o = {.samples = &smp};
    slim_int8_report rep;
    ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
    ck_assert_int_eq(g->n_nodes, 1);
    ck_assert_str_eq(g->nodes[0].op_type, "ConvInt8");
    ck_assert_str_eq(slim_attr_str(&g->nodes[0], "activation", ""), "Relu");
    ck_assert_int_eq(rep.n_layers, 1);
    ck_assert(rep.layers[0].quantized);
    ck_assert_str_eq(rep.layers[0].op_type, "Conv");
    /* 10 channels in 2 groups of 5, each padded to 16; K = 3 x 3 x 3 = 27
     * padded to 28; scale, colsum, bias [10]. */
    ck_assert_uint_eq(rep.layers[0].bytes_after, 2 * 16 * 28 + 3 * 10 * 4);
    double measured = rep.layers[0].error;
    ck_assert(measured > 1e-4 && measured < 0.02);
    slim_int8_report_free(&rep);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    tu_assert_shape(&y, 4, (int64_t[]){N, 10, 5, 5});
    double e = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(fabs(e - measured) <= 0.05 * measured, "run %g, measured %g", e, measured);

    for (int n = 0; n < N; n++) {
        g = conv_bn_relu(2, 10);
        ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
        slim_tensor x1 = tu_f32(4, (int64_t[]){1, 6, 9, 9}, (const float *)x.data + n * PER);
        slim_tensor y1 = tu_run1(g, "x", x1, SLIM_OK, &err);
        ck_assert(memcmp(y1.data, (float *)y.data + n * 250, sizeof(float) * 250) == 0);
        slim_tensor_release(&y1);
        slim_tensor_release(&x1);
    }
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* Depthwise convs stay float32 (and so do excluded ones), with their BN
 * folded as the optimizer would. */
START_TEST(test_pass_depthwise_and_excluded_stay_float)
{
    slim_graph *g = conv_bn_relu(6, 6);
    slim_err err;
    slim_int8_report rep;
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "Conv");
    ck_assert(!rep.layers[0].quantized);
    ck_assert_str_eq(rep.layers[0].why, "depthwise");
    slim_int8_report_free(&rep);
    slim_graph_free(g);

    g = conv_bn_relu(1, 4);
    slim_int8_opts o = {.exclude = (const char *[]){"Conv"}, .n_exclude = 1};
    ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "Conv");
    ck_assert_str_eq(rep.layers[0].why, "excluded");
    slim_int8_report_free(&rep);
    slim_graph_free(g);
}
END_TEST

/* x[*, 8, 6, 6] -> expand 1x1 (8 -> 16) -> Clip(0, 6) -> depthwise 3x3
 * (16 groups) -> project 1x1 (16 -> 8) -> Relu -> 1x1 (8 -> 8) -> y: a
 * MobileNetV2 block and a conv that is no depthwise conv's neighbour. */
static slim_graph *mobile_block(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "expand", "Conv", "", 3, (const char *[]){"x", "we", "be"}, 1,
                        (const char *[]){"e"});
    slim_graph_add_node(g, "relu6", "Clip", "", 3, (const char *[]){"e", "lo", "hi"}, 1,
                        (const char *[]){"e6"});
    slim_graph_add_node(g, "dw", "Conv", "", 2, (const char *[]){"e6", "wd"}, 1,
                        (const char *[]){"d"});
    slim_graph_add_node(g, "project", "Conv", "", 2, (const char *[]){"d", "wp"}, 1,
                        (const char *[]){"p"});
    slim_graph_add_node(g, "relu", "Relu", "", 1, (const char *[]){"p"}, 1,
                        (const char *[]){"r"});
    slim_graph_add_node(g, "last", "Conv", "", 2, (const char *[]){"r", "wl"}, 1,
                        (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_ints(&g->nodes[2], "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_i(&g->nodes[2], "group", 16);
    rng_state = 91;
    add_init(g, "we", 4, (int64_t[]){16, 8, 1, 1}, -0.5f, 0.5f);
    add_init(g, "be", 1, (int64_t[]){16}, -0.2f, 0.2f);
    add_init(g, "lo", 0, NULL, 0.0f, 0.0f);
    add_init(g, "hi", 0, NULL, 6.0f, 6.0f);
    add_init(g, "wd", 4, (int64_t[]){16, 1, 3, 3}, -0.5f, 0.5f);
    add_init(g, "wp", 4, (int64_t[]){8, 16, 1, 1}, -0.5f, 0.5f);
    add_init(g, "wl", 4, (int64_t[]){8, 8, 1, 1}, -0.5f, 0.5f);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

static const slim_int8_layer *layer_named(const slim_int8_report *rep, const char *name)
{
    for (int i = 0; i < rep->n_layers; i++)
        if (!strcmp(rep->layers[i].name, name))
            return &rep->layers[i];
    ck_abort_msg("no layer %s in the report", name);
    return NULL;
}

/* The convs on either side of a depthwise conv stay float32 (oneDNN fuses
 * them there), the others are quantized, and the graph's output stays
 * close to the float one; SLIM_INT8_CONV_DW=int8 quantizes them all. */
START_TEST(test_pass_depthwise_neighbours_stay_float)
{
    enum { N = 2, PER = 8 * 6 * 6 };
    slim_tensor x = tu_xinput(&rng_state, 9, 4, (int64_t[]){N, 8, 6, 6});
    slim_err err;
    slim_tensor ref = tu_run1(mobile_block(), "x", x, SLIM_OK, &err);

    slim_graph *g = mobile_block();
    slim_int8_report rep;
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    ck_assert_int_eq(rep.n_layers, 4);
    const slim_int8_layer *e = layer_named(&rep, "expand"), *d = layer_named(&rep, "dw");
    const slim_int8_layer *p = layer_named(&rep, "project"), *l = layer_named(&rep, "last");
    ck_assert(!e->quantized && !d->quantized && !p->quantized && l->quantized);
    ck_assert_str_eq(e->why, "feeds a depthwise conv (fused in float32)");
    ck_assert_str_eq(d->why, "depthwise");
    ck_assert_str_eq(p->why, "reads a depthwise conv (fused in float32)");
    slim_int8_report_free(&rep);
    int n_int8 = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n_int8 += !strcmp(g->nodes[i].op_type, "ConvInt8");
    ck_assert_int_eq(n_int8, 1);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    double rel = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(rel > 0 && rel < 0.03, "rel error %g", rel);
    slim_tensor_release(&y);

    setenv("SLIM_INT8_CONV_DW", "neighbours", 1);
    g = mobile_block();
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    unsetenv("SLIM_INT8_CONV_DW");
    ck_assert(layer_named(&rep, "expand")->quantized && layer_named(&rep, "project")->quantized);
    ck_assert(!layer_named(&rep, "dw")->quantized && layer_named(&rep, "last")->quantized);
    slim_int8_report_free(&rep);
    y = tu_run1(g, "x", x, SLIM_OK, &err);
    rel = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(rel > 0 && rel < 0.05, "rel error %g", rel);
    slim_tensor_release(&y);

    /* All int8: the depthwise conv in its own layout, the ReLU6 fused into
     * the expansion (no Clip node left), the block pixel-major inside. */
    setenv("SLIM_INT8_CONV_DW", "int8", 1);
    g = mobile_block();
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    unsetenv("SLIM_INT8_CONV_DW");
    for (int i = 0; i < rep.n_layers; i++)
        ck_assert_msg(rep.layers[i].quantized, "%s: %s", rep.layers[i].name, rep.layers[i].why);
    slim_int8_report_free(&rep);
    n_int8 = 0;
    int n_clip = 0, n_dw = 0, n_nhwc = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        n_int8 += !strcmp(n->op_type, "ConvInt8");
        n_clip += !strcmp(n->op_type, "Clip");
        n_dw += !strcmp(slim_attr_str(n, "weight_layout", ""), "depthwise");
        n_nhwc += slim_attr_int(n, "nhwc_output", 0) == 1;
        if (!strcmp(n->name, "expand")) {
            ck_assert_str_eq(slim_attr_str(n, "activation", ""), "Clip");
            ck_assert(slim_attr_float(n, "clip_min", -1) == 0.0f);
            ck_assert(slim_attr_float(n, "clip_max", -1) == 6.0f);
        }
    }
    ck_assert_int_eq(n_int8, 4);
    ck_assert_int_eq(n_clip, 0);
    ck_assert_int_eq(n_dw, 1);
    ck_assert_int_eq(n_nhwc, 3); /* all but the one making the graph output */
    y = tu_run1(g, "x", x, SLIM_OK, &err);
    rel = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(rel > 0 && rel < 0.05, "rel error %g", rel);
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* x[*, 6, 9, 9] -> Conv 3x3 -> Relu -> Conv 1x1 (a) -> Conv 3x3 stride 2
 * (b) -> y, and a's output also a graph output when a_out. */
static slim_graph *conv_chain(bool a_out)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "first", "Conv", "", 3, (const char *[]){"x", "w1", "b1"}, 1,
                        (const char *[]){"c1"});
    slim_graph_add_node(g, "relu", "Relu", "", 1, (const char *[]){"c1"}, 1,
                        (const char *[]){"r1"});
    slim_graph_add_node(g, "a", "Conv", "", 2, (const char *[]){"r1", "w2"}, 1,
                        (const char *[]){"c2"});
    slim_graph_add_node(g, "b", "Conv", "", 2, (const char *[]){"c2", "w3"}, 1,
                        (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_ints(&g->nodes[0], "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_ints(&g->nodes[3], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[3], "pads", 4, (int64_t[]){0, 1, 1, 0});
    rng_state = 33;
    add_init(g, "w1", 4, (int64_t[]){20, 6, 3, 3}, -0.5f, 0.5f);
    add_init(g, "b1", 1, (int64_t[]){20}, -0.2f, 0.2f);
    add_init(g, "w2", 4, (int64_t[]){13, 20, 1, 1}, -0.5f, 0.5f);
    add_init(g, "w3", 4, (int64_t[]){7, 13, 3, 3}, -0.5f, 0.5f);
    tu_set_io(g, "x", SLIM_F32, "y");
    if (a_out)
        slim_graph_add_output(g, slim_graph_find_value(g, "c2"));
    return g;
}

static int64_t attr_of(const slim_graph *g, const char *node, const char *attr)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, node))
            return slim_attr_int(&g->nodes[i], attr, 0);
    ck_abort_msg("no node %s", node);
    return -1;
}

/* Consecutive ConvInt8 hand their activation over pixel-major (the Relu
 * fused between them too), bitwise the result of the NCHW round trip
 * (SLIM_INT8_CONV_NHWC=off), batch-independent; a value that is also a
 * graph output stays NCHW. */
START_TEST(test_pass_nhwc_hand_over)
{
    enum { N = 3, PER = 6 * 9 * 9 };
    slim_tensor x = tu_xinput(&rng_state, 17, 4, (int64_t[]){N, 6, 9, 9});
    slim_err err;
    slim_tensor ref = tu_run1(conv_chain(false), "x", x, SLIM_OK, &err);

    setenv("SLIM_INT8_CONV_NHWC", "off", 1);
    slim_graph *g = conv_chain(false);
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    unsetenv("SLIM_INT8_CONV_NHWC");
    ck_assert_int_eq(attr_of(g, "a", "nhwc_input") + attr_of(g, "a", "nhwc_output"), 0);
    slim_tensor off = tu_run1(g, "x", x, SLIM_OK, &err);

    g = conv_chain(false);
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    ck_assert_int_eq(g->n_nodes, 3);
    ck_assert_int_eq(attr_of(g, "first", "nhwc_input"), 0);
    ck_assert_int_eq(attr_of(g, "first", "nhwc_output"), 1);
    ck_assert_int_eq(attr_of(g, "a", "nhwc_input"), 1);
    ck_assert_int_eq(attr_of(g, "a", "nhwc_output"), 1);
    ck_assert_int_eq(attr_of(g, "b", "nhwc_input"), 1);
    ck_assert_int_eq(attr_of(g, "b", "nhwc_output"), 0);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    tu_assert_shape(&y, 4, (int64_t[]){N, 7, 4, 4});
    ck_assert(memcmp(y.data, off.data, slim_tensor_nbytes(&y)) == 0);
    double rel = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(rel > 0 && rel < 0.05, "rel error %g", rel);
    for (int n = 0; n < N; n++) {
        g = conv_chain(false);
        ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
        slim_tensor x1 = tu_f32(4, (int64_t[]){1, 6, 9, 9}, (const float *)x.data + n * PER);
        slim_tensor y1 = tu_run1(g, "x", x1, SLIM_OK, &err);
        ck_assert(memcmp(y1.data, (float *)y.data + n * 112, sizeof(float) * 112) == 0);
        slim_tensor_release(&y1);
        slim_tensor_release(&x1);
    }

    g = conv_chain(true);
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    ck_assert_int_eq(attr_of(g, "first", "nhwc_output"), 1);
    ck_assert_int_eq(attr_of(g, "a", "nhwc_output"), 0);
    ck_assert_int_eq(attr_of(g, "b", "nhwc_input"), 0);
    slim_tensor_release(&y);
    y = tu_run1(g, "x", x, SLIM_OK, &err);
    ck_assert(memcmp(y.data, off.data, slim_tensor_nbytes(&y)) == 0);
    slim_tensor_release(&y);
    slim_tensor_release(&off);
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* x[*, 8, 7, 7] -> MaxPool 1x1 -> m -> Conv 1x1 (c1, 8 -> 12) -> Relu ->
 * Conv 3x3 (c2, 12 -> 8) -> Add m -> Relu -> t -> Conv 1x1 (c3) -> Add t
 * -> Relu -> y: two residual blocks, the first reading its skip from a
 * pool (NCHW), the last writing the graph output (NCHW). */
static slim_graph *res_chain(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "pool", "MaxPool", "", 1, (const char *[]){"x"}, 1,
                        (const char *[]){"m"});
    slim_graph_add_node(g, "c1", "Conv", "", 2, (const char *[]){"m", "w1"}, 1,
                        (const char *[]){"a"});
    slim_graph_add_node(g, "r1", "Relu", "", 1, (const char *[]){"a"}, 1, (const char *[]){"ar"});
    slim_graph_add_node(g, "c2", "Conv", "", 3, (const char *[]){"ar", "w2", "b2"}, 1,
                        (const char *[]){"b"});
    slim_graph_add_node(g, "add2", "Add", "", 2, (const char *[]){"b", "m"}, 1,
                        (const char *[]){"s"});
    slim_graph_add_node(g, "r2", "Relu", "", 1, (const char *[]){"s"}, 1, (const char *[]){"t"});
    slim_graph_add_node(g, "c3", "Conv", "", 2, (const char *[]){"t", "w3"}, 1,
                        (const char *[]){"c"});
    slim_graph_add_node(g, "add3", "Add", "", 2, (const char *[]){"t", "c"}, 1,
                        (const char *[]){"u"});
    slim_graph_add_node(g, "r3", "Relu", "", 1, (const char *[]){"u"}, 1, (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_ints(&g->nodes[0], "kernel_shape", 2, (int64_t[]){1, 1});
    tu_attr_ints(&g->nodes[3], "pads", 4, (int64_t[]){1, 1, 1, 1});
    rng_state = 55;
    add_init(g, "w1", 4, (int64_t[]){12, 8, 1, 1}, -0.5f, 0.5f);
    add_init(g, "w2", 4, (int64_t[]){8, 12, 3, 3}, -0.3f, 0.3f);
    add_init(g, "b2", 1, (int64_t[]){8}, -0.2f, 0.2f);
    add_init(g, "w3", 4, (int64_t[]){8, 8, 1, 1}, -0.5f, 0.5f);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

/* The residual Add and the Relu after it fuse into ConvInt8 (input R),
 * values between ConvInt8s go pixel-major, R included, in either layout
 * pairing; bitwise the unfused NCHW graph's result (SLIM_INT8_CONV_RESIDUAL
 * and SLIM_INT8_CONV_NHWC off), close to float, batch-independent. */
START_TEST(test_pass_residual_fused)
{
    enum { N = 3, PER = 8 * 7 * 7 };
    slim_tensor x = tu_xinput(&rng_state, 23, 4, (int64_t[]){N, 8, 7, 7});
    slim_err err;
    slim_tensor ref = tu_run1(res_chain(), "x", x, SLIM_OK, &err);

    setenv("SLIM_INT8_CONV_NHWC", "off", 1);
    setenv("SLIM_INT8_CONV_RESIDUAL", "off", 1);
    slim_graph *g = res_chain();
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    unsetenv("SLIM_INT8_CONV_NHWC");
    unsetenv("SLIM_INT8_CONV_RESIDUAL");
    ck_assert_int_eq(g->n_nodes, 8); /* pool, 3 ConvInt8, 2 Add, 2 Relu */
    slim_tensor off = tu_run1(g, "x", x, SLIM_OK, &err);

    g = res_chain();
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    ck_assert_int_eq(g->n_nodes, 4);
    ck_assert_int_eq(attr_of(g, "c1", "nhwc_input"), 0);
    ck_assert_int_eq(attr_of(g, "c1", "nhwc_output"), 1);
    ck_assert_int_eq(attr_of(g, "c2", "nhwc_input"), 1);
    ck_assert_int_eq(attr_of(g, "c2", "nhwc_residual"), 0);
    ck_assert_int_eq(attr_of(g, "c2", "nhwc_output"), 1);
    ck_assert_int_eq(attr_of(g, "c3", "nhwc_input"), 1);
    ck_assert_int_eq(attr_of(g, "c3", "nhwc_residual"), 1);
    ck_assert_int_eq(attr_of(g, "c3", "nhwc_output"), 0);
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, "c2") || !strcmp(g->nodes[i].name, "c3")) {
            ck_assert_int_eq(g->nodes[i].n_in, 6);
            ck_assert_str_eq(slim_attr_str(&g->nodes[i], "activation", ""), "Relu");
        }
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    tu_assert_shape(&y, 4, (int64_t[]){N, 8, 7, 7});
    ck_assert(memcmp(y.data, off.data, slim_tensor_nbytes(&y)) == 0);
    double rel = slim_int8_rel_error(ref.data, y.data, slim_tensor_numel(&ref));
    ck_assert_msg(rel > 0 && rel < 0.05, "rel error %g", rel);
    for (int n = 0; n < N; n++) {
        g = res_chain();
        ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
        slim_tensor x1 = tu_f32(4, (int64_t[]){1, 8, 7, 7}, (const float *)x.data + n * PER);
        slim_tensor y1 = tu_run1(g, "x", x1, SLIM_OK, &err);
        ck_assert(memcmp(y1.data, (float *)y.data + n * PER, sizeof(float) * PER) == 0);
        slim_tensor_release(&y1);
        slim_tensor_release(&x1);
    }
    slim_tensor_release(&y);
    slim_tensor_release(&off);
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* A ConvInt8 whose packed weight does not fit its geometry (a forged
 * file) is refused with a message before the kernel reads it. */
START_TEST(test_malformed_conv_refused)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "q", "ConvInt8", "com.slimserve", 4,
                        (const char *[]){"x", "w", "s", "cs"}, 1, (const char *[]){"y"});
    g->nodes[0].opset = 1;
    tu_attr_ints(&g->nodes[0], "kernel_shape", 2, (int64_t[]){3, 3});
    int w = slim_graph_value(g, "w"), s = slim_graph_value(g, "s"), cs = slim_graph_value(g, "cs");
    g->values[w].kind = g->values[s].kind = g->values[cs].kind = SLIM_VALUE_INITIALIZER;
    int8_t wb[16 * 8] = {0}; /* 2 channels x 4 x 3 x 3 would be 16 x 36 */
    g->values[w].init = tu_tensor(SLIM_I8, 2, (int64_t[]){16, 8}, wb);
    g->values[s].init = tu_f32(1, (int64_t[]){2}, (float[]){1, 1});
    g->values[cs].init = tu_tensor(SLIM_I32, 1, (int64_t[]){2}, (int32_t[]){0, 0});
    tu_assert_refused(g, 4, (int64_t[]){1, 4, 5, 5}, "packed weight");
}
END_TEST

/* A residual R whose shape is not the output's is refused with a message
 * naming it. */
START_TEST(test_bad_residual_refused)
{
    slim_qconv q = {.c = 4, .h = 5, .w = 5, .m = 2, .groups = 1, .kh = 1, .kw = 1, .sh = 1,
                    .sw = 1, .dh = 1, .dw = 1};
    int64_t nb = (int64_t)slim_qconv_packed_bytes(&q);
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "q", "ConvInt8", "com.slimserve", 6,
                        (const char *[]){"x", "w", "s", "cs", "b", "r"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 1;
    tu_attr_ints(&g->nodes[0], "kernel_shape", 2, (int64_t[]){1, 1});
    const char *names[] = {"w", "s", "cs", "b"};
    int v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = slim_graph_value(g, names[i]);
        g->values[v[i]].kind = SLIM_VALUE_INITIALIZER;
    }
    int8_t *wb = calloc((size_t)nb, 1);
    g->values[v[0]].init = tu_tensor(SLIM_I8, 2, (int64_t[]){1, nb}, wb);
    free(wb);
    g->values[v[1]].init = tu_f32(1, (int64_t[]){2}, (float[]){1, 1});
    g->values[v[2]].init = tu_tensor(SLIM_I32, 1, (int64_t[]){2}, (int32_t[]){0, 0});
    g->values[v[3]].init = tu_f32(1, (int64_t[]){2}, (float[]){0, 0});
    int x = slim_graph_find_value(g, "x"), r = slim_graph_find_value(g, "r");
    slim_graph_add_input(g, x);
    slim_graph_add_input(g, r);
    g->values[x].info.dtype = g->values[r].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_model *m;
    slim_err err;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    float xv[4 * 25] = {0}, rv[2 * 16] = {0};
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 4, 5, 5}, xv),
                         tu_f32(4, (int64_t[]){1, 2, 4, 4}, rv)};
    slim_tensor *out = NULL;
    int n_out = 0;
    ck_assert_int_eq(slim_model_run(m, 2, (const char *[]){"x", "r"}, in, &out, &n_out, &err),
                     SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "residual R must have the output's shape [1, 2, 5, 5]"), "%s",
                  err.msg);
    slim_model_free(m);
    slim_tensor_release(&in[0]);
    slim_tensor_release(&in[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int8_conv_pass");
    TCase *tp = tcase_create("pass");
    tcase_add_test(tp, test_pass_conv_bn_relu);
    tcase_add_test(tp, test_pass_depthwise_and_excluded_stay_float);
    tcase_add_test(tp, test_pass_depthwise_neighbours_stay_float);
    tcase_add_test(tp, test_pass_nhwc_hand_over);
    tcase_add_test(tp, test_pass_residual_fused);
    tcase_add_test(tp, test_malformed_conv_refused);
    tcase_add_test(tp, test_bad_residual_refused);
    suite_add_tcase(s, tp);
    return tq_main(s);
}
