/* test_runtime.c - dtype conversions (runtime/dtype.c), NumPy files
 * (runtime/npy.c), the shape helpers of kernels/common.c and the thread
 * pool (runtime/parallel.c). */
#include "testutil.h"
#include "device.h"
#include "npy.h"
#include "op_registry.h"
#include "slim_init.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static float f32_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ---- float16 --------------------------------------------------------------- */

START_TEST(test_f16_round_trip_all)
{
    /* Every half value widens exactly, so narrowing must give it back. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = slim_f16_to_f32((uint16_t)h);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            ck_assert_msg(isnan(f), "half 0x%04x should widen to NaN", h);
            uint16_t back = slim_f32_to_f16(f);
            ck_assert_msg((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "NaN 0x%04x lost", h);
        } else {
            ck_assert_msg(slim_f32_to_f16(f) == h, "half 0x%04x -> %g -> 0x%04x", h, f,
                          slim_f32_to_f16(f));
        }
    }
}
END_TEST

START_TEST(test_f16_values)
{
    ck_assert_uint_eq(slim_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(slim_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(slim_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(slim_f32_to_f16(65504.0f), 0x7bff);      /* largest half */
    ck_assert_uint_eq(slim_f32_to_f16(65519.0f), 0x7bff);      /* below the midpoint */
    ck_assert_uint_eq(slim_f32_to_f16(65520.0f), 0x7c00);      /* midpoint: to infinity */
    ck_assert_uint_eq(slim_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(slim_f32_to_f16(-INFINITY), 0xfc00);
    ck_assert(isnan(slim_f16_to_f32(slim_f32_to_f16(NAN))));
    ck_assert(isinf(slim_f16_to_f32(0x7c00)) && slim_f16_to_f32(0x7c00) > 0);

    /* Subnormals: 2^-24 is the smallest, 0x03ff the largest. */
    ck_assert(slim_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    ck_assert(slim_f16_to_f32(0x03ff) == 1023.0f * ldexpf(1.0f, -24));
    ck_assert(slim_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
}
END_TEST

START_TEST(test_f16_round_to_nearest_even)
{
    /* Halfway cases go to the even mantissa. */
    ck_assert_uint_eq(slim_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    ck_assert_uint_eq(slim_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    /* Just past the midpoint rounds up. */
    ck_assert_uint_eq(slim_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    /* In the subnormal range: 2^-25 is halfway between 0 and 2^-24. */
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -25) * 1.0001f), 0x0001);
    ck_assert_uint_eq(slim_f32_to_f16(3 * ldexpf(1.0f, -25)), 0x0002);
    ck_assert_uint_eq(slim_f32_to_f16(5 * ldexpf(1.0f, -25)), 0x0002);
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
    ck_assert_uint_eq(slim_f32_to_f16(-ldexpf(1.0f, -30)), 0x8000);
    /* Rounding up out of the subnormals into the smallest normal. */
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1.0f, -14) - ldexpf(1.0f, -26)), 0x0400);
}
END_TEST

/* ---- bfloat16 -------------------------------------------------------------- */

START_TEST(test_bf16_round_trip_all)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = slim_bf16_to_f32((uint16_t)h);
        bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (is_nan)
            ck_assert_msg(isnan(f) && isnan(slim_bf16_to_f32(slim_f32_to_bf16(f))),
                          "bf16 NaN 0x%04x lost", h);
        else
            ck_assert_msg(slim_f32_to_bf16(f) == h, "bf16 0x%04x -> %g -> 0x%04x", h, f,
                          slim_f32_to_bf16(f));
    }
}
END_TEST

START_TEST(test_bf16_values)
{
    ck_assert_uint_eq(slim_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(slim_f32_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(slim_f32_to_bf16(INFINITY), 0x7f80);
    /* Ties to even, then just past the tie. */
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x3f808001)), 0x3f81);
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x3f807fff)), 0x3f80);
    /* The largest float rounds up to infinity, as in IEEE rounding. */
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x7f7fffff)), 0x7f80);
    /* A NaN whose payload sits only in the dropped bits must stay NaN. */
    ck_assert(isnan(slim_bf16_to_f32(slim_f32_to_bf16(f32_from_bits(0x7f800001)))));
    /* Subnormals keep their top bits. */
    ck_assert_uint_eq(slim_f32_to_bf16(f32_from_bits(0x00010000)), 0x0001);
    ck_assert(slim_bf16_to_f32(0x0001) == f32_from_bits(0x00010000));
}
END_TEST

