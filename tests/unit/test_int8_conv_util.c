/*
 * test_int8_conv_util.c - the int8 convolution tests' shared helpers
 * (test_int8_conv_util.h).
 */
#include "test_int8_conv_util.h"

#include "testutil.h"

#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tq_make(const slim_qconv *q, int64_t n, tq_image2 image2, bool residual, uint64_t *rng,
             tq_problem *p)
{
    p->q = *q;
    ck_assert_ptr_null(slim_qconv_shape(&p->q, SLIM_QCONV_NOTSET));
    int64_t m = q->m;
    p->kg = slim_qconv_kg(&p->q);
    p->mg = m / q->groups;
    p->np = p->q.oh * p->q.ow;
    p->wq = malloc((size_t)(m * p->kg));
    p->packed = aligned_alloc(64, (slim_qconv_packed_bytes(&p->q) + 63) & ~(size_t)63);
    p->colsum = malloc(sizeof(int32_t) * (size_t)m);
    p->sw = malloc(sizeof(float) * (size_t)m);
    p->bias = malloc(sizeof(float) * (size_t)m);
    int64_t nx = n * q->c * q->h * q->w, ny = n * m * p->np;
    p->x = malloc(sizeof(float) * (size_t)nx);
    p->res = residual ? malloc(sizeof(float) * (size_t)ny) : NULL;
    for (int64_t i = 0; i < m * p->kg; i++)
        p->wq[i] = (int8_t)((int)(tu_xrnd(rng) % 255) - 127);
    p->wq[0] = 127; /* both ends of the weights' range */
    p->wq[1] = -127;
    for (int64_t j = 0; j < m; j++) {
        p->sw[j] = 0.01f + 0.001f * (float)(tu_xrnd(rng) % 50);
        p->bias[j] = tu_xrndf(rng);
    }
    /* Images of different kinds: mixed signs, all positive (zero point 0),
     * image2's kind, one with an outlier pixel. */
    int64_t per = q->c * q->h * q->w;
    for (int64_t i = 0; i < nx; i++) {
        int64_t img = i / per;
        float v = tu_xrndf(rng) * 2;
        switch (img % 4) {
        case 1: v = fabsf(v) + 0.25f; break;
        case 2:
            if (image2 == TQ_IMAGE2_NEGATIVE)
                v = -fabsf(v) - 0.1f;
            else if (img == 2)
                v = 0.0f;
            break;
        case 3: v = i % per == per / 2 ? 80.0f : v; break;
        default: break;
        }
        p->x[i] = v;
    }
    for (int64_t i = 0; residual && i < ny; i++)
        p->res[i] = tu_xrndf(rng) * 3;
    if (q->dw_layout) {
        /* The depthwise layout: tap-major, taps x C (one weight row per
         * channel, kg = taps). */
        for (int64_t j = 0; j < m; j++) {
            p->colsum[j] = 0;
            for (int64_t t = 0; t < p->kg; t++) {
                p->packed[t * m + j] = p->wq[j * p->kg + t];
                p->colsum[j] += p->wq[j * p->kg + t];
            }
        }
        return;
    }
    size_t pg = slim_qgemm_packed_bytes(p->mg, p->kg);
    for (int64_t g = 0; g < q->groups; g++)
        slim_qgemm_pack(p->wq + g * p->mg * p->kg, p->mg, p->kg, p->packed + g * pg,
                        p->colsum + g * p->mg);
}

void tq_define_codes(const float *x, int64_t n, uint8_t *q, float *sx, int32_t *zx)
{
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float s = (hi - lo) / 255.0f;
    if (!(s > 0)) {
        memset(q, 0, (size_t)n);
        *sx = 1.0f;
        *zx = 0;
        return;
    }
    float z = nearbyintf(-lo / s), inv = 1.0f / s;
    *zx = z < 0 ? 0 : z > 255 ? 255 : (int32_t)z;
    *sx = s;
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i] * inv) + (float)*zx;
        q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

void tq_assert_batch_independent(const tq_problem *p, int64_t n, const slim_qconv_weights *w,
                                 const char *what)
{
    int64_t per_y = p->q.m * p->np, per_x = p->q.c * p->q.h * p->q.w;
    float *all = malloc(sizeof(float) * (size_t)(n * per_y));
    float *one = malloc(sizeof(float) * (size_t)per_y);
    ck_assert_ptr_nonnull(all);
    ck_assert_ptr_nonnull(one);
    slim_err err;
    ck_assert_int_eq(slim_qconv_run(&p->q, n, p->x, w, all, &err), SLIM_OK);
    for (int64_t i = 0; i < n; i++) {
        slim_qconv_weights w1 = *w;
        w1.residual = w->residual ? w->residual + i * per_y : NULL;
        ck_assert_int_eq(slim_qconv_run(&p->q, 1, p->x + i * per_x, &w1, one, &err), SLIM_OK);
        ck_assert_msg(memcmp(one, all + i * per_y, sizeof(float) * (size_t)per_y) == 0,
                      "%s image %lld", what, (long long)i);
    }
    free(all);
    free(one);
}

void tq_unmake(tq_problem *p)
{
    free(p->wq);
    free(p->packed);
    free(p->colsum);
    free(p->sw);
    free(p->bias);
    free(p->x);
    free(p->res);
}

void tq_assert_non_finite_and_zero(tq_problem *p, int64_t n, const slim_qconv_weights *w,
                                   int64_t at)
{
    int64_t per_y = p->q.m * p->np, per_x = p->q.c * p->q.h * p->q.w;
    ck_assert_int_ge(n, 3);
    ck_assert_int_lt(at, per_x);
    float *ref = malloc(sizeof(float) * (size_t)(n * per_y));
    float *got = malloc(sizeof(float) * (size_t)(n * per_y));
    ck_assert_ptr_nonnull(ref);
    ck_assert_ptr_nonnull(got);
    slim_err err;
    ck_assert_int_eq(slim_qconv_run(&p->q, n, p->x, w, ref, &err), SLIM_OK);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        float keep = p->x[per_x + at];
        p->x[per_x + at] = bad[b];
        ck_assert_int_eq(slim_qconv_run(&p->q, n, p->x, w, got, &err), SLIM_OK);
        p->x[per_x + at] = keep;
        for (int64_t i = 0; i < per_y; i++)
            ck_assert_msg(isnan(got[per_y + i]), "value %d: output %lld is %g", b, (long long)i,
                          got[per_y + i]);
        ck_assert(memcmp(got, ref, sizeof(float) * (size_t)per_y) == 0);
        ck_assert(memcmp(got + 2 * per_y, ref + 2 * per_y, sizeof(float) * (size_t)per_y) == 0);
    }
    memset(p->x, 0, sizeof(float) * (size_t)per_x);
    slim_qconv_weights w0 = *w;
    w0.clip = false;
    ck_assert_int_eq(slim_qconv_run(&p->q, 1, p->x, &w0, got, &err), SLIM_OK);
    for (int64_t j = 0; j < p->q.m; j++)
        for (int64_t i = 0; i < p->np; i++)
            ck_assert_float_eq(got[j * p->np + i], p->bias[j]);
    free(ref);
    free(got);
}

void tq_swap_inner(const float *src, float *dst, int64_t n, int64_t a, int64_t b)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < a; j++)
            for (int64_t k = 0; k < b; k++)
                dst[(i * b + k) * a + j] = src[(i * a + j) * b + k];
}

int tq_main(Suite *suite)
{
    slim_init();
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
