/*
 * batcher.c - one scheduler per model: a bounded queue, the model's
 * instance threads, and dynamic batching under an out-of-memory ceiling.
 *
 *     submit (HTTP thread)      queue full: false, and the caller answers
 *                               503 with Retry-After; else the task joins
 *                               the FIFO and an idle instance is woken
 *     instance thread           takes the batch the oldest request leads,
 *                               batch_run.c runs it and answers each request
 *
 * Merging (config.json "dynamic_batching"). Requests whose inputs agree in
 * everything but the first dimension share a *shape* (an input signature);
 * a batch is the oldest request plus the later ones of its shape, in queue
 * order, while their rows fit under the shape's ceiling. A batch that is
 * not full waits for company until the oldest request has been queued
 * max_queue_delay_microseconds, unless its rows already reach one of the
 * preferred_batch_size values (then it goes at once, cut there). Without
 * "dynamic_batching" every request runs alone.
 *
 * Waiting only when the batch can grow. Waiting for company that cannot
 * come is pure latency: a lone client waiting max_queue_delay_microseconds
 * on every request. A request can come only from a client that is not
 * itself waiting for an answer: an HTTP/1.1 connection carries one request
 * at a time, so while every open connection's request is queued or running
 * (sending connections <= tasks pending on the batchers) nothing can join
 * and the batch goes at once. A connection counts from its first inference
 * request until it closes (connections.c): one that only asked for health,
 * metadata or statistics (a readiness probe, a scraper on keep-alive) is
 * not a sender, and counting it made every lone request wait the whole
 * delay while it was open. Clients that have not sent yet cannot be
 * counted, and a gRPC channel can always send another call, so within a
 * second of a connection's first inference or of a gRPC call batches wait
 * as configured (clients that connect per request, a burst of new ones,
 * gRPC ones keep their batching). A sender that has gone idle on
 * keep-alive still counts: the error is toward waiting, which is what
 * every batch did before.
 *
 * Wakeups. An instance waiting for company is woken by a submit only when
 * the new request makes its batch full, reach a preferred size, or unable
 * to grow; an idle instance by any submit. So a batch of n costs one
 * wakeup, not n. An instance that takes a batch wakes the kernel threads
 * (slim_parallel_prewake) before it gets the run ready, so a lone request
 * after an idle gap does not start its first kernel loop single-handed.
 *
 * The ceiling. Every shape starts at max_batch_size. A run that fails with
 * SLIM_EOOM lowers its shape's ceiling to half the batch (batch_run.c
 * keeps the ceiling, and retries the two halves), so the ceiling ends at the largest size that
 * fit, and other instances stop forming batches that are known not to
 * fit. Memory pressure passes, so after oom_probe_after full batches in a
 * row the ceiling doubles again (a probe); a probe that runs out of memory
 * doubles the run of successes the next probe waits for, up to 64 times
 * oom_probe_after, so a model pinned at its limit does not pay for a
 * failed run every few batches. Only full batches count: a batch below the
 * ceiling says nothing about whether the ceiling fits.
 *
 * The run gate. Runs of one model share its memory limit, so a request
 * that runs out of memory alone may only have lacked the memory other runs
 * held at the time. Such a request is retried once exclusive (alone on the
 * model) before it is refused with 507; the gate in batch_run.c keeps the
 * count of runs that tells.
 *
 * Queue policy: at most max_queue_size requests wait (the server's
 * --queue-size by default); a request past its timeout is answered 503
 * (timeout_action REJECT) or sent to the back of the queue once (DELAY).
 * Timeouts are checked whenever an instance looks at the queue, idle
 * instances wake for the earliest one, and the watcher (deadlines.c)
 * answers them on time while every instance is busy.
 *
 * Deadlines and cancellation (the watcher thread, unload, shutdown) are in
 * deadlines.c; the run gate (batch_run.c) gives each run its cancellation
 * token.
 *
 * Lifetime: the model owns its batcher. Every queued task holds a model
 * reference, so by the time model_free stops the batcher the queue is
 * empty; stop still drains whatever is there before joining the threads.
 */
