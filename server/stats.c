/*
 * stats.c - Triton's statistics extension:
 *
 *     GET /v2/models/stats                      every ready model version
 *     GET /v2/models/M/stats                    every ready version of M
 *     GET /v2/models/M/versions/V/stats         one version
 *
 *     {"model_stats": [{"name", "version", "last_inference", "inference_count",
 *       "execution_count",
 *       "inference_stats": {"success": {"count", "ns"}, "fail", "queue",
 *                           "compute_input", "compute_infer", "compute_output"},
 *       "batch_stats": [{"batch_size", "compute_input", "compute_infer",
 *                        "compute_output"}, ...]}]}
 *
 * What slimserve counts under Triton's names (per model version, since the
 * server started, across unloads, like the Prometheus counters):
 *
 *   success / fail   requests answered / failed; ns is their time from a
 *                    complete body to the answer
 *   queue            successful requests; ns their wait in the model's queue
 *   compute_input    decoding the request (JSON or binary) into tensors, and
 *                    copying them into the merged batch
 *   compute_infer    the model run of the request's batch
 *   compute_output   cutting the request's rows out of the batch's outputs
 *                    and encoding the answer
 *   batch_stats      per batch size (rows in one model run): how many runs,
 *                    and the merge / run / split time of each
 *
 * Every figure is an atomic counter bumped where the time is measured
 * (batch_run.c, routes.c); reading them takes no lock a request needs. The
 * per-batch-size counters sit in a table of SLIM_SERVER_BATCH_STAT_SLOTS
 * slots, claimed by compare-and-swap the first time a size runs.
 */
#include "codec.h"
#include "http.h"
#include "memory.h" /* the footprint figures */
#include "metrics.h"
#include "repository.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void slim_server_stats_touch(slim_server_stats *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store(&s->last_inference_ms,
                 (uint64_t)ts.tv_sec * 1000 + (uint64_t)(ts.tv_nsec / 1000000));
}

static slim_server_batch_stat *batch_table(slim_server_stats *s)
{
    slim_server_batch_stat *t = atomic_load(&s->batch_stats);
    if (t)
        return t;
    slim_server_batch_stat *fresh = calloc(SLIM_SERVER_BATCH_STAT_SLOTS, sizeof(*fresh));
    if (!fresh)
        return NULL;
    if (!atomic_compare_exchange_strong(&s->batch_stats, &t, fresh)) {
        free(fresh); /* another instance thread got there first; t is its table */
        return t;
    }
    return fresh;
}

/* The slot of batch size `rows`, claimed when new; NULL when the table is
 * full (or could not be allocated). Linear probing from a hash. */
static slim_server_batch_stat *batch_slot(slim_server_stats *s, int64_t rows)
{
    slim_server_batch_stat *t = batch_table(s);
    if (!t || rows <= 0)
        return NULL;
    size_t h = (size_t)((uint64_t)rows * 0x9e3779b97f4a7c15ull >> 56);
    for (size_t i = 0; i < SLIM_SERVER_BATCH_STAT_SLOTS; i++) {
        slim_server_batch_stat *b = &t[(h + i) % SLIM_SERVER_BATCH_STAT_SLOTS];
        int_least64_t size = atomic_load(&b->size);
        if (size == rows)
            return b;
        if (size == 0) {
            int_least64_t empty = 0;
            if (atomic_compare_exchange_strong(&b->size, &empty, rows) || empty == rows)
                return b;
        }
    }
    return NULL;
}

void slim_server_stats_observe_run(slim_server_stats *s, int64_t rows, int64_t input_ns,
                                   int64_t infer_ns, int64_t output_ns)
{
    slim_server_batch_stat *b = batch_slot(s, rows);
    if (!b)
        return;
    atomic_fetch_add(&b->input_ns, (uint64_t)input_ns);
    atomic_fetch_add(&b->infer_ns, (uint64_t)infer_ns);
    atomic_fetch_add(&b->output_ns, (uint64_t)output_ns);
    atomic_fetch_add(&b->count, 1); /* last: a reader never sees a count without its times */
}

/* ---- the JSON ----------------------------------------------------------- */

static void add_duration(cJSON *parent, const char *key, uint64_t count, uint64_t ns)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "count", (double)count);
    cJSON_AddNumberToObject(o, "ns", (double)ns);
}

