/*
 * qconv.c - 2-D convolution on the int8 matrix product (qgemm.h): the
 * engine of com.slimserve ConvInt8 (kernels/cpu/qlinear.c), which the int8
 * pass (quant/int8_conv.c) puts in place of Conv.
 *
 * Per image, the input is first transposed to pixel-major (HWC) order, so
 * that one output pixel's receptive field is kh * kw contiguous runs of
 * C/group floats. Its im2col row -- K ordered (ky, kx, channel), the order
 * the pass packs the weights in -- is then a handful of memcpy calls, and a
 * 1x1 stride-1 unpadded conv needs no im2col at all: the transposed image is
 * the matrix. With nhwc_in the input is pixel-major already (a ConvInt8
 * before wrote it so) and is read as is; with nhwc_out the product is
 * written straight into the pixel-major output.
 *
 * Activations are quantized once per image (qconv_image.c: one scale and
 * zero point from the image's own range, byte im2col rows, the exact
 * product into the output, one epilogue with the residual fused), or with
 * act_rows (SLIM_INT8_CONV_ACT=row) per im2col row by slim_qgemm (one
 * scale and zero point per output pixel). Either way an image's output
 * depends only on that image: bitwise the same whatever batch it ran in,
 * and however the rows are cut into blocks. With an NCHW output the
 * product comes out pixel-major and is transposed back.
 *
 * The same driver runs the float32 reference (slim_qconv_weights.wf: the
 * weights as floats in the packed K order) on the same im2col rows with
 * slim_sgemm: the int8 pass's error check.
 */
#include "qconv_impl.h"

#include "kernel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Floats of im2col rows per block: 8 MiB, as conv.c's budget. */
#define ROW_BUDGET (2 << 20)
/* Bytes of a block's rows and sums on the per-image path. */
#define BLOCK_BYTES_U8 (1 << 20)

int64_t slim_qconv_kg(const slim_qconv *q)
{
    return q->c / q->groups * q->kh * q->kw;
}

size_t slim_qconv_packed_bytes(const slim_qconv *q)
{
    if (q->dw_layout)
        return (size_t)(q->kh * q->kw * q->c);
    return (size_t)q->groups * slim_qgemm_packed_bytes(q->m / q->groups, slim_qconv_kg(q));
}

const char *slim_qconv_shape(slim_qconv *q, slim_qconv_pad auto_pad)
{
    if (q->c < 1 || q->m < 1 || q->groups < 1)
        return "input channels, output channels and group must be >= 1";
    if (q->c % q->groups || q->m % q->groups)
        return "channels are not divisible by group";
    if (q->kh < 1 || q->kw < 1 || q->sh < 1 || q->sw < 1 || q->dh < 1 || q->dw < 1)
        return "kernel, strides and dilations must be >= 1";
    if (q->pt < 0 || q->pl < 0 || q->pb < 0 || q->pr < 0)
        return "pads must be >= 0";
    if (q->dw_layout && (q->groups != q->c || q->m != q->c))
        return "the depthwise weight layout needs input channels = output channels = group";
    if (q->dw_layout && q->kh * q->kw > SLIM_QCONV_DW_TAPS)
        return "the depthwise weight layout takes at most 256 taps";
    if (slim_qconv_kg(q) > SLIM_QGEMM_MAX_K)
        return "C / group x kernel is over 32768";
    int64_t in[2] = {q->h, q->w}, k[2] = {q->kh, q->kw}, s[2] = {q->sh, q->sw};
    int64_t d[2] = {q->dh, q->dw}, *pb[2] = {&q->pt, &q->pl}, *pe[2] = {&q->pb, &q->pr};
    int64_t *out[2] = {&q->oh, &q->ow};
    for (int i = 0; i < 2; i++) {
        int64_t span = (k[i] - 1) * d[i] + 1;
        if (in[i] > (1LL << 30) || span > (1LL << 30))
            return "spatial size is over 2^30";
        if (auto_pad == SLIM_QCONV_SAME_UPPER || auto_pad == SLIM_QCONV_SAME_LOWER) {
            *out[i] = (in[i] + s[i] - 1) / s[i];
            int64_t total = (*out[i] - 1) * s[i] + span - in[i];
            total = total < 0 ? 0 : total;
            *pb[i] = auto_pad == SLIM_QCONV_SAME_UPPER ? total / 2 : total - total / 2;
            *pe[i] = total - *pb[i];
        } else {
            if (auto_pad == SLIM_QCONV_VALID)
                *pb[i] = *pe[i] = 0;
            int64_t room = in[i] + *pb[i] + *pe[i] - span;
            if (room < 0)
                return "the input (padded) is smaller than the kernel extent";
            *out[i] = room / s[i] + 1;
        }
    }
    return NULL;
}

