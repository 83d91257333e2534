/*
 * server.h - slimserve's HTTP server (internal): the KServe v2 / Open
 * Inference Protocol as Triton speaks it over HTTP. This header holds the
 * top-level server only (its options, its state, start and stop); each
 * component has its own header (docs/architecture.md lists them).
 *
 * How a request travels:
 *
 *     MHD thread (http.c)            gathers the body, calls the router
 *       -> routes.c                  health, metadata, repository, metrics
 *       -> infer_codec.c             JSON (+ binary) -> typed tensors
 *       -> batcher.c queue           typed task, in its model's queue; the
 *                                    connection is suspended
 *     the model's instance thread    batcher.c merges queued requests of one
 *                                    input shape; batch_run.c runs the batch
 *                                    (halving it on out-of-memory), splits
 *                                    the outputs and resumes each connection
 *     MHD thread                     infer_codec.c encodes the outputs, answers
 *
 * A request may be stopped before its answer is ready: its deadline passes
 * (config.json "request_timeout_ms", the request's "timeout" parameter),
 * its client disconnects, its model is unloaded, or the server stops. The
 * batcher answers a queued request at once; a running one is answered when
 * its run returns, which a cancelled run does at its next check (runtime/
 * cancel.h). batcher.c has the rules for a batch whose requests disagree.
 *
 * JSON never reaches the runtime, and no HTTP thread ever waits for a model,
 * so health checks and /metrics answer while every worker is busy.
 *
 * Loaded models are refcounted (slim_server_model): a request holds a
 * reference from routing to its answer, so an unload while it runs only
 * takes the model out of the table; the last holder frees it.
 */
#ifndef SLIM_SERVER_SERVER_H
#define SLIM_SERVER_SERVER_H

#include "metrics.h"
#include "repository.h"
#include "slim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Daemon;

/* ---- the server (http.c starts and stops it; routes.c drains it) -------- */

typedef struct slim_server_opts {
    const char *repository;
    const char *host;
    int port;
    size_t max_request_bytes;
    /* Largest reply body (infer_codec.c): an answer that would be larger is
     * refused 507 before it is built, its size named. 0: no limit. */
    size_t max_response_bytes;
    int workers;                    /* instance_count unless config.json sets it */
    int queue_capacity;             /* max_queue_size unless config.json sets it */
    int http_threads;
    size_t memory_limit;            /* the CPU allocator's limit; 0: none */
    const char *device;             /* default device of models; NULL: cpu */
    const char *precision;          /* default precision of models; NULL: fp32 */
    const char *convert_cache;      /* --convert-cache DIR */
    /* Slow or silent clients (http.c): a request whose body has not fully
     * arrived body_timeout_s after its headers is answered 408; a
     * connection with no request in progress is closed after
     * idle_timeout_s. At most max_connections connections, of which one
     * client address may hold max_connections_per_client (0: no limit). */
    int body_timeout_s;
    int idle_timeout_s;
    int max_connections;
    int max_connections_per_client;
    /* SIGTERM: how long running requests may go on before they are
     * cancelled (routes.c, slim_server_drain). */
    int shutdown_grace_s;
    /* A model load (start or the repository API) that takes longer fails
     * with a message naming the flag (repository.c); 0: no bound. */
    int load_timeout_s;
    /* When set, every endpoint but the health checks (and /metrics, unless
     * api_key_metrics) needs "Authorization: Bearer KEY" or "X-API-Key:
     * KEY"; others are answered 401 (auth.c). */
    const char *api_key;
    bool api_key_metrics;
    /* --model-control-mode and --load-model (residency.c). */
    slim_server_control control;
} slim_server_opts;

struct slim_server_conn;            /* one connection's deadlines (http.c) */

typedef struct slim_server_admission slim_server_admission;

typedef struct slim_server {
    slim_server_opts opts;
    slim_server_admission *admission; /* requests waiting for input memory */
    slim_server_metrics metrics;
    slim_server_repo repo;
    struct MHD_Daemon *daemon;
    atomic_int in_flight;           /* requests begun and not yet completed */
    atomic_bool stopping;           /* shutdown has begun: new requests get 503 */
    /* Every port is accepting (main.c sets it after gRPC's and the metrics
     * port's start): until then /v2/health/ready answers 503, so a probe
     * that sees ready never meets a gRPC port not yet listening. */
    atomic_bool serving;
    int port;                       /* the port actually bound */
    /* Open connections and the thread that enforces their deadlines
     * (http.c); conns_mu guards the list and every conn's phase. */
    pthread_mutex_t conns_mu;
    pthread_cond_t conns_cv;        /* wakes the watchdog to stop */
    pthread_t watchdog;
    bool watchdog_stop;
    struct slim_server_conn *conns;
    int64_t n_conns;
    int64_t n_open;                 /* of them, not being closed: held to --max-connections */
    int64_t n_lane;                 /* and past it, for health checks only (connections.c) */
    atomic_uint_least64_t body_timeouts, idle_closes;
    atomic_uint_least64_t evicted, refused, laned; /* at --max-connections (connections.c) */
    atomic_uint_least64_t unauthorized;  /* 401s (auth.c) */
    /* Repository loads and unloads run on threads of their own, their
     * connections suspended (routes.c), so that a long load holds no HTTP
     * thread and the connections it serves; shutdown cancels and waits. */
    atomic_int repo_ops;
} slim_server;

slim_status slim_server_start(slim_server *srv, const slim_server_opts *opts, slim_err *err);
/* Stops accepting, lets in-flight requests finish (slim_server_drain),
 * frees everything. false: runs still going after being cancelled (a
 * kernel that does not check): nothing was freed, and the caller should
 * exit without waiting for them. */
bool slim_server_stop(slim_server *srv);
/* Shutdown, once new requests are refused: waits up to opts.shutdown_grace_s
 * for in-flight requests, then cancels the runs still going (each answered
 * 503) and waits a moment for them to stop and their answers to go out.
 * Returns whether no request is left suspended, which MHD_stop_daemon
 * needs. */
bool slim_server_drain(slim_server *srv);

#endif
