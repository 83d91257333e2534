/*
 * auth.h - API keys (auth.c): --api-key, checked before a request's body
 * is read.
 */
#ifndef SLIM_SERVER_AUTH_H
#define SLIM_SERVER_AUTH_H

#include "buf.h"

#include <stdbool.h>

typedef struct slim_server slim_server;
typedef struct slim_server_request slim_server_request;

/* Whether req (its headers in, nothing of its body read) may go on. When
 * not, req->reply holds the 401 and the refusal is counted. */
bool slim_server_auth_check(slim_server_request *req);
/* slim_http_unauthorized_total, in Prometheus text. */
void slim_server_auth_metrics(slim_server *srv, slim_server_buf *out);

#endif
