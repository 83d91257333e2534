/* test_int8_pass.c - the int8 pass (quant/int8.c) on small graphs: what it
 * fuses, what it keeps or refuses, its scales and errors, against the float
 * graph. The kernel it targets (kernels/cpu/qgemm.c) is tested in
 * test_int8.c. */
#include "testutil.h"

#include "int8.h"
#include "gelu_poly.h"
#include "pass.h"
#include "qgemm.h"
#include "pipeline.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* This file's own seeded stream (testutil.h): each case reseeds it. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float rndf(void) /* in [-1, 1) */
{
    return tu_xrndf(&rng_state);
}

START_TEST(test_pass_fuses_and_matches_fp32)
{
    slim_tensor x = tu_xinput(&rng_state, 7, 2, (int64_t[]){5, 40});
    slim_err err;
    slim_tensor ref = tu_run1(tu_two_layers(&rng_state), "x", x, SLIM_OK, &err);

    slim_graph *g = tu_two_layers(&rng_state);
    slim_int8_report rep;
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    ck_assert_int_eq(g->n_nodes, 2); /* Add and Relu fused into the first */
    ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
    ck_assert_str_eq(g->nodes[0].domain, "com.slimserve");
    ck_assert_str_eq(slim_attr_str(&g->nodes[0], "activation", ""), "Relu");
    ck_assert_int_eq(g->nodes[0].n_in, 5);
    ck_assert_str_eq(g->nodes[1].op_type, "MatMulInt8");
    tu_assert_weights_gone(g);
    ck_assert_int_eq(rep.n_layers, 2);
    ck_assert(rep.layers[0].quantized && rep.layers[1].quantized);
    ck_assert_uint_eq(rep.layers[0].bytes_before, (40 * 24 + 24) * 4);
    /* 24 channels pad to 32, K 40 stays; colsum, bias 24 each, and the
     * scale as float16 (these scales are normal float16 numbers). */
    ck_assert_uint_eq(rep.layers[0].bytes_after, 32 * 40 + 2 * 24 * 4 + 24 * 2);
    const slim_tensor *sc = &g->values[g->nodes[0].in[2]].init;
    ck_assert_int_eq(sc->dtype, SLIM_F16);
    ck_assert(rep.layers[0].weight_error > 0 && rep.layers[0].weight_error < 0.02);
    slim_int8_report_free(&rep);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    tu_assert_close_max(&y, &ref, 0.03);
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* Scales are float16, rounded up from the chosen scale before the codes are
 * made, when every channel's is a normal float16; weights so small that
 * one is not keep float32 scales (the kernel takes both). The chosen scale
 * is max|w| / 127 under SLIM_INT8_SCALE=max, else the least-squared-error
 * one of max|w| / 127 x (1 - i / 32), i < 16, which is never over the
 * former and whose weight error is never larger. */
static slim_graph *one_matmul(float wscale)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 17;
    rng_state = 11;
    tu_xinit(g, &rng_state, "w", 2, (int64_t[]){40, 24}, wscale);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

START_TEST(test_scale_half_or_float)
{
    slim_tensor x = tu_xinput(&rng_state, 5, 2, (int64_t[]){3, 40});
    slim_err err;
    const float wscales[] = {0.3f, 1e-5f};
    double werr[2][2] = {{0}}; /* [t][mse] */
    for (int tm = 0; tm < 4; tm++) {
        int t = tm % 2, mse = tm / 2;
        if (mse)
            unsetenv("SLIM_INT8_SCALE");
        else
            setenv("SLIM_INT8_SCALE", "max", 1);
        slim_tensor ref = tu_run1(one_matmul(wscales[t]), "x", x, SLIM_OK, &err);
        slim_graph *g = one_matmul(wscales[t]);
        /* The float weight, for the scale bound below. */
        float w[40 * 24];
        memcpy(w, g->values[slim_graph_find_value(g, "w")].init.data, sizeof(w));
        slim_int8_report rep = {0};
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        ck_assert_int_eq(rep.n_layers, 1);
        werr[t][mse] = rep.layers[0].weight_error;
        slim_int8_report_free(&rep);
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
        const slim_tensor *sc = &g->values[g->nodes[0].in[2]].init;
        ck_assert_int_eq(sc->dtype, t == 0 ? SLIM_F16 : SLIM_F32);
        for (int j = 0; j < 24; j++) {
            float m = 0;
            for (int k = 0; k < 40; k++)
                m = fmaxf(m, fabsf(w[k * 24 + j]));
            float s = t == 0 ? slim_f16_to_f32(((const uint16_t *)sc->data)[j])
                             : ((const float *)sc->data)[j];
            /* max: never under max|w| / 127 (no code clipped); mse: never
             * under 0.53 of it. In float16 at most one float16 step
             * (2^-10 relative) over the chosen scale, so over max|w| / 127. */
            float lo = mse ? 17.0f / 32 : 1.0f;
            ck_assert_msg(s * 127.0f >= m * lo * (1 - 1e-6f), "channel %d: scale %g, max %g", j,
                          s, m);
            ck_assert_msg(s * 127.0f <= m * (1 + (t == 0 ? 1.0f / 1024 : 1e-6f)),
                          "channel %d: scale %g, max %g", j, s, m);
        }
        slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
        tu_assert_close_max(&y, &ref, 0.02);
        slim_tensor_release(&y);
        slim_tensor_release(&ref);
    }
    unsetenv("SLIM_INT8_SCALE");
    for (int t = 0; t < 2; t++) {
        ck_assert_msg(werr[t][1] <= werr[t][0] * (1 + 1e-3), "weight error mse %g, max %g",
                      werr[t][1], werr[t][0]);
        ck_assert_msg(werr[t][0] > 0, "max-scale weight error %g", werr[t][0]);
    }
    /* Heavy tails (what trained weights have) are what the smaller scale
     * is for: there it must cut the weight error, or the switch would be a
     * no-op. K = 3072 entries a channel, Student-t(3) like bench/gen_encoder.py's;
     * the outlier-row split off, which would take the largest rows out. */
    setenv("SLIM_INT8_OUTLIERS", "off", 1);
    double tail[2];
    for (int mse = 0; mse < 2; mse++) {
        if (mse)
            unsetenv("SLIM_INT8_SCALE");
        else
            setenv("SLIM_INT8_SCALE", "max", 1);
        slim_graph *g = slim_graph_new();
        g->opset = 17;
        slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                            (const char *[]){"y"});
        g->nodes[0].opset = 17;
        rng_state = 23;
        tu_xinit(g, &rng_state, "w", 2, (int64_t[]){3072, 16}, 1.0f);
        float *w = g->values[slim_graph_find_value(g, "w")].init.data;
        for (int i = 0; i < 3072 * 16; i++) { /* Student-t, 3 degrees of freedom */
            float nv[4];
            for (int a = 0; a < 4; a++) /* about N(0, 1): a sum of 6 uniforms */
                nv[a] = (rndf() + rndf() + rndf() + rndf() + rndf() + rndf()) * 0.7071f;
            w[i] = 0.01f * nv[0] / sqrtf((nv[1] * nv[1] + nv[2] * nv[2] + nv[3] * nv[3]) / 3);
        }
        tu_set_io(g, "x", SLIM_F32, "y");
        slim_int8_report rep = {0};
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        tail[mse] = rep.layers[0].weight_error;
        slim_int8_report_free(&rep);
        slim_graph_free(g);
    }
    unsetenv("SLIM_INT8_SCALE");
    unsetenv("SLIM_INT8_OUTLIERS");
    ck_assert_msg(tail[1] < tail[0], "heavy tails: mse %g, max %g", tail[1], tail[0]);
    slim_tensor_release(&x);
}
END_TEST

