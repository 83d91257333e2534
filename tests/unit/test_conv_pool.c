/* test_conv_pool.c - Conv, ConvTranspose (kernels/cpu/conv.c) and the pools
 * (kernels/cpu/pool.c): hand-computed cases, and random cases checked
 * against direct loops written from the operator definitions. */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill_random(float *v, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static float *iota(int64_t n, float start)
{
    float *v = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        v[i] = start + (float)i;
    return v;
}

/* ---- Conv: hand-computed ------------------------------------------------- */

START_TEST(test_conv_basic_padding)
{
    /* 5x5 ramp, 3x3 ones, pads 1: each output sums its clipped window. */
    slim_graph *g = tu_graph("Conv", 22, 2, (const char *[]){"x", "w"}, 1);
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){1, 1, 1, 1});
    float *x = iota(25, 0), w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 5, 5}, x), tu_f32(4, (int64_t[]){1, 1, 3, 3}, w)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    const float want[25] = {12, 21, 27, 33, 24, 33, 54, 63, 72, 51, 63, 99, 108, 117, 81,
                            93, 144, 153, 162, 111, 72, 111, 117, 123, 84};
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 5, 5});
    tu_assert_close_f32(&out[0], want, 25, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
    free(x);
}
END_TEST

START_TEST(test_conv_strides_bias)
{
    /* 7x5 ramp, 3x3 ones, stride 2, no pads, bias 0.5. */
    slim_graph *g = tu_graph("Conv", 11, 3, (const char *[]){"x", "w", "b"}, 1);
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){2, 2});
    float *x = iota(35, 0), w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, b[1] = {0.5f};
    slim_tensor in[3] = {tu_f32(4, (int64_t[]){1, 1, 7, 5}, x), tu_f32(4, (int64_t[]){1, 1, 3, 3}, w),
                         tu_f32(1, (int64_t[]){1}, b)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 3, &out, &n_out, &err), SLIM_OK);
    const float want[6] = {54.5f, 72.5f, 144.5f, 162.5f, 234.5f, 252.5f};
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 3, 2});
    tu_assert_close_f32(&out[0], want, 6, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
    free(x);
}
END_TEST

START_TEST(test_conv_pointwise)
{
    /* 1x1 conv = per-pixel matrix product: y[m] = sum_c w[m,c] x[c]. */
    slim_graph *g = tu_graph("Conv", 22, 2, (const char *[]){"x", "w"}, 1);
    float x[2 * 3] = {1, 2, 3, 10, 20, 30}; /* C=2, 1x3 image */
    float w[3 * 2] = {1, 0, 0, 1, 1, -1};
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 2, 1, 3}, x), tu_f32(4, (int64_t[]){3, 2, 1, 1}, w)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    const float want[9] = {1, 2, 3, 10, 20, 30, -9, -18, -27};
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 3, 1, 3});
    tu_assert_close_f32(&out[0], want, 9, 1e-6);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
}
END_TEST

