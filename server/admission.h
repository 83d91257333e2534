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

#endif