START_TEST(test_dtype_tables)
{
    ck_assert_uint_eq(slim_dtype_size(SLIM_F16), 2);
    ck_assert_uint_eq(slim_dtype_size(SLIM_I64), 8);
    ck_assert_str_eq(slim_dtype_name(SLIM_BOOL), "bool");
    ck_assert_int_eq(slim_dtype_from_name("bfloat16"), SLIM_BF16);
    ck_assert_int_eq(slim_dtype_from_name("complex64"), SLIM_DTYPE_UNDEFINED);
    ck_assert_int_eq(slim_dtype_from_onnx(1), SLIM_F32);
    ck_assert_int_eq(slim_dtype_to_onnx(SLIM_F16), 10);
    /* Widening and narrowing through the generic accessors. */
    uint16_t h[1];
    slim_store_f64(SLIM_F16, h, 0, 0.5);
    ck_assert_uint_eq(h[0], 0x3800);
    ck_assert(slim_load_f64(SLIM_F16, h, 0) == 0.5);
    int8_t i8[1];
    slim_store_i64(SLIM_I8, i8, 0, -5);
    ck_assert_int_eq(slim_load_i64(SLIM_I8, i8, 0), -5);
}
END_TEST

/* ---- npy ------------------------------------------------------------------- */

static char tmp_dir[64];

static void make_tmp_dir(void)
{
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/slim_test_runtime_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void remove_tmp_dir(void)
{
    rmdir(tmp_dir);
}

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmp_dir, name);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static size_t read_file(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Assembles a version-1.0 file from a header dict and raw data, padding the
 * header to 64 bytes as numpy does. Returns the file's length. */
static size_t build_npy(unsigned char *buf, int major, const char *dict, const void *data,
                        size_t nbytes)
{
    size_t pre = major == 1 ? 10 : 12;
    size_t len = strlen(dict);
    size_t total = (pre + len + 1 + 63) / 64 * 64;
    size_t hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1)
        buf[10] = buf[11] = 0;
    memcpy(buf + pre, dict, len);
    memset(buf + pre + len, ' ', hlen - len - 1);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, nbytes);
    return total + nbytes;
}

/* A header that ends without '\n' (and without padding) in the middle of
 * a token: the error quotes what is left of it, never past its end (the
 * message once read past the buffer; ASan caught it). */
START_TEST(test_npy_header_cut_short_is_quoted_safely)
{
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2x";
    size_t len = strlen(dict), total = 10 + len;
    unsigned char *buf = malloc(total); /* exactly: an overread shows under ASan */
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(len & 0xff);
    buf[9] = (unsigned char)(len >> 8);
    memcpy(buf + 10, dict, len);
    slim_tensor t = {0};
    slim_err err;
    ck_assert_int_eq(slim_npy_parse(buf, total, "cut.npy", &t, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "cut.npy") && strstr(err.msg, "corrupt header"), "%s", err.msg);
    free(buf);
}
END_TEST

