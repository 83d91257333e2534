/*
 * signal.c - audio front ends: DFT, STFT, MelWeightMatrix and the window
 * generators HannWindow, HammingWindow and BlackmanWindow.
 *
 * Complex tensors are real tensors with a last dim of 2 (re, im); a real
 * signal has a last dim of 1. The transform is a direct DFT in double with
 * a table of n twiddles (e^{-2 pi i k/n} for k < n, indexed by k*t mod n),
 * O(n^2) per transform: exact for every length, prime ones included, and
 * fast enough for the frame sizes of speech front ends (a 400-sample frame
 * is 160K multiply-adds). An FFT would be the step up for long signals.
 *
 * Window lengths, DFT lengths and the like are input tensors: their values
 * decide output shapes, so infer returns SLIM_ENEEDVALUE until they are
 * known (they are constants in exported models, so the planner folds them).
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Shapes here multiply by lengths read from tensors; keep each below this
 * so that no product overflows and a hostile model cannot ask for the
 * moon. */
#define SIGNAL_MAX_LEN (1 << 24)

static slim_status read_len(const slim_tensor *t, const char *what, int64_t min, int64_t *v,
                            slim_err *err)
{
    slim_status s = slim_read_scalar_i64(t, what, v, err);
    if (s)
        return s;
    if (*v < min || *v > SIGNAL_MAX_LEN)
        return slim_errf(err, SLIM_EINVAL, "%s = %lld, must be in [%lld, %d]", what,
                         (long long)*v, (long long)min, SIGNAL_MAX_LEN);
    return SLIM_OK;
}

static slim_status out_dtype(const slim_node *node, slim_dtype *dt, slim_err *err)
{
    int64_t code = slim_attr_int(node, "output_datatype", 1);
    *dt = slim_dtype_from_onnx((int)code);
    if (*dt == SLIM_DTYPE_UNDEFINED || code != (int)code)
        return slim_errf(err, SLIM_ETYPE, "output_datatype = %lld is not a type slimserve has",
                         (long long)code);
    return SLIM_OK;
}

/* ---- windows ------------------------------------------------------------- */

static slim_status window_infer(slim_op_ctx *ctx)
{
    int64_t n;
    slim_dtype dt;
    slim_status s = read_len(ctx->in[0], "size", 0, &n, ctx->err);
    if (s || (s = out_dtype(ctx->node, &dt, ctx->err)))
        return s;
    slim_tensor_set_shape(ctx->out[0], dt, 1, &n);
    return SLIM_OK;
}

static slim_status window_exec(slim_op_ctx *ctx)
{
    slim_tensor *y = ctx->out[0];
    const int64_t n = y->dims[0];
    /* Periodic windows (the default) have period n, symmetric ones n - 1. */
    const double N = slim_attr_int(ctx->node, "periodic", 1) ? (double)n : (double)(n - 1);
    const char *op = ctx->node->op_type;
    for (int64_t i = 0; i < n; i++) {
        double v, x = (double)i;
        if (strcmp(op, "HannWindow") == 0) {
            double sn = sin(M_PI * x / N);
            v = sn * sn;
        } else if (strcmp(op, "HammingWindow") == 0) {
            v = 25.0 / 46.0 - (21.0 / 46.0) * cos(2 * M_PI * x / N);
        } else {
            v = 0.42 - 0.5 * cos(2 * M_PI * x / N) + 0.08 * cos(4 * M_PI * x / N);
        }
        slim_store_f64(y->dtype, y->data, i, v);
    }
    return SLIM_OK;
}

/* ---- the transform ------------------------------------------------------- */

/* One transform of length n over m input points: in[t] is (re, im) at
 * in + t * stride (im absent when `complex` is false); writes n_out points
 * (re, im) to out + k * ostride. inverse: e^{+}, divided by n. */
typedef struct {
    int64_t n;
    double *cos_t, *sin_t; /* cos and sin of 2 pi j / n, j < n */
} dft_plan;

/* The direct transform costs n^2 per signal: longer ones would stall a
 * worker for minutes, so they are refused rather than run. */
