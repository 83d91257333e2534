/*
 * cmd_conformance.c - `slim conformance DIR`: runs ONNX backend node tests.
 *
 * Each test folder holds model.onnx and test_data_set_N/{input,output}_K.pb.
 * Every case runs in a forked child so that a crash or a hang in one kernel
 * is reported as that case's failure instead of ending the whole run. With
 * --cases-per-process N (the default on a GPU, whose start costs a second
 * per process) one child runs up to N cases in turn, taking them over a
 * pipe; a child that crashes or hangs fails the case it was running and the
 * next case starts a fresh child.
 * A case is skipped only when the engine reports the model as unsupported
 * (an operator, or a variant of one, that it does not implement), or when
 * it runs a random generator, whose values cannot be compared (its outputs'
 * types and shapes still are); the skipped ones are listed by operator at
 * the end.
 */
#include "cli.h"
#include "container.h"
#include "model.h"

#include <dirent.h>
#include <math.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CASE_TIMEOUT_S 120
#define RTOL 1e-3
#define ATOL 1e-7

/* Cases whose expected outputs carry float32 rounding noise above ATOL
 * near zero: onnx's own reference backend runs them with these atol
 * values (onnx/test/test_backend_reference.py, test_kwargs). */
static const struct {
    const char *name;
    double atol;
} case_atols[] = {
    {"test_dft", 1e-6},         {"test_dft_axis", 1e-6},
    {"test_dft_axis_opset19", 1e-6}, {"test_dft_inverse", 1e-6},
    {"test_dft_inverse_opset19", 1e-6}, {"test_dft_opset19", 1e-6},
};
/* The atol of the case running in this (forked) process. */
static double case_atol = ATOL;

/* Random generators draw values no other runtime's draws can match: a case
 * with one runs, its outputs are checked for type and shape, and it is
 * skipped with this reason (their statistics are tested in
 * tests/unit/test_random.c). The first such node of the case, if any. */
static const char *const random_ops[] = {"Bernoulli", "Multinomial", "RandomNormal",
                                         "RandomNormalLike", "RandomUniform",
                                         "RandomUniformLike"};
static const slim_node *case_random_node;

static const slim_node *find_random(const slim_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (size_t k = 0; k < sizeof(random_ops) / sizeof(random_ops[0]); k++)
            if (strcmp(n->op_type, random_ops[k]) == 0)
                return n;
        for (int a = 0; a < n->n_attrs; a++) {
            const slim_node *r = n->attrs[a].type == SLIM_ATTR_GRAPH && n->attrs[a].g
                                     ? find_random(n->attrs[a].g)
                                     : NULL;
            if (r)
                return r;
        }
    }
    return NULL;
}

enum { CASE_PASS = 0, CASE_FAIL = 1, CASE_SKIP = 2 };
/* A child's exit code is CHILD_EXIT_BASE + result; anything else (a
 * sanitizer's report, abort) is a crash. */
#define CHILD_EXIT_BASE 40

/* snprintf that reports truncation instead of silently cutting a path. */
static bool fmt_ok(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fmt_ok(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted names in dir starting with prefix; caller frees. */
static int list_dir(const char *dir, const char *prefix, char ***out)
{
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d)
        return 0;
    int n = 0, cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, sizeof(char *) * cap);
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(char *), cmp_str);
    *out = names;
    return n;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static bool values_close(slim_dtype dt, const void *got, const void *want, int64_t i)
{
    if (dt == SLIM_STRING) {
        const slim_str *g = (const slim_str *)got + i, *w = (const slim_str *)want + i;
        return g->len == w->len && (!w->len || memcmp(g->ptr, w->ptr, w->len) == 0);
    }
    if (!slim_dtype_is_float(dt))
        return slim_load_i64(dt, got, i) == slim_load_i64(dt, want, i);
    double g = slim_load_f64(dt, got, i), w = slim_load_f64(dt, want, i);
    if (isnan(w))
        return isnan(g);
    if (isinf(w))
        return g == w;
    return fabs(g - w) <= case_atol + RTOL * fabs(w);
}