#include "batcher_impl.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "metrics.h"
#include "parallel.h"
#include "repository.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SHAPES 64               /* input signatures remembered per model */
#define NEWCOMER_WINDOW_US 1000000 /* after a new connection or a gRPC call */

/* ---- whether a batch can grow -------------------------------------------- */

static atomic_llong open_connections;   /* those that have sent an inference */
static atomic_llong last_newcomer_us;   /* a connection's first inference, a gRPC call */

static void newcomer(void)
{
    int64_t now = slim_server_now_us();
    /* A store per call would bounce the line between the threads. */
    if (now - atomic_load_explicit(&last_newcomer_us, memory_order_relaxed) > 1000)
        atomic_store_explicit(&last_newcomer_us, now, memory_order_relaxed);
}

void slim_server_batchers_connections(int delta)
{
    atomic_fetch_add(&open_connections, delta);
    if (delta > 0)
        newcomer();
}

void slim_server_batchers_multiplexed_call(void)
{
    newcomer();
}

/* Whether any client could still send a request that joins a batch. */
static bool batch_may_grow(int64_t now)
{
    int64_t seen = atomic_load_explicit(&last_newcomer_us, memory_order_relaxed);
    if (seen && now - seen < NEWCOMER_WINDOW_US)
        return true;
    return atomic_load(&open_connections) > slim_server_batchers_pending();
}

/* ---- shapes -------------------------------------------------------------- */

static const slim_tensor *task_input(const slim_server_task *t, const char *name)
{
    for (int j = 0; j < t->rq->n_inputs; j++)
        if (t->rq->names[j] == name || strcmp(t->rq->names[j], name) == 0)
            return &t->rq->inputs[j];
    return NULL;
}

static bool shape_matches(const slim_server_batcher *b, const slim_server_shape *sh,
                          const slim_server_task *t)
{
    const slim_server_config *cfg = &b->model->cfg;
    for (int i = 0; i < sh->n_inputs; i++) {
        const slim_tensor *x = task_input(t, cfg->inputs[i].name), *want = &sh->inputs[i];
        if (!x || x->dtype != want->dtype || x->ndim != want->ndim)
            return false;
        for (int d = 1; d < x->ndim; d++)
            if (x->dims[d] != want->dims[d])
                return false;
    }
    return true;
}

static void shape_free(slim_server_shape *sh)
{
    if (sh) {
        free(sh->inputs);
        free(sh);
    }
}

/* BYTES requests run alone: merging would copy every row's strings into
 * the batch and out of it again (their bytes are not rows of one buffer
 * to take views of), and the models that take strings (tokenizers, label
 * encoders) are cheap per row, so a batch saves little; alone, a
 * request's answer is trivially the same as in any batch. */
static bool has_strings(const slim_server_config *cfg)
{
    for (int i = 0; i < cfg->n_inputs; i++)
        if (cfg->inputs[i].dtype == SLIM_STRING)
            return true;
    for (int i = 0; i < cfg->n_outputs; i++)
        if (cfg->outputs[i].dtype == SLIM_STRING)
            return true;
    return false;
}

/* Finds or makes t's shape, under mu. NULL when out of memory: the task
 * then runs alone. Past MAX_SHAPES the least recently used idle shape is
 * forgotten (and its ceiling with it). */
