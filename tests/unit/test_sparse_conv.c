/* test_sparse_conv.c - sparse convolutions (kernels/cpu/sparse_conv.c)
 * against the dense Conv kernel on odd shapes (strides, pads, dilations,
 * groups, 1x1 and kxk, tiny channel counts, csr and 2:4), the AVX-512 path
 * against the C path bit for bit, batch independence bit for bit, forged
 * SparseConv nodes refused. The pruning pass's tests are in
 * test_sparse_prune.c. */
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

typedef struct {
    int64_t n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group;
    bool two4;
    double density;
} shape;

typedef struct {
    shape s;
    int64_t k, oh, ow;
    float *wt, *bias, *x, *res;
    float *vals;
    int8_t *codes;  /* kase_to_int8: the values as int8, per-channel scales */
    float *scale;
    void *idx;
    int32_t *rp;
    uint8_t *nib;
    slim_sparse_conv conv;
} kase;

static void kase_make(kase *t, const shape *s, bool with_res, int act)
{
    memset(t, 0, sizeof(*t));
    t->s = *s;
    t->k = s->c / s->group * s->kh * s->kw;
    t->oh = (s->h + s->pt + s->pb - (s->dh * (s->kh - 1) + 1)) / s->sh + 1;
    t->ow = (s->w + s->pl + s->pr - (s->dw * (s->kw - 1) + 1)) / s->sw + 1;
    int64_t nw = s->m * t->k, nx = s->n * s->c * s->h * s->w;
    int64_t ny = s->n * s->m * t->oh * t->ow;
    t->wt = malloc(sizeof(float) * (size_t)nw);
    t->bias = malloc(sizeof(float) * (size_t)s->m);
    t->x = malloc(sizeof(float) * (size_t)nx);
    t->res = with_res ? malloc(sizeof(float) * (size_t)ny) : NULL;
    for (int64_t i = 0; i < nw; i++)
        t->wt[i] = rndf();
    if (s->two4)
        slim_prune_24(t->wt, s->m, t->k, true);
    else
        for (int64_t i = 0; i < nw; i++)
            if ((rndf() + 1) / 2 >= s->density)
                t->wt[i] = 0.0f;
    for (int64_t i = 0; i < s->m; i++)
        t->bias[i] = rndf();
    for (int64_t i = 0; i < nx; i++)
        t->x[i] = rndf();
    for (int64_t i = 0; with_res && i < ny; i++)
        t->res[i] = rndf();
    slim_sparse_w *w = &t->conv.w;
    w->n = s->m;
    w->k = t->k;
    w->vdtype = SLIM_F32;
    w->bias = t->bias;
    if (s->two4) {
        int64_t g = slim_sparse_24_groups(t->k);
        t->vals = malloc(sizeof(float) * (size_t)(s->m * 2 * g));
        t->nib = malloc((size_t)(s->m * slim_sparse_24_idx_bytes(t->k)));
        ck_assert(slim_sparse_24_encode(t->wt, s->m, t->k, true, 1.0f, t->vals, t->nib));
        w->enc = SLIM_SPARSE_24;
        w->idx = t->nib;
        w->idtype = SLIM_U8;
    } else {
        int64_t nnz = slim_sparse_count_nnz(t->wt, s->m, t->k, true);
        t->vals = malloc(sizeof(float) * (size_t)(nnz + 1));
        t->idx = malloc(2 * (size_t)(nnz + 1));
        t->rp = malloc(sizeof(int32_t) * (size_t)(s->m + 1));
        slim_sparse_csr_encode(t->wt, s->m, t->k, true, 1.0f, t->vals, t->idx, t->rp);
        w->enc = SLIM_SPARSE_CSR;
        w->idx = t->idx;
        w->idtype = SLIM_U16;
        w->rowptr = t->rp;
    }
    w->values = t->vals;
    slim_sparse_conv *c = &t->conv;
    c->c = s->c;
    c->h = s->h;
    c->wd = s->w;
    c->kh = s->kh;
    c->kw = s->kw;
    c->sh = s->sh;
    c->sw = s->sw;
    c->dh = s->dh;
    c->dw = s->dw;
    c->pt = s->pt;
    c->pl = s->pl;
    c->oh = t->oh;
    c->ow = t->ow;
    c->group = s->group;
    c->act = act;
    c->lo = -0.5f;
    c->hi = 0.7f;
}

