/*
 * vision.c - spatial sampling and detection heads: GridSample, AffineGrid,
 * RoiAlign, DeformConv (a 2-D convolution whose taps sample the input
 * bilinearly at learned offsets) and NonMaxSuppression.
 *
 * GridSample works in any number of spatial dims: each output point has,
 * per input dim, up to 4 taps (nearest 1, linear 2, cubic 4) with weights,
 * and the value is the sum over the tensor product of taps. Padding
 * (zeros, border, reflection) is resolved per tap index. Coordinates are
 * unnormalized in float32 like the ONNX reference and PyTorch, so that
 * "nearest" rounds exactly as they do at half-way points.
 *
 * NonMaxSuppression's output size depends on the scores: infer needs the
 * data and runs the selection, and exec runs it again to fill the output
 * (it is cheap next to the network that produced the boxes).
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- GridSample ---------------------------------------------------------- */

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

typedef struct {
    int mode, padding;
    bool align;
} gs_state;

static slim_status gs_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *mode = slim_attr_str(node, "mode", node->opset >= 20 ? "linear" : "bilinear");
    const char *pad = slim_attr_str(node, "padding_mode", "zeros");
    gs_state st = {0};
    if (strcmp(mode, "nearest") == 0)
        st.mode = GS_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        st.mode = GS_LINEAR;
    else if (strcmp(mode, "cubic") == 0 || strcmp(mode, "bicubic") == 0)
        st.mode = GS_CUBIC;
    else
        return slim_errf(err, SLIM_EINVAL, "mode \"%s\" is not nearest, linear or cubic", mode);
    if (strcmp(pad, "zeros") == 0)
        st.padding = GS_ZEROS;
    else if (strcmp(pad, "border") == 0)
        st.padding = GS_BORDER;
    else if (strcmp(pad, "reflection") == 0)
        st.padding = GS_REFLECTION;
    else
        return slim_errf(err, SLIM_EINVAL, "padding_mode \"%s\" is not zeros, border or "
                         "reflection", pad);
    st.align = slim_attr_int(node, "align_corners", 0) != 0;
    /* raw: fixed-size load-time state, freed with the model */
    gs_state *p = malloc(sizeof(*p));
    if (!p)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    *p = st;
    *state = p;
    return SLIM_OK;
}

static slim_status gs_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *g = ctx->in[1];
    char a[128], b[128];
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(g, "grid", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                   SLIM_DTYPE_UNDEFINED)))
        return s;
    const int r = x->ndim - 2;
    if (r < 1 || g->ndim != x->ndim || g->dims[0] != x->dims[0] || g->dims[g->ndim - 1] != r)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X %s and grid %s: X must be [N, C, spatial...] "
                         "and grid [N, out spatial..., %d]",
                         slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(g->ndim, g->dims, b, sizeof(b)), r);
    int64_t dims[SLIM_MAX_DIMS] = {x->dims[0], x->dims[1]};
    for (int i = 0; i < r; i++)
        dims[2 + i] = g->dims[1 + i];
    slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

