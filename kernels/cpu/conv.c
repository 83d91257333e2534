/*
 * conv.c - Conv and ConvTranspose on the CPU.
 *
 * Conv lowers every image to GEMMs. im2col unrolls the receptive fields of a
 * block of output positions into a [C/group * K, cols] matrix (K = kernel
 * taps), and cblas_sgemm multiplies the weights, already laid out as
 * [M/group, C/group * K], by it. Two shapes skip that route:
 *   - pointwise convs (1x1, stride 1, no padding): the image already is the
 *     column matrix, so the GEMM reads it in place;
 *   - depthwise convs (one input channel per group): G GEMMs of a single
 *     row would cost more in call overhead than they compute, so a direct
 *     loop sums each output's taps from a zero-padded copy of its input
 *     plane, eight neighbouring outputs at a time (vector code;
 *     conv_depthwise.c);
 *   - windows that are mostly padding (see direct_rows): a clipped direct
 *     loop, whose work grows with the tensors and not with the pads.
 * ConvTranspose is Conv's adjoint: one GEMM (W^T x X) gives every kernel
 * tap's contribution per input position, and col2im scatter-adds them into
 * the output.
 *
 * The column buffer is scratch of at most ~COL_BUDGET floats: a large image
 * is processed in blocks of positions rather than unrolled whole, which
 * would cost C*K times the image. Spatial ranks 1..3 all run as 3-D, with
 * leading dimensions of size 1. Non-float32 tensors (float16, bfloat16,
 * float64) are converted to float32 around the computation.
 */
#include "conv_impl.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define COL_BUDGET (4 << 20) /* floats of im2col / col2im scratch: 16 MiB */

typedef enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } pad_mode;

/* Attributes as written in the node; counts are -1 when absent. */
typedef struct conv_attrs {
    pad_mode auto_pad;
    int64_t group;
    int n_kernel, n_strides, n_dilations, n_pads, n_out_pad, n_out_shape;
    int64_t kernel[SLIM_MAX_DIMS], strides[SLIM_MAX_DIMS], dilations[SLIM_MAX_DIMS];
    int64_t pads[2 * SLIM_MAX_DIMS], out_pad[SLIM_MAX_DIMS], out_shape[SLIM_MAX_DIMS];
} conv_attrs;

/* ---- attributes ---------------------------------------------------------- */


static slim_status conv_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    conv_attrs *a = calloc(1, sizeof(*a));
    if (!a)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st;
    const char *pad = slim_attr_str(node, "auto_pad", "NOTSET");
    if (!strcmp(pad, "NOTSET") || !pad[0])
        a->auto_pad = PAD_NOTSET;
    else if (!strcmp(pad, "SAME_UPPER"))
        a->auto_pad = PAD_SAME_UPPER;
    else if (!strcmp(pad, "SAME_LOWER"))
        a->auto_pad = PAD_SAME_LOWER;
    else if (!strcmp(pad, "VALID"))
        a->auto_pad = PAD_VALID;
    else {
        st = slim_errf(err, SLIM_EINVAL, "auto_pad \"%s\" is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", pad);
        goto fail;
    }
    a->group = slim_attr_int(node, "group", 1);
    if (a->group < 1) {
        st = slim_errf(err, SLIM_EINVAL, "group = %lld, must be >= 1", (long long)a->group);
        goto fail;
    }
    if ((st = slim_attr_geometry(node, "kernel_shape", a->kernel, SLIM_MAX_DIMS, 1, &a->n_kernel, err)) ||
        (st = slim_attr_geometry(node, "strides", a->strides, SLIM_MAX_DIMS, 1, &a->n_strides, err)) ||
        (st = slim_attr_geometry(node, "dilations", a->dilations, SLIM_MAX_DIMS, 1, &a->n_dilations, err)) ||
        (st = slim_attr_geometry(node, "pads", a->pads, 2 * SLIM_MAX_DIMS, 0, &a->n_pads, err)) ||
        (st = slim_attr_geometry(node, "output_padding", a->out_pad, SLIM_MAX_DIMS, 0, &a->n_out_pad, err)) ||
        (st = slim_attr_geometry(node, "output_shape", a->out_shape, SLIM_MAX_DIMS, 0, &a->n_out_shape, err)))
        goto fail;
    *state = a;
    return SLIM_OK;