START_TEST(test_conv_same_lower_float64)
{
    /* 1-D, kernel 2, SAME_LOWER puts the one pad unit at the start:
     * y[i] = x[i-1]*w0 + x[i]*w1. float64 runs through the float32 path. */
    slim_graph *g = tu_graph("Conv", 22, 2, (const char *[]){"x", "w"}, 1);
    tu_attr_s(tu_node0(g), "auto_pad", "SAME_LOWER");
    double x[4] = {1, 2, 3, 4}, w[2] = {10, 1};
    slim_tensor in[2] = {tu_tensor(SLIM_F64, 3, (int64_t[]){1, 1, 4}, x),
                         tu_tensor(SLIM_F64, 3, (int64_t[]){1, 1, 2}, w)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    ck_assert_int_eq(out[0].dtype, SLIM_F64);
    tu_assert_shape(&out[0], 3, (int64_t[]){1, 1, 4});
    const double want[4] = {1, 12, 23, 34};
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(((double *)out[0].data)[i], want[i], 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
}
END_TEST

/* ---- Conv: random against the definition --------------------------------- */

/* 2-D unless D > 0: then 3-D with depth D, kernel KD, stride sd, dilation
 * dd and depth pads pf (front), pk (back). */
typedef struct conv_case {
    int64_t N, C, H, W, M, KH, KW, G, sh, sw, dh, dw, pt, pl, pb, pr;
    int64_t D, KD, sd, dd, pf, pk;
} conv_case;

static void conv_reference(const conv_case *c, const float *x, const float *w, const float *b,
                           float *y, int64_t OD, int64_t OH, int64_t OW)
{
    int64_t cg = c->C / c->G, mg = c->M / c->G;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t od = 0; od < OD; od++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double s = b[m];
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (int64_t kd = 0; kd < c->KD; kd++)
                                for (int64_t kh = 0; kh < c->KH; kh++)
                                    for (int64_t kw = 0; kw < c->KW; kw++) {
                                        int64_t id = od * c->sd - c->pf + kd * c->dd;
                                        int64_t ih = oh * c->sh - c->pt + kh * c->dh;
                                        int64_t iw = ow * c->sw - c->pl + kw * c->dw;
                                        if (id < 0 || id >= c->D || ih < 0 || ih >= c->H ||
                                            iw < 0 || iw >= c->W)
                                            continue;
                                        int64_t cin = m / mg * cg + ci;
                                        s += (double)x[(((n * c->C + cin) * c->D + id) * c->H + ih) * c->W + iw] *
                                             w[(((m * cg + ci) * c->KD + kd) * c->KH + kh) * c->KW + kw];
                                    }
                        y[(((n * c->M + m) * OD + od) * OH + oh) * OW + ow] = (float)s;
                    }
}

static void run_conv_case(const conv_case *given)
{
    conv_case cc = *given, *c = &cc;
    bool is3d = c->D > 0;
    if (!is3d)
        c->D = c->KD = c->sd = c->dd = 1, c->pf = c->pk = 0;
    int64_t OD = (c->D + c->pf + c->pk - ((c->KD - 1) * c->dd + 1)) / c->sd + 1;
    int64_t OH = (c->H + c->pt + c->pb - ((c->KH - 1) * c->dh + 1)) / c->sh + 1;
    int64_t OW = (c->W + c->pl + c->pr - ((c->KW - 1) * c->dw + 1)) / c->sw + 1;
    int64_t nx = c->N * c->C * c->D * c->H * c->W, nw = c->M * (c->C / c->G) * c->KD * c->KH * c->KW;
    int64_t ny = c->N * c->M * OD * OH * OW;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
    float *b = malloc(sizeof(float) * c->M), *want = malloc(sizeof(float) * ny);
    fill_random(x, nx, 1);
    fill_random(w, nw, 2);
    fill_random(b, c->M, 3);
    conv_reference(c, x, w, b, want, OD, OH, OW);

    slim_graph *g = tu_graph("Conv", 22, 3, (const char *[]){"x", "w", "b"}, 1);
    slim_node *node = tu_node0(g);
    tu_attr_i(node, "group", c->G);
    if (is3d) {
        tu_attr_ints(node, "strides", 3, (int64_t[]){c->sd, c->sh, c->sw});
        tu_attr_ints(node, "dilations", 3, (int64_t[]){c->dd, c->dh, c->dw});
        tu_attr_ints(node, "pads", 6, (int64_t[]){c->pf, c->pt, c->pl, c->pk, c->pb, c->pr});
    } else {
        tu_attr_ints(node, "strides", 2, (int64_t[]){c->sh, c->sw});
        tu_attr_ints(node, "dilations", 2, (int64_t[]){c->dh, c->dw});
        tu_attr_ints(node, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
        tu_attr_ints(node, "kernel_shape", 2, (int64_t[]){c->KH, c->KW});
    }
    int r = is3d ? 5 : 4;
    int64_t xd[5] = {c->N, c->C, c->D, c->H, c->W}, wd[5] = {c->M, c->C / c->G, c->KD, c->KH, c->KW};
    int64_t yd[5] = {c->N, c->M, OD, OH, OW};
    if (!is3d) { /* drop the depth dims */
        memmove(xd + 2, xd + 3, 2 * sizeof(int64_t));
        memmove(wd + 2, wd + 3, 2 * sizeof(int64_t));
        memmove(yd + 2, yd + 3, 2 * sizeof(int64_t));
    }
    slim_tensor in[3] = {tu_f32(r, xd, x), tu_f32(r, wd, w), tu_f32(1, (int64_t[]){c->M}, b)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_msg(tu_run(g, in, 3, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&out[0], r, yd);
    tu_assert_close_f32(&out[0], want, ny, 1e-4);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
    free(x), free(w), free(b), free(want);
}

START_TEST(test_conv_random_cases)
{
    static const conv_case cases[] = {
        /* N  C  H   W   M  KH KW G sh sw dh dw pt pl pb pr | D KD sd dd pf pk */
        {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},  /* plain, batch 2 */
        {1, 4, 10, 7, 6, 3, 2, 2, 2, 1, 1, 2, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0},  /* grouped, strided, dilated, asym pads */
        {2, 6, 8, 8, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},   /* depthwise */
        {1, 3, 9, 9, 6, 3, 3, 3, 2, 2, 2, 2, 2, 1, 0, 2, 0, 0, 0, 0, 0, 0},   /* depthwise x2 multiplier, strided */
        {1, 8, 5, 6, 5, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* pointwise */
        {1, 8, 5, 6, 5, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},   /* 1x1 strided: not pointwise */
        /* big enough that im2col works in blocks that start mid-row */
        {1, 64, 90, 90, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
        /* 3-D: plain, then depthwise with depth stride, dilation and pads */
        {1, 2, 4, 5, 3, 2, 3, 1, 1, 2, 1, 1, 1, 0, 0, 1, 3, 2, 1, 1, 1, 0},
        {2, 4, 5, 4, 4, 3, 2, 4, 1, 1, 1, 2, 1, 1, 1, 1, 6, 3, 2, 2, 2, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_conv_case(&cases[i]);
}
END_TEST

/* ---- ConvTranspose --------------------------------------------------------- */

START_TEST(test_convtranspose_basic)
{
    /* 3x3 ramp through two 3x3 kernels of ones: every output sums the input
     * positions whose kernel footprint covers it. */
    slim_graph *g = tu_graph("ConvTranspose", 22, 2, (const char *[]){"x", "w"}, 1);
    float *x = iota(9, 0), w[18];
    for (int i = 0; i < 18; i++)
        w[i] = 1;
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 3, 3}, x), tu_f32(4, (int64_t[]){1, 2, 3, 3}, w)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_OK);
    const float plane[25] = {0, 1, 3, 3, 2, 3, 8, 15, 12, 7, 9, 21, 36, 27, 15,
                             9, 20, 33, 24, 13, 6, 13, 21, 15, 8};
    float want[50];
    memcpy(want, plane, sizeof(plane));
    memcpy(want + 25, plane, sizeof(plane));
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 2, 5, 5});
    tu_assert_close_f32(&out[0], want, 50, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
    free(x);
}
END_TEST

typedef struct convt_case {
    int64_t N, C, H, W, M, KH, KW, G, sh, sw, dh, dw, pt, pl, pb, pr, oph, opw;
} convt_case;

static void run_convt_case(const convt_case *c)
{
    int64_t OH = c->sh * (c->H - 1) + c->oph + (c->KH - 1) * c->dh + 1 - c->pt - c->pb;
    int64_t OW = c->sw * (c->W - 1) + c->opw + (c->KW - 1) * c->dw + 1 - c->pl - c->pr;
    int64_t cg = c->C / c->G, mg = c->M / c->G;
    int64_t nx = c->N * c->C * c->H * c->W, nw = c->C * mg * c->KH * c->KW;
    int64_t ny = c->N * c->M * OH * OW;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
    float *b = malloc(sizeof(float) * c->M), *want = malloc(sizeof(float) * ny);
    fill_random(x, nx, 4);
    fill_random(w, nw, 5);
    fill_random(b, c->M, 6);
    /* Definition: each input element scatters x * kernel into the output. */
    for (int64_t i = 0; i < ny; i++)
        want[i] = b[i / (OH * OW) % c->M];
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t ci = 0; ci < c->C; ci++)
            for (int64_t ih = 0; ih < c->H; ih++)
                for (int64_t iw = 0; iw < c->W; iw++)
                    for (int64_t mo = 0; mo < mg; mo++)
                        for (int64_t kh = 0; kh < c->KH; kh++)
                            for (int64_t kw = 0; kw < c->KW; kw++) {
                                int64_t oh = ih * c->sh - c->pt + kh * c->dh;
                                int64_t ow = iw * c->sw - c->pl + kw * c->dw;
                                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW)
                                    continue;
                                int64_t m = ci / cg * mg + mo;
                                want[((n * c->M + m) * OH + oh) * OW + ow] +=
                                    x[((n * c->C + ci) * c->H + ih) * c->W + iw] *
                                    w[((ci * mg + mo) * c->KH + kh) * c->KW + kw];
                            }

    slim_graph *g = tu_graph("ConvTranspose", 22, 3, (const char *[]){"x", "w", "b"}, 1);
    slim_node *node = tu_node0(g);
    tu_attr_i(node, "group", c->G);
    tu_attr_ints(node, "strides", 2, (int64_t[]){c->sh, c->sw});
    tu_attr_ints(node, "dilations", 2, (int64_t[]){c->dh, c->dw});
    tu_attr_ints(node, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
    tu_attr_ints(node, "output_padding", 2, (int64_t[]){c->oph, c->opw});
    slim_tensor in[3] = {tu_f32(4, (int64_t[]){c->N, c->C, c->H, c->W}, x),
                         tu_f32(4, (int64_t[]){c->C, mg, c->KH, c->KW}, w),
                         tu_f32(1, (int64_t[]){c->M}, b)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_msg(tu_run(g, in, 3, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&out[0], 4, (int64_t[]){c->N, c->M, OH, OW});
    tu_assert_close_f32(&out[0], want, ny, 1e-4);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
    free(x), free(w), free(b), free(want);
}

START_TEST(test_convtranspose_random_cases)
{
    static const convt_case cases[] = {
        /* N C  H  W  M KH KW G sh sw dh dw pt pl pb pr oph opw */
        {2, 3, 4, 5, 2, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
        {1, 4, 5, 3, 6, 3, 2, 2, 2, 3, 1, 2, 1, 0, 2, 1, 1, 0},
        {1, 4, 6, 6, 4, 4, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}, /* depthwise upsampling */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_convt_case(&cases[i]);
}
END_TEST

START_TEST(test_convtranspose_output_shape)
{
    /* output_shape [4] from a length-2 input with stride 2, kernel 1:
     * total padding 2*1 + 1 - 4 = -1, so one uncovered (bias-only) position
     * lands at the end: [x0, 0, x1, 0] + bias. */
    slim_graph *g = tu_graph("ConvTranspose", 22, 3, (const char *[]){"x", "w", "b"}, 1);
    tu_attr_ints(tu_node0(g), "strides", 1, (int64_t[]){2});
    tu_attr_ints(tu_node0(g), "output_shape", 1, (int64_t[]){4});
    float x[2] = {3, 5}, w[1] = {2}, b[1] = {1};
    slim_tensor in[3] = {tu_f32(3, (int64_t[]){1, 1, 2}, x), tu_f32(3, (int64_t[]){1, 1, 1}, w),
                         tu_f32(1, (int64_t[]){1}, b)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 3, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){1, 1, 4});
    tu_assert_close_f32(&out[0], (float[]){7, 1, 11, 1}, 4, 1e-6);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
}
END_TEST

/* ---- pools ------------------------------------------------------------------- */

START_TEST(test_maxpool_indices_column_major)
{
    /* 5x5 ramp 1..25, 2x2 windows, stride 2: maxima at (1,1), (1,3), (3,1),
     * (3,3); storage_order 1 numbers them column-major (w*H + h). */
    slim_graph *g = tu_graph("MaxPool", 12, 1, (const char *[]){"x"}, 2);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){2, 2});
    tu_attr_i(tu_node0(g), "storage_order", 1);
    float *x = iota(25, 1);
    slim_tensor in[1] = {tu_f32(4, (int64_t[]){1, 1, 5, 5}, x)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){7, 9, 17, 19}, 4, 0);
    ck_assert_int_eq(out[1].dtype, SLIM_I64);
    const int64_t *idx = out[1].data;
    ck_assert_int_eq(idx[0], 6);
    ck_assert_int_eq(idx[1], 16);
    ck_assert_int_eq(idx[2], 8);
    ck_assert_int_eq(idx[3], 18);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
    free(x);
}
END_TEST

START_TEST(test_maxpool_uint8_pads)
{
    /* uint8 with pads 1: the padding never wins over real values, even 0. */
    slim_graph *g = tu_graph("MaxPool", 12, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 1, (int64_t[]){3});
    tu_attr_ints(tu_node0(g), "pads", 2, (int64_t[]){1, 1});
    uint8_t x[4] = {0, 200, 3, 0};
    slim_tensor in[1] = {tu_tensor(SLIM_U8, 3, (int64_t[]){1, 1, 4}, x)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    ck_assert_int_eq(out[0].dtype, SLIM_U8);
    const uint8_t *y = out[0].data;
    ck_assert_int_eq(y[0], 200);
    ck_assert_int_eq(y[1], 200);
    ck_assert_int_eq(y[2], 200);
    ck_assert_int_eq(y[3], 3);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
}
END_TEST

START_TEST(test_averagepool_ceil_and_pads)
{
    float *x = iota(16, 1);
    slim_tensor *out;
    int n_out;
    slim_err err;
    /* ceil_mode: 4x4 with 3x3 windows at stride 2 gives 2x2, the last
     * windows clipped by the edge and averaged over what they cover. */
    slim_graph *g = tu_graph("AveragePool", 19, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){3, 3});
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){2, 2});
    tu_attr_i(tu_node0(g), "ceil_mode", 1);
    slim_tensor in[1] = {tu_f32(4, (int64_t[]){1, 1, 4, 4}, x)};
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 2, 2});
    tu_assert_close_f32(&out[0], (float[]){6, 7.5f, 12, 13.5f}, 4, 1e-6);
    slim_tensors_free(out, n_out);

    /* count_include_pad: corner 2x2 window over pads 1 counts 4 taps, of
     * which only x[0][0] = 1 is real. */
    g = tu_graph("AveragePool", 19, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){2, 2});
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){1, 1, 1, 1});
    tu_attr_i(tu_node0(g), "count_include_pad", 1);
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 3, 3});
    const float want[9] = {0.25f, (2 + 3) / 4.0f, 4 / 4.0f,
                           (5 + 9) / 4.0f, (6 + 7 + 10 + 11) / 4.0f, (8 + 12) / 4.0f,
                           13 / 4.0f, (14 + 15) / 4.0f, 16 / 4.0f};
    tu_assert_close_f32(&out[0], want, 9, 1e-6);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
    free(x);
}
END_TEST

