/*
 * kernels/cpu/resize.c - Resize (opsets 10, 11-19) and Upsample (7, 9).
 *
 * Resizing is separable. Along each axis, an output position maps back to a
 * source coordinate (coordinate_transformation_mode) and takes a weighted
 * sum of a few neighbours there (the mode's filter). So:
 *
 *   - linear and cubic run one 1-D pass per resized axis over a float work
 *     buffer. The taps (source indices and weights) of every output position
 *     are computed once per axis, not once per element, and a pass over an
 *     outer axis is a sum of whole contiguous rows, which vectorizes.
 *   - nearest picks one source index per output position and axis; that is
 *     a pure gather, done in one pass for any dtype.
 *
 * The coordinate and filter formulas follow the ONNX reference implementation
 * (onnx/reference/ops/op_resize.py), which is what the conformance data was
 * made from, including its use of the unrounded output length (scale * in)
 * in align_corners and tf_crop_and_resize. Opset 10 Resize and Upsample
 * predate the coordinate modes: they behave as "asymmetric" with
 * onnxruntime's "simple" nearest rounding (floor when enlarging, ceil when
 * shrinking).
 *
 * The coordinates, nearest rules and filter taps are in resize_coords.c;
 * this file parses the attributes, plans a run and runs the passes.
 */
#include "resize_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- attributes ---------------------------------------------------------- */

static slim_status parse_enum(const slim_node *n, const char *attr, const char *dflt,
                              const char *const *names, int count, int *out, slim_err *err)
{
    const char *v = slim_attr_str(n, attr, dflt);
    for (int i = 0; i < count; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return SLIM_OK;
        }
    return slim_errf(err, SLIM_EINVAL, "unknown %s \"%s\"", attr, v);
}

static slim_status prepare_common(slim_node *node, resize_iface iface, void **state,
                                  slim_err *err)
{
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric",
                                         "pytorch_half_pixel", "align_corners",
                                         "asymmetric", "tf_crop_and_resize"};
    static const char *const rules[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                        "ceil"};
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};

    /* raw: fixed-size load-time state, freed with the model */
    resize_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->iface = iface;
    int v = 0;
    slim_status s;
    if ((s = parse_enum(node, "mode", "nearest", modes, 3, &v, err)))
        goto fail;
    st->mode = (resize_mode)v;
    if (iface != IFACE_ROI_SCALES_SIZES) {
        /* Before opset 11 there were no coordinate modes and no cubic. */
        if (st->mode == MODE_CUBIC) {
            s = slim_errf(err, SLIM_EINVAL, "mode \"cubic\" needs opset 11 or later");
            goto fail;
        }
        st->coord = COORD_ASYMMETRIC;
        st->nearest = NEAREST_SIMPLE;
    } else {
        if ((s = parse_enum(node, "coordinate_transformation_mode", "half_pixel", coords, 6,
                            &v, err)))
            goto fail;
        st->coord = (coord_mode)v;
        if ((s = parse_enum(node, "nearest_mode", "round_prefer_floor", rules, 4, &v, err)))
            goto fail;
        st->nearest = (nearest_rule)v;
    }
    if ((s = parse_enum(node, "keep_aspect_ratio_policy", "stretch", policies, 3, &v, err)))
        goto fail;
    st->policy = (aspect_policy)v;
    st->cubic_a = slim_attr_float(node, "cubic_coeff_a", -0.75f);
    st->extrapolation = slim_attr_float(node, "extrapolation_value", 0.0f);
    st->exclude_outside = slim_attr_int(node, "exclude_outside", 0) != 0;
    /* The spec applies antialiasing to linear and cubic only. */
    st->antialias = slim_attr_int(node, "antialias", 0) != 0 && st->mode != MODE_NEAREST;

    if (slim_node_attr(node, "axes")) {
        st->n_axes = slim_attr_ints(node, "axes", st->axes, SLIM_MAX_DIMS);
        if (st->n_axes < 1 || st->n_axes > SLIM_MAX_DIMS) {
            s = slim_errf(err, SLIM_EINVAL, "attribute axes must list 1 to %d axes",
                          SLIM_MAX_DIMS);
            goto fail;
        }
    }
    if (iface == IFACE_SCALES_ATTR) {
        const slim_attr *a = slim_node_attr(node, "scales");
        if (!a || a->type != SLIM_ATTR_FLOATS || a->n < 1 || a->n > SLIM_MAX_DIMS) {
            s = slim_errf(err, SLIM_EINVAL, "attribute scales (1 to %d floats) is required",
                          SLIM_MAX_DIMS);
            goto fail;
        }
        st->n_attr_scales = a->n;
        memcpy(st->attr_scales, a->floats, sizeof(float) * a->n);
    }
    *state = st;
    return SLIM_OK;
