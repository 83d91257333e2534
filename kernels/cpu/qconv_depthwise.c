/*
 * qconv_depthwise.c - the int8 depthwise convolution (C = M = groups, one
 * input channel per group): ConvInt8 with the depthwise weight layout
 * (slim_qconv.dw_layout), MobileNet's 3x3 convs between the expansion and
 * the projection 1x1 convs.
 *
 * Why a kernel of its own: the packed qgemm layout makes each one-channel
 * group a product of 16 padded channels over 12 padded taps (21-fold the
 * work, one product call per channel), which measured 15x slower than the
 * float32 depthwise conv. Here the weights are taps x C (a tap's channels
 * contiguous) and the activation pixel-major, so one vector holds 16
 * channels of one pixel: each tap is a load of 16 codes, a widening and one
 * multiply-add into 16 int32 sums, the same shape as float32's direct loop
 * with a quarter of its bytes in.
 *
 * Activations are the image's u8 codes, quantized once per image exactly as
 * the other ConvInt8 do (qconv_image.c: one scale and zero point from the
 * image's own range), so an image's output never depends on its batch. The
 * sums sum_t (x_t - zx) * w_t are exact in int32 (|x - zx| <= 255, |w| <=
 * 127, at most SLIM_QCONV_DW_TAPS taps); padding taps hold the code of 0.0 and add
 * nothing. The epilogue is qconv_image.c's: fma(sum, sx * sw, bias), the
 * residual, Relu, Clip, so the C, AVX2 and AVX-512 paths agree bit for bit
 * and the C path is the tests' oracle.
 */
#include "qconv_impl.h"

#include "kernel.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define DW_X86 1
#define DW_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma")))
#define DW_AVX2 __attribute__((target("avx2,fma")))
#endif

/* Channels of one C-path chunk (its sums on the stack). */
#define DW_CHUNK 64

typedef struct {
    const slim_qconv *q;
    const uint8_t *xq;       /* the image's codes, pixel-major */
    int32_t zx;
    const int32_t *w32;      /* [taps][c]: the codes widened, low 16 bits (vpmaddwd) */
    const int8_t *w8;        /* [taps][c] as stored (the C path) */
    const float *sxw;        /* [c]: sx * sw */
    const float *bias;       /* [c] or NULL */
    const int32_t *zcs;      /* [c]: zx * the channel's weight sum (whole pixels) */
    float *dst;              /* pixel p at dst + p * c */
    const float *res;        /* element (p, c) at res[p * res_lp + c * res_lc], or NULL */
    int64_t res_lp, res_lc;
    slim_qgemm_act act;
    bool clip;
    float lo, hi;
    slim_qgemm_isa isa;
    /* Non-NULL: pixel p's finished floats become codes at codes + p * c
     * (1 / scale cinv, zero point czp), a NaN among them sets *bad. */
    uint8_t *codes;
    float cinv;
    int32_t czp;
    uint8_t *bad;
} dw_job;

/* The taps of output pixel p that fall inside the image: their offsets
 * into the codes (pixel * c) and tap indices; returns how many. */
static int dw_taps(const slim_qconv *q, int64_t p, int64_t *off, int64_t *tap)
{
    int64_t oy = p / q->ow, ox = p % q->ow;
    int n = 0;
    for (int64_t ky = 0; ky < q->kh; ky++) {
        int64_t iy = oy * q->sh - q->pt + ky * q->dh;
        if (iy < 0 || iy >= q->h)
            continue;
        for (int64_t kx = 0; kx < q->kw; kx++) {
            int64_t ix = ox * q->sw - q->pl + kx * q->dw;
            if (ix < 0 || ix >= q->w)
                continue;
            off[n] = (iy * q->w + ix) * q->c;
            tap[n++] = ky * q->kw + kx;
        }
    }
    return n;
}

