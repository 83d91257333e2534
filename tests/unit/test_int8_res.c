/* test_int8_res.c - what the int8 product adds to its weight's codes for
 * their rounding error: a second int8 weight (kernels/cpu/qgemm_res.c,
 * MatMulInt8 inputs 8-10, SLIM_INT8_RESIDUAL) and each channel's largest
 * entries as sparse float32 (qgemm.c's epilogue, inputs 11-12,
 * SLIM_INT8_SPARSE), and the int8 pass that gives them (quant/int8.c).
 * The residual tests run with SLIM_INT8_SPARSE=0 (their layouts without
 * the sparse entries). */
#include "testutil.h"

#include "int8.h"
#include "qgemm.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345;

static void fill_codes(int8_t *w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = (int8_t)((int)(tu_rndf(&rng) * 127.0f));
}

typedef struct {
    int8_t *packed;
    int32_t *colsum;
    float *scale;
} pw;

static pw pack_random(int64_t n, int64_t k, float smax)
{
    pw p;
    int8_t *w = malloc((size_t)(n * k));
    fill_codes(w, n * k);
    ck_assert_int_eq(posix_memalign((void **)&p.packed, 64, slim_qgemm_packed_bytes(n, k)), 0);
    p.colsum = malloc(sizeof(int32_t) * (size_t)n);
    p.scale = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++)
        p.scale[j] = smax * (0.1f + fabsf(tu_rndf(&rng)));
    slim_qgemm_pack(w, n, k, p.packed, p.colsum);
    free(w);
    return p;
}

static void pw_free(pw *p)
{
    free(p->packed);
    free(p->colsum);
    free(p->scale);
}

/* y = act(main + residual), where main is slim_qgemm with bias and outlier
 * channels and no activation, residual slim_qgemm with the second weight
 * alone: the same bits on every path, and each row alone gives the bits
 * it gives in the whole batch (40 rows: AMX tiles where the CPU has them;
 * one row: the VNNI loops). */