START_TEST(test_pass_exclude_by_name_and_type)
{
    slim_graph *g = tu_two_layers(&rng_state);
    slim_err err;
    slim_int8_report rep;
    slim_int8_opts o = {.exclude = (const char *[]){"mm"}, .n_exclude = 1};
    ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "MatMul");
    ck_assert_int_eq(g->n_nodes, 4);
    ck_assert(!rep.layers[0].quantized && rep.layers[1].quantized);
    ck_assert_str_eq(rep.layers[0].why, "excluded");
    slim_int8_report_free(&rep);
    slim_graph_free(g);

    g = tu_two_layers(&rng_state);
    slim_int8_opts o2 = {.exclude = (const char *[]){"Gemm"}, .n_exclude = 1};
    ck_assert_int_eq(slim_quant_int8(g, &o2, NULL, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
    ck_assert_str_eq(g->nodes[1].op_type, "Gemm");
    ck_assert_int_eq(g->values[slim_graph_find_value(g, "w2")].kind, SLIM_VALUE_INITIALIZER);
    slim_graph_free(g);
}
END_TEST

START_TEST(test_gather_int8)
{
    rng_state = 3;
    slim_graph *g = tu_gather_graph(&rng_state);
    slim_err err;
    slim_int8_report rep;
    ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "GatherInt8");
    ck_assert_uint_eq(rep.bytes_after, 50 * 33 + 50 * 2); /* float16 row scales */
    ck_assert_int_eq(g->values[g->nodes[0].in[1]].init.dtype, SLIM_F16);
    slim_int8_report_free(&rep);
    slim_tensor ids = tu_i64(2, (int64_t[]){2, 3}, (int64_t[]){0, 49, 7, -1, 7, 20});
    slim_tensor y = tu_run1(g, "ids", ids, SLIM_OK, &err);
    tu_assert_shape(&y, 3, (int64_t[]){2, 3, 33});
    /* The same rows from the float table: each within half a step. */
    rng_state = 3;
    float table[50 * 33];
    for (int i = 0; i < 50 * 33; i++)
        table[i] = rndf() * 2.0f;
    const int64_t *iv = ids.data;
    for (int r = 0; r < 6; r++) {
        int64_t row = iv[r] < 0 ? iv[r] + 50 : iv[r];
        float mx = 0;
        for (int c = 0; c < 33; c++)
            mx = fmaxf(mx, fabsf(table[row * 33 + c]));
        for (int c = 0; c < 33; c++)
            ck_assert(fabsf(((float *)y.data)[r * 33 + c] - table[row * 33 + c]) <=
                      0.5001f * mx / 127);
    }
    slim_tensor_release(&y);
    slim_tensor_release(&ids);

    /* An index out of range is an error, not a stray read. */
    g = tu_gather_graph(&rng_state); /* the stream goes on: another table */
    ck_assert_int_eq(slim_quant_int8(g, NULL, NULL, &err), SLIM_OK);
    ids = tu_i64(1, (int64_t[]){1}, (int64_t[]){50});
    tu_run1(g, "ids", ids, SLIM_EINVAL, &err);
    ck_assert_msg(strstr(err.msg, "out of range"), "%s", err.msg);
    slim_tensor_release(&ids);
}
END_TEST

