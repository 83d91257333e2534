/*
 * test_int8_conv_dw.c - the int8 depthwise convolution (ConvInt8 with the
 * depthwise weight layout, kernels/cpu/qconv_depthwise.c): bitwise its
 * definition on every path and layout, batch independence, the fused Relu
 * and Clip, non-finite images, and the shapes the layout refuses.
 */
#include "testutil.h"
#include "test_int8_conv_util.h"

#include "qgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

typedef struct {
    int64_t n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    int act; /* 0 none, 1 Relu, 2 Clip(0, 6), 3 Clip(-0.5, 0.75) */
    bool bias, residual;
} shape;

/* Channels 5, 21, 37, 70 (no multiple of 16: the masked tails) and 16, 64,
 * 96; stride 2, asymmetric pads, dilation, 5x5; 7x7 and 1x1 images (the
 * latter every tap but the centre padding); batch 1 and 3. */
static const shape shapes[] = {
    {3, 5, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, true, false},
    {3, 21, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, true, true},
    {1, 37, 7, 7, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, 2, false, false},
    {3, 70, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, true},
    {1, 16, 11, 6, 5, 5, 1, 2, 1, 1, 2, 2, 2, 2, 3, true, false},
    {3, 64, 8, 9, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, false, true},
    {1, 96, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, false},
    {3, 24, 6, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, true, true},
};
#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

typedef tq_problem problem;

/* The weights in the depthwise layout (packed, taps x C), images mixed,
 * all positive and all negative (zero point 255), a residual always drawn. */
static void make(const shape *s, problem *p)
{
    slim_qconv q = {.c = s->c, .h = s->h, .w = s->w, .m = s->c, .groups = s->c,
                    .kh = s->kh, .kw = s->kw, .sh = s->sh, .sw = s->sw, .dh = s->dh,
                    .dw = s->dw, .pt = s->pt, .pl = s->pl, .pb = s->pb, .pr = s->pr,
                    .dw_layout = true};
    tq_make(&q, s->n, TQ_IMAGE2_NEGATIVE, true, &rng_state, p);
    ck_assert_int_eq(p->kg, s->kh * s->kw);
    ck_assert_uint_eq(slim_qconv_packed_bytes(&p->q), (size_t)(p->kg * s->c));
}

static float lo_of(const shape *s)
{
    return s->act == 2 ? 0.0f : -0.5f;
}

static float hi_of(const shape *s)
{
    return s->act == 2 ? 6.0f : 0.75f;
}

static slim_qconv_weights weights_of(const problem *p, const shape *s, const float *res)
{
    slim_qconv_weights w = {
        .packed = p->packed, .colsum = p->colsum, .scale = p->sw,
        .bias = s->bias ? p->bias : NULL,
        .act = s->act == 1 ? SLIM_QGEMM_ACT_RELU : SLIM_QGEMM_ACT_NONE,
        .residual = s->residual ? res : NULL,
        .clip = s->act >= 2, .clip_lo = lo_of(s), .clip_hi = hi_of(s),
    };
    return w;
}

/* The definition, NCHW: exact sums of (code - zx) * w over the taps inside
 * the image, fma(sum, sx * sw, bias), + residual, Relu, Clip. */
