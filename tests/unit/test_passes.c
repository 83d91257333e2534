/*
 * test_passes.c - the graph optimization passes (passes/): each compares a
 * graph's outputs with and without the pass, and checks what the pass left.
 */
#include "testutil.h"

#include "device.h"
#include "pass.h"
#include "half.h"
#include "hgemm.h"
#include "slim_format.h"
#include "pipeline.h"
#include "slim_init.h"
#ifdef SLIM_HAVE_DNNL
#include "matmul_dnnl.h"
#include "pool_blocked.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t rng_state;

static float rndf(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims, float lo,
                     float hi)
{
    int v = slim_graph_value(g, name);
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = lo + (hi - lo) * (rndf() + 1.0f) / 2.0f;
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(ndim, dims, d);
    free(d);
}

static int node(slim_graph *g, const char *name, const char *op, int n_in, const char *const *in,
                const char *out)
{
    int id = slim_graph_add_node(g, name, op, "", n_in, in, 1, (const char *[]){out});
    g->nodes[id].opset = 17;
    return id;
}

/* Conv (k x k, pad k/2, stride s, group) without bias, then BN, named p. */
static void conv_bn(slim_graph *g, const char *p, const char *x, int64_t c, int64_t m, int64_t k,
                    int64_t s, int64_t group, const char *out)
{
    char w[64], cv[64], sc[64], b[64], mu[64], var[64];
    snprintf(w, sizeof(w), "%s.w", p);
    snprintf(cv, sizeof(cv), "%s.conv", p);
    snprintf(sc, sizeof(sc), "%s.scale", p);
    snprintf(b, sizeof(b), "%s.b", p);
    snprintf(mu, sizeof(mu), "%s.mean", p);
    snprintf(var, sizeof(var), "%s.var", p);
    add_init(g, w, 4, (int64_t[]){m, c / group, k, k}, -0.5f, 0.5f);
    add_init(g, sc, 1, (int64_t[]){m}, 0.5f, 1.5f);
    add_init(g, b, 1, (int64_t[]){m}, -0.2f, 0.2f);
    add_init(g, mu, 1, (int64_t[]){m}, -0.2f, 0.2f);
    add_init(g, var, 1, (int64_t[]){m}, 0.5f, 1.5f);
    int id = node(g, cv, "Conv", 2, (const char *[]){x, w}, cv);
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){k, k});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){s, s});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){k / 2, k / 2, k / 2, k / 2});
    tu_attr_i(&g->nodes[id], "group", group);
    id = node(g, p, "BatchNormalization", 5, (const char *[]){cv, sc, b, mu, var}, out);
    tu_attr_f(&g->nodes[id], "epsilon", 1e-5f);
}

/* x[N,3,12,12] -> conv 3->16 + BN + Relu -> conv 16->32 s2 + BN (a)
 *   + (conv 1x1 16->32 s2 + BN) (shortcut) -> Add -> Relu
 *   -> depthwise 3x3 + BN -> Clip(0, 6) -> y[N,32,6,6] */