START_TEST(test_npy_round_trip_each_dtype)
{
    static const slim_dtype types[] = {SLIM_F32, SLIM_F16, SLIM_F64, SLIM_I8,  SLIM_I16, SLIM_I32,
                                       SLIM_I64, SLIM_U8,  SLIM_U16, SLIM_U32, SLIM_U64, SLIM_BOOL};
    make_tmp_dir();
    char path[256];
    tmp_path(path, sizeof(path), "t.npy");
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        slim_err err;
        slim_tensor t = {.dtype = types[k], .ndim = 3, .dims = {2, 3, 5}};
        ck_assert_int_eq(slim_tensor_alloc(&t, &err), SLIM_OK);
        for (int64_t i = 0; i < slim_tensor_numel(&t); i++)
            slim_store_f64(t.dtype, t.data, i, types[k] == SLIM_BOOL ? (double)(i % 3 == 0)
                                                                   : (double)(i * 3 % 17) - 2);
        ck_assert_int_eq(slim_npy_save(path, &t, &err), SLIM_OK);

        /* Data must start 64-byte aligned, as numpy writes it. */
        unsigned char raw[4096];
        size_t n = read_file(path, raw, sizeof(raw));
        ck_assert_uint_eq((n - slim_tensor_nbytes(&t)) % 64, 0);
        ck_assert(memcmp(raw, "\x93NUMPY\x01\x00", 8) == 0);

        slim_tensor back;
        ck_assert_msg(slim_npy_load(path, &back, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(back.dtype, t.dtype);
        tu_assert_shape(&back, 3, (int64_t[]){2, 3, 5});
        ck_assert(memcmp(back.data, t.data, slim_tensor_nbytes(&t)) == 0);
        slim_tensor_release(&back);
        slim_tensor_release(&t);
    }
    unlink(path);
    remove_tmp_dir();
}
END_TEST

START_TEST(test_npy_scalar_vector_empty)
{
    make_tmp_dir();
    char path[256];
    tmp_path(path, sizeof(path), "s.npy");
    slim_err err;
    const int64_t shapes[3][2] = {{0}, {7}, {0, 4}};
    const int ranks[3] = {0, 1, 2};
    for (int k = 0; k < 3; k++) {
        slim_tensor t = {.dtype = SLIM_F64, .ndim = ranks[k]};
        memcpy(t.dims, shapes[k], sizeof(shapes[k]));
        ck_assert_int_eq(slim_tensor_alloc(&t, &err), SLIM_OK);
        for (int64_t i = 0; i < slim_tensor_numel(&t); i++)
            ((double *)t.data)[i] = 0.25 * (double)i - 1;
        ck_assert_int_eq(slim_npy_save(path, &t, &err), SLIM_OK);
        slim_tensor back;
        ck_assert_msg(slim_npy_load(path, &back, &err) == SLIM_OK, "%s", err.msg);
        tu_assert_shape(&back, ranks[k], shapes[k]);
        if (slim_tensor_numel(&t))
            ck_assert(memcmp(back.data, t.data, slim_tensor_nbytes(&t)) == 0);
        slim_tensor_release(&back);
        slim_tensor_release(&t);
    }
    /* The header spells a 1-d shape the Python way, "(7,)". */
    slim_tensor v = {.dtype = SLIM_U8, .ndim = 1, .dims = {7}};
    ck_assert_int_eq(slim_tensor_alloc(&v, &err), SLIM_OK);
    memset(v.data, 9, 7);
    ck_assert_int_eq(slim_npy_save(path, &v, &err), SLIM_OK);
    unsigned char raw[256];
    size_t n = read_file(path, raw, sizeof(raw) - 1);
    raw[n] = 0;
    ck_assert_ptr_nonnull(strstr((char *)raw + 10, "'descr': '|u1'"));
    ck_assert_ptr_nonnull(strstr((char *)raw + 10, "'shape': (7,)"));
    slim_tensor_release(&v);
    unlink(path);
    remove_tmp_dir();
}
END_TEST

START_TEST(test_npy_parse_numpy_variants)
{
    /* Headers as other writers produce them: version 2.0 and 3.0, Python 2
     * longs, double quotes, keys in another order, no trailing comma. */
    const int32_t data[6] = {0, 1, 2, 3, -4, 5};
    const char *dicts[] = {
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }",
        "{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \"<i4\"}",
    };
    unsigned char buf[512];
    for (int major = 1; major <= 3; major++) {
        for (size_t k = 0; k < sizeof(dicts) / sizeof(dicts[0]); k++) {
            size_t n = build_npy(buf, major, dicts[k], data, sizeof(data));
            slim_tensor t;
            slim_err err;
            ck_assert_msg(slim_npy_parse(buf, n, "mem.npy", &t, &err) == SLIM_OK, "%s", err.msg);
            ck_assert_int_eq(t.dtype, SLIM_I32);
            tu_assert_shape(&t, 2, (int64_t[]){2, 3});
            ck_assert_int_eq(((int32_t *)t.data)[4], -4);
            slim_tensor_release(&t);
        }
    }
}
END_TEST

/* Parses buf and asserts the failure status and a phrase of the message. */
static void expect_parse_error(const void *buf, size_t n, slim_status want, const char *phrase)
{
    slim_tensor t;
    slim_err err;
    slim_status st = slim_npy_parse(buf, n, "bad.npy", &t, &err);
    ck_assert_msg(st == want, "expected %s for \"%s\", got %s: %s", slim_status_name(want),
                  phrase, slim_status_name(st), st ? err.msg : "");
    ck_assert_msg(strstr(err.msg, "bad.npy") != NULL, "message does not name the file: %s",
                  err.msg);
    ck_assert_msg(strstr(err.msg, phrase) != NULL, "\"%s\" not in: %s", phrase, err.msg);
    ck_assert_ptr_null(t.data);
}

