/* test_int8_conv_image.c - the int8 convolution's per-image path
 * (kernels/cpu/qconv_image.c): the image quantized once to u8, byte
 * im2col, the exact product, the epilogue with the residual fused. Bit for
 * bit against the definition written here on every code path and in every
 * layout, close to a double-precision convolution, an image's result
 * independent of its batch, and non-finite or all-zero images. */
#include "testutil.h"
#include "test_int8_conv_util.h"

#include "qgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

typedef struct {
    int64_t n, c, h, w, m, groups, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    bool relu, bias, residual;
} shape;

/* Odd shapes: input channels 3, 5, 6, 70 (no multiple of 4 or 16) and 16,
 * 64 (the direct 1x1 reads the codes as the matrix); strides, asymmetric
 * pads, dilations, 2 and 4 groups, depthwise (group = channels), 1x1
 * direct and strided, 3x3, 7x7, batch 1 and 3, one block and several. */
static const shape shapes[] = {
    {3, 3, 11, 9, 8, 1, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, true, true, false},
    {3, 5, 7, 6, 20, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false, true, true},
    {3, 16, 8, 8, 17, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true, false, true},
    {1, 6, 8, 8, 10, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true, true, false},
    {3, 12, 9, 7, 33, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, true, true, false},
    {1, 8, 10, 10, 12, 4, 3, 3, 1, 2, 2, 1, 2, 0, 1, 2, true, false, false},
    {3, 6, 5, 9, 70, 2, 3, 2, 2, 1, 1, 3, 0, 1, 1, 0, false, true, false},
    {3, 24, 7, 7, 24, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true, true},
    {1, 70, 4, 5, 66, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true, true},
    {3, 64, 6, 6, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true, true},
    /* More pixels than one block (about 1 MiB of rows and sums, so 4992
     * and 3264 pixels here): the blocks' offsets, the residual's too. */
    {1, 16, 71, 71, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true, true},
    {1, 64, 58, 58, 64, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false, false, true},
};
#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

typedef tq_problem problem;

static void make(const shape *s, problem *p)
{
    slim_qconv q = {.c = s->c, .h = s->h, .w = s->w, .m = s->m, .groups = s->groups,
                    .kh = s->kh, .kw = s->kw, .sh = s->sh, .sw = s->sw, .dh = s->dh,
                    .dw = s->dw, .pt = s->pt, .pl = s->pl, .pb = s->pb, .pr = s->pr};
    /* The residual always drawn (after the images), as the test has always
     * drawn it: each shape's values stay what they were. */
    tq_make(&q, s->n, TQ_IMAGE2_NEGATIVE, true, &rng_state, p);
}

/* The definition: the image's codes (NCHW here: the same values as the
 * kernel's pixel-major ones), padding = the zero point, exact int64 sums,
 * fma(sum, sx * sw, bias), + residual, Relu. */
static void reference_exact(const problem *p, int64_t n_img, const shape *s, float *y)
{
    const slim_qconv *q = &p->q;
    int64_t per = q->c * q->h * q->w, cg = q->c / q->groups;
    uint8_t *codes = malloc((size_t)per);
    for (int64_t n = 0; n < n_img; n++) {
        float sx;
        int32_t zx;
        tq_define_codes(p->x + n * per, per, codes, &sx, &zx);
        for (int64_t j = 0; j < q->m; j++) {
            int64_t g = j / p->mg;
            for (int64_t oy = 0; oy < q->oh; oy++)
                for (int64_t ox = 0; ox < q->ow; ox++) {
                    int64_t acc = 0;
                    for (int64_t ky = 0; ky < q->kh; ky++)
                        for (int64_t kx = 0; kx < q->kw; kx++)
                            for (int64_t ci = 0; ci < cg; ci++) {
                                int64_t iy = oy * q->sh - q->pt + ky * q->dh;
                                int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                                bool in = iy >= 0 && iy < q->h && ix >= 0 && ix < q->w;
                                int64_t c = in ? codes[((g * cg + ci) * q->h + iy) * q->w + ix]
                                               : zx;
                                acc += (c - zx) * p->wq[j * p->kg + (ky * q->kw + kx) * cg + ci];
                            }
                    int64_t at = (n * q->m + j) * p->np + oy * q->ow + ox;
                    float v = fmaf((float)acc, sx * p->sw[j], s->bias ? p->bias[j] : 0.0f);
                    if (s->residual)
                        v = v + p->res[at];
                    y[at] = s->relu && !(v > 0) ? 0.0f : v;
                }
        }
    }
    free(codes);
}

