/*
 * admission.h - requests waiting for input memory under --memory-limit
 * (admission.c): a body is read, decoded and queued only when it fits;
 * otherwise the request waits, suspended, or is refused 503/507.
 */
#ifndef SLIM_SERVER_ADMISSION_H
#define SLIM_SERVER_ADMISSION_H

#include "buf.h"
#include "slim.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct slim_server_repo slim_server_repo;
typedef struct slim_server_request slim_server_request;
typedef struct slim_server_admission slim_server_admission;
typedef struct slim_server_model slim_server_model;

/* capacity: how many requests may wait at once (--queue-size); repo: whose
 * models' weights stay out of what a request can ever get. */
slim_server_admission *slim_server_admission_start(slim_server_repo *repo, int capacity,
                                                   slim_err *err);

/* A body of len bytes is about to be read (its headers are in): */
typedef enum {
    SLIM_SERVER_BODY_READ,      /* read it (into req->body when it was allocated here) */
    SLIM_SERVER_BODY_WAIT,      /* suspended; resumed with body_refused or room for it */
    SLIM_SERVER_BODY_ANSWERED,  /* req->reply is set (507: it can never fit; 503) */
} slim_server_body_result;
slim_server_body_result slim_server_admission_body(slim_server_admission *a,
                                                   slim_server_request *req, size_t len);
/* Gives the body's memory back (the request is done). */
void slim_server_admission_body_free(slim_server_admission *a, slim_server_request *req);
/* Decodes req (its model in req->task.model) and queues it on the model
 * when its inputs fit; otherwise it waits, suspended, or is answered 503 or
 * 507 (req->reply) without suspending. Returns whether req->reply is set. */
bool slim_server_admission_admit(slim_server_admission *a, slim_server_request *req);
/* req's inputs are freed: its share of the budget returns (once). */
void slim_server_admission_release(slim_server_admission *a, slim_server_request *req);
/* req ran out of memory even alone on its model. When other requests'
 * inputs held memory meanwhile, its own inputs are freed and it waits,
 * suspended, at the head of the line, to be admitted when no other inputs
 * are held and to run before anything else is admitted; returns true.
 * False when it already ran that way: the 507 stands. */
bool slim_server_admission_retry_alone(slim_server_admission *a, slim_server_request *req);
/* Answers every waiting request 503 and stops the thread; parking after
 * this answers at once. free also stops. */
void slim_server_admission_stop(slim_server_admission *a);
void slim_server_admission_free(slim_server_admission *a);
/* slim_requests_waiting_for_memory and the counters of what became of
 * them, in Prometheus text. */
void slim_server_admission_metrics(slim_server_admission *a, slim_server_buf *out);

/* ---- transport-neutral admission (admission_ticket.c) ----------------------
 * A request of another transport than HTTP's (a gRPC call, a stream's
 * message) waits in the same line as HTTP's, under the same budget: its
 * transport fills a ticket (what it declares, how it is started, how it is
 * answered) and keeps it alive until its inputs are freed. Its message is
 * outside the allocator (gRPC buffered it), so only its inputs count. */
typedef struct slim_server_admission_ticket slim_server_admission_ticket;
struct slim_server_admission_ticket {
    /* set by the transport before admit */
    const slim_server_model *model;
    int64_t t_begin;             /* its arrival (slim_server_now_us) */
    int64_t wait_timeout_us;     /* the queue policy's timeout; 0: the model's, or 30 s */
    int64_t run_deadline;        /* its own deadline (0: none): 504 if it passes waiting */
    int64_t run_timeout_us;
    bool timeout_from_request;   /* the deadline is its "timeout" (else the model's) */
    /* Decodes and queues it, or answers it itself (a bad request); false
     * with err set when its inputs found no memory now (nothing kept). On
     * the caller's thread or admission's. */
    bool (*start)(slim_server_admission_ticket *t, slim_err *err);
    /* Answers it with what HTTP would answer (http_status, message). */
    void (*answer)(slim_server_admission_ticket *t, int http_status, const char *msg);
    /* Whether its client left (NULL: never known). */
    bool (*gone)(slim_server_admission_ticket *t);
    /* slim_server_admission_ticket_need's figures */
    size_t inputs, run;
    bool known;
    /* admission's own */
    size_t admitted_bytes;
    bool counted;
    bool admitted_alone;         /* counted as the one request running alone */
    bool retried_alone;          /* slim_server_admission_ticket_retry_alone took it once */
};

/* One input as a request declares it (before anything is decoded). */
typedef struct slim_server_declared_input {
    const char *name;
    const char *datatype;        /* KServe's name: "FP32"... */
    const int64_t *shape;
    size_t ndim;
    size_t string_bytes;         /* BYTES: its elements' bytes, at most */
} slim_server_declared_input;
/* t->inputs, t->run, t->known from the declared inputs (t->model set). */
void slim_server_admission_ticket_need(slim_server_admission_ticket *t,
                                       const slim_server_declared_input *ins, size_t n);
/* Starts t when its inputs fit; otherwise it waits in the line (t->start
 * called later, on admission's thread), or is answered 507 (it can never
 * fit) or 503 (the line is full). */
void slim_server_admission_ticket_admit(slim_server_admission *a, slim_server_admission_ticket *t);
/* t's inputs are freed: its share of the budget returns (once). */
void slim_server_admission_ticket_release(slim_server_admission *a,
                                          slim_server_admission_ticket *t);
/* HTTP's retry alone (slim_server_admission_retry_alone) for a ticket: t
 * ran out of memory even alone on its model. Its share of the budget
 * returns and it waits at the head of the line until no other inputs are
 * held; then t->start is called again (on admission's thread), and nothing
 * else is admitted until t is released. The transport keeps what start
 * needs (its decoded inputs, the task reset to how it was submitted).
 * False, doing nothing, when it already retried this way, without a
 * limit, or while stopping: the 507 stands. */
bool slim_server_admission_ticket_retry_alone(slim_server_admission *a,
                                              slim_server_admission_ticket *t);

#endif