START_TEST(test_npy_corrupt_headers)
{
    const float data[4] = {1, 2, 3, 4};
    unsigned char buf[512];
    size_t n;

    expect_parse_error("hello world, not numpy", 22, SLIM_EPARSE, "not a NumPy");
    expect_parse_error("\x93NUMPY\x01", 7, SLIM_EPARSE, "not a NumPy");
    expect_parse_error("\x93NUMPY\x01\x00\x40", 9, SLIM_EPARSE, "truncated");
    expect_parse_error("\x93NUMPY\x09\x00\x40\x00", 10, SLIM_EUNSUPPORTED, "version 9");

    n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", data,
                  sizeof(data));
    expect_parse_error(buf, 40, SLIM_EPARSE, "inside the header");
    expect_parse_error(buf, n - 3, SLIM_EPARSE, "truncated");
    memcpy(buf + n, "xx", 2);
    expect_parse_error(buf, n + 2, SLIM_EPARSE, "after the data");

    n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data,
                  sizeof(data));
    expect_parse_error(buf, n, SLIM_EUNSUPPORTED, "Fortran");
    n = build_npy(buf, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", data,
                  sizeof(data));
    expect_parse_error(buf, n, SLIM_EUNSUPPORTED, "big-endian");
    n = build_npy(buf, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data,
                  sizeof(data));
    expect_parse_error(buf, n, SLIM_EUNSUPPORTED, "'<c8'");
    n = build_npy(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }",
                  data, sizeof(data));
    expect_parse_error(buf, n, SLIM_EUNSUPPORTED, "structured");
    n = build_npy(buf, 1, "{'descr': '<f4', 'shape': (4,), }", data, sizeof(data));
    expect_parse_error(buf, n, SLIM_EPARSE, "missing 'fortran_order'");
    n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, -1), }", data,
                  sizeof(data));
    expect_parse_error(buf, n, SLIM_EPARSE, "dimension");
    n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,) ", data,
                  sizeof(data));
    expect_parse_error(buf, n, SLIM_EPARSE, "corrupt header");
    n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}",
                  data, sizeof(data));
    expect_parse_error(buf, n, SLIM_EPARSE, "unexpected key 'x'");
    /* A shape whose byte count overflows must not allocate. */
    n = build_npy(buf, 1,
                  "{'descr': '<f8', 'fortran_order': False, "
                  "'shape': (4294967296, 4294967296, 16), }",
                  data, sizeof(data));
    expect_parse_error(buf, n, SLIM_EPARSE, "too large");
}
END_TEST

START_TEST(test_npy_file_errors)
{
    make_tmp_dir();
    char path[256];
    slim_tensor t;
    slim_err err;
    tmp_path(path, sizeof(path), "missing.npy");
    ck_assert_int_eq(slim_npy_load(path, &t, &err), SLIM_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing.npy"));

    /* A file cut short in its data: the error says so before allocating. */
    const float data[6] = {1, 2, 3, 4, 5, 6};
    unsigned char buf[512];
    size_t n = build_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                         data, sizeof(data));
    tmp_path(path, sizeof(path), "short.npy");
    write_file(path, buf, n - 5);
    ck_assert_int_eq(slim_npy_load(path, &t, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "short.npy"));
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
    ck_assert_ptr_null(t.data);
    unlink(path);

    /* Cut inside the header. */
    tmp_path(path, sizeof(path), "cut.npy");
    write_file(path, buf, 30);
    ck_assert_int_eq(slim_npy_load(path, &t, &err), SLIM_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.msg, "cut.npy: truncated"));
    unlink(path);

    /* The whole file loads. */
    tmp_path(path, sizeof(path), "ok.npy");
    write_file(path, buf, n);
    ck_assert_int_eq(slim_npy_load(path, &t, &err), SLIM_OK);
    ck_assert(((float *)t.data)[5] == 6.0f);
    slim_tensor_release(&t);
    unlink(path);

    /* bfloat16 has no NumPy dtype. */
    slim_tensor b = {.dtype = SLIM_BF16, .ndim = 1, .dims = {2}};
    ck_assert_int_eq(slim_tensor_alloc(&b, &err), SLIM_OK);
    ck_assert_int_eq(slim_npy_save(path, &b, &err), SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "bfloat16"));
    ck_assert_int_ne(access(path, F_OK), 0);
    slim_tensor_release(&b);
    remove_tmp_dir();
}
END_TEST

