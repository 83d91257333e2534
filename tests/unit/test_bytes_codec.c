/*
 * test_bytes_codec.c - server/bytes_codec.c (BYTES from and to the wire,
 * the decoded-size limit) and server/classify.c (top-k order, ties, the
 * strings, K clamped, per row), without a server.
 */
#include <check.h>

#include "buf.h"
#include "codec.h"
#include "config.h"
#include "repository.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t wire_of(const char *const *elems, int n, unsigned char *out)
{
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(elems[i]);
        memcpy(out + pos, &len, 4); /* the test machines are little-endian */
        memcpy(out + pos + 4, elems[i], len);
        pos += 4 + len;
    }
    return pos;
}

START_TEST(wire_round_trip)
{
    const char *elems[] = {"abc", "", "\xc3\xa9t\xc3\xa9", "x"};
    unsigned char wire[64], back[64];
    size_t n = wire_of(elems, 4, wire);
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = 2, .dims = {2, 2}};
    slim_err err = {0};
    ck_assert_int_eq(slim_server_bytes_from_wire(wire, n, &t, "in", "binary data", &err), SLIM_OK);
    for (int i = 0; i < 4; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(&t, i, &len);
        ck_assert_uint_eq(len, strlen(elems[i]));
        ck_assert(len == 0 || memcmp(s, elems[i], len) == 0);
    }
    ck_assert_uint_eq(slim_server_bytes_wire_size(&t), n);
    slim_server_bytes_to_wire(&t, back);
    ck_assert_mem_eq(back, wire, n);
    slim_server_buf b = {0};
    slim_server_bytes_put_json(&b, &t);
    slim_server_buf_append(&b, "", 1);
    ck_assert_str_eq(b.data, "\"data\":[\"abc\",\"\",\"\xc3\xa9t\xc3\xa9\",\"x\"]");
    ck_assert_uint_le(b.len - 1, slim_server_bytes_json_bound(&t) + 9);
    slim_server_buf_free(&b);
    slim_tensor_release(&t);
}
END_TEST

static void assert_wire_error(const void *wire, size_t n, int64_t numel, const char *want)
{
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = 1, .dims = {numel}};
    slim_err err = {0};
    ck_assert_int_eq(slim_server_bytes_from_wire(wire, n, &t, "in", "binary data", &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "'in'"), "got \"%s\", want \"%s\"",
                  err.msg, want);
    ck_assert_ptr_null(t.data);
}

START_TEST(wire_errors)
{
    unsigned char w[16] = {3, 0, 0, 0, 'a', 'b', 'c', 1, 0};
    assert_wire_error(w, 9, 2, "ends inside the 4-byte length of element 1");
    unsigned char past[5] = {0xff, 0xff, 0xff, 0xff, 'a'};
    assert_wire_error(past, 5, 1, "element 0 of binary data is 4294967295 bytes long, past the end");
    unsigned char extra[8] = {1, 0, 0, 0, 'a', 'z', 'z', 'z'};
    assert_wire_error(extra, 8, 1, "3 bytes after its 1 elements");
    assert_wire_error(extra, 8, 3, "too few for 3 BYTES elements");
    /* 1000 empty strings: 4000 bytes sent, 16000 decoded */
    unsigned char *zeros = calloc(4000, 1);
    slim_server_bytes_set_limit(15999);
    assert_wire_error(zeros, 4000, 1000, "over the limit of 15999 bytes (--max-request-bytes)");
    slim_server_bytes_set_limit(16000);
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = 1, .dims = {1000}};
    slim_err err = {0};
    ck_assert_int_eq(slim_server_bytes_from_wire(zeros, 4000, &t, "in", "binary data", &err), SLIM_OK);
    slim_tensor_release(&t);
    slim_server_bytes_set_limit(64u << 20);
    free(zeros);
}
END_TEST

START_TEST(json_strings)
{
    slim_err err = {0};
    cJSON *d = cJSON_Parse("[[\"a\", \"\"], [\"\\u00e9\", \"b c\"]]");
    slim_tensor t = {.dtype = SLIM_STRING, .ndim = 2, .dims = {2, 2}};
    ck_assert_int_eq(slim_server_bytes_from_json(d, &t, "in", &err), SLIM_OK);
    size_t len;
    const char *s = slim_tensor_string_get(&t, 2, &len);
    ck_assert_uint_eq(len, 2);
    ck_assert_mem_eq(s, "\xc3\xa9", 2);
    slim_tensor_release(&t);
    cJSON_Delete(d);
    d = cJSON_Parse("[\"a\", 3]");
    t = (slim_tensor){.dtype = SLIM_STRING, .ndim = 1, .dims = {2}};
    ck_assert_int_eq(slim_server_bytes_from_json(d, &t, "in", &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "element 1 is not a string"), "%s", err.msg);
    cJSON_Delete(d);
    d = cJSON_Parse("[\"a\", \"\xff\"]");
    ck_assert_int_eq(slim_server_bytes_from_json(d, &t, "in", &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "element 1 is not valid UTF-8"), "%s", err.msg);
    cJSON_Delete(d);
}
END_TEST

