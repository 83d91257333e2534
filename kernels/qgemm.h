/*
 * qgemm.h - the int8 matrix product behind slimserve's dynamic quantization
 * (quant/int8.c inserts it, kernels/cpu/qlinear.c runs it).
 *
 *     int8_t *packed = ...;  // slim_qgemm_packed_bytes(n, k) bytes, 64-byte aligned
 *     int32_t colsum[n];
 *     slim_qgemm_pack(wq, n, k, packed, colsum);          // once, at load
 *     slim_qgemm_args a = {.m = m, .n = n, .k = k, .x = x, .ldx = k, .packed = packed,
 *                          .colsum = colsum, .w_scale = scales, .bias = bias, .y = y, .ldy = n};
 *     slim_qgemm(&a, scratch);                              // per run
 *
 * y[i][j] = act(sx_i * sw_j * sum_k (qx[i][k] - zx_i) * qw[j][k] + bias[j]).
 *
 * Weights are symmetric int8 per output channel (qw in [-127, 127], the
 * caller's scales sw). Activations are quantized per row at run time to u8
 * with a zero point: (sx_i, zx_i) come from row i's own minimum and maximum
 * (always including 0), so a row's result never depends on the other rows
 * of the call -- the batching guarantee -- and u8 with a zero point spends
 * all 256 levels on a row's actual range, which matters after GELU and
 * Softmax-like outputs that are far from symmetric around 0. u8 x s8 is
 * also what vpdpbusd multiplies, with no +128 shift needed.
 *
 * Products accumulate exactly in int32 (k <= SLIM_QGEMM_MAX_K keeps every
 * partial sum in range), and the float epilogue is the same sequence of
 * correctly rounded operations on every path (convert, multiply, fused
 * multiply-add, max), so the portable C path, AVX2 and AVX-512 VNNI give
 * bitwise the same y: the C path is the tests' oracle.
 *
 * Packed layout (part of the MatMulInt8 operator's definition, stored as is
 * in .slim files): channels padded to a multiple of 16 and cut into panels of
 * 64 (the last one 16, 32, 48 or 64 wide); k padded to a multiple of 4 with
 * zeros. Panel p starts at byte p * 64 * k4 and holds, for each group g of
 * 4 k's, its width's channels j with their 4 bytes qw[j][4g .. 4g+3]: one
 * 64-byte row is what one vpdpbusd multiplies against 4 broadcast bytes.
 */
#ifndef SLIM_QGEMM_H
#define SLIM_QGEMM_H

#include "slim.h"

#include <stdint.h>

/* Beyond this k, an int32 accumulator could overflow (k * 255 * 127 * 2). */
#define SLIM_QGEMM_MAX_K 32768
#define SLIM_QGEMM_PANEL 64

typedef enum {
    SLIM_QGEMM_ACT_NONE = 0,
    SLIM_QGEMM_ACT_RELU,
    /* ONNX Gelu with approximate "none": y * (1 + erf(y / sqrt 2)) / 2, by
     * slim_qgemm_gelu (every path the same operations: bitwise equal). */
    SLIM_QGEMM_ACT_GELU,
} slim_qgemm_act;
#define SLIM_QGEMM_HAS_GELU 1 /* for code built against older versions too (bench) */

/* The code paths; AUTO picks the best the CPU has (CPUID, once). */
typedef enum {
    SLIM_QGEMM_AUTO = 0,
    SLIM_QGEMM_C,
    SLIM_QGEMM_AVX2,
    SLIM_QGEMM_AVX512VNNI,
} slim_qgemm_isa;

int64_t slim_qgemm_k4(int64_t k);             /* k rounded up to 4 */
int64_t slim_qgemm_n16(int64_t n);            /* n rounded up to 16 */
size_t slim_qgemm_packed_bytes(int64_t n, int64_t k);

/* Packs wq (n rows of k int8, channel-major) and sums each channel's
 * weights into colsum[n]. packed has slim_qgemm_packed_bytes(n, k) bytes. */
void slim_qgemm_pack(const int8_t *wq, int64_t n, int64_t k, int8_t *packed, int32_t *colsum);
/* The inverse (tests, and passes that read a packed weight back). */
void slim_qgemm_unpack(const int8_t *packed, int64_t n, int64_t k, int8_t *wq);

