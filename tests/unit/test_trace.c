/*
 * test_trace.c - server/outfile.c's fence around client-named files, and
 * server/trace.c's settings (scopes, fallback, all or nothing) and
 * sampling (trace_rate, trace_count, log_frequency, the byte cap) without
 * a server.
 */
#include <check.h>

#include "outfile.h"
#include "slim_init.h"
#include "trace.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* Empties and removes the last test's directory. */
static void drop_dir(void)
{
    DIR *d = dir[0] ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[320];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d) {
        closedir(d);
        rmdir(dir);
    }
    dir[0] = '\0';
}

static void make_dir(void)
{
    drop_dir();
    snprintf(dir, sizeof(dir), "/tmp/slim-trace-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static int count_lines(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

START_TEST(outfile_fence)
{
    make_dir();
    char full[256], err[300], abs_ok[128];
    ck_assert(slim_server_outfile_check(dir, "t.jsonl", "trace_file", full, sizeof(full), err,
                                        sizeof(err)));
    ck_assert(strcmp(full + strlen(dir), "/t.jsonl") == 0);
    snprintf(abs_ok, sizeof(abs_ok), "%s/abs.log", dir);
    ck_assert(slim_server_outfile_check(dir, abs_ok, "log_file", full, sizeof(full), err,
                                        sizeof(err)));
    ck_assert_str_eq(full, abs_ok);
    static const char *const bad[] = {"..", ".", "a/b", "../x", "/etc/passwd", "", "x\ny",
                                      "/tmp/slim-trace-other/x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_msg(!slim_server_outfile_check(dir, bad[i], "trace_file", full, sizeof(full),
                                                 err, sizeof(err)), "%s accepted", bad[i]);
        ck_assert_msg(strstr(err, "trace_file"), "%s: %s", bad[i], err);
    }
    ck_assert(!slim_server_outfile_check(NULL, "x", "trace_file", full, sizeof(full), err,
                                         sizeof(err)));
    ck_assert(strstr(err, "--trace-dir"));
    /* a symbolic link inside the directory does not lead out of it */
    char link[128];
    snprintf(link, sizeof(link), "%s/out", dir);
    ck_assert_int_eq(symlink("/tmp", link), 0);
    ck_assert_int_lt(slim_server_outfile_open(dir, "out", "trace_file", full, sizeof(full), err,
                                              sizeof(err)), 0);
    int fd = slim_server_outfile_open(dir, "ok.log", "log_file", full, sizeof(full), err,
                                      sizeof(err));
    ck_assert_int_ge(fd, 0);
    close(fd);
}
END_TEST

static bool set(const char *model, const char *key, const char *val)
{
    const char *vals[1] = {val};
    slim_server_trace_value v = {.key = key, .vals = vals, .n = val ? 1 : 0};
    char err[600];
    return slim_server_trace_update(model, &v, 1, err, sizeof(err));
}