/* Compares got with want; on mismatch writes why into msg. */
static bool compare(const slim_tensor *got, const slim_tensor *want, int k, char *msg, size_t cap)
{
    char a[160], b[160];
    if (got->kind != want->kind) {
        snprintf(msg, cap, "output %d is a %s, expected a %s", k, slim_kind_name(got->kind),
                 slim_kind_name(want->kind));
        return false;
    }
    if (slim_is_container(want)) {
        /* Same length, then element by element (an optional's one). */
        int n = slim_container_len(want);
        if (slim_container_len(got) != n) {
            snprintf(msg, cap, "output %d holds %d value(s), expected %d", k,
                     slim_container_len(got), n);
            return false;
        }
        for (int i = 0; i < n; i++)
            if (!compare(slim_container_at(got, i), slim_container_at(want, i), k, msg, cap)) {
                size_t used = strlen(msg);
                snprintf(msg + used, cap - used, " (element %d)", i);
                return false;
            }
        return true;
    }
    if (got->dtype != want->dtype) {
        snprintf(msg, cap, "output %d has data type %s, expected %s", k,
                 slim_dtype_name(got->dtype), slim_dtype_name(want->dtype));
        return false;
    }
    if (got->ndim != want->ndim ||
        memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->ndim) != 0) {
        snprintf(msg, cap, "output %d has shape %s, expected %s", k,
                 slim_shape_str(got->ndim, got->dims, a, sizeof(a)),
                 slim_shape_str(want->ndim, want->dims, b, sizeof(b)));
        return false;
    }
    if (case_random_node)
        return true;
    int64_t n = slim_tensor_numel(want);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!values_close(want->dtype, got->data, want->data, i)) {
            if (first < 0)
                first = i;
            bad++;
        }
    if (bad && want->dtype == SLIM_STRING) {
        const slim_str *g = (const slim_str *)got->data + first;
        const slim_str *w = (const slim_str *)want->data + first;
        snprintf(msg, cap, "output %d: %lld of %lld strings differ; first at %lld: got \"%.*s\", "
                 "expected \"%.*s\"", k, (long long)bad, (long long)n, (long long)first,
                 (int)(g->len > 80 ? 80 : g->len), g->ptr ? g->ptr : "",
                 (int)(w->len > 80 ? 80 : w->len), w->ptr ? w->ptr : "");
        return false;
    }
    if (bad) {
        snprintf(msg, cap, "output %d: %lld of %lld values differ; first at %lld: got %.9g, "
                 "expected %.9g", k, (long long)bad, (long long)n, (long long)first,
                 slim_load_f64(want->dtype, got->data, first),
                 slim_load_f64(want->dtype, want->data, first));
        return false;
    }
    return true;
}

