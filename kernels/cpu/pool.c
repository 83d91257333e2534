/*
 * pool.c - MaxPool, AveragePool, LpPool and their Global forms on the CPU.
 *
 * A pool is memory-bound: each output reads its window once, so the kernel
 * is a direct loop, parallel over output rows (plane, depth, height) so
 * that even a single large plane spreads across threads. For each window
 * the in-bounds taps are computed per dimension up front, which keeps the
 * innermost loops free of bounds checks, and the loops visit only those:
 * work and scratch grow with the input and output, never with the kernel
 * or the pads a model asks for (a 1x4e8 window over one element is one
 * tap per output).
 *
 * Window geometry follows the ONNX spec (and onnxruntime): explicit pads or
 * auto_pad SAME_UPPER/SAME_LOWER/VALID; with ceil_mode the last window may
 * run past the padded input, but never starts past it. AveragePool with
 * count_include_pad divides by the taps inside the padded input, not by
 * the taps that fall beyond it in ceil mode. Spatial ranks 1..3 run as 3-D
 * with leading dimensions of size 1; non-float32 inputs (float16, bfloat16,
 * float64, and int8/uint8 for MaxPool, all exact in float32 or near it) are
 * converted around the loop.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPATIAL 3

typedef enum { POOL_MAX, POOL_AVG, POOL_LP } pool_kind;
typedef enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } pad_mode;

typedef struct pool_attrs {
    pool_kind kind;
    bool global;
    pad_mode auto_pad;
    bool ceil_mode, count_include_pad, column_major; /* column_major: storage_order 1 */
    double p;                                        /* LpPool exponent */
    int n_kernel, n_strides, n_dilations, n_pads;    /* -1 when absent */
    int64_t kernel[SLIM_MAX_DIMS], strides[SLIM_MAX_DIMS], dilations[SLIM_MAX_DIMS];
    int64_t pads[2 * SLIM_MAX_DIMS];
} pool_attrs;

/* Spatial arrays are 3-D: a rank-n input fills the last n entries. */
typedef struct pool_plan {
    int64_t planes; /* N * C */
    int64_t in[MAX_SPATIAL], out[MAX_SPATIAL], kernel[MAX_SPATIAL];
    int64_t stride[MAX_SPATIAL], dilation[MAX_SPATIAL];
    int64_t pad_begin[MAX_SPATIAL], pad_end[MAX_SPATIAL];
    int64_t in_size, out_size;
} pool_plan;

/* ---- attributes ---------------------------------------------------------- */


static slim_status pool_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    pool_attrs *a = calloc(1, sizeof(*a));
    if (!a)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    const char *op = node->op_type;
    a->global = !strncmp(op, "Global", 6);
    const char *base = a->global ? op + 6 : op;
    a->kind = !strcmp(base, "MaxPool") ? POOL_MAX : !strcmp(base, "LpPool") ? POOL_LP : POOL_AVG;

    const slim_attr *p = slim_node_attr(node, "p");
    a->p = !p ? 2.0 : p->type == SLIM_ATTR_FLOAT ? p->f : (double)p->i; /* float before opset 2 */
    if (a->kind == POOL_LP && !(a->p > 0 && isfinite(a->p))) {
        st = slim_errf(err, SLIM_EINVAL, "p = %g, must be a positive number", a->p);
        goto fail;
    }
    if (a->global) {
        *state = a;
        return SLIM_OK;
    }
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
    a->ceil_mode = slim_attr_int(node, "ceil_mode", 0) != 0;
    a->count_include_pad = slim_attr_int(node, "count_include_pad", 0) != 0;
    int64_t order = slim_attr_int(node, "storage_order", 0);
    if (order != 0 && order != 1) {
        st = slim_errf(err, SLIM_EINVAL, "storage_order = %lld, must be 0 or 1", (long long)order);
        goto fail;
    }
    a->column_major = order == 1;
    if ((st = slim_attr_geometry(node, "kernel_shape", a->kernel, SLIM_MAX_DIMS, 1, &a->n_kernel, err)) ||
        (st = slim_attr_geometry(node, "strides", a->strides, SLIM_MAX_DIMS, 1, &a->n_strides, err)) ||
        (st = slim_attr_geometry(node, "dilations", a->dilations, SLIM_MAX_DIMS, 1, &a->n_dilations, err)) ||
        (st = slim_attr_geometry(node, "pads", a->pads, 2 * SLIM_MAX_DIMS, 0, &a->n_pads, err)))
        goto fail;
    if (a->n_kernel < 0) {
        st = slim_errf(err, SLIM_EINVAL, "attribute kernel_shape is required");
        goto fail;
    }
    *state = a;
    return SLIM_OK;