#define DFT_MAX_LEN (1 << 16)

static slim_status dft_plan_make(dft_plan *p, int64_t n, slim_err *err)
{
    if (n > DFT_MAX_LEN)
        return slim_errf(err, SLIM_EUNSUPPORTED, "a %lld-point transform is longer than the %d "
                         "points of the direct DFT", (long long)n, DFT_MAX_LEN);
    p->n = n;
    p->cos_t = slim_scratch_malloc(sizeof(double) * (size_t)(n ? n : 1));
    p->sin_t = slim_scratch_malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!p->cos_t || !p->sin_t) {
        slim_scratch_free(p->cos_t);
        slim_scratch_free(p->sin_t);
        return slim_scratch_oom(err);
    }
    for (int64_t j = 0; j < n; j++) {
        p->cos_t[j] = cos(2 * M_PI * (double)j / (double)n);
        p->sin_t[j] = sin(2 * M_PI * (double)j / (double)n);
    }
    return SLIM_OK;
}

static void dft_plan_free(dft_plan *p)
{
    slim_scratch_free(p->cos_t);
    slim_scratch_free(p->sin_t);
}

/* X[k] = sum_t x[t] e^{-+2 pi i k t / n} for k < n_out, over t < m. */
static void dft_run(const dft_plan *p, const double *re, const double *im, int64_t m,
                    bool inverse, int64_t n_out, double *out_re, double *out_im)
{
    const int64_t n = p->n;
    const double sign = inverse ? 1.0 : -1.0;
    if (m > n)
        m = n;
    for (int64_t k = 0; k < n_out; k++) {
        double sr = 0, si = 0;
        int64_t j = 0; /* k * t mod n, stepped without overflow */
        for (int64_t t = 0; t < m; t++) {
            double c = p->cos_t[j], s = sign * p->sin_t[j];
            double xr = re[t], xi = im ? im[t] : 0;
            sr += xr * c - xi * s;
            si += xr * s + xi * c;
            j += k;
            if (j >= n)
                j %= n;
        }
        out_re[k] = inverse ? sr / (double)n : sr;
        out_im[k] = inverse ? si / (double)n : si;
    }
}

/* ---- DFT ----------------------------------------------------------------- */

typedef struct {
    int axis;
    int64_t n;           /* transform length */
    int64_t n_out;       /* points written along the axis */
    bool inverse, onesided, complex_in, real_out;
} dft_shape;

static slim_status dft_shape_get(slim_op_ctx *ctx, dft_shape *d)
{
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *len_t = ctx->n_in > 1 ? ctx->in[1] : NULL;
    const slim_tensor *axis_t = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_status s = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim < 2 || (x->dims[x->ndim - 1] != 1 && x->dims[x->ndim - 1] != 2))
        return slim_errf(ctx->err, SLIM_ESHAPE, "input must be [..., 1] (real) or [..., 2] "
                         "(complex), got rank %d", x->ndim);
    memset(d, 0, sizeof(*d));
    int64_t axis = ctx->node->opset >= 20 ? -2 : slim_attr_int(ctx->node, "axis", 1);
    if (axis_t && (s = slim_read_scalar_i64(axis_t, "axis", &axis, ctx->err)))
        return s;
    if ((s = slim_norm_axis(axis, x->ndim, &d->axis, ctx->err)))
        return s;
    if (d->axis == x->ndim - 1)
        return slim_errf(ctx->err, SLIM_EINVAL, "axis %lld is the (re, im) dim", (long long)axis);
    d->inverse = slim_attr_int(ctx->node, "inverse", 0) != 0;
    d->onesided = slim_attr_int(ctx->node, "onesided", 0) != 0;
    d->complex_in = x->dims[x->ndim - 1] == 2;
    int64_t m = x->dims[d->axis];
    if (len_t) {
        if ((s = read_len(len_t, "dft_length", 1, &d->n, ctx->err)))
            return s;
    } else {
        d->n = d->inverse && d->onesided ? 2 * (m - 1) : m;
        if (d->n < 1)
            return slim_errf(ctx->err, SLIM_EINVAL, "the signal axis is too short for a DFT");
    }
    if (d->onesided && !d->inverse && d->complex_in)
        return slim_errf(ctx->err, SLIM_EINVAL, "a one-sided DFT needs a real input");
    d->real_out = d->inverse && d->onesided;
    d->n_out = d->onesided && !d->inverse ? d->n / 2 + 1 : d->n;
    return SLIM_OK;
}