START_TEST(test_res_is_sum_of_products_and_rows_independent)
{
    enum { M = 40, N = 80, K = 200, NO = 3 };
    static const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
    static const slim_qgemm_act acts[] = {SLIM_QGEMM_ACT_NONE, SLIM_QGEMM_ACT_RELU,
                                          SLIM_QGEMM_ACT_GELU};
    float *x = malloc(sizeof(float) * M * K);
    for (int i = 0; i < M * K; i++)
        x[i] = tu_rndf(&rng) * 3.0f + (i % K == 7 ? 40.0f : 0.0f);
    pw a = pack_random(N, K, 0.01f), r = pack_random(N, K, 0.0001f);
    float bias[N], os[N];
    int8_t oq[NO * N];
    int64_t oidx[NO] = {3, 50, 199};
    for (int j = 0; j < N; j++) {
        bias[j] = tu_rndf(&rng);
        os[j] = 0.02f * fabsf(tu_rndf(&rng));
    }
    fill_codes(oq, NO * N);
    float *y = malloc(sizeof(float) * M * N), *want = malloc(sizeof(float) * M * N);
    float *t = malloc(sizeof(float) * M * N), *first = malloc(sizeof(float) * M * N);
    void *scratch;
    ck_assert_int_eq(posix_memalign(&scratch, 64, slim_qgemm_res_scratch_bytes(M, N, K)), 0);
    ck_assert_uint_ge(slim_qgemm_res_scratch_bytes(M, N, K),
                      slim_qgemm_scratch_bytes(M, K) + sizeof(float) * M * N);
    for (int ia = 0; ia < 3; ia++) {
        bool have_first = false;
        for (int ii = 0; ii < 3; ii++) {
            if (!slim_qgemm_set_isa(isas[ii]))
                continue;
            slim_qgemm_args g = {.m = M, .n = N, .k = K, .x = x, .ldx = K, .packed = a.packed,
                                 .colsum = a.colsum, .w_scale = a.scale, .bias = bias,
                                 .act = acts[ia], .y = y, .ldy = N, .n_outl = NO,
                                 .outl_idx = oidx, .outl_q = oq, .outl_scale = os};
            slim_qgemm_res(&g, r.packed, r.colsum, r.scale, scratch);
            /* The definition, from two ordinary products. */
            slim_qgemm_args m1 = g, m2 = g;
            m1.act = SLIM_QGEMM_ACT_NONE;
            m1.y = want;
            slim_qgemm(&m1, scratch);
            m2.packed = r.packed, m2.colsum = r.colsum, m2.w_scale = r.scale;
            m2.bias = NULL, m2.n_outl = 0, m2.act = SLIM_QGEMM_ACT_NONE, m2.y = t;
            slim_qgemm(&m2, scratch);
            int differ = 0;
            for (int i = 0; i < M * N; i++) {
                float v = want[i] + t[i];
                v = acts[ia] == SLIM_QGEMM_ACT_RELU ? (v > 0 ? v : 0.0f)
                    : acts[ia] == SLIM_QGEMM_ACT_GELU ? slim_qgemm_gelu(v) : v;
                differ += memcmp(&v, &y[i], sizeof(float)) != 0;
            }
            ck_assert_msg(differ == 0, "isa %d act %d: %d outputs differ from the two products",
                          ii, ia, differ);
            /* The residual changes the result (it is not dropped). */
            ck_assert(memcmp(want, t, sizeof(float)) != 0);
            if (!have_first) {
                memcpy(first, y, sizeof(float) * M * N);
                have_first = true;
            } else {
                ck_assert_msg(memcmp(first, y, sizeof(float) * M * N) == 0,
                              "isa %d differs from the C path", ii);
            }
            /* Rows alone: bitwise the batch's. */
            for (int i = 0; i < M; i += 13) {
                float row[N];
                slim_qgemm_args one = g;
                one.m = 1, one.x = x + i * K, one.y = row;
                slim_qgemm_res(&one, r.packed, r.colsum, r.scale, scratch);
                ck_assert_msg(memcmp(row, y + i * N, sizeof(row)) == 0,
                              "isa %d act %d: row %d alone differs", ii, ia, i);
            }
        }
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    free(scratch);
    free(x), free(y), free(want), free(t), free(first);
    pw_free(&a);
    pw_free(&r);
}
END_TEST

/* x[*, K] -> MatMul(w[K, N]) -> y, w heavy-tailed (Student-t with 3
 * degrees of freedom, as bench/gen_encoder.py draws trained-like weights)
 * with one input channel scaled 8x (an outlier channel). */
static slim_graph *heavy_matmul(int64_t k, int64_t n)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 17;
    uint32_t wr = 77;
    float *w = malloc(sizeof(float) * (size_t)(k * n));
    for (int64_t i = 0; i < k * n; i++) {
        /* t3 = z / sqrt(chi2_3 / 3), from uniform draws (Box-Muller). */
        float z[4];
        for (int c = 0; c < 4; c++) {
            float u1 = 0.5f * (tu_rndf(&wr) + 1.0f) + 1e-7f, u2 = tu_rndf(&wr);
            z[c] = sqrtf(-2.0f * logf(u1)) * cosf(3.14159265f * u2);
        }
        float chi = (z[1] * z[1] + z[2] * z[2] + z[3] * z[3]) / 3.0f;
        w[i] = z[0] / sqrtf(chi + 1e-6f) / sqrtf(3.0f * (float)k);
        if (i / n == 5)
            w[i] *= 8.0f;
    }
    int v = slim_graph_value(g, "w");
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(2, (int64_t[]){k, n}, w);
    free(w);
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

static double rel_err(const slim_tensor *a, const slim_tensor *ref)
{
    double e = 0, r = 0;
    for (int64_t i = 0; i < slim_tensor_numel(ref); i++) {
        double d = ((const float *)a->data)[i] - ((const float *)ref->data)[i];
        e += d * d;
        r += (double)((const float *)ref->data)[i] * ((const float *)ref->data)[i];
    }
    return sqrt(e / r);
}

static slim_tensor run_graph(slim_graph *g, slim_tensor x, slim_err *err)
{
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, err) == SLIM_OK, "%s", err->msg);
    slim_tensor *out = NULL;
    int n_out;
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, err) == SLIM_OK,
                  "%s", err->msg);
    slim_tensor y = out[0];
    free(out);
    slim_model_free(m);
    return y;
}

/* By default the square products take the second weight (not the down, K
 * >= 2 N, or up, N >= 2 K, ones): 11 inputs, the weight error (both
 * weights together) and the output error far below the single weight's,
 * the residual's bytes counted; SLIM_INT8_RESIDUAL=off gives the single
 * weight, a list of kinds those kinds, all every product. */