fail:
    free(a);
    return st;
}

static void pool_release(void *state)
{
    free(state);
}

/* ---- shapes -------------------------------------------------------------- */

static slim_status check_input(slim_op_ctx *ctx, const pool_attrs *a)
{
    const slim_tensor *x = ctx->in[0];
    if (a->kind == POOL_MAX)
        return slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                SLIM_I8, SLIM_U8, SLIM_DTYPE_UNDEFINED);
    return slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                            SLIM_DTYPE_UNDEFINED);
}

static slim_status check_count(const char *name, int count, int want, slim_err *err)
{
    if (count >= 0 && count != want)
        return slim_errf(err, SLIM_EINVAL, "attribute %s has %d values, expected %d", name, count, want);
    return SLIM_OK;
}

static slim_status pool_plan_make(slim_op_ctx *ctx, pool_plan *p)
{
    const pool_attrs *a = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_err *err = ctx->err;
    slim_status st = check_input(ctx, a);
    if (st)
        return st;
    if (x->ndim < 3)
        return slim_errf(err, SLIM_EINVAL, "input X has %d dims, expected [N, C, spatial...]", x->ndim);
    int n = x->ndim - 2, off = MAX_SPATIAL - n;
    if (n > MAX_SPATIAL)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%d spatial dims; at most %d supported", n, MAX_SPATIAL);
    if ((st = check_count("kernel_shape", a->n_kernel, n, err)) ||
        (st = check_count("strides", a->n_strides, n, err)) ||
        (st = check_count("dilations", a->n_dilations, n, err)) ||
        (st = check_count("pads", a->n_pads, 2 * n, err)))
        return st;
    p->planes = x->dims[0] * x->dims[1];
    for (int i = 0; i < MAX_SPATIAL; i++) {
        p->in[i] = p->out[i] = p->kernel[i] = p->stride[i] = p->dilation[i] = 1;
        p->pad_begin[i] = p->pad_end[i] = 0;
    }
    for (int j = 0; j < n; j++) {
        int i = off + j;
        int64_t in = x->dims[2 + j];
        p->in[i] = in;
        p->kernel[i] = a->kernel[j];
        int64_t s = p->stride[i] = a->n_strides >= 0 ? a->strides[j] : 1;
        p->dilation[i] = a->n_dilations >= 0 ? a->dilations[j] : 1;
        int64_t span = (p->kernel[i] - 1) * p->dilation[i] + 1;
        if (a->auto_pad == PAD_SAME_UPPER || a->auto_pad == PAD_SAME_LOWER) {
            p->out[i] = (in + s - 1) / s;
            int64_t total = (p->out[i] - 1) * s + span - in;
            if (total < 0)
                total = 0;
            p->pad_begin[i] = a->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
            p->pad_end[i] = total - p->pad_begin[i];
            continue;
        }
        if (a->auto_pad == PAD_NOTSET && a->n_pads >= 0) {
            p->pad_begin[i] = a->pads[j];
            p->pad_end[i] = a->pads[n + j];
        }
        int64_t room = in + p->pad_begin[i] + p->pad_end[i] - span;
        if (room < 0)
            return slim_errf(err, SLIM_ESHAPE,
                             "spatial dim %d: input %lld (padded %lld) is smaller than the window %lld",
                             j, (long long)in, (long long)(in + p->pad_begin[i] + p->pad_end[i]),
                             (long long)span);
        int64_t out = (a->ceil_mode ? (room + s - 1) / s : room / s) + 1;
        /* ceil_mode may add a window, but one starting in the end padding
         * would see no input. */
        if (a->ceil_mode && (out - 1) * s >= in + p->pad_begin[i])
            out--;
        p->out[i] = out;
    }
    p->in_size = p->in[0] * p->in[1] * p->in[2];
    /* Pads and strides from the model can make an output no memory holds;
     * its size must still be computable. */
    if (__builtin_mul_overflow(p->out[0], p->out[1], &p->out_size) ||
        __builtin_mul_overflow(p->out_size, p->out[2], &p->out_size) ||
        __builtin_mul_overflow(p->out_size, p->planes, &(int64_t){0}))
        return slim_errf(err, SLIM_ESHAPE, "the output would have more than 2^63 elements");
    return SLIM_OK;
}