/* ---- kernels/common.c ------------------------------------------------------ */

START_TEST(test_broadcast_shape)
{
    int64_t out[SLIM_MAX_DIMS];
    int n;
    slim_err err;
    ck_assert_int_eq(slim_broadcast_shape(3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){3, 1}, &n, out,
                                          &err), SLIM_OK);
    ck_assert_int_eq(n, 3);
    ck_assert(out[0] == 2 && out[1] == 3 && out[2] == 4);
    ck_assert_int_eq(slim_broadcast_shape(2, (int64_t[]){5, 1}, 3, (int64_t[]){1, 1, 6}, &n, out,
                                          &err), SLIM_OK);
    ck_assert(n == 3 && out[0] == 1 && out[1] == 5 && out[2] == 6);
    ck_assert_int_eq(slim_broadcast_shape(0, NULL, 2, (int64_t[]){2, 2}, &n, out, &err), SLIM_OK);
    ck_assert(n == 2 && out[0] == 2 && out[1] == 2);
    /* A 0-sized axis broadcasts against 1 and stays 0. */
    ck_assert_int_eq(slim_broadcast_shape(1, (int64_t[]){0}, 2, (int64_t[]){3, 1}, &n, out, &err),
                     SLIM_OK);
    ck_assert(n == 2 && out[0] == 3 && out[1] == 0);
    ck_assert_int_eq(slim_broadcast_shape(2, (int64_t[]){2, 3}, 2, (int64_t[]){4, 3}, &n, out,
                                          &err), SLIM_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "[2,3]"));
    ck_assert_ptr_nonnull(strstr(err.msg, "[4,3]"));
}
END_TEST

START_TEST(test_broadcast_strides)
{
    int64_t s[SLIM_MAX_DIMS];
    slim_broadcast_strides(2, (int64_t[]){3, 1}, 3, (int64_t[]){2, 3, 4}, s);
    ck_assert(s[0] == 0 && s[1] == 1 && s[2] == 0);
    slim_broadcast_strides(3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 3, 4}, s);
    ck_assert(s[0] == 12 && s[1] == 4 && s[2] == 1);
    slim_broadcast_strides(1, (int64_t[]){4}, 3, (int64_t[]){2, 3, 4}, s);
    ck_assert(s[0] == 0 && s[1] == 0 && s[2] == 1);
    slim_broadcast_strides(0, NULL, 2, (int64_t[]){2, 3}, s);
    ck_assert(s[0] == 0 && s[1] == 0);
    slim_contiguous_strides(4, (int64_t[]){2, 3, 4, 5}, s);
    ck_assert(s[0] == 60 && s[1] == 20 && s[2] == 5 && s[3] == 1);
}
END_TEST

START_TEST(test_norm_axis)
{
    int axis;
    slim_err err;
    ck_assert_int_eq(slim_norm_axis(-1, 3, &axis, &err), SLIM_OK);
    ck_assert_int_eq(axis, 2);
    ck_assert_int_eq(slim_norm_axis(-3, 3, &axis, &err), SLIM_OK);
    ck_assert_int_eq(axis, 0);
    ck_assert_int_eq(slim_norm_axis(2, 3, &axis, &err), SLIM_OK);
    ck_assert_int_eq(axis, 2);
    ck_assert_int_eq(slim_norm_axis(3, 3, &axis, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "axis 3"));
    ck_assert_int_eq(slim_norm_axis(-4, 3, &axis, &err), SLIM_EINVAL);
    /* A scalar accepts axis 0 (ops that need a real axis reject rank 0
     * themselves). */
    ck_assert_int_eq(slim_norm_axis(0, 0, &axis, &err), SLIM_OK);
    ck_assert_int_eq(axis, 0);
    ck_assert_int_eq(slim_norm_axis(1, 0, &axis, &err), SLIM_EINVAL);
}
END_TEST