static int run_data_set(const slim_model *m, const char *set_dir, char *msg, size_t cap)
{
    char **files;
    int nf = list_dir(set_dir, "", &files);
    int n_in = 0, n_out = 0;
    for (int i = 0; i < nf; i++) {
        if (strncmp(files[i], "input_", 6) == 0)
            n_in++;
        else if (strncmp(files[i], "output_", 7) == 0)
            n_out++;
    }
    free_list(files, nf);
    int result = CASE_FAIL;
    slim_err err = {0};
    slim_tensor *ins = calloc(n_in + 1, sizeof(slim_tensor));
    slim_tensor *want = calloc(n_out + 1, sizeof(slim_tensor));
    const char **names = calloc(n_in + 1, sizeof(char *));
    slim_tensor *got = NULL;
    int n_got = 0, loaded_in = 0, loaded_out = 0;
    char path[4096];
    if (n_in != slim_model_num_inputs(m)) {
        fmt_ok(msg, cap, "%s has %d inputs, the model %d", set_dir, n_in,
               slim_model_num_inputs(m));
        goto done;
    }
    for (int i = 0; i < n_in; i++, loaded_in++) {
        if (!fmt_ok(path, sizeof(path), "%s/input_%d.pb", set_dir, i)) {
            fmt_ok(msg, cap, "path too long");
            goto done;
        }
        if (slim_onnx_load_value_file(path, slim_model_input(m, i)->kind, &ins[i], &err)) {
            snprintf(msg, cap, "%s", err.msg);
            result = err.status == SLIM_EUNSUPPORTED ? CASE_SKIP : CASE_FAIL;
            goto done;
        }
        names[i] = slim_model_input(m, i)->name;
    }
    for (int i = 0; i < n_out; i++, loaded_out++) {
        if (!fmt_ok(path, sizeof(path), "%s/output_%d.pb", set_dir, i)) {
            fmt_ok(msg, cap, "path too long");
            goto done;
        }
        if (slim_onnx_load_value_file(path, i < slim_model_num_outputs(m)
                                                ? slim_model_output(m, i)->kind
                                                : SLIM_KIND_TENSOR, &want[i], &err)) {
            snprintf(msg, cap, "%s", err.msg);
            result = err.status == SLIM_EUNSUPPORTED ? CASE_SKIP : CASE_FAIL;
            goto done;
        }
    }
    if (slim_model_run(m, n_in, names, ins, &got, &n_got, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        result = err.status == SLIM_EUNSUPPORTED ? CASE_SKIP : CASE_FAIL;
        goto done;
    }
    if (n_got < n_out) {
        snprintf(msg, cap, "the model gave %d outputs, expected %d", n_got, n_out);
        goto done;
    }
    result = CASE_PASS;
    for (int k = 0; k < n_out && result == CASE_PASS; k++)
        if (!compare(&got[k], &want[k], k, msg, cap))
            result = CASE_FAIL;
    if (result == CASE_PASS && case_random_node) {
        snprintf(msg, cap, SLIM_NODE_FMT ": random: values not comparable (types and shapes "
                 "match)", SLIM_NODE_ARGS(case_random_node));
        result = CASE_SKIP;
    }
done:
    for (int i = 0; i < loaded_in; i++)
        slim_tensor_release(&ins[i]);
    for (int i = 0; i < loaded_out; i++)
        slim_tensor_release(&want[i]);
    free(ins);
    free(want);
    free(names);
    slim_tensors_free(got, n_got);
    return result;
}

/* --device: where the cases run (each child starts the device afresh; the
 * parent never touches it, so forking stays safe with CUDA). */
static slim_load_opts conf_opts;

/* Runs one case in this (child) process; writes "msg" to fd. */
static int run_case(const char *case_dir, char *msg, size_t cap)
{
    char path[4096];
    const char *base = strrchr(case_dir, '/') ? strrchr(case_dir, '/') + 1 : case_dir;
    case_atol = ATOL; /* a child may run several cases */
    for (size_t i = 0; i < sizeof(case_atols) / sizeof(case_atols[0]); i++)
        if (strcmp(base, case_atols[i].name) == 0)
            case_atol = case_atols[i].atol;
    snprintf(path, sizeof(path), "%s/model.onnx", case_dir);
    slim_model *m;
    slim_err err = {0};
    if (slim_model_load(path, &conf_opts, &m, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return err.status == SLIM_EUNSUPPORTED ? CASE_SKIP : CASE_FAIL;
    }
    case_random_node = find_random(m->graph);
    char **sets;
    int ns = list_dir(case_dir, "test_data_set_", &sets);
    int result = ns ? CASE_PASS : CASE_FAIL;
    if (!ns)
        snprintf(msg, cap, "no test_data_set_* folder");
    for (int s = 0; s < ns && result == CASE_PASS; s++) {
        snprintf(path, sizeof(path), "%s/%s", case_dir, sets[s]);
        result = run_data_set(m, path, msg, cap);
    }
    free_list(sets, ns);
    slim_model_free(m);
    return result;
}

static int run_case_isolated(const char *case_dir, char *msg, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return run_case(case_dir, msg, cap);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(CASE_TIMEOUT_S);
        char buf[2048] = "";
        int r = run_case(case_dir, buf, sizeof(buf));
        ssize_t unused = write(fds[1], buf, strlen(buf));
        (void)unused;
        close(fds[1]);
        _exit(CHILD_EXIT_BASE + r);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t got;
    while (used + 1 < cap && (got = read(fds[0], msg + used, cap - 1 - used)) > 0)
        used += (size_t)got;
    msg[used] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status) - CHILD_EXIT_BASE;
        if (code >= CASE_PASS && code <= CASE_SKIP)
            return code;
        snprintf(msg, cap, "crashed: exited with code %d (a sanitizer report or an abort, "
                 "see stderr)", WEXITSTATUS(status));
        return CASE_FAIL;
    }
    snprintf(msg, cap, "crashed with signal %d (%s)", WTERMSIG(status),
             WTERMSIG(status) == SIGALRM ? "timeout" : strsignal(WTERMSIG(status)));
    return CASE_FAIL;
}