/* The ONNX reference's (and PyTorch's) reflection into [lo, hi]. */
static double gs_reflect(double x, double lo, double hi)
{
    double rng = hi - lo;
    if (x < lo) {
        double dx = lo - x;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        int64_t n = (int64_t)(dx / rng);
        double r = dx - (double)n * rng;
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return x;
}

static void gs_cubic(double t, double c[4])
{
    const double A = -0.75;
    t = fabs(t);
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

/* Tap index i of a dim of length d after padding: an index inside, or -1
 * (reads as zero). */
static int64_t gs_tap(const gs_state *st, int64_t i, int64_t d)
{
    if (i >= 0 && i < d)
        return i;
    if (st->padding == GS_ZEROS)
        return -1;
    if (st->padding == GS_BORDER)
        return i < 0 ? 0 : d - 1;
    double lo = st->align ? 0.0 : -0.5, hi = st->align ? (double)d - 1 : (double)d - 0.5;
    int64_t j = (int64_t)gs_reflect((double)i, lo, hi);
    return j < 0 ? 0 : j >= d ? d - 1 : j;
}

static slim_status gs_exec(slim_op_ctx *ctx)
{
    const gs_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0], *g = ctx->in[1];
    slim_tensor *y = ctx->out[0];
    const int r = x->ndim - 2, K = st->mode == GS_NEAREST ? 1 : st->mode == GS_LINEAR ? 2 : 4;
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t in_sp = 1, out_sp = 1, combos = 1;
    for (int i = 0; i < r; i++) {
        in_sp *= x->dims[2 + i];
        out_sp *= g->dims[1 + i];
        combos *= K;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < out_sp; p++) {
            int64_t tap[SLIM_MAX_DIMS][4];
            double w[SLIM_MAX_DIMS][4];
            for (int i = 0; i < r; i++) {
                const int64_t d = x->dims[2 + i];
                /* grid's last dim lists coordinates innermost dim first. */
                float gn = (float)slim_load_f64(g->dtype, g->data, (n * out_sp + p) * r + (r - 1 - i));
                float v = st->align ? (gn + 1) / 2.0f * (float)(d - 1)
                                    : ((gn + 1) * (float)d - 1) / 2.0f;
                double xv = st->mode == GS_NEAREST ? nearbyint(v) : v;
                double lo = st->align ? 0.0 : -0.5, hi = st->align ? (double)d - 1 : (double)d - 0.5;
                if (xv < lo || xv > hi) {
                    if (st->padding == GS_BORDER)
                        xv = xv < 0 ? 0 : xv > (double)d - 1 ? (double)d - 1 : xv;
                    else if (st->padding == GS_REFLECTION)
                        xv = gs_reflect(xv, lo, hi);
                }
                if (!isfinite(xv)) { /* a NaN grid point reads nothing */
                    for (int k = 0; k < K; k++) {
                        tap[i][k] = -1;
                        w[i][k] = 0;
                    }
                    continue;
                }
                if (st->mode == GS_NEAREST) {
                    tap[i][0] = gs_tap(st, (int64_t)xv, d);
                    w[i][0] = 1;
                    continue;
                }
                double f = floor(xv);
                int64_t x0 = (int64_t)f;
                if (st->mode == GS_LINEAR) {
                    w[i][0] = 1 - (xv - f);
                    w[i][1] = xv - f;
                    tap[i][0] = gs_tap(st, x0, d);
                    tap[i][1] = gs_tap(st, x0 + 1, d);
                } else {
                    gs_cubic(xv - f, w[i]);
                    for (int k = 0; k < 4; k++)
                        tap[i][k] = gs_tap(st, x0 - 1 + k, d);
                }
            }
            for (int64_t c = 0; c < C; c++) {
                const int64_t base = (n * C + c) * in_sp;
                double acc = 0;
                for (int64_t m = 0; m < combos; m++) {
                    int64_t rem = m, off = 0;
                    double wt = 1;
                    bool zero = false;
                    for (int i = r - 1; i >= 0; i--) {
                        int k = (int)(rem % K);
                        rem /= K;
                        if (tap[i][k] < 0) {
                            zero = true;
                            break;
                        }
                        wt *= w[i][k];
                        int64_t stride = 1;
                        for (int j = i + 1; j < r; j++)
                            stride *= x->dims[2 + j];
                        off += tap[i][k] * stride;
                    }
                    if (!zero)
                        acc += wt * slim_load_f64(x->dtype, x->data, base + off);
                }
                slim_store_f64(y->dtype, y->data, (n * C + c) * out_sp + p, acc);
            }
        }
    return SLIM_OK;
}

/* ---- AffineGrid ---------------------------------------------------------- */

static slim_status ag_dims(slim_op_ctx *ctx, int64_t *sz, int *r)
{
    const slim_tensor *th = ctx->in[0];
    int n;
    char a[128];
    slim_status s = slim_check_dtype(th, "theta", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_read_ints(ctx->in[1], "size", sz, 5, &n, ctx->err)))
        return s;
    if (n != 4 && n != 5)
        return slim_errf(ctx->err, SLIM_ESHAPE, "size has %d entries, expected 4 (N,C,H,W) or 5 "
                         "(N,C,D,H,W)", n);
    *r = n - 2;
    if (th->ndim != 3 || th->dims[0] != sz[0] || th->dims[1] != *r || th->dims[2] != *r + 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "theta %s must be [%lld,%d,%d]",
                         slim_shape_str(th->ndim, th->dims, a, sizeof(a)), (long long)sz[0], *r,
                         *r + 1);
    for (int i = 0; i < n; i++)
        if (sz[i] < 0 || sz[i] > (1 << 24))
            return slim_errf(ctx->err, SLIM_EINVAL, "size[%d] = %lld is out of range", i,
                             (long long)sz[i]);
    return SLIM_OK;
}