typedef struct slim_qgemm_args {
    int64_t m, n, k;
    const float *x;           /* m rows of k floats, row stride ldx */
    int64_t ldx;
    const int8_t *packed;     /* slim_qgemm_pack's layout */
    const int32_t *colsum;    /* [n] */
    const float *w_scale;     /* [n] */
    const float *bias;        /* [n] or NULL */
    slim_qgemm_act act;
    float *y;                 /* m rows of n floats, row stride ldy */
    int64_t ldy;
    /* Instead of y: the exact int32 sums sum_k (qx[i][k] - zx_i) * qw[j][k]
     * (slim_qgemm_u8 only; w_scale, bias and act are not read). */
    int32_t *y_i32;
    /* Outlier input channels (quant/int8.c) taken out of the int8 product:
     * their codes are 0 in packed, and they get their own int8 weights
     * with their own per-channel scales, multiplied by the float32
     * activations: y[i][j] += outl_scale[j] * sum_o x[i][outl_idx[o]] *
     * outl_q[o][j] (the sum a chain of fused multiply-adds in o order, then
     * one with the scale), per row, before the activation. n_outl 0: none
     * (slim_qgemm only). */
    int64_t n_outl;
    const int64_t *outl_idx;  /* [n_outl], each in [0, k) */
    const int8_t *outl_q;     /* n_outl rows of n codes */
    const float *outl_scale;  /* [n] */
    /* Sparse float32 entries taken out of the int8 weight (quant/int8.c:
     * each channel's largest, whose size would set its int8 step), their
     * codes in packed 0: y[i][j] += sum_t x[i][sp_idx[t][j]] * sp_val[t][j]
     * (a chain of fused multiply-adds in t order from 0, added to y after
     * the outlier channels), per row, before the activation. n_sp entries
     * per channel (pad entries have value 0); 0: none (slim_qgemm only). */
    int64_t n_sp;
    const int32_t *sp_idx;    /* n_sp rows of n indices, each in [0, k) */
    const float *sp_val;      /* n_sp rows of n values */
} slim_qgemm_args;

/* Bytes of scratch slim_qgemm needs for m rows of k. */
size_t slim_qgemm_scratch_bytes(int64_t m, int64_t k);
/* Runs the product on the kernel threads, on the selected path. scratch is
 * slim_qgemm_scratch_bytes(m, k) bytes, 64-byte aligned. A row holding a
 * NaN or an infinity gives a row of NaN (before the activation). */
void slim_qgemm(const slim_qgemm_args *a, void *scratch);

/* The product with a second int8 weight for the first one's rounding error
 * (kernels/cpu/qgemm_res.c): y = act(p(a, no activation) + p2), p2 the
 * product of the same rows with res_packed, res_colsum and res_scale (no
 * bias, no outlier channels), the sum per element. scratch has
 * slim_qgemm_res_scratch_bytes(m, n, k) bytes, 64-byte aligned. Rows stay
 * independent of each other, as in slim_qgemm. */
size_t slim_qgemm_res_scratch_bytes(int64_t m, int64_t n, int64_t k);
void slim_qgemm_res(const slim_qgemm_args *a, const int8_t *res_packed,
                    const int32_t *res_colsum, const float *res_scale, void *scratch);

/* Packs a weight stored k x n row-major with row stride ldb (as MatMul's
 * B), the same layout and column sums as slim_qgemm_pack of its
 * transpose; a straight copy, cheap enough to run per call. */
void slim_qgemm_pack_kn(const int8_t *b, int64_t k, int64_t n, int64_t ldb, int8_t *packed,
                        int32_t *colsum);
/* The product of rows already quantized (ONNX's MatMulInteger and the
 * like): qx is m rows of slim_qgemm_k4(k) bytes, the padding 0, zx one
 * zero point per row; writes a->y_i32 (a->x, sx, scales unused). Exact,
 * so bitwise the same on every path and under any split. */
void slim_qgemm_u8(const slim_qgemm_args *a, const uint8_t *qx, const int32_t *zx);

/* The epilogue's Gelu of one value: a table of polynomials in fused
 * multiply-adds (gelu_poly.h), within 1e-7 x max(|y|, 1) of the exact
 * Gelu (7.5e-8 on [-10, 10]). Exposed for tests. */
float slim_qgemm_gelu(float y);

/* Quantizes one row of k floats to u8 (k4 bytes written, the padding 0):
 * *scale and *zero_point as described above; a non-finite row gets scale
 * NaN and all zeros. Exposed for tests. */
void slim_qgemm_quantize_row(const float *x, int64_t k, uint8_t *q, float *scale,
                             int32_t *zero_point);
/* The same for rows rows (row i at x + i * ldx, its bytes at q + i * k4),
 * as slim_qgemm quantizes them: bitwise slim_qgemm_quantize_row's. */
void slim_qgemm_quantize_rows(const float *x, int64_t ldx, int64_t rows, int64_t k, uint8_t *q,
                              float *scale, int32_t *zero_point);

