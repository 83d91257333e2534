/*
 * test_int8_conv_util.h - what the int8 convolution's tests share
 * (test_int8_conv.c: the per-row path; test_int8_conv_pass.c: the pass;
 * test_int8_conv_image.c: the per-image path; test_int8_conv_dw.c: the
 * depthwise layout): one problem drawn from testutil.h's seeded xorshift
 * stream (int8 weights packed per group or in the depthwise layout, their
 * scales, a bias, a batch of images of different kinds, a residual), the
 * definition of an image's codes, the batch-independence check and the
 * NCHW <-> NHWC swap.
 *
 *     static uint64_t rng = 0x2545F4914F6CDD1Dull;
 *     slim_qconv q = {...};
 *     tq_problem p;
 *     tq_make(&q, 3, TQ_IMAGE2_ZERO, false, &rng, &p);
 *     ... slim_qconv_run(&p.q, 3, p.x, &w, y, &err) ...
 *     tq_unmake(&p);
 *
 * Each test keeps its own stream state, so its values are drawn in the
 * same order from the same seed as when these lived in each file (the
 * depthwise test's since it moved here: its own draws were in another
 * order).
 */
#ifndef SLIM_TEST_INT8_CONV_UTIL_H
#define SLIM_TEST_INT8_CONV_UTIL_H

#include "qgemm.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    slim_qconv q;
    int64_t kg, mg, np;  /* K per group, channels per group, output pixels */
    int8_t *wq;          /* [m][kg], (ky, kx, channel) order */
    int8_t *packed;      /* wq packed per group (slim_qgemm_pack), or with
                            q.dw_layout taps x C */
    int32_t *colsum;
    float *sw, *bias, *x, *res; /* x [n, c, h, w], res (or NULL) [n, m, oh, ow] */
} tq_problem;

/* What image 2 of every 4 is (0 mixed signs, 1 all positive, 3 an outlier
 * pixel): all zero, or all negative (zero point 255). */
typedef enum { TQ_IMAGE2_ZERO, TQ_IMAGE2_NEGATIVE } tq_image2;

/* q (its geometry; shaped here; dw_layout honoured) with random weights, scales and bias, n
 * images and, when residual, a residual of the output's shape. */
void tq_make(const slim_qconv *q, int64_t n, tq_image2 image2, bool residual, uint64_t *rng,
             tq_problem *p);
void tq_unmake(tq_problem *p);

/* One image's codes by their definition, written out: 255 levels over
 * [min(0, min x), max(0, max x)], the zero point the code of 0.0, codes
 * round(x * (1 / scale)) + zp in [0, 255], rounding half to even. */
void tq_define_codes(const float *x, int64_t n, uint8_t *q, float *sx, int32_t *zx);

/* Runs p's n images in one batch with w, then each alone (its slice of
 * w's residual), and asserts each output bitwise the same; what names the
 * case in a failure. */
void tq_assert_batch_independent(const tq_problem *p, int64_t n, const slim_qconv_weights *w,
                                 const char *what);

/* With w (its activation one that keeps a NaN, no residual), a NaN or an
 * infinity at element `at` of image 1 of p's n >= 3 gives image 1 all NaN
 * outputs and leaves images 0 and 2 bitwise as they were; then image 0 all
 * zeros (p's images are overwritten), without a Clip, gives the bias. */
void tq_assert_non_finite_and_zero(tq_problem *p, int64_t n, const slim_qconv_weights *w,
                                   int64_t at);

/* [n][a][b] -> [n][b][a]: NCHW <-> NHWC with a = C, b = H * W or back. */
void tq_swap_inner(const float *src, float *dst, int64_t n, int64_t a, int64_t b);

/* slim_init, then suite; 1 when a case failed. */
int tq_main(Suite *suite);

#endif
