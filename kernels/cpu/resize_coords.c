/*
 * resize_coords.c - where Resize reads from: each output position's source
 * coordinate under the coordinate_transformation_mode, the nearest rules,
 * and the linear/cubic taps of one axis (antialiased when shrinking).
 * resize.c plans and runs the op with them.
 */
#include "resize_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- coordinates and filters --------------------------------------------- */

/* The source coordinate of output position y along axis a. */
static double source_coord(const resize_state *st, const resize_plan *p, int a, int64_t y)
{
    double in = (double)p->in[a], scale = p->scale[a], len = p->length[a];
    double yd = (double)y;
    switch (st->coord) {
    case COORD_HALF_PIXEL:
        return (yd + 0.5) / scale - 0.5;
    case COORD_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)p->out[a] / len;
        double offset = in / 2 * (1 - adjustment);
        return offset + (yd + 0.5) / scale - 0.5;
    }
    case COORD_PYTORCH_HALF_PIXEL:
        /* The spec's and onnxruntime's rule for a length-1 output. The
         * ONNX reference departs from it there (-0.5, or the half_pixel
         * formula when scale * in is not exactly 1); no node test covers
         * the difference, and models are checked against onnxruntime. */
        return p->out[a] > 1 ? (yd + 0.5) / scale - 0.5 : 0.0;
    case COORD_ALIGN_CORNERS:
        return len == 1 ? 0.0 : yd * (in - 1) / (len - 1);
    case COORD_ASYMMETRIC:
        return yd / scale;
    case COORD_TF_CROP_AND_RESIZE: {
        double lo = p->roi_lo[a], hi = p->roi_hi[a];
        double x = len == 1 ? (hi - lo) * (in - 1) / 2 : yd * (hi - lo) * (in - 1) / (len - 1);
        return x + lo * (in - 1);
    }
    }
    return 0;
}

static bool is_extrapolated(const resize_state *st, const resize_plan *p, int a, double x)
{
    return st->coord == COORD_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(p->in[a] - 1));
}

/* Keeps a source coordinate (from a wild roi or scale, even NaN) inside a
 * range where int64 arithmetic is safe; beyond the edge every tap clamps to
 * the border anyway. */
static double tame_coord(double x, int64_t in, int64_t taps)
{
    double margin = (double)taps + 2;
    return fmin(fmax(x, -margin), (double)in + margin);
}

static int64_t clamp_index(int64_t i, int64_t n)
{
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* Source index for nearest mode; -1 marks an extrapolated position. */
int64_t slim__resize_nearest_index(const resize_state *st, const resize_plan *p, int a,
                                   int64_t y)
{
    double x = source_coord(st, p, a, y);
    if (is_extrapolated(st, p, a, x))
        return -1;
    x = tame_coord(x, p->in[a], 1);
    double fl = floor(x), frac = x - fl;
    int64_t i = (int64_t)fl;
    if (frac != 0) {
        switch (st->nearest) {
        case NEAREST_ROUND_PREFER_FLOOR: i += frac > 0.5; break;
        case NEAREST_ROUND_PREFER_CEIL: i += frac >= 0.5; break;
        case NEAREST_FLOOR: break;
        case NEAREST_CEIL: i += 1; break;
        case NEAREST_SIMPLE: i += p->scale[a] < 1; break;
        }
    }
    return clamp_index(i, p->in[a]);
}

static double cubic_kernel(double x, double A)
{
    x = fabs(x);
    if (x <= 1)
        return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2)
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

void slim__resize_taps_free(axis_taps *t)
{
    slim_scratch_free(t->idx);
    slim_scratch_free(t->w);
    slim_scratch_free(t->extrap);
    memset(t, 0, sizeof(*t));
}

slim_status slim__resize_compute_taps(const resize_state *st, const resize_plan *p, int a,
                                      axis_taps *t, slim_err *err)
{
    int64_t in = p->in[a], out = p->out[a];
    /* Antialiasing widens the filter by 1/scale when shrinking, so that
     * every source pixel contributes (ONNX's _*_coeffs_antialias). */
    double support = st->mode == MODE_LINEAR ? 1.0 : 2.0;
    double fscale = st->antialias && p->scale[a] < 1 ? p->scale[a] : 1.0;
    int64_t start = (int64_t)floor(-support / fscale) + 1;
    int64_t n = 2 - 2 * start;
    if (n > 4 * in + 8)
        return slim_errf(err, SLIM_EINVAL, "scale %g on axis %d is too small to antialias",
                         p->scale[a], a);
    t->n = (int)n;
    t->idx = slim_scratch_malloc(sizeof(*t->idx) * (size_t)(out * n + 1));
    t->w = slim_scratch_malloc(sizeof(*t->w) * (size_t)(out * n + 1));
    t->extrap = slim_scratch_calloc((size_t)out + 1, 1);
    double *wk = slim_scratch_malloc(sizeof(double) * (size_t)n);
    if (!t->idx || !t->w || !t->extrap || !wk) {
        slim_scratch_free(wk);
        slim__resize_taps_free(t);
        return slim_scratch_oom(err);
    }
    for (int64_t o = 0; o < out; o++) {
        int64_t *idx = t->idx + o * n;
        double *w = t->w + o * n;
        double x = source_coord(st, p, a, o);
        if (is_extrapolated(st, p, a, x)) {
            t->extrap[o] = 1;
            for (int64_t k = 0; k < n; k++)
                idx[k] = 0, w[k] = 0;
            continue;
        }
        x = tame_coord(x, in, n);
        /* The reference prefers the left neighbour: at an exact integer
         * coordinate the base is one lower with ratio 1. */
        double base = floor(x), ratio = x - base;
        if (ratio == 0)
            base -= 1, ratio = 1;
        double sum = 0;
        for (int64_t k = 0; k < n; k++) {
            double d = ((double)(start + k) - ratio) * fscale;
            wk[k] = st->mode == MODE_LINEAR ? fmax(0.0, 1.0 - fabs(d))
                                            : cubic_kernel(d, st->cubic_a);
            int64_t i = (int64_t)base + start + k;
            if (st->exclude_outside && (i < 0 || i >= in))
                wk[k] = 0;
            sum += wk[k];
            idx[k] = clamp_index(i, in);
        }
        bool normalize = fscale < 1 || st->exclude_outside;
        for (int64_t k = 0; k < n; k++)
            w[k] = normalize && sum != 0 ? wk[k] / sum : wk[k];
    }
    slim_scratch_free(wk);
    return SLIM_OK;
}

/* An axis whose taps reproduce the input is skipped. */
bool slim__resize_taps_are_identity(const axis_taps *t, int64_t in, int64_t out)
{
    if (in != out)
        return false;
    for (int64_t o = 0; o < out; o++) {
        if (t->extrap[o])
            return false;
        for (int k = 0; k < t->n; k++) {
            double w = t->w[o * t->n + k];
            if (w != 0 && (w != 1 || t->idx[o * t->n + k] != o))
                return false;
        }
    }
    return true;
}
