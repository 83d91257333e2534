/*
 * image_codecs.c - JPEG, PNG, TIFF, WebP and JPEG 2000 for ImageDecoder,
 * through libjpeg-turbo, libpng, libtiff, libwebp and OpenJPEG
 * (image_codecs.h gives the contract).
 *
 * The streams are untrusted, and each library's defaults are unfit for
 * that: libjpeg's and libpng's error handlers print and exit (so both get
 * one that records the message and longjmps back), libtiff prints every
 * warning to stderr (so its handlers only record the first error), and all
 * read from memory through callbacks that never run past the buffer. Sizes
 * are checked against slim_img_max_pixels before any pixel buffer exists.
 *
 * The pixels match PIL's (which made the ONNX node tests' expected
 * outputs): libjpeg's default islow IDCT and fancy upsampling, no gamma
 * correction in PNG, and alpha dropped rather than composited.
 */
#include "image_codecs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CODEC_MSG 200

/* A codec that is not built in fails both calls alike. */
#define SLIM__NOT_BUILT(var, what, lib)                                                      \
    static slim_status var##_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h,     \
                                   slim_err *err)                                            \
    {                                                                                        \
        (void)b, (void)n, (void)w, (void)h;                                                  \
        return slim_errf(err, SLIM_EUNSUPPORTED, "decoding " what " needs " lib              \
                         ", not built in");                                                  \
    }                                                                                        \
    static slim_status var##_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h,      \
                                    uint8_t *rgb, slim_err *err)                             \
    {                                                                                        \
        (void)rgb;                                                                           \
        return var##_probe(b, n, &w, &h, err);                                               \
    }                                                                                        \
    const slim_img_codec slim_img_##var = {var##_probe, var##_decode};

/* Decoded size must agree with what probe reported (infer sized the output
 * from it). Unused in a build with no codec library. */
__attribute__((unused)) static slim_status same_size(const char *what, uint64_t w, uint64_t h,
                                                     uint32_t want_w, uint32_t want_h,
                                                     slim_err *err)
{
    if (w == want_w && h == want_h)
        return SLIM_OK;
    return slim_errf(err, SLIM_EINVAL, "%s decodes to %llux%llu, its header said %ux%u", what,
                     (unsigned long long)w, (unsigned long long)h, want_w, want_h);
}

/* ---- JPEG (libjpeg-turbo) ------------------------------------------------ */
#ifdef SLIM_HAVE_JPEG
#include <jerror.h>
#include <jpeglib.h>
#include <setjmp.h>

/* A progressive JPEG may hold thousands of tiny scans that each cost a
 * pass over the image; libjpeg-turbo's own advice is to cap them. */
#define JPEG_MAX_SCANS 500

typedef struct {
    struct jpeg_error_mgr pub; /* first: libjpeg hands back this pointer */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_guard;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_guard *g = (jpeg_guard *)c->err;
    c->err->format_message(c, g->msg);
    longjmp(g->jb, 1);
}

/* Warnings print nothing; a stream that ends early is an error (libjpeg
 * would pad it with grey, PIL refuses it). */
static void jpeg_on_message(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
        jpeg_on_error(c);
}

static void jpeg_no_output(j_common_ptr c)
{
    (void)c;
}

static void jpeg_on_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (c->is_decompressor && d->input_scan_number > JPEG_MAX_SCANS) {
        jpeg_guard *g = (jpeg_guard *)c->err;
        snprintf(g->msg, sizeof(g->msg), "more than %d progressive scans", JPEG_MAX_SCANS);
        longjmp(g->jb, 1);
    }
}