START_TEST(test_dtype_checks_and_reads)
{
    slim_err err;
    slim_tensor f = tu_f32(1, (int64_t[]){2}, (float[]){1.5f, 2});
    ck_assert_int_eq(slim_check_dtype(&f, "input X", &err, SLIM_F64, SLIM_F32,
                                      SLIM_DTYPE_UNDEFINED), SLIM_OK);
    ck_assert_int_eq(slim_check_dtype(&f, "input X", &err, SLIM_I32, SLIM_I64,
                                      SLIM_DTYPE_UNDEFINED), SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "input X has data type float32; supported: int32, int64"));

    int64_t vals[4];
    int n;
    ck_assert_int_eq(slim_read_ints(&f, "shape", vals, 4, &n, &err), SLIM_ETYPE);
    double d;
    ck_assert_int_eq(slim_read_scalar_f64(&f, "alpha", &d, &err), SLIM_OK);
    ck_assert(d == 1.5);

    slim_tensor i = tu_tensor(SLIM_I32, 1, (int64_t[]){3}, (int32_t[]){4, -1, 7});
    ck_assert_int_eq(slim_read_ints(&i, "shape", vals, 4, &n, &err), SLIM_OK);
    ck_assert(n == 3 && vals[0] == 4 && vals[1] == -1 && vals[2] == 7);
    ck_assert_int_eq(slim_read_ints(&i, "shape", vals, 2, &n, &err), SLIM_EINVAL);
    int64_t s;
    ck_assert_int_eq(slim_read_scalar_i64(&i, "k", &s, &err), SLIM_OK);
    ck_assert_int_eq(s, 4);

    /* While planning, data is absent: the caller learns to wait. */
    slim_tensor planned = {.dtype = SLIM_I64, .ndim = 1, .dims = {2}};
    ck_assert_int_eq(slim_read_ints(&planned, "shape", vals, 4, &n, &err), SLIM_ENEEDVALUE);
    ck_assert_int_eq(slim_read_scalar_i64(&planned, "k", &s, &err), SLIM_ENEEDVALUE);
    slim_tensor empty = {.dtype = SLIM_I64, .ndim = 1, .dims = {0}};
    ck_assert_int_eq(slim_read_scalar_i64(&empty, "k", &s, &err), SLIM_EINVAL);

    slim_tensor_release(&f);
    slim_tensor_release(&i);
}
END_TEST

/* ---- thread pool (runtime/parallel.c) ---------------------------------------- */

typedef struct pool_job {
    _Atomic int *count;
    int64_t n;
    int slow;                  /* every slow-th index spins a while */
} pool_job;

static void pool_mark(int64_t begin, int64_t end, void *user)
{
    pool_job *j = user;
    for (int64_t i = begin; i < end; i++) {
        if (j->slow && i % j->slow == 0)
            for (volatile int spin = 0; spin < 20000; spin++)
                ;
        atomic_fetch_add(&j->count[i], 1);
    }
}

/* More threads than cores, so workers often wake after the caller has
 * taken every chunk: the caller may then return without them (it closes
 * the job), but never before a worker that did take a chunk has finished
 * it, and no chunk may run twice or be skipped. */
static void pool_jobs_each_index_once(const char *wait_all)
{
    setenv("SLIM_NUM_THREADS", "4", 1);
    setenv("SLIM_POOL_SPIN_US", "0", 1); /* workers sleep: the late-wake case */
    setenv("SLIM_POOL_WAIT_ALL", wait_all, 1);
    ck_assert_int_eq(slim_num_threads(), 4);
    enum { MAX_N = 61 };
    _Atomic int count[MAX_N];
    for (int job = 0; job < 3000; job++) {
        pool_job j = {count, 1 + job % MAX_N, job % 3 ? 0 : 1 + job % 5};
        for (int i = 0; i < MAX_N; i++)
            atomic_store(&count[i], 0);
        slim_parallel_for(j.n, 1, pool_mark, &j);
        for (int64_t i = 0; i < MAX_N; i++)
            ck_assert_msg(atomic_load(&count[i]) == (i < j.n), "job %d (n %lld): index %lld "
                          "ran %d times", job, (long long)j.n, (long long)i,
                          atomic_load(&count[i]));
    }
}

START_TEST(test_pool_jobs_each_index_once)
{
    pool_jobs_each_index_once("0");
}
END_TEST

START_TEST(test_pool_jobs_each_index_once_wait_all)
{
    pool_jobs_each_index_once("1");
}
END_TEST

/* slim_parallel_prewake (a server's run after an idle gap) at every point
 * of a job's life: with none coming, before one, right after one; with the
 * workers asleep (after a pause longer than their watch) or still
 * watching. Jobs still run each index once, and nothing hangs (a prewake
 * with no job to follow lets the workers sleep again). */
