/*
 * routes.h - the endpoints (routes.c): what http.c calls once a request's
 * body is complete, and the inference path's steps that admission.c
 * drives (decode, submit).
 */
#ifndef SLIM_SERVER_ROUTES_H
#define SLIM_SERVER_ROUTES_H

#include "metrics.h"
#include "slim.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct slim_server_model slim_server_model;
typedef struct slim_server_request slim_server_request;

/* Serves one request whose body is complete. Either fills req->reply (and
 * sets reply_ready) or suspends the connection for an inference. */
void slim_server_route(slim_server_request *req);
/* Called on the HTTP thread when a suspended inference has been resumed. */
void slim_server_infer_finish(slim_server_request *req);
/* Decodes req's body into req->infer (and its "timeout" parameter into
 * req->timeout_us); SLIM_EOOM when the inputs do not fit in memory now. */
slim_status slim_server_infer_decode_request(slim_server_request *req, slim_err *err);
/* Whether the client on fd has gone (closed, or shut its sending side): a
 * peek, for suspended connections, which libmicrohttpd does not watch. */
bool slim_server_socket_gone(int fd);
/* Queues a decoded request on its model; answers 503 when the queue is
 * full. The connection may already be suspended (admission.c). */
void slim_server_infer_submit(slim_server_request *req);
/* routes_ext.c: GET (post false) or POST /v2/logging, and
 * /v2[/models/M]/trace/setting (model NULL: the global settings). */
void slim_server_route_logging(slim_server_request *req, bool post);
void slim_server_route_trace(slim_server_request *req, const char *model, bool post);
/* Counts a failed request of model m under reason `why`. */
void slim_server_count_failure(const slim_server_model *m, slim_server_failure why,
                               int64_t t_begin);

#endif