/* One value's epilogue, qconv_image.c's operations in its order. */
static float dw_finish(const dw_job *j, int64_t p, int64_t c, int32_t acc)
{
    float v = fmaf((float)acc, j->sxw[c], j->bias ? j->bias[c] : 0.0f);
    if (j->res)
        v = v + j->res[p * j->res_lp + c * j->res_lc];
    v = j->act == SLIM_QGEMM_ACT_RELU && !(v > 0) ? 0.0f : v;
    return j->clip ? slim__qconv_clip(v, j->lo, j->hi) : v;
}

/* Channels [c0, c) of pixel p, portably. */
static void dw_pixel_c(const dw_job *j, int64_t p, int64_t c0, int n, const int64_t *off,
                       const int64_t *tap)
{
    int64_t c = j->q->c;
    for (int64_t k0 = c0; k0 < c; k0 += DW_CHUNK) {
        int64_t k1 = k0 + DW_CHUNK < c ? k0 + DW_CHUNK : c;
        int32_t acc[DW_CHUNK] = {0};
        for (int t = 0; t < n; t++) {
            const uint8_t *x = j->xq + off[t];
            const int8_t *w = j->w8 + tap[t] * c;
            for (int64_t k = k0; k < k1; k++)
                acc[k - k0] += ((int32_t)x[k] - j->zx) * w[k];
        }
        for (int64_t k = k0; k < k1; k++)
            j->dst[p * c + k] = dw_finish(j, p, k, acc[k - k0]);
    }
}

#ifdef DW_X86
/* The epilogue of 16 channels from k (mask mk) of pixel p. */
DW_AVX512
static inline void dw_store_avx512(const dw_job *j, int64_t p, int64_t k, __mmask16 mk,
                                   __m512i acc)
{
    __m512 zero = _mm512_setzero_ps();
    __m512 bias = j->bias ? _mm512_maskz_loadu_ps(mk, j->bias + k) : zero;
    __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_maskz_loadu_ps(mk, j->sxw + k),
                               bias);
    if (j->res) {
        __m512 rv;
        if (j->res_lc == 1) {
            rv = _mm512_maskz_loadu_ps(mk, j->res + p * j->res_lp + k);
        } else { /* the residual laid out NCHW: a strided column */
            float r[16] = {0};
            for (int64_t i = 0; i < 16 && k + i < j->q->c; i++)
                r[i] = j->res[p * j->res_lp + (k + i) * j->res_lc];
            rv = _mm512_loadu_ps(r);
        }
        v = _mm512_add_ps(v, rv);
    }
    /* max(v, 0) gives 0 for a NaN: the C path's !(v > 0) ? 0 : v. */
    if (j->act == SLIM_QGEMM_ACT_RELU)
        v = _mm512_max_ps(v, zero);
    if (j->clip) {
        __m512 lo = _mm512_set1_ps(j->lo), hi = _mm512_set1_ps(j->hi);
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
    }
    if (!j->codes) {
        _mm512_mask_storeu_ps(j->dst + p * j->q->c + k, mk, v);
        return;
    }
    /* Codes straight from the registers (qconv_codes.h). */
    if (slim__qconv_codes16(v, _mm512_set1_ps(j->cinv), _mm512_set1_epi32(j->czp), mk,
                            j->codes + p * j->q->c + k))
        __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
}