fail:
    free(a);
    return st;
}

static void conv_release(void *state)
{
    free(state);
}

/* ---- shapes -------------------------------------------------------------- */

static slim_status check_count(const char *name, int count, int want, slim_err *err)
{
    if (count >= 0 && count != want)
        return slim_errf(err, SLIM_EINVAL, "attribute %s has %d values, expected %d", name, count, want);
    return SLIM_OK;
}

/* Fills the parts common to Conv and ConvTranspose: channels, kernel,
 * strides, dilations, explicit pads, input sizes. W is [M, C/group, k...]
 * for Conv and [C, M/group, k...] for ConvTranspose. */
static slim_status plan_common(slim_op_ctx *ctx, bool transpose, conv_plan *p, int *rank)
{
    const conv_attrs *a = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_err *err = ctx->err;
    slim_status st;

    if (!slim_dtype_is_float(x->dtype))
        return slim_errf(err, SLIM_EUNSUPPORTED, "input X has data type %s; supported: float16, bfloat16, float32, float64",
                         slim_dtype_name(x->dtype));
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return slim_errf(err, SLIM_ETYPE, "X, W and B must share one data type, got %s, %s%s%s",
                         slim_dtype_name(x->dtype), slim_dtype_name(w->dtype), b ? ", " : "",
                         b ? slim_dtype_name(b->dtype) : "");
    if (x->ndim < 3)
        return slim_errf(err, SLIM_EINVAL, "input X has %d dims, expected [N, C, spatial...]", x->ndim);
    int n = x->ndim - 2;
    if (n > MAX_SPATIAL)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%d spatial dims; at most %d supported", n, MAX_SPATIAL);
    if (w->ndim != x->ndim)
        return slim_errf(err, SLIM_ESHAPE, "weight W has %d dims, expected %d like X", w->ndim, x->ndim);
    if ((st = check_count("kernel_shape", a->n_kernel, n, err)) ||
        (st = check_count("strides", a->n_strides, n, err)) ||
        (st = check_count("dilations", a->n_dilations, n, err)) ||
        (st = check_count("pads", a->n_pads, 2 * n, err)))
        return st;

    p->N = x->dims[0];
    p->C = x->dims[1];
    p->G = a->group;
    if (p->C % p->G)
        return slim_errf(err, SLIM_ESHAPE, "X has %lld channels, not divisible by group %lld",
                         (long long)p->C, (long long)p->G);
    int64_t cg = p->C / p->G;
    if (transpose) {
        if (w->dims[0] != p->C)
            return slim_errf(err, SLIM_ESHAPE, "W has %lld input channels (dim 0), X has %lld",
                             (long long)w->dims[0], (long long)p->C);
        p->M = w->dims[1] * p->G;
    } else {
        if (w->dims[1] != cg)
            return slim_errf(err, SLIM_ESHAPE, "W has %lld channels per group (dim 1), expected C/group = %lld",
                             (long long)w->dims[1], (long long)cg);
        p->M = w->dims[0];
        if (p->M % p->G)
            return slim_errf(err, SLIM_ESHAPE, "W has %lld output channels, not divisible by group %lld",
                             (long long)p->M, (long long)p->G);
    }
    if (b && (b->ndim != 1 || b->dims[0] != p->M))
        return slim_errf(err, SLIM_ESHAPE, "bias B must have shape [%lld]", (long long)p->M);

    int off = MAX_SPATIAL - n;
    for (int i = 0; i < MAX_SPATIAL; i++) {
        p->in[i] = p->out[i] = p->kernel[i] = p->stride[i] = p->dilation[i] = 1;
        p->pad_begin[i] = p->pad_end[i] = 0;
    }
    p->K = 1;
    for (int i = 0; i < n; i++) {
        int64_t k = w->dims[2 + i];
        if (a->n_kernel >= 0 && a->kernel[i] != k)
            return slim_errf(err, SLIM_ESHAPE, "kernel_shape[%d] = %lld but W has %lld", i,
                             (long long)a->kernel[i], (long long)k);
        if (k < 1)
            return slim_errf(err, SLIM_ESHAPE, "W has an empty kernel dim %d", 2 + i);
        p->kernel[off + i] = k;
        p->in[off + i] = x->dims[2 + i];
        p->stride[off + i] = a->n_strides >= 0 ? a->strides[i] : 1;
        p->dilation[off + i] = a->n_dilations >= 0 ? a->dilations[i] : 1;
        if (a->n_pads >= 0 && a->auto_pad == PAD_NOTSET) {
            p->pad_begin[off + i] = a->pads[i];
            p->pad_end[off + i] = a->pads[n + i];
        }
        p->K *= k;
    }
    *rank = n;
    return SLIM_OK;
}

