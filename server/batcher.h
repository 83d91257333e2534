/*
 * batcher.h - one scheduler per loaded model: a bounded queue of typed
 * tasks, the model's instance threads, dynamic batching under an
 * out-of-memory ceiling, deadlines and cancellation (batcher.c,
 * batch_run.c, deadlines.c; batcher_impl.h has the insides). HTTP threads
 * submit a task and return; an instance answers it through t->done.
 *
 *     t->model = m; t->rq = &decoded; t->done = resume_connection;
 *     if (!slim_server_batcher_submit(m->batcher, t, timeout_us, &err)) ... 503
 */
#ifndef SLIM_SERVER_BATCHER_H
#define SLIM_SERVER_BATCHER_H

#include "cancel.h"
#include "metrics.h"
#include "slim.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct slim_server_model slim_server_model;
typedef struct slim_server_infer slim_server_infer;

struct slim_server_shape;       /* one input signature's queue state (batcher.c) */

typedef struct slim_server_task {
    slim_server_model *model;       /* a reference held by the request */
    const slim_server_infer *rq;
    /* set by the scheduler */
    struct slim_server_shape *shape;/* NULL when the model does not batch */
    int64_t rows;                   /* the request's batch size (1 when not batching) */
    int64_t deadline;               /* queue timeout (monotonic us); 0: none */
    bool delayed;                   /* timed out under timeout_action DELAY */
    /* set by the submitter: the request's own deadline, queue plus run
     * (monotonic us; 0: none), answered 504 when it passes */
    int64_t run_deadline;
    int64_t run_timeout_us;         /* that timeout, for the message */
    bool timeout_from_request;      /* the "timeout" parameter (else request_timeout_ms) */
    /* Whether the client went away (a peek at its socket); called by the
     * batcher every few tens of ms while the task is queued or running, so
     * it must be cheap and never block. NULL: never asked. */
    bool (*gone)(struct slim_server_task *t);
    /* The process is about to exit with t's run still going (it did not
     * stop when cancelled): tell the client directly, without blocking.
     * NULL: nothing to tell. */
    void (*abandon)(struct slim_server_task *t);
    /* the scheduler's: SLIM_CANCEL_CLIENT once gone() said so */
    atomic_int cancelled;
    /* filled by the instance that ran it */
    slim_status status;
    slim_err err;
    int http_status;                /* for a failure; 0: from status */
    slim_server_failure failure;    /* for a failure: the metrics reason */
    slim_tensor *outputs;           /* may view one buffer shared with its batch */
    int n_outputs;
    int64_t t_queued, t_started, t_done;
    int64_t input_ns, infer_ns, output_ns; /* phases of the run that answered it */
    int64_t run_ns;                 /* that run's start (slim_server_now_ns; the trace extension) */
    /* called by the instance once the task is done; must not block */
    void (*done)(struct slim_server_task *t);
    void *user;
    struct slim_server_task *next;
} slim_server_task;

typedef struct slim_server_batcher slim_server_batcher;

/* Starts m's queue and m->cfg.instance_count instance threads; the model
 * owns the batcher and stops it in model_free. queue_size is the default
 * of max_queue_size. */
slim_status slim_server_batcher_create(slim_server_model *m, int queue_size,
                                       slim_server_batcher **out, slim_err *err);
/* Queues t. timeout_us > 0 overrides the queue policy's timeout (the
 * request's "timeout" parameter). false when the queue is full: err says
 * so and the caller answers 503 with Retry-After. */
bool slim_server_batcher_submit(slim_server_batcher *b, slim_server_task *t,
                                int64_t timeout_us, slim_err *err);
/* Runs what is queued, then joins the threads and frees the batcher. */
void slim_server_batcher_stop(slim_server_batcher *b);
/* Any thread: every request of b's model is cancelled for `why`
 * (SLIM_CANCEL_UNLOAD, SLIM_CANCEL_SHUTDOWN) and answered 503: queued ones
 * at once, running ones when their run stops (at its next check); later
 * submits are refused. For good: an unloaded model never runs again. */
void slim_server_batcher_cancel(slim_server_batcher *b, slim_cancel_reason why);
/* The same for every batcher alive, those of unloaded or replaced models
 * that still hold requests included (shutdown). */
void slim_server_batchers_cancel_all(slim_cancel_reason why);
/* Tasks submitted to any batcher and not yet answered (their connections
 * are suspended until they are). */
int64_t slim_server_batchers_pending(void);
/* Calls t->abandon for every task still running on any batcher (the
 * process exits next, without waiting for them); returns how many. */
int64_t slim_server_batchers_abandon(void);
/* Whether a forming batch can still grow (batcher.c's top): the clients
 * that could send another request. HTTP/1.1 connections are counted by
 * connections.c from their first inference request (one request at a time
 * each: one whose request is queued cannot send another); a gRPC channel
 * can always send another, so a gRPC call, like a connection's first
 * inference, marks the next second as one where batches can grow. */
void slim_server_batchers_connections(int delta);
void slim_server_batchers_multiplexed_call(void);

#endif