static slim_status dft_infer(slim_op_ctx *ctx)
{
    dft_shape d;
    slim_status s = dft_shape_get(ctx, &d);
    if (s)
        return s;
    slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    ctx->out[0]->dims[d.axis] = d.n_out;
    ctx->out[0]->dims[ctx->in[0]->ndim - 1] = d.real_out ? 1 : 2;
    return SLIM_OK;
}

static slim_status dft_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    dft_shape d;
    dft_plan p;
    slim_status s = dft_shape_get(ctx, &d);
    if (s || (s = dft_plan_make(&p, d.n, ctx->err)))
        return s;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d.axis; i++)
        outer *= x->dims[i];
    for (int i = d.axis + 1; i < x->ndim - 1; i++)
        inner *= x->dims[i];
    const int64_t m = x->dims[d.axis], ci = x->dims[x->ndim - 1], co = y->dims[y->ndim - 1];
    const int64_t cap = (m > d.n ? m : d.n) + 1;
    double *buf = slim_scratch_malloc(sizeof(double) * (size_t)(4 * cap));
    if (!buf) {
        dft_plan_free(&p);
        return slim_scratch_oom(ctx->err);
    }
    double *re = buf, *im = buf + cap, *ore = buf + 2 * cap, *oim = buf + 3 * cap;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            if (d.real_out) {
                /* irfft: the first n/2 + 1 points of a Hermitian spectrum,
                 * mirrored into the full n, whose inverse is real. */
                const int64_t half = d.n / 2 + 1;
                for (int64_t t = 0; t < d.n; t++) {
                    int64_t k = t < half ? t : d.n - t;
                    bool have = k < m;
                    int64_t at = ((o * m + (have ? k : 0)) * inner + i) * ci;
                    double r = have ? slim_load_f64(x->dtype, x->data, at) : 0;
                    double im_v = have && ci == 2 ? slim_load_f64(x->dtype, x->data, at + 1) : 0;
                    re[t] = r;
                    im[t] = t < half ? im_v : -im_v;
                }
                /* DC (and Nyquist, for even n) must be real. */
                im[0] = 0;
                if (d.n % 2 == 0)
                    im[d.n / 2] = 0;
                dft_run(&p, re, im, d.n, true, d.n, ore, oim);
            } else {
                for (int64_t t = 0; t < m; t++) {
                    int64_t at = ((o * m + t) * inner + i) * ci;
                    re[t] = slim_load_f64(x->dtype, x->data, at);
                    im[t] = ci == 2 ? slim_load_f64(x->dtype, x->data, at + 1) : 0;
                }
                dft_run(&p, re, im, m, d.inverse, d.n_out, ore, oim);
            }
            for (int64_t k = 0; k < d.n_out; k++) {
                int64_t at = ((o * d.n_out + k) * inner + i) * co;
                slim_store_f64(y->dtype, y->data, at, ore[k]);
                if (co == 2)
                    slim_store_f64(y->dtype, y->data, at + 1, oim[k]);
            }
        }
    slim_scratch_free(buf);
    dft_plan_free(&p);
    return SLIM_OK;
}

/* ---- STFT ---------------------------------------------------------------- */

typedef struct {
    int64_t B, L, step, frame, frames, bins;
} stft_shape;