START_TEST(test_pass_gives_residual_by_shape)
{
    enum { M = 6 };
    static const struct {
        int64_t k, n;
        const char *env;
        bool res;
    } cases[] = {
        {256, 64, "down", true}, {128, 128, NULL, false}, {128, 128, "square", true},
        {64, 256, NULL, false},
        {256, 64, "off", false}, {64, 256, "up", true},  {64, 256, "all", true},
        {128, 128, "down", false}, {256, 64, NULL, false}, {128, 128, "down,square", true},
    };
    double werr_off = 0, werr_res = 0, yerr_off = 0, yerr_res = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t k = cases[c].k, n = cases[c].n;
        if (cases[c].env)
            setenv("SLIM_INT8_RESIDUAL", cases[c].env, 1);
        else
            unsetenv("SLIM_INT8_RESIDUAL");
        float *xv = malloc(sizeof(float) * (size_t)(M * k));
        for (int64_t i = 0; i < M * k; i++)
            xv[i] = tu_rndf(&rng) * 2.0f;
        slim_tensor x = tu_f32(2, (int64_t[]){M, k}, xv);
        free(xv);
        slim_err err;
        slim_tensor ref = run_graph(heavy_matmul(k, n), x, &err);
        slim_graph *g = heavy_matmul(k, n);
        slim_int8_report rep;
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        ck_assert(rep.layers[0].quantized);
        ck_assert_int_eq(rep.layers[0].n_outliers, 1);
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
        ck_assert_int_eq(g->nodes[0].n_in, cases[c].res ? 11 : 8);
        size_t one = slim_qgemm_packed_bytes(n, k) + (size_t)n * (4 + 2) + (size_t)n + 4 * n + 8;
        ck_assert_uint_eq(rep.layers[0].bytes_after,
                          one + (cases[c].res ? slim_qgemm_packed_bytes(n, k) + 8 * n : 0));
        double werr = rep.layers[0].weight_error;
        slim_int8_report_free(&rep);
        slim_tensor y = run_graph(g, x, &err);
        double yerr = rel_err(&y, &ref);
        if (c == 0)
            werr_res = werr, yerr_res = yerr;
        if (c == 3)
            werr_off = werr, yerr_off = yerr;
        slim_tensor_release(&y);
        slim_tensor_release(&ref);
        slim_tensor_release(&x);
    }
    unsetenv("SLIM_INT8_RESIDUAL");
    /* The same layer (K 256, N 64) with and without. */
    ck_assert_msg(werr_off > 0.005 && werr_res < werr_off / 20, "weight error %g -> %g",
                  werr_off, werr_res);
    ck_assert_msg(yerr_res < yerr_off / 1.5, "output error %g -> %g", yerr_off, yerr_res);
}
END_TEST

/* Q, K and V merged into one [K, 3 K] MatMul and a Split
 * (passes/merge_qkv.c) are square products, not an "up" one: the merged
 * product takes the second weight under "square"; without the Split the same
 * [K, 3 K] weight does not. */
START_TEST(test_merged_qkv_counts_as_square)
{
    enum { K = 64 };
    setenv("SLIM_INT8_RESIDUAL", "square", 1);
    for (int split = 0; split < 2; split++) {
        slim_graph *g = heavy_matmul(K, 3 * K);
        if (split) {
            slim_graph_add_node(g, "sp", "Split", "", 1, (const char *[]){"y"}, 3,
                                (const char *[]){"q", "k", "v"});
            g->nodes[1].opset = 17;
            tu_attr_i(&g->nodes[1], "axis", 1);
            g->n_outputs = 0;
            g->values[slim_graph_find_value(g, "y")].is_output = false;
            slim_graph_add_output(g, slim_graph_find_value(g, "q"));
            slim_graph_add_output(g, slim_graph_find_value(g, "k"));
            slim_graph_add_output(g, slim_graph_find_value(g, "v"));
        }
        slim_err err;
        slim_int8_report rep;
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        slim_int8_report_free(&rep);
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulInt8");
        ck_assert_int_eq(g->nodes[0].n_in, split ? 11 : 8);
        slim_graph_free(g);
    }
}
END_TEST

