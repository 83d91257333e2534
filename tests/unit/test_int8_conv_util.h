/*
 * test_int8_conv_util.h - what the int8 convolution's tests
 * (test_int8_conv.c: the per-row path and the pass; test_int8_conv_image.c:
 * the per-image path) share: a seeded xorshift stream, one problem (int8
 * weights packed per group, their scales, a bias, a batch of images of
 * different kinds, a residual) and the NCHW <-> NHWC swap.
 *
 *     static uint64_t rng = 0x2545F4914F6CDD1Dull;
 *     slim_qconv q = {...};
 *     tq_problem p;
 *     tq_make(&q, 3, TQ_IMAGE2_ZERO, false, &rng, &p);
 *     ... slim_qconv_run(&p.q, 3, p.x, &w, y, &err) ...
 *     tq_unmake(&p);
 *
 * Each test keeps its own stream state, so its values are drawn in the
 * same order from the same seed as when these lived in each file.
 */
#ifndef SLIM_TEST_INT8_CONV_UTIL_H
#define SLIM_TEST_INT8_CONV_UTIL_H

#include "qgemm.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

/* The next value of the stream *state, and one in [-1, 1). */
uint32_t tq_rnd(uint64_t *state);
float tq_rndf(uint64_t *state);

typedef struct {
    slim_qconv q;
    int64_t kg, mg, np;  /* K per group, channels per group, output pixels */
    int8_t *wq;          /* [m][kg], (ky, kx, channel) order */
    int8_t *packed;      /* wq packed per group (slim_qgemm_pack) */
    int32_t *colsum;
    float *sw, *bias, *x, *res; /* x [n, c, h, w], res (or NULL) [n, m, oh, ow] */
} tq_problem;

/* What image 2 of every 4 is (0 mixed signs, 1 all positive, 3 an outlier
 * pixel): all zero, or all negative (zero point 255). */
typedef enum { TQ_IMAGE2_ZERO, TQ_IMAGE2_NEGATIVE } tq_image2;

/* q (its geometry; shaped here) with random weights, scales and bias, n
 * images and, when residual, a residual of the output's shape. */
void tq_make(const slim_qconv *q, int64_t n, tq_image2 image2, bool residual, uint64_t *rng,
             tq_problem *p);
void tq_unmake(tq_problem *p);

/* [n][a][b] -> [n][b][a]: NCHW <-> NHWC with a = C, b = H * W or back. */
void tq_swap_inner(const float *src, float *dst, int64_t n, int64_t a, int64_t b);

/* slim_init, then suite; 1 when a case failed. */
int tq_main(Suite *suite);

#endif
