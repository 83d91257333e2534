/*
 * test_image_decoder.c - ImageDecoder (kernels/cpu/image_decoder.c and
 * image_codecs.c): every format decodes the small images of
 * tests/data/images (made by make_images.py, whose formulas are repeated
 * here) to the right pixels, BGR and Grayscale reorder and convert them,
 * and hostile streams - every truncation, random byte flips, oversized
 * headers - give an error or a valid image, never a crash (run it in the
 * ASan build to check the "never").
 */
#include "image_codecs.h"
#include "testutil.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLIM_TEST_IMAGES
#error "SLIM_TEST_IMAGES (tests/data/images) must be defined by the build"
#endif

enum { W = 13, H = 7 };

typedef enum { PAT_RGB, PAT_GREY, PAT_BITMAP, PAT_PALETTE, PAT_SMOOTH, PAT_SMOOTH_GREY } pattern;

static const struct {
    const char *file;
    pattern pat;
} images[] = {
    {"rgb.bmp", PAT_RGB},          {"rgba.bmp", PAT_RGB},
    {"palette.bmp", PAT_PALETTE},  {"bitmap.bmp", PAT_BITMAP},
    {"rgb.png", PAT_RGB},          {"rgba.png", PAT_RGB},
    {"grey.png", PAT_GREY},        {"grey16.png", PAT_GREY},
    {"palette.png", PAT_PALETTE},  {"palette_trns.png", PAT_PALETTE},
    {"rgb.ppm", PAT_RGB},
    {"rgb_plain.ppm", PAT_RGB},    {"grey.pgm", PAT_GREY},
    {"bitmap.pbm", PAT_BITMAP},    {"bitmap_plain.pbm", PAT_BITMAP},
    {"rgb.tif", PAT_RGB},          {"grey_lzw.tif", PAT_GREY},
    {"rgb_deflate.tif", PAT_RGB},  {"rgba.tif", PAT_RGB},
    {"palette.tif", PAT_PALETTE},  {"rgb.webp", PAT_RGB},
    {"rgba.webp", PAT_RGB},        {"rgb.jp2", PAT_RGB},
    {"rgb.j2k", PAT_RGB},          {"smooth.jpg", PAT_SMOOTH},
    {"smooth_progressive.jpg", PAT_SMOOTH}, {"grey.jpg", PAT_SMOOTH_GREY},
};
enum { N_IMAGES = sizeof(images) / sizeof(images[0]) };

/* The pixel make_images.py drew at (x, y). */
static void expected(pattern p, int x, int y, uint8_t px[3])
{
    switch (p) {
    case PAT_RGB:
        px[0] = (uint8_t)(37 * x + 11 * y), px[1] = (uint8_t)(5 * x + 29 * y);
        px[2] = (uint8_t)(x * x + 3 * y);
        break;
    case PAT_GREY:
        px[0] = px[1] = px[2] = (uint8_t)(37 * x + 11 * y);
        break;
    case PAT_BITMAP:
        px[0] = px[1] = px[2] = (x + y) % 2 == 0 ? 255 : 0;
        break;
    case PAT_PALETTE: {
        uint8_t i = (uint8_t)(x * y + x);
        px[0] = i, px[1] = (uint8_t)(255 - i), px[2] = (uint8_t)(7 * i);
        break;
    }
    case PAT_SMOOTH:
        px[0] = (uint8_t)(18 * x), px[1] = (uint8_t)(30 * y), px[2] = 128;
        break;
    case PAT_SMOOTH_GREY:
        px[0] = px[1] = px[2] = (uint8_t)(9 * x + 20 * y);
        break;
    }
}