static void reference_exact(const problem *p, const shape *s, float *y)
{
    const slim_qconv *q = &p->q;
    int64_t per = q->c * q->h * q->w;
    uint8_t *codes = malloc((size_t)per);
    for (int64_t n = 0; n < s->n; n++) {
        float sx;
        int32_t zx;
        tq_define_codes(p->x + n * per, per, codes, &sx, &zx);
        for (int64_t j = 0; j < q->c; j++)
            for (int64_t oy = 0; oy < q->oh; oy++)
                for (int64_t ox = 0; ox < q->ow; ox++) {
                    int64_t acc = 0;
                    for (int64_t ky = 0; ky < q->kh; ky++)
                        for (int64_t kx = 0; kx < q->kw; kx++) {
                            int64_t iy = oy * q->sh - q->pt + ky * q->dh;
                            int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                            if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
                                continue;
                            int64_t code = codes[(j * q->h + iy) * q->w + ix];
                            acc += (code - zx) * p->wq[j * p->kg + ky * q->kw + kx];
                        }
                    int64_t at = (n * q->c + j) * p->np + oy * q->ow + ox;
                    float v = fmaf((float)acc, sx * p->sw[j], s->bias ? p->bias[j] : 0.0f);
                    if (s->residual)
                        v = v + p->res[at];
                    v = s->act == 1 && !(v > 0) ? 0.0f : v;
                    if (s->act >= 2)
                        v = v < lo_of(s) ? lo_of(s) : v > hi_of(s) ? hi_of(s) : v;
                    y[at] = v;
                }
    }
    free(codes);
}

/* Every path and every combination of layouts, bitwise the definition. */
START_TEST(test_dw_matches_definition)
{
    const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
    int ran = 0;
    for (size_t t = 0; t < N_SHAPES; t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        int64_t ny = s->n * s->c * p.np, nx = s->n * s->c * s->h * s->w;
        float *want = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
        float *got_nchw = malloc(sizeof(float) * (size_t)ny);
        float *xt = malloc(sizeof(float) * (size_t)nx), *rt = malloc(sizeof(float) * (size_t)ny);
        reference_exact(&p, s, want);
        tq_swap_inner(p.x, xt, s->n, s->c, s->h * s->w);
        tq_swap_inner(p.res, rt, s->n, s->c, p.np);
        for (size_t i = 0; i < 3; i++) {
            if (!slim_qgemm_set_isa(isas[i]))
                continue;
            for (int lay = 0; lay < 8; lay++) {
                slim_qconv q = p.q;
                q.nhwc_in = lay & 1;
                q.nhwc_out = lay & 2;
                q.nhwc_res = lay & 4;
                if (!s->residual && q.nhwc_res)
                    continue;
                slim_qconv_weights w = weights_of(&p, s, q.nhwc_res ? rt : p.res);
                slim_err err;
                memset(got, 0xFF, sizeof(float) * (size_t)ny);
                ck_assert_int_eq(slim_qconv_run(&q, s->n, q.nhwc_in ? xt : p.x, &w, got, &err),
                                 SLIM_OK);
                const float *cmp = got;
                if (q.nhwc_out) {
                    tq_swap_inner(got, got_nchw, s->n, p.np, s->c);
                    cmp = got_nchw;
                }
                for (int64_t k = 0; k < ny; k++)
                    ck_assert_msg(memcmp(&cmp[k], &want[k], sizeof(float)) == 0,
                                  "shape %zu, %s, layouts %d, element %lld: %.9g vs %.9g", t,
                                  slim_qgemm_isa_name(isas[i]), lay, (long long)k, cmp[k],
                                  want[k]);
                ran++;
            }
        }
        slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
        free(want);
        free(got);
        free(got_nchw);
        free(xt);
        free(rt);
        tq_unmake(&p);
    }
    ck_assert_int_ge(ran, 40); /* at least the C path's layouts ran */
}
END_TEST

/* Close to the float depthwise conv (double, dequantized weights): one
 * level is the image's range / 255, so a wrong code, zero point or
 * padding (errors of the outputs' own size) fails the bound. */