START_TEST(test_pool_prewake_any_time)
{
    setenv("SLIM_NUM_THREADS", "3", 1);
    setenv("SLIM_POOL_SPIN_US", "50", 1);
    ck_assert_int_eq(slim_num_threads(), 3);
    enum { MAX_N = 37 };
    _Atomic int count[MAX_N];
    for (int job = 0; job < 600; job++) {
        if (job % 7 == 0) { /* longer than the watch: the workers sleep */
            struct timespec pause = {0, 300000};
            nanosleep(&pause, NULL);
        }
        if (job % 3 != 2)
            slim_parallel_prewake();
        if (job % 5 == 4) {
            slim_parallel_prewake(); /* twice, and no job at all this time */
            continue;
        }
        pool_job j = {count, 1 + job % MAX_N, job % 4 ? 0 : 1 + job % 3};
        for (int i = 0; i < MAX_N; i++)
            atomic_store(&count[i], 0);
        slim_parallel_for(j.n, 1, pool_mark, &j);
        if (job % 3 == 2)
            slim_parallel_prewake();
        for (int64_t i = 0; i < MAX_N; i++)
            ck_assert_msg(atomic_load(&count[i]) == (i < j.n), "job %d (n %lld): index %lld "
                          "ran %d times", job, (long long)j.n, (long long)i,
                          atomic_load(&count[i]));
    }
}
END_TEST

/* ---- devices and the op registry (issue 30) ------------------------------ */

typedef struct {
    const char *op_type;
    int since;
    int id;
} test_entry;

static const test_entry tab_a[] = {{"A", 1, 1}, {"A", 7, 2}, {"B", 3, 3}, {NULL, 0, 0}};
static const test_entry tab_b[] = {{"A", 5, 4}, {"B", 3, 5}, {NULL, 0, 0}};
static const test_entry tab_x[] = {{"A", 1, 6}, {NULL, 0, 0}};
static const test_entry tab_any[] = {{"Copy", 1, 7}, {NULL, 0, 0}};

START_TEST(test_op_tables_since_rule)
{
    const slim_op_table t[] = {
        SLIM_OP_TABLE("", tab_a), SLIM_OP_TABLE("", tab_b), SLIM_OP_TABLE("x.y", tab_x),
        {"x.y", tab_any, sizeof(tab_any[0]), true},
    };
    const test_entry *e;
    /* The highest since <= the opset, across the domain's tables. */
    e = slim_op_tables_find(t, 4, "", "A", 6);
    ck_assert_int_eq(e->id, 4);
    e = slim_op_tables_find(t, 4, NULL, "A", 9);
    ck_assert_int_eq(e->id, 2);
    e = slim_op_tables_find(t, 4, "ai.onnx", "A", 4);
    ck_assert_int_eq(e->id, 1);
    ck_assert_ptr_null(slim_op_tables_find(t, 4, "", "A", 0));
    /* A tie goes to the first table. */
    e = slim_op_tables_find(t, 4, "", "B", 3);
    ck_assert_int_eq(e->id, 3);
    /* Other domains see only their own tables. */
    e = slim_op_tables_find(t, 4, "x.y", "A", 9);
    ck_assert_int_eq(e->id, 6);
    ck_assert_ptr_null(slim_op_tables_find(t, 4, "x.y", "B", 9));
    ck_assert_ptr_null(slim_op_tables_find(t, 4, "z", "A", 9));
    /* any_opset: whatever the node's opset. */
    e = slim_op_tables_find(t, 4, "x.y", "Copy", 0);
    ck_assert_int_eq(e->id, 7);
    /* The process's registry holds the CPU's defs once slim_init ran. */
    ck_assert(!slim_op_registry_empty());
    ck_assert_ptr_eq(slim_op_registry_find("", "Relu", 14), slim_op_lookup("", "Relu", 14));
}
END_TEST