static slim_status ag_infer(slim_op_ctx *ctx)
{
    int64_t sz[5];
    int r = 0;
    slim_status s = ag_dims(ctx, sz, &r);
    if (s)
        return s;
    int64_t dims[5] = {sz[0]};
    for (int i = 0; i < r; i++)
        dims[1 + i] = sz[2 + i];
    dims[1 + r] = r;
    slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, r + 2, dims);
    return SLIM_OK;
}

static slim_status ag_exec(slim_op_ctx *ctx)
{
    const slim_tensor *th = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t sz[5];
    int r = 0;
    slim_status s = ag_dims(ctx, sz, &r);
    if (s)
        return s;
    const bool align = slim_attr_int(ctx->node, "align_corners", 0) != 0;
    int64_t sp = 1;
    for (int i = 0; i < r; i++)
        sp *= sz[2 + i];
    for (int64_t n = 0; n < sz[0]; n++)
        for (int64_t p = 0; p < sp; p++) {
            /* Homogeneous base point: innermost dim (x) first, then 1. */
            double base[4];
            int64_t rem = p;
            for (int i = r - 1; i >= 0; i--) {
                int64_t d = sz[2 + i], k = rem % d;
                rem /= d;
                base[r - 1 - i] = align ? (d > 1 ? -1.0 + 2.0 * (double)k / (double)(d - 1) : -1.0)
                                        : -1.0 + (2.0 * (double)k + 1.0) / (double)d;
            }
            base[r] = 1;
            for (int o = 0; o < r; o++) {
                double acc = 0;
                for (int j = 0; j <= r; j++)
                    acc += slim_load_f64(th->dtype, th->data, (n * r + o) * (r + 1) + j) * base[j];
                slim_store_f64(y->dtype, y->data, (n * sp + p) * r + o, acc);
            }
        }
    return SLIM_OK;
}

/* ---- RoiAlign ------------------------------------------------------------ */

static slim_status roi_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *rois = ctx->in[1], *bi = ctx->in[2];
    char a[128], b[128];
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(bi, "batch_indices", ctx->err, SLIM_I64, SLIM_I32,
                                   SLIM_DTYPE_UNDEFINED)))
        return s;
    if (rois->dtype != x->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "rois is %s, expected X's type %s",
                         slim_dtype_name(rois->dtype), slim_dtype_name(x->dtype));
    if (x->ndim != 4 || rois->ndim != 2 || rois->dims[1] != 4 || bi->ndim != 1 ||
        bi->dims[0] != rois->dims[0])
        return slim_errf(ctx->err, SLIM_ESHAPE, "X must be [N,C,H,W], rois [R,4] and "
                         "batch_indices [R]; got X %s, rois %s",
                         slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(rois->ndim, rois->dims, b, sizeof(b)));
    int64_t oh = slim_attr_int(ctx->node, "output_height", 1);
    int64_t ow = slim_attr_int(ctx->node, "output_width", 1);
    int64_t sr = slim_attr_int(ctx->node, "sampling_ratio", 0);
    if (oh < 1 || ow < 1 || oh > (1 << 16) || ow > (1 << 16) || sr < 0 || sr > (1 << 10))
        return slim_errf(ctx->err, SLIM_EINVAL, "output_height %lld / output_width %lld must be "
                         "in [1, 65536] and sampling_ratio %lld in [0, 1024]", (long long)oh,
                         (long long)ow, (long long)sr);
    const char *mode = slim_attr_str(ctx->node, "mode", "avg");
    if (strcmp(mode, "avg") != 0 && strcmp(mode, "max") != 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "mode \"%s\" is not avg or max", mode);
    slim_tensor_set_shape(ctx->out[0], x->dtype, 4, (int64_t[]){rois->dims[0], x->dims[1], oh, ow});
    return SLIM_OK;
}