static inline __mmask16 dw_mask(int64_t left)
{
    return left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* The weights' high 16 bits are 0, so vpdpwssd adds the exact product of
 * the low halves: x itself where every tap of the pixel is inside (zx *
 * the weight sum taken off once after), or x - zx (in [-255, 255]: its low
 * 16 bits are the int16 value) where some fall outside. Four blocks of 16
 * channels at a time: four independent chains of vpdpwssd (one chain was
 * bound by its latency, 9 x 5 cycles a block). */
DW_AVX512
static void dw_pixel_avx512(const dw_job *j, int64_t p, int n, const int64_t *off,
                            const int64_t *tap)
{
    int64_t c = j->q->c;
    bool whole = n == j->q->kh * j->q->kw;
    __m512i zx = whole ? _mm512_setzero_si512() : _mm512_set1_epi32(j->zx);
    const uint8_t *xq = j->xq;
    const int32_t *w32 = j->w32;
    for (int64_t k = 0; k < c; k += 64) {
        __mmask16 m0 = dw_mask(c - k), m1 = dw_mask(c - k - 16);
        __mmask16 m2 = dw_mask(c - k - 32), m3 = dw_mask(c - k - 48);
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        if (whole && k + 64 <= c) {
            /* The common case: no zero point to take off per tap, no
             * masks (the loads fold into the instructions). */
            for (int t = 0; t < n; t++) {
                const uint8_t *x = xq + off[t] + k;
                const int32_t *w = w32 + tap[t] * c + k;
#define DW_STEP(acc, o)                                                                            \
    acc = _mm512_dpwssd_epi32(acc, _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x + o))), \
                              _mm512_loadu_si512(w + o))
                DW_STEP(a0, 0);
                DW_STEP(a1, 16);
                DW_STEP(a2, 32);
                DW_STEP(a3, 48);
#undef DW_STEP
            }
        } else {
            for (int t = 0; t < n; t++) {
                const uint8_t *x = xq + off[t] + k;
                const int32_t *w = w32 + tap[t] * c + k;
#define DW_STEP(acc, mk, o)                                                                        \
    acc = _mm512_dpwssd_epi32(                                                                     \
        acc, _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, x + o)), zx),          \
        _mm512_maskz_loadu_epi32(mk, w + o))
                /* Blocks past the channels are skipped, not run masked
                 * (MobileNetV2's 32, 96 and 144 channels end in such). */
                DW_STEP(a0, m0, 0);
                if (m1)
                    DW_STEP(a1, m1, 16);
                if (m2)
                    DW_STEP(a2, m2, 32);
                if (m3)
                    DW_STEP(a3, m3, 48);
#undef DW_STEP
            }
        }
        __m512i acc[4] = {a0, a1, a2, a3};
        __mmask16 m[4] = {m0, m1, m2, m3};
        for (int b = 0; b < 4 && m[b]; b++) {
            int64_t kb = k + 16 * b;
            if (whole)
                acc[b] = _mm512_sub_epi32(acc[b], _mm512_maskz_loadu_epi32(m[b], j->zcs + kb));
            dw_store_avx512(j, p, kb, m[b], acc[b]);
        }
    }
}

DW_AVX2
static void dw_pixel_avx2(const dw_job *j, int64_t p, int n, const int64_t *off,
                          const int64_t *tap)
{
    int64_t c = j->q->c, k = 0;
    __m256i zx = _mm256_set1_epi32(j->zx);
    __m256 zero = _mm256_setzero_ps();
    __m256 lo = _mm256_set1_ps(j->lo), hi = _mm256_set1_ps(j->hi);
    for (; k + 8 <= c; k += 8) {
        __m256i acc = _mm256_setzero_si256();
        for (int t = 0; t < n; t++) {
            __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(j->xq + off[t] + k)));
            __m256i w = _mm256_loadu_si256((const __m256i *)(j->w32 + tap[t] * c + k));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_sub_epi32(x, zx), w));
        }
        __m256 bias = j->bias ? _mm256_loadu_ps(j->bias + k) : zero;
        __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(j->sxw + k), bias);
        if (j->res) {
            float r[8];
            for (int i = 0; i < 8; i++)
                r[i] = j->res[p * j->res_lp + (k + i) * j->res_lc];
            v = _mm256_add_ps(v, _mm256_loadu_ps(r));
        }
        if (j->act == SLIM_QGEMM_ACT_RELU)
            v = _mm256_max_ps(v, zero);
        if (j->clip) {
            v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
            v = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
        }
        _mm256_storeu_ps(j->dst + p * c + k, v);
    }
    if (k < c)
        dw_pixel_c(j, p, k, n, off, tap);
}
#endif

