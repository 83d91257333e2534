/*
 * test_passes.c - the graph optimization passes (passes/) on small CNNs:
 * BatchNormalization folding, the passes a device asks for, and the Conv
 * fusions with their layouts (blocked, depthwise, Winograd, small planes);
 * each compares a graph's outputs with and without the pass, and checks
 * what the pass left. FusedMatMul's tests are test_passes_matmul.c; the
 * helpers both use, test_passes_util.c.
 */
#include "testutil.h"
#include "test_passes_util.h"

#include "device.h"
#include "pass.h"
#include "half.h"
#include "hgemm.h"
#include "slim_format.h"
#include "pipeline.h"
#ifdef SLIM_HAVE_DNNL
#include "conv_dnnl.h"
#include "matmul_dnnl.h"
#include "pool_blocked.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    tp_add_init(g, w, 4, (int64_t[]){m, c / group, k, k}, -0.5f, 0.5f);
    tp_add_init(g, sc, 1, (int64_t[]){m}, 0.5f, 1.5f);
    tp_add_init(g, b, 1, (int64_t[]){m}, -0.2f, 0.2f);
    tp_add_init(g, mu, 1, (int64_t[]){m}, -0.2f, 0.2f);
    tp_add_init(g, var, 1, (int64_t[]){m}, 0.5f, 1.5f);
    int id = tp_node(g, cv, "Conv", 2, (const char *[]){x, w}, cv);
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){k, k});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){s, s});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){k / 2, k / 2, k / 2, k / 2});
    tu_attr_i(&g->nodes[id], "group", group);
    id = tp_node(g, p, "BatchNormalization", 5, (const char *[]){cv, sc, b, mu, var}, out);
    tu_attr_f(&g->nodes[id], "epsilon", 1e-5f);
}

/* x[N,3,12,12] -> conv 3->16 + BN + Relu -> conv 16->32 s2 + BN (a)
 *   + (conv 1x1 16->32 s2 + BN) (shortcut) -> Add -> Relu
 *   -> depthwise 3x3 + BN -> Clip(0, 6) -> y[N,32,6,6] */
static slim_graph *small_cnn(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    tp_rng = 7;
    conv_bn(g, "stem", "x", 3, 16, 3, 1, 1, "stem.bn");
    tp_node(g, "stem.relu", "Relu", 1, (const char *[]){"stem.bn"}, "h0");
    conv_bn(g, "a", "h0", 16, 32, 3, 2, 1, "a.bn");
    conv_bn(g, "sc", "h0", 16, 32, 1, 2, 1, "sc.bn");
    tp_node(g, "add", "Add", 2, (const char *[]){"a.bn", "sc.bn"}, "sum");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "h1");
    conv_bn(g, "dw", "h1", 32, 32, 3, 1, 32, "dw.bn");
    tp_add_init(g, "lo", 0, NULL, 0.0f, 0.0f);
    tp_add_init(g, "hi", 0, NULL, 6.0f, 6.0f);
    tp_node(g, "clip", "Clip", 3, (const char *[]){"dw.bn", "lo", "hi"}, "y");
    tp_graph_io(g);
    return g;
}

static slim_tensor input(int64_t n)
{
    return tp_input(99, 4, (int64_t[]){n, 3, 12, 12});
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
    ck_assert_int_eq(tu_count_op(ref->graph, "BatchNormalization"), 4);
    ck_assert_int_eq(tu_count_op(opt->graph, "BatchNormalization"), 0);
    ck_assert_int_eq(tu_count_op(opt->graph, "Conv"), 4);
    /* BN's four vectors per conv are gone, a bias per conv came. */
    ck_assert_uint_lt(opt->weight_bytes, ref->weight_bytes);
    tp_compare_and_free(ref, opt, input(2), 1e-5);
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
    ck_assert_int_eq(tu_count_op(dev->graph, "BatchNormalization"), 0);
    ck_assert_int_eq(tu_count_op(dev->graph, "Conv"), 4);
    for (int i = 0; i < dev->graph->n_nodes; i++)
        ck_assert_msg(!dev->graph->nodes[i].domain || !dev->graph->nodes[i].domain[0],
                      "node %s is %s.%s", dev->graph->nodes[i].name,
                      dev->graph->nodes[i].domain, dev->graph->nodes[i].op_type);
    tp_compare_and_free(ref, dev, input(2), 1e-5);
}
END_TEST