/* ---- 2-D convolution on the product (kernels/cpu/qconv.c) ----------------
 *
 * Weights of output channel j are one qgemm row of kg = C/groups * kh * kw
 * codes ordered (ky, kx, input channel of the group); each group's M/groups
 * channels are packed on their own (slim_qgemm_pack), group after group, and
 * the activations are quantized once per image to u8 (one scale and zero
 * point from the image's own range), or per output pixel (its im2col row)
 * with act_rows. */
typedef struct slim_qconv {
    int64_t c, h, w;            /* input channels and size */
    int64_t m, groups;          /* output channels, groups */
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pt, pl, pb, pr;     /* pads: top, left, bottom, right */
    int64_t oh, ow;             /* output size (slim_qconv_shape) */
    /* Pixel-major (NHWC) input and / or output instead of NCHW: between
     * two ConvInt8 the activation stays pixel-major (no transposes). */
    bool nhwc_in, nhwc_out;
    bool nhwc_res;              /* the residual (slim_qconv_weights) likewise */
    /* Activations quantized per im2col row (slim_qgemm's way, the before)
     * instead of once per image (kernels/cpu/qconv_image.c; also forced
     * with SLIM_INT8_CONV_ACT=row). Both keep an image's result
     * independent of its batch. */
    bool act_rows;
    /* Depthwise weights in their own layout (kernels/cpu/qconv_depthwise.c):
     * C = M = groups, W is taps x C int8 codes, tap (ky, kx) major, a tap's
     * channels contiguous, so the kernel multiplies 16 channels of a pixel
     * at once; slim_qconv_packed_bytes is then kh * kw * C. Always the
     * per-image path (act_rows is not read); at most SLIM_QCONV_DW_TAPS
     * taps. */
    bool dw_layout;
} slim_qconv;

#define SLIM_QCONV_DW_TAPS 256

typedef enum {
    SLIM_QCONV_NOTSET = 0, SLIM_QCONV_SAME_UPPER, SLIM_QCONV_SAME_LOWER, SLIM_QCONV_VALID,
} slim_qconv_pad;

typedef struct slim_qconv_weights {
    const int8_t *packed;       /* groups x slim_qgemm_packed_bytes(m / groups, kg) */
    const int32_t *colsum;      /* [m] */
    const float *scale;         /* [m] */
    const float *bias;          /* [m] or NULL */
    slim_qgemm_act act;
    /* Instead of the int8 weights: float32 ones, [m][kg] in the packed K
     * order (the int8 pass's float32 reference on the same im2col rows). */
    const float *wf;
    /* A residual of Y's shape added to conv + bias before act (ResNet's
     * Add, then its Relu), NCHW or pixel-major (nhwc_res); or NULL. */
    const float *residual;
    /* After act: Clip(clip_lo, clip_hi), as the Clip node computes it
     * (v < lo ? lo : v > hi ? hi : v; a NaN stays NaN): MobileNet's ReLU6
     * fused. */
    bool clip;
    float clip_lo, clip_hi;
} slim_qconv_weights;

int64_t slim_qconv_kg(const slim_qconv *q);
size_t slim_qconv_packed_bytes(const slim_qconv *q);
/* Checks the geometry and sets oh, ow (and the pads, for SAME and VALID);
 * returns why it is unusable, or NULL. */
const char *slim_qconv_shape(slim_qconv *q, slim_qconv_pad auto_pad);
/* y[n_images, m, oh, ow] from x[n_images, c, h, w] (NCHW float32), or
 * [n, oh, ow, m] / [n, h, w, c] with q->nhwc_out / q->nhwc_in: the same
 * values, only laid out pixel-major. */
slim_status slim_qconv_run(const slim_qconv *q, int64_t n_images, const float *x,
                           const slim_qconv_weights *w, float *y, slim_err *err);

/* The path slim_qgemm uses: the best available, or the one forced with
 * slim_qgemm_set_isa (tests) or SLIM_INT8_ISA=c|avx2|avx512vnni. */
slim_qgemm_isa slim_qgemm_get_isa(void);
/* Forces a path for the calling process; false if the CPU lacks it. */
bool slim_qgemm_set_isa(slim_qgemm_isa isa);
bool slim_qgemm_isa_supported(slim_qgemm_isa isa);
const char *slim_qgemm_isa_name(slim_qgemm_isa isa);

/* On the AVX-512 VNNI path, full 64-channel panels of 16 rows or more run
 * on AMX tiles where the CPU has them (Sapphire Rapids and later) and the
 * kernel grants them (kernels/cpu/qgemm_amx.c): the same exact int32 sums,
 * so the outputs are bitwise the VNNI loops'. On unless SLIM_INT8_AMX=0;
 * slim_qgemm_set_amx(false) turns it off for the process (tests, A/B) and
 * returns whether it is now on. */
bool slim_qgemm_set_amx(bool on);
bool slim_qgemm_amx_active(void);

#endif