/* A residual whose parts do not match is refused with a message naming it. */
START_TEST(test_bad_residual_refused)
{
    enum { K = 96, N = 96 };
    setenv("SLIM_INT8_RESIDUAL", "square", 1);
    float xv[2 * K];
    for (int i = 0; i < 2 * K; i++)
        xv[i] = tu_rndf(&rng);
    for (int bad = 0; bad < 2; bad++) {
        slim_graph *g = heavy_matmul(K, N);
        slim_err err;
        slim_int8_report rep;
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        slim_int8_report_free(&rep);
        ck_assert_int_eq(g->nodes[0].n_in, 11);
        slim_tensor *t = &g->values[g->nodes[0].in[bad ? 8 : 9]].init;
        t->dims[0] -= 1; /* a shorter residual_scale, or a packed weight missing a row */
        slim_tensor x = tu_f32(2, (int64_t[]){2, K}, xv);
        slim_model *m;
        slim_status st = slim_model_from_graph(g, &m, &err);
        if (st == SLIM_OK) {
            slim_tensor *out = NULL;
            int n_out;
            st = slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err);
            ck_assert_ptr_null(out);
            slim_model_free(m);
        } /* else slim_model_from_graph freed g */
        ck_assert_int_ne(st, SLIM_OK);
        ck_assert_msg(strstr(err.msg, bad ? "residual_weight" : "residual_scale") != NULL,
                      "message: %s", err.msg);
        slim_tensor_release(&x);
    }
}
END_TEST

/* The sparse entries: y = act(product with bias and outlier channels + the
 * chain of fused multiply-adds over the entries), the same bits on every
 * path (40 rows: AMX tiles; N 78: a narrow panel and a channel tail
 * too; K 300: a tail of the rows' transpose), each row alone its
 * batch's bits; a NaN in a row reaches only that row. */
START_TEST(test_sparse_is_added_and_rows_independent)
{
    enum { M = 40, N = 78, K = 300, NO = 2, T = 3 };
    static const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
    static const slim_qgemm_act acts[] = {SLIM_QGEMM_ACT_NONE, SLIM_QGEMM_ACT_RELU,
                                          SLIM_QGEMM_ACT_GELU};
    float *x = malloc(sizeof(float) * M * K);
    for (int i = 0; i < M * K; i++)
        x[i] = tu_rndf(&rng) * 3.0f;
    x[17 * K + 5] = NAN; /* row 17 */
    pw a = pack_random(N, K, 0.01f);
    float bias[N], os[N], sv[T * N];
    int8_t oq[NO * N];
    int64_t oidx[NO] = {0, 299};
    int32_t si[T * N];
    for (int j = 0; j < N; j++) {
        bias[j] = tu_rndf(&rng);
        os[j] = 0.02f * fabsf(tu_rndf(&rng));
    }
    for (int e = 0; e < T * N; e++) {
        si[e] = (int32_t)((e * 37 + 11) % K);
        sv[e] = e % 7 == 0 ? 0.0f : tu_rndf(&rng); /* some padding entries */
    }
    fill_codes(oq, NO * N);
    float *y = malloc(sizeof(float) * M * N), *plain = malloc(sizeof(float) * M * N);
    float *first = malloc(sizeof(float) * M * N);
    void *scratch;
    ck_assert_int_eq(posix_memalign(&scratch, 64, slim_qgemm_scratch_bytes(M, K)), 0);
    for (int ia = 0; ia < 3; ia++) {
        bool have_first = false;
        for (int ii = 0; ii < 3; ii++) {
            if (!slim_qgemm_set_isa(isas[ii]))
                continue;
            slim_qgemm_args g = {.m = M, .n = N, .k = K, .x = x, .ldx = K, .packed = a.packed,
                                 .colsum = a.colsum, .w_scale = a.scale, .bias = bias,
                                 .act = acts[ia], .y = y, .ldy = N, .n_outl = NO,
                                 .outl_idx = oidx, .outl_q = oq, .outl_scale = os,
                                 .n_sp = T, .sp_idx = si, .sp_val = sv};
            slim_qgemm(&g, scratch);
            /* The definition: the product without them, then the chain. */
            slim_qgemm_args p0 = g;
            p0.n_sp = 0, p0.act = SLIM_QGEMM_ACT_NONE, p0.y = plain;
            slim_qgemm(&p0, scratch);
            int differ = 0, moved = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float acc = 0.0f;
                    for (int t = 0; t < T; t++)
                        acc = fmaf(x[i * K + si[t * N + j]], sv[t * N + j], acc);
                    float v = plain[i * N + j] + acc;
                    moved += acc != 0.0f;
                    v = acts[ia] == SLIM_QGEMM_ACT_RELU ? (v > 0 ? v : 0.0f)
                        : acts[ia] == SLIM_QGEMM_ACT_GELU ? slim_qgemm_gelu(v) : v;
                    differ += memcmp(&v, &y[i * N + j], sizeof(float)) != 0 &&
                              !(isnan(v) && isnan(y[i * N + j]));
                }
            ck_assert_msg(differ == 0, "isa %d act %d: %d outputs differ from the definition",
                          ii, ia, differ);
            ck_assert_int_gt(moved, M * N / 2); /* the entries are not dropped */
            for (int j = 0; j < N; j++) {
                ck_assert(isnan(y[17 * N + j]) || acts[ia] == SLIM_QGEMM_ACT_RELU);
                ck_assert(!isnan(y[16 * N + j]) && !isnan(y[18 * N + j]));
            }
            if (!have_first) {
                memcpy(first, y, sizeof(float) * M * N);
                have_first = true;
            } else {
                ck_assert_msg(memcmp(first, y, sizeof(float) * M * N) == 0,
                              "isa %d differs from the C path", ii);
            }
            for (int i = 0; i < M; i += 13) {
                float row[N];
                slim_qgemm_args one = g;
                one.m = 1, one.x = x + i * K, one.y = row;
                slim_qgemm(&one, scratch);
                ck_assert_msg(memcmp(row, y + i * N, sizeof(row)) == 0,
                              "isa %d act %d: row %d alone differs", ii, ia, i);
            }
        }
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    free(scratch);
    free(x), free(y), free(plain), free(first);
    pw_free(&a);
}
END_TEST