static void kase_free(kase *t)
{
    free(t->wt);
    free(t->bias);
    free(t->x);
    free(t->res);
    free(t->vals);
    free(t->idx);
    free(t->rp);
    free(t->nib);
    free(t->codes);
    free(t->scale);
}

/* Channel j's stored values: [*b, *e). */
static void kase_span(const kase *t, int64_t j, int64_t *b, int64_t *e)
{
    if (t->s.two4) {
        int64_t per = 2 * slim_sparse_24_groups(t->k);
        *b = j * per;
        *e = *b + per;
    } else {
        *b = t->rp[j];
        *e = t->rp[j + 1];
    }
}

/* The stored values quantized to int8 per output channel (max |v| / 127),
 * as quant/int8_sparse.c does; with deq the float values become their
 * dequantized codes, so that the float kernel computes the same products
 * (up to where the scale is applied). */
static void kase_to_int8(kase *t, bool deq)
{
    int64_t b, e;
    kase_span(t, t->s.m - 1, &b, &e);
    t->codes = malloc((size_t)e + 1);
    t->scale = malloc(sizeof(float) * (size_t)t->s.m);
    for (int64_t j = 0; j < t->s.m; j++) {
        kase_span(t, j, &b, &e);
        float mx = 0;
        for (int64_t q = b; q < e; q++)
            mx = fabsf(t->vals[q]) > mx ? fabsf(t->vals[q]) : mx;
        t->scale[j] = mx > 0 ? mx / 127.0f : 1.0f;
        for (int64_t q = b; q < e; q++) {
            t->codes[q] = (int8_t)nearbyintf(t->vals[q] / t->scale[j]);
            if (deq)
                t->vals[q] = (float)t->codes[q] * t->scale[j];
        }
    }
}

/* t's conv as int8 (codes and scales) instead of float values. */
static slim_sparse_conv kase_int8_conv(const kase *t)
{
    slim_sparse_conv c = t->conv;
    c.w.vdtype = SLIM_I8;
    c.w.values = t->codes;
    c.w.scale = t->scale;
    return c;
}

static float *run_conv(const kase *t, const slim_sparse_conv *c, slim_sparse_isa isa, int64_t n,
                       const float *x, const float *res)
{
    ck_assert(slim_sparse_set_isa(isa));
    float *y = malloc(sizeof(float) * (size_t)(n * t->s.m * t->oh * t->ow) + 4);
    slim_err err;
    ck_assert_msg(slim_sparse_conv_run(c, n, x, res, y, &err) == SLIM_OK, "%s", err.msg);
    slim_sparse_set_isa(SLIM_SPARSE_ISA_AUTO);
    return y;
}

static float *run_sparse(const kase *t, slim_sparse_isa isa, int64_t n, const float *x,
                         const float *res)
{
    return run_conv(t, &t->conv, isa, n, x, res);
}

