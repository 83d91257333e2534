/*
 * cmd_bench.c - `slim bench MODEL`: how fast a model runs, and where the
 * time goes.
 *
 *     slim bench MODEL [--batch N] [--threads T] [--precision P] [--repeat R]
 *                      [--top K] [--compare onnxruntime]
 *
 * Makes random inputs from the model's declared inputs (the first dim, when
 * symbolic, is the batch N; integer inputs that index an embedding table
 * stay below its row count), runs once to warm up, then R timed runs:
 * latency percentiles and throughput. Then R/4 (at least 3) more runs with
 * the per-node profiler on: each node's time per run, its share, and the
 * bytes its outputs take, slowest first. The profiled runs are separate
 * because timing every node costs a little of its own.
 *
 * --compare onnxruntime times an onnxruntime session (same thread count,
 * all graph optimizations, sequential) on the same inputs through the
 * project's Python: $SLIM_PYTHON, else .venv/bin/python two levels above
 * this executable (build/bin/slim), else python3. The ONNX file must be
 * what MODEL names.
 */
#include "cli.h"
#include "model.h"
#include "npy.h"
#include "kernel.h"
#include "profile.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_USAGE "usage: slim bench MODEL [--batch N] [--threads T] [--precision P] " \
                    "[--repeat R] [--top K] [--compare onnxruntime]\n" \
                    "                  [--activations A] [--half-exclude LIST] [--int8-fallback T]\n" \
                    "                  [--prune SPEC [--prune-scope S]]\n"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, long n, double p)
{
    long i = (long)ceil(p / 100.0 * (double)n) - 1;
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Rows of the embedding table an integer input indexes, or 10. */
static int64_t index_bound(const slim_graph *g, int v)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (n->n_in >= 2 && n->in[1] == v && n->in[0] >= 0 &&
            g->values[n->in[0]].kind == SLIM_VALUE_INITIALIZER && g->values[n->in[0]].init.ndim > 0)
            return g->values[n->in[0]].init.dims[0];
    }
    return 10;
}

static int make_inputs(const slim_model *m, int64_t batch, slim_tensor *in, const char **names)
{
    uint32_t seed = 12345;
    for (int i = 0; i < slim_model_num_inputs(m); i++) {
        const slim_io_info *info = slim_model_input(m, i);
        names[i] = info->name;
        memset(&in[i], 0, sizeof(in[i]));
        if (info->ndim < 0) {
            fprintf(stderr, "slim bench: input \"%s\" has no declared rank\n", info->name);
            return -1;
        }
        in[i].dtype = info->dtype;
        in[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++)
            in[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : d == 0 ? batch : 1;
        slim_err err;
        if (slim_tensor_alloc(&in[i], &err)) {
            fprintf(stderr, "slim bench: %s\n", err.msg);
            return -1;
        }
        int64_t n = slim_tensor_numel(&in[i]);
        int64_t bound = index_bound(m->graph, m->graph->inputs[i]);
        for (int64_t e = 0; e < n; e++) {
            seed = seed * 1664525u + 1013904223u;
            double u = (double)(seed >> 8) / (double)(1u << 24);
            if (info->dtype == SLIM_F32)
                ((float *)in[i].data)[e] = (float)(2.0 * u - 1.0);
            else if (info->dtype == SLIM_I64)
                ((int64_t *)in[i].data)[e] = (int64_t)(u * (double)bound);
            else if (info->dtype == SLIM_I32)
                ((int32_t *)in[i].data)[e] = (int32_t)(u * (double)bound);
            else {
                fprintf(stderr, "slim bench: input \"%s\": %s inputs are not generated\n",
                        info->name, slim_dtype_name(info->dtype));
                return -1;
            }
        }
    }
    return 0;
}

static int run_times(const slim_model *m, int n_in, const char **names, const slim_tensor *in,
                     long runs, double *times)
{
    for (long r = 0; r < runs; r++) {
        slim_tensor *out = NULL;
        int n_out = 0;
        slim_err err;
        double t0 = now_ms();
        slim_status st = slim_model_run(m, n_in, names, in, &out, &n_out, &err);
        double t1 = now_ms();
        if (st) {
            fprintf(stderr, "slim bench: %s\n", err.msg);
            return -1;
        }
        slim_tensors_free(out, n_out);
        if (times)
            times[r] = t1 - t0;
    }
    return 0;
}

static const char *python_path(char *buf, size_t cap) /* cap >= PATH_MAX + 32 */
{
    const char *env = getenv("SLIM_PYTHON");
    if (env && env[0])
        return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 3; up++) { /* strip slim, bin, build */
            char *slash = strrchr(exe, '/');
            if (!slash)
                break;
            *slash = 0;
        }
        snprintf(buf, cap, "%s/.venv/bin/python", exe);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return "python3";
}

