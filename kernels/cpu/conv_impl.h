/*
 * conv_impl.h - what conv.c and conv_depthwise.c share: a Conv node applied
 * to concrete shapes (conv_plan), and the depthwise path's entry point.
 */
#ifndef SLIM_CONV_IMPL_H
#define SLIM_CONV_IMPL_H

#include "kernel.h"

#define MAX_SPATIAL 3

/* One node applied to concrete shapes. Spatial arrays are 3-D: a rank-n
 * problem occupies the last n entries and the others are size 1. */
typedef struct conv_plan {
    int64_t N, C, M, G;        /* batch, input and output channels, groups */
    int64_t in[MAX_SPATIAL], out[MAX_SPATIAL], kernel[MAX_SPATIAL];
    int64_t stride[MAX_SPATIAL], dilation[MAX_SPATIAL];
    int64_t pad_begin[MAX_SPATIAL], pad_end[MAX_SPATIAL];
    int64_t in_size, out_size, K; /* spatial element counts, kernel taps */
} conv_plan;

/* Depthwise Conv (C == M == G) of float32 x into y; bias may be NULL. */
slim_status slim__conv_depthwise(slim_op_ctx *ctx, const conv_plan *p, const float *x,
                                 const float *w, const float *bias, float *y);

#endif