static slim_status roi_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *rois = ctx->in[1], *bi = ctx->in[2];
    slim_tensor *y = ctx->out[0];
    const int64_t R = rois->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t PH = y->dims[2], PW = y->dims[3];
    const int64_t sr = slim_attr_int(ctx->node, "sampling_ratio", 0);
    const double scale = slim_attr_float(ctx->node, "spatial_scale", 1.0f);
    const bool half = strcmp(slim_attr_str(ctx->node, "coordinate_transformation_mode",
                                           ctx->node->opset >= 16 ? "half_pixel" : "output_half_pixel"),
                             "half_pixel") == 0;
    const bool avg = strcmp(slim_attr_str(ctx->node, "mode", "avg"), "avg") == 0;
    for (int64_t n = 0; n < R; n++) {
        int64_t b = slim_load_i64(bi->dtype, bi->data, n);
        if (b < 0 || b >= x->dims[0])
            return slim_errf(ctx->err, SLIM_EINVAL, "batch_indices[%lld] = %lld is outside [0, %lld)",
                             (long long)n, (long long)b, (long long)x->dims[0]);
        const double off = half ? 0.5 : 0.0;
        double r4[4];
        for (int i = 0; i < 4; i++)
            r4[i] = slim_load_f64(rois->dtype, rois->data, n * 4 + i) * scale - off;
        double rw = r4[2] - r4[0], rh = r4[3] - r4[1];
        if (!half) { /* malformed boxes become 1x1 */
            rw = rw > 1 ? rw : 1;
            rh = rh > 1 ? rh : 1;
        }
        if (!isfinite(rw) || !isfinite(rh))
            return slim_errf(ctx->err, SLIM_EINVAL, "roi %lld has a non-finite size", (long long)n);
        const double bh = rh / (double)PH, bw = rw / (double)PW;
        int64_t gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)PH);
        int64_t gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)PW);
        if (gh < 0 || gw < 0 || gh > (1 << 12) || gw > (1 << 12))
            return slim_errf(ctx->err, SLIM_EINVAL, "roi %lld needs a %lld x %lld sampling grid "
                             "per bin, more than 4096 x 4096", (long long)n, (long long)gh,
                             (long long)gw);
        const double count = gh * gw > 1 ? (double)(gh * gw) : 1.0;
        for (int64_t c = 0; c < C; c++) {
            const int64_t base = (b * C + c) * H * W;
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    double acc = 0;
                    bool first = true;
                    for (int64_t iy = 0; iy < gh; iy++)
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double yy = r4[1] + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                            double xx = r4[0] + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            double v = 0;
                            if (!(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) {
                                yy = yy > 0 ? yy : 0;
                                xx = xx > 0 ? xx : 0;
                                int64_t y0 = (int64_t)yy, x0 = (int64_t)xx, y1, x1;
                                if (y0 >= H - 1) {
                                    y1 = y0 = H - 1;
                                    yy = (double)y0;
                                } else {
                                    y1 = y0 + 1;
                                }
                                if (x0 >= W - 1) {
                                    x1 = x0 = W - 1;
                                    xx = (double)x0;
                                } else {
                                    x1 = x0 + 1;
                                }
                                double ly = yy - (double)y0, lx = xx - (double)x0;
                                double w4[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
                                double p4[4] = {
                                    slim_load_f64(x->dtype, x->data, base + y0 * W + x0),
                                    slim_load_f64(x->dtype, x->data, base + y0 * W + x1),
                                    slim_load_f64(x->dtype, x->data, base + y1 * W + x0),
                                    slim_load_f64(x->dtype, x->data, base + y1 * W + x1)};
                                if (avg) {
                                    v = w4[0] * p4[0] + w4[1] * p4[1] + w4[2] * p4[2] + w4[3] * p4[3];
                                } else {
                                    v = w4[0] * p4[0];
                                    for (int k = 1; k < 4; k++)
                                        v = w4[k] * p4[k] > v ? w4[k] * p4[k] : v;
                                }
                            }
                            if (avg)
                                acc += v;
                            else if (first || v > acc)
                                acc = v;
                            first = false;
                        }
                    slim_store_f64(y->dtype, y->data, ((n * C + c) * PH + ph) * PW + pw,
                                   avg ? acc / count : acc);
                }
        }
    }
    return SLIM_OK;
}