static void set_outputs(slim_op_ctx *ctx, const int64_t *out3)
{
    const slim_tensor *x = ctx->in[0];
    int64_t dims[SLIM_MAX_DIMS];
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int i = 2; i < x->ndim; i++)
        dims[i] = out3[MAX_SPATIAL - (x->ndim - i)];
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_I64, x->ndim, dims);
}

static slim_status pool_infer(slim_op_ctx *ctx)
{
    const pool_attrs *a = ctx->state;
    if (ctx->n_out > 1 && ctx->out[1] && a->kind != POOL_MAX)
        return slim_errf(ctx->err, SLIM_EINVAL, "only MaxPool has an Indices output");
    pool_plan p;
    slim_status st = pool_plan_make(ctx, &p);
    if (st)
        return st;
    set_outputs(ctx, p.out);
    return SLIM_OK;
}

/* ---- windowed pools ------------------------------------------------------ */

/* Per spatial dim and output position: the first and last+1 kernel taps
 * that land inside the input, and how many land inside the padded input
 * (the count_include_pad divisor). Computed arithmetically, never by
 * walking the window. */
typedef struct tap_range {
    int64_t lo, hi, padded;
    float inv_valid, inv_padded; /* 1 / taps, or 0 for none */
} tap_range;

/* slim_window_range, without its divisions for the usual dilation 1. */
static inline void taps_in(int64_t start, int64_t dil, int64_t k, int64_t limit, int64_t *lo,
                           int64_t *hi)
{
    if (dil != 1) {
        slim_window_range(start, dil, k, limit, lo, hi);
        return;
    }
    int64_t l = start >= 0 ? 0 : -start, h = start >= limit ? 0 : limit - start;
    h = h < k ? h : k;
    *lo = l < h ? l : h;
    *hi = h;
}

static inline tap_range tap_at(const pool_plan *p, int i, int64_t o)
{
    tap_range t;
    int64_t start = o * p->stride[i] - p->pad_begin[i], lo, hi;
    taps_in(start, p->dilation[i], p->kernel[i], p->in[i], &t.lo, &t.hi);
    taps_in(start + p->pad_begin[i], p->dilation[i], p->kernel[i],
            p->in[i] + p->pad_begin[i] + p->pad_end[i], &lo, &hi);
    t.padded = hi - lo;
    t.inv_valid = t.hi > t.lo ? 1.0f / (float)(t.hi - t.lo) : 0.0f;
    t.inv_padded = hi > lo ? 1.0f / (float)(hi - lo) : 0.0f;
    return t;
}

/*
 * The ranges along the width are shared by every row, so they are kept in
 * a table when the row is of a sane width (the divisions then stay out of
 * the loops); a row of 4e8 outputs computes them as it goes rather than
 * keep 8 times its own size in ranges.
 */
#define TAP_TABLE_MAX ((int64_t)1 << 16)

typedef struct pool_job {
    const pool_attrs *a;
    const pool_plan *p;
    const float *x;
    float *y;
    int64_t *indices;                /* MaxPool's optional second output */
    const tap_range *taps_w;          /* per ow, or NULL: tap_at as needed */
    const tap_range *outputs_per_tap; /* per kw: the [lo, hi) outputs it reaches; NULL: per output */
    int64_t chunk, n_chunks;          /* a row is cut in n_chunks runs of chunk outputs */
    bool big_units;                   /* a run is long enough to read the clock before each */
} pool_job;

static inline tap_range tap_w(const pool_job *j, int64_t ow)
{
    return j->taps_w ? j->taps_w[ow] : tap_at(j->p, 2, ow);
}

/* Only the taps inside the input of output ow along the width: what the
 * loops need, without the divisors. */
static inline void taps_w_in(const pool_job *j, int64_t ow, int64_t *lo, int64_t *hi)
{
    if (j->taps_w) {
        *lo = j->taps_w[ow].lo;
        *hi = j->taps_w[ow].hi;
        return;
    }
    const pool_plan *p = j->p;
    taps_in(ow * p->stride[2] - p->pad_begin[2], p->dilation[2], p->kernel[2], p->in[2], lo, hi);
}