fail:
    free(st);
    return s;
}

static slim_status prepare_upsample7(slim_node *n, void **st, slim_err *err)
{
    return prepare_common(n, IFACE_SCALES_ATTR, st, err);
}

static slim_status prepare_scales_input(slim_node *n, void **st, slim_err *err)
{
    return prepare_common(n, IFACE_SCALES_INPUT, st, err);
}

static slim_status prepare_resize11(slim_node *n, void **st, slim_err *err)
{
    return prepare_common(n, IFACE_ROI_SCALES_SIZES, st, err);
}

static void release_state(void *st)
{
    free(st);
}

/* ---- planning ------------------------------------------------------------ */

static slim_status read_floats(const slim_tensor *t, const char *what, double *out, int cap,
                               int *n, slim_err *err)
{
    *n = 0;
    if (!t)
        return SLIM_OK;
    if (!slim_dtype_is_float(t->dtype))
        return slim_errf(err, SLIM_ETYPE, "%s must be a float tensor, got %s", what,
                         slim_dtype_name(t->dtype));
    int64_t count = slim_tensor_numel(t);
    if (count > cap)
        return slim_errf(err, SLIM_EINVAL, "%s has %lld elements, at most %d expected", what,
                         (long long)count, cap);
    if (count > 0 && !t->data)
        return slim_errf(err, SLIM_ENEEDVALUE, "%s is not known before run time", what);
    for (int64_t i = 0; i < count; i++)
        out[i] = slim_load_f64(t->dtype, t->data, i);
    *n = (int)count;
    return SLIM_OK;
}

/* Output lengths this large mean a mistaken scale, not a real image. */
#define MAX_OUTPUT_LEN ((double)(1LL << 40))

