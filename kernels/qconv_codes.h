/*
 * qconv_codes.h - ConvInt8 handing u8 codes to the next ConvInt8 instead of
 * float32 (kernels/cpu/qconv.c, qconv_image.c, qconv_depthwise.c).
 *
 *     slim_qconv_codes io = {.out = true, .out_lo = 0, .out_hi = 6};  // ReLU6
 *     slim_qconv_run_codes(&q, &io, n, x, w, y_codes, y_bad, err);
 *
 * Why: a conv whose output is bounded by its fused Clip (MobileNet's ReLU6,
 * [0, 6]) can write that output as u8 codes of the bound's range, in its own
 * epilogue, and the next conv reads the codes as they are: no float tensor
 * a quarter of the bytes wide goes to memory, and the reader's two passes
 * over it (the image's range, then its codes: 21% of MobileNetV2's whole
 * int8 run) are gone. The range is the Clip's, [min(0, lo), max(0, hi)],
 * fixed per node, so an image's codes still depend on nothing but that
 * image; and they are the per-image codes the reader would have made
 * whenever the image's own range is the Clip's (an image that reaches both
 * bounds: 0 and 6 for a ReLU6), the same scale, zero point and rounding
 * (slim_qconv_codes_params). An image whose conv output holds a NaN gets
 * its byte of y_bad set (a NaN has no code), and the reader then gives it
 * the NaN outputs a NaN image gets on the float path.
 */
#ifndef SLIM_QCONV_CODES_H
#define SLIM_QCONV_CODES_H

#include "qgemm.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    /* X is u8 codes, pixel-major [N, H, W, C], of the range [in_lo, in_hi]
     * (as slim_qconv_codes_params makes them); x_bad[n] != 0 marks image
     * n as holding a NaN (x_bad may be NULL: none). */
    bool in;
    float in_lo, in_hi;
    const uint8_t *x_bad;
    /* Y is u8 codes, pixel-major [N, OH, OW, M], of [out_lo, out_hi]
     * (the conv's Clip bounds); y_bad[n] set where image n had a NaN. */
    bool out;
    float out_lo, out_hi;
    uint8_t *y_bad;
} slim_qconv_codes;

/* The u8 scale and zero point of the range [min(0, lo), max(0, hi)]: 255
 * levels, the zero point the code of 0.0 rounded half to even, as the
 * per-image quantization takes an image's range. False when the range is
 * not finite (no codes then). */
bool slim_qconv_codes_params(float lo, float hi, float *scale, int32_t *zp);

/* slim_qconv_run with X and / or Y as codes (io NULL: both float32, i.e.
 * slim_qconv_run). Codes need the per-image path and pixel-major sides:
 * io->in needs q->nhwc_in, io->out q->nhwc_out and a finite Clip in w. */
slim_status slim_qconv_run_codes(const slim_qconv *q, const slim_qconv_codes *io,
                                 int64_t n_images, const void *x, const slim_qconv_weights *w,
                                 void *y, slim_err *err);

#endif
