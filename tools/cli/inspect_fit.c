/*
 * inspect_fit.c - `slim inspect MODEL --fit [--memory-limit SIZE] [--batch N]`:
 * the model's predicted footprint (pipeline/footprint.h), before loading,
 * and whether it fits a memory limit: fits, fits up to batch N, or does not
 * fit and why. With --actual the model is then loaded and its measured
 * footprint printed beside the prediction.
 *
 * Figures are printed as "key: bytes (human)" lines for scripts.
 */
#include "cli.h"
#include "alloc.h" /* slim_format_bytes */
#include "footprint.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void line(const char *key, size_t bytes)
{
    char h[32];
    printf("%s: %zu (%s)\n", key, bytes, slim_format_bytes(bytes, h, sizeof(h)));
}

static void print_footprint(const char *prefix, const slim_footprint *fp)
{
    char key[64];
    const char *names[] = {"weight_bytes", "arena_bytes_1", "arena_bytes_max",
                           "workspace_bytes", "total_bytes"};
    size_t vals[] = {fp->weight_bytes, fp->arena_bytes_1, fp->arena_bytes_max,
                     fp->workspace_bytes, fp->total_bytes};
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "%s%s", prefix, names[i]);
        line(key, vals[i]);
    }
    if (fp->mapped_bytes) {
        snprintf(key, sizeof(key), "%smapped_bytes", prefix);
        line(key, fp->mapped_bytes);
    }
}

/* The run bytes at batch b, between the two planned points: the arena
 * grows with the batch nearly in a straight line (activations are batch x
 * per-sample), so this interpolates, and says it does. */
static size_t arena_at(const slim_footprint *fp, int64_t b)
{
    if (fp->max_batch <= 1 || b <= 1)
        return fp->arena_bytes_1;
    double per = ((double)fp->arena_bytes_max - (double)fp->arena_bytes_1) /
                 (double)(fp->max_batch - 1);
    return fp->arena_bytes_1 + (size_t)(per * (double)(b - 1));
}

/* The machine's memory, the limit when none is given. */
static size_t machine_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static void print_verdict(const slim_footprint *fp, size_t limit, bool given)
{
    char a[32], b[32], c[32], d[32];
    line(given ? "memory_limit" : "memory_limit (this machine's memory)", limit);
    if (fp->unplanned)
        printf("note: the activations could not be planned (shapes known only at run time); "
               "arena figures are 0\n");
    if (fp->total_bytes <= limit) {
        printf("verdict: fits at batch %lld (%s of %s)\n", (long long)fp->max_batch,
               slim_format_bytes(fp->total_bytes, a, sizeof(a)),
               slim_format_bytes(limit, b, sizeof(b)));
        return;
    }
    size_t fixed = fp->weight_bytes + fp->workspace_bytes;
    if (fixed + fp->arena_bytes_1 > limit) {
        printf("verdict: does not fit: weights %s + workspace %s + activations at batch 1 %s "
               "are over the limit %s\n", slim_format_bytes(fp->weight_bytes, a, sizeof(a)),
               slim_format_bytes(fp->workspace_bytes, b, sizeof(b)),
               slim_format_bytes(fp->arena_bytes_1, c, sizeof(c)),
               slim_format_bytes(limit, d, sizeof(d)));
        return;
    }
    int64_t lo = 1, hi = fp->max_batch; /* lo fits, hi does not */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fixed + arena_at(fp, mid) <= limit)
            lo = mid;
        else
            hi = mid;
    }
    printf("verdict: fits up to batch %lld (estimated between the planned batches 1 and %lld; "
           "batch %lld needs %s of %s)\n", (long long)lo, (long long)fp->max_batch,
           (long long)fp->max_batch, slim_format_bytes(fp->total_bytes, a, sizeof(a)),
           slim_format_bytes(limit, b, sizeof(b)));
}

int slim_cli_inspect_fit(const char *path, const slim_load_opts *opts, int64_t batch,
                         size_t limit, bool actual)
{
    slim_footprint fp;
    slim_err err;
    if (slim_model_predict(path, opts, batch, &fp, &err)) {
        fprintf(stderr, "slim inspect: predicting %s: %s\n", path, err.msg);
        return 1;
    }
    printf("model: %s\n", path);
    printf("precision: %s\n", opts->compress.precision ? opts->compress.precision : "fp32");
    printf("max_batch: %lld\n", (long long)fp.max_batch);
    print_footprint("predicted_", &fp);
    print_verdict(&fp, limit ? limit : machine_bytes(), limit != 0);
    if (!actual)
        return 0;
    slim_model *m = NULL;
    if (slim_model_load(path, opts, &m, &err)) {
        fprintf(stderr, "slim inspect: loading %s: %s\n", path, err.msg);
        return 1;
    }
    slim_footprint got;
    slim_model_footprint(m, batch, &got);
    slim_model_measure_workspace(m, &got);
    print_footprint("actual_", &got);
    double diff = got.total_bytes ? ((double)fp.total_bytes - (double)got.total_bytes) /
                                        (double)got.total_bytes * 100.0 : 0.0;
    printf("prediction_error_percent: %.2f\n", diff);
    slim_model_free(m);
    return 0;
}