/* rgb NULL: header only, size into *w, *h. */
static slim_status jpeg_run(const uint8_t *buf, size_t n, uint32_t *w, uint32_t *h, uint8_t *rgb,
                            slim_err *err)
{
    struct jpeg_decompress_struct d;
    struct jpeg_progress_mgr prog;
    jpeg_guard g;
    memset(&d, 0, sizeof(d));
    memset(&prog, 0, sizeof(prog));
    d.err = jpeg_std_error(&g.pub);
    g.pub.error_exit = jpeg_on_error;
    g.pub.emit_message = jpeg_on_message;
    g.pub.output_message = jpeg_no_output;
    g.msg[0] = 0;
    if (n > ULONG_MAX)
        return slim_errf(err, SLIM_EINVAL, "JPEG stream of %zu bytes is too large", n);
    if (setjmp(g.jb)) {
        /* CMYK and YCCK cannot become RGB in libjpeg */
        bool cmyk = g.pub.msg_code == JERR_CONVERSION_NOTIMPL;
        jpeg_destroy_decompress(&d);
        if (cmyk)
            return slim_errf(err, SLIM_EUNSUPPORTED, "JPEG in CMYK or YCCK is not supported");
        return slim_errf(err, SLIM_EINVAL, "corrupt JPEG: %s", g.msg);
    }
    jpeg_create_decompress(&d);
    prog.progress_monitor = jpeg_on_progress;
    d.progress = &prog;
    jpeg_mem_src(&d, buf, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    slim_status s = slim_img_check_size(SLIM_IMG_JPEG, d.image_width, d.image_height, err);
    /* Huffman coding spends at least one bit on each block's DC value of
     * some component (every scan codes one per block), so a stream too
     * short for its header's size fails here, before the caller allocates
     * that size. Arithmetic coding has no such floor. */
    uint64_t least = UINT64_MAX;
    for (int c = 0; c < d.num_components; c++) {
        uint64_t blocks = (uint64_t)d.comp_info[c].width_in_blocks * d.comp_info[c].height_in_blocks;
        least = blocks < least ? blocks : least;
    }
    if (s == SLIM_OK && !d.arith_code && least > (uint64_t)n * 8)
        s = slim_errf(err, SLIM_EINVAL, "corrupt JPEG: %ux%u pixels cannot fit in %zu bytes",
                      d.image_width, d.image_height, n);
    if (s == SLIM_OK && !rgb) {
        *w = d.image_width;
        *h = d.image_height;
    }
    if (s == SLIM_OK && rgb)
        s = same_size("JPEG", d.image_width, d.image_height, *w, *h, err);
    if (s != SLIM_OK || !rgb) {
        jpeg_destroy_decompress(&d);
        return s;
    }
    /* CMYK and YCCK cannot become RGB in libjpeg: start_decompress says so. */
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    if (d.output_components != 3 || d.output_width != *w || d.output_height != *h) {
        jpeg_destroy_decompress(&d);
        return slim_errf(err, SLIM_EINVAL, "JPEG decodes to %ux%u with %d components",
                         d.output_width, d.output_height, d.output_components);
    }
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = rgb + (size_t)d.output_scanline * *w * 3;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return SLIM_OK;
}

static slim_status jpeg_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, slim_err *err)
{
    return jpeg_run(b, n, w, h, NULL, err);
}

static slim_status jpeg_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                               slim_err *err)
{
    return jpeg_run(b, n, &w, &h, rgb, err);
}

const slim_img_codec slim_img_jpeg = {jpeg_probe, jpeg_decode};
#else
SLIM__NOT_BUILT(jpeg, "JPEG", "libjpeg")
#endif

/* ---- PNG (libpng) -------------------------------------------------------- */
#ifdef SLIM_HAVE_PNG
#include <png.h>

typedef struct {
    const uint8_t *p;
    size_t n, at;
    char msg[CODEC_MSG];
} png_src;

static void png_on_error(png_structp png, png_const_charp m)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof(s->msg), "%s", m ? m : "error");
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp m)
{
    (void)png, (void)m;
}