START_TEST(test_every_device_has_a_backend)
{
    slim_err err;
    slim_device *d;
    ck_assert_int_eq(slim_device_get("cpu", &d, &err), SLIM_OK);
    ck_assert_ptr_eq(d, slim_device_cpu());
    ck_assert_str_eq(slim_device_kind(d), "cpu");
    ck_assert_ptr_nonnull(d->backend->exec);
    ck_assert_int_eq(slim_device_get(NULL, &d, &err), SLIM_OK);
    ck_assert_ptr_eq(d, slim_device_cpu());
    ck_assert_int_eq(slim_device_get("emul:0", &d, &err), SLIM_OK);
    ck_assert_str_eq(slim_device_kind(d), "emul");
    ck_assert_int_eq(slim_device_get("tpu", &d, &err), SLIM_EINVAL);
    ck_assert_str_eq(err.msg, "unknown device \"tpu\" (expected cpu, cuda or cuda:N)");
    ck_assert_int_eq(slim_device_get("cuda:x", &d, &err), SLIM_EINVAL);
    ck_assert_str_eq(err.msg, "unknown device \"cuda:x\" (expected cuda:N with N a device "
                              "number)");
    /* The CPU first; emul is found by name, never listed. */
    slim_device *devs[8];
    int n = slim_device_list(devs, 8, false, NULL);
    ck_assert_int_ge(n, 1);
    ck_assert_ptr_eq(devs[0], slim_device_cpu());
    for (int i = 0; i < n && i < 8; i++)
        ck_assert_str_ne(slim_device_kind(devs[i]), "emul");
    size_t free_b = 0, total_b = 0;
    devs[0]->backend->mem_info(devs[0], &free_b, &total_b);
    ck_assert_uint_gt(total_b, 0);
    ck_assert_uint_le(free_b, total_b);
}
END_TEST

static bool seen_invariant;

static slim_status record_mode(slim_op_ctx *ctx)
{
    (void)ctx;
    seen_invariant = slim_gemm_row_invariant();
    return SLIM_OK;
}

START_TEST(test_cpu_backend_applies_row_invariance)
{
    const slim_op_def def = {"Record", 1, NULL, NULL, NULL, record_mode, 0};
    slim_device *cpu = slim_device_cpu();
    slim_err err;
    slim_op_ctx ctx = {.err = &err, .row_invariant = true};
    ck_assert_int_eq(cpu->backend->exec(cpu, &def, &ctx), SLIM_OK);
    ck_assert(seen_invariant);
    ck_assert(!slim_gemm_row_invariant()); /* the thread's mode is back */
    ctx.row_invariant = false;
    ck_assert_int_eq(cpu->backend->exec(cpu, &def, &ctx), SLIM_OK);
    ck_assert(!seen_invariant);
    /* emul:0 runs the CPU kernel the same way. */
    slim_device *emul = slim_device_emul();
    ctx.row_invariant = true;
    ck_assert_int_eq(emul->backend->exec(emul, &def, &ctx), SLIM_OK);
    ck_assert(seen_invariant);
}
END_TEST

static Suite *runtime_suite(void)
{
    Suite *s = suite_create("runtime");
    TCase *dt = tcase_create("dtype");
    tcase_add_test(dt, test_f16_round_trip_all);
    tcase_add_test(dt, test_npy_header_cut_short_is_quoted_safely);
    tcase_add_test(dt, test_f16_values);
    tcase_add_test(dt, test_f16_round_to_nearest_even);
    tcase_add_test(dt, test_bf16_round_trip_all);
    tcase_add_test(dt, test_bf16_values);
    tcase_add_test(dt, test_dtype_tables);
    suite_add_tcase(s, dt);

    TCase *npy = tcase_create("npy");
    tcase_add_test(npy, test_npy_round_trip_each_dtype);
    tcase_add_test(npy, test_npy_scalar_vector_empty);
    tcase_add_test(npy, test_npy_parse_numpy_variants);
    tcase_add_test(npy, test_npy_corrupt_headers);
    tcase_add_test(npy, test_npy_file_errors);
    suite_add_tcase(s, npy);

    TCase *common = tcase_create("common");
    tcase_add_test(common, test_broadcast_shape);
    tcase_add_test(common, test_broadcast_strides);
    tcase_add_test(common, test_norm_axis);
    tcase_add_test(common, test_dtype_checks_and_reads);
    suite_add_tcase(s, common);

    TCase *pool = tcase_create("pool"); /* each test forks: its own pool */
    tcase_add_test(pool, test_pool_jobs_each_index_once);
    tcase_add_test(pool, test_pool_jobs_each_index_once_wait_all);
    tcase_add_test(pool, test_pool_prewake_any_time);
    tcase_set_timeout(pool, 60);
    suite_add_tcase(s, pool);

    TCase *devices = tcase_create("devices");
    tcase_add_test(devices, test_op_tables_since_rule);
    tcase_add_test(devices, test_every_device_has_a_backend);
    tcase_add_test(devices, test_cpu_backend_applies_row_invariance);
    suite_add_tcase(s, devices);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(runtime_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
