/*
 * metrics.h - counters per model version (metrics.c renders them for
 * /metrics in Prometheus text; stats.c answers Triton's statistics
 * extension). The counters are atomics: the batcher and the routes add to
 * them without a lock, and they outlive unload/load cycles.
 *
 *     slim_server_stats *st = slim_server_metrics_get(&srv->metrics, "mlp", 1);
 *     slim_server_stats_observe_batch(st, rows);
 */
#ifndef SLIM_SERVER_METRICS_H
#define SLIM_SERVER_METRICS_H

#include "buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct slim_server_request slim_server_request;

/* ---- metrics (metrics.c) ------------------------------------------------- */

#define SLIM_SERVER_FAILURE_MAP(X) \
    X(BAD_REQUEST)                 \
    X(REJECTED)                    \
    X(MEMORY)                      \
    X(BACKEND)                     \
    X(CANCELED)                    \
    X(OTHER)

typedef enum {
#define SLIM__FAIL_ENUM(name) SLIM_SERVER_FAIL_##name,
    SLIM_SERVER_FAILURE_MAP(SLIM__FAIL_ENUM)
#undef SLIM__FAIL_ENUM
    SLIM_SERVER_FAIL_COUNT
} slim_server_failure;

/* Counters of one model version; they outlive unload/load cycles. */
/* Histogram buckets: batch sizes 1, 2, 4 .. 1024 and +Inf; queue waits
 * from 100 us to 10 s and +Inf (metrics.c has the bounds). */
#define SLIM_SERVER_BATCH_BUCKETS 12
#define SLIM_SERVER_QUEUE_BUCKETS 17

/* Triton's statistics extension (stats.c): counters per batch size, in an
 * open-addressed table of this many sizes, allocated at a model version's
 * first run. Sizes past it (a model batching over 256 distinct sizes)
 * are counted in the totals only. */
#define SLIM_SERVER_BATCH_STAT_SLOTS 256

typedef struct slim_server_batch_stat {
    atomic_int_least64_t size;      /* 0: a free slot */
    atomic_uint_least64_t count, input_ns, infer_ns, output_ns;
} slim_server_batch_stat;

typedef struct slim_server_stats {
    char *model;
    int64_t version;
    atomic_uint_least64_t success, failure[SLIM_SERVER_FAIL_COUNT];
    atomic_uint_least64_t inference_count, execution_count;
    atomic_uint_least64_t request_us, queue_us, compute_us;
    /* the statistics extension: request time split by outcome, compute
     * split into decoding/merging inputs, the model run, and splitting/
     * encoding outputs (of successful requests) */
    atomic_uint_least64_t success_us, fail_us;
    atomic_uint_least64_t input_ns, infer_ns, output_ns;
    atomic_uint_least64_t last_inference_ms; /* wall clock, ms since the epoch */
    _Atomic(slim_server_batch_stat *) batch_stats;
    /* batching: per-bucket (not cumulative) counts, sums */
    atomic_uint_least64_t batch_hist[SLIM_SERVER_BATCH_BUCKETS], batch_rows;
    atomic_uint_least64_t queue_hist[SLIM_SERVER_QUEUE_BUCKETS], queue_wait_us;
    atomic_uint_least64_t halvings, ooms, rejected_queue_full, rejected_timeout;
    atomic_int batch_ceiling;       /* tightest ceiling over the model's input shapes */
    atomic_int live_batchers;       /* the gauge is shown while > 0 */
    struct slim_server_stats *next;
} slim_server_stats;

typedef struct slim_server_metrics {
    pthread_mutex_t mu;
    slim_server_stats *head;
} slim_server_metrics;

void slim_server_metrics_init(slim_server_metrics *mx);
void slim_server_metrics_free(slim_server_metrics *mx);
/* Finds or creates; NULL only when out of memory. */
slim_server_stats *slim_server_metrics_get(slim_server_metrics *mx, const char *model,
                                           int64_t version);
/* Prometheus text exposition format, all sections. */
void slim_server_metrics_render(slim_server_metrics *mx, slim_server_buf *out);
/* One batch run of `rows` rows; one request's wait in the queue. */
void slim_server_stats_observe_batch(slim_server_stats *s, int64_t rows);
void slim_server_stats_observe_queue(slim_server_stats *s, int64_t wait_us);

/* ---- the statistics extension (stats.c) --------------------------------- */

/* One successful model run of `rows` rows and its three phases. */
void slim_server_stats_observe_run(slim_server_stats *s, int64_t rows, int64_t input_ns,
                                   int64_t infer_ns, int64_t output_ns);
/* An inference request of this model version has ended (last_inference). */
void slim_server_stats_touch(slim_server_stats *s);

/* GET /v2/models[/M[/versions/V]]/stats: Triton's statistics extension.
 * name NULL: every model; version < 0: every ready version. */
void slim_server_stats_route(slim_server_request *req, const char *name, int64_t version);

#endif