static slim_status conv_plan_make(slim_op_ctx *ctx, conv_plan *p)
{
    const conv_attrs *a = ctx->state;
    int n;
    slim_status st = plan_common(ctx, false, p, &n);
    if (st)
        return st;
    for (int i = MAX_SPATIAL - n; i < MAX_SPATIAL; i++) {
        int64_t in = p->in[i], s = p->stride[i];
        int64_t span = (p->kernel[i] - 1) * p->dilation[i] + 1;
        if (a->auto_pad == PAD_SAME_UPPER || a->auto_pad == PAD_SAME_LOWER) {
            p->out[i] = (in + s - 1) / s;
            int64_t total = (p->out[i] - 1) * s + span - in;
            if (total < 0)
                total = 0;
            int64_t small = total / 2;
            p->pad_begin[i] = a->auto_pad == PAD_SAME_UPPER ? small : total - small;
            p->pad_end[i] = total - p->pad_begin[i];
        } else {
            int64_t room = in + p->pad_begin[i] + p->pad_end[i] - span;
            if (room < 0)
                return slim_errf(ctx->err, SLIM_ESHAPE,
                                 "spatial dim %d: input %lld (padded %lld) is smaller than the kernel extent %lld",
                                 i - (MAX_SPATIAL - n), (long long)in,
                                 (long long)(in + p->pad_begin[i] + p->pad_end[i]), (long long)span);
            p->out[i] = room / s + 1;
        }
    }
    p->in_size = p->in[0] * p->in[1] * p->in[2];
    p->out_size = p->out[0] * p->out[1] * p->out[2];
    return SLIM_OK;
}

static void set_output(slim_op_ctx *ctx, const conv_plan *p)
{
    const slim_tensor *x = ctx->in[0];
    int64_t dims[SLIM_MAX_DIMS];
    dims[0] = p->N;
    dims[1] = p->M;
    for (int i = 2; i < x->ndim; i++)
        dims[i] = p->out[MAX_SPATIAL - (x->ndim - i)];
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
}

static slim_status conv_infer(slim_op_ctx *ctx)
{
    conv_plan p;
    slim_status st = conv_plan_make(ctx, &p);
    if (st)
        return st;
    set_output(ctx, &p);
    return SLIM_OK;
}

/* BLAS takes int sizes and strides. */
static slim_status check_blas_sizes(slim_op_ctx *ctx, const conv_plan *p)
{
    int64_t rows = (p->C > p->M ? p->C : p->M) * p->K;
    if (p->in_size > INT_MAX || p->out_size > INT_MAX || rows > INT_MAX)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED,
                         "spatial size %lld or channels x kernel %lld exceeds the BLAS limit",
                         (long long)(p->in_size > p->out_size ? p->in_size : p->out_size),
                         (long long)rows);
    return SLIM_OK;
}

/* ---- float32 views ------------------------------------------------------- */

/* ---- shared loops -------------------------------------------------------- */

