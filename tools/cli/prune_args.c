/* prune_args.c - the --prune options of slim run, bench, convert and
 * inspect, and the per-layer pruning table (see cli.h). */
#include "cli.h"
#include "int8.h"
#include "model.h"
#include "pipeline.h"
#include "prune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int parse_spec(slim_cli_prune *p, const char *v, const char *cmd)
{
    p->o.masks = NULL;
    p->o.amount = 0;
    if (strcmp(v, "2:4") == 0) {
        p->o.method = "2:4";
    } else if (strncmp(v, "magnitude:", 10) == 0) {
        char *end;
        p->o.method = "magnitude";
        p->o.amount = strtod(v + 10, &end);
        if (!v[10] || *end || !(p->o.amount >= 0 && p->o.amount < 1)) {
            fprintf(stderr, "slim %s: --prune magnitude:AMOUNT needs 0 <= AMOUNT < 1, got "
                    "\"%s\"\n", cmd, v + 10);
            return -1;
        }
    } else if (strncmp(v, "mask:", 5) == 0 && v[5]) {
        p->o.method = "mask";
        p->o.masks = v + 5;
    } else {
        fprintf(stderr, "slim %s: --prune takes magnitude:AMOUNT, 2:4 or mask:FILE.npz, not "
                "\"%s\"\n", cmd, v);
        return -1;
    }
    p->given = true;
    return 1;
}

int slim_cli_prune_arg(int argc, char **argv, int *i, slim_cli_prune *p, const char *cmd)
{
    const char *a = argv[*i];
    if (strcmp(a, "--prune") && strcmp(a, "--prune-scope") && strcmp(a, "--prune-ops") &&
        strcmp(a, "--prune-storage") && strcmp(a, "--prune-batch"))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "slim %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (strcmp(a, "--prune") == 0)
        return parse_spec(p, v, cmd);
    if (strcmp(a, "--prune-scope") == 0) {
        if (strcmp(v, "layer") && strcmp(v, "global")) {
            fprintf(stderr, "slim %s: --prune-scope takes layer or global, not \"%s\"\n", cmd, v);
            return -1;
        }
        p->o.global = strcmp(v, "global") == 0;
        return 1;
    }
    if (strcmp(a, "--prune-storage") == 0) {
        if (strcmp(v, "auto") && strcmp(v, "sparse") && strcmp(v, "dense")) {
            fprintf(stderr, "slim %s: --prune-storage takes auto, sparse or dense, not \"%s\"\n",
                    cmd, v);
            return -1;
        }
        p->o.storage = v;
        return 1;
    }
    if (strcmp(a, "--prune-batch") == 0) {
        char *end;
        long long b = strtoll(v, &end, 10);
        if (*end || b < 1 || b > (1LL << 31)) {
            fprintf(stderr, "slim %s: --prune-batch takes a batch size of at least 1, not "
                    "\"%s\"\n", cmd, v);
            return -1;
        }
        p->o.batch = b;
        return 1;
    }
    free(p->ops_buf);
    if (!(p->ops_buf = strdup(v))) {
        fprintf(stderr, "slim %s: out of memory\n", cmd);
        return -1;
    }
    int n = slim_cli_split_list(p->ops_buf, p->ops, 256);
    p->o.ops = p->ops;
    p->o.n_ops = n < 256 ? n : 256;
    return 1;
}

int slim_cli_prune_opts(slim_cli_prune *p, const char *cmd, const slim_prune_opts **out)
{
    *out = NULL;
    if (!p->given) {
        if (p->o.global || p->o.n_ops || p->o.storage || p->o.batch) {
            fprintf(stderr, "slim %s: --prune-scope, --prune-ops, --prune-storage and "
                    "--prune-batch need --prune\n", cmd);
            return -1;
        }
        return 0;
    }
    slim_err err;
    if (slim_prune_check_opts(&p->o, &err)) {
        fprintf(stderr, "slim %s: %s\n", cmd, err.msg);
        return -1;
    }
    *out = &p->o;
    return 0;
}

void slim_cli_prune_free(slim_cli_prune *p)
{
    free(p->ops_buf);
    p->ops_buf = NULL;
}

