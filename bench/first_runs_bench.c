/*
 * first_runs_bench.c - each of a model's first runs timed on its own, in
 * order, in a fresh process (bench/bench_first_runs.py runs it and prints
 * the table): whether a model's runs right after the load are as fast as
 * its later ones. `slim bench` sorts its runs for percentiles, so a slow
 * start shows there only as a higher p90.
 *
 *     bench_first_runs MODEL [--batch N] [--runs R]
 *
 * Threads: SLIM_NUM_THREADS (the kernel pool). The inputs are random
 * float32 in [-1, 1) (a dynamic first dimension is the batch, other
 * dynamic ones 1; float32 inputs only). No warm-up run: run 1 is the
 * first after the load. Prints one line, `runs ms:` and R times.
 */
#include "slim.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Random float32 inputs of m's declared shapes; -1 (said why) otherwise. */
static int make_inputs(const slim_model *m, int64_t batch, slim_tensor *in, const char **names)
{
    uint32_t seed = 12345;
    for (int i = 0; i < slim_model_num_inputs(m); i++) {
        const slim_io_info *info = slim_model_input(m, i);
        names[i] = info->name;
        if (info->dtype != SLIM_F32 || info->ndim < 0) {
            fprintf(stderr, "bench_first_runs: input \"%s\" is not float32 of a known rank\n",
                    info->name);
            return -1;
        }
        memset(&in[i], 0, sizeof(in[i]));
        in[i].dtype = SLIM_F32;
        in[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++)
            in[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : d == 0 ? batch : 1;
        slim_err err;
        if (slim_tensor_alloc(&in[i], &err)) {
            fprintf(stderr, "bench_first_runs: %s\n", err.msg);
            return -1;
        }
        float *x = in[i].data;
        for (int64_t e = 0; e < slim_tensor_numel(&in[i]); e++) {
            seed = seed * 1664525u + 1013904223u;
            x[e] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    slim_init();
    const char *path = NULL;
    long batch = 1, runs = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atol(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atol(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            path = NULL, i = argc;
    }
    if (!path || batch < 1 || runs < 1 || runs > 100000) {
        fprintf(stderr, "usage: bench_first_runs MODEL [--batch N >= 1] [--runs R >= 1]\n");
        return 2;
    }
    slim_model *m = NULL;
    slim_err err;
    if (slim_model_load(path, NULL, &m, &err)) {
        fprintf(stderr, "bench_first_runs: %s\n", err.msg);
        return 1;
    }
    int n_in = slim_model_num_inputs(m), rc = 1;
    slim_tensor *in = calloc((size_t)n_in + 1, sizeof(*in));
    const char **names = calloc((size_t)n_in + 1, sizeof(*names));
    double *ms = malloc(sizeof(double) * (size_t)runs);
    if (!in || !names || !ms || make_inputs(m, batch, in, names))
        goto done;
    for (long r = 0; r < runs; r++) {
        slim_tensor *out = NULL;
        int n_out = 0;
        double t0 = now_ms();
        slim_status st = slim_model_run(m, n_in, names, in, &out, &n_out, &err);
        ms[r] = now_ms() - t0;
        if (st) {
            fprintf(stderr, "bench_first_runs: run %ld: %s\n", r + 1, err.msg);
            goto done;
        }
        slim_tensors_free(out, n_out);
    }
    printf("runs ms:");
    for (long r = 0; r < runs; r++)
        printf(" %.3f", ms[r]);
    printf("\n");
    rc = 0;
done:
    for (int i = 0; in && i < n_in; i++)
        slim_tensor_release(&in[i]);
    free(in);
    free(names);
    free(ms);
    slim_model_free(m);
    return rc;
}
