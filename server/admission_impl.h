/*
 * admission_impl.h - module-private: request_need.c's figures for
 * admission.c, and the line and budgets that admission.c and
 * admission_ticket.c (other transports' requests) share. Nothing else
 * includes it.
 */
#ifndef SLIM_SERVER_ADMISSION_IMPL_H
#define SLIM_SERVER_ADMISSION_IMPL_H

#include "slim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct slim_server_request slim_server_request;
typedef struct slim_server_repo slim_server_repo;
typedef struct slim_server_admission slim_server_admission;
typedef struct slim_server_admission_ticket slim_server_admission_ticket;
typedef struct slim_server_model slim_server_model;

#define SLIM__ADMISSION_DEFAULT_TIMEOUT_US ((int64_t)30 * 1000000)

/* One request in the line: an HTTP request (req, its connection
 * suspended) or another transport's (ticket). */
typedef struct waiter {
    struct waiter *next;
    slim_server_request *req;
    slim_server_admission_ticket *ticket;
    size_t need;
    int64_t since, deadline;
    int64_t peeked;          /* when its client was last looked at */
    bool alone;              /* retrying after running out of memory alone */
    bool body;               /* waiting for memory for its body (not yet read) */
} waiter;

struct slim_server_admission {
    slim_server_repo *repo;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    waiter *head, *tail;
    int n_waiting, capacity;
    size_t held;             /* decoded input bytes of unanswered requests */
    size_t bodies;           /* body bytes held in the allocator */
    bool exclusive;          /* a request admitted alone has not finished */
    bool stopping;
    atomic_uint_least64_t admitted_late, timed_out, never_fit;
};

/* admission.c's, for admission_ticket.c (a->mu held where it says). */
size_t slim__admission_limit(void);
size_t slim__admission_available_ever(slim_server_admission *a);
bool slim__admission_fits_budget(const slim_server_admission *a, size_t need, bool alone);
bool slim__admission_may_pass(const slim_server_admission *a, bool body);
void slim__admission_enqueue(slim_server_admission *a, waiter *w);
void slim__admission_push_front(slim_server_admission *a, waiter *w);
waiter *slim__admission_retry_waiter(slim_server_admission *a); /* a->mu not held */
void slim__admission_requeue_front(slim_server_admission *a, waiter *w); /* a->mu not held */

/* admission_ticket.c's, for admission.c's thread. */
typedef enum { SLIM__TRY_QUEUED, SLIM__TRY_WAIT, SLIM__TRY_ANSWERED } slim__try_result;
/* Starts a ticket whose bytes are counted already (a->mu not held). */
slim__try_result slim__admission_ticket_try(slim_server_admission *a,
                                            slim_server_admission_ticket *t);
/* Counts the ticket's inputs in the budget (alone: it runs alone, nothing
 * else is admitted until it is released); a->mu held. */
void slim__admission_ticket_reserve(slim_server_admission *a, slim_server_admission_ticket *t,
                                    size_t need, bool alone);
/* A waiting ticket past its own deadline (late: 504) or whose client left
 * (503); a->mu not held. */
void slim__admission_ticket_expire(slim_server_admission *a, slim_server_admission_ticket *t,
                                   bool late, int64_t timeout_us, bool from_request);
/* Answers a waiting ticket (a->mu not held); failure: SLIM_SERVER_FAIL_*. */
void slim__admission_ticket_refuse(slim_server_admission_ticket *t, int status, int failure,
                                   const char *msg);

/* What a request needs before it runs.
 * Under a CPU memory limit, the bytes its JSON header's tree can take are
 * reserved in the allocator while it is parsed (SLIM_EOOM: not now). */
slim_status slim__request_reserve_parse(slim_server_request *req, slim_err *err);
void slim__request_release_parse(slim_server_request *req);
typedef struct slim__request_need {
    size_t inputs;              /* its decoded inputs */
    size_t run;                 /* inputs + a one-row run's arena + its outputs (known ones) */
    bool known;                 /* the header parsed: the figures mean something */
    int64_t timeout_us;         /* its "timeout" parameter (0: none or not valid yet) */
} slim__request_need;
/* From its JSON header (parsed under the reservation above). */
slim__request_need slim__request_declared_need(const slim_server_request *req);
/* The answer's size at most, from its decoded inputs; 0 when an output's
 * shape depends on data. */
size_t slim__request_reply_bound(const slim_server_request *req);

#endif
