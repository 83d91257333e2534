/*
 * test_int8_conv_mb.c - MobileNetV2's int8 block as the int8 pass builds it
 * (kernels/qconv_codes.h): an expansion 1x1 (ReLU6) writing u8 codes, a
 * depthwise 3x3 (ReLU6) reading and writing codes, a projection 1x1 and a
 * 3x3 conv reading them; and a batch's images in parallel.
 *
 * What must hold: a producer's codes are exactly the codes of its float
 * output over the Clip's range, on every ISA path; a reader given codes
 * computes bitwise what it computes from the float tensor whenever each
 * image's float output spans the Clip's range (the per-image quantization
 * then takes the same scale and zero point); a NaN image is marked and its
 * reader outputs are NaN; results do not depend on the batch; codes are
 * refused where the conv cannot take them.
 */
#include "testutil.h"

#include "qconv_codes.h"
#include "qgemm.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static float rndf(void) /* in [-1, 1) */
{
    return (float)(rnd() % 2000000) / 1000000.0f - 1.0f;
}

/* One conv's int8 weights (packed for qgemm, or taps x C for depthwise). */
typedef struct {
    slim_qconv q;
    int8_t *packed;
    int32_t *colsum;
    float *sw, *bias;
} conv;

/* c -> m channels, k x k kernel (pad k / 2), or depthwise (m = c); the
 * weights' scale `gain` makes the ReLU6 saturate (outputs reach 0 and 6). */
static void conv_make(conv *cv, int64_t c, int64_t m, int64_t h, int64_t w, int64_t k, bool dw,
                      float gain)
{
    slim_qconv q = {.c = c, .h = h, .w = w, .m = m, .groups = dw ? c : 1, .kh = k, .kw = k,
                    .sh = 1, .sw = 1, .dh = 1, .dw = 1, .pt = k / 2, .pl = k / 2,
                    .pb = k / 2, .pr = k / 2, .nhwc_in = true, .nhwc_out = true,
                    .dw_layout = dw};
    ck_assert_ptr_null(slim_qconv_shape(&q, SLIM_QCONV_NOTSET));
    cv->q = q;
    int64_t kg = dw ? k * k : c * k * k;
    int8_t *wq = malloc((size_t)(m * kg));
    for (int64_t i = 0; i < m * kg; i++)
        wq[i] = (int8_t)((int)(rnd() % 255) - 127);
    cv->packed = malloc(slim_qconv_packed_bytes(&q));
    cv->colsum = calloc((size_t)m, sizeof(int32_t));
    cv->sw = malloc(sizeof(float) * (size_t)m);
    cv->bias = malloc(sizeof(float) * (size_t)m);
    if (dw) { /* taps x C */
        for (int64_t j = 0; j < m; j++)
            for (int64_t t = 0; t < kg; t++) {
                cv->packed[t * m + j] = wq[j * kg + t];
                cv->colsum[j] += wq[j * kg + t];
            }
    } else {
        slim_qgemm_pack(wq, m, kg, cv->packed, cv->colsum);
    }
    for (int64_t j = 0; j < m; j++) {
        cv->sw[j] = gain * (0.5f + 0.01f * (float)(rnd() % 50)) / 127.0f;
        cv->bias[j] = rndf();
    }
    free(wq);
}

static void conv_free(conv *cv)
{
    free(cv->packed);
    free(cv->colsum);
    free(cv->sw);
    free(cv->bias);
}

static slim_qconv_weights relu6(const conv *cv)
{
    slim_qconv_weights w = {.packed = cv->packed, .colsum = cv->colsum, .scale = cv->sw,
                            .bias = cv->bias, .clip = true, .clip_lo = 0.0f, .clip_hi = 6.0f};
    return w;
}

static slim_qconv_weights linear(const conv *cv)
{
    slim_qconv_weights w = {.packed = cv->packed, .colsum = cv->colsum, .scale = cv->sw,
                            .bias = cv->bias};
    return w;
}

/* The test's own codes of [0, 6]: scale 6 / 255, zero point 0, x / scale
 * rounded half to even. */
static uint8_t code_of(float v)
{
    float inv = 1.0f / (6.0f / 255.0f);
    float r = nearbyintf(v * inv);
    return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

/* Every image's values reach lo and hi (the codes' precondition for being
 * the per-image ones). */
static void assert_spans(const float *y, int64_t n, int64_t per, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t k = 0; k < per; k++) {
            mn = fminf(mn, y[i * per + k]);
            mx = fmaxf(mx, y[i * per + k]);
        }
        ck_assert_msg(mn == lo && mx == hi, "image %lld spans [%g, %g], not [%g, %g]",
                      (long long)i, mn, mx, lo, hi);
    }
}

static slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};

typedef struct {
    int64_t n, c, e, h, w; /* images, block channels, expanded channels, size */
} block;

static const block blocks[] = {
    {3, 24, 144, 9, 7}, /* 144: a 64-channel block and a 16-channel tail */
    {2, 16, 96, 6, 6},
    {1, 32, 40, 5, 11}, /* 40: masked tails everywhere */
};

/* A MobileNet block's chain, its weights drawn in this order: 1x1
 * expansion c -> e, 3x3 depthwise, 1x1 projection e -> c. */
static void chain_make(conv *ex, conv *dw, conv *pr, int64_t c, int64_t e, int64_t h, int64_t w)
{
    conv_make(ex, c, e, h, w, 1, false, 4.0f);
    conv_make(dw, e, e, h, w, 3, true, 2.0f);
    conv_make(pr, e, c, h, w, 1, false, 1.0f);
}

/* Codes between the chain's convs: the expansion writes ReLU6 codes
 * (its bad images marked in bad_e), the depthwise reads them and writes
 * its own (bad_d), the projection reads those. */
static void chain_codes(uint8_t *bad_e, uint8_t *bad_d, slim_qconv_codes *io_e,
                        slim_qconv_codes *io_d, slim_qconv_codes *io_p)
{
    *io_e = (slim_qconv_codes){.out = true, .out_lo = 0, .out_hi = 6, .y_bad = bad_e};
    *io_d = (slim_qconv_codes){.in = true, .in_lo = 0, .in_hi = 6, .x_bad = bad_e,
                               .out = true, .out_lo = 0, .out_hi = 6, .y_bad = bad_d};
    *io_p = (slim_qconv_codes){.in = true, .in_lo = 0, .in_hi = 6, .x_bad = bad_d};
}

/* Expansion -> depthwise -> projection, once with float hand-overs and
 * once with codes: the codes are the floats' codes and the results are
 * bitwise the same, on every ISA path. */