static int cmp_batch(const void *a, const void *b)
{
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

static void add_batch_stats(cJSON *o, slim_server_stats *s)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "batch_stats");
    slim_server_batch_stat *t = atomic_load(&s->batch_stats);
    if (!arr || !t)
        return;
    /* A snapshot, sorted by batch size: {size, count, input, infer, output}. */
    int64_t rows[SLIM_SERVER_BATCH_STAT_SLOTS][5];
    int n = 0;
    for (int i = 0; i < SLIM_SERVER_BATCH_STAT_SLOTS; i++) {
        uint64_t count = atomic_load(&t[i].count);
        if (!count)
            continue;
        rows[n][0] = atomic_load(&t[i].size);
        rows[n][1] = (int64_t)count;
        rows[n][2] = (int64_t)atomic_load(&t[i].input_ns);
        rows[n][3] = (int64_t)atomic_load(&t[i].infer_ns);
        rows[n][4] = (int64_t)atomic_load(&t[i].output_ns);
        n++;
    }
    qsort(rows, (size_t)n, sizeof(rows[0]), cmp_batch);
    for (int i = 0; i < n; i++) {
        cJSON *b = cJSON_CreateObject();
        if (!b)
            return;
        cJSON_AddNumberToObject(b, "batch_size", (double)rows[i][0]);
        add_duration(b, "compute_input", (uint64_t)rows[i][1], (uint64_t)rows[i][2]);
        add_duration(b, "compute_infer", (uint64_t)rows[i][1], (uint64_t)rows[i][3]);
        add_duration(b, "compute_output", (uint64_t)rows[i][1], (uint64_t)rows[i][4]);
        cJSON_AddItemToArray(arr, b);
    }
}

static cJSON *model_stat(const slim_server_model *m)
{
    slim_server_stats *s = m->stats;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    char v[32];
    snprintf(v, sizeof(v), "%lld", (long long)m->version);
    uint64_t success = atomic_load(&s->success), fail = 0;
    for (int r = 0; r < SLIM_SERVER_FAIL_COUNT; r++)
        fail += atomic_load(&s->failure[r]);
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddStringToObject(o, "version", v);
    cJSON_AddNumberToObject(o, "last_inference", (double)atomic_load(&s->last_inference_ms));
    cJSON_AddNumberToObject(o, "inference_count", (double)atomic_load(&s->inference_count));
    cJSON_AddNumberToObject(o, "execution_count", (double)atomic_load(&s->execution_count));
    cJSON *is = cJSON_AddObjectToObject(o, "inference_stats");
    if (is) {
        add_duration(is, "success", success, 1000 * atomic_load(&s->success_us));
        add_duration(is, "fail", fail, 1000 * atomic_load(&s->fail_us));
        add_duration(is, "queue", success, 1000 * atomic_load(&s->queue_us));
        add_duration(is, "compute_input", success, atomic_load(&s->input_ns));
        add_duration(is, "compute_infer", success, atomic_load(&s->infer_ns));
        add_duration(is, "compute_output", success, atomic_load(&s->output_ns));
    }
    add_batch_stats(o, s);
    slim_server_memory_footprint_json(o, m);
    return o;
}

#define MAX_MODELS 4096

void slim_server_stats_route(slim_server_request *req, const char *name, int64_t version)
{
    slim_server_model *single = NULL, **ms = &single;
    int n = 0;
    if (name && version >= 0) {
        int status = 404;
        char msg[1200];
        single = slim_server_repo_acquire(&req->srv->repo, name, version, &status, msg,
                                          sizeof(msg));
        if (!single) {
            slim_server_reply_error(&req->reply, status, "%s", msg);
            return;
        }
        n = 1;
    } else {
        if (!(ms = calloc(MAX_MODELS, sizeof(*ms)))) {
            slim_server_reply_error(&req->reply, 500, "out of memory");
            return;
        }
        n = slim_server_repo_ready_models(&req->srv->repo, name, ms, MAX_MODELS);
        if (name && n == 0) {
            /* Unknown (404) or known with nothing ready (503), as for infer. */
            int status = 404;
            char msg[1200];
            slim_server_model *m =
                slim_server_repo_acquire(&req->srv->repo, name, -1, &status, msg, sizeof(msg));
            slim_server_model_release(m); /* NULL unless it became ready meanwhile */
            free(ms);
            if (m)
                slim_server_reply_error(&req->reply, 503, "model '%s' changed while its "
                                        "statistics were read; ask again", name);
            else
                slim_server_reply_error(&req->reply, status, "%s", msg);
            return;
        }
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "model_stats") : NULL;
    for (int i = 0; i < n; i++) {
        cJSON *o = arr ? model_stat(ms[i]) : NULL;
        if (o)
            cJSON_AddItemToArray(arr, o);
        slim_server_model_release(ms[i]);
    }
    if (ms != &single)
        free(ms);
    slim_server_reply_json(&req->reply, 200, root);
}