/* ---- DeformConv ---------------------------------------------------------- */

typedef struct {
    int64_t N, C, H, W, M, kh, kw, oh, ow, group, ogroup;
    int64_t pads[4], strides[2], dil[2];
} dc_geom;

static slim_status dc_geom_get(slim_op_ctx *ctx, dc_geom *g)
{
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *off = ctx->in[2];
    const slim_tensor *b = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *mask = ctx->n_in > 4 ? ctx->in[4] : NULL;
    char a[128], c[128];
    int n;
    slim_status s = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim != 4)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "X has %d dims; only 2-D DeformConv "
                         "([N, C, H, W]) is supported", x->ndim);
    for (int i = 1; i < 5 && i < ctx->n_in; i++)
        if (ctx->in[i] && ctx->in[i]->dtype != x->dtype)
            return slim_errf(ctx->err, SLIM_ETYPE, "input %d is %s, expected X's type %s", i,
                             slim_dtype_name(ctx->in[i]->dtype), slim_dtype_name(x->dtype));
    memset(g, 0, sizeof(*g));
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->H = x->dims[2];
    g->W = x->dims[3];
    g->group = slim_attr_int(ctx->node, "group", 1);
    g->ogroup = slim_attr_int(ctx->node, "offset_group", 1);
    if (w->ndim != 4 || g->group < 1 || g->ogroup < 1 || g->C != w->dims[1] * g->group ||
        w->dims[0] % g->group || g->C % g->ogroup)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X %s and W %s do not fit group %lld and "
                         "offset_group %lld", slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(w->ndim, w->dims, c, sizeof(c)), (long long)g->group,
                         (long long)g->ogroup);
    g->M = w->dims[0];
    g->kh = w->dims[2];
    g->kw = w->dims[3];
    int64_t ks[2];
    if ((s = slim_attr_geometry(ctx->node, "kernel_shape", ks, 2, 1, &n, ctx->err)))
        return s;
    if (n >= 0 && (n != 2 || ks[0] != g->kh || ks[1] != g->kw))
        return slim_errf(ctx->err, SLIM_EINVAL, "kernel_shape does not match W");
    if ((s = slim_attr_geometry(ctx->node, "pads", g->pads, 4, 0, &n, ctx->err)))
        return s;
    if (n >= 0 && n != 4)
        return slim_errf(ctx->err, SLIM_EINVAL, "pads has %d values, expected 4", n);
    if ((s = slim_attr_geometry(ctx->node, "strides", g->strides, 2, 1, &n, ctx->err)))
        return s;
    if (n < 0)
        g->strides[0] = g->strides[1] = 1;
    else if (n != 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "strides has %d values, expected 2", n);
    if ((s = slim_attr_geometry(ctx->node, "dilations", g->dil, 2, 1, &n, ctx->err)))
        return s;
    if (n < 0)
        g->dil[0] = g->dil[1] = 1;
    else if (n != 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "dilations has %d values, expected 2", n);
    int64_t span_h = (g->kh - 1) * g->dil[0] + 1, span_w = (g->kw - 1) * g->dil[1] + 1;
    g->oh = (g->H + g->pads[0] + g->pads[2] - span_h) / g->strides[0] + 1;
    g->ow = (g->W + g->pads[1] + g->pads[3] - span_w) / g->strides[1] + 1;
    const int64_t taps = g->ogroup * g->kh * g->kw;
    if (g->oh < 1 || g->ow < 1 || off->ndim != 4 || off->dims[0] != g->N ||
        off->dims[1] != taps * 2 || off->dims[2] != g->oh || off->dims[3] != g->ow)
        return slim_errf(ctx->err, SLIM_ESHAPE, "offset %s must be [%lld, %lld, %lld, %lld]",
                         slim_shape_str(off->ndim, off->dims, a, sizeof(a)), (long long)g->N,
                         (long long)(taps * 2), (long long)g->oh, (long long)g->ow);
    if (mask && (mask->ndim != 4 || mask->dims[0] != g->N || mask->dims[1] != taps ||
                 mask->dims[2] != g->oh || mask->dims[3] != g->ow))
        return slim_errf(ctx->err, SLIM_ESHAPE, "mask %s must be [%lld, %lld, %lld, %lld]",
                         slim_shape_str(mask->ndim, mask->dims, a, sizeof(a)), (long long)g->N,
                         (long long)taps, (long long)g->oh, (long long)g->ow);
    if (b && (b->ndim != 1 || b->dims[0] != g->M))
        return slim_errf(ctx->err, SLIM_ESHAPE, "B must be [%lld]", (long long)g->M);
    return SLIM_OK;
}