START_TEST(test_codes_chain_matches_float)
{
    const block *b = &blocks[_i];
    int64_t hw = b->h * b->w, n = b->n;
    conv ex, dw, pr, c3;
    chain_make(&ex, &dw, &pr, b->c, b->e, b->h, b->w);
    conv_make(&c3, b->e, b->c, b->h, b->w, 3, false, 1.0f);
    float *x = malloc(sizeof(float) * (size_t)(n * hw * b->c));
    for (int64_t i = 0; i < n * hw * b->c; i++)
        x[i] = rndf() * 3;
    int64_t ne = n * hw * b->e, nc = n * hw * b->c;
    float *e_f = malloc(sizeof(float) * (size_t)ne), *d_f = malloc(sizeof(float) * (size_t)ne);
    float *p_f = malloc(sizeof(float) * (size_t)nc), *p_c = malloc(sizeof(float) * (size_t)nc);
    float *t_f = malloc(sizeof(float) * (size_t)nc), *t_c = malloc(sizeof(float) * (size_t)nc);
    uint8_t *e_c = malloc((size_t)ne), *d_c = malloc((size_t)ne);
    uint8_t bad_e[4], bad_d[4];
    slim_err err = {0};
    for (size_t ii = 0; ii < sizeof(isas) / sizeof(isas[0]); ii++) {
        if (!slim_qgemm_set_isa(isas[ii]))
            continue;
        slim_qconv_weights we = relu6(&ex), wd = relu6(&dw), wp = linear(&pr), w3 = linear(&c3);
        /* Floats all the way. */
        ck_assert_int_eq(slim_qconv_run(&ex.q, n, x, &we, e_f, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run(&dw.q, n, e_f, &wd, d_f, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run(&pr.q, n, d_f, &wp, p_f, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run(&c3.q, n, d_f, &w3, t_f, &err), SLIM_OK);
        assert_spans(e_f, n, hw * b->e, 0.0f, 6.0f);
        assert_spans(d_f, n, hw * b->e, 0.0f, 6.0f);
        /* Codes between them. */
        memset(bad_e, 7, sizeof(bad_e));
        memset(bad_d, 7, sizeof(bad_d));
        for (int64_t i = 0; i < n; i++)
            bad_e[i] = bad_d[i] = 0;
        slim_qconv_codes io_e, io_d, io_p;
        chain_codes(bad_e, bad_d, &io_e, &io_d, &io_p);
        ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &io_e, n, x, &we, e_c, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run_codes(&dw.q, &io_d, n, e_c, &wd, d_c, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run_codes(&pr.q, &io_p, n, d_c, &wp, p_c, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run_codes(&c3.q, &io_p, n, d_c, &w3, t_c, &err), SLIM_OK);
        for (int64_t i = 0; i < ne; i++) {
            ck_assert_msg(e_c[i] == code_of(e_f[i]), "isa %d: expansion code %lld is %d, not "
                          "%d (%g)", (int)isas[ii], (long long)i, e_c[i], code_of(e_f[i]),
                          e_f[i]);
            ck_assert_msg(d_c[i] == code_of(d_f[i]), "isa %d: depthwise code %lld",
                          (int)isas[ii], (long long)i);
        }
        for (int64_t i = 0; i < n; i++)
            ck_assert(bad_e[i] == 0 && bad_d[i] == 0);
        ck_assert_int_eq(bad_e[n], 7); /* nothing past the batch */
        ck_assert_mem_eq(p_c, p_f, sizeof(float) * (size_t)nc);
        ck_assert_mem_eq(t_c, t_f, sizeof(float) * (size_t)nc);
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    free(x), free(e_f), free(d_f), free(p_f), free(p_c), free(t_f), free(t_c);
    free(e_c), free(d_c);
    conv_free(&ex), conv_free(&dw), conv_free(&pr), conv_free(&c3);
}
END_TEST

/* The chain on a batch of 5 (images in parallel where there are threads)
 * and on each image alone: bitwise the same codes and outputs. */
START_TEST(test_codes_batch_independent)
{
    int64_t n = 5, c = 24, e = 96, h = 8, w = 8, hw = h * w;
    conv ex, dw, pr;
    chain_make(&ex, &dw, &pr, c, e, h, w);
    float *x = malloc(sizeof(float) * (size_t)(n * hw * c));
    for (int64_t i = 0; i < n * hw * c; i++)
        x[i] = rndf() * (1 + (float)(i / (hw * c))); /* images of different ranges */
    uint8_t *e_c = malloc((size_t)(n * hw * e)), *d_c = malloc((size_t)(n * hw * e));
    float *y = malloc(sizeof(float) * (size_t)(n * hw * c)), *y1 = malloc(sizeof(float) * (size_t)(hw * c));
    uint8_t *e1 = malloc((size_t)(hw * e)), *d1 = malloc((size_t)(hw * e));
    uint8_t bad_e[5], bad_d[5];
    slim_qconv_weights we = relu6(&ex), wd = relu6(&dw), wp = linear(&pr);
    slim_err err = {0};
    slim_qconv_codes io_e, io_d, io_p;
    chain_codes(bad_e, bad_d, &io_e, &io_d, &io_p);
    memset(bad_e, 0, sizeof(bad_e));
    memset(bad_d, 0, sizeof(bad_d));
    ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &io_e, n, x, &we, e_c, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run_codes(&dw.q, &io_d, n, e_c, &wd, d_c, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run_codes(&pr.q, &io_p, n, d_c, &wp, y, &err), SLIM_OK);
    for (int64_t i = 0; i < n; i++) {
        ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &io_e, 1, x + i * hw * c, &we, e1, &err),
                         SLIM_OK);
        ck_assert_int_eq(slim_qconv_run_codes(&dw.q, &io_d, 1, e1, &wd, d1, &err), SLIM_OK);
        ck_assert_int_eq(slim_qconv_run_codes(&pr.q, &io_p, 1, d1, &wp, y1, &err), SLIM_OK);
        ck_assert_mem_eq(e1, e_c + i * hw * e, (size_t)(hw * e));
        ck_assert_mem_eq(d1, d_c + i * hw * e, (size_t)(hw * e));
        ck_assert_mem_eq(y1, y + i * hw * c, sizeof(float) * (size_t)(hw * c));
    }
    free(x), free(e_c), free(d_c), free(y), free(y1), free(e1), free(d1);
    conv_free(&ex), conv_free(&dw), conv_free(&pr);
}
END_TEST

/* A NaN in image 1: the expansion marks image 1 (only), the depthwise conv
 * passes the mark on, the projection's image 1 is all NaN as on the float
 * path, and images 0 and 2 are bitwise the float path's. */
START_TEST(test_codes_nan_image)
{
    int64_t n = 3, c = 16, e = 48, h = 5, w = 6, hw = h * w;
    conv ex, dw, pr;
    chain_make(&ex, &dw, &pr, c, e, h, w);
    float *x = malloc(sizeof(float) * (size_t)(n * hw * c));
    for (int64_t i = 0; i < n * hw * c; i++)
        x[i] = rndf() * 3;
    x[hw * c + 17] = NAN;
    uint8_t *e_c = malloc((size_t)(n * hw * e)), *d_c = malloc((size_t)(n * hw * e));
    float *e_f = malloc(sizeof(float) * (size_t)(n * hw * e));
    float *d_f = malloc(sizeof(float) * (size_t)(n * hw * e));
    float *y = malloc(sizeof(float) * (size_t)(n * hw * c));
    float *y_f = malloc(sizeof(float) * (size_t)(n * hw * c));
    uint8_t bad_e[3] = {0}, bad_d[3] = {0};
    slim_qconv_weights we = relu6(&ex), wd = relu6(&dw), wp = linear(&pr);
    slim_err err = {0};
    slim_qconv_codes io_e, io_d, io_p;
    chain_codes(bad_e, bad_d, &io_e, &io_d, &io_p);
    ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &io_e, n, x, &we, e_c, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run_codes(&dw.q, &io_d, n, e_c, &wd, d_c, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run_codes(&pr.q, &io_p, n, d_c, &wp, y, &err), SLIM_OK);
    ck_assert(bad_e[0] == 0 && bad_e[1] == 1 && bad_e[2] == 0);
    ck_assert(bad_d[0] == 0 && bad_d[1] == 1 && bad_d[2] == 0);
    ck_assert_int_eq(slim_qconv_run(&ex.q, n, x, &we, e_f, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run(&dw.q, n, e_f, &wd, d_f, &err), SLIM_OK);
    ck_assert_int_eq(slim_qconv_run(&pr.q, n, d_f, &wp, y_f, &err), SLIM_OK);
    for (int64_t k = 0; k < hw * c; k++) {
        ck_assert(isnan(y[hw * c + k]) && isnan(y_f[hw * c + k]));
        ck_assert(y[k] == y_f[k] && y[2 * hw * c + k] == y_f[2 * hw * c + k]);
    }
    free(x), free(e_c), free(d_c), free(e_f), free(d_f), free(y), free(y_f);
    conv_free(&ex), conv_free(&dw), conv_free(&pr);
}
END_TEST

/* Codes where the conv cannot take them: an error naming why, nothing
 * written. */
START_TEST(test_codes_refused)
{
    conv ex;
    conv_make(&ex, 8, 16, 4, 4, 1, false, 4.0f);
    float x[8 * 16] = {0}, y[16 * 16];
    uint8_t bad[1] = {0};
    slim_qconv_weights w = relu6(&ex), wl = linear(&ex);
    slim_err err = {0};
    slim_qconv nchw = ex.q;
    nchw.nhwc_in = false;
    slim_qconv_codes in = {.in = true, .in_lo = 0, .in_hi = 6};
    ck_assert_int_eq(slim_qconv_run_codes(&nchw, &in, 1, x, &w, y, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "pixel-major input"));
    slim_qconv_codes out = {.out = true, .out_lo = 0, .out_hi = 6, .y_bad = bad};
    ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &out, 1, x, &wl, y, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "a Clip"));
    slim_qconv_codes wide = {.in = true, .in_lo = 0, .in_hi = INFINITY};
    ck_assert_int_eq(slim_qconv_run_codes(&ex.q, &wide, 1, x, &w, y, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "finite range"));
    slim_qconv rows = ex.q;
    rows.act_rows = true;
    ck_assert_int_eq(slim_qconv_run_codes(&rows, &out, 1, x, &w, y, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "per-image path"));
    conv_free(&ex);
}
END_TEST

/* The range's parameters: ReLU6's, a range with negatives (zero point
 * inside), all-zero and non-finite ranges. */
START_TEST(test_codes_params)
{
    float s;
    int32_t z;
    ck_assert(slim_qconv_codes_params(0.0f, 6.0f, &s, &z));
    ck_assert(s == 6.0f / 255.0f && z == 0);
    ck_assert(slim_qconv_codes_params(-1.0f, 2.0f, &s, &z));
    ck_assert(s == 3.0f / 255.0f && z == 85);
    ck_assert(slim_qconv_codes_params(0.5f, 2.0f, &s, &z)); /* 0 always inside */
    ck_assert(s == 2.0f / 255.0f && z == 0);
    ck_assert(slim_qconv_codes_params(0.0f, 0.0f, &s, &z));
    ck_assert(s == 1.0f && z == 0);
    ck_assert(!slim_qconv_codes_params(-INFINITY, 6.0f, &s, &z));
    ck_assert(!slim_qconv_codes_params(0.0f, NAN, &s, &z));
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("int8_conv_mb");
    TCase *tk = tcase_create("core");
    tcase_add_loop_test(tk, test_codes_chain_matches_float, 0,
                        (int)(sizeof(blocks) / sizeof(blocks[0])));
    tcase_add_test(tk, test_codes_batch_independent);
    tcase_add_test(tk, test_codes_nan_image);
    tcase_add_test(tk, test_codes_refused);
    tcase_add_test(tk, test_codes_params);
    suite_add_tcase(s, tk);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