/* The dense Conv node on the pruned weight, then + res and Relu. */
static slim_tensor run_dense(const kase *t)
{
    const shape *s = &t->s;
    slim_graph *g = tu_graph("Conv", 17, 3, (const char *[]){"x", "w", "b"}, 1);
    slim_node *n = tu_node0(g);
    tu_attr_ints(n, "strides", 2, (int64_t[]){s->sh, s->sw});
    tu_attr_ints(n, "dilations", 2, (int64_t[]){s->dh, s->dw});
    tu_attr_ints(n, "pads", 4, (int64_t[]){s->pt, s->pl, s->pb, s->pr});
    tu_attr_i(n, "group", s->group);
    slim_tensor in[3] = {
        tu_f32(4, (int64_t[]){s->n, s->c, s->h, s->w}, t->x),
        tu_f32(4, (int64_t[]){s->m, s->c / s->group, s->kh, s->kw}, t->wt),
        tu_f32(1, (int64_t[]){s->m}, t->bias),
    };
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_msg(tu_run(g, in, 3, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_free_inputs(in, 3);
    slim_tensor y = out[0];
    free(out);
    return y;
}

static const shape shapes[] = {
    /* n  c   h   w   m  kh kw sh sw dh dw pt pl pb pr g  2:4   density */
    {1, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.3},
    {2, 1, 7, 7, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, false, 0.5},
    {1, 2, 13, 10, 33, 5, 3, 2, 1, 2, 1, 2, 1, 2, 1, 1, false, 0.2},
    {2, 16, 8, 8, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, 0.1},
    {1, 16, 9, 9, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, true, 0},   /* 81 px: a tail */
    {1, 12, 10, 9, 18, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 3, false, 0.3},
    {1, 12, 10, 9, 18, 3, 3, 2, 2, 1, 1, 1, 0, 0, 1, 3, true, 0},
    {1, 3, 17, 19, 7, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, true, 0},   /* K = 147 */
    {3, 5, 6, 5, 19, 2, 3, 1, 2, 1, 1, 0, 1, 1, 0, 1, true, 0},    /* K = 30, tail group */
    {1, 8, 12, 12, 16, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 2, false, 0.4}, /* 1x1 stride 2 */
    {1, 64, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.1}, /* 49 px, chunks */
    /* 1x1 convs whose planes are as wide as the output: each block's
     * epilogue one run across rows (odd M, tails, strides, pads) */
    {2, 24, 7, 7, 21, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, 0.15}, /* 49 px, one run */
    {1, 10, 20, 17, 11, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, 0.2}, /* 340 px, tail */
    {1, 6, 15, 13, 9, 1, 1, 2, 3, 1, 1, 0, 0, 0, 0, 1, false, 0.4},   /* 8 x 5, stride 2, 3 */
    {2, 4, 6, 7, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.5},     /* pads: 8 x 9 */
    {1, 9, 11, 11, 13, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, true, 0},     /* 2:4, 6 x 6 */
    /* 1x1 with K past KC1 (128): chunks of 128, a tail tile of them */
    {2, 200, 9, 10, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, 0.1},  /* 90 px */
    {1, 300, 10, 10, 5, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, false, 0.1}, /* stride 2 */
    {1, 260, 5, 6, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, true, 0},      /* 30 px, 2:4 */
    /* kxk stride 1 past PB wide pixels: blocks of PB_WIDE (128), a tail */
    {2, 4, 20, 20, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.2},   /* 20 x 22: 440 */
    {1, 40, 12, 15, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.1},  /* K 360: 2 chunks */
    /* stride-2 planes wide enough for the 16-wide copy (copy_every2_avx512)
     * and its tail: 23 columns (3x3, pads 1), 20 (1x1), 39 (7x7, pads 3) */
    {1, 3, 9, 45, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, false, 0.4},    /* 5 x 23 */
    {2, 5, 6, 40, 7, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, false, 0.3},    /* 3 x 20 */
    {1, 3, 11, 77, 6, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, false, 0.2},   /* 6 x 39 */
    /* small planes: 8 x 8 with dilation 2 and groups, 7 x 7 with K past KC */
    {1, 6, 9, 8, 10, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2, false, 0.4},    /* 8 x 8 */
    {2, 40, 7, 7, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, 0.2},   /* 7 x 7, K 360 */
};

static bool have_avx512(void)
{
    bool ok = slim_sparse_set_isa(SLIM_SPARSE_ISA_AVX512);
    slim_sparse_set_isa(SLIM_SPARSE_ISA_AUTO);
    return ok;
}

START_TEST(test_conv_matches_dense_kernel)
{
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int variant = 0; variant < 3; variant++) { /* none; res + Relu; Clip */
            kase t;
            kase_make(&t, &shapes[i], variant == 1, variant);
            slim_tensor d = run_dense(&t);
            int64_t ny = t.s.n * t.s.m * t.oh * t.ow;
            ck_assert_int_eq(slim_tensor_numel(&d), ny);
            float *e = d.data;
            for (int64_t j = 0; j < ny; j++) {
                float v = e[j] + (t.res ? t.res[j] : 0.0f);
                e[j] = variant == 1   ? (v > 0 ? v : 0)
                       : variant == 2 ? fminf(fmaxf(v, -0.5f), 0.7f)
                                      : v;
            }
            float *yc = run_sparse(&t, SLIM_SPARSE_ISA_C, t.s.n, t.x, t.res);
            for (int64_t j = 0; j < ny; j++)
                ck_assert_msg(fabsf(yc[j] - e[j]) <= 1e-4f * (1 + fabsf(e[j])),
                              "shape %zu variant %d: y[%lld] = %g, dense %g", i, variant,
                              (long long)j, yc[j], e[j]);
            if (have_avx512()) {
                float *ya = run_sparse(&t, SLIM_SPARSE_ISA_AVX512, t.s.n, t.x, t.res);
                ck_assert_msg(memcmp(ya, yc, sizeof(float) * (size_t)ny) == 0,
                              "shape %zu: AVX-512 and C differ", i);
                free(ya);
            }
            free(yc);
            slim_tensor_release(&d);
            kase_free(&t);
        }
}
END_TEST

START_TEST(test_conv_image_independent_of_batch)
{
    static const int which[] = {0, 4, 7, 10, 19, 20};
    for (size_t q = 0; q < sizeof(which) / sizeof(which[0]); q++) {
        shape s = shapes[which[q]];
        s.n = 3;
        kase t;
        kase_make(&t, &s, true, 1);
        int64_t xi = s.c * s.h * s.w, yi = s.m * t.oh * t.ow;
        for (int isa = 0; isa < 2; isa++) {
            slim_sparse_isa a = isa ? SLIM_SPARSE_ISA_AVX512 : SLIM_SPARSE_ISA_C;
            if (isa && !have_avx512())
                continue;
            float *all = run_sparse(&t, a, 3, t.x, t.res);
            for (int b = 0; b < 3; b++) {
                float *one = run_sparse(&t, a, 1, t.x + b * xi, t.res + b * yi);
                ck_assert_msg(memcmp(one, all + b * yi, sizeof(float) * (size_t)yi) == 0,
                              "shape %d image %d: alone differs from batch 3", which[q], b);
                free(one);
            }
            free(all);
        }
        kase_free(&t);
    }
}
END_TEST

/* int8 values: against the float kernel on the dequantized values (the
 * same products; only where the scale comes differs: a tight tolerance),
 * against the float kernel on the unquantized values (the quantization
 * error: a loose one), AVX-512 against C bit for bit, and each image alone
 * bit for bit as in a batch of 3. */
START_TEST(test_int8_conv_matches_float)
{
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        shape s = shapes[i];
        s.n = 3;
        kase t;
        kase_make(&t, &s, true, 1);
        int64_t ny = s.n * s.m * t.oh * t.ow, xi = s.c * s.h * s.w, yi = s.m * t.oh * t.ow;
        float *yf = run_sparse(&t, SLIM_SPARSE_ISA_C, s.n, t.x, t.res);
        kase_to_int8(&t, true);
        float *yd = run_sparse(&t, SLIM_SPARSE_ISA_C, s.n, t.x, t.res);
        slim_sparse_conv c8 = kase_int8_conv(&t);
        float *y8 = run_conv(&t, &c8, SLIM_SPARSE_ISA_C, s.n, t.x, t.res);
        double e2 = 0, r2 = 0;
        for (int64_t j = 0; j < ny; j++) {
            ck_assert_msg(fabsf(y8[j] - yd[j]) <= 1e-4f * (1 + fabsf(yd[j])),
                          "shape %zu: int8 y[%lld] = %g, dequantized float %g", i,
                          (long long)j, y8[j], yd[j]);
            e2 += (double)(y8[j] - yf[j]) * (y8[j] - yf[j]);
            r2 += (double)yf[j] * yf[j];
        }
        ck_assert_msg(e2 <= 1e-4 * r2, "shape %zu: int8 vs float relative L2 %g", i,
                      sqrt(e2 / r2));
        for (int isa = 0; isa < 2; isa++) {
            slim_sparse_isa a = isa ? SLIM_SPARSE_ISA_AVX512 : SLIM_SPARSE_ISA_C;
            if (isa && !have_avx512())
                continue;
            float *all = run_conv(&t, &c8, a, s.n, t.x, t.res);
            ck_assert_msg(memcmp(all, y8, sizeof(float) * (size_t)ny) == 0,
                          "shape %zu: int8 AVX-512 and C differ", i);
            for (int b = 0; b < s.n; b++) {
                float *one = run_conv(&t, &c8, a, 1, t.x + b * xi, t.res + b * yi);
                ck_assert_msg(memcmp(one, all + b * yi, sizeof(float) * (size_t)yi) == 0,
                              "shape %zu image %d: int8 alone differs from batch 3", i, b);
                free(one);
            }
            free(all);
        }
        free(yf);
        free(yd);
        free(y8);
        kase_free(&t);
    }
}
END_TEST