void slim_cli_print_prune(const struct slim_prune_report *r)
{
    int width = 5;
    for (int i = 0; i < r->n_layers; i++) {
        int len = (int)strlen(r->layers[i].name);
        width = len > width ? len : width;
    }
    int sparse = 0;
    for (int i = 0; i < r->n_layers; i++)
        sparse += strcmp(r->layers[i].storage, "dense") != 0;
    printf("pruned layers (%s; %d of %d stored sparse; bytes as float32, before fp16/bf16 "
           "halves the values):\n", r->method, sparse, r->n_layers);
    printf("  %-*s  %-7s %12s %8s %-6s %12s %12s %7s  %s\n", width, "layer", "op", "shape KxN",
           "sparsity", "store", "bytes_before", "bytes_after", "ratio", "note");
    for (int i = 0; i < r->n_layers; i++) {
        const slim_prune_layer *l = &r->layers[i];
        char shape[40];
        snprintf(shape, sizeof(shape), "%lldx%lld", (long long)l->k, (long long)l->n);
        printf("  %-*s  %-7s %12s %7.2f%% %-6s %12zu %12zu %6.3fx  %s\n", width, l->name,
               l->op_type[0] ? l->op_type : "-", shape, 100 * l->sparsity, l->storage,
               l->bytes_before, l->bytes_after,
               l->bytes_before ? (double)l->bytes_after / (double)l->bytes_before : 1.0, l->why);
    }
    printf("pruned weights: %.2f%% zeros; bytes %zu -> %zu (%.3fx)\n",
           r->elements ? 100.0 * (double)r->zeros / (double)r->elements : 0.0, r->bytes_before,
           r->bytes_after,
           r->bytes_before ? (double)r->bytes_after / (double)r->bytes_before : 1.0);
}

/* ---- the measured output error of a pruned model ------------------------- */

static double load_f(const slim_tensor *t, int64_t i)
{
    return slim_load_f64(t->dtype, t->data, i);
}

/* Seeded samples from the input specs of the model at path, as the int8
 * check draws them, for m's inputs: names and borrowed tensors (freed with
 * the samples); what is the measurement, for the message when there are
 * none (returns false, after printing why). */
static bool sample_inputs(const char *path, const slim_model *m, slim_int8_samples *s,
                          const char ***names, slim_tensor **ins, const char *what)
{
    slim_err err;
    int n_in = slim_model_num_inputs(m);
    *names = calloc((size_t)n_in + 1, sizeof(char *));
    *ins = calloc((size_t)n_in + 1, sizeof(slim_tensor));
    if (!*names || !*ins) {
        printf("%s not measured: out of memory\n", what);
        return false;
    }
    slim_graph *sg = NULL;
    if (slim_pipeline_read(path, &sg, &err) || slim_int8_capture(sg, 0, NULL, NULL, s, &err)) {
        printf("%s not measured: %s\n", what, err.msg);
        return false;
    }
    for (int i = 0; i < n_in; i++) {
        (*names)[i] = slim_model_input(m, i)->name;
        const slim_tensor *t = slim_int8_sample(s, (*names)[i]);
        if (!t) {
            printf("%s not measured: no sample for input \"%s\"\n", what, (*names)[i]);
            return false;
        }
        (*ins)[i] = *t;
        (*ins)[i].buf = NULL; /* borrowed */
    }
    return true;
}