static slim_status build_plan(const slim_op_ctx *ctx, resize_plan *p)
{
    const resize_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_err *err = ctx->err;
    int r = x->ndim;
    if (r < 1)
        return slim_errf(err, SLIM_EINVAL, "input X must have at least 1 dimension");
    p->rank = r;
    for (int i = 0; i < r; i++) {
        p->in[i] = p->out[i] = x->dims[i];
        p->scale[i] = 1.0;
        p->length[i] = (double)x->dims[i];
        p->roi_lo[i] = 0.0;
        p->roi_hi[i] = 1.0;
    }

    int axes[SLIM_MAX_DIMS], n_axes = st->n_axes ? st->n_axes : r;
    bool seen[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < n_axes; i++) {
        if (!st->n_axes) {
            axes[i] = i;
            continue;
        }
        slim_status s = slim_norm_axis(st->axes[i], r, &axes[i], err);
        if (s)
            return s;
        if (seen[axes[i]])
            return slim_errf(err, SLIM_EINVAL, "axis %d appears twice in axes", axes[i]);
        seen[axes[i]] = true;
    }

    double scales[SLIM_MAX_DIMS], roi[2 * SLIM_MAX_DIMS];
    int64_t sizes[SLIM_MAX_DIMS];
    int n_scales = 0, n_sizes = 0, n_roi = 0;
    slim_status s = SLIM_OK;
    switch (st->iface) {
    case IFACE_SCALES_ATTR:
        n_scales = st->n_attr_scales;
        for (int i = 0; i < n_scales; i++)
            scales[i] = st->attr_scales[i];
        break;
    case IFACE_SCALES_INPUT:
        if (!slim_opt_in(ctx, 1))
            return slim_errf(err, SLIM_EINVAL, "input scales is required");
        s = read_floats(ctx->in[1], "scales", scales, SLIM_MAX_DIMS, &n_scales, err);
        break;
    case IFACE_ROI_SCALES_SIZES:
        s = read_floats(slim_opt_in(ctx, 2), "scales", scales, SLIM_MAX_DIMS, &n_scales, err);
        if (!s && slim_opt_in(ctx, 3))
            s = slim_read_ints(ctx->in[3], "sizes", sizes, SLIM_MAX_DIMS, &n_sizes, err);
        if (!s && st->coord == COORD_TF_CROP_AND_RESIZE)
            s = read_floats(slim_opt_in(ctx, 1), "roi", roi, 2 * SLIM_MAX_DIMS, &n_roi, err);
        break;
    }
    if (s)
        return s;
    if (n_scales && n_sizes)
        return slim_errf(err, SLIM_EINVAL, "only one of scales and sizes may be given");
    if (!n_scales && !n_sizes)
        return slim_errf(err, SLIM_EINVAL, "one of scales and sizes must be given");
    int n_given = n_scales ? n_scales : n_sizes;
    if (n_given != n_axes)
        return slim_errf(err, SLIM_EINVAL, "%s has %d values, expected %d (one per %s)",
                         n_scales ? "scales" : "sizes", n_given, n_axes,
                         st->n_axes ? "entry of axes" : "input dimension");

    if (n_scales) {
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            double len = scales[i] * (double)p->in[a];
            if (!(scales[i] > 0) || !(len < MAX_OUTPUT_LEN))
                return slim_errf(err, SLIM_EINVAL, "scale %g for axis %d is out of range",
                                 scales[i], a);
            p->scale[a] = scales[i];
            p->length[a] = len;
            p->out[a] = (int64_t)floor(len);
        }
    } else if (st->policy == KEEP_STRETCH) {
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            if (sizes[i] < 0 || (double)sizes[i] >= MAX_OUTPUT_LEN)
                return slim_errf(err, SLIM_EINVAL, "size %lld for axis %d is out of range",
                                 (long long)sizes[i], a);
            p->out[a] = sizes[i];
            p->length[a] = (double)sizes[i];
            p->scale[a] = p->in[a] ? (double)sizes[i] / (double)p->in[a] : 1.0;
        }
    } else {
        /* One scale for all axes, the one that keeps the result inside
         * (not_larger) or around (not_smaller) the requested box. */
        double keep = 0;
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            if (sizes[i] < 0 || (double)sizes[i] >= MAX_OUTPUT_LEN || p->in[a] == 0)
                return slim_errf(err, SLIM_EINVAL, "size %lld for axis %d is out of range",
                                 (long long)sizes[i], a);
            double sc = (double)sizes[i] / (double)p->in[a];
            if (i == 0 || (st->policy == KEEP_NOT_LARGER ? sc < keep : sc > keep))
                keep = sc;
        }
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            p->scale[a] = keep;
            p->length[a] = keep * (double)p->in[a];
            p->out[a] = (int64_t)(p->length[a] + 0.5);
        }
    }

    if (n_roi) {
        if (n_roi != 2 * n_axes)
            return slim_errf(err, SLIM_EINVAL, "roi has %d values, expected %d", n_roi,
                             2 * n_axes);
        for (int i = 0; i < n_axes; i++) {
            p->roi_lo[axes[i]] = roi[i];
            p->roi_hi[axes[i]] = roi[n_axes + i];
        }
    }
    for (int a = 0; a < r; a++)
        if (p->in[a] == 0 && p->out[a] > 0)
            return slim_errf(err, SLIM_EINVAL, "cannot resize axis %d from length 0 to %lld",
                             a, (long long)p->out[a]);
    return SLIM_OK;
}

static slim_status resize_infer(slim_op_ctx *ctx)
{
    resize_plan p;
    slim_status s = build_plan(ctx, &p);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0];
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, p.rank, p.out);
    return SLIM_OK;
}

/* ---- linear / cubic: one pass per axis ----------------------------------- */

typedef struct pass_job {
    const float *src;
    float *dst;
    int64_t in_len, out_len, inner;
    const axis_taps *taps;
    float fill;
} pass_job;

static void pass_rows(int64_t begin, int64_t end, void *user)
{
    const pass_job *j = user;
    int n = j->taps->n;
    int64_t inner = j->inner;
    int64_t outer = begin / j->out_len, o = begin % j->out_len;
    for (int64_t r = begin; r < end; r++, o++) {
        if (o == j->out_len)
            o = 0, outer++;
        float *d = j->dst + r * inner;
        const float *s = j->src + outer * j->in_len * inner;
        const int64_t *idx = j->taps->idx + o * n;
        const double *w = j->taps->w + o * n;
        if (j->taps->extrap[o]) {
            for (int64_t e = 0; e < inner; e++)
                d[e] = j->fill;
        } else if (inner == 1) {
            double acc = 0;
            for (int k = 0; k < n; k++)
                acc += w[k] * s[idx[k]];
            d[0] = (float)acc;
        } else {
            /* Sums run in double, a block at a time: cubic weights
             * overshoot and cancel, and float sums lose the small values. */
            double acc[256];
            for (int64_t e0 = 0; e0 < inner; e0 += 256) {
                int64_t m = inner - e0 < 256 ? inner - e0 : 256;
                const float *s0 = s + idx[0] * inner + e0;
                for (int64_t e = 0; e < m; e++)
                    acc[e] = w[0] * s0[e];
                for (int k = 1; k < n; k++) {
                    if (w[k] == 0)
                        continue;
                    const float *sk = s + idx[k] * inner + e0;
                    double wk = w[k];
                    for (int64_t e = 0; e < m; e++)
                        acc[e] += wk * sk[e];
                }
                for (int64_t e = 0; e < m; e++)
                    d[e0 + e] = (float)acc[e];
            }
        }
    }
}