static slim_status stft_shape_get(slim_op_ctx *ctx, stft_shape *f)
{
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *win = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *len_t = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_status s = slim_check_dtype(x, "signal", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return slim_errf(ctx->err, SLIM_ESHAPE, "signal must be [batch, length, 1 or 2], got "
                         "rank %d", x->ndim);
    memset(f, 0, sizeof(*f));
    f->B = x->dims[0];
    f->L = x->dims[1];
    if ((s = read_len(ctx->in[1], "frame_step", 1, &f->step, ctx->err)))
        return s;
    if (win) {
        if (win->ndim != 1 || win->dtype != x->dtype)
            return slim_errf(ctx->err, SLIM_ESHAPE, "window must be 1-D %s",
                             slim_dtype_name(x->dtype));
        f->frame = win->dims[0];
    }
    if (len_t) {
        int64_t fl;
        if ((s = read_len(len_t, "frame_length", 1, &fl, ctx->err)))
            return s;
        if (win && fl != f->frame)
            return slim_errf(ctx->err, SLIM_EINVAL, "frame_length %lld differs from the "
                             "window's %lld", (long long)fl, (long long)f->frame);
        f->frame = fl;
    } else if (!win) {
        f->frame = f->L;
    }
    if (f->frame < 1 || f->frame > f->L)
        return slim_errf(ctx->err, SLIM_EINVAL, "frame length %lld must be in [1, signal length "
                         "%lld]", (long long)f->frame, (long long)f->L);
    bool onesided = slim_attr_int(ctx->node, "onesided", 1) != 0;
    if (onesided && x->dims[2] == 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "a one-sided STFT needs a real signal");
    f->frames = 1 + (f->L - f->frame) / f->step;
    f->bins = onesided ? f->frame / 2 + 1 : f->frame;
    return SLIM_OK;
}

static slim_status stft_infer(slim_op_ctx *ctx)
{
    stft_shape f;
    slim_status s = stft_shape_get(ctx, &f);
    if (!s)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, 4,
                              (int64_t[]){f.B, f.frames, f.bins, 2});
    return s;
}

static slim_status stft_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *win = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *y = ctx->out[0];
    stft_shape f;
    dft_plan p;
    slim_status s = stft_shape_get(ctx, &f);
    if (s || (s = dft_plan_make(&p, f.frame, ctx->err)))
        return s;
    double *buf = slim_scratch_malloc(sizeof(double) * (size_t)(4 * f.frame));
    if (!buf) {
        dft_plan_free(&p);
        return slim_scratch_oom(ctx->err);
    }
    double *re = buf, *im = buf + f.frame, *ore = buf + 2 * f.frame, *oim = buf + 3 * f.frame;
    const int64_t c = x->dims[2];
    for (int64_t b = 0; b < f.B; b++)
        for (int64_t fr = 0; fr < f.frames; fr++) {
            for (int64_t t = 0; t < f.frame; t++) {
                int64_t at = (b * f.L + fr * f.step + t) * c;
                double w = win ? slim_load_f64(win->dtype, win->data, t) : 1.0;
                re[t] = w * slim_load_f64(x->dtype, x->data, at);
                im[t] = c == 2 ? w * slim_load_f64(x->dtype, x->data, at + 1) : 0;
            }
            dft_run(&p, re, im, f.frame, false, f.bins, ore, oim);
            for (int64_t k = 0; k < f.bins; k++) {
                int64_t at = ((b * f.frames + fr) * f.bins + k) * 2;
                slim_store_f64(y->dtype, y->data, at, ore[k]);
                slim_store_f64(y->dtype, y->data, at + 1, oim[k]);
            }
        }
    slim_scratch_free(buf);
    dft_plan_free(&p);
    return SLIM_OK;
}

/* ---- MelWeightMatrix ----------------------------------------------------- */

/* Triangular filters between mel-spaced points, as the ONNX reference
 * places them: point i's bin is floor((dft_length + 1) * hz(i) / rate). */
typedef struct {
    int64_t mels, dft, rate;
    double lo, hi;
} mel_args;