static const char ORT_SCRIPT[] =
    "import sys, time, statistics, numpy as np, onnxruntime as ort\n"
    "model, threads, repeat, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]\n"
    "names = sys.argv[5:]\n"
    "o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1\n"
    "o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL\n"
    "s = ort.InferenceSession(model, o, providers=['CPUExecutionProvider'])\n"
    "feeds = {n: np.load(f'{d}/in{i}.npy') for i, n in enumerate(names)}\n"
    "s.run(None, feeds); t = []\n"
    "for _ in range(repeat):\n"
    "    t0 = time.perf_counter(); s.run(None, feeds); t.append((time.perf_counter() - t0) * 1e3)\n"
    "t.sort(); print(f'ort_ms {statistics.median(t):.4f} {t[int(0.9 * (len(t) - 1))]:.4f}')\n";

/* onnxruntime's median and p90 on the same inputs, or -1. */
static double compare_ort(const char *model, int threads, long repeat, int n_in,
                          const char **names, const slim_tensor *in, double *p90)
{
    char dir[] = "/tmp/slim-bench-XXXXXX", path[PATH_MAX], py[PATH_MAX + 32];
    if (!mkdtemp(dir))
        return -1;
    double med = -1;
    size_t cap = 4096 + strlen(model);
    for (int i = 0; i < n_in; i++)
        cap += strlen(names[i]) + 4;
    char *cmd = malloc(cap);
    snprintf(path, sizeof(path), "%s/ort.py", dir);
    FILE *f = fopen(path, "w");
    if (!cmd || !f)
        goto done;
    fputs(ORT_SCRIPT, f);
    fclose(f);
    size_t used = (size_t)snprintf(cmd, cap, "'%s' '%s' '%s' %d %ld '%s'",
                                   python_path(py, sizeof(py)), path, model, threads, repeat, dir);
    for (int i = 0; i < n_in; i++) {
        slim_err err;
        snprintf(path, sizeof(path), "%s/in%d.npy", dir, i);
        if (slim_npy_save(path, &in[i], &err))
            goto done;
        used += (size_t)snprintf(cmd + used, cap - used, " '%s'", names[i]);
    }
    FILE *p = popen(cmd, "r");
    if (!p)
        goto done;
    char line[256];
    while (fgets(line, sizeof(line), p))
        if (sscanf(line, "ort_ms %lf %lf", &med, p90) == 2)
            break;
    if (pclose(p) != 0)
        med = -1;
done:
    free(cmd);
    for (int i = 0; i < n_in; i++) {
        snprintf(path, sizeof(path), "%s/in%d.npy", dir, i);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/ort.py", dir);
    unlink(path);
    rmdir(dir);
    return med;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !s[0] || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int slim_cmd_bench(int argc, char **argv)
{
    const char *path = NULL, *precision = NULL, *compare = NULL;
    long batch = 1, threads = 0, repeat = 20, top = 25;
    slim_load_opts opts = {0};
    slim_cli_half half = {0};
    slim_cli_prune prune = {0};
    for (int i = 1; i < argc; i++) {
        int hr = slim_cli_half_arg(&half, "slim bench", argc, argv, &i, &opts);
        if (!hr)
            hr = slim_cli_prune_arg(argc, argv, &i, &prune, "bench");
        if (hr < 0) {
            slim_cli_half_free(&half);
            slim_cli_prune_free(&prune);
            return 2;
        }
        if (hr)
            continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf(BENCH_USAGE);
            return 0;
        } else if (strcmp(a, "--batch") == 0)
            ok = parse_long(v, 1, 1 << 20, &batch), i++;
        else if (strcmp(a, "--threads") == 0)
            ok = parse_long(v, 1, 64, &threads), i++;
        else if (strcmp(a, "--repeat") == 0)
            ok = parse_long(v, 1, 1000000, &repeat), i++;
        else if (strcmp(a, "--top") == 0)
            ok = parse_long(v, 0, 1000000, &top), i++;
        else if (strcmp(a, "--precision") == 0 && v)
            precision = v, i++;
        else if (strcmp(a, "--compare") == 0 && v)
            compare = v, i++;
        else if (a[0] == '-' || path)
            ok = false;
        else
            path = a;
        if (!ok) {
            fprintf(stderr, "slim bench: bad argument \"%s%s%s\"\n" BENCH_USAGE, a, v ? " " : "",
                    v ? v : "");
            slim_cli_half_free(&half);
            slim_cli_prune_free(&prune);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, BENCH_USAGE);
        slim_cli_half_free(&half);
        slim_cli_prune_free(&prune);
        return 2;
    }
    if (compare && strcmp(compare, "onnxruntime") != 0) {
        fprintf(stderr, "slim bench: --compare takes onnxruntime\n");
        slim_cli_half_free(&half);
        slim_cli_prune_free(&prune);
        return 2;
    }
    if (threads) { /* read once, when the kernel threads start (at load) */
        char t[16];
        snprintf(t, sizeof(t), "%ld", threads);
        setenv("SLIM_NUM_THREADS", t, 1);
    }
    opts.compress.precision = precision;
    if (slim_cli_prune_opts(&prune, "bench", &opts.compress.prune) < 0) {
        slim_cli_half_free(&half);
        slim_cli_prune_free(&prune);
        return 2;
    }
    slim_model *m = NULL;
    slim_err err;
    double t0 = now_ms();
    slim_status load_st = slim_model_load(path, &opts, &m, &err);
    slim_cli_prune_free(&prune);
    slim_cli_half_free(&half);
    if (load_st) {
        fprintf(stderr, "slim bench: %s\n", err.msg);
        return 1;
    }
    double load_ms = now_ms() - t0;
    int n_in = slim_model_num_inputs(m), rc = 1;
    slim_tensor *in = calloc((size_t)n_in + 1, sizeof(*in));
    const char **names = calloc((size_t)n_in + 1, sizeof(*names));
    long prof_runs = repeat / 4 > 3 ? repeat / 4 : 3;
    double *times = malloc(sizeof(double) * (size_t)repeat);
    if (!in || !names || !times || make_inputs(m, batch, in, names) ||
        run_times(m, n_in, names, in, 1, NULL) || run_times(m, n_in, names, in, repeat, times))
        goto done;
    qsort(times, (size_t)repeat, sizeof(double), cmp_double);
    double sum = 0;
    for (long r = 0; r < repeat; r++)
        sum += times[r];
    printf("model: %s (load %.0f ms, %d nodes after the passes)\n", path, load_ms,
           m->graph->n_nodes);
    /* Without --precision the file's own: a converted .slim may hold int8
     * or half weights already, so the weights' dtypes say what runs. */
    printf("batch %ld, threads %d, precision %s, %ld runs\n", batch, slim_num_threads(),
           precision ? precision : "as stored", repeat);
    printf("weights:");
    for (int t = 0; t < SLIM_DTYPE_COUNT; t++)
        if (m->weight_bytes_by_dtype[t])
            printf(" %s %.1f KiB", slim_dtype_name((slim_dtype)t),
                   (double)m->weight_bytes_by_dtype[t] / 1024.0);
    printf("\n");
    printf("latency ms: p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  mean %.3f\n",
           pct(times, repeat, 50), pct(times, repeat, 90), pct(times, repeat, 99), times[0],
           sum / (double)repeat);
    printf("throughput: %.1f items/s (batch / mean latency)\n",
           (double)batch * 1e3 * (double)repeat / sum);
    slim_profile_reset();
    slim_profile_per_node(true);
    slim_profile_enable(true);
    if (run_times(m, n_in, names, in, prof_runs, NULL))
        goto done;
    slim_profile_enable(false);
    printf("\nper node, %ld profiled runs:\n", prof_runs);
    slim_profile_print_nodes(stdout, prof_runs, (int)top);
    if (compare) {
        double p90 = 0, ort = compare_ort(path, slim_num_threads(), repeat, n_in, names, in, &p90);
        if (ort < 0) {
            fprintf(stderr, "slim bench: onnxruntime did not run (python with onnxruntime "
                            "needed; set SLIM_PYTHON)\n");
            goto done;
        }
        printf("\nonnxruntime (same inputs, %d threads): p50 %.3f ms  p90 %.3f ms\n",
               slim_num_threads(), ort, p90);
        printf("slim/onnxruntime p50: %.2f\n", pct(times, repeat, 50) / ort);
    }
    rc = 0;
done:
    for (int i = 0; in && i < n_in; i++)
        slim_tensor_release(&in[i]);
    free(in);
    free(names);
    free(times);
    slim_model_free(m);
    return rc;
}