/* A model of one output "y" [rows, n] float, batching, maybe labelled. */
static void classifier(slim_server_model *m, int64_t n_labels)
{
    static const char *labels[] = {"l0", "l1", "l2", "l3"};
    static slim_server_io out;
    out = (slim_server_io){.name = "y", .dtype = SLIM_F32, .ndim = 1, .dims = {-1},
                           .labels = labels, .n_labels = n_labels};
    memset(m, 0, sizeof(*m));
    m->name = "m";
    m->cfg.max_batch_size = 8;
    m->cfg.outputs = &out;
    m->cfg.n_outputs = 1;
}

static void assert_classes(const slim_server_model *m, const float *v, int rows, int n, int64_t k,
                           const char *const *want, int n_want)
{
    slim_tensor y = {.dtype = SLIM_F32, .ndim = 2, .dims = {rows, n}};
    slim_err err = {0};
    ck_assert_int_eq(slim_tensor_alloc(&y, &err), SLIM_OK);
    memcpy(y.data, v, (size_t)rows * (size_t)n * sizeof(float));
    slim_server_out_req o = {.index = 0, .class_count = k};
    slim_server_infer rq = {.n_outputs = 1, .outputs = &o};
    slim_tensor view;
    ck_assert_int_eq(slim_server_classify_outputs(&rq, m, &y, 1, &view, &err), SLIM_OK);
    ck_assert_int_eq(view.dtype, SLIM_STRING);
    ck_assert_int_eq(view.ndim, 2);
    ck_assert_int_eq(view.dims[0], rows);
    ck_assert_int_eq(slim_tensor_numel(&view), n_want);
    for (int i = 0; i < n_want; i++) {
        size_t len;
        const char *s = slim_tensor_string_get(&view, i, &len);
        ck_assert_msg(len == strlen(want[i]) && memcmp(s, want[i], len) == 0,
                      "element %d: \"%.*s\", want \"%s\"", i, (int)len, s, want[i]);
    }
    slim_server_classify_outputs_free(&rq, &y, &view, 1);
    slim_tensor_release(&y);
}

START_TEST(classify_order)
{
    slim_server_model m;
    classifier(&m, 4);
    const float v[] = {0.5f, 2.0f, 0.5f, -1.0f, 2.0f, 0.25f};
    const char *top3[] = {"2.000000:1:l1", "2.000000:4", "0.500000:0:l0"};
    assert_classes(&m, v, 1, 6, 3, top3, 3);
    /* K past the class count: all 6; the merge-sort path (K > 16) agrees */
    const char *all[] = {"2.000000:1:l1", "2.000000:4", "0.500000:0:l0", "0.500000:2:l2",
                         "0.250000:5", "-1.000000:3:l3"};
    assert_classes(&m, v, 1, 6, 6, all, 6);
    assert_classes(&m, v, 1, 6, 100, all, 6);
    /* per row: two rows of 3 */
    const char *rows[] = {"2.000000:1:l1", "0.500000:0:l0", "2.000000:1:l1", "0.250000:2:l2"};
    assert_classes(&m, v, 2, 3, 2, rows, 4);
    /* no labels; NaN last */
    classifier(&m, 0);
    const float w[] = {__builtin_nanf(""), 1.0f, 3.0f};
    const char *nan_last[] = {"3.000000:2", "1.000000:1", "nan:0"};
    assert_classes(&m, w, 1, 3, 3, nan_last, 3);
    slim_err err = {0};
    ck_assert_int_eq(slim_server_classify_check(&m, 0, 0, &err), SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "output 'y'") && strstr(err.msg, "1 or more"), "%s", err.msg);
}
END_TEST

START_TEST(labels_file)
{
    char dir[] = "/tmp/slim-labels-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[400], model[300];
    snprintf(model, sizeof(model), "%s/m", dir);
    ck_assert_int_eq(mkdir(model, 0700), 0);
    snprintf(path, sizeof(path), "%s/l.txt", model);
    FILE *f = fopen(path, "wb");
    fputs("cat\r\ndog\n\nbird", f);
    fclose(f);
    slim_server_io out = {.name = strdup("y"), .label_filename = strdup("l.txt")};
    slim_server_config cfg = {.outputs = &out, .n_outputs = 1};
    slim_err err = {0};
    ck_assert_int_eq(slim_server_config_load_labels(&cfg, dir, "m", &err), SLIM_OK);
    ck_assert_int_eq(out.n_labels, 4);
    ck_assert_str_eq(out.labels[0], "cat");
    ck_assert_str_eq(out.labels[1], "dog");
    ck_assert_str_eq(out.labels[2], "");
    ck_assert_str_eq(out.labels[3], "bird");
    slim_server_io_free(&out);
    out = (slim_server_io){.name = strdup("y"), .label_filename = strdup("none.txt")};
    ck_assert_int_ne(slim_server_config_load_labels(&cfg, dir, "m", &err), SLIM_OK);
    ck_assert_msg(strstr(err.msg, "output 'y'") && strstr(err.msg, "none.txt"), "%s", err.msg);
    slim_server_io_free(&out);
    remove(path);
    rmdir(model);
    rmdir(dir);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("bytes_codec");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, wire_round_trip);
    tcase_add_test(tc, wire_errors);
    tcase_add_test(tc, json_strings);
    tcase_add_test(tc, classify_order);
    tcase_add_test(tc, labels_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