static slim_status mel_args_get(slim_op_ctx *ctx, mel_args *a)
{
    slim_status s;
    if ((s = read_len(ctx->in[0], "num_mel_bins", 1, &a->mels, ctx->err)) ||
        (s = read_len(ctx->in[1], "dft_length", 1, &a->dft, ctx->err)) ||
        (s = read_len(ctx->in[2], "sample_rate", 1, &a->rate, ctx->err)) ||
        (s = slim_read_scalar_f64(ctx->in[3], "lower_edge_hertz", &a->lo, ctx->err)) ||
        (s = slim_read_scalar_f64(ctx->in[4], "upper_edge_hertz", &a->hi, ctx->err)))
        return s;
    if (!(a->lo >= 0 && a->lo <= a->hi && isfinite(a->hi)))
        return slim_errf(ctx->err, SLIM_EINVAL, "need 0 <= lower_edge_hertz (%g) <= "
                         "upper_edge_hertz (%g)", a->lo, a->hi);
    if ((a->dft / 2 + 1) * a->mels > SIGNAL_MAX_LEN)
        return slim_errf(ctx->err, SLIM_EINVAL, "a %lld x %lld matrix is too large",
                         (long long)(a->dft / 2 + 1), (long long)a->mels);
    return SLIM_OK;
}

static slim_status mel_infer(slim_op_ctx *ctx)
{
    mel_args a;
    slim_dtype dt;
    slim_status s = mel_args_get(ctx, &a);
    if (s || (s = out_dtype(ctx->node, &dt, ctx->err)))
        return s;
    slim_tensor_set_shape(ctx->out[0], dt, 2, (int64_t[]){a.dft / 2 + 1, a.mels});
    return SLIM_OK;
}

static slim_status mel_exec(slim_op_ctx *ctx)
{
    mel_args a;
    slim_status s = mel_args_get(ctx, &a);
    if (s)
        return s;
    slim_tensor *y = ctx->out[0];
    const int64_t bins = a.dft / 2 + 1;
    int64_t *pt = slim_scratch_malloc(sizeof(int64_t) * (size_t)(a.mels + 2));
    if (!pt)
        return slim_scratch_oom(ctx->err);
    const double lo_mel = 2595 * log10(1 + a.lo / 700), hi_mel = 2595 * log10(1 + a.hi / 700);
    const double step = (hi_mel - lo_mel) / (double)(a.mels + 2);
    for (int64_t i = 0; i < a.mels + 2; i++) {
        double hz = 700 * (pow(10, ((double)i * step + lo_mel) / 2595) - 1);
        pt[i] = (int64_t)floor((double)(a.dft + 1) * hz / (double)a.rate);
        if (pt[i] < 0 || pt[i] >= bins) {
            long long bad = (long long)pt[i];
            slim_scratch_free(pt);
            return slim_errf(ctx->err, SLIM_EINVAL, "mel point %lld falls in bin %lld, outside "
                             "the %lld bins", (long long)i, bad, (long long)bins);
        }
    }
    for (int64_t i = 0; i < bins * a.mels; i++)
        slim_store_f64(y->dtype, y->data, i, 0);
    for (int64_t m = 0; m < a.mels; m++) {
        int64_t l = pt[m], c = pt[m + 1], h = pt[m + 2];
        if (c == l)
            slim_store_f64(y->dtype, y->data, c * a.mels + m, 1);
        else
            for (int64_t j = l; j <= c; j++)
                slim_store_f64(y->dtype, y->data, j * a.mels + m,
                               (double)(j - l) / (double)(c - l));
        for (int64_t j = c; j < h; j++)
            slim_store_f64(y->dtype, y->data, j * a.mels + m, (double)(h - j) / (double)(h - c));
    }
    slim_scratch_free(pt);
    return SLIM_OK;
}

const slim_op_def slim__ops_signal[] = {
    {"HannWindow", 17, NULL, NULL, window_infer, window_exec, 0},
    {"HammingWindow", 17, NULL, NULL, window_infer, window_exec, 0},
    {"BlackmanWindow", 17, NULL, NULL, window_infer, window_exec, 0},
    {"DFT", 17, NULL, NULL, dft_infer, dft_exec, 0},
    {"STFT", 17, NULL, NULL, stft_infer, stft_exec, 0},
    {"MelWeightMatrix", 17, NULL, NULL, mel_infer, mel_exec, 0},
    {0},
};