static slim_status scratch_f32(slim_tensor *t, int64_t numel, slim_err *err)
{
    memset(t, 0, sizeof(*t));
    t->dtype = SLIM_F32;
    t->ndim = 1;
    t->dims[0] = numel;
    return slim_tensor_alloc(t, err);
}

/* Stores float v into an integer type with rounding and saturation, the way
 * image pipelines expect uint8 results of a bilinear resize to behave. */
static void store_rounded(slim_dtype dt, void *data, int64_t i, float v)
{
    double lo = 0, hi = 0, r = nearbyint((double)v);
    switch (dt) {
    case SLIM_U8: lo = 0, hi = 255; break;
    case SLIM_I8: lo = -128, hi = 127; break;
    case SLIM_U16: lo = 0, hi = 65535; break;
    case SLIM_I16: lo = -32768, hi = 32767; break;
    case SLIM_I32: lo = -2147483648.0, hi = 2147483647.0; break;
    default: lo = -9.2e18, hi = 9.2e18; break;
    }
    slim_store_i64(dt, data, i, (int64_t)(r < lo ? lo : r > hi ? hi : r));
}

static slim_status exec_filtered(slim_op_ctx *ctx, const resize_plan *p)
{
    const resize_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    slim_err *err = ctx->err;
    slim_status s = SLIM_OK;
    int r = p->rank;
    int64_t in_numel = slim_tensor_numel(x), out_numel = slim_tensor_numel(y);

    axis_taps taps[SLIM_MAX_DIMS];
    slim_tensor cur = {0}, next = {0}; /* float work buffers */
    bool active[SLIM_MAX_DIMS];
    int last_active = -1;
    memset(taps, 0, sizeof(taps));
    for (int a = 0; a < r; a++) {
        if ((s = slim__resize_compute_taps(st, p, a, &taps[a], err)))
            goto release;
        active[a] = !slim__resize_taps_are_identity(&taps[a], p->in[a], p->out[a]);
        if (active[a])
            last_active = a;
    }

    const float *src;
    if (x->dtype == SLIM_F32) {
        src = x->data;
    } else {
        if ((s = scratch_f32(&cur, in_numel, err)))
            goto release;
        float *c = cur.data;
        for (int64_t i = 0; i < in_numel; i++)
            c[i] = (float)slim_load_f64(x->dtype, x->data, i);
        src = c;
    }

    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, p->in, sizeof(dims));
    for (int a = 0; a < r; a++) {
        if (!active[a])
            continue;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < a; i++)
            outer *= dims[i];
        for (int i = a + 1; i < r; i++)
            inner *= dims[i];
        float *dst;
        if (a == last_active && y->dtype == SLIM_F32) {
            dst = y->data;
        } else {
            if ((s = scratch_f32(&next, outer * p->out[a] * inner, err)))
                goto release;
            dst = next.data;
        }
        pass_job job = {src, dst, p->in[a], p->out[a], inner, &taps[a], st->extrapolation};
        int64_t rows = outer * p->out[a];
        int64_t per_row = inner * taps[a].n;
        slim_parallel_for(rows, per_row >= 4096 ? 1 : 4096 / per_row, pass_rows, &job);
        slim_tensor_release(&cur);
        cur = next;
        memset(&next, 0, sizeof(next));
        src = dst;
        dims[a] = p->out[a];
    }

    /* src now holds the result as float, unless the last pass wrote y. */
    if (last_active < 0 || y->dtype != SLIM_F32) {
        if (y->dtype == SLIM_F32)
            memcpy(y->data, src, sizeof(float) * out_numel);
        else if (slim_dtype_is_float(y->dtype))
            for (int64_t i = 0; i < out_numel; i++)
                slim_store_f64(y->dtype, y->data, i, src[i]);
        else
            for (int64_t i = 0; i < out_numel; i++)
                store_rounded(y->dtype, y->data, i, src[i]);
    }