typedef struct fill_job {
    float *y;
    const float *bias; /* NULL: zeros */
    int64_t M, plane;
} fill_job;

static void fill_planes(int64_t begin, int64_t end, void *user)
{
    const fill_job *j = user;
    for (int64_t p = begin; p < end; p++) {
        float v = j->bias ? j->bias[p % j->M] : 0.0f;
        float *y = j->y + p * j->plane;
        for (int64_t i = 0; i < j->plane; i++)
            y[i] = v;
    }
}

/* Sets every [N, M] plane of y to its channel's bias (or 0). */
static void fill_bias(float *y, const float *bias, int64_t N, int64_t M, int64_t plane)
{
    fill_job j = {y, bias, M, plane};
    slim_parallel_for(N * M, 1 + (1 << 14) / (plane ? plane : 1), fill_planes, &j);
}

/* ---- Conv ---------------------------------------------------------------- */

typedef struct im2col_job {
    const conv_plan *p;
    const float *x;    /* the group's first input channel */
    float *col;        /* [rows, cols] */
    int64_t o0, cols;  /* block of output positions */
} im2col_job;

static void im2col_rows(int64_t r0, int64_t r1, void *user)
{
    const im2col_job *j = user;
    const conv_plan *p = j->p;
    const int64_t OH = p->out[1], OW = p->out[2];
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = r % p->K;
        int64_t kw = t % p->kernel[2], kh = t / p->kernel[2] % p->kernel[1],
                kd = t / (p->kernel[2] * p->kernel[1]);
        const float *xc = j->x + r / p->K * p->in_size;
        float *dst = j->col + r * j->cols;
        int64_t o = j->o0, left = j->cols;
        int64_t od = o / (OH * OW), oh = o / OW % OH, ow = o % OW;
        int64_t wstart = kw * p->dilation[2] - p->pad_begin[2], full_lo, full_hi;
        slim_window_range(wstart, p->stride[2], OW, p->in[2], &full_lo, &full_hi); /* for whole rows */
        while (left > 0) {
            int64_t len = OW - ow < left ? OW - ow : left;
            int64_t id = od * p->stride[0] - p->pad_begin[0] + kd * p->dilation[0];
            int64_t ih = oh * p->stride[1] - p->pad_begin[1] + kh * p->dilation[1];
            if (id < 0 || id >= p->in[0] || ih < 0 || ih >= p->in[1]) {
                memset(dst, 0, sizeof(float) * len);
            } else {
                const float *src = xc + (id * p->in[1] + ih) * p->in[2];
                int64_t s = p->stride[2], base = wstart + ow * s, lo = full_lo, hi = full_hi;
                if (len != OW)
                    slim_window_range(base, s, len, p->in[2], &lo, &hi);
                for (int64_t i = 0; i < lo; i++)
                    dst[i] = 0.0f;
                if (s == 1)
                    memcpy(dst + lo, src + base + lo, sizeof(float) * (hi - lo));
                else
                    for (int64_t i = lo; i < hi; i++)
                        dst[i] = src[base + i * s];
                for (int64_t i = hi; i < len; i++)
                    dst[i] = 0.0f;
            }
            dst += len;
            left -= len;
            ow = 0;
            if (++oh == OH) {
                oh = 0;
                od++;
            }
        }
    }
}

/*
 * Windows that are mostly padding: a model may give a kernel far wider than
 * its input (weights of 4e8 taps over one input element, padded 4e8-1 each
 * side), and then im2col would multiply 4e8 columns of nearly all zeros,
 * and the depthwise path would copy the input into a plane of the padded
 * size. This loop visits, per output, only the taps inside the input
 * (clipped per dimension, as pool.c does), so its work is channels x the
 * (tap, output) pairs that actually meet: what the tensors justify.
 */
typedef struct direct_job {
    const conv_plan *p;
    const float *x, *w, *bias;
    float *y;
    int64_t chunk, n_chunks; /* a row is cut in runs, so one huge row still spreads */
} direct_job;