START_TEST(settings_scopes)
{
    make_dir();
    slim_server_trace_init(dir, 0);
    slim_server_trace_view v;
    slim_server_trace_get(NULL, &v);
    ck_assert_str_eq(v.level, "OFF");
    ck_assert_str_eq(v.rate, "1000");
    ck_assert_str_eq(v.count, "-1");
    ck_assert(!slim_server_trace_on());
    /* TIMESTAMPS needs a file; refused whole, nothing changes */
    ck_assert(!set(NULL, "trace_level", "TIMESTAMPS"));
    const char *two[2] = {"OFF", "TIMESTAMPS"};
    slim_server_trace_value vs[2] = {{.key = "trace_rate", .vals = (const char *[]){"7"}, .n = 1},
                                     {.key = "trace_level", .vals = two, .n = 2}};
    char err[600];
    ck_assert(!slim_server_trace_update(NULL, vs, 2, err, sizeof(err)));
    ck_assert(strstr(err, "trace_level"));
    slim_server_trace_get(NULL, &v);
    ck_assert_str_eq(v.rate, "1000");
    ck_assert(!set(NULL, "trace_rate", "0") && !set(NULL, "trace_rate", " 5") &&
              !set(NULL, "trace_count", "-2") && !set(NULL, "trace_rate", "99999999999") &&
              !set(NULL, "nope", "1"));
    /* a model overrides a field, clearing it falls back */
    ck_assert(set(NULL, "trace_rate", "5"));
    ck_assert(set("m", "trace_rate", "2"));
    slim_server_trace_get("m", &v);
    ck_assert_str_eq(v.rate, "2");
    ck_assert(set(NULL, "trace_count", "9"));
    slim_server_trace_get("m", &v);
    ck_assert_str_eq(v.count, "9");
    ck_assert(set("m", "trace_rate", NULL));
    slim_server_trace_get("m", &v);
    ck_assert_str_eq(v.rate, "5");
    /* the model on, the global scope off: tracing is on */
    ck_assert(set(NULL, "trace_file", "g.jsonl"));
    ck_assert(set("m", "trace_level", "TIMESTAMPS"));
    ck_assert(slim_server_trace_on());
    /* clearing the global file would leave m tracing to nowhere: refused */
    ck_assert(!set(NULL, "trace_file", NULL));
    ck_assert(slim_server_trace_update("m", NULL, 0, err, sizeof(err)));
    ck_assert(!slim_server_trace_on());
    ck_assert(set(NULL, "trace_file", NULL) && set(NULL, "trace_rate", NULL) &&
              set(NULL, "trace_count", NULL));
    slim_server_trace_close();
}
END_TEST

START_TEST(sampling)
{
    make_dir();
    slim_server_trace_init(dir, 0);
    slim_server_task t = {.t_queued = 2, .t_started = 3, .run_ns = 3500, .input_ns = 10,
                          .infer_ns = 20, .output_ns = 30};
    ck_assert(set(NULL, "trace_file", "s.jsonl") && set(NULL, "trace_rate", "3") &&
              set(NULL, "trace_count", "2") && set(NULL, "trace_level", "TIMESTAMPS"));
    for (int i = 0; i < 12; i++)
        slim_server_trace_request("m", 1, "r", &t, 1);
    ck_assert_int_eq(count_lines("s.jsonl"), 2); /* requests 3 and 6, then the count is spent */
    slim_server_trace_view v;
    slim_server_trace_get(NULL, &v);
    ck_assert_str_eq(v.count, "0");
    /* log_frequency 2: files .0, .1, ... */
    ck_assert(set(NULL, "trace_count", "-1") && set(NULL, "trace_rate", "1") &&
              set(NULL, "log_frequency", "2") && set(NULL, "trace_file", "f.jsonl"));
    for (int i = 0; i < 5; i++)
        slim_server_trace_request("m", 1, "r", &t, 1);
    ck_assert_int_eq(count_lines("f.jsonl.0"), 2);
    ck_assert_int_eq(count_lines("f.jsonl.1"), 2);
    ck_assert_int_eq(count_lines("f.jsonl.2"), 1);
    ck_assert_int_eq(count_lines("f.jsonl"), -1);
    /* the byte cap stops a file */
    slim_server_trace_init(dir, 1000);
    ck_assert(set(NULL, "log_frequency", "0") && set(NULL, "trace_file", "c.jsonl"));
    for (int i = 0; i < 20; i++)
        slim_server_trace_request("m", 1, "r", &t, 1);
    struct stat st;
    char path[256];
    snprintf(path, sizeof(path), "%s/c.jsonl", dir);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_le(st.st_size, 1000);
    ck_assert_int_gt(count_lines("c.jsonl"), 0);
    ck_assert(set(NULL, "trace_level", "OFF"));
    ck_assert(!slim_server_trace_on());
    slim_server_trace_close();
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, outfile_fence);
    tcase_add_test(tc, settings_scopes);
    tcase_add_test(tc, sampling);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* the tests share trace.c's state in order */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    drop_dir();
    return failed ? 1 : 0;
}
