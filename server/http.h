/*
 * http.h - one HTTP request while it is served (http.c gathers it on a
 * libmicrohttpd thread, routes.c answers it, admission.c may hold it), and
 * the HTTP layer's own metrics (connections.c).
 */
#ifndef SLIM_SERVER_HTTP_H
#define SLIM_SERVER_HTTP_H

#include "batcher.h"
#include "codec.h"
#include "log.h"
#include "slim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;
struct slim_block;
struct slim_server_conn;
typedef struct slim_server slim_server;

/* One HTTP request while it is being served. */
typedef struct slim_server_request {
    slim_server *srv;
    struct MHD_Connection *conn;
    struct slim_server_conn *sc;    /* its connection's deadlines; may be NULL */
    char method[16];
    char *url;
    char *body;
    size_t body_len, body_cap;
    size_t body_pad;                /* body - body_pad is the block (http.c aligns binary data) */
    bool too_large;
    /* Under --memory-limit a body of known length lives in the CPU
     * allocator (admission.c): its block, and the bytes counted for it. */
    struct slim_block *body_block;
    size_t body_held;
    bool body_waiting;              /* suspended until its body may be read */
    bool body_refused;              /* it may not: dropped as it comes, reply set */
    struct slim_block *parse_block; /* the JSON tree's reservation while it parses */
    long long infer_header_len;     /* from the request header; -1 if absent */
    int64_t t_begin;                /* when the body was complete */
    int64_t t_arrived;              /* when the headers were (the access log) */
    char id[SLIM_REQUEST_ID_MAX + 1]; /* X-Request-ID, given or made up */
    int64_t decode_ns;              /* decoding its inputs (statistics) */
    /* an answer waiting to be sent (set by a route or after a task) */
    bool reply_ready;
    slim_server_reply reply;
    bool logged;                    /* its access line is written */
    /* inference in progress */
    bool suspended;
    bool repo_op;                   /* suspended for a load/unload, not a run */
    /* Waited for its model's load (residency.c): routed again when resumed,
     * with the reference taken for it when the load finished. */
    bool residency_wait;
    struct slim_server_model *residency_model;
    int64_t declared_timeout_us;    /* its "timeout" parameter as read before decoding
                                       (admission: the deadline of a wait) */
    int64_t timeout_us;             /* the request's "timeout" parameter where the
                                       queue policy takes it (admission); 0: none */
    int client_fd;                  /* its socket, peeked at while suspended */
    size_t admitted_bytes;          /* its inputs' share of the admission budget */
    bool admitted_alone;            /* admitted with nothing else holding inputs */
    bool admission_counted;         /* its bytes are in the budget now */
    slim_server_infer infer;
    slim_server_task task;
} slim_server_request;

/* slim_http_connections and slim_http_timeouts_total, in Prometheus text. */
void slim_server_http_metrics(slim_server *srv, slim_server_buf *out);

#endif