static slim_status dc_infer(slim_op_ctx *ctx)
{
    dc_geom g;
    slim_status s = dc_geom_get(ctx, &g);
    if (!s)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, 4,
                              (int64_t[]){g.N, g.M, g.oh, g.ow});
    return s;
}

/* Bilinear sample of plane p (H x W) at (y, x); taps outside read zero. */
static double dc_sample(const slim_tensor *x, int64_t base, int64_t H, int64_t W, double y,
                        double xx)
{
    if (!isfinite(y) || !isfinite(xx) || y <= -1 || xx <= -1 || y >= (double)H || xx >= (double)W)
        return 0;
    double fy = floor(y), fx = floor(xx);
    int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    double ly = y - fy, lx = xx - fx, v = 0;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int64_t yy = y0 + dy, xc = x0 + dx;
            if (yy < 0 || yy >= H || xc < 0 || xc >= W)
                continue;
            double wt = (dy ? ly : 1 - ly) * (dx ? lx : 1 - lx);
            v += wt * slim_load_f64(x->dtype, x->data, base + yy * W + xc);
        }
    return v;
}

static slim_status dc_exec(slim_op_ctx *ctx)
{
    dc_geom g;
    slim_status s = dc_geom_get(ctx, &g);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *off = ctx->in[2];
    const slim_tensor *b = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *mask = ctx->n_in > 4 ? ctx->in[4] : NULL;
    slim_tensor *y = ctx->out[0];
    const int64_t cpg = g.C / g.group, mpg = g.M / g.group, cpo = g.C / g.ogroup;
    const int64_t K = g.kh * g.kw, P = g.oh * g.ow;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t m = 0; m < g.M; m++)
            for (int64_t i = 0; i < g.oh; i++)
                for (int64_t j = 0; j < g.ow; j++) {
                    double acc = b ? slim_load_f64(b->dtype, b->data, m) : 0;
                    const int64_t grp = m / mpg;
                    for (int64_t ci = 0; ci < cpg; ci++) {
                        const int64_t c = grp * cpg + ci, og = c / cpo;
                        const int64_t base = (n * g.C + c) * g.H * g.W;
                        for (int64_t k = 0; k < K; k++) {
                            const int64_t ky = k / g.kw, kx = k % g.kw;
                            const int64_t tap = og * K + k, pos = i * g.ow + j;
                            double dy = slim_load_f64(off->dtype, off->data,
                                                      ((n * g.ogroup * K + tap) * 2) * P + pos);
                            double dx = slim_load_f64(off->dtype, off->data,
                                                      ((n * g.ogroup * K + tap) * 2 + 1) * P + pos);
                            double mk = mask ? slim_load_f64(mask->dtype, mask->data,
                                                             (n * g.ogroup * K + tap) * P + pos)
                                             : 1.0;
                            double py = (double)(i * g.strides[0] - g.pads[0] + ky * g.dil[0]) + dy;
                            double px = (double)(j * g.strides[1] - g.pads[1] + kx * g.dil[1]) + dx;
                            double wt = slim_load_f64(w->dtype, w->data, (m * cpg + ci) * K + k);
                            acc += wt * mk * dc_sample(x, base, g.H, g.W, py, px);
                        }
                    }
                    slim_store_f64(y->dtype, y->data, ((n * g.M + m) * g.oh + i) * g.ow + j, acc);
                }
    return SLIM_OK;
}