/*
 * Whether pool_rows may walk a row's kernel tap by tap (each tap adding to
 * the outputs it reaches, which pipelines well). That loop visits every tap
 * of the kernel, padding included, and keeps a range per tap, so it is only
 * for kernels no wider than a few times the row itself: a model may ask for
 * a window of 4e8 over a 1-element input, and then the per-output loop,
 * which visits only taps inside the input, is the one whose work the
 * tensors justify.
 */
static bool tap_major(const pool_plan *p)
{
    return p->out[2] <= TAP_TABLE_MAX && p->kernel[2] <= TAP_TABLE_MAX &&
           p->kernel[2] <= 4 * (p->in[2] + p->out[2]) + 64;
}

/* The width table and the per-tap ranges, in scratch held by holder
 * (which stays empty when neither is kept). */
static slim_status make_tap_ranges(const pool_plan *p, pool_job *j, slim_tensor *holder,
                                   slim_err *err)
{
    memset(holder, 0, sizeof(*holder));
    if (p->out[2] > TAP_TABLE_MAX)
        return SLIM_OK;
    int64_t per_tap = tap_major(p) ? p->kernel[2] : 0;
    tap_range *r = slim_scratch_alloc(holder, p->out[2] + per_tap, sizeof(*r), false, err);
    if (!r)
        return err->status;
    for (int64_t o = 0; o < p->out[2]; o++)
        r[o] = tap_at(p, 2, o);
    j->taps_w = r;
    tap_range *next = r + p->out[2];
    j->outputs_per_tap = per_tap ? next : NULL;
    for (int64_t kw = 0; kw < per_tap; kw++, next++)
        slim_window_range(kw * p->dilation[2] - p->pad_begin[2], p->stride[2], p->out[2], p->in[2],
                          &next->lo, &next->hi);
    return SLIM_OK;
}

/* MaxPool with Indices: per output, the first position holding the max. */
static void argmax_rows(int64_t begin, int64_t end, void *user)
{
    const pool_job *j = user;
    const pool_plan *p = j->p;
    const int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];
    const int64_t ID = p->in[0], IH = p->in[1], IW = p->in[2];
    for (int64_t u = begin; u < end; u++) {
        if (j->big_units ? slim_cancel_check() : slim_cancel_poll())
            return; /* the executor reports it; the output is dropped */
        int64_t r = u / j->n_chunks, ow0 = u % j->n_chunks * j->chunk;
        int64_t ow1 = OW - ow0 < j->chunk ? OW : ow0 + j->chunk;
        int64_t plane = r / (OD * OH), od = r / OH % OD, oh = r % OH;
        const float *x = j->x + plane * p->in_size;
        const tap_range td = tap_at(p, 0, od), th = tap_at(p, 1, oh);
        int64_t dstart = od * p->stride[0] - p->pad_begin[0];
        int64_t hstart = oh * p->stride[1] - p->pad_begin[1];
        for (int64_t ow = ow0; ow < ow1; ow++) {
            const tap_range tw = tap_w(j, ow);
            const int64_t wstart = ow * p->stride[2] - p->pad_begin[2];
            float best = 0.0f; /* stays 0 for a window over padding alone */
            int64_t arg = -1;
            for (int64_t kd = td.lo; kd < td.hi; kd++)
                for (int64_t kh = th.lo; kh < th.hi; kh++) {
                    int64_t id = dstart + kd * p->dilation[0], ih = hstart + kh * p->dilation[1];
                    const float *row = x + (id * IH + ih) * IW;
                    for (int64_t kw = tw.lo; kw < tw.hi; kw++) {
                        int64_t iw = wstart + kw * p->dilation[2];
                        if (arg < 0 || row[iw] > best) {
                            best = row[iw];
                            arg = j->a->column_major ? (iw * IH + ih) * ID + id
                                                     : (id * IH + ih) * IW + iw;
                        }
                    }
                }
            j->y[r * OW + ow] = best;
            j->indices[r * OW + ow] = arg < 0 ? -1 : plane * p->in_size + arg;
        }
    }
}

/* Expands LOOP(expr) with expr the pool's update of a running value acc
 * by an input v: max, or a sum of x, |x|, x^2 or |x|^p. Expanding one
 * loop per case keeps the branch out of the loop body. */
#define POOL_DISPATCH(a, LOOP)          \
    if ((a)->kind == POOL_MAX) {        \
        LOOP(v > acc ? v : acc)         \
    } else if ((a)->kind == POOL_AVG) { \
        LOOP(acc + v)                   \
    } else if ((a)->p == 1) {           \
        LOOP(acc + fabsf(v))            \
    } else if ((a)->p == 2) {           \
        LOOP(acc + v * v)               \
    } else {                            \
        const float p_ = (float)(a)->p; \
        LOOP(acc + powf(fabsf(v), p_))  \
    }