/* ---- the driver ---------------------------------------------------------- */

/* SLIM_INT8_CONV_ACT=row: every conv quantizes per im2col row (A/B). */
static bool rows_forced(void)
{
    static _Atomic int forced = -1;
    if (forced < 0) {
        const char *e = getenv("SLIM_INT8_CONV_ACT");
        forced = e && strcmp(e, "row") == 0;
    }
    return forced == 1;
}

typedef struct {
    const slim_qconv *q;
    const float *x;      /* one image, CHW */
    float *xt;           /* HWC */
    float *rows;         /* im2col rows of the block, kg floats each */
    const float *tmp;    /* the block's product, pixels x mg */
    float *y;            /* the group's first output plane */
    int64_t g, p0, nr, kg, mg;   /* group, first pixel and pixels of the block */
} qconv_job;

/* dst[j][i] = src[i][j] for rows x cols: the moves between the NCHW
 * tensors and the pixel-major matrices. Pure moves, so every path gives the
 * same bytes; AVX-512 transposes 16 x 16 tiles in registers (a scalar
 * strided loop cost as much as the int8 product itself on ResNet-50). */
static void transpose_c(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t rows,
                        int64_t cols)
{
    for (int64_t i0 = 0; i0 < rows; i0 += 16)
        for (int64_t j = 0; j < cols; j++)
            for (int64_t i = i0; i < rows && i < i0 + 16; i++)
                dst[j * ldd + i] = src[i * lds + j];
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f")))
static void transpose_avx512(const float *src, int64_t lds, float *dst, int64_t ldd,
                             int64_t rows, int64_t cols)
{
    int64_t r16 = rows & ~(int64_t)15, c16 = cols & ~(int64_t)15;
    for (int64_t i0 = 0; i0 < r16; i0 += 16)
        for (int64_t j0 = 0; j0 < c16; j0 += 16) {
            __m512 r[16], t[16], u[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(src + (i0 + i) * lds + j0);
            /* Per 128-bit lane L: t pairs rows, u holds column 4L + k of
             * 4 rows; then lanes are gathered across u's. */
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int i = 0; i < 16; i += 4) {
                __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
                __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
                u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
                u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
                u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
                u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
            }
            for (int k = 0; k < 4; k++) {
                __m512 p = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
                __m512 q = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
                __m512 p2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
                __m512 q2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
                _mm512_storeu_ps(dst + (j0 + k) * ldd + i0, _mm512_shuffle_f32x4(p, p2, 0x88));
                _mm512_storeu_ps(dst + (j0 + 4 + k) * ldd + i0,
                                 _mm512_shuffle_f32x4(p, p2, 0xDD));
                _mm512_storeu_ps(dst + (j0 + 8 + k) * ldd + i0,
                                 _mm512_shuffle_f32x4(q, q2, 0x88));
                _mm512_storeu_ps(dst + (j0 + 12 + k) * ldd + i0,
                                 _mm512_shuffle_f32x4(q, q2, 0xDD));
            }
        }
    /* The edges. */
    if (c16 < cols)
        transpose_c(src + c16, lds, dst + c16 * ldd, ldd, r16, cols - c16);
    if (r16 < rows)
        transpose_c(src + r16 * lds, lds, dst + r16, ldd, rows - r16, cols);
}
#endif

static void transpose(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t rows,
                      int64_t cols)
{
#if defined(__x86_64__)
    /* The qgemm path choice, so that tests forcing the C path run this one
     * too. */
    if (slim_qgemm_get_isa() == SLIM_QGEMM_AVX512VNNI) {
        transpose_avx512(src, lds, dst, ldd, rows, cols);
        return;
    }
#endif
    transpose_c(src, lds, dst, ldd, rows, cols);
}

typedef struct {
    const float *src;
    float *dst;
    int64_t a, b;   /* src is a rows of b */
} move_job;

/* Rows [16 begin, 16 end) of src, transposed into dst. */
static void move_part(int64_t begin, int64_t end, void *user)
{
    const move_job *j = user;
    int64_t r0 = begin * 16, r1 = end * 16 < j->a ? end * 16 : j->a;
    transpose(j->src + r0 * j->b, j->b, j->dst + r0, j->a, r1 - r0, j->b);
}

void slim__qconv_transpose(const float *src, int64_t a, int64_t b, float *dst)
{
    move_job j = {src, dst, a, b};
    slim_parallel_for((a + 15) / 16, 1 + 8192 / (16 * (b ? b : 1)), move_part, &j);
}

/* The image's pixels [64 b, 64 (b + 1)) to pixel-major rows. */
static void transpose_part(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    int64_t hw = j->q->h * j->q->w;
    for (int64_t b = begin; b < end; b++) {
        int64_t p0 = b * 64, p1 = p0 + 64 < hw ? p0 + 64 : hw;
        transpose(j->x + p0, hw, j->xt + p0 * j->q->c, j->q->c, j->q->c, p1 - p0);
    }
}

/* The block's product (pixels x channels) into output channels
 * [16 begin, 16 end) of the NCHW planes. */
static void untranspose_part(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    int64_t np = j->q->oh * j->q->ow;
    int64_t c0 = begin * 16, c1 = end * 16 < j->mg ? end * 16 : j->mg;
    transpose(j->tmp + c0, j->mg, j->y + c0 * np + j->p0, np, j->nr, c1 - c0);
}

static void im2col_part(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    const slim_qconv *q = j->q;
    int64_t cg = q->c / q->groups;
    size_t run = sizeof(float) * (size_t)cg;
    for (int64_t r = begin; r < end; r++) {
        int64_t p = j->p0 + r, oy = p / q->ow, ox = p % q->ow;
        float *dst = j->rows + r * j->kg;
        for (int64_t ky = 0; ky < q->kh; ky++) {
            int64_t iy = oy * q->sh - q->pt + ky * q->dh;
            for (int64_t kx = 0; kx < q->kw; kx++, dst += cg) {
                int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
                    memset(dst, 0, run);
                else
                    memcpy(dst, j->xt + (iy * q->w + ix) * q->c + j->g * cg, run);
            }
        }
    }
}

typedef struct {
    float *y;
    const float *r;
    int64_t n, m, np;     /* elements, channels and pixels of the image */
    bool cross, y_nhwc;   /* r laid out otherwise than y; y's layout */
    slim_qgemm_act act;
    bool clip;
    float lo, hi;
} residual_job;

/* y = act(y + r) over elements [4096 begin, 4096 end) of y: the residual
 * Add and its Relu, as those nodes compute them, in one pass. Where the
 * layouts differ (the first and last convs of a pixel-major trunk), r is
 * read transposed. */
static void residual_part(int64_t begin, int64_t end, void *user)
{
    const residual_job *j = user;
    int64_t i1 = end * 4096 < j->n ? end * 4096 : j->n;
    if (!j->cross) { /* the common case, a loop the compiler vectorizes */
        float *y = j->y;
        const float *r = j->r;
        bool relu = j->act == SLIM_QGEMM_ACT_RELU;
        for (int64_t i = begin * 4096; i < i1; i++) {
            float v = y[i] + r[i];
            v = relu && !(v > 0) ? 0.0f : v;
            y[i] = j->clip ? slim__qconv_clip(v, j->lo, j->hi) : v;
        }
        return;
    }
    /* y[i] with i = a * ld + b is r[b * lr + a]: y NHWC (a pixel, b
     * channel) or NCHW (a channel, b pixel); (a, b) stepped, not divided. */
    int64_t ld = j->y_nhwc ? j->m : j->np, lr = j->y_nhwc ? j->np : j->m;
    int64_t a = begin * 4096 / ld, b = begin * 4096 % ld;
    for (int64_t i = begin * 4096; i < i1; i++) {
        float v = j->y[i] + j->r[b * lr + a];
        v = j->act == SLIM_QGEMM_ACT_RELU && !(v > 0) ? 0.0f : v;
        j->y[i] = j->clip ? slim__qconv_clip(v, j->lo, j->hi) : v;
        if (++b == ld) {
            b = 0;
            a++;
        }
    }
}

/* Bias, Relu and Clip after the float reference's product, as Conv (+ Relu
 * or Clip) computes them in float32; bias NULL: only the activations (after
 * slim_qgemm, which has no Clip). */
static void float_epilogue(float *t, int64_t rows, int64_t ld, int64_t mg, const float *bias,
                           slim_qgemm_act act, const slim_qconv_weights *w)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < mg; c++) {
            float v = t[r * ld + c] + (bias ? bias[c] : 0.0f);
            v = act == SLIM_QGEMM_ACT_RELU && !(v > 0) ? 0.0f : v;
            /* With a residual the residual pass clips, after the Add. */
            bool clip = w->clip && !w->residual;
            t[r * ld + c] = clip ? slim__qconv_clip(v, w->clip_lo, w->clip_hi) : v;
        }
}