static uint8_t *read_image(const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", SLIM_TEST_IMAGES, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* Runs one ImageDecoder node on the bytes. */
static slim_status run_decoder(const uint8_t *b, size_t n, const char *pixel_format,
                               slim_tensor **out, int *n_out, slim_err *err)
{
    slim_graph *g = tu_graph("ImageDecoder", 20, 1, (const char *[]){"encoded_stream"}, 1);
    if (pixel_format)
        tu_attr_s(tu_node0(g), "pixel_format", pixel_format);
    slim_tensor x = tu_tensor(SLIM_U8, 1, (int64_t[]){(int64_t)n}, NULL);
    if (n)
        memcpy(x.data, b, n);
    slim_status s = tu_run(g, &x, 1, out, n_out, err);
    tu_free_inputs(&x, 1);
    return s;
}

START_TEST(test_every_format_decodes)
{
    int i = _i;
    size_t n;
    uint8_t *b = read_image(images[i].file, &n);
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(run_decoder(b, n, NULL, &out, &n_out, &err) == SLIM_OK, "%s: %s",
                  images[i].file, err.msg);
    tu_assert_shape(&out[0], 3, (int64_t[]){H, W, 3});
    ck_assert_int_eq(out[0].dtype, SLIM_U8);
    const uint8_t *px = out[0].data;
    bool lossy = images[i].pat == PAT_SMOOTH || images[i].pat == PAT_SMOOTH_GREY;
    int max_diff = 0, sum_diff = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t want[3];
            expected(images[i].pat, x, y, want);
            for (int c = 0; c < 3; c++) {
                int d = abs((int)px[(y * W + x) * 3 + c] - want[c]);
                max_diff = d > max_diff ? d : max_diff;
                sum_diff += d;
                if (!lossy)
                    ck_assert_msg(d == 0, "%s: pixel (%d, %d) channel %d is %d, expected %d",
                                  images[i].file, x, y, c, px[(y * W + x) * 3 + c], want[c]);
            }
        }
    /* quality 95 on a smooth ramp: a few levels off on average */
    if (lossy)
        ck_assert_msg(max_diff <= 24 && sum_diff <= 3 * W * H * 3, "%s: max %d, total %d",
                      images[i].file, max_diff, sum_diff);
    slim_tensors_free(out, n_out);
    free(b);
}
END_TEST

START_TEST(test_bgr_and_grayscale)
{
    size_t n;
    uint8_t *b = read_image("rgb.png", &n);
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(run_decoder(b, n, "BGR", &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){H, W, 3});
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t want[3];
            expected(PAT_RGB, x, y, want);
            const uint8_t *p = (const uint8_t *)out[0].data + (y * W + x) * 3;
            ck_assert(p[0] == want[2] && p[1] == want[1] && p[2] == want[0]);
        }
    slim_tensors_free(out, n_out);

    ck_assert_int_eq(run_decoder(b, n, "Grayscale", &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 3, (int64_t[]){H, W, 1});
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t c[3];
            expected(PAT_RGB, x, y, c);
            /* PIL's convert("L") */
            uint8_t want = (uint8_t)((19595 * c[0] + 38470 * c[1] + 7471 * c[2] + 0x8000) >> 16);
            ck_assert_int_eq(((const uint8_t *)out[0].data)[y * W + x], want);
        }
    slim_tensors_free(out, n_out);
    free(b);

    /* a grey source stays itself in Grayscale */
    b = read_image("grey.pgm", &n);
    ck_assert_int_eq(run_decoder(b, n, "Grayscale", &out, &n_out, &err), SLIM_OK);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            ck_assert_int_eq(((const uint8_t *)out[0].data)[y * W + x], (uint8_t)(37 * x + 11 * y));
    slim_tensors_free(out, n_out);

    ck_assert_int_eq(run_decoder(b, n, "CMYK", &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "pixel_format \"CMYK\""), "%s", err.msg);
    free(b);
}
END_TEST

START_TEST(test_top_down_bmp)
{
    /* a negative height stores the rows top first */
    size_t n;
    uint8_t *b = read_image("rgb.bmp", &n);
    int32_t h = -H;
    memcpy(b + 22, &h, 4);
    uint32_t w, hh;
    slim_err err = {0};
    ck_assert_int_eq(slim_img_bmp.probe(b, n, &w, &hh, &err), SLIM_OK);
    ck_assert(w == W && hh == H);
    uint8_t rgb[W * H * 3];
    ck_assert_int_eq(slim_img_bmp.decode(b, n, w, hh, rgb, &err), SLIM_OK);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t want[3];
            expected(PAT_RGB, x, H - 1 - y, want);
            ck_assert_int_eq(memcmp(rgb + (y * W + x) * 3, want, 3), 0);
        }
    free(b);
}
END_TEST