/* y[i] = op(y[i], src[i * stride]) for i in [0, n). Stride-1 and stride-2
 * (downsampling) runs go in blocks of 8, a fixed width the compiler
 * vectorizes at -O2. */
static void accumulate(const pool_attrs *a, const float *restrict src, int64_t stride, int64_t n,
                       float *restrict y)
{
    int64_t i = 0;
#define BLOCKS(expr)                                              \
    if (stride == 1)                                              \
        for (; i + 8 <= n; i += 8)                                \
            for (int k = 0; k < 8; k++) {                         \
                const float v = src[i + k], acc = y[i + k];       \
                y[i + k] = (expr);                                \
            }                                                     \
    else if (stride == 2)                                         \
        for (; i + 8 <= n; i += 8)                                \
            for (int k = 0; k < 8; k++) {                         \
                const float v = src[2 * (i + k)], acc = y[i + k]; \
                y[i + k] = (expr);                                \
            }                                                     \
    for (; i < n; i++) {                                          \
        const float v = src[i * stride], acc = y[i];        \
        y[i] = (expr);                                      \
    }
    POOL_DISPATCH(a, BLOCKS)
#undef BLOCKS
}

/* y[o] = op(y[o], row[start_o + kw * dil]) over the taps kw in [tw[o].lo,
 * tw[o].hi) inside the input: the loop for kernels wider than the row. */
static void accumulate_per_output(const pool_job *j, const float *restrict row, int64_t ow0,
                                  int64_t ow1, float *restrict y)
{
    const pool_attrs *a = j->a;
    const pool_plan *p = j->p;
    const int64_t wstart0 = -p->pad_begin[2], sw = p->stride[2], dil = p->dilation[2];
#define PER_OUTPUT(expr)                                               \
    for (int64_t o = ow0; o < ow1; o++) {                              \
        const float *src = row + wstart0 + o * sw;                     \
        int64_t lo, hi;                                                \
        taps_w_in(j, o, &lo, &hi);                                     \
        float acc = y[o];                                              \
        for (int64_t kw = lo; kw < hi; kw++) {                         \
            const float v = src[kw * dil];                             \
            acc = (expr);                                              \
        }                                                              \
        y[o] = acc;                                                    \
    }
    POOL_DISPATCH(a, PER_OUTPUT)
#undef PER_OUTPUT
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_X86 1
/* Lanes 0 .. k of 16 (none for k < 0). */
static inline __mmask16 lanes_to(int64_t k)
{
    return k < 0 ? 0 : k >= 15 ? (__mmask16)0xffff : (__mmask16)((1u << (k + 1)) - 1);
}

/* max3_interior 16 outputs at a time, for strides 1 and 2 (the stride-2
 * taps split from two loads by even / odd lanes), the last run masked.
 * max_ps(v, acc) is v > acc ? v : acc (its second operand when either is
 * NaN and for equal zeros): the portable comparison, so both give the
 * same bits. A load's lanes past the run's last tap are masked off, so
 * none leaves the row. */
__attribute__((target("avx512f"))) static void max3_avx512(const float *restrict row,
                                                           int64_t start0, int64_t sw,
                                                           int64_t lo, int64_t hi,
                                                           float *restrict y)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                         28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int64_t o = lo; o < hi; o += 16) {
        int64_t n = hi - o < 16 ? hi - o : 16, last = (n - 1) * sw + 2; /* last tap read */
        const float *s = row + start0 + o * sw;
        __mmask16 m = lanes_to(n - 1);
        __m512 t0, t1, t2;
        if (sw == 1) {
            t0 = _mm512_maskz_loadu_ps(m, s);
            t1 = _mm512_maskz_loadu_ps(m, s + 1);
            t2 = _mm512_maskz_loadu_ps(m, s + 2);
        } else { /* taps s[2i], s[2i + 1], s[2i + 2] for i < n: s[0 .. last] */
            __m512 a = _mm512_maskz_loadu_ps(lanes_to(last), s);
            __m512 b = _mm512_maskz_loadu_ps(lanes_to(last - 16), s + 16);
            __m512 a2 = _mm512_maskz_loadu_ps(lanes_to(last - 2), s + 2);
            __m512 b2 = _mm512_maskz_loadu_ps(lanes_to(last - 18), s + 18);
            t0 = _mm512_permutex2var_ps(a, ev, b);
            t1 = _mm512_permutex2var_ps(a, od, b);
            t2 = _mm512_permutex2var_ps(a2, ev, b2);
        }
        __m512 acc = _mm512_maskz_loadu_ps(m, y + o);
        acc = _mm512_max_ps(t0, acc);
        acc = _mm512_max_ps(t1, acc);
        acc = _mm512_max_ps(t2, acc);
        _mm512_mask_storeu_ps(y + o, m, acc);
    }
}
#endif

