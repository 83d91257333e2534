/*
 * deadlines.c - requests that nobody waits for any more: deadlines, clients
 * that left, unloads and shutdown, for a model's scheduler (batcher.c).
 *
 * A request may carry a deadline of its own
 * (task->run_deadline: config.json "request_timeout_ms", or the request's
 * "timeout" parameter), covering queue and run; its client may go away; its
 * model may be unloaded; the server may stop. A watcher thread per batcher
 * looks at the queued and running tasks every WATCH_POLL_US, and at each
 * deadline as it falls due, while there are any (it sleeps otherwise, once
 * a whole poll went by without any: so under steady traffic it wakes on
 * its clock, not once per request, and a submit wakes it only for a
 * deadline before its next look):
 *
 *   - a queued task that is past its deadline, whose client left, or whose
 *     model was cancelled is taken out of the queue and answered at once
 *     (504, 499, 503) without running;
 *   - a run is cancelled (its slim_cancel token) only once *none* of its
 *     tasks wants the answer: every one is past its deadline, gone or
 *     cancelled. A batch therefore runs under the latest deadline of its
 *     members (none if one has none), and a member whose own deadline
 *     passes meanwhile is answered 504 when the run returns, its outputs
 *     dropped. So a request's answer never depends on what it was batched
 *     with: it gets its outputs (the rows it would get alone) or its own
 *     timeout, never a neighbour's. batch_run.c also drops tasks that died
 *     between the queue and the run before running the rest.
 *
 * The token's own deadline makes the runtime stop on time by itself; the
 * watcher covers what a fixed deadline cannot (a member that left, which
 * may leave only members with earlier deadlines). The watcher also applies
 * the queue policy's timeouts (batcher.c), first, so that they are answered
 * on time even while every instance is busy.
 *
 * Unload and shutdown cancel a batcher for good (slim_server_batcher_cancel):
 * its queue is answered 503 at once, its runs' tokens cancelled, and later
 * submits refused. Every batcher is in a process-wide list so that shutdown
 * reaches the runs of models already unloaded or replaced, and counts the
 * tasks not yet answered (each holds a suspended connection, which
 * MHD_stop_daemon must not meet).
 */
#include "batcher_impl.h"
#include "clock.h"
#include "metrics.h"
#include "repository.h"

#include <stdio.h>

/* How often the watcher peeks at the clients of queued and running tasks:
 * a client that left stops costing CPU within about this long. */
#define WATCH_POLL_US 50000

/* Every batcher alive, and the tasks submitted and not yet answered. */
static struct {
    pthread_mutex_t mu;
    slim_server_batcher *head;
    atomic_int cancel_reason;   /* cancel_all: batchers made later start cancelled */
    atomic_llong pending;
} alive = {.mu = PTHREAD_MUTEX_INITIALIZER};

void slim__batcher_register(slim_server_batcher *b)
{
    pthread_mutex_lock(&alive.mu);
    atomic_init(&b->cancel_reason, atomic_load(&alive.cancel_reason));
    b->next_alive = alive.head;
    alive.head = b;
    pthread_mutex_unlock(&alive.mu);
}

void slim__batcher_unregister(slim_server_batcher *b)
{
    pthread_mutex_lock(&alive.mu);
    for (slim_server_batcher **p = &alive.head; *p; p = &(*p)->next_alive)
        if (*p == b) {
            *p = b->next_alive;
            break;
        }
    pthread_mutex_unlock(&alive.mu);
}

void slim__batcher_count_submit(void)
{
    atomic_fetch_add(&alive.pending, 1);
}

/* ---- whether a task still wants its answer, and the answer when not ------ */

slim_cancel_reason slim__batcher_task_dead(const slim_server_batcher *b, slim_server_task *t,
                                           int64_t now_us)
{
    int why = atomic_load(&t->cancelled);
    if (why == SLIM_CANCEL_NONE)
        why = atomic_load(&b->cancel_reason);
    if (why == SLIM_CANCEL_NONE && t->run_deadline && now_us >= t->run_deadline)
        why = SLIM_CANCEL_DEADLINE;
    return (slim_cancel_reason)why;
}

void slim__batcher_finish(slim_server_task *t)
{
    t->done(t); /* t may be freed from here on */
    atomic_fetch_sub(&alive.pending, 1);
}

/* "2000 ms", or "2500 us" when not whole milliseconds. */
static void format_timeout(char *out, size_t cap, int64_t us)
{
    if (us % 1000 == 0)
        snprintf(out, cap, "%lld ms", (long long)(us / 1000));
    else
        snprintf(out, cap, "%lld us", (long long)us);
}