static uint32_t crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (24 - 8 * k));
}

START_TEST(test_bad_streams)
{
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    ck_assert_int_eq(run_decoder(NULL, 0, NULL, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "encoded_stream is empty"), "%s", err.msg);
    const uint8_t junk[] = "GIF89a....";
    ck_assert_int_eq(run_decoder(junk, sizeof(junk), NULL, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "starting 47 49 46 38) is not BMP"), "%s", err.msg);

    /* a header that claims 100000 x 100000 pixels fails before allocating */
    const char *big = "P5\n100000 100000\n255\n";
    ck_assert_int_eq(run_decoder((const uint8_t *)big, strlen(big), NULL, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "PNM image of 100000x100000 pixels is over the limit of "
                                  "268435456 pixels"), "%s", err.msg);

    /* a PNG whose (valid) header claims 10000 x 10000 in a 118-byte stream:
     * deflate cannot expand that far, so it fails before the 300 MB output */
    size_t pn;
    uint8_t *png = read_image("rgb.png", &pn);
    put_be32(png + 16, 10000);
    put_be32(png + 20, 10000);
    put_be32(png + 29, crc32(png + 12, 17)); /* "IHDR" and its 13 bytes */
    ck_assert_int_eq(run_decoder(png, pn, NULL, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "corrupt PNG: 10000x10000 pixels cannot fit in 118 bytes"), "%s",
                  err.msg);
    free(png);
    /* the same for a (Huffman-coded) JPEG: at least a bit per 8x8 block */
    size_t jn;
    uint8_t *jpg = read_image("smooth.jpg", &jn);
    size_t sof = 2;
    while (sof + 9 < jn && !(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0))
        sof++;
    ck_assert_uint_lt(sof + 9, jn);
    jpg[sof + 5] = 10000 >> 8, jpg[sof + 6] = 10000 & 255; /* height */
    jpg[sof + 7] = 10000 >> 8, jpg[sof + 8] = 10000 & 255; /* width */
    ck_assert_int_eq(run_decoder(jpg, jn, NULL, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "corrupt JPEG: 10000x10000 pixels cannot fit in 689 bytes"),
                  "%s", err.msg);
    free(jpg);

    /* the limit is configurable, and applies to every format */
    const char *files[] = {"rgb.bmp", "rgb.png", "rgb.tif", "rgb.webp", "rgb.jp2", "smooth.jpg",
                           "rgb.ppm"};
    slim_img_set_max_pixels(W * H - 1);
    for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
        size_t n;
        uint8_t *b = read_image(files[k], &n);
        ck_assert_int_eq(run_decoder(b, n, NULL, &out, &n_out, &err), SLIM_EINVAL);
        ck_assert_msg(strstr(err.msg, "13x7 pixels is over the limit of 90 pixels"), "%s: %s",
                      files[k], err.msg);
        free(b);
    }
    slim_img_set_max_pixels(0);
    ck_assert_int_eq(slim_img_max_pixels(), (int64_t)1 << 28);

    /* a stream cut in half is an error naming its format */
    const char *names[] = {"BMP", "PNG", "TIFF", "WebP", "JPEG", "PNM"};
    const char *cut[] = {"rgb.bmp", "rgb.png", "rgb.tif", "rgb.webp", "smooth.jpg", "rgb.ppm"};
    for (size_t k = 0; k < sizeof(cut) / sizeof(cut[0]); k++) {
        size_t n;
        uint8_t *b = read_image(cut[k], &n);
        ck_assert_int_ne(run_decoder(b, n / 2, NULL, &out, &n_out, &err), SLIM_OK);
        ck_assert_msg(strstr(err.msg, names[k]), "%s: %s", cut[k], err.msg);
        free(b);
    }

    /* CMYK JPEG: unsupported, not corrupt */
    size_t cn;
    uint8_t *cmyk = read_image("cmyk.jpg", &cn);
    ck_assert_int_eq(run_decoder(cmyk, cn, NULL, &out, &n_out, &err), SLIM_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "JPEG in CMYK or YCCK is not supported"), "%s", err.msg);
    free(cmyk);

    /* the stream must be 1-D bytes */
    slim_graph *g = tu_graph("ImageDecoder", 20, 1, (const char *[]){"encoded_stream"}, 1);
    slim_tensor x = tu_f32(1, (int64_t[]){2}, (float[]){1, 2});
    ck_assert_int_ne(tu_run(g, &x, 1, &out, &n_out, &err), SLIM_OK);
    ck_assert_msg(strstr(err.msg, "encoded_stream has data type float32; supported: uint8"), "%s",
                  err.msg);
    tu_free_inputs(&x, 1);
}
END_TEST

