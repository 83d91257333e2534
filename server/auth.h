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
/* The rule itself, for other transports (gRPC metadata): whether
 * "Authorization: Bearer KEY" (auth) or "X-API-Key: KEY" (xkey), either
 * may be NULL, carries key. Constant time in the key's length. */
bool slim_server_auth_key_ok(const char *key, const char *auth, const char *xkey);
/* slim_http_unauthorized_total, in Prometheus text. */
void slim_server_auth_metrics(slim_server *srv, slim_server_buf *out);

#endif