static slim_server_shape *shape_of(slim_server_batcher *b, const slim_server_task *t,
                                   int64_t now)
{
    slim_server_shape **victim = NULL;
    for (slim_server_shape **p = &b->shapes; *p; p = &(*p)->next) {
        if (shape_matches(b, *p, t)) {
            (*p)->last_used = now;
            return *p;
        }
        if (!(*p)->users && (!victim || (*p)->last_used < (*victim)->last_used))
            victim = p;
    }
    if (b->n_shapes >= MAX_SHAPES && victim) {
        slim_server_shape *old = *victim;
        *victim = old->next;
        shape_free(old);
        b->n_shapes--;
    }
    const slim_server_config *cfg = &b->model->cfg;
    slim_server_shape *sh = calloc(1, sizeof(*sh));
    if (!sh || !(sh->inputs = calloc((size_t)(cfg->n_inputs ? cfg->n_inputs : 1),
                                     sizeof(slim_tensor)))) {
        free(sh);
        return NULL;
    }
    sh->n_inputs = cfg->n_inputs;
    for (int i = 0; i < cfg->n_inputs; i++) {
        const slim_tensor *x = task_input(t, cfg->inputs[i].name);
        if (!x) { /* decode guarantees every input; be safe anyway */
            shape_free(sh);
            return NULL;
        }
        sh->inputs[i] = (slim_tensor){.dtype = x->dtype, .ndim = x->ndim};
        memcpy(sh->inputs[i].dims, x->dims, sizeof(x->dims));
    }
    sh->ceiling = b->max_batch;
    sh->probe_after = b->cfg->oom_probe_after;
    sh->last_used = now;
    sh->next = b->shapes;
    b->shapes = sh;
    b->n_shapes++;
    return sh;
}

/* ---- the queue ------------------------------------------------------------- */

void slim__batcher_unlink(slim_server_batcher *b, slim_server_task *t, slim_server_task *prev)
{
    if (prev)
        prev->next = t->next;
    else
        b->head = t->next;
    if (b->tail == t)
        b->tail = prev;
    t->next = NULL;
    b->queued--;
    if (t->deadline)
        b->with_deadline--;
}

static void append_task(slim_server_batcher *b, slim_server_task *t)
{
    t->next = NULL;
    if (b->tail)
        b->tail->next = t;
    else
        b->head = t;
    b->tail = t;
    b->queued++;
    if (t->deadline)
        b->with_deadline++;
}

/* Under mu: takes the tasks whose timeout has passed. REJECT: they are
 * returned, to be answered outside the lock; DELAY: they go to the back of
 * the queue, once. *next_deadline: the earliest deadline still pending. */
slim_server_task *slim__batcher_expire(slim_server_batcher *b, int64_t now,
                                       int64_t *next_deadline)
{
    slim_server_task *expired = NULL, *delayed = NULL, **delayed_tail = &delayed;
    slim_server_task *prev = NULL, *t = b->head;
    *next_deadline = 0;
    while (t && b->with_deadline) {
        slim_server_task *next = t->next;
        if (t->deadline && t->deadline <= now) {
            slim__batcher_unlink(b, t, prev);
            if (b->cfg->timeout_action == SLIM_SERVER_TIMEOUT_DELAY) {
                t->deadline = 0;
                t->delayed = true;
                *delayed_tail = t;
                delayed_tail = &t->next;
            } else {
                t->next = expired;
                expired = t;
            }
        } else {
            if (t->deadline && (!*next_deadline || t->deadline < *next_deadline))
                *next_deadline = t->deadline;
            prev = t;
        }
        t = next;
    }
    while (delayed) {
        slim_server_task *next = delayed->next;
        append_task(b, delayed);
        delayed = next;
    }
    return expired;
}

static void answer_expired(slim_server_batcher *b, slim_server_task *t, int64_t now)
{
    t->t_started = t->t_done = now;
    t->status = SLIM_EINVAL;
    t->http_status = 503;
    t->failure = SLIM_SERVER_FAIL_REJECTED;
    slim_errf(&t->err, SLIM_EINVAL,
              "Request timeout expired: the request waited %lld us in model '%s''s queue "
              "(timeout %lld us)", (long long)(now - t->t_queued), b->model->name,
              (long long)(t->deadline - t->t_queued));
    atomic_fetch_add(&b->model->stats->rejected_timeout, 1);
    slim__batcher_finish(t);
}

