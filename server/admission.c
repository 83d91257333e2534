/*
 * admission.c - when a request's inputs may take memory, and what happens
 * while they may not.
 *
 * An infer request's input tensors are allocated when its body is decoded,
 * from the CPU allocator, under --memory-limit. Two things went wrong when
 * every request decoded at once: while batches held the memory, a request's
 * own inputs could not be allocated and the client got 400 for a request
 * that runs fine a moment later; and the inputs of requests waiting in the
 * queues took the memory the runs needed, so runs failed even alone. So:
 *
 *   - Decoded inputs of requests not yet answered may hold at most a
 *     quarter of the limit (the budget); the runs keep the rest. The first
 *     request is admitted whatever its size, so something always runs.
 *   - A request past the budget, or whose decode finds no memory now, waits
 *     here with its connection suspended (holding only its body), and one
 *     thread admits waiters in arrival order as budget and memory return.
 *   - A request whose inputs alone exceed the limit is answered 507 at once;
 *     one that waits past its deadline (the request's "timeout", the
 *     model's queue timeout, or 30 s) 503 with Retry-After; one that finds
 *     --queue-size requests already waiting 503 at once.
 *
 * Without a limit nothing waits: admission is a pass-through.
 */
#include "server.h"
#include "device.h"

#include <microhttpd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ADMISSION_POLL_MS 5
#define ADMISSION_DEFAULT_TIMEOUT_US ((int64_t)30 * 1000000)
#define ADMISSION_BUDGET_DIVISOR 4  /* the budget is limit / this */

typedef struct waiter {
    struct waiter *next;
    slim_server_request *req;
    size_t need;
    int64_t deadline;
    bool alone;              /* retrying after running out of memory alone */
} waiter;

struct slim_server_admission {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    waiter *head, *tail;
    int n_waiting, capacity;
    size_t held;             /* decoded input bytes of unanswered requests */
    bool exclusive;          /* a request admitted alone has not finished */
    bool stopping;
    atomic_uint_least64_t admitted_late, timed_out, never_fit;
};

static size_t limit_now(void)
{
    return slim_allocator_limit(slim_device_cpu()->alloc);
}

/* Sum of the request's declared input bytes, from the JSON header; 0 when
 * it cannot tell (decode will say why). */
static size_t declared_input_bytes(const slim_server_request *req)
{
    size_t len = req->infer_header_len >= 0 && (size_t)req->infer_header_len <= req->body_len
                     ? (size_t)req->infer_header_len : req->body_len;
    cJSON *root = req->body ? cJSON_ParseWithLength(req->body, len) : NULL;
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    double total = 0;
    for (const cJSON *in = cJSON_IsArray(ins) ? ins->child : NULL; in; in = in->next) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
        slim_dtype t = cJSON_IsString(dt) ? slim_server_dtype_from_kserve(dt->valuestring)
                                          : SLIM_DTYPE_UNDEFINED;
        if (t == SLIM_DTYPE_UNDEFINED || !cJSON_IsArray(shape))
            continue;
        double n = 1;
        for (const cJSON *d = shape->child; d; d = d->next)
            n *= cJSON_IsNumber(d) && d->valuedouble > 0 ? d->valuedouble : 0;
        total += n * (double)slim_dtype_size(t);
    }
    cJSON_Delete(root);
    return total > 1e18 ? (size_t)1 << 60 : (size_t)total;
}

/* Whether `need` more bytes may be admitted now; a->mu held. A request
 * retrying alone waits until no other inputs are held, and nothing else is
 * admitted until it has finished. */
static bool fits_budget(const slim_server_admission *a, size_t need, bool alone)
{
    size_t limit = limit_now();
    if (a->exclusive)
        return false;
    if (alone)
        return a->held == 0;
    return !limit || a->held == 0 || a->held + need <= limit / ADMISSION_BUDGET_DIVISOR;
}

typedef enum { TRY_QUEUED, TRY_WAIT, TRY_ANSWERED } try_result;

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

/* Decodes req with `need` bytes already reserved in a->held (a->mu not
 * held) and queues it; on failure gives the reservation back. */
static try_result try_decode(slim_server_admission *a, slim_server_request *req, size_t need)
{
    slim_err err = {0};
    slim_status s = slim_server_infer_decode_request(req, &err);
    if (s == SLIM_OK) {
        slim_server_infer_submit(req);
        return TRY_QUEUED;
    }
    slim_server_admission_release(a, req);
    if (s == SLIM_EOOM)
        return TRY_WAIT;
    slim_server_count_failure(req->task.model, SLIM_SERVER_FAIL_BAD_REQUEST, req->t_begin);
    slim_server_reply_error(&req->reply, s == SLIM_ENOMEM ? 500 : 400, "%s", err.msg);
    return TRY_ANSWERED;
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
    slim_server_count_failure(req->task.model, SLIM_SERVER_FAIL_MEMORY, req->t_begin);
    slim_server_reply_error(&req->reply, status, "%s", msg);
    if (status == 503)
        req->reply.retry_after_s = 1;
}