static slim_qconv_weights weights_of(const problem *p, const shape *s, const float *res)
{
    slim_qconv_weights w = {.packed = p->packed, .colsum = p->colsum, .scale = p->sw,
                            .bias = s->bias ? p->bias : NULL,
                            .act = s->relu ? SLIM_QGEMM_ACT_RELU : SLIM_QGEMM_ACT_NONE,
                            .residual = s->residual ? res : NULL};
    return w;
}

/* Every path and combination of layouts (input, output, residual),
 * bitwise the definition. */
START_TEST(test_image_matches_definition)
{
    const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    slim_qgemm_isa best = slim_qgemm_get_isa();
    for (size_t t = 0; t < N_SHAPES; t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        int64_t ny = s->n * s->m * p.np, nx = s->n * s->c * s->h * s->w;
        float *want = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
        float *got_nchw = malloc(sizeof(float) * (size_t)ny);
        float *xt = malloc(sizeof(float) * (size_t)nx), *rt = malloc(sizeof(float) * (size_t)ny);
        reference_exact(&p, s->n, s, want);
        tq_swap_inner(p.x, xt, s->n, s->c, s->h * s->w);
        tq_swap_inner(p.res, rt, s->n, s->m, p.np);
        for (size_t i = 0; i < 3; i++) {
            if (!slim_qgemm_set_isa(isas[i]))
                continue;
            for (int lay = 0; lay < 8; lay++) {
                /* Every layout on the widest path; the others (slower,
                 * the same driver) all-NCHW and all-pixel-major. */
                if (isas[i] != best && lay != 0 && lay != 7 &&
                    (s->residual || lay != 3))
                    continue;
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
                    tq_swap_inner(got, got_nchw, s->n, p.np, s->m);
                    cmp = got_nchw;
                }
                for (int64_t k = 0; k < ny; k++)
                    ck_assert_msg(memcmp(&cmp[k], &want[k], sizeof(float)) == 0,
                                  "shape %zu, %s, layouts %d, element %lld: %.9g vs %.9g", t,
                                  slim_qgemm_isa_name(isas[i]), lay, (long long)k, cmp[k],
                                  want[k]);
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
}
END_TEST

/* Within the activations' quantization error of the float convolution
 * (double, the dequantized weights): one level is the image's range /
 * 255, so the error is a few times that of a per-row scale, still small
 * against the outputs (the bound fails if the codes, zero point or
 * padding were wrong: those errors are of the outputs' own size). */
START_TEST(test_image_close_to_float)
{
    for (size_t t = 0; t < N_SHAPES; t++) {
        const shape *s = &shapes[t];
        problem p;
        make(s, &p);
        int64_t ny = s->n * s->m * p.np, cg = s->c / s->groups;
        float *got = malloc(sizeof(float) * (size_t)ny);
        slim_qconv_weights w = weights_of(&p, s, p.res);
        w.act = SLIM_QGEMM_ACT_NONE;
        w.residual = NULL;
        slim_err err;
        ck_assert_int_eq(slim_qconv_run(&p.q, s->n, p.x, &w, got, &err), SLIM_OK);
        const slim_qconv *q = &p.q;
        for (int64_t n = 0; n < s->n; n++) {
            double e2 = 0, r2 = 0;
            for (int64_t j = 0; j < q->m; j++)
                for (int64_t px = 0; px < p.np; px++) {
                    int64_t oy = px / q->ow, ox = px % q->ow, g = j / p.mg;
                    double acc = s->bias ? p.bias[j] : 0.0;
                    for (int64_t ky = 0; ky < q->kh; ky++)
                        for (int64_t kx = 0; kx < q->kw; kx++)
                            for (int64_t ci = 0; ci < cg; ci++) {
                                int64_t iy = oy * q->sh - q->pt + ky * q->dh;
                                int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                                if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
                                    continue;
                                double xv = p.x[((n * q->c + g * cg + ci) * q->h + iy) * q->w + ix];
                                acc += xv * p.wq[j * p.kg + (ky * q->kw + kx) * cg + ci] * p.sw[j];
                            }
                    double d = got[(n * q->m + j) * p.np + px] - acc;
                    e2 += d * d;
                    r2 += acc * acc;
                }
            /* Image 3 has an 80.0 outlier among values in [-2, 2]: its
             * level is 40x coarser, so its bound is looser. */
            double bound = n % 4 == 3 ? 0.2 : 0.02;
            ck_assert_msg(sqrt(e2 / (r2 > 0 ? r2 : 1)) < bound,
                          "shape %zu image %lld: relative error %g", t, (long long)n,
                          sqrt(e2 / (r2 > 0 ? r2 : 1)));
        }
        free(got);
        tq_unmake(&p);
    }
}
END_TEST

/* Every image's output is bitwise the one it gets alone (pixel-major
 * layouts and the fused residual included). */
START_TEST(test_image_batch_independent)
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

/* An image holding a NaN or an infinity gives NaN outputs (before the
 * Relu, which maps NaN to 0) and leaves the other images alone; an
 * all-zero image gives the bias. */
START_TEST(test_image_non_finite_and_zero)
{
    const shape *s = &shapes[1]; /* batch 3, no Relu, bias */
    problem p;
    make(s, &p);
    slim_qconv_weights w = weights_of(&p, s, p.res);
    w.residual = NULL;
    tq_assert_non_finite_and_zero(&p, s->n, &w, 7);
    tq_unmake(&p);
}
END_TEST

/* The fused Clip (MobileNet's ReLU6) is the Clip node applied to the
 * unclipped output, bitwise, on every path of the 1x1 and 3x3 convs: per
 * image (direct and im2col), per row, the float reference, NCHW and
 * pixel-major outputs, with the residual fused or in its own pass. */
START_TEST(test_image_clip_fused)
{
    const size_t which[] = {1, 2, 9, 11}; /* 3x3 + residual, 1x1 direct, ... */
    for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++) {
        const shape *s = &shapes[which[i]];
        problem p;
        make(s, &p);
        int64_t ny = s->n * s->m * p.np;
        float *plain = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
        float *wf = malloc(sizeof(float) * (size_t)(s->m * p.kg));
        for (int64_t k = 0; k < s->m * p.kg; k++)
            wf[k] = p.wq[k] * p.sw[k / p.kg];
        for (int mode = 0; mode < 6; mode++) {
            slim_qconv q = p.q;
            q.nhwc_out = mode & 1;
            q.act_rows = mode / 2 == 1;
            slim_qconv_weights w = weights_of(&p, s, p.res);
            w.wf = mode / 2 == 2 ? wf : NULL;
            slim_err err;
            ck_assert_int_eq(slim_qconv_run(&q, s->n, p.x, &w, plain, &err), SLIM_OK);
            w.clip = true;
            w.clip_lo = -0.25f;
            w.clip_hi = 0.5f;
            ck_assert_int_eq(slim_qconv_run(&q, s->n, p.x, &w, got, &err), SLIM_OK);
            int64_t clipped = 0;
            for (int64_t k = 0; k < ny; k++) {
                float v = plain[k], want = v < -0.25f ? -0.25f : v > 0.5f ? 0.5f : v;
                clipped += want != v;
                ck_assert_msg(memcmp(&got[k], &want, sizeof(float)) == 0,
                              "shape %zu mode %d element %lld: %.9g vs %.9g", which[i], mode,
                              (long long)k, got[k], want);
            }
            ck_assert_msg(clipped > ny / 10, "shape %zu mode %d: only %lld of %lld clipped",
                          which[i], mode, (long long)clipped, (long long)ny);
        }
        free(plain);
        free(got);
        free(wf);
        tq_unmake(&p);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("int8_conv_image");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_image_matches_definition);
    tcase_add_test(tk, test_image_close_to_float);
    tcase_add_test(tk, test_image_batch_independent);
    tcase_add_test(tk, test_image_non_finite_and_zero);
    tcase_add_test(tk, test_image_clip_fused);
    suite_add_tcase(s, tk);
    return tq_main(s);
}