static void png_on_read(png_structp png, png_bytep out, size_t len)
{
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at)
        png_error(png, "the stream ends early");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static slim_status png_run(const uint8_t *buf, size_t n, uint32_t *w, uint32_t *h, uint8_t *rgb,
                           slim_err *err)
{
    png_src src = {buf, n, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error,
                                             png_on_warning);
    if (!png)
        return slim_errf(err, SLIM_ENOMEM, "PNG: no memory for the decoder");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return slim_errf(err, SLIM_ENOMEM, "PNG: no memory for the decoder");
    }
    /* volatile: read after a longjmp back into this frame */
    png_bytep *volatile rows = NULL;
    volatile slim_status s = SLIM_OK;
    if (setjmp(png_jmpbuf(png))) {
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return slim_errf(err, SLIM_EINVAL, "corrupt PNG: %s", src.msg);
    }
    png_set_read_fn(png, &src, png_on_read);
    png_read_info(png, info);
    png_uint_32 pw, ph;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &pw, &ph, &depth, &ctype, &interlace, NULL, NULL);
    s = slim_img_check_size(SLIM_IMG_PNG, pw, ph, err);
    /* Deflate expands at most 1032:1, so a stream too short for its header's
     * size fails here, before the caller allocates that size. */
    uint64_t least = ((uint64_t)pw * (uint64_t)depth * png_get_channels(png, info) + 7) / 8 * ph;
    if (s == SLIM_OK && least > (uint64_t)n * 1032)
        s = slim_errf(err, SLIM_EINVAL, "corrupt PNG: %ux%u pixels cannot fit in %zu bytes", pw, ph,
                      n);
    if (s == SLIM_OK && !rgb) {
        *w = pw;
        *h = ph;
    }
    if (s == SLIM_OK && rgb)
        s = same_size("PNG", pw, ph, *w, *h, err);
    if (s != SLIM_OK || !rgb) {
        png_destroy_read_struct(&png, &info, NULL);
        return s;
    }
    /* Everything to 8-bit RGB, as PIL's np.array(img) then [:, :, :3]
     * would give: palettes expanded (tRNS ignored), grey replicated,
     * alpha dropped, 16 bits cut to their high byte. */
    if (depth == 16)
        png_set_strip_16(png);
    if (ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    /* libpng 1.6's palette expansion turns a tRNS chunk into alpha too */
    if ((ctype & PNG_COLOR_MASK_ALPHA) ||
        (ctype == PNG_COLOR_TYPE_PALETTE && png_get_valid(png, info, PNG_INFO_tRNS)))
        png_set_strip_alpha(png);
    if (!(ctype & PNG_COLOR_MASK_COLOR))
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)pw * 3)
        png_error(png, "unexpected row size after conversion to RGB");
    /* raw: one pointer per image row (8 bytes against the row's 3 x width in the accounted output) */
    rows = malloc(sizeof(png_bytep) * ph);
    if (!rows)
        png_error(png, "no memory for row pointers");
    for (png_uint_32 y = 0; y < ph; y++)
        rows[y] = rgb + (size_t)y * pw * 3;
    png_read_image(png, rows);
    free(rows);
    rows = NULL;
    png_destroy_read_struct(&png, &info, NULL);
    return SLIM_OK;
}

static slim_status png_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, slim_err *err)
{
    return png_run(b, n, w, h, NULL, err);
}

static slim_status png_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                              slim_err *err)
{
    return png_run(b, n, &w, &h, rgb, err);
}

const slim_img_codec slim_img_png = {png_probe, png_decode};
#else
SLIM__NOT_BUILT(png, "PNG", "libpng")
#endif

/* ---- TIFF (libtiff) ------------------------------------------------------ */
#ifdef SLIM_HAVE_TIFF
#include <pthread.h>
#include <tiffio.h>

typedef struct {
    const uint8_t *p;
    uint64_t n, at;
    char msg[CODEC_MSG];
} tiff_src;

static tmsize_t tiff_read(thandle_t hd, void *buf, tmsize_t len)
{
    tiff_src *s = hd;
    if (len < 0)
        return -1;
    uint64_t left = s->at < s->n ? s->n - s->at : 0;
    uint64_t k = (uint64_t)len < left ? (uint64_t)len : left;
    memcpy(buf, s->p + s->at, (size_t)k);
    s->at += k;
    return (tmsize_t)k;
}

static tmsize_t tiff_write(thandle_t hd, void *buf, tmsize_t len)
{
    (void)hd, (void)buf, (void)len;
    return -1;
}

