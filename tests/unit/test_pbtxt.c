/*
 * test_pbtxt.c - server/pbtxt.c's text format parser and config_triton.c's
 * mapping of a Triton model configuration onto config.json's keys.
 */
#include <check.h>

#include "config.h"
#include "pbtxt.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tree of text, printed compactly; NULL when it does not parse. */
static char *tree_of(const char *text, slim_err *err)
{
    cJSON *t = slim_server_pbtxt_parse(text, strlen(text), err);
    if (!t)
        return NULL;
    char *s = cJSON_PrintUnformatted(t);
    cJSON_Delete(t);
    return s;
}

static void assert_tree(const char *text, const char *want)
{
    slim_err err = {0};
    char *got = tree_of(text, &err);
    ck_assert_msg(got, "%s: %s", text, err.msg);
    ck_assert_str_eq(got, want);
    free(got);
}

static void assert_error(const char *text, const char *want)
{
    slim_err err = {0};
    char *got = tree_of(text, &err);
    ck_assert_msg(!got, "%s parsed as %s", text, got ? got : "");
    ck_assert_msg(strstr(err.msg, want), "%s: got \"%s\", want \"%s\"", text, err.msg, want);
}

START_TEST(forms)
{
    /* every field an array of its values; repeats, lists and both forms of
     * message brackets; separators optional */
    assert_tree("a: 1 a: 2, b: [3, 4]; c { d: x } c < d: y >",
                "{\"a\":[1,2],\"b\":[3,4],\"c\":[{\"d\":[\"x\"]},{\"d\":[\"y\"]}]}");
    assert_tree("input [ { name: \"x\" dims: [ -1, 4 ] }, { name: 'y' } ]",
                "{\"input\":[{\"name\":[\"x\"],\"dims\":[-1,4]},{\"name\":[\"y\"]}]}");
    /* an empty list sets nothing, as in protobuf */
    assert_tree("e: [] f: {} g: true h: false", "{\"f\":[{}],\"g\":[true],\"h\":[false]}");
    /* numbers: hex, float suffix, exponent, -inf as a string */
    assert_tree("n: 0x10 n: 1.5e1 n: 2f n: -3 n: -inf",
                "{\"n\":[16,15,2,-3,\"-inf\"]}");
    /* strings: escapes and adjacent ones joined; comments */
    assert_tree("s: \"a\\n\\x41\\101\" 'b\\'' # c: 1\n t: 2",
                "{\"s\":[\"a\\nAAb'\"],\"t\":[2]}");
    assert_tree("", "{}");
}
END_TEST

START_TEST(errors)
{
    assert_error("a: 1\nb: [1 2]", "line 2, column 7: expected ',' or ']'");
    assert_error("a {\n  b: 1\n", "line 1, column 3: '{' not closed");
    assert_error("a: \"x\n\"", "line 1, column 4: string not closed on its line");
    assert_error("a 1", "line 1, column 3: expected ':' or '{' after \"a\"");
    assert_error("a: }", "line 1, column 4: expected a value");
    assert_error("}", "line 1, column 1: unexpected '}'");
    assert_error("a: \"\\q\"", "unknown escape \\q");
    assert_error("a: \"\\0\"", "NUL");
    assert_error("[ext.f]: 1", "extension");
    assert_error("a: 12x", "\"12x\" is not a number");
    /* bounded: nesting and values */
    char deep[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "a{");
    assert_error(deep, "nested more than 32 deep");
    char *many = malloc(4 + 2 * 70000 + 3);
    ck_assert_ptr_nonnull(many);
    char *p = many + sprintf(many, "a: [");
    for (int i = 0; i < 70000; i++, p += 2)
        memcpy(p, "1,", 2);
    strcpy(p, "1]");
    assert_error(many, "more than 65536 values");
    free(many);
}
END_TEST

/* The mapped config.json text of a config.pbtxt. */
static cJSON *mapped(const char *pbtxt, slim_err *err)
{
    char *json = NULL;
    if (slim_server_config_from_pbtxt(pbtxt, strlen(pbtxt), "m", &json, err) != SLIM_OK)
        return NULL;
    cJSON *j = cJSON_Parse(json);
    free(json);
    return j;
}