/* SLIM_INT8_SPARSE=V: channels of K >= 256 inputs keep ceil(K V / 1024)
 * entries as sparse float32 (13 inputs, 8 bytes an entry counted), with a
 * lower weight and output error than without; K < 256 keeps none; 0
 * turns it off; kind:V sets one kind of product (slim__int8_kind) over
 * the bare V. With the second weight too, the entries take no part in
 * it (the output error falls further). */
START_TEST(test_pass_gives_sparse_entries)
{
    enum { M = 6 };
    static const struct {
        int64_t k, n;
        const char *sp, *res;
        int t;
    } cases[] = {
        {512, 48, "0", "off", 0}, {512, 48, "8", "off", 4}, {512, 48, "8", "all", 4},
        {512, 48, "0", "all", 0}, {128, 48, "8", "off", 0},
        /* by kind: 512 x 48 is "down", 512 x 512 "square", 256 x 1024 "up" */
        {512, 48, "0,down:8", "off", 4}, {512, 48, "8,down:0", "off", 0},
        {512, 48, "square:8", "off", 0}, {512, 48, "up:0,8", "off", 4},
        {512, 512, "square:8,down:1", "off", 4}, {256, 1024, "up:4,2", "off", 1},
        {1024, 32, "1,down:3", "off", 3},
    };
    double werr[12], yerr[12];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t k = cases[c].k, n = cases[c].n;
        setenv("SLIM_INT8_SPARSE", cases[c].sp, 1);
        setenv("SLIM_INT8_RESIDUAL", cases[c].res, 1);
        uint32_t xr = 99;
        float *xv = malloc(sizeof(float) * (size_t)(M * k));
        for (int64_t i = 0; i < M * k; i++)
            xv[i] = tu_rndf(&xr) * 2.0f;
        slim_tensor x = tu_f32(2, (int64_t[]){M, k}, xv);
        free(xv);
        slim_err err;
        slim_tensor ref = run_graph(heavy_matmul(k, n), x, &err);
        slim_graph *g = heavy_matmul(k, n);
        slim_int8_report rep;
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        bool res = strcmp(cases[c].res, "all") == 0;
        ck_assert_int_eq(g->nodes[0].n_in, cases[c].t ? 13 : res ? 11 : 8);
        if (cases[c].t) {
            const slim_tensor *si = &g->values[g->nodes[0].in[11]].init;
            ck_assert_int_eq(si->dims[0], cases[c].t);
            ck_assert_int_eq(si->dims[1], n);
            for (int64_t e = 0; e < cases[c].t * n; e++)
                ck_assert(((const int32_t *)si->data)[e] >= 0 &&
                          ((const int32_t *)si->data)[e] < k);
        }
        size_t no = (size_t)rep.layers[0].n_outliers;
        ck_assert_uint_ge(no, 1);
        size_t one = slim_qgemm_packed_bytes(n, k) + (size_t)n * (4 + 2) + no * (size_t)n +
                     4 * n + 8 * no;
        ck_assert_uint_eq(rep.layers[0].bytes_after,
                          one + (res ? slim_qgemm_packed_bytes(n, k) + 8 * n : 0) +
                              8 * (size_t)cases[c].t * n);
        werr[c] = rep.layers[0].weight_error;
        slim_int8_report_free(&rep);
        slim_tensor y = run_graph(g, x, &err);
        yerr[c] = rel_err(&y, &ref);
        slim_tensor_release(&y);
        slim_tensor_release(&ref);
        slim_tensor_release(&x);
    }
    unsetenv("SLIM_INT8_RESIDUAL");
    setenv("SLIM_INT8_SPARSE", "0", 1);
    ck_assert_msg(werr[1] < werr[0] / 1.5, "weight error %g -> %g", werr[0], werr[1]);
    ck_assert_msg(yerr[1] < yerr[0] / 1.2, "output error %g -> %g", yerr[0], yerr[1]);
    ck_assert_msg(yerr[2] < yerr[1] && yerr[2] <= yerr[3] * 1.05,
                  "with the second weight: %g (sparse), %g (without)", yerr[2], yerr[3]);
}
END_TEST