START_TEST(test_lppool_and_globals)
{
    float x[8] = {3, -4, 0, 1, 2, 2, -1, 5}; /* [1, 2, 4] */
    slim_tensor in[1] = {tu_f32(3, (int64_t[]){1, 2, 4}, x)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    slim_graph *g = tu_graph("LpPool", 18, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 1, (int64_t[]){2});
    tu_attr_ints(tu_node0(g), "strides", 1, (int64_t[]){2});
    tu_attr_i(tu_node0(g), "p", 2);
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){5, 1, sqrtf(8), sqrtf(26)}, 4, 1e-6);
    slim_tensors_free(out, n_out);

    g = tu_graph("GlobalAveragePool", 22, 1, (const char *[]){"x"}, 1);
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){1, 2, 1});
    tu_assert_close_f32(&out[0], (float[]){0, 2}, 2, 1e-6);
    slim_tensors_free(out, n_out);

    g = tu_graph("GlobalMaxPool", 22, 1, (const char *[]){"x"}, 1);
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_close_f32(&out[0], (float[]){3, 5}, 2, 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
}
END_TEST

/* Pools of every kind over a 3-D input with stride 2 along the width (the
 * vectorized path), dilations, asymmetric pads and ceil_mode, checked
 * against a per-output loop. */
START_TEST(test_pool_random_3d)
{
    enum { D = 5, H = 6, W = 37 };
    const int64_t k[3] = {2, 3, 3}, st[3] = {1, 2, 2}, dil[3] = {2, 1, 1};
    const int64_t pads[6] = {1, 0, 1, 0, 1, 2};
    float x[2 * D * H * W];
    fill_random(x, 2 * D * H * W, 7);
    const int64_t in[3] = {D, H, W};
    int64_t out[3];
    for (int i = 0; i < 3; i++) {
        int64_t room = in[i] + pads[i] + pads[i + 3] - ((k[i] - 1) * dil[i] + 1);
        out[i] = (room + st[i] - 1) / st[i] + 1; /* ceil_mode */
        if ((out[i] - 1) * st[i] >= in[i] + pads[i])
            out[i]--;
    }
    const int64_t ny = 2 * out[0] * out[1] * out[2];
    const char *ops[4] = {"MaxPool", "AveragePool", "AveragePool", "LpPool"};
    for (int variant = 0; variant < 4; variant++) {
        float *want = malloc(sizeof(float) * ny);
        for (int64_t o = 0; o < ny; o++) {
            int64_t c = o / (out[0] * out[1] * out[2]);
            int64_t pos[3] = {o / (out[1] * out[2]) % out[0], o / out[2] % out[1], o % out[2]};
            double acc = variant == 0 ? -INFINITY : 0;
            int64_t count = 0;
            for (int64_t a = 0; a < k[0]; a++)
                for (int64_t b = 0; b < k[1]; b++)
                    for (int64_t e = 0; e < k[2]; e++) {
                        int64_t t[3] = {a, b, e}, ix[3];
                        bool inside = true, in_padded = true;
                        for (int i = 0; i < 3; i++) {
                            ix[i] = pos[i] * st[i] - pads[i] + t[i] * dil[i];
                            inside = inside && ix[i] >= 0 && ix[i] < in[i];
                            in_padded = in_padded && ix[i] >= -pads[i] && ix[i] < in[i] + pads[i + 3];
                        }
                        count += variant == 2 ? in_padded : inside;
                        if (!inside)
                            continue;
                        double v = x[((c * D + ix[0]) * H + ix[1]) * W + ix[2]];
                        if (variant == 0)
                            acc = v > acc ? v : acc;
                        else
                            acc += variant == 3 ? pow(fabs(v), 3) : v;
                    }
            want[o] = (float)(variant == 3 ? cbrt(acc) : variant == 0 ? acc : acc / count);
        }
        slim_graph *g = tu_graph(ops[variant], 22, 1, (const char *[]){"x"}, 1);
        slim_node *n = tu_node0(g);
        tu_attr_ints(n, "kernel_shape", 3, k);
        tu_attr_ints(n, "strides", 3, st);
        tu_attr_ints(n, "dilations", 3, dil);
        tu_attr_ints(n, "pads", 6, pads);
        tu_attr_i(n, "ceil_mode", 1);
        if (variant == 2)
            tu_attr_i(n, "count_include_pad", 1);
        if (variant == 3)
            tu_attr_i(n, "p", 3);
        slim_tensor t[1] = {tu_f32(5, (int64_t[]){1, 2, D, H, W}, x)};
        slim_tensor *y;
        int n_out;
        slim_err err;
        ck_assert_msg(tu_run(g, t, 1, &y, &n_out, &err) == SLIM_OK, "%s", err.msg);
        tu_assert_shape(&y[0], 5, (int64_t[]){1, 2, out[0], out[1], out[2]});
        tu_assert_close_f32(&y[0], want, ny, 1e-5);
        slim_tensors_free(y, n_out);
        tu_free_inputs(t, 1);
        free(want);
    }
}
END_TEST