/* A MatMulInt8 whose packed weight does not match its shape (a forged
 * file) is refused with a message, before the kernel reads it. */
START_TEST(test_malformed_node_refused)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "q", "MatMulInt8", "com.slimserve", 4,
                        (const char *[]){"x", "w", "s", "cs"}, 1, (const char *[]){"y"});
    g->nodes[0].opset = 1;
    tu_attr_i(&g->nodes[0], "K", 8);
    int w = slim_graph_value(g, "w"), s = slim_graph_value(g, "s"), cs = slim_graph_value(g, "cs");
    g->values[w].kind = g->values[s].kind = g->values[cs].kind = SLIM_VALUE_INITIALIZER;
    int8_t wb[16 * 4] = {0}; /* 16 x 8 would be 128 bytes */
    g->values[w].init = tu_tensor(SLIM_I8, 2, (int64_t[]){16, 4}, wb);
    g->values[s].init = tu_f32(1, (int64_t[]){3}, (float[]){1, 1, 1});
    g->values[cs].init = tu_tensor(SLIM_I32, 1, (int64_t[]){3}, (int32_t[]){0, 0, 0});
    tu_assert_refused(g, 2, (int64_t[]){2, 8}, "packed weight");
}
END_TEST

/* The error check: a layer's measured error is its output's relative L2
 * error against float32 (recomputed here from the two models' outputs), a
 * budget under it keeps the layer (and its Add and Relu) in float32, and a
 * layer with no sample input is quantized unmeasured. */
