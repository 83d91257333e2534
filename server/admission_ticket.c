/*
 * admission_ticket.c - admission for requests that do not come over HTTP
 * (a gRPC ModelInfer call, a ModelStreamInfer message): the same line,
 * budget and answers as admission.c gives HTTP's, through a ticket its
 * transport fills (admission.h) instead of a suspended connection.
 *
 * What differs from an HTTP request, and why:
 *   - Its message was buffered by its transport (gRPC), outside the
 *     allocator, before anyone could look at it; so there is no body to
 *     wait for, only its inputs (decoded into the allocator) count.
 *   - It does not suspend anything: waiting is keeping its ticket in the
 *     line; admission's thread calls t->start when it fits, or t->answer
 *     with the status HTTP would get (the transport maps it: 503 to
 *     UNAVAILABLE, 504 to DEADLINE_EXCEEDED, 507 to RESOURCE_EXHAUSTED).
 *   - A run that fails for memory even alone retries alone at the head
 *     of the line, as HTTP's does (slim_server_admission_retry_alone);
 *     its inputs stay decoded while it waits (its message is gone, and
 *     the run needs them anyway), only their count leaves the budget.
 */
#include "admission.h"
#include "admission_impl.h"
#include "clock.h"
#include "repository.h"
#include "metrics.h"
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>

/* How long t may wait in the line: the queue policy's timeout. */
static int64_t wait_timeout(const slim_server_admission_ticket *t)
{
    const slim_server_model *m = t->model;
    return t->wait_timeout_us > 0 ? t->wait_timeout_us
           : m->cfg.batching.default_timeout_us > 0 ? m->cfg.batching.default_timeout_us
                                                    : SLIM__ADMISSION_DEFAULT_TIMEOUT_US;
}

void slim__admission_ticket_refuse(slim_server_admission_ticket *t, int status, int failure,
                                   const char *msg)
{
    slim_server_count_failure(t->model, failure, t->t_begin);
    t->answer(t, status, msg);
}

void slim__admission_ticket_reserve(slim_server_admission *a, slim_server_admission_ticket *t,
                                    size_t need, bool alone)
{
    a->held += need;
    t->admitted_bytes = need;
    t->counted = true;
    t->admitted_alone = alone;
    if (alone)
        a->exclusive = true;
}