int slim_cli_prune_error(const char *path, slim_model *pruned)
{
    slim_err err;
    slim_int8_samples s = {0};
    slim_model *ref = NULL;
    slim_tensor *ya = NULL, *yb = NULL;
    int na = 0, nb = 0, rc = 0;
    int n_in = slim_model_num_inputs(pruned);
    const char **names = NULL;
    slim_tensor *ins = NULL;
    if (!sample_inputs(path, pruned, &s, &names, &ins, "output error"))
        goto done;
    if (slim_model_load(path, NULL, &ref, &err) ||
        slim_model_run(ref, n_in, names, ins, &ya, &na, &err) ||
        slim_model_run(pruned, n_in, names, ins, &yb, &nb, &err)) {
        fprintf(stderr, "measuring the pruned model's output error: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    double e2 = 0, r2 = 0, dot = 0, b2 = 0;
    for (int o = 0; o < na && o < nb; o++) {
        if (!slim_dtype_is_float(ya[o].dtype) || !slim_dtype_is_float(yb[o].dtype) ||
            slim_tensor_numel(&ya[o]) != slim_tensor_numel(&yb[o]))
            continue;
        for (int64_t i = 0; i < slim_tensor_numel(&ya[o]); i++) {
            double a = load_f(&ya[o], i), b = load_f(&yb[o], i);
            e2 += (b - a) * (b - a);
            r2 += a * a;
            dot += a * b;
            b2 += b * b;
        }
    }
    printf("output error vs the unpruned fp32 model (seeded sample inputs): relative L2 %.4g, "
           "cosine %.6f\n", r2 > 0 ? sqrt(e2 / r2) : 0.0,
           r2 > 0 && b2 > 0 ? dot / sqrt(r2 * b2) : 1.0);
done:
    if (ya)
        slim_tensors_free(ya, na);
    if (yb)
        slim_tensors_free(yb, nb);
    slim_model_free(ref);
    slim_int8_samples_free(&s);
    free(names);
    free(ins);
    return rc;
}

/* ---- the measured time of a pruned model ---------------------------------- */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define TIMED_RUNS 5

int slim_cli_prune_time(const char *src, const char *out, size_t file_weight_bytes)
{
    slim_err err;
    slim_int8_samples s = {0};
    slim_model *m[2] = {NULL, NULL};
    const char **names = NULL;
    slim_tensor *ins = NULL;
    int rc = 0;
    /* Both as `slim run` loads them: the unpruned source with the default
     * passes, the file just written as it will be served (2:4 convs run
     * dense, prune_expand.c). */
    if (slim_model_load(src, NULL, &m[0], &err) || slim_model_load(out, NULL, &m[1], &err)) {
        printf("time not measured: %s\n", err.msg);
        goto done;
    }
    if (!sample_inputs(src, m[1], &s, &names, &ins, "time"))
        goto done;
    int n_in = slim_model_num_inputs(m[1]);
    int64_t batch = n_in && ins[0].ndim ? ins[0].dims[0] : 1;
    /* Runs alternate between the two so that a busy machine slows both
     * alike; one untimed run each first. */
    double t[2][TIMED_RUNS];
    for (int r = -1; r < TIMED_RUNS; r++)
        for (int k = 0; k < 2; k++) {
            slim_tensor *y = NULL;
            int ny = 0;
            double t0 = mono_s();
            if (slim_model_run(m[k], n_in, names, ins, &y, &ny, &err)) {
                fprintf(stderr, "timing the %s model: %s\n", k ? "pruned" : "unpruned", err.msg);
                rc = 1;
                goto done;
            }
            if (r >= 0)
                t[k][r] = mono_s() - t0;
            slim_tensors_free(y, ny);
        }
    qsort(t[0], TIMED_RUNS, sizeof(double), cmp_d);
    qsort(t[1], TIMED_RUNS, sizeof(double), cmp_d);
    double d = t[0][TIMED_RUNS / 2], p = t[1][TIMED_RUNS / 2];
    char a[32], b[32], c[32];
    size_t wd = m[0]->weight_bytes, wr = m[1]->weight_bytes;
    printf("bytes     weights %s unpruned -> %s in the file (%.3fx), %s as served (%.3fx)\n",
           slim_format_bytes(wd, a, sizeof(a)), slim_format_bytes(file_weight_bytes, b, sizeof(b)),
           wd ? (double)file_weight_bytes / (double)wd : 1.0, slim_format_bytes(wr, c, sizeof(c)),
           wd ? (double)wr / (double)wd : 1.0);
    printf("time      batch %lld, median of %d runs each: %.2f ms unpruned -> %.2f ms pruned "
           "(%.2fx)\n", (long long)batch, TIMED_RUNS, 1e3 * d, 1e3 * p, d > 0 ? p / d : 1.0);
done:
    slim_model_free(m[0]);
    slim_model_free(m[1]);
    slim_int8_samples_free(&s);
    free(names);
    free(ins);
    return rc;
}