START_TEST(test_maxpool_window_over_padding_only)
{
    /* Dilation 3 with pads 2 over a 1-wide input: the windows' taps sit at
     * -2, 1 and -1, 2, all missing x[0]. Such windows yield 0 and index -1
     * rather than reading out of bounds. */
    slim_graph *g = tu_graph("MaxPool", 22, 1, (const char *[]){"x"}, 2);
    tu_attr_ints(tu_node0(g), "kernel_shape", 1, (int64_t[]){2});
    tu_attr_ints(tu_node0(g), "dilations", 1, (int64_t[]){3});
    tu_attr_ints(tu_node0(g), "pads", 2, (int64_t[]){2, 2});
    slim_tensor in[1] = {tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){-5})};
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){1, 1, 2});
    tu_assert_close_f32(&out[0], (float[]){0, 0}, 2, 0);
    ck_assert_int_eq(((int64_t *)out[1].data)[0], -1);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
}
END_TEST

/* MaxPool 3x3 (strides 1 and 2, pads 0 and 1, widths around the 16-wide
 * runs, a width 1 to 40) against a direct loop in tap order with the
 * operator's comparison, bit for bit: the three-tap pass (and its AVX-512
 * form) must give the same bits, equal zeros of either sign and NaNs
 * included, as the tap-by-tap loop. */