static slim_graph *small_cnn(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 7;
    conv_bn(g, "stem", "x", 3, 16, 3, 1, 1, "stem.bn");
    node(g, "stem.relu", "Relu", 1, (const char *[]){"stem.bn"}, "h0");
    conv_bn(g, "a", "h0", 16, 32, 3, 2, 1, "a.bn");
    conv_bn(g, "sc", "h0", 16, 32, 1, 2, 1, "sc.bn");
    node(g, "add", "Add", 2, (const char *[]){"a.bn", "sc.bn"}, "sum");
    node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "h1");
    conv_bn(g, "dw", "h1", 32, 32, 3, 1, 32, "dw.bn");
    add_init(g, "lo", 0, NULL, 0.0f, 0.0f);
    add_init(g, "hi", 0, NULL, 6.0f, 6.0f);
    node(g, "clip", "Clip", 3, (const char *[]){"dw.bn", "lo", "hi"}, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static slim_tensor input(int64_t n)
{
    int64_t dims[4] = {n, 3, 12, 12}, count = n * 3 * 144;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = 99;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor t = tu_f32(4, dims, d);
    free(d);
    return t;
}

static slim_tensor run(slim_model *m, const slim_tensor *x)
{
    slim_tensor *out = NULL, y;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    y = out[0];
    for (int i = 1; i < n_out; i++) /* the first output is the one compared */
        slim_tensor_release(&out[i]);
    free(out);
    return y;
}

static int count_op(const slim_graph *g, const char *op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

static void assert_close(const slim_tensor *a, const slim_tensor *ref, double rel)
{
    int64_t n = slim_tensor_numel(ref);
    ck_assert_int_eq(slim_tensor_numel(a), n);
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(((const float *)ref->data)[i]));
    ck_assert(mx > 0.1); /* a graph that outputs zeros would prove nothing */
    for (int64_t i = 0; i < n; i++) {
        float u = ((const float *)a->data)[i], v = ((const float *)ref->data)[i];
        ck_assert_msg(fabs(u - v) <= rel * mx, "element %lld: %g vs %g (max %g)", (long long)i, u,
                      v, mx);
    }
}

/* Runs the passes named (a prefix of slim_passes) on a fresh small_cnn and
 * returns the model; the reference model gets none. */
static slim_model *load(int n_passes)
{
    slim_graph *g = small_cnn();
    slim_err err = {0};
    for (int i = 0; i < n_passes; i++) {
        int changed = 0;
        ck_assert_msg(slim_pipeline_pass(i)->run(g, &changed, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_gt(changed, 0);
    }
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

START_TEST(fold_bn_matches)
{
    ck_assert_str_eq(slim_pipeline_pass(0)->name, "fold_bn");
    slim_model *ref = load(0), *opt = load(1);
    ck_assert_int_eq(count_op(ref->graph, "BatchNormalization"), 4);
    ck_assert_int_eq(count_op(opt->graph, "BatchNormalization"), 0);
    ck_assert_int_eq(count_op(opt->graph, "Conv"), 4);
    /* BN's four vectors per conv are gone, a bias per conv came. */
    ck_assert_uint_lt(opt->weight_bytes, ref->weight_bytes);
    slim_tensor x = input(2), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* For a model placed on a GPU (host false) the passes keep to ONNX
 * operators that the GPU runs: BatchNormalization folded into the convs,
 * no FusedConv or blocked layout, which only the CPU has and which would
 * pull the convolutions back to the host. */
START_TEST(passes_for_device_keep_onnx_ops)
{
    slim_model *ref = load(0);
    slim_graph *g = small_cnn();
    slim_err err = {0};
    ck_assert_msg(slim_passes_run_for(g, false, &err) == SLIM_OK, "%s", err.msg);
    slim_model *dev;
    ck_assert_msg(slim_model_from_graph(g, &dev, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(dev->graph, "BatchNormalization"), 0);
    ck_assert_int_eq(count_op(dev->graph, "Conv"), 4);
    for (int i = 0; i < dev->graph->n_nodes; i++)
        ck_assert_msg(!dev->graph->nodes[i].domain || !dev->graph->nodes[i].domain[0],
                      "node %s is %s.%s", dev->graph->nodes[i].name,
                      dev->graph->nodes[i].domain, dev->graph->nodes[i].op_type);
    slim_tensor x = input(2), a = run(ref, &x), b = run(dev, &x);
    assert_close(&b, &a, 1e-5);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(dev);
}
END_TEST

#ifdef SLIM_HAVE_DNNL
START_TEST(fuse_conv_matches)
{
    ck_assert_str_eq(slim_pipeline_pass(1)->name, "fuse_conv");
    slim_model *ref = load(0), *opt = load(2);
    /* Every conv became a FusedConv that took its Relu, Add or Clip. */
    ck_assert_int_eq(opt->graph->n_nodes, 4);
    ck_assert_int_eq(count_op(opt->graph, "FusedConv"), 4);
    ck_assert_uint_lt(opt->weight_bytes, ref->weight_bytes);
    slim_tensor x = input(3), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* FusedConvs feeding only FusedConvs hand over nChw16c: the stem's,
 * the shortcut's and the block's outputs; y is a graph output and stays
 * NCHW. The answer is the unoptimized graph's. */
START_TEST(blocked_layout_matches)
{
    ck_assert_str_eq(slim_pipeline_pass(2)->name, "blocked_layout");
    slim_model *ref = load(0), *opt = load(3);
    int blocked = 0;
    for (int i = 0; i < opt->graph->n_nodes; i++) {
        const slim_node *n = &opt->graph->nodes[i];
        bool is_out = opt->graph->values[n->out[0]].is_output;
        blocked += slim_attr_int(n, "out_blocked", 0) != 0;
        ck_assert(!(is_out && slim_attr_int(n, "out_blocked", 0)));
    }
    ck_assert_int_eq(blocked, 3);
    slim_tensor x = input(3), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* In batch-invariant mode an image's result is bitwise the same alone and
 * in a batch. */
START_TEST(fuse_conv_batch_invariant)
{
    slim_model *opt = load(3);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = input(3), all = run(opt, &x);
    int64_t per_in = 3 * 144, per_out = slim_tensor_numel(&all) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, 3, 12, 12}, (const float *)x.data + n * per_in);
        slim_tensor y = run(opt, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)all.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor_release(&all);
    slim_tensor_release(&x);
    slim_model_free(opt);
}
END_TEST

/* Half weights in FusedConv: one image widens each part's slice of W as
 * the part runs, a batch widens all of W first; the same values through
 * the same primitives, so each row of a batch of 3 is bitwise that image
 * alone, and all agree with the float32 model to the weights' rounding.
 * bf16 W runs as bf16 products where the CPU has AVX512_BF16 (h = 1: W
 * reordered per part, activations rounded to bf16), and widened with
 * SLIM_CONV_BF16=0 (h = 2); the two differ there, and both keep the
 * batch invariance. */
START_TEST(fuse_conv_half_weights)
{
    slim_model *ref = load(3);
    slim_tensor x = input(3), want = run(ref, &x), products = {0};
    for (int h = 0; h < 3; h++) {
        slim_dtype half = h ? SLIM_BF16 : SLIM_F16;
        if (h == 2)
            setenv("SLIM_CONV_BF16", "0", 1);
        slim_graph *g = small_cnn();
        slim_half_opts o = {.half = half};
        slim_err err = {0};
        ck_assert_msg(slim_quant_half_weights(g, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
        /* As slim_model_load runs them: the passes see float32 convs. */
        slim_dtype conv_half;
        ck_assert_int_eq(slim_half_conv_widen(g, &conv_half, &err), SLIM_OK);
        ck_assert_int_eq(conv_half, half);
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(slim_half_conv_narrow(g, half, &o, &err), SLIM_OK);
        int half_convs = 0;
        for (int i = 0; i < g->n_nodes; i++)
            half_convs += strcmp(g->nodes[i].op_type, "FusedConv") == 0 &&
                          g->values[g->nodes[i].in[1]].init.dtype == half;
        ck_assert_int_ge(half_convs, 3);
        slim_model *m;
        ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
        slim_model_set_batch_invariant(m, true);
        slim_tensor all = run(m, &x);
        assert_close(&all, &want, h ? 3e-2 : 3e-3);
        int64_t per_in = 3 * 144, per_out = slim_tensor_numel(&all) / 3;
        for (int64_t n = 0; n < 3; n++) {
            slim_tensor one = tu_f32(4, (int64_t[]){1, 3, 12, 12}, (const float *)x.data + n * per_in);
            slim_tensor y = run(m, &one);
            ck_assert_msg(memcmp(y.data, (const float *)all.data + n * per_out,
                                 sizeof(float) * (size_t)per_out) == 0,
                          "%s: image %lld alone differs from in the batch",
                          h ? "bf16" : "fp16", (long long)n);
            slim_tensor_release(&y);
            slim_tensor_release(&one);
        }
        if (h == 1)
            products = tu_f32(all.ndim, all.dims, all.data); /* a copy: all is the model's */
        if (h == 2 && slim_hgemm_get_isa(SLIM_BF16) == SLIM_HGEMM_AVX512BF16)
            ck_assert_msg(memcmp(products.data, all.data, slim_tensor_nbytes(&all)) != 0,
                          "bf16 products and widened bf16 W gave the same bits");
        slim_tensor_release(&all);
        slim_model_free(m);
    }
    unsetenv("SLIM_CONV_BF16");
    slim_tensor_release(&products);
    slim_tensor_release(&want);
    slim_tensor_release(&x);
    slim_model_free(ref);
}
END_TEST

/* Odd shapes: x[N,3,13,11] -> conv 3->16 + BN + Relu -> MaxPool 3x3 s2 p1
 *   -> conv 1x1 16->24 + BN + Relu (h) -> conv 3x3 24->24 + BN + h -> Relu
 *   -> conv 1x1 24->32 + BN -> MaxPool 2x2 s2 pads (0,0,1,1)
 *   -> conv 3x3 32->16 + BN -> y.
 * 24 channels (MobileNetV2's) pad their last block of 16, blocked between
 * FusedConvs as well (h2 NCHW when it is a graph output too); both MaxPools
 * sit between FusedConvs and run blocked. */
static slim_graph *odd_cnn(bool h2_out)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 5;
    conv_bn(g, "stem", "x", 3, 16, 3, 1, 1, "stem.bn");
    node(g, "stem.relu", "Relu", 1, (const char *[]){"stem.bn"}, "s");
    int id = node(g, "pool1", "MaxPool", 1, (const char *[]){"s"}, "p1");
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){3, 3});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){1, 1, 1, 1});
    conv_bn(g, "e", "p1", 16, 24, 1, 1, 1, "e.bn");
    node(g, "e.relu", "Relu", 1, (const char *[]){"e.bn"}, "h");
    conv_bn(g, "b", "h", 24, 24, 3, 1, 1, "b.bn");
    node(g, "add", "Add", 2, (const char *[]){"b.bn", "h"}, "sum");
    node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "h2");
    conv_bn(g, "p", "h2", 24, 32, 1, 1, 1, "p.bn");
    id = node(g, "pool2", "MaxPool", 1, (const char *[]){"p.bn"}, "p2");
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){0, 0, 1, 1});
    conv_bn(g, "o", "p2", 32, 16, 3, 1, 1, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    if (h2_out) /* then h2 stays NCHW: b reads blocked and writes NCHW */
        slim_graph_add_output(g, slim_graph_find_value(g, "h2"));
    return g;
}

static slim_model *load_odd(bool passes, bool h2_out)
{
    slim_graph *g = odd_cnn(h2_out);
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

static slim_tensor odd_input(int64_t n)
{
    int64_t count = n * 3 * 13 * 11;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = 41;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor t = tu_f32(4, (int64_t[]){n, 3, 13, 11}, d);
    free(d);
    return t;
}

START_TEST(conv_odd_channels_and_blocked_pool)
{
    bool h2_out = _i == 1;
    slim_model *ref = load_odd(false, h2_out), *opt = load_odd(true, h2_out);
    ck_assert_int_eq(count_op(opt->graph, "FusedConv"), 5);
    ck_assert_int_eq(count_op(opt->graph, "MaxPoolBlocked"), 2);
    ck_assert_int_eq(count_op(opt->graph, "MaxPool"), 0);
    for (int i = 0; i < opt->graph->n_nodes; i++) {
        const slim_node *n = &opt->graph->nodes[i];
        /* 24-channel outputs go blocked, padded to 32, unless graph outputs */
        if (strcmp(n->op_type, "FusedConv") == 0 && slim_attr_int(n, "out_channels", 0) == 24)
            ck_assert_int_eq(slim_attr_int(n, "out_blocked", 0),
                             !opt->graph->values[n->out[0]].is_output);
    }
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = odd_input(3), a = run(ref, &x), b = run(opt, &x);
    ck_assert_int_eq(b.ndim, 4);
    ck_assert_int_eq(b.dims[1], 16);
    ck_assert_int_eq(b.dims[2], 4); /* 13 -> 7 -> 4 */
    ck_assert_int_eq(b.dims[3], 3); /* 11 -> 6 -> 3 */
    assert_close(&b, &a, 1e-5);
    /* MaxPoolBlocked's portable loop gives the SIMD loop's bits */
    slim__mpb_force_portable(true);
    slim_tensor c = run(opt, &x);
    slim__mpb_force_portable(false);
    ck_assert_int_eq(memcmp(c.data, b.data, sizeof(float) * (size_t)slim_tensor_numel(&b)), 0);
    slim_tensor_release(&c);
    /* each image alone gives its bits in the batch */
    int64_t per_in = 3 * 13 * 11, per_out = slim_tensor_numel(&b) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, 3, 13, 11}, (const float *)x.data + n * per_in);
        slim_tensor y = run(opt, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)b.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* MobileNetV2's expand + depthwise pairs, odd sizes: x[N,16,9,7]
 *   -> 1x1 16->32 + BN + Clip(0, 6) -> depthwise 3x3 s1 + BN + Clip(0, 6)
 *   -> 1x1 32->48 + BN + Relu -> depthwise 3x3 s2 + BN -> y[N,48,5,4].
 * Each pair becomes one FusedConv with the depthwise conv as its post-op. */
static slim_graph *dw_cnn(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 9;
    add_init(g, "lo", 0, NULL, 0.0f, 0.0f);
    add_init(g, "hi", 0, NULL, 6.0f, 6.0f);
    conv_bn(g, "e1", "x", 16, 32, 1, 1, 1, "e1.bn");
    node(g, "e1.clip", "Clip", 3, (const char *[]){"e1.bn", "lo", "hi"}, "h1");
    conv_bn(g, "d1", "h1", 32, 32, 3, 1, 32, "d1.bn");
    node(g, "d1.clip", "Clip", 3, (const char *[]){"d1.bn", "lo", "hi"}, "h2");
    conv_bn(g, "e2", "h2", 32, 48, 1, 1, 1, "e2.bn");
    node(g, "e2.relu", "Relu", 1, (const char *[]){"e2.bn"}, "h3");
    conv_bn(g, "d2", "h3", 48, 48, 3, 2, 48, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

START_TEST(conv_depthwise_post_op)
{
    slim_err err = {0};
    slim_graph *gr = dw_cnn(), *go = dw_cnn();
    ck_assert_msg(slim_passes_run(go, &err) == SLIM_OK, "%s", err.msg);
    slim_model *ref, *opt;
    ck_assert_msg(slim_model_from_graph(gr, &ref, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_msg(slim_model_from_graph(go, &opt, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(opt->graph->n_nodes, 2);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(slim_attr_int(&opt->graph->nodes[i], "dw_stride", 0), i + 1);
    slim_model_set_batch_invariant(opt, true);
    int64_t per_in = 16 * 9 * 7, count = 3 * per_in;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = 17;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){3, 16, 9, 7}, d), a = run(ref, &x), b = run(opt, &x);
    free(d);
    ck_assert_int_eq(b.dims[1], 48);
    ck_assert_int_eq(b.dims[2], 5);
    ck_assert_int_eq(b.dims[3], 4);
    assert_close(&b, &a, 1e-5);
    int64_t per_out = slim_tensor_numel(&b) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, 16, 9, 7}, (const float *)x.data + n * per_in);
        slim_tensor y = run(opt, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)b.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* x[N,48,40,40] -> conv 3x3 48->48 + BN + Relu (h) -> conv 3x3 48->48 + BN
 *   + h -> Relu -> y: stride-1 3x3 convs on planes of 1600 pixels and
 * enough channels for Winograd's scratchpad (conv_dnnl.c, use_winograd,
 * wino_scratch_fits), h blocked. */
static slim_graph *wino_cnn(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 23;
    conv_bn(g, "c1", "x", 48, 48, 3, 1, 1, "c1.bn");
    node(g, "c1.relu", "Relu", 1, (const char *[]){"c1.bn"}, "h");
    conv_bn(g, "c2", "h", 48, 48, 3, 1, 1, "c2.bn");
    node(g, "add", "Add", 2, (const char *[]){"c2.bn", "h"}, "sum");
    node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static slim_model *load_wino(bool passes)
{
    slim_graph *g = wino_cnn();
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* Winograd's answer is the reference's within float rounding, not the
 * direct kernel's bits (so it did run), and an image's bits do not depend
 * on its batch. */
START_TEST(conv_winograd)
{
    slim_model *ref = load_wino(false), *wino = load_wino(true), *direct = load_wino(true);
    ck_assert_int_eq(count_op(wino->graph, "FusedConv"), 2);
    slim_model_set_batch_invariant(wino, true);
    int64_t per_in = 48 * 40 * 40, count = 3 * per_in;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = 31;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){3, 48, 40, 40}, d), a = run(ref, &x), b = run(wino, &x);
    free(d);
    /* primitives are made on first run, which reads the switch */
    setenv("SLIM_CONV_WINOGRAD", "0", 1);
    slim_tensor c = run(direct, &x);
    unsetenv("SLIM_CONV_WINOGRAD");
    ck_assert_int_eq(b.dims[1], 48);
    ck_assert_int_eq(b.dims[2], 40);
    assert_close(&b, &a, 1e-5);
    assert_close(&c, &a, 1e-5);
    ck_assert_int_ne(memcmp(b.data, c.data, sizeof(float) * (size_t)slim_tensor_numel(&b)), 0);
    int64_t per_out = slim_tensor_numel(&b) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor one = tu_f32(4, (int64_t[]){1, 48, 40, 40}, (const float *)x.data + n * per_in);
        slim_tensor y = run(wino, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)b.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&c);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(wino);
    slim_model_free(direct);
}
END_TEST

/* x[N,256,7,7] -> conv 3x3 256->256 + BN + Relu (h) -> conv 1x1 256->256
 *   + BN + h -> Relu -> conv 1x1 256->280 + BN -> y: a 7x7 plane, where
 * FusedConv cuts the output channels into several parts per thread
 * (conv_dnnl_build.c, parts_per_thread; with 2 threads 4 parts of 64 for
 * the 3x3 and the 1x1, and 280 channels, 17.5 blocks of 16, padded to 18
 * blocks in 4 uneven parts for the last). */
static slim_graph *small_plane_cnn(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 41;
    conv_bn(g, "c1", "x", 256, 256, 3, 1, 1, "c1.bn");
    node(g, "c1.relu", "Relu", 1, (const char *[]){"c1.bn"}, "h");
    conv_bn(g, "c2", "h", 256, 256, 1, 1, 1, "c2.bn");
    node(g, "add", "Add", 2, (const char *[]){"c2.bn", "h"}, "sum");
    node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "r");
    conv_bn(g, "c3", "r", 256, 280, 1, 1, 1, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static slim_model *load_small_plane(bool passes)
{
    slim_graph *g = small_plane_cnn();
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* Many channel parts per thread on a small plane: the reference's answer
 * within float rounding, as with one part per thread (the old split), and
 * an image's bits do not depend on its batch. */
START_TEST(conv_small_plane_parts)
{
    slim_model *ref = load_small_plane(false), *opt = load_small_plane(true);
    slim_model *one = load_small_plane(true);
    ck_assert_int_eq(count_op(opt->graph, "FusedConv"), 3);
    slim_model_set_batch_invariant(opt, true);
    int64_t per_in = 256 * 7 * 7, count = 3 * per_in;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = 43;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){3, 256, 7, 7}, d), a = run(ref, &x), b = run(opt, &x);
    free(d);
    /* primitives are made on first run, which reads the switch */
    setenv("SLIM_CONV_PARTS_PER_THREAD", "1", 1);
    slim_tensor c = run(one, &x);
    unsetenv("SLIM_CONV_PARTS_PER_THREAD");
    ck_assert_int_eq(b.dims[1], 280);
    ck_assert_int_eq(b.dims[2], 7);
    assert_close(&b, &a, 1e-5);
    assert_close(&c, &a, 1e-5);
    int64_t per_out = slim_tensor_numel(&b) / 3;
    for (int64_t n = 0; n < 3; n++) {
        slim_tensor img = tu_f32(4, (int64_t[]){1, 256, 7, 7}, (const float *)x.data + n * per_in);
        slim_tensor y = run(opt, &img);
        ck_assert_int_eq(memcmp(y.data, (const float *)b.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&img);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&c);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
    slim_model_free(one);
}
END_TEST
#endif

#ifdef SLIM_HAVE_DNNL
/* x[N,3,64] -> MatMul(w1[64,128]) + b1 -> GELU (erf form, as exported)
 *   -> MatMul(w2[128,64]) + b2 -> Relu -> y */
static slim_graph *small_mlp(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 11;
    add_init(g, "w1", 2, (int64_t[]){64, 128}, -0.3f, 0.3f);
    add_init(g, "b1", 1, (int64_t[]){128}, -0.2f, 0.2f);
    add_init(g, "w2", 2, (int64_t[]){128, 64}, -0.3f, 0.3f);
    add_init(g, "b2", 1, (int64_t[]){64}, -0.2f, 0.2f);
    add_init(g, "inv_sqrt2", 0, NULL, 0.70710678f, 0.70710678f);
    add_init(g, "one", 0, NULL, 1.0f, 1.0f);
    add_init(g, "half", 0, NULL, 0.5f, 0.5f);
    node(g, "mm1", "MatMul", 2, (const char *[]){"x", "w1"}, "h");
    node(g, "add1", "Add", 2, (const char *[]){"h", "b1"}, "f");
    node(g, "g1", "Mul", 2, (const char *[]){"f", "inv_sqrt2"}, "t1");
    node(g, "g2", "Erf", 1, (const char *[]){"t1"}, "t2");
    node(g, "g3", "Add", 2, (const char *[]){"t2", "one"}, "t3");
    node(g, "g4", "Mul", 2, (const char *[]){"f", "t3"}, "t4");
    node(g, "g5", "Mul", 2, (const char *[]){"t4", "half"}, "gelu");
    node(g, "mm2", "MatMul", 2, (const char *[]){"gelu", "w2"}, "h2");
    node(g, "add2", "Add", 2, (const char *[]){"b2", "h2"}, "f2");
    node(g, "relu", "Relu", 1, (const char *[]){"f2"}, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static slim_model *load_mlp(bool passes)
{
    slim_graph *g = small_mlp();
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

static slim_tensor mlp_input(int64_t n, uint32_t seed)
{
    int64_t count = n * 3 * 64;
    float *d = malloc(sizeof(float) * (size_t)count);
    rng_state = seed;
    for (int64_t i = 0; i < count; i++)
        d[i] = rndf();
    slim_tensor t = tu_f32(3, (int64_t[]){n, 3, 64}, d);
    free(d);
    return t;
}

START_TEST(fuse_matmul_matches)
{
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    ck_assert_int_eq(opt->graph->n_nodes, 2);
    ck_assert_int_eq(count_op(opt->graph, "FusedMatMul"), 2);
    ck_assert_int_eq(slim_attr_int(&opt->graph->nodes[0], "activation", -1), SLIM_FMM_ACT_GELU_ERF);
    ck_assert_int_eq(slim_attr_int(&opt->graph->nodes[1], "activation", -1), SLIM_FMM_ACT_RELU);
    /* Packed weights replace the originals: no more bytes than before. */
    ck_assert_uint_le(opt->weight_bytes, ref->weight_bytes);
    slim_tensor x = mlp_input(5, 3), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* Rows in row-invariant mode: 7 items (21 rows, a short last tile) give
 * each item's rows bitwise as when it runs alone (3 rows). */
START_TEST(fuse_matmul_row_invariant)
{
    slim_model *opt = load_mlp(true);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = mlp_input(7, 5), all = run(opt, &x);
    int64_t per_in = 3 * 64, per_out = slim_tensor_numel(&all) / 7;
    for (int64_t n = 0; n < 7; n++) {
        slim_tensor one = tu_f32(3, (int64_t[]){1, 3, 64}, (const float *)x.data + n * per_in);
        slim_tensor y = run(opt, &one);
        ck_assert_int_eq(memcmp(y.data, (const float *)all.data + n * per_out,
                                sizeof(float) * (size_t)per_out), 0);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
    slim_tensor_release(&all);
    slim_tensor_release(&x);
    slim_model_free(opt);
}
END_TEST

/* Not row-invariant, 47 items (141 rows) with two column parts run in
 * even chunks of 71 and 70 rows, the short one padded: every row as the
 * unfused graph gives it, and each item's rows as when it runs alone up to
 * rounding (the chunks need not sum alike). */
START_TEST(fuse_matmul_row_chunks)
{
    ck_assert_int_eq(slim_num_threads(), 2); /* main sets it: w1's 128 columns in 2 parts */
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    slim_tensor x = mlp_input(47, 13), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    int64_t per_in = 3 * 64, per_out = slim_tensor_numel(&b) / 47;
    slim_tensor last = tu_f32(3, (int64_t[]){1, 3, 64}, (const float *)x.data + 46 * per_in);
    slim_tensor y = run(opt, &last), want = tu_f32(1, (int64_t[]){per_out},
                                                   (const float *)b.data + 46 * per_out);
    assert_close(&y, &want, 1e-5);
    slim_tensor_release(&y);
    slim_tensor_release(&want);
    slim_tensor_release(&last);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* From 256 rows (101 items, 303 rows: two chunks of 152 and 151, the
 * short one padded), the column parts run as one primitive over the whole
 * packed W, writing Y's rows in place; w2's 64 columns are one part. Every
 * row as the unfused graph gives it, and as the same items give it in
 * fewer rows, through the column parts. */
START_TEST(fuse_matmul_whole_rows)
{
    ck_assert_int_eq(slim_num_threads(), 2);
    slim_model *ref = load_mlp(false), *opt = load_mlp(true);
    slim_tensor x = mlp_input(101, 17), a = run(ref, &x), b = run(opt, &x);
    assert_close(&b, &a, 1e-5);
    int64_t per_in = 3 * 64, per_out = slim_tensor_numel(&b) / 101;
    for (int64_t first = 0; first < 101; first += 25) {
        int64_t n = 101 - first < 25 ? 101 - first : 25;
        slim_tensor part = tu_f32(3, (int64_t[]){n, 3, 64}, (const float *)x.data + first * per_in);
        slim_tensor y = run(opt, &part), want = tu_f32(1, (int64_t[]){n * per_out},
                                                       (const float *)b.data + first * per_out);
        assert_close(&y, &want, 1e-5);
        slim_tensor_release(&y);
        slim_tensor_release(&want);
        slim_tensor_release(&part);
    }
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}
END_TEST

/* Two MatMuls reading one weight (layers that share it) share one packed
 * copy, and the original goes: no more weight bytes than unfused. */
START_TEST(fuse_matmul_shared_weight_packed_once)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    rng_state = 21;
    add_init(g, "w", 2, (int64_t[]){64, 64}, -0.3f, 0.3f);
    node(g, "mm1", "MatMul", 2, (const char *[]){"x", "w"}, "h");
    node(g, "relu", "Relu", 1, (const char *[]){"h"}, "r");
    node(g, "mm2", "MatMul", 2, (const char *[]){"r", "w"}, "y");
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_err err = {0};
    ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(g, "FusedMatMul"), 2);
    ck_assert_int_eq(g->nodes[0].in[1], g->nodes[1].in[1]);
    int weights = 0;
    for (int v = 0; v < g->n_values; v++)
        weights += g->values[v].kind == SLIM_VALUE_INITIALIZER && g->values[v].init.data &&
                   g->values[v].init.dtype == SLIM_F32 && slim_tensor_numel(&g->values[v].init) >= 64 * 64;
    ck_assert_int_eq(weights, 1);
    slim_graph_free(g);
}
END_TEST

/* The same graph from a mapped .slim file (whose weights the pass packs
 * and whose pages it gives back) and from memory: FusedMatMuls in both,
 * bitwise the same outputs, and packed weights of the .slim model held
 * outside the mapping (the originals are no longer weights of the model). */
START_TEST(fuse_matmul_slim_file_same_bits)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmm_%ld.slim", (long)getpid());
    slim_graph *g = small_mlp();
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
    slim_model *file = NULL, *mem = load_mlp(true);
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(file->graph, "FusedMatMul"), 2);
    ck_assert_int_eq(count_op(file->graph, "MatMul"), 0);
    int mapped = 0, packed = 0;
    for (int v = 0; v < file->graph->n_values; v++) {
        const slim_value *val = &file->graph->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || !val->init.data)
            continue;
        ck_assert_msg(strcmp(val->name, "w1") && strcmp(val->name, "w2"),
                      "%s is still a weight", val->name);
        int fd;
        int64_t off;
        if (slim_file_map_lookup(val->init.data, slim_tensor_nbytes(&val->init), &fd, &off))
            mapped++;
        else if (strstr(val->name, "_packed"))
            packed++;
    }
    ck_assert_int_eq(packed, 2);
    ck_assert_int_ge(mapped, 2); /* the biases stay in the file */
    /* The model's account holds the weights once: the mapping stops
     * counting what was packed (64 KiB of w1 and w2 here). */
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *plain = NULL;
    ck_assert_msg(slim_model_load(path, NULL, &plain, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    size_t held = atomic_load(&file->account->current),
           held_plain = atomic_load(&plain->account->current);
    ck_assert_uint_ge(held_plain, 64 * 1024);
    ck_assert_msg(held <= held_plain + 8192, "packed model holds %zu bytes, unpacked %zu", held,
                  held_plain);
    slim_model_free(plain);
    slim_tensor x = mlp_input(5, 9), a = run(mem, &x), b = run(file, &x);
    ck_assert_int_eq(slim_tensor_numel(&a), slim_tensor_numel(&b));
    ck_assert_int_eq(memcmp(a.data, b.data, slim_tensor_nbytes(&a)), 0);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* SLIM_FUSE_MATMUL=0 leaves the MatMuls; unset (auto) fuses weights in the
 * process's memory, which a graph built in memory has, as =1 does (this
 * suite's main sets 1 for the other tests). */
START_TEST(fuse_matmul_off_by_env)
{
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *off = load_mlp(true);
    unsetenv("SLIM_FUSE_MATMUL");
    ck_assert_int_eq(count_op(off->graph, "FusedMatMul"), 0);
    ck_assert_int_eq(count_op(off->graph, "MatMul"), 2);
    slim_model_free(off);
    slim_model *aut = load_mlp(true);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(count_op(aut->graph, "FusedMatMul"), 2);
    slim_model_free(aut);
}
END_TEST

/* ---- packed weights in a .slim file ---------------------------------------- */

/* small_mlp as `slim convert` writes it: MatMul weights packed. */
static void write_packed_mlp(const char *path)
{
    slim_graph *g = small_mlp();
    slim_err err = {0};
    ck_assert_msg(slim_pass_pack_matmul(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(g, "FusedMatMul"), 2);
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
}

static slim_graph *read_graph(const char *path)
{
    slim_graph *g = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_format_load_file(path, &g, &err) == SLIM_OK, "%s", err.msg);
    return g;
}

static void assert_same_bits(slim_model *a, slim_model *b)
{
    slim_tensor x = mlp_input(4, 17), ya = run(a, &x), yb = run(b, &x);
    ck_assert_int_eq(slim_tensor_numel(&ya), slim_tensor_numel(&yb));
    ck_assert_int_eq(memcmp(ya.data, yb.data, slim_tensor_nbytes(&ya)), 0);
    slim_tensor_release(&ya);
    slim_tensor_release(&yb);
    slim_tensor_release(&x);
}

/* By default a file's packed weights are run in place (still mapped), and
 * compute bitwise what the same graph packed at load computes. */
START_TEST(fuse_matmul_packed_file_in_place)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmp_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    unsetenv("SLIM_FUSE_MATMUL");
    slim_model *file = NULL, *mem = load_mlp(true);
    slim_err err = {0};
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(count_op(file->graph, "FusedMatMul"), 2);
    int mapped = 0;
    for (int i = 0; i < file->graph->n_nodes; i++) {
        const slim_node *n = &file->graph->nodes[i];
        if (strcmp(n->op_type, "FusedMatMul"))
            continue;
        const slim_tensor *w = &file->graph->values[n->in[1]].init;
        int fd;
        int64_t off;
        mapped += slim_file_map_lookup(w->data, slim_tensor_nbytes(w), &fd, &off);
    }
    ck_assert_int_eq(mapped, 2);
    assert_same_bits(file, mem);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* Set node `name`'s weight to W [k, n] stored plain (no inner blocks), one
 * part, as another machine's oneDNN might have laid it out. */
static void make_plain(slim_graph *g, const char *name, const char *wname)
{
    slim_graph *src = small_mlp();
    const slim_tensor *w = &src->values[slim_graph_find_value(src, wname)].init;
    int64_t k = w->dims[0], n = w->dims[1];
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *nd = &g->nodes[i];
        if (strcmp(nd->name, name))
            continue;
        slim_tensor t = tu_f32(1, (int64_t[]){k * n}, w->data);
        slim_err err = {0};
        int v = slim_graph_add_initializer(g, wname, "_plain", &t, &err);
        ck_assert_int_ge(v, 0);
        g->nodes[i].in[1] = v;
        int64_t parts[2] = {0, n};
        int64_t layout[SLIM_FMM_DESC] = {k, n, n, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, k * n};
        ck_assert_int_eq(slim_pass_set_ints(&g->nodes[i], "parts", parts, 2, &err), SLIM_OK);
        ck_assert_int_eq(slim_pass_set_ints(&g->nodes[i], "layout", layout, SLIM_FMM_DESC, &err),
                         SLIM_OK);
    }
    slim_graph_free(src);
}

/* A file packed in a layout this machine's oneDNN does not pick is
 * repacked at load, and computes bitwise what packing here computes. */
START_TEST(fuse_matmul_foreign_layout_repacked)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmf_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    slim_graph *g = read_graph(path);
    make_plain(g, "mm1", "w1");
    slim_err err = {0};
    ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(g);
    slim_model *file = NULL, *mem = load_mlp(true);
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(file->graph, "FusedMatMul"), 2);
    assert_same_bits(file, mem);
    slim_model_free(file);
    /* Without the passes it loads (to be looked at) but does not run. */
    slim_load_opts raw = {.optimize.no_passes = true};
    ck_assert_msg(slim_model_load(path, &raw, &file, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor x = mlp_input(1, 3), *out = NULL;
    int n_out;
    ck_assert_int_eq(slim_model_run(file, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "another CPU"));
    slim_tensor_release(&x);
    slim_model_free(file);
    slim_model_free(mem);
    unlink(path);
}
END_TEST

/* Undone (SLIM_FUSE_MATMUL=0 here; a GPU load the same way): MatMul, Add,
 * the GELU's nodes and Relu again, bitwise the unfused model's results. */
START_TEST(fuse_matmul_packed_file_undone)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmu_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    setenv("SLIM_FUSE_MATMUL", "0", 1);
    slim_model *file = NULL, *plain = load_mlp(true);
    slim_err err = {0};
    ck_assert_msg(slim_model_load(path, NULL, &file, &err) == SLIM_OK, "%s", err.msg);
    setenv("SLIM_FUSE_MATMUL", "1", 1);
    ck_assert_int_eq(count_op(file->graph, "FusedMatMul"), 0);
    ck_assert_int_eq(count_op(file->graph, "MatMul"), 2);
    ck_assert_int_eq(count_op(plain->graph, "MatMul"), 2);
    assert_same_bits(file, plain);
    slim_model_free(file);
    slim_model_free(plain);
    /* The GPU's path, on the graph as read. */
    slim_graph *g = read_graph(path);
    ck_assert_msg(slim_pass_defuse_matmul(g, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(count_op(g, "FusedMatMul"), 0);
    ck_assert_int_eq(count_op(g, "Erf"), 1);
    ck_assert_int_eq(count_op(g, "Relu"), 1);
    slim_graph_free(g);
    unlink(path);
}
END_TEST

/* A damaged layout is refused at load, naming the node; nothing is read
 * outside the weight. */
START_TEST(fuse_matmul_bad_layout_refused)
{
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_passes_fmmb_%ld.slim", (long)getpid());
    write_packed_mlp(path);
    for (int c = 0; c < 4; c++) {
        slim_graph *g = read_graph(path);
        for (int i = 0; i < g->n_nodes; i++) {
            slim_node *n = &g->nodes[i];
            if (strcmp(n->name, "mm2"))
                continue;
            int64_t parts[SLIM_FMM_MAX_PARTS + 1], layout[SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC];
            int nb = slim_attr_ints(n, "parts", parts, SLIM_FMM_MAX_PARTS + 1);
            int nl = slim_attr_ints(n, "layout", layout, SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC);
            if (c == 0)
                layout[2] = (int64_t)1 << 30; /* a stride past the weight */
            else if (c == 1)
                layout[4] = 9; /* blocks */
            else if (c == 2)
                parts[nb - 1] = 63; /* not N */
            else
                layout[13] += 16; /* more floats than the weight holds */
            slim_err e = {0};
            ck_assert_int_eq(slim_pass_set_ints(n, "parts", parts, nb, &e), SLIM_OK);
            ck_assert_int_eq(slim_pass_set_ints(n, "layout", layout, nl, &e), SLIM_OK);
        }
        slim_err err = {0};
        ck_assert_msg(slim_format_write(g, path, &err) == SLIM_OK, "%s", err.msg);
        slim_graph_free(g);
        for (int mode = 0; mode < 2; mode++) { /* repacked here; undone */
            setenv("SLIM_FUSE_MATMUL", mode ? "0" : "1", 1);
            slim_model *m = NULL;
            ck_assert_int_ne(slim_model_load(path, NULL, &m, &err), SLIM_OK);
            ck_assert_msg(strstr(err.msg, "mm2") != NULL, "case %d: %s", c, err.msg);
        }
        setenv("SLIM_FUSE_MATMUL", "1", 1);
        write_packed_mlp(path);
    }
    unlink(path);
}
END_TEST

/* Unpacking gives W back bitwise, over shapes whose blocks do not divide. */
START_TEST(fuse_matmul_unpack_roundtrip)
{
    int64_t shapes[3][2] = {{100, 37}, {64, 130}, {7, 200}};
    for (int s = 0; s < 3; s++) {
        int64_t k = shapes[s][0], n = shapes[s][1];
        float *d = malloc(sizeof(float) * (size_t)(k * n));
        rng_state = 40 + s;
        for (int64_t i = 0; i < k * n; i++)
            d[i] = rndf();
        slim_tensor w = tu_f32(2, (int64_t[]){k, n}, d), packed;
        slim_fmm_packing how;
        slim_err err = {0};
        ck_assert_msg(slim_fmm_pack(&w, &packed, &how, &err) == SLIM_OK, "%s", err.msg);
        int parts;
        ck_assert_msg(slim_fmm_layout_check(how.parts, how.n_bounds, how.layout, how.n_layout, k,
                                            n, slim_tensor_numel(&packed), &parts, &err) == SLIM_OK,
                      "%s", err.msg);
        float *back = calloc((size_t)(k * n), sizeof(float));
        slim_fmm_unpack(packed.data, how.parts, parts, how.layout, k, n, back);
        ck_assert_int_eq(memcmp(back, d, sizeof(float) * (size_t)(k * n)), 0);
        free(back);
        free(d);
        slim_tensor_release(&w);
        slim_tensor_release(&packed);
    }
}
END_TEST
END_TEST
#endif

/* SLIM_PASSES=0 turns the passes off: the graph stays as written. */
START_TEST(passes_off_by_env)
{
    slim_graph *g = small_cnn();
    int before = g->n_nodes;
    slim_err err = {0};
    setenv("SLIM_PASSES", "0", 1);
    ck_assert_int_eq(slim_passes_run(g, &err), SLIM_OK);
    ck_assert_int_eq(g->n_nodes, before);
    unsetenv("SLIM_PASSES");
    ck_assert_int_eq(slim_passes_run(g, &err), SLIM_OK);
    ck_assert_int_lt(g->n_nodes, before);
    slim_graph_free(g);
}
END_TEST

Suite *passes_suite(void)
{
    Suite *s = suite_create("passes");
    TCase *tc = tcase_create("passes");
    tcase_add_test(tc, fold_bn_matches);
    tcase_add_test(tc, passes_for_device_keep_onnx_ops);
#ifdef SLIM_HAVE_DNNL
    tcase_add_test(tc, fuse_conv_matches);
    tcase_add_test(tc, blocked_layout_matches);
    tcase_add_test(tc, fuse_conv_batch_invariant);
    tcase_add_test(tc, fuse_conv_half_weights);
    tcase_add_loop_test(tc, conv_odd_channels_and_blocked_pool, 0, 2);
    tcase_add_test(tc, conv_depthwise_post_op);
    tcase_add_test(tc, conv_winograd);
    tcase_add_test(tc, conv_small_plane_parts);
    tcase_add_test(tc, fuse_matmul_matches);
    tcase_add_test(tc, fuse_matmul_row_invariant);
    tcase_add_test(tc, fuse_matmul_row_chunks);
    tcase_add_test(tc, fuse_matmul_whole_rows);
    tcase_add_test(tc, fuse_matmul_shared_weight_packed_once);
    tcase_add_test(tc, fuse_matmul_slim_file_same_bits);
    tcase_add_test(tc, fuse_matmul_off_by_env);
    tcase_add_test(tc, fuse_matmul_packed_file_in_place);
    tcase_add_test(tc, fuse_matmul_foreign_layout_repacked);
    tcase_add_test(tc, fuse_matmul_packed_file_undone);
    tcase_add_test(tc, fuse_matmul_bad_layout_refused);
    tcase_add_test(tc, fuse_matmul_unpack_roundtrip);
#endif
    tcase_add_test(tc, passes_off_by_env);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    setenv("SLIM_NUM_THREADS", "2", 1); /* FusedMatMul's column parts: one per thread */
    setenv("SLIM_FUSE_MATMUL", "1", 1); /* packs mapped weights too */
    SRunner *sr = srunner_create(passes_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