/* The buffers of one run, sized for a block of pixels. */
typedef struct {
    float *xt;       /* the image pixel-major (NCHW inputs) */
    float *rows;     /* float im2col rows (per-row path and reference) */
    float *tmp;      /* the block's product (NCHW outputs) */
    void *scratch;   /* slim_qgemm's (per-row path) */
    uint8_t *xq;     /* the image's codes (per-image path) */
    uint8_t *rows8;  /* byte im2col rows (per-image path) */
    int32_t *zxv;    /* the block's zero points (per-image path) */
    float *sxw;      /* [m]: the image's scale x each channel's */
} qconv_bufs;

static void bufs_free(qconv_bufs *b)
{
    slim_scratch_free(b->xt);
    slim_scratch_free(b->rows);
    slim_scratch_free(b->tmp);
    slim_scratch_free(b->scratch);
    slim_scratch_free(b->xq);
    slim_scratch_free(b->rows8);
    slim_scratch_free(b->zxv);
    slim_scratch_free(b->sxw);
}

/* NULL-safe: allocates only where want, and records a failure in *bad. */
static void *buf(bool want, size_t bytes, bool *bad)
{
    if (!want)
        return NULL;
    void *p = slim_scratch_malloc(bytes ? bytes : 1);
    *bad |= !p;
    return p;
}

