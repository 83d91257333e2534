/* test_int8_conv.c - the int8 convolution (kernels/cpu/qconv.c) against
 * references written here: bit for bit against the exact integer
 * definition on every code path, and close to a double-precision
 * convolution; an image's result independent of its batch; pixel-major
 * layouts. The int8 pass's Conv rewrite: test_int8_conv_pass.c. */
#include "testutil.h"
#include "test_int8_conv_util.h"

#include "qgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

typedef struct {
    int64_t n, c, h, w, m, groups, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    bool relu, bias;
} shape;

/* Odd shapes: strides, pads (asymmetric too), dilations, groups, 1x1 (the
 * direct path and a strided one), 3x3, 7x7, batch 1 and 3, sizes that are
 * no multiple of 4, 16 or 64. */
static const shape shapes[] = {
    {1, 3, 11, 9, 8, 1, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, true, true},
    {3, 5, 7, 6, 20, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false, true},
    {1, 16, 8, 8, 17, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false, false},
    {3, 12, 9, 7, 33, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, true, true},
    {1, 8, 10, 10, 12, 4, 3, 3, 1, 2, 2, 1, 2, 0, 1, 2, true, false},
    {3, 6, 5, 9, 70, 2, 3, 2, 2, 1, 1, 3, 0, 1, 1, 0, false, true},
    {1, 70, 4, 5, 66, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},
};

typedef tq_problem problem;

static void make(const shape *s, problem *p)
{
    slim_qconv q = {.c = s->c, .h = s->h, .w = s->w, .m = s->m, .groups = s->groups,
                    .kh = s->kh, .kw = s->kw, .sh = s->sh, .sw = s->sw, .dh = s->dh,
                    .dw = s->dw, .pt = s->pt, .pl = s->pl, .pb = s->pb, .pr = s->pr,
                    .act_rows = true}; /* per-row activations: test_int8_conv_image.c has per-image */
    tq_make(&q, s->n, TQ_IMAGE2_ZERO, false, &rng_state, p);
}

/* Output pixel (oy, ox)'s im2col row of image n, group g, in the packed K
 * order, read straight from the NCHW input. */
static void field(const problem *p, int64_t n, int64_t g, int64_t oy, int64_t ox, float *row)
{
    const slim_qconv *q = &p->q;
    int64_t cg = q->c / q->groups;
    for (int64_t ky = 0; ky < q->kh; ky++)
        for (int64_t kx = 0; kx < q->kw; kx++)
            for (int64_t ci = 0; ci < cg; ci++) {
                int64_t iy = oy * q->sh - q->pt + ky * q->dh, ix = ox * q->sw - q->pl + kx * q->dw;
                bool in = iy >= 0 && iy < q->h && ix >= 0 && ix < q->w;
                row[(ky * q->kw + kx) * cg + ci] =
                    in ? p->x[((n * q->c + g * cg + ci) * q->h + iy) * q->w + ix] : 0.0f;
            }
}

/* The definition: each output pixel's row quantized on its own (the C
 * path's quantizer), exact int64 sums, the documented float epilogue. */
static void reference_exact(const problem *p, int64_t n_img, bool relu, bool bias, float *y)
{
    const slim_qconv *q = &p->q;
    float *row = malloc(sizeof(float) * (size_t)p->kg);
    uint8_t *qr = malloc((size_t)slim_qgemm_k4(p->kg));
    slim_qgemm_set_isa(SLIM_QGEMM_C);
    for (int64_t n = 0; n < n_img; n++)
        for (int64_t g = 0; g < q->groups; g++)
            for (int64_t oy = 0; oy < q->oh; oy++)
                for (int64_t ox = 0; ox < q->ow; ox++) {
                    field(p, n, g, oy, ox, row);
                    float sx;
                    int32_t zx;
                    slim_qgemm_quantize_row(row, p->kg, qr, &sx, &zx);
                    for (int64_t j = g * p->mg; j < (g + 1) * p->mg; j++) {
                        int64_t acc = 0;
                        for (int64_t k = 0; k < p->kg; k++)
                            acc += ((int64_t)qr[k] - zx) * p->wq[j * p->kg + k];
                        float v = fmaf((float)acc, sx * p->sw[j], bias ? p->bias[j] : 0.0f);
                        y[((n * q->m + j) * q->oh + oy) * q->ow + ox] =
                            relu ? (v > 0 ? v : 0.0f) : v;
                    }
                }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    free(row);
    free(qr);
}

/* The float convolution in double with the dequantized weights. */
static void reference_double(const problem *p, int64_t n_img, bool relu, bool bias, double *y)
{
    const slim_qconv *q = &p->q;
    float *row = malloc(sizeof(float) * (size_t)p->kg);
    for (int64_t n = 0; n < n_img; n++)
        for (int64_t g = 0; g < q->groups; g++)
            for (int64_t oy = 0; oy < q->oh; oy++)
                for (int64_t ox = 0; ox < q->ow; ox++) {
                    field(p, n, g, oy, ox, row);
                    for (int64_t j = g * p->mg; j < (g + 1) * p->mg; j++) {
                        double acc = bias ? p->bias[j] : 0.0;
                        for (int64_t k = 0; k < p->kg; k++)
                            acc += (double)row[k] * p->wq[j * p->kg + k] * p->sw[j];
                        y[((n * q->m + j) * q->oh + oy) * q->ow + ox] =
                            relu && acc < 0 ? 0.0 : acc;
                    }
                }
    free(row);
}