static void direct_rows(int64_t begin, int64_t end, void *user)
{
    const direct_job *j = user;
    const conv_plan *p = j->p;
    const int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];
    const int64_t cg = p->C / p->G, mg = p->M / p->G;
    for (int64_t u = begin; u < end; u++) {
        if (slim_cancel_check()) /* a run is up to 4096 outputs x their taps */
            return; /* the executor reports it */
        int64_t r = u / j->n_chunks, ow0 = u % j->n_chunks * j->chunk;
        int64_t ow1 = OW - ow0 < j->chunk ? OW : ow0 + j->chunk;
        int64_t oh = r % OH, od = r / OH % OD, m = r / (OH * OD) % p->M, n = r / (OH * OD * p->M);
        int64_t g = m / mg, start[MAX_SPATIAL], lo[MAX_SPATIAL], hi[MAX_SPATIAL];
        start[0] = od * p->stride[0] - p->pad_begin[0];
        start[1] = oh * p->stride[1] - p->pad_begin[1];
        for (int i = 0; i < 2; i++)
            slim_window_range(start[i], p->dilation[i], p->kernel[i], p->in[i], &lo[i], &hi[i]);
        float *y = j->y + ((n * p->M + m) * OD + od) * OH * OW + oh * OW;
        for (int64_t ow = ow0; ow < ow1; ow++) {
            start[2] = ow * p->stride[2] - p->pad_begin[2];
            slim_window_range(start[2], p->dilation[2], p->kernel[2], p->in[2], &lo[2], &hi[2]);
            float acc = j->bias ? j->bias[m] : 0.0f;
            for (int64_t c = 0; c < cg; c++) {
                const float *x = j->x + (n * p->C + g * cg + c) * p->in_size;
                const float *w = j->w + (m * cg + c) * p->K;
                for (int64_t kd = lo[0]; kd < hi[0]; kd++)
                    for (int64_t kh = lo[1]; kh < hi[1]; kh++) {
                        int64_t id = start[0] + kd * p->dilation[0];
                        int64_t ih = start[1] + kh * p->dilation[1];
                        const float *xr = x + (id * p->in[1] + ih) * p->in[2] + start[2];
                        const float *wr = w + (kd * p->kernel[1] + kh) * p->kernel[2];
                        for (int64_t kw = lo[2]; kw < hi[2]; kw++)
                            acc += wr[kw] * xr[kw * p->dilation[2]];
                    }
            }
            y[ow] = acc;
        }
    }
}

/* Whether fewer than a quarter of the (tap, output) pairs read the input:
 * the pairs factor per dimension, each counted in O(outputs). */
static bool mostly_padding(const conv_plan *p)
{
    double meet = 1, all = 1;
    for (int i = 0; i < MAX_SPATIAL; i++) {
        int64_t valid = 0, lo, hi;
        for (int64_t o = 0; o < p->out[i]; o++) {
            slim_window_range(o * p->stride[i] - p->pad_begin[i], p->dilation[i], p->kernel[i],
                              p->in[i], &lo, &hi);
            valid += hi - lo;
        }
        meet *= (double)valid;
        all *= (double)p->kernel[i] * (double)p->out[i];
    }
    return meet * 4 < all;
}

/* Whether the depthwise path's zero-padded copy of a plane would be much
 * larger than the plane and its output (pads far wider than the input). */
static bool padded_plane_large(const conv_plan *p)
{
    double plane = 1;
    for (int i = 0; i < MAX_SPATIAL; i++)
        plane *= (double)(p->in[i] + p->pad_begin[i] + p->pad_end[i]);
    return plane > 4.0 * ((double)p->in_size + (double)p->out_size) + 4096;
}

