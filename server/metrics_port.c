/*
 * metrics_port.c - the /metrics page, and the port of its own that serves
 * it as Triton does (--metrics-port, default 8002).
 *
 * A separate libmicrohttpd daemon with one thread: a scrape every few
 * seconds needs no pool, and a scraper that hangs on this port cannot take
 * an HTTP thread from inference. It answers GET/HEAD /metrics only.
 */
#include "admission.h"
#include "auth.h"
#include "http.h"
#include "log.h"
#include "memory.h"
#include "metrics_port.h"
#include "residency.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct slim_server_metrics_port {
    slim_server *srv;
    struct MHD_Daemon *daemon;
    int port;
};

void slim_server_metrics_page(slim_server *srv, slim_server_buf *b)
{
    slim_server_metrics_render(&srv->metrics, b);
    slim_server_memory_metrics(&srv->repo, b);
    slim_server_admission_metrics(srv->admission, b);
    slim_server_residency_metrics(&srv->repo, b);
    slim_server_http_metrics(srv, b);
    slim_server_auth_metrics(srv, b);
}

static bool authorized(slim_server *srv, struct MHD_Connection *conn)
{
    const char *key = srv->opts.api_key;
    if (!key || !srv->opts.api_key_metrics)
        return true;
    /* auth.c's rule (Bearer or X-API-Key, constant time): this port builds
     * no HTTP-port request for slim_server_auth_check. */
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    const char *xkey = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-Key");
    if (slim_server_auth_key_ok(key, auth, xkey))
        return true;
    atomic_fetch_add(&srv->unauthorized, 1);
    return false;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type,
                              char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    slim_server_metrics_port *mp = cls;
    /* The first call has only the headers; a body, if any, is dropped. */
    if (!*state) {
        *state = mp;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    static char not_found[] = "{\"error\":\"only /metrics is served on the metrics port\"}";
    static char not_allowed[] = "{\"error\":\"use GET\"}";
    static char no_key[] = "{\"error\":\"/metrics needs the API key: send \\\"Authorization: "
                           "Bearer KEY\\\" or \\\"X-API-Key: KEY\\\"\"}";
    if (strcmp(url, "/metrics") != 0)
        return answer(conn, 404, "application/json", not_found, strlen(not_found),
                      MHD_RESPMEM_PERSISTENT);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(conn, 405, "application/json", not_allowed, strlen(not_allowed),
                      MHD_RESPMEM_PERSISTENT);
    if (!authorized(mp->srv, conn))
        return answer(conn, 401, "application/json", no_key, strlen(no_key),
                      MHD_RESPMEM_PERSISTENT);
    slim_server_buf b = {0};
    slim_server_metrics_page(mp->srv, &b);
    if (b.oom) {
        slim_server_buf_free(&b);
        return MHD_NO;
    }
    return answer(conn, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len,
                  MHD_RESPMEM_MUST_FREE);
}

slim_server_metrics_port *slim_server_metrics_port_start(slim_server *srv, int port,
                                                         slim_err *err)
{
    slim_server_metrics_port *mp = calloc(1, sizeof(*mp));
    if (!mp) {
        slim_errf(err, SLIM_ENOMEM, "out of memory");
        return NULL;
    }
    mp->srv = srv;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD; /* errors: ours, below */
    const char *host = strcmp(srv->opts.host, "localhost") == 0 ? "127.0.0.1" : srv->opts.host;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        free(mp);
        slim_errf(err, SLIM_EINVAL, "--host %s: not an IPv4 or IPv6 address", srv->opts.host);
        return NULL;
    }
    mp->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, mp,
                                  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                  MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                                  MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_END);
    if (!mp->daemon) {
        free(mp);
        slim_errf(err, SLIM_EIO, "could not listen on %s:%d for --metrics-port (is the port "
                  "in use? 0 turns the metrics port off)", srv->opts.host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(mp->daemon, MHD_DAEMON_INFO_BIND_PORT);
    mp->port = info ? info->port : port;
    return mp;
}

int slim_server_metrics_port_bound(const slim_server_metrics_port *mp)
{
    return mp ? mp->port : 0;
}

void slim_server_metrics_port_stop(slim_server_metrics_port *mp)
{
    if (!mp)
        return;
    MHD_stop_daemon(mp->daemon);
    free(mp);
}