/* A SparseConv node as a forged .slim file could hold it: K = 4 (C = 4,
 * 1x1), two output channels. */
static slim_model *forged_q(const int32_t *rp, const uint16_t *ix, const int8_t *codes,
                            const float *scale, slim_err *err)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    int id = slim_graph_add_node(g, "sc", "SparseConv", "com.slimserve", scale ? 7 : 4,
                                 (const char *[]){"x", "v", "i", "r", "", "", "s"}, 1,
                                 (const char *[]){"y"});
    slim_node *n = &g->nodes[id];
    n->opset = 1;
    tu_attr_s(n, "encoding", "csr");
    tu_attr_i(n, "K", 4);
    tu_attr_ints(n, "kernel_shape", 2, (int64_t[]){1, 1});
    int v = slim_graph_find_value(g, "v"), i = slim_graph_find_value(g, "i"),
        r = slim_graph_find_value(g, "r");
    g->values[v].kind = g->values[i].kind = g->values[r].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = codes ? tu_tensor(SLIM_I8, 1, (int64_t[]){3}, codes)
                              : tu_f32(1, (int64_t[]){3}, (float[]){1, 2, 3});
    if (scale) {
        int sv = slim_graph_find_value(g, "s");
        g->values[sv].kind = SLIM_VALUE_INITIALIZER;
        g->values[sv].init = tu_f32(1, (int64_t[]){2}, scale);
    }
    g->values[i].init = tu_tensor(SLIM_U16, 1, (int64_t[]){3}, ix);
    g->values[r].init = tu_tensor(SLIM_I32, 1, (int64_t[]){3}, rp);
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_model *m = NULL;
    ck_assert_msg(slim_model_from_graph(g, &m, err) == SLIM_OK, "%s", err->msg);
    return m;
}