START_TEST(mapping)
{
    slim_err err = {0};
    cJSON *j = mapped("name: \"m\" max_batch_size: 8\n"
                      "dynamic_batching { preferred_batch_size: [4, 2] }\n"
                      "instance_group [ { count: 2 kind: KIND_GPU gpus: [1] } ]\n"
                      "version_policy { specific { versions: 3 } }\n"
                      "model_warmup { name: \"w\" batch_size: 2 inputs { key: \"x\"\n"
                      "  value { data_type: TYPE_FP32 dims: [4] zero_data: true } } }\n"
                      "unknown_field: 1", &err);
    ck_assert_msg(j, "%s", err.msg);
    char *s = cJSON_PrintUnformatted(j);
    ck_assert_str_eq(s, "{\"name\":\"m\",\"max_batch_size\":8,\"dynamic_batching\":"
                        "{\"preferred_batch_size\":[4,2]},\"instance_count\":2,"
                        "\"device\":\"cuda:1\",\"version_policy\":{\"specific\":"
                        "{\"versions\":[3]}},\"model_warmup\":[{\"name\":\"w\","
                        "\"batch_size\":2,\"inputs\":{\"x\":{\"data_type\":\"TYPE_FP32\","
                        "\"dims\":[4],\"zero_data\":true}}}]}");
    free(s);
    cJSON_Delete(j);
    /* a message where a value belongs, a scalar given twice, a bad kind */
    ck_assert_ptr_null(mapped("max_batch_size { }", &err));
    ck_assert_msg(strstr(err.msg, "config.pbtxt: max_batch_size: expected a number"), "%s", err.msg);
    ck_assert_ptr_null(mapped("max_batch_size: 1 max_batch_size: 2", &err));
    ck_assert_msg(strstr(err.msg, "given 2 times"), "%s", err.msg);
    ck_assert_ptr_null(mapped("instance_group { kind: KIND_MODEL }", &err));
    ck_assert_msg(strstr(err.msg, "KIND_MODEL is not supported"), "%s", err.msg);
    ck_assert_ptr_null(mapped("name: \"other\"", &err));
    ck_assert_msg(strstr(err.msg, "config.pbtxt: \"name\" is \"other\""), "%s", err.msg);
    /* model_warmup: checked by warmup.c, errors naming the sample and the file */
    ck_assert_ptr_null(mapped("model_warmup { name: \"w\" inputs { key: \"x\" value {\n"
                              "  data_type: TYPE_FP32 dims: 4 } } }", &err));
    ck_assert_msg(strstr(err.msg, "config.pbtxt: \"model_warmup\"[0] (\"w\"): input \"x\": "
                          "give one of"), "%s", err.msg);
    ck_assert_ptr_null(mapped("model_warmup { name: \"w\" inputs { key: \"x\" value {\n"
                              "  data_type: TYPE_FP32 input_data_file: \"../x\" } } }", &err));
    ck_assert_msg(strstr(err.msg, "input_data_file: expected the name of a file"), "%s", err.msg);
    ck_assert_ptr_null(mapped("model_warmup { name: \"w\" inputs { key: \"x\" value {\n"
                              "  data_type: TYPE_STRING dims: 1 zero_data: true } } }", &err));
    ck_assert_msg(strstr(err.msg, "TYPE_STRING is not supported in model_warmup"), "%s", err.msg);
    ck_assert_ptr_null(mapped("model_warmup { name: \"w\" inputs { key: \"x\" value {\n"
                              "  data_type: TYPE_FP32 zero_data: true } }\n"
                              "  inputs { key: \"x\" value { data_type: TYPE_FP32 } } }", &err));
    ck_assert_msg(strstr(err.msg, "model_warmup[0].inputs: \"x\" is given twice"), "%s", err.msg);
    ck_assert_ptr_null(mapped("max_batch_size: 1\n  x {", &err));
    ck_assert_msg(strstr(err.msg, "config.pbtxt: line 2, column 5"), "%s", err.msg);
}
END_TEST

START_TEST(triton_json)
{
    /* int64 as strings (protobuf's JSON), slimserve's keys passed through
     * and winning over instance_group */
    cJSON *in = cJSON_Parse("{\"max_batch_size\": \"4\", \"dynamic_batching\": {},"
                            "\"instance_group\": [{\"count\": 2}], \"instance_count\": 5,"
                            "\"precision\": \"fp16\"}");
    char *json = NULL;
    slim_err err = {0};
    ck_assert_int_eq(slim_server_config_from_triton_json(in, "m", &json, &err), SLIM_OK);
    ck_assert_str_eq(json, "{\"max_batch_size\":4,\"dynamic_batching\":{},"
                           "\"instance_count\":5,\"precision\":\"fp16\"}");
    free(json);
    cJSON_Delete(in);
    /* a key that is neither Triton's nor slimserve's is refused by config.c */
    in = cJSON_Parse("{\"max_batchsize\": 4}");
    ck_assert_int_ne(slim_server_config_from_triton_json(in, "m", &json, &err), SLIM_OK);
    ck_assert_ptr_null(json);
    ck_assert_msg(strstr(err.msg, "the \"config\" parameter: unknown key \"max_batchsize\""),
                  "%s", err.msg);
    cJSON_Delete(in);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("pbtxt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, forms);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, mapping);
    tcase_add_test(tc, triton_json);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