/* Probe then decode, as the op does, straight on the codec: an error must
 * carry a message, a success a size within the limit. */
static void decode_hostile(const uint8_t *b, size_t n, const char *what)
{
    slim_err err = {0};
    const slim_img_codec *c = slim_img_codec_for(slim_img_detect(b, n));
    if (!c)
        return;
    uint32_t w = 0, h = 0;
    slim_status s = c->probe(b, n, &w, &h, &err);
    if (s != SLIM_OK) {
        ck_assert_msg(err.msg[0], "%s: error %d without a message", what, s);
        return;
    }
    ck_assert_msg(w >= 1 && h >= 1 && (uint64_t)w * h <= (uint64_t)slim_img_max_pixels(),
                  "%s: %ux%u", what, w, h);
    uint8_t *rgb = malloc((size_t)w * h * 3);
    ck_assert_ptr_nonnull(rgb);
    s = c->decode(b, n, w, h, rgb, &err);
    if (s != SLIM_OK)
        ck_assert_msg(err.msg[0], "%s: error %d without a message", what, s);
    free(rgb);
}

START_TEST(test_truncations_and_flips)
{
    /* hostile sizes stay cheap: 2^20 pixels at most */
    slim_img_set_max_pixels((int64_t)1 << 20);
    int i = _i;
    size_t n;
    uint8_t *b = read_image(images[i].file, &n);
    char what[128];
    for (size_t len = 0; len < n; len++) {
        /* an exact-size copy, so that ASan sees any read past the end */
        uint8_t *t = malloc(len ? len : 1);
        memcpy(t, b, len);
        snprintf(what, sizeof(what), "%s cut to %zu bytes", images[i].file, len);
        decode_hostile(t, len, what);
        free(t);
    }
    uint32_t rng = 12345u + (uint32_t)i;
    uint8_t *t = malloc(n);
    for (int trial = 0; trial < 300; trial++) {
        memcpy(t, b, n);
        int flips = 1 + trial % 4;
        for (int f = 0; f < flips; f++) {
            rng = rng * 1664525u + 1013904223u;
            size_t at = (rng >> 8) % n;
            rng = rng * 1664525u + 1013904223u;
            t[at] ^= (uint8_t)(1u << ((rng >> 16) % 8));
            /* now and then a whole byte, to reach length and size fields */
            if (trial % 5 == 0)
                t[at] = (uint8_t)(rng >> 24);
        }
        snprintf(what, sizeof(what), "%s, flip trial %d", images[i].file, trial);
        decode_hostile(t, n, what);
    }
    free(t);
    free(b);
    slim_img_set_max_pixels(0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("image_decoder");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_every_format_decodes, 0, N_IMAGES);
    tcase_add_test(tc, test_bgr_and_grayscale);
    tcase_add_test(tc, test_top_down_bmp);
    tcase_add_test(tc, test_bad_streams);
    tcase_add_loop_test(tc, test_truncations_and_flips, 0, N_IMAGES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
