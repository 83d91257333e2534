/*
 * admission.c - when a request may take memory, and what happens while it
 * may not.
 *
 * Under --memory-limit a request's memory comes out of the same limit as
 * the runs': its body (allocated from the CPU allocator as soon as the
 * headers give its length), the JSON tree its header parses into (reserved
 * in the allocator while it exists: cJSON mallocs its nodes, so the bytes
 * are promised, not placed, see reserve_parse), and its decoded inputs.
 * Two things went wrong when every request decoded at once: while batches
 * held the memory, a request's own inputs could not be allocated and the
 * client got 400 for a request that runs fine a moment later; and the
 * inputs of requests waiting in the queues took the memory the runs
 * needed, so runs failed even alone. So:
 *
 *   - What a request can never get is answered 507 at once, naming what it
 *     needs and the limit: a body over the limit (before it is read); a
 *     body plus its JSON tree over the limit less the weights of the
 *     models on the CPU; inputs, plus the activation arena of a one-row run
 *     (from the model's plan) and, when config.json fixes their shape, its
 *     outputs, over that. Nothing waits for memory that cannot come.
 *   - Bodies being read hold at most half the limit, decoded inputs of
 *     requests not yet answered a quarter (the budgets); the runs keep the
 *     rest. The first of each is admitted whatever its size, so something
 *     always moves.
 *   - A request past a budget, or that finds no memory now, waits here with
 *     its connection suspended (before its body is read, or holding only
 *     its body), and one thread admits waiters as memory returns. A request
 *     that fits now passes the waiters ahead of it, so a large request does
 *     not block small ones; but only during the first half of the waiter's
 *     timeout: after that the waiter is a barrier, so memory that frees up
 *     goes to it before its deadline instead of to a stream of small ones.
 *   - One that waits past its wait deadline (the model's queue timeout,
 *     the request's "timeout" where the queue policy takes it, or 30 s) is
 *     answered 503 with Retry-After; one that finds --queue-size requests
 *     already waiting 503 at once. One whose own deadline (its "timeout"
 *     parameter, or the model's request_timeout_ms; routes.c) passes while
 *     it waits is answered 504 then, not once admitted; one whose client
 *     leaves is dropped, so its place and memory go to others.
 *
 * Without a limit nothing waits: admission is a pass-through. A request
 * of another transport (a gRPC call) waits in the same line under the
 * same budgets, through a ticket instead of a suspended connection
 * (admission_ticket.c).
 */
#include "admission.h"
#include "admission_impl.h"
#include "batcher.h"
#include "buf.h"
#include "clock.h"
#include "codec.h"
#include "device.h"
#include "http.h"
#include "metrics.h"
#include "model.h"
#include "repository.h"
#include "routes.h"
#include "server.h"

#include <microhttpd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ADMISSION_POLL_MS 5
#define GONE_PEEK_US 50000          /* how often a waiter's client is looked at */
#define ADMISSION_BUDGET_DIVISOR 4  /* decoded inputs: limit / this */
#define BODY_BUDGET_DIVISOR 2       /* bodies being read or held: limit / this */
#define MAX_MODELS 256


static void body_to_heap(slim_server_admission *a, slim_server_request *req);

static slim_allocator *cpu_alloc(void)
{
    return slim_device_cpu()->alloc;
}

size_t slim__admission_limit(void)
{
    return slim_allocator_limit(cpu_alloc());
}

/* The limit less the weights of every ready model held in the CPU
 * allocator: what a request could ever get. A model's weights there are
 * its weight bytes, unless its account holds less on the CPU (weights
 * mapped from a .slim file, or placed on a device, are not the
 * allocator's); the account also counts runs in flight, so the smaller of
 * the two errs toward "may fit", never toward a wrong 507. */
size_t slim__admission_available_ever(slim_server_admission *a)
{
    size_t limit = slim__admission_limit(), weights = 0;
    slim_server_model *ms[MAX_MODELS];
    int n = slim_server_repo_ready_models(a->repo, NULL, ms, MAX_MODELS);
    for (int i = 0; i < n; i++) {
        size_t held = atomic_load(&ms[i]->model->account->dev[0].current);
        size_t w = ms[i]->model->weight_bytes;
        weights += held < w ? held : w;
        slim_server_model_release(ms[i]);
    }
    return weights < limit ? limit - weights : 0;
}