#ifdef SLIM_HAVE_DNNL
START_TEST(fuse_conv_matches)
{
    ck_assert_str_eq(slim_pipeline_pass(1)->name, "fuse_conv");
    slim_model *ref = load(0), *opt = load(2);
    /* Every conv became a FusedConv that took its Relu, Add or Clip. */
    ck_assert_int_eq(opt->graph->n_nodes, 4);
    ck_assert_int_eq(tu_count_op(opt->graph, "FusedConv"), 4);
    ck_assert_uint_lt(opt->weight_bytes, ref->weight_bytes);
    tp_compare_and_free(ref, opt, input(3), 1e-5);
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
    tp_compare_and_free(ref, opt, input(3), 1e-5);
}
END_TEST

/* In batch-invariant mode an image's result is bitwise the same alone and
 * in a batch. */
START_TEST(fuse_conv_batch_invariant)
{
    slim_model *opt = load(3);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = input(3), all = tp_run(opt, &x);
    tp_assert_batch_invariant(opt, &x, &all, "fuse_conv");
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
    slim_tensor x = input(3), want = tp_run(ref, &x), products = {0};
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
        slim_tensor all = tp_run(m, &x);
        tp_assert_close(&all, &want, h ? 3e-2 : 3e-3);
        tp_assert_batch_invariant(m, &x, &all, h ? "bf16" : "fp16");
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
    tp_rng = 5;
    conv_bn(g, "stem", "x", 3, 16, 3, 1, 1, "stem.bn");
    tp_node(g, "stem.relu", "Relu", 1, (const char *[]){"stem.bn"}, "s");
    int id = tp_node(g, "pool1", "MaxPool", 1, (const char *[]){"s"}, "p1");
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){3, 3});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){1, 1, 1, 1});
    conv_bn(g, "e", "p1", 16, 24, 1, 1, 1, "e.bn");
    tp_node(g, "e.relu", "Relu", 1, (const char *[]){"e.bn"}, "h");
    conv_bn(g, "b", "h", 24, 24, 3, 1, 1, "b.bn");
    tp_node(g, "add", "Add", 2, (const char *[]){"b.bn", "h"}, "sum");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "h2");
    conv_bn(g, "p", "h2", 24, 32, 1, 1, 1, "p.bn");
    id = tp_node(g, "pool2", "MaxPool", 1, (const char *[]){"p.bn"}, "p2");
    tu_attr_ints(&g->nodes[id], "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(&g->nodes[id], "pads", 4, (int64_t[]){0, 0, 1, 1});
    conv_bn(g, "o", "p2", 32, 16, 3, 1, 1, "y");
    tp_graph_io(g);
    if (h2_out) /* then h2 stays NCHW: b reads blocked and writes NCHW */
        slim_graph_add_output(g, slim_graph_find_value(g, "h2"));
    return g;
}

static slim_model *load_odd(bool passes, bool h2_out)
{
    return tu_model(odd_cnn(h2_out), passes);
}

static slim_tensor odd_input(int64_t n)
{
    return tp_input(41, 4, (int64_t[]){n, 3, 13, 11});
}

START_TEST(conv_odd_channels_and_blocked_pool)
{
    bool h2_out = _i == 1;
    slim_model *ref = load_odd(false, h2_out), *opt = load_odd(true, h2_out);
    ck_assert_int_eq(tu_count_op(opt->graph, "FusedConv"), 5);
    ck_assert_int_eq(tu_count_op(opt->graph, "MaxPoolBlocked"), 2);
    ck_assert_int_eq(tu_count_op(opt->graph, "MaxPool"), 0);
    for (int i = 0; i < opt->graph->n_nodes; i++) {
        const slim_node *n = &opt->graph->nodes[i];
        /* 24-channel outputs go blocked, padded to 32, unless graph outputs */
        if (strcmp(n->op_type, "FusedConv") == 0 && slim_attr_int(n, "out_channels", 0) == 24)
            ck_assert_int_eq(slim_attr_int(n, "out_blocked", 0),
                             !opt->graph->values[n->out[0]].is_output);
    }
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = odd_input(3), a = tp_run(ref, &x), b = tp_run(opt, &x);
    ck_assert_int_eq(b.ndim, 4);
    ck_assert_int_eq(b.dims[1], 16);
    ck_assert_int_eq(b.dims[2], 4); /* 13 -> 7 -> 4 */
    ck_assert_int_eq(b.dims[3], 3); /* 11 -> 6 -> 3 */
    tp_assert_close(&b, &a, 1e-5);
    /* MaxPoolBlocked's portable loop gives the SIMD loop's bits */
    slim__mpb_force_portable(true);
    slim_tensor c = tp_run(opt, &x);
    slim__mpb_force_portable(false);
    ck_assert_int_eq(memcmp(c.data, b.data, sizeof(float) * (size_t)slim_tensor_numel(&b)), 0);
    slim_tensor_release(&c);
    /* each image alone gives its bits in the batch */
    tp_assert_batch_invariant(opt, &x, &b, "odd channels");
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
    tp_rng = 9;
    tp_add_init(g, "lo", 0, NULL, 0.0f, 0.0f);
    tp_add_init(g, "hi", 0, NULL, 6.0f, 6.0f);
    conv_bn(g, "e1", "x", 16, 32, 1, 1, 1, "e1.bn");
    tp_node(g, "e1.clip", "Clip", 3, (const char *[]){"e1.bn", "lo", "hi"}, "h1");
    conv_bn(g, "d1", "h1", 32, 32, 3, 1, 32, "d1.bn");
    tp_node(g, "d1.clip", "Clip", 3, (const char *[]){"d1.bn", "lo", "hi"}, "h2");
    conv_bn(g, "e2", "h2", 32, 48, 1, 1, 1, "e2.bn");
    tp_node(g, "e2.relu", "Relu", 1, (const char *[]){"e2.bn"}, "h3");
    conv_bn(g, "d2", "h3", 48, 48, 3, 2, 48, "y");
    tp_graph_io(g);
    return g;
}