void slim_server_admission_ticket_release(slim_server_admission *a,
                                          slim_server_admission_ticket *t)
{
    if (!a || !t->counted)
        return;
    pthread_mutex_lock(&a->mu);
    a->held -= t->admitted_bytes < a->held ? t->admitted_bytes : a->held;
    if (t->admitted_alone)
        a->exclusive = false;
    t->admitted_alone = false;
    t->counted = false;
    if (a->head) /* a waiter may fit now; with none the thread sleeps on */
        pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

bool slim_server_admission_ticket_retry_alone(slim_server_admission *a,
                                              slim_server_admission_ticket *t)
{
    if (!a || t->retried_alone || !slim__admission_limit())
        return false;
    waiter *w = slim__admission_retry_waiter(a);
    if (!w)
        return false;
    size_t need = t->counted ? t->admitted_bytes : t->inputs;
    slim_server_admission_ticket_release(a, t);
    t->retried_alone = true;
    w->ticket = t;
    w->need = need;
    w->alone = true;
    w->since = slim_server_now_us();
    w->deadline = w->since + wait_timeout(t);
    slim__admission_requeue_front(a, w);
    return true;
}

slim__try_result slim__admission_ticket_try(slim_server_admission *a,
                                            slim_server_admission_ticket *t)
{
    slim_err err = {0};
    if (t->start(t, &err))
        return SLIM__TRY_QUEUED; /* the transport's now (queued, or answered by it) */
    /* No memory for its inputs now: memory that others hold comes back;
     * with nothing but the weights held, it never will. */
    pthread_mutex_lock(&a->mu);
    size_t own = t->counted ? t->admitted_bytes : 0;
    bool later = a->bodies > 0 || a->held > own || a->exclusive;
    pthread_mutex_unlock(&a->mu);
    slim_server_admission_ticket_release(a, t);
    if (later)
        return SLIM__TRY_WAIT;
    atomic_fetch_add(&a->never_fit, 1);
    char msg[1400];
    snprintf(msg, sizeof(msg), "model '%s': the request can never fit: no memory for its "
             "inputs of %zu bytes with nothing but the models' weights held, under the memory "
             "limit of the cpu device (%zu bytes, --memory-limit): %s", t->model->name,
             t->inputs, slim__admission_limit(), err.msg);
    slim__admission_ticket_refuse(t, 507, SLIM_SERVER_FAIL_MEMORY, msg);
    return SLIM__TRY_ANSWERED;
}

/* A ticket past its own deadline (504) or whose client left; a->mu not
 * held. */
void slim__admission_ticket_expire(slim_server_admission *a, slim_server_admission_ticket *t,
                                   bool late, int64_t timeout_us, bool from_request)
{
    char msg[400];
    if (!late) {
        slim__admission_ticket_refuse(t, 503, SLIM_SERVER_FAIL_MEMORY, "the client "
                                      "disconnected while the request waited for memory");
        return;
    }
    atomic_fetch_add(&a->timed_out, 1);
    snprintf(msg, sizeof(msg), "model '%s': the request's timeout of %lld ms (%s) passed while "
             "it waited for memory for its inputs", t->model->name,
             (long long)(timeout_us / 1000),
             from_request ? "its \"timeout\" parameter" : "the model's request_timeout_ms");
    slim__admission_ticket_refuse(t, 504, SLIM_SERVER_FAIL_CANCELED, msg);
}

/* Puts t in the line until it is admitted or its wait ends; answered 503
 * when the line is full (--queue-size) or the server stops. */
static void park(slim_server_admission *a, slim_server_admission_ticket *t)
{
    const slim_server_model *m = t->model;
    int64_t timeout = wait_timeout(t);
    waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_lock(&a->mu);
    if (!w || a->stopping || a->n_waiting >= a->capacity) {
        int waiting = a->n_waiting;
        pthread_mutex_unlock(&a->mu);
        free(w);
        char msg[400];
        snprintf(msg, sizeof(msg), "model '%s': no memory for the request's inputs now, and %d "
                 "requests already wait for memory; retry later", m->name, waiting);
        slim__admission_ticket_refuse(t, 503, SLIM_SERVER_FAIL_MEMORY, msg);
        return;
    }
    w->ticket = t;
    w->need = t->inputs;
    w->since = slim_server_now_us();
    w->deadline = w->since + timeout;
    slim__admission_enqueue(a, w);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void slim_server_admission_ticket_admit(slim_server_admission *a, slim_server_admission_ticket *t)
{
    size_t limit = slim__admission_limit();
    if (!a || !limit) { /* nothing waits: a pass-through */
        slim_err err = {0};
        if (!t->start(t, &err))
            slim__admission_ticket_refuse(t, 507, SLIM_SERVER_FAIL_MEMORY, err.msg);
        return;
    }
    size_t avail = slim__admission_available_ever(a);
    if (t->known && t->run > avail) {
        atomic_fetch_add(&a->never_fit, 1);
        char msg[900];
        snprintf(msg, sizeof(msg), "model '%s': the request can never fit: it needs %zu bytes "
                 "(inputs %zu, its outputs and a one-row run %zu), and the memory limit of the "
                 "cpu device (%zu bytes, --memory-limit) leaves %zu beside the models' weights",
                 t->model->name, t->run, t->inputs, t->run - t->inputs, limit, avail);
        slim__admission_ticket_refuse(t, 507, SLIM_SERVER_FAIL_MEMORY, msg);
        return;
    }
    pthread_mutex_lock(&a->mu);
    bool now = slim__admission_may_pass(a, false) &&
               slim__admission_fits_budget(a, t->inputs, false);
    if (now)
        slim__admission_ticket_reserve(a, t, t->inputs, false);
    pthread_mutex_unlock(&a->mu);
    if (now && slim__admission_ticket_try(a, t) != SLIM__TRY_WAIT)
        return;
    park(a, t);
}