START_TEST(test_maxpool_3wide_bitwise)
{
    for (int64_t w = 1; w <= 40; w += (w < 20 ? 1 : 7))
        for (int st = 1; st <= 2; st++)
            for (int pad = 0; pad <= 1; pad++) {
                int64_t h = 5, n = 2 * h * w;
                float *x = malloc(sizeof(float) * (size_t)n);
                fill_random(x, n, (unsigned)(w * 7 + st * 3 + pad));
                for (int64_t i = 0; i < n; i++) /* ties of +0 / -0, and NaNs */
                    x[i] = i % 5 == 0 ? (i % 2 ? -0.0f : 0.0f)
                           : i % 23 == 0 ? NAN : x[i] < 0 ? x[i] : x[i] * 0.0f + (float)(i % 3);
                int64_t oh = (h + 2 * pad - 3) / st + 1, ow = (w + 2 * pad - 3) / st + 1;
                if (w + 2 * pad < 3) { /* no window fits */
                    free(x);
                    continue;
                }
                slim_graph *g = tu_graph("MaxPool", 22, 1, (const char *[]){"x"}, 1);
                tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){3, 3});
                tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){st, st});
                tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){pad, pad, pad, pad});
                slim_tensor in[1] = {tu_f32(4, (int64_t[]){1, 2, h, w}, x)};
                slim_tensor *out;
                int n_out;
                slim_err err;
                ck_assert_msg(tu_run(g, in, 1, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
                tu_assert_shape(&out[0], 4, (int64_t[]){1, 2, oh, ow});
                const float *y = out[0].data;
                for (int64_t c = 0; c < 2; c++)
                    for (int64_t i = 0; i < oh; i++)
                        for (int64_t j = 0; j < ow; j++) {
                            float acc = -INFINITY;
                            for (int kh = 0; kh < 3; kh++)
                                for (int kw = 0; kw < 3; kw++) {
                                    int64_t r = i * st - pad + kh, q = j * st - pad + kw;
                                    if (r < 0 || r >= h || q < 0 || q >= w)
                                        continue;
                                    float v = x[(c * h + r) * w + q];
                                    acc = v > acc ? v : acc;
                                }
                            float got = y[(c * oh + i) * ow + j];
                            ck_assert_msg(memcmp(&got, &acc, 4) == 0,
                                          "w %lld stride %d pad %d: (%lld, %lld, %lld) is %g, "
                                          "want %g", (long long)w, st, pad, (long long)c,
                                          (long long)i, (long long)j, got, acc);
                        }
                slim_tensors_free(out, n_out);
                tu_free_inputs(in, 1);
                free(x);
            }
}
END_TEST