START_TEST(test_pass_max_error)
{
    slim_tensor x = tu_xinput(&rng_state, 11, 2, (int64_t[]){6, 40});
    slim_err err;
    slim_int8_samples smp = {1, (char *[]){"x"}, &x};

    /* Independent figure: r (the first layer's output) from the float and
     * the int8 model, fc kept float32 so only the first layer differs. */
    slim_tensor r[2];
    for (int q = 0; q < 2; q++) {
        slim_graph *g = tu_two_layers(&rng_state);
        slim_graph_add_output(g, slim_graph_find_value(g, "r"));
        slim_int8_opts o = {.exclude = (const char *[]){"fc"}, .n_exclude = 1};
        if (q)
            ck_assert_int_eq(slim_quant_int8(g, &o, NULL, &err), SLIM_OK);
        slim_model *m;
        ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
        slim_tensor *out;
        int n_out;
        ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                         SLIM_OK);
        r[q] = out[1];
        slim_tensor_release(&out[0]);
        free(out);
        slim_model_free(m);
    }
    double want = slim_int8_rel_error(r[0].data, r[1].data, slim_tensor_numel(&r[0]));
    ck_assert(want > 1e-4 && want < 0.05);

    slim_graph *g = tu_two_layers(&rng_state);
    slim_int8_report rep;
    slim_int8_opts o = {.samples = &smp, .max_error = 1.0};
    ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
    ck_assert(rep.layers[0].quantized && rep.layers[1].quantized);
    ck_assert_msg(fabs(rep.layers[0].error - want) <= 1e-3 * want, "measured %g, recomputed %g",
                  rep.layers[0].error, want);
    ck_assert(rep.layers[1].error == -1); /* fc's input r has no sample */
    double measured = rep.layers[0].error;
    slim_int8_report_free(&rep);
    slim_graph_free(g);

    g = tu_two_layers(&rng_state);
    o.max_error = measured * 0.999;
    ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
    ck_assert(!rep.layers[0].quantized && rep.layers[1].quantized);
    ck_assert_str_eq(rep.layers[0].why, "over max_error");
    ck_assert(rep.layers[0].error == measured);
    ck_assert_uint_eq(rep.layers[0].bytes_after, rep.layers[0].bytes_before);
    ck_assert_int_eq(g->n_nodes, 4); /* MatMul, Add, Relu kept; fc quantized */
    ck_assert_str_eq(g->nodes[0].op_type, "MatMul");
    ck_assert_str_eq(g->nodes[3].op_type, "MatMulInt8");
    ck_assert_int_eq(g->values[slim_graph_find_value(g, "w")].kind, SLIM_VALUE_INITIALIZER);
    slim_int8_report_free(&rep);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    slim_tensor ref = tu_run1(tu_two_layers(&rng_state), "x", x, SLIM_OK, &err);
    tu_assert_close_max(&y, &ref, 0.05);
    slim_tensor_release(&y);
    slim_tensor_release(&ref);
    slim_tensor_release(&r[0]);
    slim_tensor_release(&r[1]);
    slim_tensor_release(&x);
}
END_TEST

/* The outlier-channel split: a weight whose input channel 5 is 30x the
 * others costs every output channel's int8 step without the split; with
 * it, that channel is quantized on its own, the layer's measured error
 * drops under a bound it is far over without, and the run's error is the
 * measured one. */
START_TEST(test_outlier_channels_split)
{
    enum { M = 8, K = 96, N = 40 };
    slim_tensor x = tu_xinput(&rng_state, 5, 2, (int64_t[]){M, K});
    slim_int8_samples smp = {1, (char *[]){"x"}, &x};
    double errors[2];
    for (int split = 0; split < 2; split++) {
        slim_graph *g = slim_graph_new();
        g->opset = 17;
        slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                            (const char *[]){"y"});
        g->nodes[0].opset = 17;
        rng_state = 9;
        int w = tu_xinit(g, &rng_state, "w", 2, (int64_t[]){K, N}, 0.3f);
        float *wd = g->values[w].init.data;
        for (int j = 0; j < N; j++)
            wd[5 * N + j] *= 30.0f;
        tu_set_io(g, "x", SLIM_F32, "y");
        slim_err err;
        slim_tensor ref = tu_run1(g, "x", x, SLIM_OK, &err);
        g = slim_graph_new();
        g->opset = 17;
        slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                            (const char *[]){"y"});
        g->nodes[0].opset = 17;
        rng_state = 9;
        w = tu_xinit(g, &rng_state, "w", 2, (int64_t[]){K, N}, 0.3f);
        wd = g->values[w].init.data;
        for (int j = 0; j < N; j++)
            wd[5 * N + j] *= 30.0f;
        tu_set_io(g, "x", SLIM_F32, "y");
        slim_int8_report rep;
        slim_int8_opts o = {.samples = &smp, .no_outlier_split = !split};
        ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
        ck_assert(rep.layers[0].quantized);
        ck_assert_int_eq(rep.layers[0].n_outliers, split ? 1 : 0);
        ck_assert_int_eq(g->nodes[0].n_in, split ? 8 : 4);
        /* With the split: the row's N codes and N scales, 8 for its index;
         * the main scales float16. */
        ck_assert_uint_eq(rep.layers[0].bytes_after,
                          48 * K + N * 4 + N * 2 + (split ? N + N * 4 + 8 : 0));
        errors[split] = rep.layers[0].error;
        slim_int8_report_free(&rep);
        /* Every path gives bitwise the same (the side product included). */
        slim_model *m;
        ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
        const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
        slim_tensor *outs[3] = {0};
        int n_out;
        for (int i = 0; i < 3; i++)
            if (slim_qgemm_set_isa(isas[i]))
                ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &outs[i],
                                                &n_out, &err), SLIM_OK);
        slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
        for (int i = 1; i < 3; i++)
            if (outs[i]) {
                ck_assert(memcmp(outs[i][0].data, outs[0][0].data, sizeof(float) * M * N) == 0);
                slim_tensors_free(outs[i], 1);
            }
        slim_tensor y = outs[0][0];
        free(outs[0]);
        slim_model_free(m);
        double e = slim_int8_rel_error(ref.data, y.data, M * N);
        ck_assert_msg(fabs(e - errors[split]) <= 1e-3 * e, "run %g, measured %g", e,
                      errors[split]);
        slim_tensor_release(&y);
        slim_tensor_release(&ref);
    }
    ck_assert_msg(errors[0] > 0.02 && errors[1] < 0.006, "without %g, with %g", errors[0],
                  errors[1]);
    slim_tensor_release(&x);
}
END_TEST

