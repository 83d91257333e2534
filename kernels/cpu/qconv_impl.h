/*
 * qconv_impl.h - inside the int8 convolution (kernels/cpu/qconv.c, the
 * driver; kernels/cpu/qconv_image.c, the per-image u8 path).
 *
 *     float sx; int32_t zx;
 *     slim__qconv_quantize_image(xt, hw * c, xq, &sx, &zx);   // once per image
 *     slim__qconv_block b = {...};                             // per group x pixel block
 *     slim__qconv_im2col_u8(&b);  slim__qconv_product_u8(&b, w);
 *
 * Per image, not per im2col row: the image's pixel-major floats are
 * quantized once to u8 with one scale and zero point from the image's own
 * range (so an image's codes never depend on the other images of the
 * batch), im2col copies bytes (padding is the zero point, the code of 0.0),
 * slim_qgemm_u8 sums them exactly in int32 into the output's own memory, and
 * one epilogue turns the sums into floats with the bias, the fused residual
 * and the Relu in the same pass.
 */
#ifndef SLIM_QCONV_IMPL_H
#define SLIM_QCONV_IMPL_H

#include "qconv_codes.h"
#include "qgemm.h"

#include <stdint.h>

/* x (n floats) to u8 codes q[n] with one scale and zero point: the range
 * [min(0, min x), max(0, max x)] over 255 levels, the zero point its code
 * of 0.0 (round half to even, as slim_qgemm_quantize_row), codes
 * round(x / scale) + zp clamped to [0, 255]. Any NaN or infinity: scale
 * NaN, codes 0 (the outputs then NaN). Runs on the kernel threads; the
 * C, AVX2 and AVX-512 paths give the same bytes (min, max and the rounding
 * are exact). */
void slim__qconv_quantize_image(const float *x, int64_t n, uint8_t *q, float *scale, int32_t *zp);

/* q[i] = the code of x[i] for 1 / scale inv and zero point zp (the
 * per-image codes' operation, C, AVX2 or AVX-512 alike); true if x holds a
 * NaN (which has no code). */
bool slim__qconv_codes(const float *x, int64_t n, float inv, int32_t zp, uint8_t *q);

#if defined(__x86_64__)
#include <immintrin.h>
/* 16 finished floats v (lanes mk) to their codes at dst, 1 / scale inv and
 * zero point zp as slim__qconv_codes (the same operations, so the same
 * bytes): for the epilogues that write codes straight from registers.
 * Returns the lanes holding a NaN. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __mmask16
slim__qconv_codes16(__m512 v, __m512 inv, __m512i zp, __mmask16 mk, uint8_t *dst)
{
    __mmask16 nan = _mm512_mask_cmp_ps_mask(mk, v, v, _CMP_UNORD_Q);
    __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
    c = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(c, zp), _mm512_setzero_si512()),
                         _mm512_set1_epi32(255));
    _mm_mask_storeu_epi8(dst, mk, _mm512_cvtepi32_epi8(c));
    return nan;
}
#endif

/* One group's block of output pixels on the per-image u8 path. */
typedef struct {
    const slim_qconv *q;
    const uint8_t *xq;        /* the image's codes, pixel-major (h, w, c) */
    int32_t zx;               /* its zero point */
    uint8_t *rows;            /* im2col rows, k4 bytes each (NULL: direct) */
    const int32_t *zxv;       /* nr copies of zx, as slim_qgemm_u8 takes them */
    const float *sxw;         /* [mg]: sx * sw[j] of the group's channels */
    const float *bias;        /* [mg] or NULL */
    int64_t g, p0, nr, kg, k4, mg;
    float *dst;               /* the block's outputs, row stride ldd */
    int64_t ldd;
    /* The residual to add before act (NULL: none), element (pixel p,
     * channel c) of the image at res[p * res_lp + c * res_lc]. */
    const float *res;
    int64_t res_lp, res_lc;
    slim_qgemm_act act;
    bool clip;                /* then Clip(clip_lo, clip_hi) */
    float clip_lo, clip_hi;
    /* Non-NULL: each finished row (dst, floats) also becomes codes here,
     * row r at codes + r * ldc (1 / scale and zero point cinv, czp), and a
     * NaN among them sets *bad (slim_qconv_codes). */
    uint8_t *codes;
    int64_t ldc;
    float cinv;
    int32_t czp;
    uint8_t *bad;
} slim__qconv_block;

/* b->rows from the image's codes (rows r of the block, all of them). */
void slim__qconv_im2col_u8(const slim__qconv_block *b);
/* The block's product (rows, or the codes themselves where the conv is
 * direct) and its epilogue into dst: act(fma(sum, sx * sw, bias) [+ res]). */
void slim__qconv_product_u8(const slim__qconv_block *b, const uint8_t *a,
                            const slim_qconv_weights *w, const int8_t *packed);

/* The Clip node's operation (kernels/cpu/elementwise_loops.c): a NaN
 * passes through; the vector paths compare the same way (ordered, so a NaN
 * takes neither bound). */
static inline float slim__qconv_clip(float v, float lo, float hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* dst[j][i] = src[i][j] for src a rows of b floats, on the kernel threads
 * (16 x 16 AVX-512 tiles where the qgemm path is AVX-512): the moves
 * between NCHW images and pixel-major ones. */
void slim__qconv_transpose(const float *src, int64_t a, int64_t b, float *dst);

/* A batch's images in parallel: each image whole on one thread, with one
 * of `sets` buffer sets (at most SLIM__QCONV_MAX_SETS) of its own; the
 * loops inside it run inline there. slim__qconv_image_sets says how many
 * sets a run of n images needs (1: the images in turn, each split across
 * the threads; also under SLIM_INT8_CONV_IMAGES=off). fn(n, set, user) runs
 * once per image. */
#define SLIM__QCONV_MAX_SETS 64
int slim__qconv_image_sets(int64_t n_images);
void slim__qconv_for_images(int64_t n_images, int sets, void (*fn)(int64_t n, int set, void *user),
                            void *user);

/* slim_qconv_run for q->dw_layout (kernels/cpu/qconv_depthwise.c). */
slim_status slim__qconv_depthwise_run(const slim_qconv *q, const slim_qconv_codes *io,
                                      int64_t n_images, const void *x,
                                      const slim_qconv_weights *w, void *y, slim_err *err);

#endif