/* Runs dw_cnn through the passes with SLIM_CONV_MERGE_DW = merge (NULL:
 * unset) and checks what fuse_conv left: n_merged pairs as one FusedConv
 * each, with dw_stride 1 then 2, the rest as two. */
static slim_tensor dw_cnn_run(const char *merge, int n_merged, const slim_tensor *x,
                              const slim_tensor *ref_y)
{
    slim_err err = {0};
    slim_graph *go = dw_cnn();
    if (merge)
        setenv("SLIM_CONV_MERGE_DW", merge, 1);
    slim_status st = slim_passes_run(go, &err);
    unsetenv("SLIM_CONV_MERGE_DW");
    ck_assert_msg(st == SLIM_OK, "%s", err.msg);
    slim_model *opt;
    ck_assert_msg(slim_model_from_graph(go, &opt, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(opt->graph->n_nodes, 4 - n_merged);
    int with_dw = 0;
    for (int i = 0; i < opt->graph->n_nodes; i++) {
        ck_assert_str_eq(opt->graph->nodes[i].op_type, "FusedConv");
        int64_t dws = slim_attr_int(&opt->graph->nodes[i], "dw_stride", 0);
        with_dw += dws != 0;
        if (n_merged == 2)
            ck_assert_int_eq(dws, i + 1);
    }
    ck_assert_int_eq(with_dw, n_merged);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor b = tp_run(opt, x);
    ck_assert_int_eq(b.dims[1], 48);
    ck_assert_int_eq(b.dims[2], 5);
    ck_assert_int_eq(b.dims[3], 4);
    tp_assert_close(&b, ref_y, 1e-5);
    tp_assert_batch_invariant(opt, x, &b, "depthwise post-op");
    slim_model_free(opt);
    return b;
}

/* Merged (SLIM_CONV_MERGE_DW unset or 1), separate (0), and 2, which
 * keeps a 1x1 of 16 input channels apart unless oneDNN has a jit kernel
 * for the pair (fuse_conv.c, dw_merge_wanted): the same bits all ways
 * (oneDNN's reference fusion runs the same two kernels), each close to
 * the unfused graph and batch invariant. Another value is an error
 * naming the variable. */
START_TEST(conv_depthwise_post_op)
{
    slim_err err = {0};
    slim_graph *gr = dw_cnn();
    slim_model *ref;
    ck_assert_msg(slim_model_from_graph(gr, &ref, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor x = tp_input(17, 4, (int64_t[]){3, 16, 9, 7});
    slim_tensor a = tp_run(ref, &x);
    /* with 2: the 32-channel 1x1 merges, the 16-channel one where jit */
    int merged_by_2 = 1 + (int)slim_fconv_dw_post_op_is_jit(16, 32, 1);
    slim_tensor merged = dw_cnn_run(NULL, 2, &x, &a);
    slim_tensor merged1 = dw_cnn_run("1", 2, &x, &a);
    slim_tensor apart = dw_cnn_run("0", 0, &x, &a);
    slim_tensor by2 = dw_cnn_run("2", merged_by_2, &x, &a);
    size_t bytes = sizeof(float) * (size_t)slim_tensor_numel(&merged);
    const slim_tensor *same[] = {&merged1, &apart, &by2};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(memcmp(merged.data, same[i]->data, bytes), 0);
        slim_tensor_release((slim_tensor *)same[i]);
    }
    slim_tensor_release(&merged);
    slim_graph *gb = dw_cnn();
    setenv("SLIM_CONV_MERGE_DW", "yes", 1);
    slim_status st = slim_passes_run(gb, &err);
    unsetenv("SLIM_CONV_MERGE_DW");
    ck_assert_int_ne(st, SLIM_OK);
    ck_assert_msg(strstr(err.msg, "SLIM_CONV_MERGE_DW=yes"), "%s", err.msg);
    slim_graph_free(gb);
    slim_tensor_release(&a);
    slim_tensor_release(&x);
    slim_model_free(ref);
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
    tp_rng = 23;
    conv_bn(g, "c1", "x", 48, 48, 3, 1, 1, "c1.bn");
    tp_node(g, "c1.relu", "Relu", 1, (const char *[]){"c1.bn"}, "h");
    conv_bn(g, "c2", "h", 48, 48, 3, 1, 1, "c2.bn");
    tp_node(g, "add", "Add", 2, (const char *[]){"c2.bn", "h"}, "sum");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "y");
    tp_graph_io(g);
    return g;
}

static slim_model *load_wino(bool passes)
{
    return tu_model(wino_cnn(), passes);
}

/* Winograd's answer is the reference's within float rounding, not the
 * direct kernel's bits (so it did run), and an image's bits do not depend
 * on its batch. */
START_TEST(conv_winograd)
{
    slim_model *ref = load_wino(false), *wino = load_wino(true), *direct = load_wino(true);
    ck_assert_int_eq(tu_count_op(wino->graph, "FusedConv"), 2);
    slim_model_set_batch_invariant(wino, true);
    slim_tensor x = tp_input(31, 4, (int64_t[]){3, 48, 40, 40});
    slim_tensor a = tp_run(ref, &x), b = tp_run(wino, &x);
    /* primitives are made on first run, which reads the switch */
    setenv("SLIM_CONV_WINOGRAD", "0", 1);
    slim_tensor c = tp_run(direct, &x);
    unsetenv("SLIM_CONV_WINOGRAD");
    ck_assert_int_eq(b.dims[1], 48);
    ck_assert_int_eq(b.dims[2], 40);
    tp_assert_close(&b, &a, 1e-5);
    tp_assert_close(&c, &a, 1e-5);
    ck_assert_int_ne(memcmp(b.data, c.data, sizeof(float) * (size_t)slim_tensor_numel(&b)), 0);
    tp_assert_batch_invariant(wino, &x, &b, "winograd");
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
    tp_rng = 41;
    conv_bn(g, "c1", "x", 256, 256, 3, 1, 1, "c1.bn");
    tp_node(g, "c1.relu", "Relu", 1, (const char *[]){"c1.bn"}, "h");
    conv_bn(g, "c2", "h", 256, 256, 1, 1, 1, "c2.bn");
    tp_node(g, "add", "Add", 2, (const char *[]){"c2.bn", "h"}, "sum");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"sum"}, "r");
    conv_bn(g, "c3", "r", 256, 280, 1, 1, 1, "y");
    tp_graph_io(g);
    return g;
}