static toff_t tiff_seek(thandle_t hd, toff_t off, int whence)
{
    tiff_src *s = hd;
    uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->at : s->n;
    /* like lseek: past the end is allowed (reads there give 0 bytes),
     * wrapping around is not */
    if (off > UINT64_MAX - base)
        return (toff_t)-1;
    s->at = base + off;
    return s->at;
}

static int tiff_close(thandle_t hd)
{
    (void)hd;
    return 0;
}

static toff_t tiff_size(thandle_t hd)
{
    return ((tiff_src *)hd)->n;
}

static int tiff_map(thandle_t hd, void **base, toff_t *size)
{
    (void)hd, (void)base, (void)size;
    return 0;
}

static void tiff_unmap(thandle_t hd, void *base, toff_t size)
{
    (void)hd, (void)base, (void)size;
}

static int tiff_on_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)module;
    tiff_src *s = user;
    if (!s->msg[0])
        vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
    return 1; /* handled: libtiff's global handler stays quiet */
}

static int tiff_on_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)t, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

/* Some libtiff paths report through the process-wide handlers, which
 * print to stderr by default. */
static pthread_once_t tiff_once = PTHREAD_ONCE_INIT;
static void tiff_silence(void)
{
    TIFFSetErrorHandler(NULL);
    TIFFSetWarningHandler(NULL);
}

/* The common case, 8-bit RGB or grey (each maybe with alpha) in strips of
 * interleaved samples, read a row at a time: alpha is dropped as it is,
 * where the RGBA interface below would premultiply it into the colours.
 * Returns 0 when t is not such an image, -1 on a read error, 1 done. */
static int tiff_read_plain(TIFF *t, uint32_t w, uint32_t h, uint8_t *rgb)
{
    uint16_t bps = 0, spp = 0, planar = 0, photo = 0;
    if (TIFFIsTiled(t) || !TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bps) ||
        !TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp) ||
        !TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar) ||
        !TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photo))
        return 0;
    bool colour = photo == PHOTOMETRIC_RGB && spp >= 3, grey = photo == PHOTOMETRIC_MINISBLACK;
    if (bps != 8 || planar != PLANARCONFIG_CONTIG || spp < 1 || !(colour || grey))
        return 0;
    tmsize_t row = TIFFScanlineSize(t);
    if (row < (tmsize_t)w * spp)
        return 0;
    /* raw: one scanline of the image, a fraction of the accounted output */
    uint8_t *line = malloc((size_t)row);
    if (!line)
        return -1;
    for (uint32_t y = 0; y < h; y++) {
        if (TIFFReadScanline(t, line, y, 0) < 0) {
            free(line);
            return -1;
        }
        uint8_t *o = rgb + (size_t)y * w * 3;
        for (uint32_t x = 0; x < w; x++, o += 3) {
            const uint8_t *p = line + (size_t)x * spp;
            o[0] = p[0];
            o[1] = colour ? p[1] : p[0];
            o[2] = colour ? p[2] : p[0];
        }
    }
    free(line);
    return 1;
}