START_TEST(test_global_lppool)
{
    float x[6] = {3, 4, 0, 1, 2, 2}; /* [1, 2, 3]: L3 norms of each channel */
    slim_tensor in[1] = {tu_f32(3, (int64_t[]){1, 2, 3}, x)};
    slim_graph *g = tu_graph("GlobalLpPool", 2, 1, (const char *[]){"x"}, 1);
    tu_attr_i(tu_node0(g), "p", 3);
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(g, in, 1, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){1, 2, 1});
    tu_assert_close_f32(&out[0], (float[]){cbrtf(91), cbrtf(17)}, 2, 1e-5);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 1);
}
END_TEST

/* ---- bad input ----------------------------------------------------------- */

START_TEST(test_bad_inputs)
{
    slim_tensor *out;
    int n_out;
    slim_err err;
    float x[16] = {0}, w[18] = {0};

    /* W expects 2 input channels, X has 1. */
    slim_graph *g = tu_graph("Conv", 22, 2, (const char *[]){"x", "w"}, 1);
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 4, 4}, x), tu_f32(4, (int64_t[]){1, 2, 3, 3}, w)};
    ck_assert_int_eq(tu_run(g, in, 2, &out, &n_out, &err), SLIM_ESHAPE);
    tu_free_inputs(in, 2);

    /* Kernel bigger than the unpadded input. */
    g = tu_graph("Conv", 22, 2, (const char *[]){"x", "w"}, 1);
    slim_tensor in2[2] = {tu_f32(4, (int64_t[]){1, 2, 2, 2}, x), tu_f32(4, (int64_t[]){1, 2, 3, 3}, w)};
    ck_assert_int_eq(tu_run(g, in2, 2, &out, &n_out, &err), SLIM_ESHAPE);
    tu_free_inputs(in2, 2);

    /* Unknown auto_pad is refused when the node is prepared. */
    g = tu_graph("MaxPool", 22, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_s(tu_node0(g), "auto_pad", "SAME_MIDDLE");
    slim_tensor in3[1] = {tu_f32(4, (int64_t[]){1, 1, 4, 4}, x)};
    ck_assert_int_eq(tu_run(g, in3, 1, &out, &n_out, &err), SLIM_EINVAL);

    /* MaxPool without its required kernel_shape is refused by the schema
     * check (validate.c); pads of the wrong length by prepare. */
    g = tu_graph("MaxPool", 22, 1, (const char *[]){"x"}, 1);
    ck_assert_int_eq(tu_run(g, in3, 1, &out, &n_out, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "required attribute \"kernel_shape\""));
    g = tu_graph("AveragePool", 22, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(tu_node0(g), "pads", 2, (int64_t[]){1, 1});
    ck_assert_int_eq(tu_run(g, in3, 1, &out, &n_out, &err), SLIM_EINVAL);

    /* Zero stride. */
    g = tu_graph("AveragePool", 22, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){2, 2});
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){0, 1});
    ck_assert_int_eq(tu_run(g, in3, 1, &out, &n_out, &err), SLIM_EINVAL);
    tu_free_inputs(in3, 1);

    /* ConvTranspose whose pads eat the whole output; bias of the wrong size. */
    g = tu_graph("ConvTranspose", 22, 2, (const char *[]){"x", "w"}, 1);
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){3, 3, 3, 3});
    slim_tensor in5[2] = {tu_f32(4, (int64_t[]){1, 1, 2, 2}, x), tu_f32(4, (int64_t[]){1, 1, 3, 3}, w)};
    ck_assert_int_eq(tu_run(g, in5, 2, &out, &n_out, &err), SLIM_ESHAPE);
    g = tu_graph("Conv", 22, 3, (const char *[]){"x", "w", "b"}, 1);
    slim_tensor in6[3] = {tu_f32(4, (int64_t[]){1, 1, 4, 4}, x), tu_f32(4, (int64_t[]){1, 1, 3, 3}, w),
                          tu_f32(1, (int64_t[]){2}, w)};
    ck_assert_int_eq(tu_run(g, in6, 3, &out, &n_out, &err), SLIM_ESHAPE);
    tu_free_inputs(in5, 2);
    tu_free_inputs(in6, 3);

    /* Rank-2 input to a pool. */
    g = tu_graph("MaxPool", 22, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 1, (int64_t[]){2});
    slim_tensor in4[1] = {tu_f32(2, (int64_t[]){4, 4}, x)};
    ck_assert_int_eq(tu_run(g, in4, 1, &out, &n_out, &err), SLIM_EINVAL);
    tu_free_inputs(in4, 1);
}
END_TEST