bool slim_server_admission_admit(slim_server_admission *a, slim_server_request *req)
{
    const slim_server_model *m = req->task.model;
    size_t limit = limit_now();
    size_t need = limit ? declared_input_bytes(req) : 0;
    if (limit && need > limit) {
        atomic_fetch_add(&a->never_fit, 1);
        refuse(req, 507, "model '%s': the request's inputs (%zu bytes) exceed the memory limit "
               "of the cpu device (%zu bytes, --memory-limit)", m->name, need, limit);
        return true;
    }
    pthread_mutex_lock(&a->mu);
    /* Nobody overtakes a waiting request. */
    bool now = !a->head && fits_budget(a, need, false);
    if (now)
        reserve(a, req, need, false);
    pthread_mutex_unlock(&a->mu);
    if (now) {
        try_result r = try_decode(a, req, need);
        if (r != TRY_WAIT)
            return r == TRY_ANSWERED;
    }
    int64_t timeout = req->timeout_us > 0 ? req->timeout_us
                      : m->cfg.batching.default_timeout_us > 0 ? m->cfg.batching.default_timeout_us
                                                               : ADMISSION_DEFAULT_TIMEOUT_US;
    waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_lock(&a->mu);
    if (!w || a->stopping || a->n_waiting >= a->capacity) {
        int waiting = a->n_waiting;
        pthread_mutex_unlock(&a->mu);
        free(w);
        refuse(req, 503, "model '%s': no memory for the request's inputs now, and %d requests "
               "already wait for memory; retry later", m->name, waiting);
        return true;
    }
    /* Suspended before the thread can see it: the thread may resume it. */
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    w->req = req;
    w->need = need;
    w->deadline = slim_server_now_us() + timeout;
    if (a->tail)
        a->tail->next = w;
    else
        a->head = w;
    a->tail = w;
    a->n_waiting++;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return false;
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
    pthread_cond_signal(&a->cv); /* a waiter may fit now */
    pthread_mutex_unlock(&a->mu);
}

static void push_front(slim_server_admission *a, waiter *w)
{
    w->next = a->head;
    a->head = w;
    if (!a->tail)
        a->tail = w;
    a->n_waiting++;
}

bool slim_server_admission_retry_alone(slim_server_admission *a, slim_server_request *req)
{
    if (!a || req->admitted_alone || !limit_now())
        return false;
    waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return false;
    pthread_mutex_lock(&a->mu);
    bool stopping = a->stopping;
    pthread_mutex_unlock(&a->mu);
    if (stopping) {
        free(w);
        return false;
    }
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
    const slim_server_model *m = t->model;
    int64_t timeout = req->timeout_us > 0 ? req->timeout_us
                      : m->cfg.batching.default_timeout_us > 0 ? m->cfg.batching.default_timeout_us
                                                               : ADMISSION_DEFAULT_TIMEOUT_US;
    w->req = req;
    w->need = need;
    w->alone = true;
    w->deadline = slim_server_now_us() + timeout;
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    pthread_mutex_lock(&a->mu);
    push_front(a, w);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
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

/* Answers every waiter past its deadline (all of them when stopping);
 * a->mu held, dropped around each answer. */
static void expire(slim_server_admission *a)
{
    int64_t now = slim_server_now_us();
    for (waiter **pp = &a->head; *pp;) {
        waiter *w = *pp;
        if (!a->stopping && now < w->deadline) {
            pp = &w->next;
            continue;
        }
        unlink_waiter(a, pp);
        pthread_mutex_unlock(&a->mu);
        atomic_fetch_add(&a->timed_out, 1);
        refuse(w->req, 503, "model '%s': the request waited for memory for its inputs %s; "
               "retry later", w->req->task.model->name,
               a->stopping ? "until the server stopped" : "past its timeout");
        w->req->task.t_done = -1; /* infer_finish: the reply is set */
        MHD_resume_connection(w->req->conn);
        free(w);
        pthread_mutex_lock(&a->mu);
        pp = &a->head; /* the list may have changed while unlocked */
    }
}

/* Admits waiters from the head while they fit; a->mu held, dropped around
 * decoding. */
static void admit_waiters(slim_server_admission *a)
{
    while (a->head && !a->stopping && fits_budget(a, a->head->need, a->head->alone)) {
        waiter *w = a->head;
        unlink_waiter(a, &a->head);
        reserve(a, w->req, w->need, w->alone);
        pthread_mutex_unlock(&a->mu);
        try_result r = try_decode(a, w->req, w->need);
        if (r == TRY_ANSWERED) {
            w->req->task.t_done = -1;
            MHD_resume_connection(w->req->conn);
        } else if (r == TRY_QUEUED) {
            atomic_fetch_add(&a->admitted_late, 1);
        }
        pthread_mutex_lock(&a->mu);
        if (r == TRY_WAIT) { /* no memory yet: back at the head */
            push_front(a, w);
            return;
        }
        free(w);
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

slim_server_admission *slim_server_admission_start(int capacity, slim_err *err)
{
    slim_server_admission *a = calloc(1, sizeof(*a));
    if (!a) {
        slim_errf(err, SLIM_ENOMEM, "out of memory");
        return NULL;
    }
    a->capacity = capacity > 0 ? capacity : 1;
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
        "# HELP slim_requests_waiting_for_memory Infer requests whose inputs wait for memory\n"
        "# TYPE slim_requests_waiting_for_memory gauge\n"
        "slim_requests_waiting_for_memory %d\n"
        "# HELP slim_requests_memory_wait_total Infer requests that waited for input memory, "
        "by outcome\n"
        "# TYPE slim_requests_memory_wait_total counter\n"
        "slim_requests_memory_wait_total{outcome=\"admitted\"} %llu\n"
        "slim_requests_memory_wait_total{outcome=\"timeout\"} %llu\n"
        "slim_requests_memory_wait_total{outcome=\"never_fits\"} %llu\n",
        waiting, (unsigned long long)atomic_load(&a->admitted_late),
        (unsigned long long)atomic_load(&a->timed_out),
        (unsigned long long)atomic_load(&a->never_fit));
}