static slim_status tiff_run(const uint8_t *buf, size_t n, uint32_t *w, uint32_t *h, uint8_t *rgb,
                            slim_err *err)
{
    pthread_once(&tiff_once, tiff_silence);
    tiff_src src = {buf, n, 0, ""};
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o)
        return slim_errf(err, SLIM_ENOMEM, "TIFF: no memory for the decoder");
    TIFFOpenOptionsSetErrorHandlerExtR(o, tiff_on_error, &src);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tiff_on_warning, &src);
    /* No single allocation inside libtiff beyond an RGBA copy of the
     * largest image allowed (strips and tiles are smaller). */
    int64_t cap = slim_img_max_pixels();
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, (tmsize_t)(cap < INT64_MAX / 8 ? cap * 4 + (1 << 20)
                                                                          : INT64_MAX / 2));
    /* "m": no memory mapping, every read goes through tiff_read */
    TIFF *t = TIFFClientOpenExt("encoded_stream", "rm", &src, tiff_read, tiff_write, tiff_seek,
                                tiff_close, tiff_size, tiff_map, tiff_unmap, o);
    TIFFOpenOptionsFree(o);
    if (!t)
        return slim_errf(err, SLIM_EINVAL, "corrupt TIFF: %s", src.msg[0] ? src.msg : "unreadable");
    uint32_t tw = 0, th = 0;
    slim_status s = SLIM_OK;
    if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &tw) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &th))
        s = slim_errf(err, SLIM_EINVAL, "corrupt TIFF: no image width or length");
    if (s == SLIM_OK)
        s = slim_img_check_size(SLIM_IMG_TIFF, tw, th, err);
    if (s == SLIM_OK && !rgb) {
        *w = tw;
        *h = th;
    }
    if (s == SLIM_OK && rgb)
        s = same_size("TIFF", tw, th, *w, *h, err);
    int plain = s == SLIM_OK && rgb ? tiff_read_plain(t, tw, th, rgb) : 0;
    if (plain) {
        TIFFClose(t);
        return plain > 0 ? SLIM_OK : slim_errf(err, SLIM_EINVAL, "corrupt TIFF: %s",
                                               src.msg[0] ? src.msg : "a row does not decode");
    }
    char why[1024] = "";
    if (s == SLIM_OK && rgb && !TIFFRGBAImageOK(t, why))
        s = slim_errf(err, SLIM_EUNSUPPORTED, "TIFF: %s", why);
    if (s != SLIM_OK || !rgb) {
        TIFFClose(t);
        return s;
    }
    /* Everything else through the RGBA interface, which reads every
     * photometric interpretation, bit depth and layout libtiff knows. It
     * premultiplies unassociated alpha, which PIL does not: a 16-bit or
     * tiled RGBA TIFF's colours can differ from PIL's where alpha < 255. */
    /* raw: this codec layer sits below the kernels and their accounted
     * scratch; the RGBA image is 4/3 of the accounted output it fills */
    uint32_t *px = malloc((size_t)tw * th * 4);
    if (!px) {
        TIFFClose(t);
        return slim_errf(err, SLIM_ENOMEM, "TIFF: no memory for %ux%u pixels", tw, th);
    }
    if (!TIFFReadRGBAImageOriented(t, tw, th, px, ORIENTATION_TOPLEFT, 1)) {
        s = slim_errf(err, SLIM_EINVAL, "corrupt TIFF: %s",
                      src.msg[0] ? src.msg : "the pixel data do not decode");
    } else {
        for (size_t i = 0; i < (size_t)tw * th; i++) {
            rgb[3 * i] = (uint8_t)TIFFGetR(px[i]);
            rgb[3 * i + 1] = (uint8_t)TIFFGetG(px[i]);
            rgb[3 * i + 2] = (uint8_t)TIFFGetB(px[i]);
        }
    }
    free(px);
    TIFFClose(t);
    return s;
}

static slim_status tiff_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, slim_err *err)
{
    return tiff_run(b, n, w, h, NULL, err);
}

static slim_status tiff_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                               slim_err *err)
{
    return tiff_run(b, n, &w, &h, rgb, err);
}

const slim_img_codec slim_img_tiff = {tiff_probe, tiff_decode};
#else
SLIM__NOT_BUILT(tiff, "TIFF", "libtiff")
#endif

/* ---- WebP (libwebp) ------------------------------------------------------ */
#ifdef SLIM_HAVE_WEBP
#include <webp/decode.h>

static slim_status webp_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, slim_err *err)
{
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(b, n, &f) != VP8_STATUS_OK)
        return slim_errf(err, SLIM_EINVAL, "corrupt WebP: the header does not parse");
    if (f.has_animation)
        return slim_errf(err, SLIM_EUNSUPPORTED, "animated WebP is not supported");
    slim_status s = slim_img_check_size(SLIM_IMG_WEBP, (uint64_t)f.width, (uint64_t)f.height, err);
    if (s != SLIM_OK)
        return s;
    *w = (uint32_t)f.width;
    *h = (uint32_t)f.height;
    return SLIM_OK;
}