/* One group's block of pixels on the per-image path: byte im2col (unless
 * the codes are the matrix), the product, the epilogue; the residual is
 * fused when the output is pixel-major (res non-NULL). io: the image's
 * codes and zero point (xq, zx) and, where the output is codes, where they
 * go (codes .. bad), the block's rows from codes[0]. */
static void block_per_image(const slim_qconv *q, const qconv_job *j, const qconv_bufs *b,
                            const slim__qconv_block *io, const slim_qconv_weights *w, float *dst,
                            int64_t ldd, const float *res, slim_qgemm_act act)
{
    int64_t k4 = slim_qgemm_k4(j->kg), np = q->oh * q->ow;
    bool direct8 = !b->rows8;
    slim__qconv_block blk = {
        .q = q, .xq = io->xq, .zx = io->zx, .rows = b->rows8, .zxv = b->zxv,
        .sxw = b->sxw + j->g * j->mg, .bias = w->bias ? w->bias + j->g * j->mg : NULL,
        .g = j->g, .p0 = j->p0, .nr = j->nr, .kg = j->kg, .k4 = k4, .mg = j->mg,
        .dst = dst, .ldd = ldd, .act = act,
        .clip = w->clip && !(w->residual && !res), .clip_lo = w->clip_lo, .clip_hi = w->clip_hi,
        .codes = io->codes, .ldc = io->ldc, .cinv = io->cinv, .czp = io->czp, .bad = io->bad,
    };
    if (res) {
        blk.res = res + (q->nhwc_res ? j->g * j->mg : j->g * j->mg * np);
        blk.res_lp = q->nhwc_res ? q->m : 1;
        blk.res_lc = q->nhwc_res ? 1 : np;
    }
    if (!direct8)
        slim__qconv_im2col_u8(&blk);
    slim__qconv_product_u8(&blk, direct8 ? io->xq + j->p0 * q->c : b->rows8, w,
                           w->packed + j->g * slim_qgemm_packed_bytes(j->mg, j->kg));
}

/* One group's block of pixels on the per-row path (or the float
 * reference): float im2col, then slim_qgemm (or slim_sgemm). */
