/*
 * batcher_impl.h - the insides of a model's scheduler, shared by batcher.c
 * (the queue, batching, the instance threads), batch_run.c (one batch's
 * run, the shapes' ceilings, the run gate) and deadlines.c (the watcher
 * thread, cancellation, shutdown). Nothing else includes it.
 */
#ifndef SLIM_SERVER_BATCHER_IMPL_H
#define SLIM_SERVER_BATCHER_IMPL_H

#include "batcher.h"
#include "cancel.h"
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Runs of one model share memory: an instance enters shared before a run;
 * a lone request that ran out of memory while other runs overlapped it is
 * retried exclusive, alone on the model, before it is refused. */
typedef struct slim__run_ticket {
    bool exclusive;
    int running_at_start;
    uint64_t starts_at_start;
    /* The run's cancellation token (enter it on the running thread) and
     * the tasks it answers; the batcher cancels the token once none of
     * them wants the answer any more. */
    slim_cancel token;
    slim_server_task **tasks;
    int n_tasks;
    struct slim__run_ticket *next;
} slim__run_ticket;

/* One input signature, and how large a batch of it has been seen to fit. */
typedef struct slim_server_shape {
    struct slim_server_shape *next;
    int n_inputs;
    slim_tensor *inputs;        /* model input order; dtype, ndim, dims[1..] (no data) */
    int ceiling;                /* rows a batch may have */
    int streak;                 /* full batches in a row without out-of-memory */
    int probe_after;            /* the streak that raises the ceiling */
    bool probing;               /* ceiling just raised, not yet proved */
    bool alone;                 /* outputs could not be split: never merge */
    int users;                  /* tasks queued or running that point here */
    int64_t last_used;
} slim_server_shape;

typedef struct instance {
    slim_server_batcher *b;
    pthread_t thread;
    slim_server_task **batch;   /* room for the largest batch it may take */
} instance;

struct slim_server_batcher {
    slim_server_model *model;   /* the owner */
    const slim_server_batching *cfg;
    int max_batch;              /* rows; 0: the model does not batch */
    bool merge;
    int queue_cap, batch_cap;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;     /* a task was queued, or stopping */
    pthread_cond_t gate_cv;     /* a run ended */
    slim_server_task *head, *tail;
    int queued, with_deadline;
    bool stopping;
    slim_server_shape *shapes;
    int n_shapes;
    /* Instances waiting for work (idle), or for company for the batch the
     * oldest request leads (forming: of that shape, so far forming_n tasks
     * and forming_rows rows, at most forming_limit): submit wakes one only
     * when that can change what it does. */
    int idle, forming;
    const slim_server_shape *forming_shape;
    int64_t forming_rows, forming_limit;
    int64_t forming_wake;       /* when the forming wait ends (monotonic us) */
    int forming_n;
    /* the run gate */
    int running, exclusive_waiting;
    bool exclusive;
    uint64_t starts;
    slim__run_ticket *runs;     /* runs going on now */
    /* cancellation */
    atomic_int cancel_reason;   /* slim_cancel_reason: the model's, for good */
    pthread_cond_t watch_cv;    /* work for the watcher, or stopping */
    bool watch_idle;            /* the watcher waits for watch_cv, untimed */
    int64_t watch_wake;         /* when a waiting watcher looks next (monotonic us) */
    pthread_t watcher;
    bool watcher_started;
    instance *instances;
    int n_instances;
    struct slim_server_batcher *next_alive; /* the process-wide list */
};

/* batcher.c: the queue, under mu. */
void slim__batcher_unlink(slim_server_batcher *b, slim_server_task *t, slim_server_task *prev);
/* Takes the tasks past the queue policy's timeout: REJECT ones returned
 * (answer them with slim__batcher_answer_expired outside mu), DELAY ones
 * sent to the back. *next_deadline: the earliest queue timeout to come. */
slim_server_task *slim__batcher_expire(slim_server_batcher *b, int64_t now,
                                       int64_t *next_deadline);
void slim__batcher_answer_expired(slim_server_batcher *b, slim_server_task *list, int64_t now);
/* Waits on cv (CLOCK_MONOTONIC) until until_us at most. */
void slim__batcher_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us);

/* batch_run.c: runs tasks ts[0..n) (queued in this order, one input
 * shape) as one batch and answers each; on out-of-memory it halves the
 * batch, on any other failure it runs the requests alone. An instance
 * thread calls it once per batch; the tasks may be gone afterwards. */
void slim__batcher_run(slim_server_batcher *b, slim_server_task **ts, int n);

/* deadlines.c */
/* Why t must get no outputs: the client left, its deadline passed (at
 * now_us), or its model was cancelled; SLIM_CANCEL_NONE when it may. */
slim_cancel_reason slim__batcher_task_dead(const slim_server_batcher *b, slim_server_task *t,
                                           int64_t now_us);
/* Answers t (504 for DEADLINE, 503 for UNLOAD and SHUTDOWN, 499 for CLIENT)
 * with a message saying why and how far it got; `ran`: a run of it began. */
void slim__batcher_answer_dead(slim_server_batcher *b, slim_server_task *t,
                               slim_cancel_reason why, bool ran);
/* Calls t->done (t may be gone afterwards) and counts it answered. Every
 * answer goes through here. */
void slim__batcher_finish(slim_server_task *t);

/* Under mu: whether every task of the run no longer wants the answer, and
 * why (the reason of the last); SLIM_CANCEL_NONE otherwise. */
slim_cancel_reason slim__batcher_run_dead(const slim_server_batcher *b, slim__run_ticket *tk,
                                          int64_t now);
/* The watcher thread's body (arg: the batcher). */
void *slim__batcher_watcher_main(void *arg);
/* Joins b to the process-wide list (it starts cancelled after
 * slim_server_batchers_cancel_all), and leaves it. */
void slim__batcher_register(slim_server_batcher *b);
void slim__batcher_unregister(slim_server_batcher *b);
/* A task was queued: counted until slim__batcher_finish. */
void slim__batcher_count_submit(void);

#endif