static slim_status webp_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                               slim_err *err)
{
    uint32_t pw = 0, ph = 0;
    slim_status s = webp_probe(b, n, &pw, &ph, err);
    if (s == SLIM_OK)
        s = same_size("WebP", pw, ph, w, h, err);
    if (s != SLIM_OK)
        return s;
    /* WebP sides are at most 16383: the stride fits an int. Alpha, if
     * any, is dropped (MODE_RGB). */
    if (!WebPDecodeRGBInto(b, n, rgb, (size_t)w * h * 3, (int)w * 3))
        return slim_errf(err, SLIM_EINVAL, "corrupt WebP: the image data do not decode");
    return SLIM_OK;
}

const slim_img_codec slim_img_webp = {webp_probe, webp_decode};
#else
SLIM__NOT_BUILT(webp, "WebP", "libwebp")
#endif

/* ---- JPEG 2000 (OpenJPEG) ------------------------------------------------ */
#ifdef SLIM_HAVE_JP2
#include <openjpeg.h>

typedef struct {
    const uint8_t *p;
    uint64_t n, at;
    char msg[CODEC_MSG];
} jp2_src;

static OPJ_SIZE_T jp2_read(void *buf, OPJ_SIZE_T len, void *user)
{
    jp2_src *s = user;
    if (s->at >= s->n)
        return (OPJ_SIZE_T)-1; /* end of stream */
    uint64_t k = s->n - s->at < len ? s->n - s->at : len;
    memcpy(buf, s->p + s->at, (size_t)k);
    s->at += k;
    return (OPJ_SIZE_T)k;
}

static OPJ_OFF_T jp2_skip(OPJ_OFF_T off, void *user)
{
    jp2_src *s = user;
    if (off < 0 ? (uint64_t)-(off + 1) >= s->at : (uint64_t)off > s->n - s->at)
        return -1;
    s->at = (uint64_t)((int64_t)s->at + off);
    return off;
}

static OPJ_BOOL jp2_seek(OPJ_OFF_T off, void *user)
{
    jp2_src *s = user;
    if (off < 0 || (uint64_t)off > s->n)
        return OPJ_FALSE;
    s->at = (uint64_t)off;
    return OPJ_TRUE;
}

static void jp2_on_error(const char *m, void *user)
{
    jp2_src *s = user;
    if (!s->msg[0]) {
        snprintf(s->msg, sizeof(s->msg), "%s", m);
        size_t k = strlen(s->msg);
        if (k && s->msg[k - 1] == '\n')
            s->msg[k - 1] = 0;
    }
}

static void jp2_quiet(const char *m, void *user)
{
    (void)m, (void)user;
}

/* A component's sample scaled to 8 bits. */
static uint8_t jp2_sample(const opj_image_comp_t *c, OPJ_INT32 v)
{
    int64_t x = v;
    if (c->sgnd)
        x += (int64_t)1 << (c->prec - 1);
    int64_t max = ((int64_t)1 << c->prec) - 1;
    x = x < 0 ? 0 : x > max ? max : x;
    if (c->prec > 8)
        x >>= c->prec - 8;
    else if (c->prec < 8)
        x = x * 255 / max;
    return (uint8_t)x;
}