START_TEST(test_conv_matches_references)
{
    const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
    for (size_t t = 0; t < sizeof(shapes) / sizeof(shapes[0]); t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        int64_t ny = s->n * s->m * p.q.oh * p.q.ow;
        float *want = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
        double *dref = malloc(sizeof(double) * (size_t)ny);
        reference_exact(&p, s->n, s->relu, s->bias, want);
        reference_double(&p, s->n, s->relu, s->bias, dref);
        slim_qconv_weights w = {.packed = p.packed, .colsum = p.colsum, .scale = p.sw,
                                .bias = s->bias ? p.bias : NULL,
                                .act = s->relu ? SLIM_QGEMM_ACT_RELU : SLIM_QGEMM_ACT_NONE,
                                .residual = NULL};
        for (size_t i = 0; i < 3; i++) {
            if (!slim_qgemm_set_isa(isas[i]))
                continue;
            slim_err err;
            memset(got, 0xFF, sizeof(float) * (size_t)ny);
            ck_assert_int_eq(slim_qconv_run(&p.q, s->n, p.x, &w, got, &err), SLIM_OK);
            for (int64_t k = 0; k < ny; k++)
                ck_assert_msg(memcmp(&got[k], &want[k], sizeof(float)) == 0,
                              "shape %zu, %s, element %lld: %.9g vs %.9g", t,
                              slim_qgemm_isa_name(isas[i]), (long long)k, got[k], want[k]);
        }
        slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
        /* Within the activations' quantization error of the exact
         * convolution: a level is range / 255 of a pixel's receptive
         * field, and the outputs sum kg of them. */
        double mx = 0, e2 = 0, r2 = 0;
        for (int64_t k = 0; k < ny; k++)
            mx = fmax(mx, fabs(dref[k]));
        for (int64_t k = 0; k < ny; k++) {
            e2 += (want[k] - dref[k]) * (want[k] - dref[k]);
            r2 += dref[k] * dref[k];
        }
        ck_assert_msg(sqrt(e2 / (r2 > 0 ? r2 : 1)) < 0.02, "shape %zu: relative error %g", t,
                      sqrt(e2 / r2));
        free(want);
        free(got);
        free(dref);
        tq_unmake(&p);
    }
}
END_TEST

/* Every image's output is bitwise the one it gets alone. */
START_TEST(test_conv_batch_independent)
{
    for (size_t t = 0; t < sizeof(shapes) / sizeof(shapes[0]); t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        slim_qconv_weights w = {.packed = p.packed, .colsum = p.colsum, .scale = p.sw,
                                .bias = p.bias, .act = SLIM_QGEMM_ACT_NONE};
        char what[32];
        snprintf(what, sizeof(what), "shape %zu", t);
        tq_assert_batch_independent(&p, s->n, &w, what);
        tq_unmake(&p);
    }
}
END_TEST

/* Pixel-major input and / or output (nhwc_in, nhwc_out) give bitwise the
 * NCHW result, only laid out pixel-major, on every shape and with the
 * float reference weights too. */
START_TEST(test_conv_nhwc_layouts)
{
    for (size_t t = 0; t < sizeof(shapes) / sizeof(shapes[0]); t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        int64_t np = p.q.oh * p.q.ow, hw = s->h * s->w, ny = s->n * s->m * np;
        float *ref = malloc(sizeof(float) * (size_t)ny), *y = malloc(sizeof(float) * (size_t)ny);
        float *yt = malloc(sizeof(float) * (size_t)ny);
        float *xt = malloc(sizeof(float) * (size_t)(s->n * s->c * hw));
        float *wf = malloc(sizeof(float) * (size_t)(s->m * p.kg));
        for (int64_t i = 0; i < s->m * p.kg; i++)
            wf[i] = (float)p.wq[i] * p.sw[i / p.kg];
        tq_swap_inner(p.x, xt, s->n, s->c, hw);
        for (int f = 0; f < 2; f++) {
            slim_qconv_weights w = {.packed = p.packed, .colsum = p.colsum, .scale = p.sw,
                                    .bias = p.bias, .act = SLIM_QGEMM_ACT_RELU,
                                    .wf = f ? wf : NULL};
            slim_err err;
            ck_assert_int_eq(slim_qconv_run(&p.q, s->n, p.x, &w, ref, &err), SLIM_OK);
            for (int mode = 1; mode < 4; mode++) {
                slim_qconv q = p.q;
                q.nhwc_in = mode & 1;
                q.nhwc_out = mode & 2;
                memset(y, 0xff, sizeof(float) * (size_t)ny);
                ck_assert_int_eq(slim_qconv_run(&q, s->n, q.nhwc_in ? xt : p.x, &w, y, &err),
                                 SLIM_OK);
                if (q.nhwc_out)
                    tq_swap_inner(y, yt, s->n, np, s->m);
                ck_assert_msg(memcmp(q.nhwc_out ? yt : y, ref, sizeof(float) * (size_t)ny) == 0,
                              "shape %zu mode %d float %d", t, mode, f);
            }
        }
        free(ref);
        free(y);
        free(yt);
        free(xt);
        free(wf);
        tq_unmake(&p);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int8_conv");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_conv_matches_references);
    tcase_add_test(tk, test_conv_batch_independent);
    tcase_add_test(tk, test_conv_nhwc_layouts);
    suite_add_tcase(s, tk);
    return tq_main(s);
}
