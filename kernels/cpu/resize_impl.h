/*
 * resize_impl.h - what resize.c (Resize and Upsample: attributes, plan,
 * passes) and resize_coords.c (source coordinates and filter taps) share.
 */
#ifndef SLIM_RESIZE_IMPL_H
#define SLIM_RESIZE_IMPL_H

#include "kernel.h"

typedef enum { MODE_NEAREST, MODE_LINEAR, MODE_CUBIC } resize_mode;

typedef enum {
    COORD_HALF_PIXEL,
    COORD_HALF_PIXEL_SYMMETRIC,
    COORD_PYTORCH_HALF_PIXEL,
    COORD_ALIGN_CORNERS,
    COORD_ASYMMETRIC,
    COORD_TF_CROP_AND_RESIZE,
} coord_mode;

typedef enum {
    NEAREST_ROUND_PREFER_FLOOR,
    NEAREST_ROUND_PREFER_CEIL,
    NEAREST_FLOOR,
    NEAREST_CEIL,
    NEAREST_SIMPLE, /* opset < 11: floor when enlarging, ceil when shrinking */
} nearest_rule;

typedef enum { KEEP_STRETCH, KEEP_NOT_LARGER, KEEP_NOT_SMALLER } aspect_policy;

/* Where the target size comes from; the op's inputs changed across opsets. */
typedef enum {
    IFACE_SCALES_ATTR,  /* Upsample-7: attribute scales */
    IFACE_SCALES_INPUT, /* Upsample-9, Resize-10: (X, scales) */
    IFACE_ROI_SCALES_SIZES, /* Resize-11+: (X, roi, scales, sizes) */
} resize_iface;

typedef struct resize_state {
    resize_iface iface;
    resize_mode mode;
    coord_mode coord;
    nearest_rule nearest;
    aspect_policy policy;
    float cubic_a;
    float extrapolation;
    bool exclude_outside;
    bool antialias;
    int n_axes; /* 0: all axes */
    int64_t axes[SLIM_MAX_DIMS];
    int n_attr_scales;
    float attr_scales[SLIM_MAX_DIMS];
} resize_state;

/* Per-run geometry, derived from input shapes and the scales/sizes values. */
typedef struct resize_plan {
    int rank;
    int64_t in[SLIM_MAX_DIMS], out[SLIM_MAX_DIMS];
    double scale[SLIM_MAX_DIMS];
    double length[SLIM_MAX_DIMS]; /* output length before rounding */
    double roi_lo[SLIM_MAX_DIMS], roi_hi[SLIM_MAX_DIMS];
} resize_plan;

/* Taps of one axis for linear/cubic: output position o reads source rows
 * idx[o*n .. o*n+n) with weights w[...]; extrap[o] set means "fill". */
typedef struct axis_taps {
    int n;
    int64_t *idx;
    double *w;
    uint8_t *extrap;
} axis_taps;

/* The source index of output position y along axis a (nearest mode). */
int64_t slim__resize_nearest_index(const resize_state *st, const resize_plan *p, int a,
                                   int64_t y);
/* Fills t with axis a's linear/cubic taps; slim__resize_taps_free frees them. */
slim_status slim__resize_compute_taps(const resize_state *st, const resize_plan *p, int a,
                                      axis_taps *t, slim_err *err);
void slim__resize_taps_free(axis_taps *t);
/* Whether taps reproduce the input (that axis is skipped). */
bool slim__resize_taps_are_identity(const axis_taps *t, int64_t in, int64_t out);

#endif