void slim__batcher_answer_dead(slim_server_batcher *b, slim_server_task *t,
                               slim_cancel_reason why, bool ran)
{
    int64_t now = slim_server_now_us();
    if (!ran)
        t->t_started = now;
    t->t_done = now;
    long long queued_ms = (long long)((t->t_started - t->t_queued) / 1000);
    long long ran_ms = (long long)((now - t->t_started) / 1000);
    char where[96];
    if (ran)
        snprintf(where, sizeof(where), "after %lld ms in the queue and %lld ms running",
                 queued_ms, ran_ms);
    else
        snprintf(where, sizeof(where), "after %lld ms in the queue, before it ran", queued_ms);
    const char *name = b->model->name;
    t->failure = SLIM_SERVER_FAIL_CANCELED;
    t->status = SLIM_ECANCELLED;
    t->http_status = 503;
    switch (why) {
    case SLIM_CANCEL_DEADLINE: {
        char timeout[32];
        format_timeout(timeout, sizeof(timeout), t->run_timeout_us);
        t->status = SLIM_ETIMEDOUT;
        t->http_status = 504;
        slim_errf(&t->err, SLIM_ETIMEDOUT, "model '%s': the request's timeout of %s (%s) "
                  "passed %s", name, timeout, t->timeout_from_request ? "its \"timeout\" "
                  "parameter" : "request_timeout_ms in config.json", where);
        break;
    }
    case SLIM_CANCEL_CLIENT:
        /* Nobody reads it; 499 as nginx logs a client that left. */
        t->http_status = 499;
        slim_errf(&t->err, SLIM_ECANCELLED, "model '%s': the client closed the connection; "
                  "the request was cancelled %s", name, where);
        break;
    case SLIM_CANCEL_UNLOAD:
        slim_errf(&t->err, SLIM_ECANCELLED, "model '%s' is not ready: it was unloaded, and "
                  "the request was cancelled %s", name, where);
        break;
    default:
        slim_errf(&t->err, SLIM_ECANCELLED, "the server is shutting down; the request to "
                  "model '%s' was cancelled %s", name, where);
        break;
    }
    slim__batcher_finish(t);
}

slim_cancel_reason slim__batcher_run_dead(const slim_server_batcher *b, slim__run_ticket *tk,
                                          int64_t now)
{
    slim_cancel_reason why = SLIM_CANCEL_NONE;
    for (int k = 0; k < tk->n_tasks; k++)
        if (!(why = slim__batcher_task_dead(b, tk->tasks[k], now)))
            return SLIM_CANCEL_NONE;
    return why;
}

/* ---- the watcher ----------------------------------------------------------- */

/* Marks t cancelled when its client has left. Tasks younger than a poll
 * are not asked: on a busy fast model most are answered before that, and
 * a peek is a system call. */
static void ask_client(slim_server_task *t, int64_t now)
{
    if (t->gone && !atomic_load(&t->cancelled) && now - t->t_queued >= WATCH_POLL_US &&
        t->gone(t))
        atomic_store(&t->cancelled, SLIM_CANCEL_CLIENT);
}

/* Under mu: takes the queued tasks that must not run (slim__batcher_task_dead)
 * out of the queue, as a list to answer outside the lock; cancels the runs
 * none of whose tasks wants the answer. Asks each task's client whether it
 * is still there. *next_deadline: the earliest deadline still to come. */
static slim_server_task *watch_scan(slim_server_batcher *b, int64_t now, int64_t *next_deadline)
{
    slim_server_task *dead = NULL, **dead_tail = &dead, *prev = NULL, *t = b->head;
    *next_deadline = 0;
    while (t) {
        slim_server_task *next = t->next;
        ask_client(t, now);
        if (slim__batcher_task_dead(b, t, now)) {
            slim__batcher_unlink(b, t, prev);
            if (t->shape)
                t->shape->users--;
            *dead_tail = t;
            dead_tail = &t->next;
        } else {
            if (t->run_deadline && (!*next_deadline || t->run_deadline < *next_deadline))
                *next_deadline = t->run_deadline;
            prev = t;
        }
        t = next;
    }
    for (slim__run_ticket *tk = b->runs; tk; tk = tk->next) {
        for (int k = 0; k < tk->n_tasks; k++) {
            slim_server_task *r = tk->tasks[k];
            ask_client(r, now);
            if (r->run_deadline > now && (!*next_deadline || r->run_deadline < *next_deadline))
                *next_deadline = r->run_deadline;
        }
        slim_cancel_reason why = slim__batcher_run_dead(b, tk, now);
        if (why)
            slim_cancel_request(&tk->token, why);
    }
    return dead;
}