static int64_t wait_timeout(const slim_server_request *req, const slim_server_model *m)
{
    return req->timeout_us > 0 ? req->timeout_us
           : m && m->cfg.batching.default_timeout_us > 0 ? m->cfg.batching.default_timeout_us
                                                         : SLIM__ADMISSION_DEFAULT_TIMEOUT_US;
}

/* ---- the budgets ----------------------------------------------------------- */

/* Whether `need` more bytes may be admitted now; a->mu held. A request
 * retrying alone waits until no other inputs are held, and nothing else is
 * admitted until it has finished. */
bool slim__admission_fits_budget(const slim_server_admission *a, size_t need, bool alone)
{
    size_t limit = slim__admission_limit();
    if (a->exclusive)
        return false;
    if (alone)
        return a->held == 0;
    return !limit || a->held == 0 || a->held + need <= limit / ADMISSION_BUDGET_DIVISOR;
}

static bool fits_body_budget(const slim_server_admission *a, size_t need)
{
    size_t limit = slim__admission_limit();
    return !limit || a->bodies == 0 || a->bodies + need <= limit / BODY_BUDGET_DIVISOR;
}

/* Whether a request arriving now may be admitted ahead of the waiters of
 * its kind: none of them has waited half its timeout yet, and none waits
 * to run alone (it needs every other request's inputs gone); a->mu held. */
bool slim__admission_may_pass(const slim_server_admission *a, bool body)
{
    int64_t now = slim_server_now_us();
    for (const waiter *w = a->head; w; w = w->next)
        if (w->body == body && (w->alone || now - w->since >= (w->deadline - w->since) / 2))
            return false;
    return true;
}

/* Whether memory the allocator refuses now can come back: some other
 * request holds a body or inputs (and with its inputs, runs). When none
 * does, what is held is the models' weights and this request's own, so
 * waiting would wait for nothing. a->mu held. */
static bool others_hold(const slim_server_admission *a, const slim_server_request *req)
{
    size_t own_body = req->body_block ? req->body_held : 0;
    size_t own_inputs = req->admission_counted ? req->admitted_bytes : 0;
    return a->bodies > own_body || a->held > own_inputs || a->exclusive;
}