/* ---- a child that runs many cases (--cases-per-process) ---------------- */

typedef struct case_worker {
    pid_t pid;                  /* 0: none running */
    int to, from;               /* pipes: case paths in, results out */
    int served, per_process;
} case_worker;

static bool io_full(int fd, void *buf, size_t n, bool writing)
{
    char *p = buf;
    while (n) {
        ssize_t got = writing ? write(fd, p, n) : read(fd, p, n);
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

/* The child: reads a length and a case folder, runs it under the case
 * timeout, writes the result, a length and the message; ends at EOF. */
static void worker_loop(int in, int out)
{
    char path[4096], buf[2048];
    uint32_t len;
    while (io_full(in, &len, sizeof(len), false) && len < sizeof(path) &&
           io_full(in, path, len, false)) {
        path[len] = '\0';
        buf[0] = '\0';
        alarm(CASE_TIMEOUT_S);
        int32_t r = run_case(path, buf, sizeof(buf));
        alarm(0);
        uint32_t n = (uint32_t)strlen(buf);
        if (!io_full(out, &r, sizeof(r), true) || !io_full(out, &n, sizeof(n), true) ||
            !io_full(out, buf, n, true))
            break;
    }
    _exit(0);
}

/* Reaps the child and says how it ended, as run_case_isolated does. */
static int worker_reap(case_worker *w, char *msg, size_t cap)
{
    close(w->to);
    close(w->from);
    int status = 0;
    waitpid(w->pid, &status, 0);
    w->pid = 0;
    if (WIFEXITED(status))
        snprintf(msg, cap, "crashed: exited with code %d (a sanitizer report or an abort, "
                 "see stderr)", WEXITSTATUS(status));
    else
        snprintf(msg, cap, "crashed with signal %d (%s)", WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? "timeout" : strsignal(WTERMSIG(status)));
    return CASE_FAIL;
}

static bool worker_start(case_worker *w)
{
    int down[2], up[2];
    if (pipe(down) != 0)
        return false;
    if (pipe(up) != 0) {
        close(down[0]);
        close(down[1]);
        return false;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(down[0]);
        close(down[1]);
        close(up[0]);
        close(up[1]);
        return false;
    }
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        worker_loop(down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    *w = (case_worker){.pid = pid, .to = down[1], .from = up[0], .per_process = w->per_process};
    return true;
}

static void worker_stop(case_worker *w)
{
    if (!w->pid)
        return;
    close(w->to); /* EOF: the child leaves its loop */
    close(w->from);
    waitpid(w->pid, NULL, 0);
    w->pid = 0;
}

static int run_case_pooled(case_worker *w, const char *case_dir, char *msg, size_t cap)
{
    if (w->pid && w->served >= w->per_process)
        worker_stop(w);
    if (!w->pid && !worker_start(w))
        return run_case_isolated(case_dir, msg, cap);
    uint32_t len = (uint32_t)strlen(case_dir);
    int32_t r;
    uint32_t n;
    if (!io_full(w->to, &len, sizeof(len), true) || !io_full(w->to, (void *)case_dir, len, true) ||
        !io_full(w->from, &r, sizeof(r), false) || !io_full(w->from, &n, sizeof(n), false))
        return worker_reap(w, msg, cap);
    w->served++;
    size_t keep = n < cap ? n : cap - 1;
    char rest[256];
    if (!io_full(w->from, msg, keep, false))
        return worker_reap(w, msg, cap);
    msg[keep] = '\0';
    for (size_t left = n - keep; left;) { /* a longer message than msg holds */
        size_t step = left < sizeof(rest) ? left : sizeof(rest);
        if (!io_full(w->from, rest, step, false))
            return worker_reap(w, msg, cap);
        left -= step;
    }
    return r >= CASE_PASS && r <= CASE_SKIP ? r : CASE_FAIL;
}

/* Pulls the operator out of `node "x" (Op): ...`, else "?". */
static void op_from_message(const char *msg, char *op, size_t cap)
{
    const char *p = strstr(msg, "\" (");
    snprintf(op, cap, "?");
    if (!p)
        return;
    p += 3;
    size_t n = strcspn(p, ")");
    if (n < cap) {
        memcpy(op, p, n);
        op[n] = '\0';
    }
}

typedef struct skip_entry {
    char op[64];
    int count;
    char example[256];
} skip_entry;

#define CONFORMANCE_USAGE                                                                      \
    "usage: slim conformance DIR [--filter REGEX] [--verbose] [--device DEV] "                 \
    "[--precision fp32|fp32-strict] [--cases-per-process N]\n"                                  \
    "  runs the ONNX node tests under DIR (onnx/backend/test/data/node) and counts\n"         \
    "  how many pass, fail and are skipped (--verbose: each case)\n"

int slim_cmd_conformance(int argc, char **argv)
{
    const char *dir = NULL, *filter = NULL;
    bool verbose = false;
    long per_process = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
            filter = argv[++i];
        else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            verbose = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            conf_opts.place.device = argv[++i];
        /* fp32-strict: a GPU's float32 products without TF32, whose 10-bit
         * operands can miss the cases' rtol of 1e-3. */
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            conf_opts.compress.precision = argv[++i];
        else if (strcmp(argv[i], "--cases-per-process") == 0 && i + 1 < argc) {
            char *end;
            per_process = strtol(argv[++i], &end, 10);
            if (*end || per_process < 1 || per_process > 1000000) {
                fprintf(stderr, "slim conformance: --cases-per-process expects a count from 1 "
                        "to 1000000, not \"%s\"\n", argv[i]);
                return 2;
            }
        }
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf(CONFORMANCE_USAGE);
            return 0;
        }
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr, "slim conformance: unexpected argument \"%s\"\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, CONFORMANCE_USAGE);
        return 2;
    }
    /* A fresh process per case on the host (fork is cheap there); on a
     * device, whose runtime starts in every process, many per child. */
    const char *dev = conf_opts.place.device;
    if (!per_process)
        per_process = dev && strcmp(dev, "cpu") != 0 ? 256 : 1;
    case_worker worker = {.per_process = (int)per_process};
    /* A child that dies leaves its pipe: a write to it must fail, not kill. */
    signal(SIGPIPE, SIG_IGN);
    regex_t re;
    if (filter && regcomp(&re, filter, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "slim conformance: invalid --filter regex \"%s\"\n", filter);
        return 2;
    }
    char **cases;
    int nc = list_dir(dir, "", &cases);
    int passed = 0, failed = 0, skipped = 0;
    skip_entry *skips = calloc(nc + 1, sizeof(skip_entry));
    int n_skips = 0;
    char path[4096], msg[2048];
    struct stat sb;
    for (int i = 0; i < nc; i++) {
        snprintf(path, sizeof(path), "%s/%s/model.onnx", dir, cases[i]);
        if (stat(path, &sb) != 0)
            continue;
        if (filter && regexec(&re, cases[i], 0, NULL, 0) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, cases[i]);
        msg[0] = '\0';
        int r = per_process > 1 ? run_case_pooled(&worker, path, msg, sizeof(msg))
                                : run_case_isolated(path, msg, sizeof(msg));
        if (r == CASE_PASS) {
            passed++;
            if (verbose)
                printf("PASS %s\n", cases[i]);
        } else if (r == CASE_SKIP) {
            skipped++;
            char op[64];
            op_from_message(msg, op, sizeof(op));
            int k = 0;
            while (k < n_skips && strcmp(skips[k].op, op) != 0)
                k++;
            if (k == n_skips) {
                snprintf(skips[k].op, sizeof(skips[k].op), "%s", op);
                snprintf(skips[k].example, sizeof(skips[k].example), "%s: %s", cases[i], msg);
                n_skips++;
            }
            skips[k].count++;
            if (verbose)
                printf("SKIP %s: %s\n", cases[i], msg);
        } else {
            failed++;
            printf("FAIL %s: %s\n", cases[i], msg);
        }
        fflush(stdout);
    }
    if (n_skips) {
        printf("\nskipped, by operator (cases; first reason):\n");
        for (int k = 0; k < n_skips; k++)
            printf("  %-28s %4d  %s\n", skips[k].op, skips[k].count, skips[k].example);
    }
    worker_stop(&worker);
    printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    free(skips);
    free_list(cases, nc);
    if (filter)
        regfree(&re);
    return failed ? 1 : 0;
}