/* Answers a list of tasks taken out of the queue, outside mu. */
static void answer_dead_list(slim_server_batcher *b, slim_server_task *t)
{
    int64_t now = slim_server_now_us();
    while (t) {
        slim_server_task *next = t->next;
        slim_cancel_reason why = slim__batcher_task_dead(b, t, now);
        slim__batcher_answer_dead(b, t, why ? why : SLIM_CANCEL_SHUTDOWN, false);
        t = next;
    }
}

/* The watcher (see the top of the file): awake only while tasks are queued
 * or running. */
void *slim__batcher_watcher_main(void *arg)
{
    slim_server_batcher *b = arg;
    int64_t busy_at = 0; /* when it last saw a task queued or running */
    pthread_mutex_lock(&b->mu);
    while (!b->stopping) {
        int64_t now = slim_server_now_us();
        if (!b->head && !b->runs) {
            /* Between one client's requests the queue is empty for a
             * moment: sleeping for good there made every request's submit
             * wake this thread just as its run started (on two cores, a
             * switch away from a kernel thread). So it sleeps for good
             * only after a whole poll without tasks, and until then keeps
             * to its clock (a task submitted meanwhile is younger than a
             * poll, so ask_client would not ask about it yet anyway). */
            if (now - busy_at >= WATCH_POLL_US) {
                b->watch_idle = true;
                b->watch_wake = 0;
                pthread_cond_wait(&b->watch_cv, &b->mu);
                b->watch_idle = false;
                busy_at = slim_server_now_us();
            } else {
                b->watch_wake = busy_at + WATCH_POLL_US;
                slim__batcher_timed_wait(&b->watch_cv, &b->mu, b->watch_wake);
                b->watch_wake = 0;
            }
            continue;
        }
        busy_at = now;
        /* The queue policy first: where its timeout and the request's
         * deadline are the same (allow_timeout_override), its answer wins;
         * and busy instances cannot look at the queue. */
        int64_t next_queue = 0, next_deadline;
        slim_server_task *expired =
            b->with_deadline ? slim__batcher_expire(b, now, &next_queue) : NULL;
        slim_server_task *dead = watch_scan(b, now, &next_deadline);
        if (expired || dead) {
            pthread_mutex_unlock(&b->mu);
            slim__batcher_answer_expired(b, expired, now);
            answer_dead_list(b, dead);
            pthread_mutex_lock(&b->mu);
            continue;
        }
        int64_t wake = now + WATCH_POLL_US;
        if (next_deadline && next_deadline < wake)
            wake = next_deadline;
        if (next_queue && next_queue < wake)
            wake = next_queue;
        b->watch_wake = wake;
        slim__batcher_timed_wait(&b->watch_cv, &b->mu, wake);
        b->watch_wake = 0;
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

void slim_server_batcher_cancel(slim_server_batcher *b, slim_cancel_reason why)
{
    if (!b)
        return;
    int none = SLIM_CANCEL_NONE;
    atomic_compare_exchange_strong(&b->cancel_reason, &none, (int)why);
    pthread_mutex_lock(&b->mu);
    int64_t next_deadline;
    slim_server_task *dead = watch_scan(b, slim_server_now_us(), &next_deadline);
    pthread_mutex_unlock(&b->mu);
    answer_dead_list(b, dead);
}

void slim_server_batchers_cancel_all(slim_cancel_reason why)
{
    pthread_mutex_lock(&alive.mu);
    atomic_store(&alive.cancel_reason, (int)why);
    for (slim_server_batcher *b = alive.head; b; b = b->next_alive)
        slim_server_batcher_cancel(b, why);
    pthread_mutex_unlock(&alive.mu);
}

int64_t slim_server_batchers_pending(void)
{
    return atomic_load(&alive.pending);
}

int64_t slim_server_batchers_abandon(void)
{
    int64_t n = 0;
    /* Under each batcher's lock: a task of a run is answered only after
     * its run has left the list, so none is answered twice at once. */
    pthread_mutex_lock(&alive.mu);
    for (slim_server_batcher *b = alive.head; b; b = b->next_alive) {
        pthread_mutex_lock(&b->mu);
        for (slim__run_ticket *tk = b->runs; tk; tk = tk->next)
            for (int k = 0; k < tk->n_tasks; k++)
                if (tk->tasks[k]->abandon) {
                    tk->tasks[k]->abandon(tk->tasks[k]);
                    n++;
                }
        pthread_mutex_unlock(&b->mu);
    }
    pthread_mutex_unlock(&alive.mu);
    return n;
}