/* A memory refusal: counted apart from bad requests. */
static void refuse(slim_server_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(slim_server_request *req, int status, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (req->task.model)
        slim_server_count_failure(req->task.model, SLIM_SERVER_FAIL_MEMORY, req->t_begin);
    slim_server_reply_error(&req->reply, status, "%s", msg);
    if (status == 503)
        req->reply.retry_after_s = 1;
}

typedef slim__try_result try_result;

/* Counts req's inputs in the budget before it decodes; a->mu held. */
static void reserve(slim_server_admission *a, slim_server_request *req, size_t need, bool alone)
{
    a->held += need;
    req->admitted_bytes = need;
    req->admitted_alone = alone;
    req->admission_counted = true;
    if (alone)
        a->exclusive = true;
}

/* Decodes req, its input bytes already counted in a->held (a->mu not
 * held), and queues it; on failure gives them back. */
static try_result try_decode(slim_server_admission *a, slim_server_request *req)
{
    slim_err err = {0};
    slim_status s = slim__request_reserve_parse(req, &err);
    bool parsing = s != SLIM_OK;
    if (s == SLIM_OK)
        s = slim_server_infer_decode_request(req, &err);
    slim__request_release_parse(req);
    size_t max_reply = req->srv->opts.max_response_bytes, reply = 0;
    if (s == SLIM_OK) {
        req->infer.max_reply_bytes = max_reply;
        if (!max_reply || (reply = slim__request_reply_bound(req)) <= max_reply) {
            body_to_heap(a, req);
            slim_server_infer_submit(req);
            return SLIM__TRY_QUEUED;
        }
        slim_server_admission_release(a, req);
        refuse(req, 507, "model '%s': the answer would take up to %zu bytes, over the limit "
               "of %zu bytes (--max-response-bytes); ask for fewer elements%s",
               req->task.model->name, reply, max_reply,
               slim_server_infer_any_json(&req->infer) ? ", or for binary outputs" : "");
        return SLIM__TRY_ANSWERED;
    }
    if (s == SLIM_EOOM) {
        pthread_mutex_lock(&a->mu);
        bool later = others_hold(a, req);
        pthread_mutex_unlock(&a->mu);
        slim_server_admission_release(a, req);
        if (later) {
            body_to_heap(a, req);
            return SLIM__TRY_WAIT;
        }
        atomic_fetch_add(&a->never_fit, 1);
        refuse(req, 507, "model '%s': the request can never fit: no memory %s with nothing "
               "but the models' weights and its own body held, under the memory limit of the "
               "cpu device (%zu bytes, --memory-limit): %s", req->task.model->name,
               parsing ? "to parse its JSON" : "for its inputs", slim__admission_limit(), err.msg);
        return SLIM__TRY_ANSWERED;
    }
    slim_server_admission_release(a, req);
    slim_server_count_failure(req->task.model, SLIM_SERVER_FAIL_BAD_REQUEST, req->t_begin);
    slim_server_reply_error(&req->reply, s == SLIM_ENOMEM ? 500 : 400, "%s", err.msg);
    return SLIM__TRY_ANSWERED;
}

void slim__admission_enqueue(slim_server_admission *a, waiter *w)
{
    if (a->tail)
        a->tail->next = w;
    else
        a->head = w;
    a->tail = w;
    a->n_waiting++;
}

/* Parks req (suspended) until it is admitted or its deadline passes; false
 * with req->reply set (503) when no one more may wait. */
static bool park(slim_server_admission *a, slim_server_request *req, size_t need, bool body,
                 int64_t timeout)
{
    waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_lock(&a->mu);
    if (!w || a->stopping || a->n_waiting >= a->capacity) {
        int waiting = a->n_waiting;
        pthread_mutex_unlock(&a->mu);
        free(w);
        const slim_server_model *m = req->task.model;
        refuse(req, 503, "%s%s%sno memory for the request's %s now, and %d requests already "
               "wait for memory; retry later", m ? "model '" : "", m ? m->name : "",
               m ? "': " : "", body ? "body" : "inputs", waiting);
        return false;
    }
    /* Suspended before the thread can see it: the thread may resume it. */
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    w->req = req;
    w->need = need;
    w->body = body;
    w->since = slim_server_now_us();
    w->deadline = w->since + timeout;
    slim__admission_enqueue(a, w);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return true;
}

/* ---- bodies ------------------------------------------------------------------ */

typedef enum { TAKE_OK, TAKE_LATER, TAKE_NEVER } take_result;

/* Takes the body's memory when the budget and the allocator allow; a->mu
 * held. TAKE_NEVER: the allocator refused with nothing else held. */
static take_result take_body(slim_server_admission *a, slim_server_request *req, size_t len,
                             slim_err *err)
{
    if (!fits_body_budget(a, len))
        return TAKE_LATER;
    slim_block *blk;
    void *p = slim_allocator_alloc(cpu_alloc(), len + 1, &blk, err);
    if (!p)
        return others_hold(a, req) ? TAKE_LATER : TAKE_NEVER;
    req->body = p;
    req->body_block = blk;
    req->body_cap = len + 1;
    req->body_len = 0;
    req->body_held = len;
    a->bodies += len;
    return TAKE_OK;
}

static void refuse_body_never(slim_server_admission *a, slim_server_request *req, size_t len,
                              const slim_err *err)
{
    atomic_fetch_add(&a->never_fit, 1);
    refuse(req, 507, "the request can never fit: no memory for its body of %zu bytes with "
           "nothing but the models' weights held, under the memory limit of the cpu device "
           "(%zu bytes, --memory-limit): %s", len, slim__admission_limit(), err->msg);
}

slim_server_body_result slim_server_admission_body(slim_server_admission *a,
                                                   slim_server_request *req, size_t len)
{
    size_t limit = slim__admission_limit();
    if (!a || !limit || !len)
        return SLIM_SERVER_BODY_READ;
    size_t avail = slim__admission_available_ever(a);
    if (len > avail) {
        atomic_fetch_add(&a->never_fit, 1);
        refuse(req, 507, "the request can never fit: its body of %zu bytes is over what the "
               "memory limit of the cpu device (%zu bytes, --memory-limit) leaves beside the "
               "models' weights, %zu", len, limit, avail);
        return SLIM_SERVER_BODY_ANSWERED;
    }
    slim_err err = {0};
    pthread_mutex_lock(&a->mu);
    take_result r = slim__admission_may_pass(a, true) ? take_body(a, req, len, &err) : TAKE_LATER;
    pthread_mutex_unlock(&a->mu);
    if (r == TAKE_OK)
        return SLIM_SERVER_BODY_READ;
    if (r == TAKE_NEVER) {
        refuse_body_never(a, req, len, &err);
        return SLIM_SERVER_BODY_ANSWERED;
    }
    return park(a, req, len, true, SLIM__ADMISSION_DEFAULT_TIMEOUT_US) ? SLIM_SERVER_BODY_WAIT
                                                                 : SLIM_SERVER_BODY_ANSWERED;
}

void slim_server_admission_body_free(slim_server_admission *a, slim_server_request *req)
{
    if (!req->body_block)
        return;
    slim_allocator_free(cpu_alloc(), req->body_block);
    req->body_block = NULL;
    req->body = NULL;
    req->body_len = req->body_cap = 0;
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->bodies -= req->body_held < a->bodies ? req->body_held : a->bodies;
    req->body_held = 0;
    if (a->head) /* a waiter may fit now; with none the thread sleeps on */
        pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Once a request is decoded, or waits for memory for its inputs, its body
 * is needed again only if it must be decoded anew (a retry alone), and
 * the allocator's memory is the runs': the body moves to the heap, and its
 * share of the body budget returns. (Bodies of requests queued or waiting
 * are so outside the limit, as tensors' bytes are not; the limit bounds
 * what reading and decoding take at once.) Stays put when malloc fails. */
static void body_to_heap(slim_server_admission *a, slim_server_request *req)
{
    if (!req->body_block)
        return;
    char *p = malloc(req->body_len + 1);
    if (!p)
        return;
    memcpy(p, req->body, req->body_len);
    p[req->body_len] = '\0';
    size_t len = req->body_len;
    slim_server_admission_body_free(a, req);
    req->body = p;
    req->body_len = len;
    req->body_cap = len + 1;
}

/* ---- inputs ------------------------------------------------------------------ */

bool slim_server_admission_admit(slim_server_admission *a, slim_server_request *req)
{
    const slim_server_model *m = req->task.model;
    size_t limit = slim__admission_limit();
    slim__request_need need = {0};
    if (limit) {
        /* Body and tree first: the tree is what reading the inputs costs. */
        size_t json_len = req->infer_header_len >= 0 &&
                                  (size_t)req->infer_header_len <= req->body_len
                              ? (size_t)req->infer_header_len : req->body_len;
        size_t tree = slim_server_json_parse_bound(req->body ? req->body : "", json_len);
        size_t body = req->body_block ? req->body_held : 0;
        size_t avail = slim__admission_available_ever(a);
        if (body + tree > avail) {
            atomic_fetch_add(&a->never_fit, 1);
            refuse(req, 507, "model '%s': the request can never fit: reading it needs %zu "
                   "bytes (a body of %zu and up to %zu for its JSON of %zu bytes), and the "
                   "memory limit of the cpu device (%zu bytes, --memory-limit) leaves %zu beside "
                   "the models' weights; send the inputs as binary data", m->name, body + tree,
                   body, tree, json_len, limit, avail);
            return true;
        }
        slim_err err = {0};
        if (slim__request_reserve_parse(req, &err) == SLIM_OK) {
            need = slim__request_declared_need(req);
            req->declared_timeout_us = need.timeout_us;
            slim__request_release_parse(req);
        }
        if (need.known && body + need.run > avail) {
            atomic_fetch_add(&a->never_fit, 1);
            refuse(req, 507, "model '%s': the request can never fit: it needs %zu bytes (inputs "
                   "%zu, its outputs and a one-row run %zu, its body %zu), and the memory limit "
                   "of the cpu device (%zu bytes, --memory-limit) leaves %zu beside the models' "
                   "weights", m->name, body + need.run, need.inputs, need.run - need.inputs,
                   body, limit, avail);
            return true;
        }
    }
    pthread_mutex_lock(&a->mu);
    bool now = slim__admission_may_pass(a, false) &&
               slim__admission_fits_budget(a, need.inputs, false);
    if (now)
        reserve(a, req, need.inputs, false);
    pthread_mutex_unlock(&a->mu);
    if (now) {
        try_result r = try_decode(a, req);
        if (r != SLIM__TRY_WAIT)
            return r == SLIM__TRY_ANSWERED;
    }
    if (req->suspended) { /* already parked once: cannot happen from a route */
        refuse(req, 503, "model '%s': no memory for the request's inputs now; retry later",
               m->name);
        return true;
    }
    body_to_heap(a, req);
    return !park(a, req, need.inputs, false, wait_timeout(req, m));
}

void slim_server_admission_release(slim_server_admission *a, slim_server_request *req)
{
    if (!a || !req->admission_counted)
        return;
    pthread_mutex_lock(&a->mu);
    a->held -= req->admitted_bytes < a->held ? req->admitted_bytes : a->held;
    if (req->admitted_alone)
        a->exclusive = false;
    req->admission_counted = false;
    if (a->head) /* a waiter may fit now; with none the thread sleeps on */
        pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void slim__admission_push_front(slim_server_admission *a, waiter *w)
{
    w->next = a->head;
    a->head = w;
    if (!a->tail)
        a->tail = w;
    a->n_waiting++;
}

/* Both kinds of retry (HTTP request, transport ticket) start alike: a waiter
 * to hold it, or none when out of memory or the server is stopping. */
waiter *slim__admission_retry_waiter(slim_server_admission *a)
{
    waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    pthread_mutex_lock(&a->mu);
    bool stopping = a->stopping;
    pthread_mutex_unlock(&a->mu);
    if (stopping) {
        free(w);
        return NULL;
    }
    return w;
}

/* A retry goes first in line (it was admitted once) and wakes the thread. */
void slim__admission_requeue_front(slim_server_admission *a, waiter *w)
{
    pthread_mutex_lock(&a->mu);
    slim__admission_push_front(a, w);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

bool slim_server_admission_retry_alone(slim_server_admission *a, slim_server_request *req)
{
    if (!a || req->admitted_alone || !slim__admission_limit())
        return false;
    waiter *w = slim__admission_retry_waiter(a);
    if (!w)
        return false;
    /* Back to how it arrived: no inputs, no task state. */
    size_t need = req->admitted_bytes;
    slim_server_infer_free(&req->infer);
    memset(&req->infer, 0, sizeof(req->infer));
    slim_server_admission_release(a, req);
    slim_server_task *t = &req->task;
    slim_tensors_free(t->outputs, t->n_outputs);
    t->outputs = NULL;
    t->n_outputs = 0;
    t->status = SLIM_OK;
    t->http_status = 0;
    t->failure = 0;
    t->err = (slim_err){0};
    t->shape = NULL;
    t->delayed = false;
    t->t_done = 0;
    w->req = req;
    w->need = need;
    w->alone = true;
    w->since = slim_server_now_us();
    w->deadline = w->since + wait_timeout(req, t->model);
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    slim__admission_requeue_front(a, w);
    return true;
}

static void unlink_waiter(slim_server_admission *a, waiter **pp)
{
    waiter *w = *pp;
    *pp = w->next;
    if (a->tail == w) {
        a->tail = NULL;
        for (waiter *t = a->head; t; t = t->next)
            a->tail = t;
    }
    a->n_waiting--;
}

/* Wakes a waiter's connection with its answer in req->reply. */
static void answer_waiter(waiter *w)
{
    if (w->body)
        w->req->body_refused = true; /* its body is read and dropped, then the reply */
    else
        w->req->task.t_done = -1;    /* infer_finish: the reply is set */
    MHD_resume_connection(w->req->conn);
}

/* A waiter's client that closed its connection (or its sending side)
 * wants no answer: its place and memory go to others. Suspended
 * connections are not watched by libmicrohttpd, so a peek tells. */
static bool waiter_gone(const waiter *w)
{
    if (w->ticket)
        return w->ticket->gone && w->ticket->gone(w->ticket);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(w->req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci && slim_server_socket_gone(ci->connect_fd);
}

/* The request's own deadline (its "timeout" parameter, or the model's
 * request_timeout_ms: the earlier), which covers its wait for memory as it
 * covers the queue and the run (routes.c); 0: none, or not known yet (a
 * body not yet read). */
static int64_t run_deadline(const waiter *w, bool *from_request, int64_t *timeout_us)
{
    if (w->ticket) {
        *from_request = w->ticket->timeout_from_request;
        *timeout_us = w->ticket->run_timeout_us;
        return w->ticket->run_deadline;
    }
    const slim_server_request *req = w->req;
    const slim_server_model *m = req->task.model;
    if (w->body || !m)
        return 0;
    int64_t mine = req->infer.timeout_us ? req->infer.timeout_us : req->declared_timeout_us;
    int64_t model = m->cfg.request_timeout_ms * 1000;
    *from_request = mine > 0 && (model <= 0 || mine <= model);
    *timeout_us = *from_request ? mine : model;
    return *timeout_us > 0 ? req->t_begin + *timeout_us : 0;
}

/* Answers every waiter past its deadline (all of them when stopping), or
 * past the request's own deadline (504), or whose client left; a->mu held,
 * dropped around each answer. */
static void expire(slim_server_admission *a)
{
    int64_t now = slim_server_now_us();
    for (waiter **pp = &a->head; *pp;) {
        waiter *w = *pp;
        bool from_request = false;
        int64_t timeout_us = 0, due = run_deadline(w, &from_request, &timeout_us);
        bool late = due && now >= due, gone = false;
        /* A syscall per waiter per poll would cost a long queue dearly. */
        if (!late && now - w->peeked >= GONE_PEEK_US) {
            w->peeked = now;
            gone = waiter_gone(w);
        }
        if ((late || gone) && !a->stopping) {
            unlink_waiter(a, pp);
            pthread_mutex_unlock(&a->mu);
            if (w->ticket) {
                slim__admission_ticket_expire(a, w->ticket, late, timeout_us, from_request);
                free(w);
                pthread_mutex_lock(&a->mu);
                pp = &a->head;
                continue;
            }
            const slim_server_model *m = w->req->task.model;
            if (late) {
                atomic_fetch_add(&a->timed_out, 1);
                if (m)
                    slim_server_count_failure(m, SLIM_SERVER_FAIL_CANCELED, w->req->t_begin);
                slim_server_reply_error(&w->req->reply, 504, "model '%s': the request's timeout "
                                        "of %lld ms (%s) passed while it waited for memory for "
                                        "its inputs", m->name, (long long)(timeout_us / 1000),
                                        from_request ? "its \"timeout\" parameter"
                                                     : "the model's request_timeout_ms");
            } else {
                refuse(w->req, 503, "the client disconnected while the request waited for "
                       "memory");
            }
            answer_waiter(w);
            free(w);
            pthread_mutex_lock(&a->mu);
            pp = &a->head;
            continue;
        }
        if (!a->stopping && now < w->deadline) {
            pp = &w->next;
            continue;
        }
        unlink_waiter(a, pp);
        pthread_mutex_unlock(&a->mu);
        atomic_fetch_add(&a->timed_out, 1);
        if (w->ticket) {
            char msg[300];
            snprintf(msg, sizeof(msg), "model '%s': the request waited for memory for its "
                     "inputs %s; retry later", w->ticket->model->name,
                     a->stopping ? "until the server stopped" : "past its timeout");
            slim__admission_ticket_refuse(w->ticket, 503, SLIM_SERVER_FAIL_MEMORY, msg);
            free(w);
            pthread_mutex_lock(&a->mu);
            pp = &a->head;
            continue;
        }
        const slim_server_model *m = w->req->task.model;
        refuse(w->req, 503, "%s%s%sthe request waited for memory for its %s %s; retry later",
               m ? "model '" : "", m ? m->name : "", m ? "': " : "",
               w->body ? "body" : "inputs",
               a->stopping ? "until the server stopped" : "past its timeout");
        answer_waiter(w);
        free(w);
        pthread_mutex_lock(&a->mu);
        pp = &a->head; /* the list may have changed while unlocked */
    }
}

/* Admits, in arrival order, every waiter that fits; a waiter that has
 * waited half its timeout and does not fit stops the ones behind it of its
 * kind (bodies, inputs), so memory that frees up is not taken from it by a
 * stream of smaller requests. a->mu held, dropped around decoding. */
static void admit_waiters(slim_server_admission *a)
{
    bool barrier[2] = {false, false}; /* [body] */
    int64_t now = slim_server_now_us();
    for (waiter **pp = &a->head; *pp && !a->stopping;) {
        waiter *w = *pp;
        if (barrier[w->body]) {
            pp = &w->next;
            continue;
        }
        if (w->body) {
            slim_err err = {0};
            take_result r = take_body(a, w->req, w->need, &err);
            if (r == TAKE_LATER) {
                barrier[1] = now - w->since >= (w->deadline - w->since) / 2;
                pp = &w->next;
                continue;
            }
            unlink_waiter(a, pp);
            pthread_mutex_unlock(&a->mu);
            if (r == TAKE_NEVER) {
                refuse_body_never(a, w->req, w->need, &err);
                answer_waiter(w);
            } else {
                atomic_fetch_add(&a->admitted_late, 1);
                MHD_resume_connection(w->req->conn); /* its body is read now */
            }
            free(w);
            pthread_mutex_lock(&a->mu);
            pp = &a->head;
            continue;
        }
        if (!slim__admission_fits_budget(a, w->need, w->alone)) {
            barrier[0] = w->alone || now - w->since >= (w->deadline - w->since) / 2;
            pp = &w->next;
            continue;
        }
        unlink_waiter(a, pp);
        if (w->ticket)
            slim__admission_ticket_reserve(a, w->ticket, w->need, w->alone);
        else
            reserve(a, w->req, w->need, w->alone);
        pthread_mutex_unlock(&a->mu);
        try_result r = w->ticket ? slim__admission_ticket_try(a, w->ticket)
                                 : try_decode(a, w->req);
        if (w->ticket) {
            if (r == SLIM__TRY_QUEUED)
                atomic_fetch_add(&a->admitted_late, 1);
        } else if (r == SLIM__TRY_ANSWERED) {
            w->req->task.t_done = -1;
            MHD_resume_connection(w->req->conn);
        } else if (r == SLIM__TRY_QUEUED) {
            atomic_fetch_add(&a->admitted_late, 1);
        }
        pthread_mutex_lock(&a->mu);
        if (r == SLIM__TRY_WAIT) { /* no memory yet: back in front */
            slim__admission_push_front(a, w);
            return;
        }
        free(w);
        pp = &a->head; /* the list may have changed while unlocked */
    }
}

static void *admission_main(void *arg)
{
    slim_server_admission *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        if (!a->head) {
            if (a->stopping)
                break;
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        admit_waiters(a);
        expire(a);
        if (!a->head)
            continue;
        /* Memory is freed by threads that do not know anyone waits: look
         * again soon even without a signal. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += ADMISSION_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

slim_server_admission *slim_server_admission_start(slim_server_repo *repo, int capacity,
                                                   slim_err *err)
{
    slim_server_admission *a = calloc(1, sizeof(*a));
    if (!a) {
        slim_errf(err, SLIM_ENOMEM, "out of memory");
        return NULL;
    }
    a->capacity = capacity > 0 ? capacity : 1;
    a->repo = repo;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, admission_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        slim_errf(err, SLIM_EINTERNAL, "cannot start the admission thread");
        return NULL;
    }
    return a;
}

void slim_server_admission_stop(slim_server_admission *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    bool joined = a->stopping;
    a->stopping = true; /* what waits is answered 503 by the next pass */
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (!joined)
        pthread_join(a->thread, NULL);
}

void slim_server_admission_free(slim_server_admission *a)
{
    if (!a)
        return;
    slim_server_admission_stop(a);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

void slim_server_admission_metrics(slim_server_admission *a, slim_server_buf *out)
{
    pthread_mutex_lock(&a->mu);
    int waiting = a->n_waiting;
    pthread_mutex_unlock(&a->mu);
    slim_server_buf_printf(out,
        "# HELP slim_requests_waiting_for_memory Requests waiting for memory for their body "
        "or inputs\n"
        "# TYPE slim_requests_waiting_for_memory gauge\n"
        "slim_requests_waiting_for_memory %d\n"
        "# HELP slim_requests_memory_wait_total Requests that waited for body or input memory, "
        "by outcome\n"
        "# TYPE slim_requests_memory_wait_total counter\n"
        "slim_requests_memory_wait_total{outcome=\"admitted\"} %llu\n"
        "slim_requests_memory_wait_total{outcome=\"timeout\"} %llu\n"
        "slim_requests_memory_wait_total{outcome=\"never_fits\"} %llu\n",
        waiting, (unsigned long long)atomic_load(&a->admitted_late),
        (unsigned long long)atomic_load(&a->timed_out),
        (unsigned long long)atomic_load(&a->never_fit));
}