void slim__batcher_answer_expired(slim_server_batcher *b, slim_server_task *expired, int64_t now)
{
    while (expired) {
        slim_server_task *next = expired->next;
        slim_server_shape *sh = expired->shape;
        answer_expired(b, expired, now); /* may be freed from here on */
        if (sh) {
            pthread_mutex_lock(&b->mu);
            sh->users--;
            pthread_mutex_unlock(&b->mu);
        }
        expired = next;
    }
}

static bool is_preferred(const slim_server_batching *cfg, int64_t rows)
{
    for (int i = 0; i < cfg->n_preferred; i++)
        if (cfg->preferred[i] == rows)
            return true;
    return false;
}

/* Under mu, with a non-empty queue: unlinks the batch the oldest request
 * leads into out and returns its size, or returns 0, sets *wake to when
 * the batch should be looked at again (it is waiting for company) and
 * records it as forming. */
static int take_batch(slim_server_batcher *b, slim_server_task **out, int64_t now, int64_t *wake)
{
    slim_server_task *h = b->head;
    if (!b->merge || !h->shape || h->shape->alone) {
        slim__batcher_unlink(b, h, NULL);
        out[0] = h;
        return 1;
    }
    slim_server_shape *sh = h->shape;
    int64_t limit = sh->ceiling < h->rows ? h->rows : sh->ceiling; /* the oldest always goes */
    int64_t rows = 0;
    int n = 0, preferred_n = 0;
    bool full = false;
    for (slim_server_task *t = h; t && n < b->batch_cap; t = t->next) {
        if (t->shape != sh)
            continue;
        if (rows + t->rows > limit) {
            full = true;
            break;
        }
        out[n++] = t;
        rows += t->rows;
        if (is_preferred(b->cfg, rows))
            preferred_n = n;
        if (rows == limit || n == b->batch_cap) { /* batch_cap: the whole queue is in */
            full = true;
            break;
        }
    }
    int64_t due = h->t_queued + b->cfg->max_queue_delay_us;
    if (!full && !b->stopping && now < due && batch_may_grow(now)) {
        if (!preferred_n) {
            *wake = due;
            b->forming_shape = sh;
            b->forming_rows = rows;
            b->forming_n = n;
            b->forming_limit = limit;
            return 0;
        }
        n = preferred_n;
    }
    /* Unlink the chosen ones; they are in queue order. */
    slim_server_task *prev = NULL, *t = b->head;
    for (int k = 0; k < n && t;) {
        slim_server_task *next = t->next;
        if (t == out[k]) {
            slim__batcher_unlink(b, t, prev);
            k++;
        } else {
            prev = t;
        }
        t = next;
    }
    return n;
}

void slim__batcher_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    /* work_cv runs on CLOCK_MONOTONIC, the clock of slim_server_now_us. */
    struct timespec ts = {.tv_sec = until_us / 1000000, .tv_nsec = (until_us % 1000000) * 1000};
    pthread_cond_timedwait(cv, mu, &ts);
}