/* Pixel p's finished floats to codes while they are in L1 (the whole
 * image's after it measured 14% of the whole-int8 MobileNetV2). */
static void dw_codes(const dw_job *j, int64_t p)
{
    int64_t c = j->q->c;
    if (slim__qconv_codes(j->dst + p * c, c, j->cinv, j->czp, j->codes + p * c))
        __atomic_store_n(j->bad, 1, __ATOMIC_RELAXED);
}

static void dw_part(int64_t begin, int64_t end, void *user)
{
    const dw_job *j = user;
    /* A pixel's taps (slim_qconv_shape keeps them to SLIM_QCONV_DW_TAPS). */
    int64_t off[SLIM_QCONV_DW_TAPS], tap[SLIM_QCONV_DW_TAPS];
    for (int64_t p = begin; p < end; p++) {
        int n = dw_taps(j->q, p, off, tap);
#ifdef DW_X86
        if (j->isa == SLIM_QGEMM_AVX512VNNI) {
            dw_pixel_avx512(j, p, n, off, tap); /* its codes too */
            continue;
        }
        if (j->isa == SLIM_QGEMM_AVX2)
            dw_pixel_avx2(j, p, n, off, tap);
        else
#endif
            dw_pixel_c(j, p, 0, n, off, tap);
        if (j->codes)
            dw_codes(j, p);
    }
}

/* One image's buffers. */
typedef struct {
    float *xt, *yt;          /* the image pixel-major and the output's (NCHW sides) */
    uint8_t *xq;
    float *sxw;
    int32_t *zcs;
} dw_bufs;

typedef struct {
    const slim_qconv *q;
    const slim_qconv_codes *io;
    const void *x;                /* floats, or codes with io->in */
    const slim_qconv_weights *w;
    void *y;                      /* floats, or codes with io->out */
    const int32_t *w32, *wsum;
    dw_bufs *sets;
    slim_qgemm_isa isa;
    float in_scale, out_inv;
    int32_t in_zp, out_zp;
} dw_run;

static void dw_bufs_free(dw_bufs *b)
{
    slim_scratch_free(b->xt);
    slim_scratch_free(b->yt);
    slim_scratch_free(b->xq);
    slim_scratch_free(b->sxw);
    slim_scratch_free(b->zcs);
}

static bool dw_bufs_alloc(const slim_qconv *q, const slim_qconv_codes *io, dw_bufs *b)
{
    int64_t hw = q->h * q->w, np = q->oh * q->ow, c = q->c;
    bool yt = !q->nhwc_out || io->out; /* codes: the floats before them */
    memset(b, 0, sizeof(*b));
    b->xt = q->nhwc_in ? NULL : slim_scratch_malloc(sizeof(float) * (size_t)(hw * c));
    b->yt = yt ? slim_scratch_malloc(sizeof(float) * (size_t)(np * c)) : NULL;
    b->xq = io->in ? NULL : slim_scratch_malloc((size_t)(hw * c));
    b->sxw = slim_scratch_malloc(sizeof(float) * (size_t)c);
    b->zcs = slim_scratch_malloc(sizeof(int32_t) * (size_t)c);
    return (q->nhwc_in || b->xt) && (!yt || b->yt) && (io->in || b->xq) && b->sxw && b->zcs;
}

