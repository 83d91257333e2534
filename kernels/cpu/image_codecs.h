/*
 * image_codecs.h - the image formats ImageDecoder reads (image_decoder.c).
 *
 * Every codec works on an encoded file held in memory, which is untrusted
 * (it may come straight from an HTTP request). probe reads only the header
 * and gives the size; decode writes width x height RGB pixels (8 bits,
 * row-major, alpha dropped, grey replicated) into a buffer the caller sized
 * from probe, and fails when the stream no longer agrees with that size.
 * Neither prints, exits or leaks on a corrupt or truncated stream: each
 * failure is a status with a message naming the format.
 *
 * BMP and PNM are parsed here by hand (image_decoder.c); JPEG, PNG, TIFF,
 * WebP and JPEG 2000 go through Debian's libraries (image_codecs.c), each
 * optional at build time (SLIM_HAVE_JPEG, ...): without one, its format
 * fails with "decoding FORMAT needs LIB, not built in".
 */
#ifndef SLIM_IMAGE_CODECS_H
#define SLIM_IMAGE_CODECS_H

#include "slim.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SLIM_IMG_UNKNOWN = 0,
    SLIM_IMG_BMP,
    SLIM_IMG_PNM,
    SLIM_IMG_JPEG,
    SLIM_IMG_PNG,
    SLIM_IMG_TIFF,
    SLIM_IMG_WEBP,
    SLIM_IMG_JP2, /* JPEG 2000 in its JP2 box container */
    SLIM_IMG_J2K, /* a bare JPEG 2000 codestream */
} slim_img_format;

/* The format named by the stream's first bytes (magic numbers). */
slim_img_format slim_img_detect(const uint8_t *buf, size_t n);
const char *slim_img_format_name(slim_img_format f);

/* The most pixels (width x height) one image may have; checked after the
 * header, before any pixel buffer is allocated. 2^28 by default, or
 * SLIM_IMAGE_MAX_PIXELS from the environment (read once), or what
 * slim_img_set_max_pixels set (tests). */
int64_t slim_img_max_pixels(void);
void slim_img_set_max_pixels(int64_t n);
/* EINVAL naming the format unless 1 <= w, h and w*h <= the limit. */
slim_status slim_img_check_size(slim_img_format f, uint64_t w, uint64_t h, slim_err *err);

typedef struct {
    slim_status (*probe)(const uint8_t *buf, size_t n, uint32_t *w, uint32_t *h, slim_err *err);
    slim_status (*decode)(const uint8_t *buf, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                          slim_err *err);
} slim_img_codec;

/* The hand-written ones (image_decoder.c). */
extern const slim_img_codec slim_img_bmp, slim_img_pnm;
/* The library ones (image_codecs.c); a codec not built in fails both
 * calls with EUNSUPPORTED. */
extern const slim_img_codec slim_img_jpeg, slim_img_png, slim_img_tiff, slim_img_webp,
    slim_img_jp2;

/* The codec for f, NULL for SLIM_IMG_UNKNOWN. */
const slim_img_codec *slim_img_codec_for(slim_img_format f);

#endif