static void block_per_row(const slim_qconv *q, qconv_job *j, const qconv_bufs *b, bool direct,
                          const slim_qconv_weights *w, float *dst, int64_t ldd,
                          slim_qgemm_act act)
{
    int64_t g = j->g, mg = j->mg, kg = j->kg, nr = j->nr;
    const float *a = j->xt + j->p0 * q->c + g * (q->c / q->groups);
    int64_t lda = q->c;
    if (!direct) {
        slim_parallel_for(nr, 1 + 4096 / kg, im2col_part, j);
        a = b->rows;
        lda = kg;
    }
    const float *bias = w->bias ? w->bias + g * mg : NULL;
    if (w->wf) {
        slim_sgemm(false, true, nr, mg, kg, 1.0f, a, lda, w->wf + g * mg * kg, kg, 0.0f, dst,
                   ldd);
        float_epilogue(dst, nr, ldd, mg, bias, act, w);
        return;
    }
    slim_qgemm_args qa = {
        .m = nr, .n = mg, .k = kg, .x = a, .ldx = lda,
        .packed = w->packed + g * slim_qgemm_packed_bytes(mg, kg), .colsum = w->colsum + g * mg,
        .w_scale = w->scale + g * mg, .bias = bias, .act = act, .y = dst, .ldy = ldd,
    };
    slim_qgemm(&qa, b->scratch);
    if (w->clip) /* slim_qgemm has no Clip */
        float_epilogue(dst, nr, ldd, mg, NULL, SLIM_QGEMM_ACT_NONE, w);
}

/* ---- images in parallel --------------------------------------------------- */

/* SLIM_INT8_CONV_IMAGES=off: a batch's images one after another, each split
 * across the threads (the before, A/B). */
static bool images_off(void)
{
    static _Atomic int off = -1;
    if (off < 0) {
        const char *e = getenv("SLIM_INT8_CONV_IMAGES");
        off = e && strcmp(e, "off") == 0;
    }
    return off == 1;
}

int slim__qconv_image_sets(int64_t n_images)
{
    int t = slim_num_threads();
    if (images_off() || n_images < 2 || t < 2)
        return 1;
    t = t < SLIM__QCONV_MAX_SETS ? t : SLIM__QCONV_MAX_SETS;
    return n_images < t ? (int)n_images : t;
}

typedef struct {
    int sets;
    _Atomic int busy[SLIM__QCONV_MAX_SETS];
    void (*fn)(int64_t n, int set, void *user);
    void *user;
} images_job;

/* A part of the pool's loop takes a free buffer set for its images. At most
 * slim_num_threads() parts run at once (the caller and the workers), so
 * there is always one free. */
static void images_part(int64_t begin, int64_t end, void *user)
{
    images_job *j = user;
    int s = 0;
    for (;; s = (s + 1) % j->sets) {
        int idle = 0;
        if (atomic_compare_exchange_strong(&j->busy[s], &idle, 1))
            break;
    }
    for (int64_t n = begin; n < end; n++)
        j->fn(n, s, j->user);
    atomic_store(&j->busy[s], 0);
}

void slim__qconv_for_images(int64_t n_images, int sets, void (*fn)(int64_t n, int set, void *user),
                            void *user)
{
    if (sets <= 1) {
        for (int64_t n = 0; n < n_images; n++)
            fn(n, 0, user);
        return;
    }
    images_job j = {.sets = sets > SLIM__QCONV_MAX_SETS ? SLIM__QCONV_MAX_SETS : sets,
                    .fn = fn, .user = user};
    for (int s = 0; s < SLIM__QCONV_MAX_SETS; s++)
        atomic_init(&j.busy[s], 0);
    slim_parallel_for(n_images, 1, images_part, &j);
}

/* ---- one run ------------------------------------------------------------- */

/* What every image of one run shares. */
typedef struct {
    const slim_qconv *q;
    const void *x;      /* floats, or codes with io->in */
    const slim_qconv_weights *w;
    void *y;            /* floats, or codes with io->out */
    const slim_qconv_codes *io;
    float in_scale, out_inv;
    int32_t in_zp, out_zp;
    int64_t hw, np, mg, kg, block;
    bool per_image, direct, res_fused;
    slim_qgemm_act act;
    qconv_bufs *sets;   /* one buffer set per image in flight */
} run_ctx;