/* MaxPool's usual 3-wide window (ResNet's stem pool: 3x3, stride 2), over
 * outputs [lo, hi) whose three taps are all inside the row: the three taps
 * of an output in one pass, in tap order, instead of a pass over the row
 * per tap. The same comparisons in the same order per output, so the same
 * bits, with a third of the loads and stores of y and (AVX-512) 16 outputs
 * at a time: the stem pool after a SparseConv, which writes NCHW, had
 * taken 0.9 ms against MaxPoolBlocked's 0.45. */
static void max3_interior(const float *restrict row, int64_t start0, int64_t sw, int64_t lo,
                          int64_t hi, float *restrict y)
{
#ifdef POOL_X86
    if ((sw == 1 || sw == 2) && slim_cpu_has_avx512f()) {
        max3_avx512(row, start0, sw, lo, hi, y);
        return;
    }
#endif
    for (int64_t o = lo; o < hi; o++) {
        const float *s = row + start0 + o * sw;
        float acc = y[o], v = s[0];
        acc = v > acc ? v : acc;
        v = s[1];
        acc = v > acc ? v : acc;
        v = s[2];
        acc = v > acc ? v : acc;
        y[o] = acc;
    }
}

/* Every other pool, a row of outputs at a time: for each kernel tap, the
 * outputs whose window has that tap inside the input accumulate it. The
 * outputs are independent, so the adds pipeline instead of waiting on one
 * running sum. */
static void pool_rows(int64_t begin, int64_t end, void *user)
{
    const pool_job *j = user;
    const pool_attrs *a = j->a;
    const pool_plan *p = j->p;
    const int64_t OD = p->out[0], OH = p->out[1], OW = p->out[2];
    const int64_t IH = p->in[1], IW = p->in[2], sw = p->stride[2];
    /* The outputs all three taps of a 3-wide max window reach. */
    bool max3 = a->kind == POOL_MAX && j->outputs_per_tap && p->kernel[2] == 3 &&
                p->dilation[2] == 1;
    int64_t ilo = 0, ihi = 0;
    for (int kw = 0; max3 && kw < 3; kw++) {
        const tap_range *t = &j->outputs_per_tap[kw];
        ilo = kw == 0 || t->lo > ilo ? t->lo : ilo;
        ihi = kw == 0 || t->hi < ihi ? t->hi : ihi;
    }
    for (int64_t u = begin; u < end; u++) {
        if (j->big_units ? slim_cancel_check() : slim_cancel_poll())
            return; /* the executor reports it; the output is dropped */
        int64_t r = u / j->n_chunks, ow0 = u % j->n_chunks * j->chunk;
        int64_t ow1 = OW - ow0 < j->chunk ? OW : ow0 + j->chunk;
        int64_t plane = r / (OD * OH), od = r / OH % OD, oh = r % OH;
        const float *x = j->x + plane * p->in_size;
        float *y = j->y + r * OW;
        const tap_range td = tap_at(p, 0, od), th = tap_at(p, 1, oh);
        int64_t dstart = od * p->stride[0] - p->pad_begin[0];
        int64_t hstart = oh * p->stride[1] - p->pad_begin[1];
        const float init = a->kind == POOL_MAX ? -INFINITY : 0.0f;
        for (int64_t ow = ow0; ow < ow1; ow++)
            y[ow] = init;
        for (int64_t kd = td.lo; kd < td.hi; kd++)
            for (int64_t kh = th.lo; kh < th.hi; kh++) {
                int64_t id = dstart + kd * p->dilation[0], ih = hstart + kh * p->dilation[1];
                const float *row = x + (id * IH + ih) * IW;
                if (!j->outputs_per_tap) {
                    accumulate_per_output(j, row, ow0, ow1, y);
                    continue;
                }
                if (max3) { /* the edges' taps one output at a time, in order */
                    int64_t lo = ilo < ow0 ? ow0 : ilo > ow1 ? ow1 : ilo;
                    int64_t hi = ihi > ow1 ? ow1 : ihi < lo ? lo : ihi;
                    accumulate_per_output(j, row, ow0, lo, y);
                    max3_interior(row, -p->pad_begin[2], sw, lo, hi, y);
                    accumulate_per_output(j, row, hi, ow1, y);
                    continue;
                }
                for (int64_t kw = 0; kw < p->kernel[2]; kw++) {
                    int64_t off = kw * p->dilation[2] - p->pad_begin[2];
                    int64_t lo = j->outputs_per_tap[kw].lo, hi = j->outputs_per_tap[kw].hi;
                    if (lo < hi)
                        accumulate(a, row + off + lo * sw, sw, hi - lo, y + lo);
                }
            }
        if (a->kind == POOL_AVG && a->count_include_pad) {
            const float scale = td.inv_padded * th.inv_padded;
            for (int64_t ow = ow0; ow < ow1; ow++)
                y[ow] *= scale * tap_w(j, ow).inv_padded;
        } else if (a->kind == POOL_AVG) {
            const float scale = td.inv_valid * th.inv_valid;
            for (int64_t ow = ow0; ow < ow1; ow++)
                y[ow] *= scale * tap_w(j, ow).inv_valid;
        } else if (a->kind == POOL_LP && a->p != 1) {
            for (int64_t ow = ow0; ow < ow1; ow++)
                y[ow] = a->p == 2 ? sqrtf(y[ow]) : powf(y[ow], (float)(1.0 / a->p));
        } else if (a->kind == POOL_MAX) {
            /* A window over padding alone (dilations can skip the input)
             * has no maximum; 0 keeps integer outputs well defined. */
            bool empty_row = td.hi == td.lo || th.hi == th.lo;
            for (int64_t ow = ow0, lo, hi; ow < ow1; ow++) {
                taps_w_in(j, ow, &lo, &hi);
                if (empty_row || hi == lo)
                    y[ow] = 0.0f;
            }
        }
    }
}