static void conv_direct(const conv_plan *p, const float *x, const float *w, const float *bias,
                        float *y)
{
    direct_job j = {p, x, w, bias, y, p->out[2] < 4096 ? p->out[2] : 4096, 1};
    j.n_chunks = (p->out[2] + j.chunk - 1) / j.chunk;
    int64_t rows = p->N * p->M * p->out[0] * p->out[1] * j.n_chunks;
    int64_t taps = 1;
    for (int i = 0; i < MAX_SPATIAL; i++)
        taps *= p->kernel[i] < p->in[i] ? p->kernel[i] : p->in[i];
    double run_work = (double)j.chunk * (double)(p->C / p->G) * (double)taps;
    slim_parallel_for(rows, run_work >= (1 << 14) ? 1 : 1 + (int64_t)((1 << 14) / run_work),
                      direct_rows, &j);
}

/* How many columns fit the scratch budget, given rows per column. */
static int64_t block_cols(int64_t rows, int64_t total)
{
    int64_t cols = COL_BUDGET / (rows ? rows : 1);
    /* Narrower blocks make the GEMM inefficient, but past 2^16 rows (a
     * huge kernel) 64 columns would be scratch of 64 x the weights. */
    if (cols < 64)
        cols = rows <= COL_BUDGET / 16 ? 64 : cols < 4 ? 4 : cols;
    return cols < total ? cols : total;
}

static slim_status conv_gemm(slim_op_ctx *ctx, const conv_plan *p, const float *x,
                             const float *w, const float *bias, float *y)
{
    const int64_t cg = p->C / p->G, mg = p->M / p->G, rows = cg * p->K;
    bool pointwise = p->K == 1;
    for (int i = 0; i < MAX_SPATIAL; i++)
        pointwise = pointwise && p->stride[i] == 1 && p->pad_begin[i] == 0 && p->pad_end[i] == 0;
    int64_t chunk = pointwise ? p->out_size : block_cols(rows, p->out_size);
    slim_tensor col = {.dtype = SLIM_F32, .ndim = 1, .dims = {rows * chunk}};
    if (!pointwise) {
        slim_status st = slim_tensor_alloc(&col, ctx->err);
        if (st)
            return st;
    }
    if (bias)
        fill_bias(y, bias, p->N, p->M, p->out_size);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t g = 0; g < p->G; g++) {
            const float *xg = x + (n * p->C + g * cg) * p->in_size;
            float *yg = y + (n * p->M + g * mg) * p->out_size;
            for (int64_t o0 = 0; o0 < p->out_size; o0 += chunk) {
                int64_t cols = p->out_size - o0 < chunk ? p->out_size - o0 : chunk;
                const float *b = xg + o0;
                int64_t ldb = p->in_size;
                if (!pointwise) {
                    im2col_job j = {p, xg, col.data, o0, cols};
                    slim_parallel_for(rows, 1 + (1 << 14) / cols, im2col_rows, &j);
                    b = col.data;
                    ldb = cols;
                }
                slim_sgemm(false, false, mg, cols, rows, 1.0f, w + g * mg * rows, rows, b, ldb,
                           bias ? 1.0f : 0.0f, yg + o0, p->out_size);
            }
        }
    slim_tensor_release(&col);
    return SLIM_OK;
}

static slim_status conv_exec(slim_op_ctx *ctx)
{
    conv_plan p;
    slim_status st = conv_plan_make(ctx, &p);
    if (st)
        return st;
    slim_tensor *out = ctx->out[0];
    if (!out || slim_tensor_numel(out) == 0)
        return SLIM_OK;
    if ((st = check_blas_sizes(ctx, &p)))
        return st;
    slim_tensor tx, tw, tb, ty;
    const float *x, *w, *b;
    float *y;
    memset(&ty, 0, sizeof(ty));
    if ((st = slim_f32_in(ctx->in[0], &tx, &x, ctx->err)) ||
        (st = slim_f32_in(ctx->in[1], &tw, &w, ctx->err)) ||
        (st = slim_f32_in(ctx->n_in > 2 ? ctx->in[2] : NULL, &tb, &b, ctx->err)) ||
        (st = slim_f32_out(out, &ty, &y, ctx->err)))
        goto done;
    if (p.C == 0) {
        fill_bias(y, b, p.N, p.M, p.out_size); /* no input channels: a sum of nothing */
    } else if (mostly_padding(&p) || (p.C == p.G && p.G > 1 && padded_plane_large(&p))) {
        conv_direct(&p, x, w, b, y);
    } else if (p.C == p.G && p.G > 1) {
        if ((st = slim__conv_depthwise(ctx, &p, x, w, b, y)))
            goto done;
    } else if ((st = conv_gemm(ctx, &p, x, w, b, y))) {
        goto done;
    }
    slim_f32_out_finish(out, &ty);
done:
    slim_tensor_release(&tx);
    slim_tensor_release(&tw);
    slim_tensor_release(&tb);
    slim_tensor_release(&ty);
    return st;
}