static void *instance_main(void *arg)
{
    instance *in = arg;
    slim_server_batcher *b = in->b;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        int64_t now = slim_server_now_us(), next_deadline = 0, wake = 0;
        if (b->with_deadline) {
            slim_server_task *expired = slim__batcher_expire(b, now, &next_deadline);
            if (expired) {
                pthread_mutex_unlock(&b->mu);
                slim__batcher_answer_expired(b, expired, now);
                pthread_mutex_lock(&b->mu);
                continue;
            }
        }
        if (!b->head) {
            if (b->stopping)
                break;
            b->idle++;
            if (next_deadline)
                slim__batcher_timed_wait(&b->work_cv, &b->mu, next_deadline);
            else
                pthread_cond_wait(&b->work_cv, &b->mu);
            b->idle--;
            continue;
        }
        int n = take_batch(b, in->batch, now, &wake);
        if (!n) {
            if (next_deadline && next_deadline < wake)
                wake = next_deadline;
            b->forming++;
            b->forming_wake = wake;
            slim__batcher_timed_wait(&b->work_cv, &b->mu, wake);
            b->forming--;
            continue;
        }
        if (b->head) /* more work: another instance may take it */
            pthread_cond_signal(&b->work_cv);
        pthread_mutex_unlock(&b->mu);
        /* The kernel threads slept through the wait for this batch: they
         * wake while the run is got ready, not at its first loop. */
        slim_parallel_prewake();

        slim_server_shape *sh = in->batch[0]->shape;
        for (int k = 0; k < n; k++) {
            in->batch[k]->t_started = now;
            slim_server_stats_observe_queue(b->model->stats, now - in->batch[k]->t_queued);
        }
        slim__batcher_run(b, in->batch, n); /* the tasks may be freed from here on */

        pthread_mutex_lock(&b->mu);
        if (sh)
            sh->users -= n;
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- life ------------------------------------------------------------------- */

/* Under mu, t just queued: whether an instance must look at the queue. An
 * idle one takes t; one waiting for company (forming) needs to know only
 * when t completes its batch or nothing more can join it. Any other
 * change (another shape) it sees when its wait ends. */
static bool wake_for(slim_server_batcher *b, const slim_server_task *t, int64_t now)
{
    if (b->idle || !b->forming)
        return true;
    if (t->deadline && t->deadline < b->forming_wake)
        return true; /* its queue timeout comes first */
    if (t->shape != b->forming_shape || !t->shape)
        return false;
    if (b->forming_rows + t->rows > b->forming_limit)
        return true; /* full without it */
    b->forming_rows += t->rows;
    b->forming_n++;
    return b->forming_rows == b->forming_limit || b->forming_n >= b->batch_cap ||
           is_preferred(b->cfg, b->forming_rows) || !batch_may_grow(now);
}

bool slim_server_batcher_submit(slim_server_batcher *b, slim_server_task *t, int64_t timeout_us,
                                slim_err *err)
{
    int64_t now = slim_server_now_us();
    const slim_server_batching *cfg = b->cfg;
    t->next = NULL;
    t->t_queued = now;
    t->rows = b->max_batch > 0 && t->rq->batch > 0 ? t->rq->batch : 1;
    t->shape = NULL;
    t->delayed = false;
    t->http_status = 0;
    t->status = SLIM_OK;
    atomic_store(&t->cancelled, SLIM_CANCEL_NONE);
    int64_t timeout = cfg->enabled ? (timeout_us > 0 ? timeout_us : cfg->default_timeout_us) : 0;
    t->deadline = timeout > 0 ? now + timeout : 0;
    /* The request's own timeout as the queue policy's (allow_timeout_override)
     * is also its deadline: counted from the same instant, so that while it
     * is queued the policy's answer comes first (deadlines.c). */
    if (t->deadline && timeout_us > 0 && t->timeout_from_request &&
        t->run_timeout_us == timeout_us && t->run_deadline)
        t->deadline = t->run_deadline;

    pthread_mutex_lock(&b->mu);
    int cancelled = atomic_load(&b->cancel_reason);
    if (b->stopping || cancelled || b->queued >= b->queue_cap) {
        int queued = b->queued;
        bool stopping = b->stopping;
        pthread_mutex_unlock(&b->mu);
        if (cancelled == SLIM_CANCEL_SHUTDOWN) {
            slim_errf(err, SLIM_EINVAL, "the server is shutting down");
            return false;
        }
        if (stopping || cancelled) { /* stopping: unreachable while the caller holds a reference */
            slim_errf(err, SLIM_EINVAL, "model '%s' is not ready: it is being unloaded; try "
                      "again later", b->model->name);
            return false;
        }
        atomic_fetch_add(&b->model->stats->rejected_queue_full, 1);
        slim_errf(err, SLIM_EINVAL, "model '%s': the inference queue is full (%d requests "
                  "waiting, max_queue_size %d); try again later", b->model->name, queued,
                  b->queue_cap);
        return false;
    }
    if (b->merge && (t->shape = shape_of(b, t, now)))
        t->shape->users++;
    append_task(b, t);
    slim__batcher_count_submit();
    if (wake_for(b, t, now))
        pthread_cond_signal(&b->work_cv);
    /* The watcher polls on its own clock while there is traffic
     * (deadlines.c); a request is worth a wakeup (a futex call and, on busy
     * cores, a switch away from a kernel thread) only when it finds the
     * watcher asleep for good or has a deadline before its next look. */
    int64_t due = t->deadline;
    if (t->run_deadline && (!due || t->run_deadline < due))
        due = t->run_deadline;
    if (b->watch_idle || (due && due < b->watch_wake))
        pthread_cond_signal(&b->watch_cv);
    pthread_mutex_unlock(&b->mu);
    return true;
}

slim_status slim_server_batcher_create(slim_server_model *m, int queue_size,
                                       slim_server_batcher **out, slim_err *err)
{
    const slim_server_config *cfg = &m->cfg;
    slim_server_batcher *b = calloc(1, sizeof(*b));
    int n = cfg->instance_count > 0 ? cfg->instance_count : 1;
    if (!b || !(b->instances = calloc((size_t)n, sizeof(instance)))) {
        free(b);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    b->model = m;
    b->cfg = &cfg->batching;
    b->max_batch = cfg->max_batch_size;
    b->merge = cfg->batching.enabled && cfg->max_batch_size > 1 && !has_strings(cfg);
    b->queue_cap = cfg->batching.max_queue_size > 0 ? cfg->batching.max_queue_size
                                                    : queue_size > 0 ? queue_size : 1;
    /* Every task has at least one row and at most queue_cap are queued. */
    b->batch_cap = !b->merge ? 1 : b->max_batch < b->queue_cap ? b->max_batch : b->queue_cap;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work_cv, &ca);
    pthread_cond_init(&b->watch_cv, &ca);
    pthread_cond_init(&b->gate_cv, NULL);
    pthread_condattr_destroy(&ca);
    slim__batcher_register(b);
    if (b->merge) {
        atomic_fetch_add(&m->stats->live_batchers, 1);
        atomic_store(&m->stats->batch_ceiling, b->max_batch);
    }
    if (pthread_create(&b->watcher, NULL, slim__batcher_watcher_main, b) != 0) {
        slim_server_batcher_stop(b);
        return slim_errf(err, SLIM_EINTERNAL, "model '%s': could not start its watcher thread",
                         m->name);
    }
    b->watcher_started = true;
    for (; b->n_instances < n; b->n_instances++) {
        instance *in = &b->instances[b->n_instances];
        in->b = b;
        if (!(in->batch = calloc((size_t)b->batch_cap, sizeof(*in->batch)))) {
            slim_server_batcher_stop(b);
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        }
        if (pthread_create(&in->thread, NULL, instance_main, in) != 0) {
            free(in->batch);
            slim_server_batcher_stop(b);
            return slim_errf(err, SLIM_EINTERNAL, "model '%s': could not start instance thread "
                             "%d of %d", m->name, b->n_instances + 1, n);
        }
    }
    *out = b;
    return SLIM_OK;
}

void slim_server_batcher_stop(slim_server_batcher *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_broadcast(&b->work_cv);
    pthread_cond_broadcast(&b->watch_cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->n_instances; i++) {
        pthread_join(b->instances[i].thread, NULL);
        free(b->instances[i].batch);
    }
    if (b->watcher_started)
        pthread_join(b->watcher, NULL);
    slim__batcher_unregister(b);
    if (b->merge)
        atomic_fetch_sub(&b->model->stats->live_batchers, 1);
    while (b->shapes) {
        slim_server_shape *next = b->shapes->next;
        shape_free(b->shapes);
        b->shapes = next;
    }
    pthread_cond_destroy(&b->work_cv);
    pthread_cond_destroy(&b->watch_cv);
    pthread_cond_destroy(&b->gate_cv);
    pthread_mutex_destroy(&b->mu);
    free(b->instances);
    free(b);
}