static Suite *conv_pool_suite(void)
{
    Suite *s = suite_create("conv_pool");
    TCase *tc = tcase_create("conv");
    tcase_add_test(tc, test_conv_basic_padding);
    tcase_add_test(tc, test_conv_strides_bias);
    tcase_add_test(tc, test_conv_pointwise);
    tcase_add_test(tc, test_conv_same_lower_float64);
    tcase_add_test(tc, test_conv_random_cases);
    tcase_add_test(tc, test_convtranspose_basic);
    tcase_add_test(tc, test_convtranspose_random_cases);
    tcase_add_test(tc, test_convtranspose_output_shape);
    suite_add_tcase(s, tc);
    tc = tcase_create("pool");
    tcase_add_test(tc, test_maxpool_indices_column_major);
    tcase_add_test(tc, test_maxpool_uint8_pads);
    tcase_add_test(tc, test_averagepool_ceil_and_pads);
    tcase_add_test(tc, test_lppool_and_globals);
    tcase_add_test(tc, test_pool_random_3d);
    tcase_add_test(tc, test_global_lppool);
    tcase_add_test(tc, test_maxpool_window_over_padding_only);
    tcase_add_test(tc, test_maxpool_3wide_bitwise);
    tcase_add_test(tc, test_bad_inputs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(conv_pool_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