/* x -> MatMul(w) -> Add(b) -> Gelu -> y, int8: the graph passes move the
 * Gelu into MatMulInt8's epilogue (passes/fuse_int8_epilogue.c), which
 * gives the unfused graph's result to the float Gelu's rounding. A Gelu
 * with approximate "tanh" stays a node of its own. */
START_TEST(test_gelu_fused_into_epilogue)
{
    enum { M = 7, K = 48, N = 80 };
    slim_tensor x = tu_xinput(&rng_state, 11, 2, (int64_t[]){M, K});
    slim_tensor ys[2];
    for (int fuse = 0; fuse < 3; fuse++) {
        slim_graph *g = slim_graph_new();
        g->opset = 20;
        slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                            (const char *[]){"h"});
        slim_graph_add_node(g, "add", "Add", "", 2, (const char *[]){"h", "b"}, 1,
                            (const char *[]){"z"});
        int gl = slim_graph_add_node(g, "gelu", "Gelu", "", 1, (const char *[]){"z"}, 1,
                                     (const char *[]){"y"});
        for (int i = 0; i < g->n_nodes; i++)
            g->nodes[i].opset = 20;
        if (fuse == 2)
            tu_attr_s(&g->nodes[gl], "approximate", "tanh");
        rng_state = 12;
        tu_xinit(g, &rng_state, "w", 2, (int64_t[]){K, N}, 0.3f);
        tu_xinit(g, &rng_state, "b", 1, (int64_t[]){N}, 0.1f);
        tu_set_io(g, "x", SLIM_F32, "y");
        slim_err err;
        slim_int8_report rep;
        slim_int8_opts o = {0};
        ck_assert_int_eq(slim_quant_int8(g, &o, &rep, &err), SLIM_OK);
        slim_int8_report_free(&rep);
        if (fuse)
            ck_assert_int_eq(slim_passes_run(g, &err), SLIM_OK);
        int want_nodes = fuse == 1 ? 1 : 2;
        ck_assert_int_eq(g->n_nodes, want_nodes);
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
        ck_assert_str_eq(slim_attr_str(&g->nodes[0], "activation", ""), fuse == 1 ? "Gelu" : "");
        if (fuse == 2) {
            slim_graph_free(g);
            continue;
        }
        ys[fuse] = tu_run1(g, "x", x, SLIM_OK, &err);
    }
    tu_assert_close_max(&ys[1], &ys[0], 1e-5);
    slim_tensor_release(&ys[0]);
    slim_tensor_release(&ys[1]);
    slim_tensor_release(&x);
}
END_TEST

int main(void)
{
    slim_init();
    /* These tests hold the single int8 weight (bytes, inputs, errors); the
     * second weight of SLIM_INT8_RESIDUAL has its own (test_int8_res.c). */
    setenv("SLIM_INT8_RESIDUAL", "off", 1);
    Suite *s = suite_create("int8_pass");
    TCase *tp = tcase_create("pass");
    tcase_add_test(tp, test_pass_fuses_and_matches_fp32);
    tcase_add_test(tp, test_pass_exclude_by_name_and_type);
    tcase_add_test(tp, test_gather_int8);
    tcase_add_test(tp, test_scale_half_or_float);
    tcase_add_test(tp, test_malformed_node_refused);
    tcase_add_test(tp, test_pass_max_error);
    tcase_add_test(tp, test_outlier_channels_split);
    tcase_add_test(tp, test_gelu_fused_into_epilogue);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
