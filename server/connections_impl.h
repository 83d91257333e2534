/*
 * connections_impl.h - module-private: connection tracking for http.c
 * (connections.c). Every connection MHD opens gets a slim_server_conn (its
 * socket context) from "started" to "closed"; its phase and deadline are
 * guarded by srv->conns_mu.
 */
#ifndef SLIM_SERVER_CONNECTIONS_IMPL_H
#define SLIM_SERVER_CONNECTIONS_IMPL_H

#include "server.h"

#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

typedef enum {
    CONN_IDLE,      /* no request in progress (maybe headers arriving) */
    CONN_BODY,      /* headers in, the body not yet complete */
    CONN_BUSY,      /* routed: running, suspended or answering */
    CONN_CLOSING,   /* a deadline passed, or it gave way: the socket is shut down */
} conn_phase;

/* One open connection, from MHD's "started" to its "closed" notification;
 * every field is guarded by srv->conns_mu. MHD closes the socket only after
 * "closed", which takes the same lock, so under the lock fd is still ours
 * to write to and shut down. */
struct slim_server_conn {
    int fd;
    conn_phase phase;
    bool control_in_url;            /* the request's path or query decoded to a control byte */
    bool lane;                      /* past --max-connections: health checks only */
    bool sender;                    /* has asked for an inference: the batchers count it */
    int64_t deadline;               /* monotonic us; 0: none */
    struct slim_server_conn *prev, *next;
};

/* MHD's callbacks: accept policy, connection notification, URL unescaping
 * (cls: the server). */
enum MHD_Result slim__conn_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void slim__conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
size_t slim__conn_unescape(void *cls, struct MHD_Connection *conn, char *s);
/* MHD's own connection limit: high enough never to bind before ours. */
unsigned slim__conn_mhd_limit(const slim_server_opts *opts);

/* The connection's tracking (NULL: one we could not track, left to MHD's
 * timeout). */
struct slim_server_conn *slim__conn_of(struct MHD_Connection *conn);
/* Moves c to phase, with that phase's deadline; false when a deadline
 * already closed it (c NULL: true). */
bool slim__conn_set(slim_server *srv, struct slim_server_conn *c, conn_phase phase);
bool slim__conn_closing(slim_server *srv, struct slim_server_conn *c);
/* Whether the request's path or query held a control byte; clears it. */
bool slim__conn_take_control_mark(slim_server *srv, struct slim_server_conn *c);
/* c asks for an inference: from now until it closes, the batchers count it
 * as a client that may send another (batcher.c, "Waiting only when the
 * batch can grow"). Once per connection; c NULL: nothing. */
void slim__conn_mark_sender(slim_server *srv, struct slim_server_conn *c);
/* Whether c came past --max-connections (it may only ask for health). */
bool slim__conn_is_lane(slim_server *srv, struct slim_server_conn *c);

/* The deadlines' lock, clock and thread: started before MHD, stopped after. */
slim_status slim__conn_watchdog_start(slim_server *srv, slim_err *err);
void slim__conn_watchdog_stop(slim_server *srv);

#endif