release:
    slim_tensor_release(&cur);
    slim_tensor_release(&next);
    for (int a = 0; a < r; a++)
        slim__resize_taps_free(&taps[a]);
    return s;
}

/* ---- nearest: one gather -------------------------------------------------- */

typedef struct gather_job {
    const uint8_t *src;
    uint8_t *dst;
    int rank;
    size_t esize;
    const int64_t *out_dims;
    int64_t *const *offsets; /* per axis, source element offset or -1 */
    uint8_t fill[8];
} gather_job;

static void gather_rows(int64_t begin, int64_t end, void *user)
{
    const gather_job *j = user;
    int last = j->rank - 1;
    int64_t width = j->out_dims[last];
    const int64_t *col = j->offsets[last];
    size_t es = j->esize;
    for (int64_t row = begin; row < end; row++) {
        int64_t base = 0, rem = row;
        bool fill_row = false;
        for (int a = last - 1; a >= 0; a--) {
            int64_t off = j->offsets[a][rem % j->out_dims[a]];
            rem /= j->out_dims[a];
            if (off < 0)
                fill_row = true;
            base += off;
        }
        uint8_t *d = j->dst + (size_t)(row * width) * es;
        for (int64_t c = 0; c < width; c++, d += es) {
            if (fill_row || col[c] < 0) {
                memcpy(d, j->fill, es);
                continue;
            }
            const uint8_t *s = j->src + (size_t)(base + col[c]) * es;
            switch (es) {
            case 1: *d = *s; break;
            case 2: memcpy(d, s, 2); break;
            case 4: memcpy(d, s, 4); break;
            default: memcpy(d, s, es); break;
            }
        }
    }
}

static slim_status exec_nearest(slim_op_ctx *ctx, const resize_plan *p)
{
    const resize_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int r = p->rank;
    int64_t strides[SLIM_MAX_DIMS];
    slim_contiguous_strides(r, p->in, strides);

    int64_t *offsets[SLIM_MAX_DIMS] = {NULL};
    slim_status s = SLIM_OK;
    for (int a = 0; a < r; a++) {
        offsets[a] = slim_scratch_malloc(sizeof(int64_t) * (size_t)(p->out[a] + 1));
        if (!offsets[a]) {
            s = slim_scratch_oom(ctx->err);
            goto done;
        }
        for (int64_t o = 0; o < p->out[a]; o++) {
            int64_t i = slim__resize_nearest_index(st, p, a, o);
            offsets[a][o] = i < 0 ? -1 : i * strides[a];
        }
    }
    gather_job job = {x->data, y->data, r, slim_dtype_size(x->dtype), p->out, offsets, {0}};
    slim_store_f64(x->dtype, job.fill, 0, st->extrapolation);
    int64_t rows = slim_tensor_numel(y) / p->out[r - 1];
    int64_t grain = p->out[r - 1] >= 4096 ? 1 : 4096 / p->out[r - 1];
    slim_parallel_for(rows, grain, gather_rows, &job);
done:
    for (int a = 0; a < r; a++)
        slim_scratch_free(offsets[a]);
    return s;
}

static slim_status resize_exec(slim_op_ctx *ctx)
{
    const resize_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    resize_plan p;
    slim_status s = build_plan(ctx, &p);
    if (s)
        return s;
    if (!ctx->out[0] || slim_tensor_numel(ctx->out[0]) == 0)
        return SLIM_OK;
    if (st->mode == MODE_NEAREST)
        return exec_nearest(ctx, &p);
    if (x->dtype == SLIM_BOOL)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "%s resize of bool data",
                         st->mode == MODE_LINEAR ? "linear" : "cubic");
    return exec_filtered(ctx, &p);
}

static slim_status resize_infer_checked(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    if (!x)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X is required");
    if (x->dtype == SLIM_DTYPE_UNDEFINED || x->dtype >= SLIM_DTYPE_COUNT)
        return slim_errf(ctx->err, SLIM_ETYPE, "input X has no data type");
    return resize_infer(ctx);
}

const slim_op_def slim__ops_resize[] = {
    {"Upsample", 7, prepare_upsample7, release_state, resize_infer_checked, resize_exec, 0},
    {"Upsample", 9, prepare_scales_input, release_state, resize_infer_checked, resize_exec, 0},
    {"Resize", 10, prepare_scales_input, release_state, resize_infer_checked, resize_exec, 0},
    {"Resize", 11, prepare_resize11, release_state, resize_infer_checked, resize_exec, 0},
    {0},
};