static slim_status pool_exec(slim_op_ctx *ctx)
{
    pool_plan p;
    slim_status st = pool_plan_make(ctx, &p);
    if (st)
        return st;
    slim_tensor *out = ctx->out[0];
    slim_tensor *indices = ctx->n_out > 1 ? ctx->out[1] : NULL;
    if (p.planes * p.out_size == 0)
        return SLIM_OK;
    slim_tensor tx, ty, scratch = {.dtype = SLIM_F32, .ndim = 1, .dims = {p.planes * p.out_size}};
    const float *x;
    float *y;
    memset(&ty, 0, sizeof(ty));
    pool_job j = {ctx->state, &p, NULL, NULL, indices ? indices->data : NULL, NULL, NULL, 1, 1, false};
    slim_tensor ranges;
    if ((st = make_tap_ranges(&p, &j, &ranges, ctx->err)))
        return st;
    if ((st = slim_f32_in(ctx->in[0], &tx, &x, ctx->err)))
        goto done;
    /* The pooled values are needed even when only Indices is used. */
    if (out)
        st = slim_f32_out(out, &ty, &y, ctx->err);
    else if (!(st = slim_tensor_alloc(&scratch, ctx->err)))
        y = scratch.data;
    if (st)
        goto done;
    /* An empty input (a zero extent, padded to a nonempty output) has no
     * data pointer; no tap reads it, but offsetting NULL is undefined. */
    static const float no_input[1];
    j.x = x ? x : no_input;
    j.y = y;
    /* Work per row: the taps inside the input, at most min(kernel, input)
     * per dim (the kernel alone may overflow when multiplied out). */
    int64_t row_work = p.out[2];
    for (int i = 0; i < MAX_SPATIAL; i++) {
        int64_t taps = p.kernel[i] < p.in[i] ? p.kernel[i] : p.in[i];
        if (__builtin_mul_overflow(row_work, taps ? taps : 1, &row_work))
            row_work = INT64_MAX;
    }
    /* Rows without a width table (over TAP_TABLE_MAX outputs) are cut
     * into runs, so that a single huge row still spreads across threads
     * and polls for cancellation as it goes. The tap-major loop needs
     * whole rows; it has a table. */
    j.chunk = j.taps_w ? p.out[2] : TAP_TABLE_MAX;
    j.n_chunks = (p.out[2] + j.chunk - 1) / j.chunk;
    row_work = j.n_chunks > 1 ? row_work / p.out[2] * j.chunk : row_work;
    j.big_units = row_work >= 4096;
    slim_parallel_for(p.planes * p.out[0] * p.out[1] * j.n_chunks, 1 + (1 << 14) / row_work,
                      j.indices ? argmax_rows : pool_rows, &j);
    if (out)
        slim_f32_out_finish(out, &ty);
done:
    slim_tensor_release(&ranges);
    slim_tensor_release(&tx);
    slim_tensor_release(&ty);
    slim_tensor_release(&scratch);
    return st;
}