/* ---- ConvTranspose ------------------------------------------------------- */

static slim_status convt_plan_make(slim_op_ctx *ctx, conv_plan *p)
{
    const conv_attrs *a = ctx->state;
    int n;
    slim_status st = plan_common(ctx, true, p, &n);
    if (st)
        return st;
    if ((st = check_count("output_padding", a->n_out_pad, n, ctx->err)))
        return st;
    if (a->n_out_shape >= 0 && a->n_out_shape != n && a->n_out_shape != n + 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "attribute output_shape has %d values, expected %d",
                         a->n_out_shape, n);
    int off = MAX_SPATIAL - n;
    for (int i = 0; i < n; i++) {
        int64_t *pb = &p->pad_begin[off + i], *pe = &p->pad_end[off + i];
        int64_t in = p->in[off + i], s = p->stride[off + i];
        int64_t span = (p->kernel[off + i] - 1) * p->dilation[off + i] + 1;
        int64_t natural = s * (in - 1) + (a->n_out_pad >= 0 ? a->out_pad[i] : 0) + span;
        int64_t out;
        bool derive_pads = true;
        if (a->n_out_shape >= 0)
            out = a->out_shape[a->n_out_shape - n + i];
        else if (a->auto_pad == PAD_SAME_UPPER || a->auto_pad == PAD_SAME_LOWER)
            out = in * s;
        else {
            out = natural - *pb - *pe;
            derive_pads = false;
        }
        if (derive_pads) {
            /* The spec puts the odd unit of padding at the start except for
             * SAME_UPPER. An output larger than the natural size gets its
             * extra (bias-only) positions at the end, as in onnxruntime. */
            int64_t total = natural - out > 0 ? natural - out : 0;
            *pb = a->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
            *pe = total - *pb;
        }
        if (out < 0 || (out == 0 && in > 0))
            return slim_errf(ctx->err, SLIM_ESHAPE, "spatial dim %d: pads leave an output of size %lld",
                             i, (long long)out);
        p->out[off + i] = out;
    }
    p->in_size = p->in[0] * p->in[1] * p->in[2];
    p->out_size = p->out[0] * p->out[1] * p->out[2];
    return SLIM_OK;
}

static slim_status convt_infer(slim_op_ctx *ctx)
{
    conv_plan p;
    slim_status st = convt_plan_make(ctx, &p);
    if (st)
        return st;
    set_output(ctx, &p);
    return SLIM_OK;
}

typedef struct col2im_job {
    const conv_plan *p;
    const float *col; /* [mg * K, cols] */
    float *y;         /* the group's first output plane */
    int64_t i0, cols; /* block of input positions */
} col2im_job;

/* Scatter-adds the columns of output channels [m0, m1): each channel owns
 * its plane, so workers never write the same element. */
