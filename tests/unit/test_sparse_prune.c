/* test_sparse_prune.c - the pruning pass on Conv and MatMul layers
 * (quant/prune.c, prune_conv.c, prune_rule.c, int8_sparse.c) and the
 * load's 2:4 expansion (quant/prune_expand.c): a small CNN pruned (BN
 * folded, Relu and residual Add fused, depthwise convs left dense), int8
 * codes in sparse layers, the sparse-or-dense rule by batch, and 2:4 convs
 * and products back to dense with the 2:4 kernel's outputs. The kernels'
 * own tests are in test_sparse_conv.c and test_sparse.c. */
#include "testutil.h"

#include "int8.h"
#include "pass.h"
#include "prune.h"
#include "slim_init.h"
#include "sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345;

static float rndf(void)
{
    return tu_rndf(&rng);
}

/* x[1,3,10,10] -> Conv 3x3 (c1) -> BN -> Relu -> Conv 3x3 (c2) -> Add(relu) -> Relu
 *             -> depthwise Conv 3x3 (dw) -> y */
static slim_graph *small_cnn(void)
{
    slim_graph *g = tu_graph_x();
    uint32_t r = 99;
    tu_init_f32(g, &r, "w1", 4, (int64_t[]){16, 3, 3, 3}, -0.5f, 0.5f);
    tu_init_f32(g, &r, "b1", 1, (int64_t[]){16}, -0.1f, 0.1f);
    tu_init_f32(g, &r, "sc", 1, (int64_t[]){16}, 0.5f, 1.5f);
    tu_init_f32(g, &r, "bb", 1, (int64_t[]){16}, -0.2f, 0.2f);
    tu_init_f32(g, &r, "mu", 1, (int64_t[]){16}, -0.2f, 0.2f);
    tu_init_f32(g, &r, "var", 1, (int64_t[]){16}, 0.5f, 2.0f);
    tu_init_f32(g, &r, "w2", 4, (int64_t[]){16, 16, 3, 3}, -0.2f, 0.2f);
    tu_init_f32(g, &r, "wd", 4, (int64_t[]){16, 1, 3, 3}, -0.5f, 0.5f);
    slim_node *n = tu_op(g, "Conv", "c1", 3, "x", "w1", "b1");
    tu_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_op(g, "BatchNormalization", "bn", 5, "c1", "sc", "bb", "mu", "var");
    tu_op(g, "Relu", "r1", 1, "bn");
    n = tu_op(g, "Conv", "c2", 2, "r1", "w2");
    tu_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_op(g, "Add", "sum", 2, "c2", "r1");
    tu_op(g, "Relu", "r2", 1, "sum");
    n = tu_op(g, "Conv", "y", 2, "r2", "wd");
    tu_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_i(n, "group", 16);
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static slim_tensor run1(slim_graph *g, slim_tensor in)
{
    slim_model *m;
    slim_err err;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor *out = NULL, y;
    int n_out;
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, &in, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    y = out[0];
    free(out);
    slim_model_free(m);
    return y;
}

START_TEST(test_pass_on_small_cnn)
{
    static const char *methods[] = {"magnitude", "2:4", "magnitude"}; /* the last global */
    float xv[3 * 10 * 10];
    for (int i = 0; i < 300; i++)
        xv[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){1, 3, 10, 10}, xv);
    for (int mth = 0; mth < 3; mth++) {
        slim_err err;
        slim_prune_report rd, rs;
        slim_prune_opts od = {.method = methods[mth], .amount = 0.8, .storage = "dense",
                              .global = mth == 2};
        slim_prune_opts os = {.method = methods[mth], .amount = 0.8, .storage = "sparse",
                              .global = mth == 2};
        slim_graph *gd = small_cnn(), *gs = small_cnn();
        ck_assert_msg(slim_prune(gd, &od, &rd, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_prune(gs, &os, &rs, &err) == SLIM_OK, "%s", err.msg);
        /* BN folded in both; the sparse graph has fused its epilogues. */
        ck_assert_int_eq(tu_count_op(gd, "BatchNormalization"), 0);
        ck_assert_int_eq(tu_count_op(gs, "BatchNormalization"), 0);
        ck_assert_int_eq(tu_count_op(gs, "SparseConv"), 2);
        ck_assert_int_eq(tu_count_op(gs, "Relu"), 0);
        ck_assert_int_eq(tu_count_op(gs, "Add"), 0);
        ck_assert_int_eq(tu_count_op(gs, "Conv"), 1); /* the depthwise one */
        ck_assert_int_eq(rs.n_layers, 3);
        bool dw_listed = false;
        for (int i = 0; i < rs.n_layers; i++)
            dw_listed |= strstr(rs.layers[i].why, "depthwise") != NULL &&
                         strcmp(rs.layers[i].storage, "dense") == 0;
        ck_assert(dw_listed);
        ck_assert(rs.bytes_after < rs.bytes_before);
        slim_tensor yd = run1(gd, x), ys = run1(gs, x);
        ck_assert_int_eq(slim_tensor_numel(&yd), slim_tensor_numel(&ys));
        tu_assert_close_f32(&ys, yd.data, slim_tensor_numel(&yd), 1e-4);
        slim_tensor_release(&yd);
        slim_tensor_release(&ys);
        slim_prune_report_free(&rd);
        slim_prune_report_free(&rs);
    }
    slim_tensor_release(&x);
}
END_TEST

/* The int8 pass after pruning: both SparseConvs get int8 codes and
 * scales (listed in its report, their bytes down), the depthwise conv left
 * dense gets the dense int8 treatment or stays, and the output stays near
 * the float sparse model's. */
START_TEST(test_int8_pass_on_sparse_cnn)
{
    static const char *methods[] = {"magnitude", "2:4"};
    float xv[3 * 10 * 10];
    for (int i = 0; i < 300; i++)
        xv[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){1, 3, 10, 10}, xv);
    for (int mth = 0; mth < 2; mth++) {
        slim_err err;
        slim_prune_opts o = {.method = methods[mth], .amount = 0.8, .storage = "sparse"};
        slim_graph *gf = small_cnn(), *gq = small_cnn();
        ck_assert_msg(slim_prune(gf, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_prune(gq, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
        slim_int8_report rep;
        ck_assert_msg(slim_quant_int8(gq, NULL, &rep, &err) == SLIM_OK, "%s", err.msg);
        int sparse = 0;
        for (int i = 0; i < rep.n_layers; i++)
            if (strcmp(rep.layers[i].op_type, "SparseConv") == 0) {
                ck_assert_msg(rep.layers[i].quantized, "%s", rep.layers[i].why);
                ck_assert(rep.layers[i].bytes_after < rep.layers[i].bytes_before);
                ck_assert(rep.layers[i].weight_error < 0.02);
                sparse++;
            }
        ck_assert_int_eq(sparse, 2);
        ck_assert_int_eq(tu_count_op(gq, "SparseConv"), 2);
        slim_int8_report_free(&rep);
        slim_tensor yf = run1(gf, x), yq = run1(gq, x);
        int64_t n = slim_tensor_numel(&yf);
        ck_assert_int_eq(slim_tensor_numel(&yq), n);
        double e = slim_int8_rel_error(yf.data, yq.data, n);
        ck_assert_msg(e < 0.03, "%s: int8 vs float sparse relative L2 %g", methods[mth], e);
        slim_tensor_release(&yf);
        slim_tensor_release(&yq);
    }
    slim_tensor_release(&x);
}
END_TEST

/* A MatMul x [batch, 256] x w [256, 128], x declared 2-D (rows = batch)
 * when rank2, else 3-D with a symbolic sequence (rows unknown). */
static slim_graph *one_matmul(bool rank2)
{
    slim_graph *g = tu_graph_x();
    int x = slim_graph_find_value(g, "x");
    g->values[x].info.ndim = rank2 ? 2 : 3;
    g->values[x].info.dims[0] = -1;
    g->values[x].info.dims[1] = rank2 ? 256 : -1;
    g->values[x].info.dim_names[1] = rank2 ? NULL : strdup("seq"); /* freed with g */
    g->values[x].info.dims[rank2 ? 1 : 2] = 256;
    uint32_t seed = 777; /* the same weight every call */
    tu_init_f32(g, &seed, "w", 2, (int64_t[]){256, 128}, -1, 1);
    tu_op(g, "MatMul", "y", 2, "x", "w");
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

/* The decision rule: the same 70% MatMul dense at batch 1 (csr measured
 * slower there) and csr at batch 64; a conv of 128 channels at density
 * 0.18 sparse at batch 1 and dense from batch 8 (the figures in prune.h
 * and prune_conv.h). */
START_TEST(test_rule_by_batch)
{
    const char *storage[2];
    static const int64_t batch[2] = {1, 64};
    for (int b = 0; b < 2; b++) {
        slim_graph *g = one_matmul(true);
        slim_prune_report rep;
        slim_err err;
        slim_prune_opts o = {.method = "magnitude", .amount = 0.7, .batch = batch[b]};
        ck_assert_msg(slim_prune(g, &o, &rep, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(rep.n_layers, 1);
        storage[b] = rep.layers[0].storage;
        if (b == 0)
            ck_assert_msg(strstr(rep.layers[0].why, "batch 1"), "%s", rep.layers[0].why);
        slim_prune_report_free(&rep);
        slim_graph_free(g);
    }
    ck_assert_str_eq(storage[0], "dense");
    ck_assert_str_eq(storage[1], "csr");
    /* A sequence of unknown length: the 128-row figure whatever the batch. */
    slim_graph *g = one_matmul(false);
    const slim_node *mm = &g->nodes[0];
    ck_assert_int_eq(slim_prune_rows(g, mm, 1), -1);
    ck_assert(slim_prune_max_density(g, mm, false, 128, 1) == SLIM_PRUNE_CSR_MAX_DENSITY);
    slim_graph_free(g);
    g = one_matmul(true);
    ck_assert_int_eq(slim_prune_rows(g, &g->nodes[0], 0), 1);
    ck_assert_int_eq(slim_prune_rows(g, &g->nodes[0], 32), 32);
    /* Convs: a Conv node's attributes only (group) are read. */
    double d1 = slim_prune_max_density(g, &g->nodes[0], true, 128, 1);
    double d8 = slim_prune_max_density(g, &g->nodes[0], true, 128, 8);
    ck_assert(0.18 <= d1 && 0.18 > d8);
    slim_graph_free(g);
}
END_TEST

/* MobileNetV2's block: x[1,3,10,10] -> Conv 1x1 (e) -> Relu -> depthwise
 * 3x3 (dw) -> BN -> Clip -> Conv 1x1 (p) -> Conv 1x1 (q) -> y. At 90% both
 * 1x1s around the depthwise conv stay dense (each says why); q, which
 * reads p, does not read a depthwise conv and goes csr; forced sparse
 * makes p sparse too, and the outputs agree. */
static slim_graph *mnv2_block(void)
{
    slim_graph *g = tu_graph_x();
    uint32_t r = 7;
    tu_init_f32(g, &r, "we", 4, (int64_t[]){16, 3, 1, 1}, -0.5f, 0.5f);
    tu_init_f32(g, &r, "wd", 4, (int64_t[]){16, 1, 3, 3}, -0.5f, 0.5f);
    tu_init_f32(g, &r, "sc", 1, (int64_t[]){16}, 0.5f, 1.5f);
    tu_init_f32(g, &r, "bb", 1, (int64_t[]){16}, -0.2f, 0.2f);
    tu_init_f32(g, &r, "mu", 1, (int64_t[]){16}, -0.2f, 0.2f);
    tu_init_f32(g, &r, "var", 1, (int64_t[]){16}, 0.5f, 2.0f);
    tu_init_f32(g, &r, "wp", 4, (int64_t[]){32, 16, 1, 1}, -0.5f, 0.5f);
    tu_init_f32(g, &r, "wq", 4, (int64_t[]){32, 32, 1, 1}, -0.5f, 0.5f);
    tu_op(g, "Conv", "e", 2, "x", "we");
    tu_op(g, "Relu", "er", 1, "e");
    slim_node *n = tu_op(g, "Conv", "dw", 2, "er", "wd");
    tu_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_i(n, "group", 16);
    tu_op(g, "BatchNormalization", "bn", 5, "dw", "sc", "bb", "mu", "var");
    tu_op(g, "Clip", "cl", 1, "bn");
    tu_op(g, "Conv", "p", 2, "cl", "wp");
    tu_op(g, "Conv", "y", 2, "p", "wq");
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static const slim_prune_layer *layer_named(const slim_prune_report *r, const char *name)
{
    for (int i = 0; i < r->n_layers; i++)
        if (strcmp(r->layers[i].name, name) == 0)
            return &r->layers[i];
    ck_abort_msg("no layer %s in the report", name);
    return NULL;
}

START_TEST(test_rule_around_depthwise)
{
    float xv[3 * 10 * 10];
    for (int i = 0; i < 300; i++)
        xv[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){1, 3, 10, 10}, xv);
    slim_tensor y[2];
    for (int forced = 0; forced < 2; forced++) {
        slim_graph *g = mnv2_block();
        slim_prune_report rep;
        slim_err err;
        slim_prune_opts o = {.method = "magnitude", .amount = 0.9,
                             .storage = forced ? "sparse" : NULL};
        ck_assert_msg(slim_prune(g, &o, &rep, &err) == SLIM_OK, "%s", err.msg);
        const slim_prune_layer *e = layer_named(&rep, "e"), *p = layer_named(&rep, "p"),
                               *q = layer_named(&rep, "y");
        ck_assert_str_eq(q->storage, "csr");
        ck_assert_str_eq(p->storage, forced ? "csr" : "dense");
        ck_assert_str_eq(e->storage, forced ? "csr" : "dense");
        if (!forced) {
            ck_assert_msg(strstr(p->why, "reading a depthwise conv"), "%s", p->why);
            ck_assert_msg(strstr(e->why, "feeding a depthwise conv"), "%s", e->why);
            ck_assert_int_eq(tu_count_op(g, "SparseConv"), 1);
        } else {
            ck_assert_int_eq(tu_count_op(g, "SparseConv"), 3);
        }
        y[forced] = run1(g, x);
        slim_prune_report_free(&rep);
    }
    ck_assert_int_eq(slim_tensor_numel(&y[0]), slim_tensor_numel(&y[1]));
    tu_assert_close_f32(&y[1], y[0].data, slim_tensor_numel(&y[0]), 1e-4);
    slim_tensor_release(&y[0]);
    slim_tensor_release(&y[1]);
    slim_tensor_release(&x);
}
END_TEST

/* int8 SparseMatMul (csr and 2:4): near the float sparse layer, and each
 * row alone bitwise as in a batch of 3. */
START_TEST(test_int8_sparse_matmul)
{
    static const char *methods[] = {"magnitude", "2:4"};
    float xv[3 * 256];
    for (int i = 0; i < 3 * 256; i++)
        xv[i] = rndf();
    for (int mth = 0; mth < 2; mth++) {
        slim_err err;
        slim_prune_opts o = {.method = methods[mth], .amount = 0.9, .storage = "sparse"};
        slim_graph *gf = one_matmul(true), *gq = one_matmul(true);
        ck_assert_msg(slim_prune(gf, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_prune(gq, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
        slim_int8_report rep;
        ck_assert_msg(slim_quant_int8(gq, NULL, &rep, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(rep.n_layers, 1);
        ck_assert_msg(rep.layers[0].quantized, "%s", rep.layers[0].why);
        ck_assert_str_eq(rep.layers[0].op_type, "SparseMatMul");
        slim_int8_report_free(&rep);
        slim_model *mf, *mq;
        ck_assert_msg(slim_model_from_graph(gf, &mf, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_model_from_graph(gq, &mq, &err) == SLIM_OK, "%s", err.msg);
        slim_tensor x3 = tu_f32(2, (int64_t[]){3, 256}, xv), *yf, *yq, *y1;
        int n;
        ck_assert_msg(slim_model_run(mf, 1, (const char *[]){"x"}, &x3, &yf, &n, &err) ==
                      SLIM_OK, "%s", err.msg);
        ck_assert_msg(slim_model_run(mq, 1, (const char *[]){"x"}, &x3, &yq, &n, &err) ==
                      SLIM_OK, "%s", err.msg);
        double e = slim_int8_rel_error(yf[0].data, yq[0].data, 3 * 128);
        ck_assert_msg(e < 0.02, "%s: int8 vs float relative L2 %g", methods[mth], e);
        for (int r = 0; r < 3; r++) {
            slim_tensor x1 = tu_f32(2, (int64_t[]){1, 256}, xv + r * 256);
            ck_assert_msg(slim_model_run(mq, 1, (const char *[]){"x"}, &x1, &y1, &n, &err) ==
                          SLIM_OK, "%s", err.msg);
            ck_assert_msg(memcmp(y1[0].data, (float *)yq[0].data + r * 128, 128 * 4) == 0,
                          "%s: row %d alone differs from batch 3", methods[mth], r);
            slim_tensors_free(y1, n);
            slim_tensor_release(&x1);
        }
        slim_tensors_free(yf, n);
        slim_tensors_free(yq, n);
        slim_tensor_release(&x3);
        slim_model_free(mf);
        slim_model_free(mq);
    }
}
END_TEST

extern const slim_pass slim__pass_prune_expand; /* quant/prune_expand.c */

/* 2:4 convs back to dense Conv (+ Add + Relu) at load, the same outputs
 * as the 2:4 kernel's up to summation order; a forced one (storage
 * "sparse") and csr ones stay. */
START_TEST(test_expand_24_to_dense)
{
    float xv[3 * 10 * 10];
    for (int i = 0; i < 300; i++)
        xv[i] = rndf();
    slim_tensor x = tu_f32(4, (int64_t[]){1, 3, 10, 10}, xv);
    static const char *storage[] = {NULL, "sparse"};
    for (int f = 0; f < 2; f++) {
        for (int q = 0; q < 2; q++) { /* float values, int8 codes */
            slim_err err;
            slim_prune_opts o = {.method = "2:4", .storage = storage[f]};
            slim_graph *gs = small_cnn(), *ge = small_cnn();
            ck_assert_msg(slim_prune(gs, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
            ck_assert_msg(slim_prune(ge, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
            if (q) {
                ck_assert_msg(slim_quant_int8(gs, NULL, NULL, &err) == SLIM_OK, "%s", err.msg);
                ck_assert_msg(slim_quant_int8(ge, NULL, NULL, &err) == SLIM_OK, "%s", err.msg);
            }
            int n_sparse = tu_count_op(ge, "SparseConv"), changed = 0;
            ck_assert_int_eq(n_sparse, 2);
            ck_assert_msg(slim__pass_prune_expand.run(ge, &changed, &err) == SLIM_OK, "%s",
                          err.msg);
            ck_assert_int_eq(changed, (f ? 0 : 2));
            ck_assert_int_eq(tu_count_op(ge, "SparseConv"), (f ? 2 : 0));
            slim_tensor ys = run1(gs, x), ye = run1(ge, x);
            tu_assert_close_f32(&ye, ys.data, slim_tensor_numel(&ys), 1e-4);
            slim_tensor_release(&ys);
            slim_tensor_release(&ye);
        }
    }
    /* csr stays sparse. */
    slim_err err;
    slim_prune_opts o = {.method = "magnitude", .amount = 0.8, .storage = "sparse"};
    slim_graph *g = small_cnn();
    ck_assert_msg(slim_prune(g, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
    o.storage = NULL;
    int changed = 0;
    ck_assert_msg(slim__pass_prune_expand.run(g, &changed, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(changed, 0);
    slim_graph_free(g);
    slim_tensor_release(&x);
}
END_TEST

/* x [rows, 256] (declared 2-D) into Gemm(x, w [256, 128], b) when rank2,
 * else x [1, seq, 256] into MatMul(x, w) + Add(b): the two forms a pruned
 * layer with a bias comes from. */
static slim_graph *one_linear_bias(bool rank2)
{
    slim_graph *g = tu_graph_x();
    int x = slim_graph_find_value(g, "x");
    g->values[x].info.ndim = rank2 ? 2 : 3;
    g->values[x].info.dims[0] = -1;
    g->values[x].info.dims[1] = rank2 ? 256 : -1;
    g->values[x].info.dim_names[1] = rank2 ? NULL : strdup("seq"); /* freed with g */
    g->values[x].info.dims[rank2 ? 1 : 2] = 256;
    uint32_t seed = 777;
    tu_init_f32(g, &seed, "w", 2, (int64_t[]){256, 128}, -1, 1);
    tu_init_f32(g, &seed, "b", 1, (int64_t[]){128}, -1, 1);
    if (rank2) {
        tu_op(g, "Gemm", "y", 3, "x", "w", "b");
    } else {
        tu_op(g, "MatMul", "t", 2, "x", "w");
        tu_op(g, "Add", "y", 2, "t", "b");
    }
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

/* 2:4 SparseMatMuls (float and int8, with a bias) back to a dense Gemm (X
 * 2-D) or MatMul + Add at load, the same outputs as the 2:4 kernel's up to
 * summation order; a forced one (storage "sparse") stays. */
START_TEST(test_expand_24_matmul_to_dense)
{
    float xv[3 * 256];
    for (int i = 0; i < 3 * 256; i++)
        xv[i] = rndf();
    static const char *storage[] = {NULL, "sparse"};
    for (int r2 = 0; r2 < 2; r2++)
        for (int f = 0; f < 2; f++)
            for (int q = 0; q < 2; q++) { /* float values, int8 codes */
                slim_err err;
                slim_prune_opts o = {.method = "2:4", .storage = storage[f]};
                slim_graph *gs = one_linear_bias(r2), *ge = one_linear_bias(r2);
                ck_assert_msg(slim_prune(gs, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
                ck_assert_msg(slim_prune(ge, &o, NULL, &err) == SLIM_OK, "%s", err.msg);
                if (q) {
                    ck_assert_msg(slim_quant_int8(gs, NULL, NULL, &err) == SLIM_OK, "%s",
                                  err.msg);
                    ck_assert_msg(slim_quant_int8(ge, NULL, NULL, &err) == SLIM_OK, "%s",
                                  err.msg);
                }
                ck_assert_int_eq(tu_count_op(ge, "SparseMatMul"), 1);
                int changed = 0;
                ck_assert_msg(slim__pass_prune_expand.run(ge, &changed, &err) == SLIM_OK, "%s",
                              err.msg);
                ck_assert_int_eq(changed, (f ? 0 : 1));
                ck_assert_int_eq(tu_count_op(ge, "SparseMatMul"), (f ? 1 : 0));
                ck_assert_int_eq(tu_count_op(ge, r2 ? "Gemm" : "MatMul"), (f ? 0 : 1));
                slim_tensor x = r2 ? tu_f32(2, (int64_t[]){3, 256}, xv)
                                   : tu_f32(3, (int64_t[]){1, 3, 256}, xv);
                slim_tensor ys = run1(gs, x), ye = run1(ge, x);
                ck_assert_int_eq(slim_tensor_numel(&ye), 3 * 128);
                tu_assert_close_f32(&ye, ys.data, slim_tensor_numel(&ys), 1e-4);
                slim_tensor_release(&ys);
                slim_tensor_release(&ye);
                slim_tensor_release(&x);
            }
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("sparse_prune");
    TCase *tp = tcase_create("pass");
    tcase_add_test(tp, test_pass_on_small_cnn);
    tcase_add_test(tp, test_int8_pass_on_sparse_cnn);
    tcase_add_test(tp, test_expand_24_to_dense);
    tcase_add_test(tp, test_expand_24_matmul_to_dense);
    tcase_add_test(tp, test_rule_by_batch);
    tcase_add_test(tp, test_rule_around_depthwise);
    tcase_add_test(tp, test_int8_sparse_matmul);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