/* Image n on buffer set `set` (slim__qconv_for_images). */
static void dw_image(int64_t n, int set, void *user)
{
    const dw_run *r = user;
    const slim_qconv *q = r->q;
    const slim_qconv_weights *w = r->w;
    dw_bufs *b = &r->sets[set];
    int64_t hw = q->h * q->w, np = q->oh * q->ow, c = q->c, taps = q->kh * q->kw;
    dw_job j = {
        .q = q, .xq = b->xq, .w32 = r->w32, .w8 = w->packed, .sxw = b->sxw, .bias = w->bias,
        .zcs = b->zcs, .act = w->act, .clip = w->clip, .lo = w->clip_lo, .hi = w->clip_hi,
        .isa = r->isa,
    };
    float sx = r->in_scale;
    j.zx = r->in_zp;
    if (r->io->in) { /* the codes are the image's, as its producer wrote them */
        j.xq = (const uint8_t *)r->x + n * c * hw;
        if (r->io->x_bad && r->io->x_bad[n])
            sx = NAN; /* the float path's NaN image */
    } else {
        const float *img = (const float *)r->x + n * c * hw;
        if (!q->nhwc_in) {
            slim__qconv_transpose(img, c, hw, b->xt);
            img = b->xt;
        }
        slim__qconv_quantize_image(img, hw * c, b->xq, &sx, &j.zx);
    }
    for (int64_t k = 0; k < c; k++) {
        b->sxw[k] = sx * w->scale[k]; /* slim_qgemm's sx * sw */
        b->zcs[k] = j.zx * r->wsum[k];
    }
    j.dst = q->nhwc_out && !r->io->out ? (float *)r->y + n * np * c : b->yt;
    if (r->io->out) {
        j.codes = (uint8_t *)r->y + n * np * c;
        j.cinv = r->out_inv, j.czp = r->out_zp, j.bad = r->io->y_bad + n;
    }
    j.res = w->residual ? w->residual + n * c * np : NULL;
    j.res_lp = q->nhwc_res ? c : 1;
    j.res_lc = q->nhwc_res ? 1 : np;
    slim_parallel_for(np, 1 + 16384 / (c * taps), dw_part, &j);
    if (!q->nhwc_out)
        slim__qconv_transpose(b->yt, np, c, (float *)r->y + n * c * np);
}

slim_status slim__qconv_depthwise_run(const slim_qconv *q, const slim_qconv_codes *io,
                                      int64_t n_images, const void *x,
                                      const slim_qconv_weights *w, void *y, slim_err *err)
{
    int64_t np = q->oh * q->ow, c = q->c, taps = q->kh * q->kw;
    if (n_images <= 0 || np <= 0)
        return SLIM_OK;
    dw_run r = {q, io, x, w, y, NULL, NULL, NULL, slim_qgemm_get_isa(), 0, 0, 0, 0};
    if ((io->in && !slim_qconv_codes_params(io->in_lo, io->in_hi, &r.in_scale, &r.in_zp)) ||
        (io->out && !slim_qconv_codes_params(io->out_lo, io->out_hi, &r.out_inv, &r.out_zp)))
        return slim_errf(err, SLIM_EINVAL, "ConvInt8: codes need a finite range");
    r.out_inv = io->out ? 1.0f / r.out_inv : 0.0f;
    int32_t *w32 = slim_scratch_malloc(sizeof(int32_t) * (size_t)(taps * c));
    int32_t *wsum = slim_scratch_malloc(sizeof(int32_t) * (size_t)c);
    /* The images in parallel where there are several (qconv.c's reasons). */
    int sets = slim__qconv_image_sets(n_images);
    dw_bufs b[SLIM__QCONV_MAX_SETS];
    bool ok = w32 && wsum;
    for (int s = 0; s < sets; s++)
        ok &= dw_bufs_alloc(q, io, &b[s]);
    if (ok) {
        const int8_t *w8 = w->packed;
        memset(wsum, 0, sizeof(int32_t) * (size_t)c);
        for (int64_t i = 0; i < taps * c; i++) {
            w32[i] = (int32_t)(uint16_t)(int16_t)w8[i];
            wsum[i % c] += w8[i]; /* not w->colsum: the sums this kernel relies on */
        }
        r.w32 = w32, r.wsum = wsum, r.sets = b;
        slim__qconv_for_images(n_images, sets, dw_image, &r);
    }
    for (int s = 0; s < sets; s++)
        dw_bufs_free(&b[s]);
    slim_scratch_free(w32);
    slim_scratch_free(wsum);
    return ok ? SLIM_OK : slim_scratch_oom(err);
}