static void col2im_channels(int64_t m0, int64_t m1, void *user)
{
    const col2im_job *j = user;
    const conv_plan *p = j->p;
    const int64_t IH = p->in[1], IW = p->in[2], sw = p->stride[2];
    for (int64_t m = m0; m < m1; m++) {
        float *y = j->y + m * p->out_size;
        for (int64_t t = 0; t < p->K; t++) {
            int64_t kw = t % p->kernel[2], kh = t / p->kernel[2] % p->kernel[1],
                    kd = t / (p->kernel[2] * p->kernel[1]);
            const float *src = j->col + (m * p->K + t) * j->cols;
            int64_t i = j->i0, left = j->cols;
            int64_t id = i / (IH * IW), ih = i / IW % IH, iw = i % IW;
            int64_t wstart = kw * p->dilation[2] - p->pad_begin[2];
            while (left > 0) {
                int64_t len = IW - iw < left ? IW - iw : left;
                int64_t od = id * p->stride[0] - p->pad_begin[0] + kd * p->dilation[0];
                int64_t oh = ih * p->stride[1] - p->pad_begin[1] + kh * p->dilation[1];
                if (od >= 0 && od < p->out[0] && oh >= 0 && oh < p->out[1]) {
                    float *dst = y + (od * p->out[1] + oh) * p->out[2];
                    int64_t base = wstart + iw * sw, lo, hi;
                    slim_window_range(base, sw, len, p->out[2], &lo, &hi);
                    for (int64_t q = lo; q < hi; q++)
                        dst[base + q * sw] += src[q];
                }
                src += len;
                left -= len;
                iw = 0;
                if (++ih == IH) {
                    ih = 0;
                    id++;
                }
            }
        }
    }
}

static slim_status convt_exec(slim_op_ctx *ctx)
{
    conv_plan p;
    slim_status st = convt_plan_make(ctx, &p);
    if (st)
        return st;
    slim_tensor *out = ctx->out[0];
    if (!out || slim_tensor_numel(out) == 0)
        return SLIM_OK;
    if ((st = check_blas_sizes(ctx, &p)))
        return st;
    slim_tensor tx, tw, tb, ty, col = {.dtype = SLIM_F32, .ndim = 1};
    const float *x, *w, *b;
    float *y;
    memset(&ty, 0, sizeof(ty));
    if ((st = slim_f32_in(ctx->in[0], &tx, &x, ctx->err)) ||
        (st = slim_f32_in(ctx->in[1], &tw, &w, ctx->err)) ||
        (st = slim_f32_in(ctx->n_in > 2 ? ctx->in[2] : NULL, &tb, &b, ctx->err)) ||
        (st = slim_f32_out(out, &ty, &y, ctx->err)))
        goto done;
    fill_bias(y, b, p.N, p.M, p.out_size);
    const int64_t cg = p.C / p.G, mg = p.M / p.G, rows = mg * p.K;
    int64_t chunk = block_cols(rows, p.in_size);
    col.dims[0] = rows * chunk;
    if (cg == 0 || p.in_size == 0) /* no input: the output is the bias */
        goto finish;
    if ((st = slim_tensor_alloc(&col, ctx->err)))
        goto done;
    for (int64_t n = 0; n < p.N; n++)
        for (int64_t g = 0; g < p.G; g++) {
            const float *xg = x + (n * p.C + g * cg) * p.in_size;
            for (int64_t i0 = 0; i0 < p.in_size; i0 += chunk) {
                int64_t cols = p.in_size - i0 < chunk ? p.in_size - i0 : chunk;
                /* col[mg*K, cols] = W_g^T [mg*K, cg] x X_g [cg, cols] */
                slim_sgemm(true, false, rows, cols, cg, 1.0f, w + g * cg * rows, rows, xg + i0,
                           p.in_size, 0.0f, col.data, cols);
                col2im_job j = {&p, col.data, y + (n * p.M + g * mg) * p.out_size, i0, cols};
                slim_parallel_for(mg, 1, col2im_channels, &j);
            }
        }
finish:
    slim_f32_out_finish(out, &ty);
done:
    slim_tensor_release(&tx);
    slim_tensor_release(&tw);
    slim_tensor_release(&tb);
    slim_tensor_release(&ty);
    slim_tensor_release(&col);
    return st;
}

const slim_op_def slim__ops_conv[] = {
    {"Conv", 1, conv_prepare, conv_release, conv_infer, conv_exec, 0},
    {"ConvTranspose", 1, conv_prepare, conv_release, convt_infer, convt_exec, 0},
    {0},
};
