/*
 * metrics_port.h - /metrics on a port of its own (metrics_port.c), as
 * Triton serves it on 8002, for dashboards and scrapers that expect it
 * there; it stays on the HTTP port too. The page is the same on both:
 * the slim_* families and Triton's nv_* ones (metrics.c).
 *
 *     slim_server_metrics_port *mp = NULL;
 *     if (opts.metrics_port >= 0 &&
 *         !(mp = slim_server_metrics_port_start(&srv, 8002, &err))) ... err.msg ...
 *     ... slim_server_metrics_port_bound(mp) ...
 *     slim_server_metrics_port_stop(mp);  (before slim_server_stop)
 */
#ifndef SLIM_SERVER_METRICS_PORT_H
#define SLIM_SERVER_METRICS_PORT_H

#include "buf.h"
#include "server.h"

typedef struct slim_server_metrics_port slim_server_metrics_port;

/* Listens on srv's --host at port (0: a free one); NULL with err set when
 * it cannot. Only GET/HEAD /metrics is served there; with --api-key-metrics
 * it needs the API key as on the HTTP port. */
slim_server_metrics_port *slim_server_metrics_port_start(slim_server *srv, int port,
                                                         slim_err *err);
int slim_server_metrics_port_bound(const slim_server_metrics_port *mp);
void slim_server_metrics_port_stop(slim_server_metrics_port *mp); /* NULL is fine */

/* The whole /metrics page (both ports) into b; b->oom on failure. */
void slim_server_metrics_page(slim_server *srv, slim_server_buf *b);

#endif