static slim_model *load_small_plane(bool passes)
{
    return tu_model(small_plane_cnn(), passes);
}

/* Many channel parts per thread on a small plane: the reference's answer
 * within float rounding, as with one part per thread (the old split), and
 * an image's bits do not depend on its batch. */
START_TEST(conv_small_plane_parts)
{
    slim_model *ref = load_small_plane(false), *opt = load_small_plane(true);
    slim_model *one = load_small_plane(true);
    ck_assert_int_eq(tu_count_op(opt->graph, "FusedConv"), 3);
    slim_model_set_batch_invariant(opt, true);
    slim_tensor x = tp_input(43, 4, (int64_t[]){3, 256, 7, 7});
    slim_tensor a = tp_run(ref, &x), b = tp_run(opt, &x);
    /* primitives are made on first run, which reads the switch */
    setenv("SLIM_CONV_PARTS_PER_THREAD", "1", 1);
    slim_tensor c = tp_run(one, &x);
    unsetenv("SLIM_CONV_PARTS_PER_THREAD");
    ck_assert_int_eq(b.dims[1], 280);
    ck_assert_int_eq(b.dims[2], 7);
    tp_assert_close(&b, &a, 1e-5);
    tp_assert_close(&c, &a, 1e-5);
    tp_assert_batch_invariant(opt, &x, &b, "small plane parts");
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
#endif
    tcase_add_test(tc, passes_off_by_env);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tp_main(passes_suite());
}