/* ---- NonMaxSuppression --------------------------------------------------- */

typedef struct {
    const slim_tensor *boxes;
    bool center;
} nms_ctx;

static void nms_box(const nms_ctx *c, int64_t at, double *x0, double *y0, double *x1, double *y1)
{
    double v[4];
    for (int i = 0; i < 4; i++)
        v[i] = slim_load_f64(c->boxes->dtype, c->boxes->data, at * 4 + i);
    if (c->center) { /* [x_center, y_center, width, height] */
        *x0 = v[0] - v[2] / 2;
        *x1 = v[0] + v[2] / 2;
        *y0 = v[1] - v[3] / 2;
        *y1 = v[1] + v[3] / 2;
    } else { /* [y1, x1, y2, x2], corners in either order */
        *y0 = fmin(v[0], v[2]);
        *y1 = fmax(v[0], v[2]);
        *x0 = fmin(v[1], v[3]);
        *x1 = fmax(v[1], v[3]);
    }
}

static bool nms_suppress(const nms_ctx *c, int64_t a, int64_t b, double iou_th)
{
    double ax0, ay0, ax1, ay1, bx0, by0, bx1, by1;
    nms_box(c, a, &ax0, &ay0, &ax1, &ay1);
    nms_box(c, b, &bx0, &by0, &bx1, &by1);
    double ix0 = fmax(ax0, bx0), ix1 = fmin(ax1, bx1), iy0 = fmax(ay0, by0), iy1 = fmin(ay1, by1);
    if (ix1 <= ix0 || iy1 <= iy0)
        return false;
    double inter = (ix1 - ix0) * (iy1 - iy0);
    double area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
    double uni = area_a + area_b - inter;
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0)
        return false;
    return inter / uni > iou_th;
}

typedef struct {
    double score;
    int64_t idx;
} nms_cand;