static bool bufs_alloc(const run_ctx *c, qconv_bufs *b)
{
    const slim_qconv *q = c->q;
    int64_t k4 = slim_qgemm_k4(c->kg), block = c->block;
    bool direct8 = c->direct && q->groups == 1 && q->c % 4 == 0, bad = false;
    memset(b, 0, sizeof(*b));
    b->xt = buf(!q->nhwc_in, sizeof(float) * (size_t)(c->hw * q->c), &bad);
    b->rows = buf(!c->per_image && !c->direct, sizeof(float) * (size_t)(block * c->kg), &bad);
    b->tmp = buf(!q->nhwc_out || c->io->out, sizeof(float) * (size_t)(block * c->mg), &bad);
    b->scratch = buf(!c->w->wf && !c->per_image, slim_qgemm_scratch_bytes(block, c->kg), &bad);
    b->xq = buf(c->per_image && !c->io->in, (size_t)(c->hw * q->c), &bad);
    b->rows8 = buf(c->per_image && !direct8, (size_t)(block * k4), &bad);
    b->zxv = buf(c->per_image, sizeof(int32_t) * (size_t)block, &bad);
    b->sxw = buf(c->per_image, sizeof(float) * (size_t)q->m, &bad);
    return !bad;
}

/* Image n of the run, on buffer set `set`. */
static void run_image(int64_t n, int set, void *user)
{
    const run_ctx *c = user;
    const slim_qconv *q = c->q;
    const slim_qconv_weights *w = c->w;
    qconv_bufs *b = &c->sets[set];
    int64_t hw = c->hw, np = c->np, mg = c->mg, block = c->block;
    const slim_qconv_codes *io = c->io;
    const float *xf = io->in ? NULL : (const float *)c->x + n * q->c * hw;
    qconv_job j = {q, xf, b->xt, b->rows, b->tmp, NULL, 0, 0, 0, c->kg, mg};
    slim__qconv_block in = {.xq = b->xq};
    if (io->in) /* the codes are the image's, as its producer wrote them */
        in.xq = (const uint8_t *)c->x + n * q->c * hw;
    else if (q->nhwc_in)
        j.xt = (float *)xf; /* read only */
    else
        slim_parallel_for((hw + 63) / 64, 1 + 8192 / (64 * q->c), transpose_part, &j);
    if (c->per_image) {
        float sx = c->in_scale;
        in.zx = c->in_zp;
        if (io->in && io->x_bad && io->x_bad[n])
            sx = NAN; /* the float path's NaN image */
        else if (!io->in)
            slim__qconv_quantize_image(j.xt, hw * q->c, b->xq, &sx, &in.zx);
        for (int64_t i = 0; i < block; i++)
            b->zxv[i] = in.zx;
        for (int64_t ch = 0; ch < q->m; ch++)
            b->sxw[ch] = sx * w->scale[ch]; /* slim_qgemm's sx * sw */
    }
    const float *res = c->res_fused ? w->residual + n * q->m * np : NULL;
    for (int64_t g = 0; g < q->groups; g++)
        for (int64_t p0 = 0; p0 < np; p0 += block) {
            j.g = g;
            j.p0 = p0;
            j.nr = np - p0 < block ? np - p0 : block;
            /* Pixel-major output: the product goes to its place; codes
             * come from the block's floats in tmp. */
            float *yf = io->out ? NULL : (float *)c->y;
            float *dst = q->nhwc_out && !io->out ? yf + (n * np + p0) * q->m + g * mg : b->tmp;
            int64_t ldd = q->nhwc_out && !io->out ? q->m : mg;
            if (io->out) {
                in.codes = (uint8_t *)c->y + (n * np + p0) * q->m + g * mg;
                in.ldc = q->m, in.cinv = c->out_inv, in.czp = c->out_zp;
                in.bad = io->y_bad + n;
            }
            if (c->per_image)
                block_per_image(q, &j, b, &in, w, dst, ldd, res, c->act);
            else
                block_per_row(q, &j, b, c->direct, w, dst, ldd, c->act);
            if (q->nhwc_out)
                continue;
            j.y = yf + (n * q->m + g * mg) * np;
            slim_parallel_for((mg + 15) / 16, 1 + 8192 / (16 * j.nr), untranspose_part, &j);
        }
    if (w->residual && !c->res_fused) {
        residual_job rj = {(float *)c->y + n * q->m * np, w->residual + n * q->m * np, q->m * np, q->m,
                           np, q->nhwc_res != q->nhwc_out, q->nhwc_out, w->act,
                           w->clip, w->clip_lo, w->clip_hi};
        slim_parallel_for((rj.n + 4095) / 4096, 1, residual_part, &rj);
    }
}

slim_status slim_qconv_run(const slim_qconv *q, int64_t n_images, const float *x,
                           const slim_qconv_weights *w, float *y, slim_err *err)
{
    return slim_qconv_run_codes(q, NULL, n_images, x, w, y, err);
}