static slim_model *forged(const int32_t *rp, const uint16_t *ix, slim_err *err)
{
    return forged_q(rp, ix, NULL, NULL, err);
}

START_TEST(test_forged_sparse_conv_refused)
{
    slim_err err;
    float xv[4 * 2];
    for (int i = 0; i < 8; i++)
        xv[i] = (float)(i + 1); /* channel c, pixel p: 2c + p + 1 */
    slim_tensor x = tu_f32(4, (int64_t[]){1, 4, 1, 2}, xv), *out;
    int n_out;
    /* Good: y0 = x0 + 2 x3, y1 = 3 x1. */
    slim_model *m = forged((int32_t[]){0, 2, 3}, (uint16_t[]){0, 3, 1}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_OK);
    const float *y = out[0].data;
    ck_assert_float_eq(y[0], 1 + 2 * 7.0f);
    ck_assert_float_eq(y[1], 2 + 2 * 8.0f);
    ck_assert_float_eq(y[2], 3 * 3.0f);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
    /* Row pointers not monotone. */
    m = forged((int32_t[]){0, 3, 2}, (uint16_t[]){0, 3, 1}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"sc\""), "%s", err.msg);
    slim_model_free(m);
    /* A k past K. */
    m = forged((int32_t[]){0, 2, 3}, (uint16_t[]){0, 4, 1}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"sc\"") && strstr(err.msg, "index"), "%s", err.msg);
    slim_model_free(m);
    /* int8: good codes and scales; then a scale that is not finite, and
     * int8 codes with a k past K. */
    m = forged_q((int32_t[]){0, 2, 3}, (uint16_t[]){0, 3, 1}, (int8_t[]){2, 4, 6},
                 (float[]){0.5f, 0.5f}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_OK);
    y = out[0].data;
    ck_assert_float_eq(y[0], 1 + 2 * 7.0f);
    ck_assert_float_eq(y[2], 3 * 3.0f);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
    m = forged_q((int32_t[]){0, 2, 3}, (uint16_t[]){0, 3, 1}, (int8_t[]){2, 4, 6},
                 (float[]){0.5f, NAN}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "finite"), "%s", err.msg);
    slim_model_free(m);
    m = forged_q((int32_t[]){0, 2, 3}, (uint16_t[]){0, 9, 1}, (int8_t[]){2, 4, 6},
                 (float[]){0.5f, 0.5f}, &err);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    slim_model_free(m);
    slim_tensor_release(&x);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("sparse_conv");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_conv_matches_dense_kernel);
    tcase_add_test(tk, test_conv_image_independent_of_batch);
    tcase_add_test(tk, test_forged_sparse_conv_refused);
    tcase_add_test(tk, test_int8_conv_matches_float);
    suite_add_tcase(s, tk);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