/* Highest score first; equal scores by lower box index. */
static int nms_cmp(const void *pa, const void *pb)
{
    const nms_cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Runs the selection; writes up to cap (batch, class, box) triples to out
 * when it is not NULL; returns the count, or -1 when out of memory. */
static int64_t nms_run(slim_op_ctx *ctx, int64_t *out, int64_t cap)
{
    const slim_tensor *boxes = ctx->in[0], *scores = ctx->in[1];
    const slim_tensor *mt = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *it = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *st = ctx->n_in > 4 ? ctx->in[4] : NULL;
    int64_t max_out = mt && slim_tensor_numel(mt) ? slim_load_i64(mt->dtype, mt->data, 0) : 0;
    double iou = it && slim_tensor_numel(it) ? slim_load_f64(it->dtype, it->data, 0) : 0;
    bool has_st = st && slim_tensor_numel(st);
    double sth = has_st ? slim_load_f64(st->dtype, st->data, 0) : 0;
    nms_ctx c = {boxes, slim_attr_int(ctx->node, "center_point_box", 0) != 0};
    const int64_t B = boxes->dims[0], NB = boxes->dims[1], NC = scores->dims[1];
    nms_cand *cand = slim_scratch_malloc(sizeof(*cand) * (size_t)(NB ? NB : 1));
    int64_t *sel = slim_scratch_malloc(sizeof(int64_t) * (size_t)(NB ? NB : 1));
    if (!cand || !sel) {
        slim_scratch_free(cand);
        slim_scratch_free(sel);
        return -1;
    }
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < NC; k++) {
            int64_t nc = 0, ns = 0;
            for (int64_t i = 0; i < NB; i++) {
                double sc = slim_load_f64(scores->dtype, scores->data, (b * NC + k) * NB + i);
                if (!has_st || sc > sth)
                    cand[nc++] = (nms_cand){sc, i};
            }
            qsort(cand, (size_t)nc, sizeof(*cand), nms_cmp);
            for (int64_t i = 0; i < nc && ns < max_out; i++) {
                bool keep = true;
                for (int64_t j = 0; j < ns && keep; j++)
                    keep = !nms_suppress(&c, b * NB + cand[i].idx, b * NB + sel[j], iou);
                if (keep) {
                    sel[ns++] = cand[i].idx;
                    if (out && total < cap) {
                        out[total * 3] = b;
                        out[total * 3 + 1] = k;
                        out[total * 3 + 2] = cand[i].idx;
                    }
                    total++;
                }
            }
        }
    slim_scratch_free(cand);
    slim_scratch_free(sel);
    return total;
}

static slim_status nms_infer(slim_op_ctx *ctx)
{
    const slim_tensor *boxes = ctx->in[0], *scores = ctx->in[1];
    char a[128], b[128];
    slim_status s = slim_check_dtype(boxes, "boxes", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(scores, "scores", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                   SLIM_BF16, SLIM_DTYPE_UNDEFINED)))
        return s;
    if (boxes->ndim != 3 || boxes->dims[2] != 4 || scores->ndim != 3 ||
        scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
        return slim_errf(ctx->err, SLIM_ESHAPE, "boxes %s must be [B,N,4] and scores %s [B,C,N]",
                         slim_shape_str(boxes->ndim, boxes->dims, a, sizeof(a)),
                         slim_shape_str(scores->ndim, scores->dims, b, sizeof(b)));
    for (int i = 2; i < ctx->n_in && i < 5; i++) {
        const slim_tensor *t = ctx->in[i];
        if (t && slim_tensor_numel(t) > 1)
            return slim_errf(ctx->err, SLIM_ESHAPE, "input %d must be a scalar or one value", i);
        if (t && (i == 2 ? !slim_dtype_is_int(t->dtype) : !slim_dtype_is_float(t->dtype)))
            return slim_errf(ctx->err, SLIM_ETYPE, "input %d has type %s", i,
                             slim_dtype_name(t->dtype));
    }
    for (int i = 0; i < ctx->n_in && i < 5; i++)
        if (ctx->in[i] && slim_tensor_numel(ctx->in[i]) && !ctx->in[i]->data)
            return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the output size depends on the scores");
    int64_t n = nms_run(ctx, NULL, 0);
    if (n < 0)
        return slim_scratch_oom(ctx->err);
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, 2, (int64_t[]){n, 3});
    return SLIM_OK;
}

static slim_status nms_exec(slim_op_ctx *ctx)
{
    if (nms_run(ctx, ctx->out[0]->data, ctx->out[0]->dims[0]) < 0)
        return slim_scratch_oom(ctx->err);
    return SLIM_OK;
}

const slim_op_def slim__ops_vision[] = {
    {"GridSample", 16, gs_prepare, free, gs_infer, gs_exec, 0},
    {"AffineGrid", 20, NULL, NULL, ag_infer, ag_exec, 0},
    {"RoiAlign", 10, NULL, NULL, roi_infer, roi_exec, 0},
    {"DeformConv", 19, NULL, NULL, dc_infer, dc_exec, 0},
    {"NonMaxSuppression", 10, NULL, NULL, nms_infer, nms_exec, 0},
    {0},
};