/* ---- global pools -------------------------------------------------------- */

static slim_status global_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = check_input(ctx, ctx->state);
    if (st)
        return st;
    if (x->ndim < 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X has %d dims, expected [N, C, spatial...]", x->ndim);
    int64_t dims[SLIM_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        dims[i] = i < 2 ? x->dims[i] : 1;
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    return SLIM_OK;
}

typedef struct global_job {
    const pool_attrs *a;
    const float *x;
    float *y;
    int64_t size; /* spatial elements per plane */
} global_job;

/* The pool of a whole plane, folded into 8 independent lanes: a single
 * running value would make every step wait for the previous one. */
static float reduce_plane(const pool_attrs *a, const float *restrict x, int64_t n)
{
    if (n == 0)
        return 0.0f;
    float lane[8];
    for (int k = 0; k < 8; k++)
        lane[k] = a->kind == POOL_MAX ? -INFINITY : 0.0f;
    int64_t i = 0;
#define LANES(expr)                                         \
    for (; i + 8 <= n; i += 8)                              \
        for (int k = 0; k < 8; k++) {                       \
            const float v = x[i + k], acc = lane[k];        \
            lane[k] = (expr);                               \
        }                                                   \
    for (int k = 0; i < n; i++, k++) {                      \
        const float v = x[i], acc = lane[k];                \
        lane[k] = (expr);                                   \
    }
    POOL_DISPATCH(a, LANES)
#undef LANES
    double total = 0;
    float best = lane[0];
    for (int k = 0; k < 8; k++) {
        total += lane[k];
        best = lane[k] > best ? lane[k] : best;
    }
    if (a->kind == POOL_MAX)
        return best;
    if (a->kind == POOL_AVG)
        return (float)(total / n);
    return (float)(a->p == 1 ? total : a->p == 2 ? sqrt(total) : pow(total, 1.0 / a->p));
}

static void global_planes(int64_t begin, int64_t end, void *user)
{
    const global_job *j = user;
    for (int64_t plane = begin; plane < end; plane++)
        j->y[plane] = reduce_plane(j->a, j->x + plane * j->size, j->size);
}

static slim_status global_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *out = ctx->out[0];
    int64_t planes = x->dims[0] * x->dims[1];
    if (!out || planes == 0)
        return SLIM_OK;
    slim_tensor tx, ty;
    const float *xf;
    float *y;
    memset(&ty, 0, sizeof(ty));
    slim_status st;
    if ((st = slim_f32_in(x, &tx, &xf, ctx->err)) || (st = slim_f32_out(out, &ty, &y, ctx->err)))
        goto done;
    static const float no_input[1]; /* empty planes: see pool_exec */
    global_job j = {ctx->state, xf ? xf : no_input, y, slim_tensor_numel(x) / planes};
    slim_parallel_for(planes, 1 + (1 << 14) / (j.size ? j.size : 1), global_planes, &j);
    slim_f32_out_finish(out, &ty);
done:
    slim_tensor_release(&tx);
    slim_tensor_release(&ty);
    return st;
}

const slim_op_def slim__ops_pool[] = {
    {"MaxPool", 1, pool_prepare, pool_release, pool_infer, pool_exec, 0},
    {"AveragePool", 1, pool_prepare, pool_release, pool_infer, pool_exec, 0},
    {"LpPool", 1, pool_prepare, pool_release, pool_infer, pool_exec, 0},
    {"GlobalMaxPool", 1, pool_prepare, pool_release, global_infer, global_exec, 0},
    {"GlobalAveragePool", 1, pool_prepare, pool_release, global_infer, global_exec, 0},
    {"GlobalLpPool", 1, pool_prepare, pool_release, global_infer, global_exec, 0},
    {0},
};