/* Why codes cannot be used here, or NULL (the op checks its attributes the
 * same way; this guards the entry point). */
static const char *codes_refused(const slim_qconv *q, const slim_qconv_codes *io,
                                 const slim_qconv_weights *w)
{
    if ((io->in || io->out) && (w->wf || q->act_rows))
        return "codes need the per-image path";
    if (io->in && !q->nhwc_in)
        return "input codes need a pixel-major input";
    if (io->out && (!q->nhwc_out || !w->clip || !io->y_bad))
        return "output codes need a pixel-major output, a Clip and y_bad";
    return NULL;
}

slim_status slim_qconv_run_codes(const slim_qconv *q, const slim_qconv_codes *io,
                                 int64_t n_images, const void *x, const slim_qconv_weights *w,
                                 void *y, slim_err *err)
{
    static const slim_qconv_codes none = {0};
    io = io ? io : &none;
    const char *why = codes_refused(q, io, w);
    if (why)
        return slim_errf(err, SLIM_EINVAL, "ConvInt8: %s", why);
    if (q->dw_layout && !w->wf)
        return slim__qconv_depthwise_run(q, io, n_images, x, w, y, err);
    run_ctx c = {.q = q, .x = x, .w = w, .y = y, .io = io};
    if ((io->in && !slim_qconv_codes_params(io->in_lo, io->in_hi, &c.in_scale, &c.in_zp)) ||
        (io->out && !slim_qconv_codes_params(io->out_lo, io->out_hi, &c.out_inv, &c.out_zp)))
        return slim_errf(err, SLIM_EINVAL, "ConvInt8: codes need a finite range");
    c.out_inv = io->out ? 1.0f / c.out_inv : 0.0f;
    c.hw = q->h * q->w, c.np = q->oh * q->ow;
    c.mg = q->m / q->groups, c.kg = slim_qconv_kg(q);
    int64_t np = c.np, mg = c.mg, kg = c.kg, k4 = slim_qgemm_k4(kg);
    /* Codes are read and written on the per-image path only. */
    c.per_image = !w->wf && !q->act_rows && (!rows_forced() || io->in || io->out);
    c.direct = q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->pt == 0 &&
               q->pl == 0 && q->pb == 0 && q->pr == 0;
    /* The residual goes into the per-image epilogue when the output is
     * pixel-major (written in place there); else a pass of its own. */
    c.res_fused = c.per_image && w->residual && q->nhwc_out;
    /* With a residual the activation comes after it. */
    c.act = w->residual && !c.res_fused ? SLIM_QGEMM_ACT_NONE : w->act;
    if (n_images <= 0 || np <= 0)
        return SLIM_OK;
    int64_t block = ROW_BUDGET / kg > ROW_BUDGET / mg ? ROW_BUDGET / mg : ROW_BUDGET / kg;
    block = block < 16 ? 16 : block;
    if (c.per_image) {
        /* A block's byte rows and int32 sums in about 1 MiB, so that the
         * epilogue reads the sums from cache (with ResNet-50's first
         * stages as one block of 3136 pixels, perf gave the epilogue 12%
         * of the run; 1 MiB, 256 KiB and whole images were not told apart
         * on the loaded machine); a multiple of 96 rows, whole row chunks
         * of the product's tasks. */
        block = (BLOCK_BYTES_U8 / (k4 + 4 * mg)) / 96 * 96;
        block = block < 96 ? 96 : block;
    }
    c.block = block < np ? block : np;
    /* Several images on several threads: each image whole on one thread
     * (its loops run inline there), so a conv waits for the others once
     * instead of three or four times per image -- MobileNetV2's small
     * convs were mostly those waits at batch 8 -- and an image's range and
     * codes pass reads what the same core just wrote. The per-row path
     * and the float reference keep the images in turn. An image's bytes
     * are the same either way: nothing in it depends on how it is cut. */
    int sets = c.per_image ? slim__qconv_image_sets(n_images) : 1;
    qconv_bufs b[SLIM__QCONV_MAX_SETS];
    bool bad = false;
    for (int s = 0; s < sets; s++)
        bad |= !bufs_alloc(&c, &b[s]);
    if (!bad) {
        c.sets = b;
        slim__qconv_for_images(n_images, sets, run_image, &c);
    }
    for (int s = 0; s < sets; s++)
        bufs_free(&b[s]);
    return bad ? slim_scratch_oom(err) : SLIM_OK;
}
