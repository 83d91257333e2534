/*
 * test_int8_conv_util.c - the int8 convolution tests' shared helpers
 * (test_int8_conv_util.h).
 */
#include "test_int8_conv_util.h"

#include "slim_init.h"

#include <math.h>
#include <stdlib.h>

uint32_t tq_rnd(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint32_t)(*state >> 11);
}

float tq_rndf(uint64_t *state)
{
    return (float)(tq_rnd(state) % 2000001) / 1000000.0f - 1.0f;
}

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
        p->wq[i] = (int8_t)((int)(tq_rnd(rng) % 255) - 127);
    p->wq[0] = 127; /* both ends of the weights' range */
    p->wq[1] = -127;
    for (int64_t j = 0; j < m; j++) {
        p->sw[j] = 0.01f + 0.001f * (float)(tq_rnd(rng) % 50);
        p->bias[j] = tq_rndf(rng);
    }
    /* Images of different kinds: mixed signs, all positive (zero point 0),
     * image2's kind, one with an outlier pixel. */
    int64_t per = q->c * q->h * q->w;
    for (int64_t i = 0; i < nx; i++) {
        int64_t img = i / per;
        float v = tq_rndf(rng) * 2;
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
        p->res[i] = tq_rndf(rng) * 3;
    size_t pg = slim_qgemm_packed_bytes(p->mg, p->kg);
    for (int64_t g = 0; g < q->groups; g++)
        slim_qgemm_pack(p->wq + g * p->mg * p->kg, p->mg, p->kg, p->packed + g * pg,
                        p->colsum + g * p->mg);
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