static slim_status jp2_run(slim_img_format fmt, const uint8_t *buf, size_t n, uint32_t *w,
                           uint32_t *h, uint8_t *rgb, slim_err *err)
{
    jp2_src src = {buf, n, 0, ""};
    opj_stream_t *st = opj_stream_create(1 << 16, OPJ_TRUE);
    opj_codec_t *c = opj_create_decompress(fmt == SLIM_IMG_JP2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
    opj_image_t *img = NULL;
    slim_status s = SLIM_OK;
    if (!st || !c) {
        s = slim_errf(err, SLIM_ENOMEM, "JPEG 2000: no memory for the decoder");
        goto done;
    }
    opj_stream_set_read_function(st, jp2_read);
    opj_stream_set_skip_function(st, jp2_skip);
    opj_stream_set_seek_function(st, jp2_seek);
    opj_stream_set_user_data(st, &src, NULL);
    opj_stream_set_user_data_length(st, n);
    opj_set_error_handler(c, jp2_on_error, &src);
    opj_set_warning_handler(c, jp2_quiet, NULL);
    opj_set_info_handler(c, jp2_quiet, NULL);
    opj_dparameters_t par;
    opj_set_default_decoder_parameters(&par);
    if (!opj_setup_decoder(c, &par) || !opj_read_header(st, c, &img) || !img) {
        s = slim_errf(err, SLIM_EINVAL, "corrupt JPEG 2000: %s",
                      src.msg[0] ? src.msg : "the header does not parse");
        goto done;
    }
    if (img->x1 <= img->x0 || img->y1 <= img->y0 || img->numcomps < 1) {
        s = slim_errf(err, SLIM_EINVAL, "corrupt JPEG 2000: empty image area");
        goto done;
    }
    uint32_t iw = img->x1 - img->x0, ih = img->y1 - img->y0;
    s = slim_img_check_size(fmt, iw, ih, err);
    if (s == SLIM_OK && !rgb) {
        *w = iw;
        *h = ih;
    }
    if (s == SLIM_OK && rgb)
        s = same_size("JPEG 2000", iw, ih, *w, *h, err);
    if (s != SLIM_OK || !rgb)
        goto done;
    if (!opj_decode(c, st, img) || !opj_end_decompress(c, st)) {
        s = slim_errf(err, SLIM_EINVAL, "corrupt JPEG 2000: %s",
                      src.msg[0] ? src.msg : "the image data do not decode");
        goto done;
    }
    if (img->color_space == OPJ_CLRSPC_SYCC || img->color_space == OPJ_CLRSPC_EYCC ||
        img->color_space == OPJ_CLRSPC_CMYK) {
        s = slim_errf(err, SLIM_EUNSUPPORTED, "JPEG 2000 in a YCC or CMYK colour space is not "
                      "supported");
        goto done;
    }
    /* 1-2 components: grey (+ alpha); 3 or more: RGB (+ alpha, extras). */
    int nc = img->numcomps >= 3 ? 3 : 1;
    for (int k = 0; k < nc; k++) {
        const opj_image_comp_t *cp = &img->comps[k];
        if (!cp->data || cp->w == 0 || cp->h == 0 || cp->prec < 1 || cp->prec > 31) {
            s = slim_errf(err, SLIM_EINVAL, "corrupt JPEG 2000: component %d is empty or has "
                          "%u-bit samples", k, cp->prec);
            goto done;
        }
    }
    /* Subsampled components are stretched to the image by nearest
     * neighbour. */
    for (uint32_t y = 0; y < ih; y++)
        for (uint32_t x = 0; x < iw; x++)
            for (int ch = 0; ch < 3; ch++) {
                const opj_image_comp_t *cp = &img->comps[nc == 3 ? ch : 0];
                uint64_t cx = (uint64_t)x * cp->w / iw, cy = (uint64_t)y * cp->h / ih;
                rgb[((size_t)y * iw + x) * 3 + ch] =
                    jp2_sample(cp, cp->data[cy * cp->w + cx]);
            }
done:
    if (img)
        opj_image_destroy(img);
    if (c)
        opj_destroy_codec(c);
    if (st)
        opj_stream_destroy(st);
    return s;
}

static slim_status jp2_probe(const uint8_t *b, size_t n, uint32_t *w, uint32_t *h, slim_err *err)
{
    return jp2_run(slim_img_detect(b, n), b, n, w, h, NULL, err);
}

static slim_status jp2_decode(const uint8_t *b, size_t n, uint32_t w, uint32_t h, uint8_t *rgb,
                              slim_err *err)
{
    return jp2_run(slim_img_detect(b, n), b, n, &w, &h, rgb, err);
}

const slim_img_codec slim_img_jp2 = {jp2_probe, jp2_decode};
#else
SLIM__NOT_BUILT(jp2, "JPEG 2000", "libopenjp2")
#endif