START_TEST(test_dw_close_to_float)
{
    for (size_t t = 0; t < N_SHAPES; t++) {
        shape s = shapes[t];
        s.act = 0;
        s.residual = false;
        problem p;
        make(&s, &p);
        const slim_qconv *q = &p.q;
        int64_t ny = s.n * s.c * p.np, per = s.c * s.h * s.w;
        float *got = malloc(sizeof(float) * (size_t)ny);
        slim_qconv_weights w = weights_of(&p, &s, NULL);
        slim_err err;
        ck_assert_int_eq(slim_qconv_run(q, s.n, p.x, &w, got, &err), SLIM_OK);
        double num = 0, den = 0;
        for (int64_t n = 0; n < s.n; n++)
            for (int64_t j = 0; j < s.c; j++)
                for (int64_t o = 0; o < p.np; o++) {
                    int64_t oy = o / q->ow, ox = o % q->ow;
                    double acc = s.bias ? p.bias[j] : 0.0;
                    for (int64_t ky = 0; ky < q->kh; ky++)
                        for (int64_t kx = 0; kx < q->kw; kx++) {
                            int64_t iy = oy * q->sh - q->pt + ky * q->dh;
                            int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                            if (iy >= 0 && iy < q->h && ix >= 0 && ix < q->w)
                                acc += (double)p.x[n * per + (j * q->h + iy) * q->w + ix] *
                                       p.wq[j * p.kg + ky * q->kw + kx] * p.sw[j];
                        }
                    double d = got[(n * s.c + j) * p.np + o] - acc;
                    num += d * d;
                    den += acc * acc;
                }
        ck_assert_msg(den > 0 && sqrt(num / den) < 0.02, "shape %zu: rel error %g", t,
                      sqrt(num / den));
        free(got);
        tq_unmake(&p);
    }
}
END_TEST

/* An image's output is bitwise the same alone and in its batch. */
START_TEST(test_dw_batch_independent)
{
    for (size_t t = 0; t < N_SHAPES; t++) {
        const shape *s = &shapes[t];
        if (s->n < 2)
            continue;
        problem p;
        make(s, &p);
        p.q.nhwc_out = t % 2 == 0;
        slim_qconv_weights w = weights_of(&p, s, p.res);
        char what[32];
        snprintf(what, sizeof(what), "shape %zu", t);
        tq_assert_batch_independent(&p, s->n, &w, what);
        tq_unmake(&p);
    }
}
END_TEST

/* A NaN or an infinity in an image: its outputs NaN (Clip keeps a NaN),
 * the other images untouched; an all-zero image gives the bias. */
START_TEST(test_dw_non_finite_and_zero)
{
    shape s = shapes[3]; /* batch 3, Clip(0, 6), bias */
    s.residual = false;
    problem p;
    make(&s, &p);
    slim_qconv_weights w = weights_of(&p, &s, NULL);
    tq_assert_non_finite_and_zero(&p, s.n, &w, 1);
    tq_unmake(&p);
}
END_TEST

/* The layout is C = M = group and at most 256 taps; each refusal says why. */
START_TEST(test_dw_refuses_other_shapes)
{
    slim_qconv q = {.c = 8, .h = 5, .w = 5, .m = 16, .groups = 8, .kh = 3, .kw = 3, .sh = 1,
                    .sw = 1, .dh = 1, .dw = 1, .dw_layout = true};
    const char *why = slim_qconv_shape(&q, SLIM_QCONV_NOTSET);
    ck_assert_ptr_nonnull(why);
    ck_assert_ptr_nonnull(strstr(why, "depthwise weight layout"));
    q.m = 8;
    q.groups = 4;
    ck_assert_ptr_nonnull(slim_qconv_shape(&q, SLIM_QCONV_NOTSET));
    q.groups = 8;
    q.kh = q.kw = 17;
    q.h = q.w = 20;
    why = slim_qconv_shape(&q, SLIM_QCONV_NOTSET);
    ck_assert_ptr_nonnull(why);
    ck_assert_ptr_nonnull(strstr(why, "256 taps"));
    q.kh = q.kw = 16;
    ck_assert_ptr_null(slim_qconv_shape(&q, SLIM_QCONV_NOTSET));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int8_conv_dw");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_dw_matches_definition);
    tcase_add_test(tk, test_dw_close_to_float);
    tcase_add_test(tk, test_dw_batch_independent);
    tcase_add_test(tk, test_dw_non_finite_and_zero);
    tcase_add_test(tk, test_dw_refuses_other_shapes);
    suite_add_tcase(s, tk);
    return tq_main(s);
}