/* A SLIM_INT8_SPARSE that is not a list of V and kind:V is refused at
 * convert with a message naming the variable, whatever the layer's kind. */
START_TEST(test_bad_sparse_spec_refused)
{
    static const char *const bad[] = {"x", "-1", "2;3", "2,sideways:3", "down:", "down:2x", ","};
    setenv("SLIM_INT8_RESIDUAL", "off", 1);
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        setenv("SLIM_INT8_SPARSE", bad[b], 1);
        slim_graph *g = heavy_matmul(512, 48);
        slim_err err = {0};
        slim_int8_report rep;
        slim_status st = slim_quant_int8(g, NULL, &rep, &err);
        ck_assert_msg(st != SLIM_OK, "spec '%s' accepted", bad[b]);
        ck_assert_msg(strstr(err.msg, "SLIM_INT8_SPARSE") != NULL, "'%s': %s", bad[b], err.msg);
        slim_int8_report_free(&rep);
        slim_graph_free(g);
    }
    setenv("SLIM_INT8_SPARSE", "0", 1);
    unsetenv("SLIM_INT8_RESIDUAL");
}
END_TEST

/* Sparse entries that do not fit are refused with a message naming them:
 * an index outside [0, K), or a value tensor of another shape. */
START_TEST(test_bad_sparse_refused)
{
    enum { K = 512, N = 32 };
    setenv("SLIM_INT8_SPARSE", "4", 1);
    setenv("SLIM_INT8_RESIDUAL", "off", 1);
    float xv[2 * K];
    for (int i = 0; i < 2 * K; i++)
        xv[i] = tu_rndf(&rng);
    for (int bad = 0; bad < 2; bad++) {
        slim_graph *g = heavy_matmul(K, N);
        slim_err err;
        slim_int8_report rep;
        ck_assert_int_eq(slim_quant_int8(g, NULL, &rep, &err), SLIM_OK);
        slim_int8_report_free(&rep);
        ck_assert_int_eq(g->nodes[0].n_in, 13);
        if (bad)
            ((int32_t *)g->values[g->nodes[0].in[11]].init.data)[5] = K;
        else
            g->values[g->nodes[0].in[12]].init.dims[1] -= 1;
        slim_tensor x = tu_f32(2, (int64_t[]){2, K}, xv);
        slim_model *m;
        slim_status st = slim_model_from_graph(g, &m, &err);
        if (st == SLIM_OK) {
            slim_tensor *out = NULL;
            int n_out;
            st = slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err);
            ck_assert_ptr_null(out);
            slim_model_free(m);
        }
        ck_assert_int_ne(st, SLIM_OK);
        ck_assert_msg(strstr(err.msg, "sparse_") != NULL, "message: %s", err.msg);
        slim_tensor_release(&x);
    }
    setenv("SLIM_INT8_SPARSE", "0", 1);
    unsetenv("SLIM_INT8_RESIDUAL");
}
END_TEST

int main(void)
{
    slim_init();
    setenv("SLIM_INT8_SPARSE", "0", 1);
    Suite *s = suite_create("int8_res");
    TCase *tc = tcase_create("residual");
    tcase_add_test(tc, test_sparse_is_added_and_rows_independent);
    tcase_add_test(tc, test_pass_gives_sparse_entries);
    tcase_add_test(tc, test_bad_sparse_refused);
    tcase_add_test(tc, test_bad_sparse_spec_refused);
    tcase_add_test(tc, test_res_is_sum_of_products_and_rows_independent);
    tcase_add_test(tc, test_pass_gives_residual_by_shape);
    tcase_add_test(tc, test_merged_qkv_counts_as_square);
    tcase_add_test(tc, test_bad_residual_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
