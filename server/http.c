/*
 * http.c - libmicrohttpd glue: gathering bodies, sending replies, starting
 * and stopping the daemon.
 *
 * MHD runs a small pool of polling threads (epoll on Linux). They parse and
 * answer requests but never run a model: an inference suspends its
 * connection (MHD_suspend_connection), the worker that ran it resumes it,
 * and MHD calls us again to write the answer. So health checks and /metrics
 * are answered even while every worker is busy.
 *
 * Each request gets a slim_server_request, freed by the completion callback
 * (which also fires when the client goes away); `in_flight` counts them, so
 * shutdown can wait for the ones that are still running.
 */
#include "server.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define SHUTDOWN_GRACE_S 60

/* ---- small helpers ------------------------------------------------------ */

int64_t slim_server_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool buf_reserve(slim_server_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void slim_server_buf_append(slim_server_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void slim_server_buf_puts(slim_server_buf *b, const char *s)
{
    slim_server_buf_append(b, s, strlen(s));
}

void slim_server_buf_printf(slim_server_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[128];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        slim_server_buf_append(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void slim_server_buf_json_string(slim_server_buf *b, const char *s)
{
    slim_server_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            slim_server_buf_append(b, esc, 2);
        } else if (*p < 0x20) {
            slim_server_buf_printf(b, "\\u%04x", *p);
        } else {
            slim_server_buf_append(b, p, 1);
        }
    }
    slim_server_buf_puts(b, "\"");
}

void slim_server_buf_free(slim_server_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void slim_server_reply_free(slim_server_reply *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
    r->infer_header_len = -1;
}

void slim_server_reply_error(slim_server_reply *r, int status, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    slim_server_reply_free(r);
    slim_server_buf b = {0};
    slim_server_buf_puts(&b, "{\"error\":");
    slim_server_buf_json_string(&b, msg);
    slim_server_buf_puts(&b, "}");
    r->status = b.oom ? 500 : status;
    r->body = b.data;
    r->len = b.len;
    r->content_type = "application/json";
}

void slim_server_reply_json(slim_server_reply *r, int status, cJSON *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text) {
        slim_server_reply_error(r, 500, "out of memory while writing the response");
        return;
    }
    slim_server_reply_free(r);
    r->status = status;
    r->body = text;
    r->len = strlen(text);
    r->content_type = "application/json";
}

/* ---- MHD callbacks ------------------------------------------------------ */

static enum MHD_Result send_reply(slim_server_request *req)
{
    slim_server_reply *r = &req->reply;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp)
        return MHD_NO; /* the reply (and body) are freed with the request */
    r->body = NULL;    /* MHD owns it now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (r->infer_header_len >= 0) {
        char n[32];
        snprintf(n, sizeof(n), "%lld", r->infer_header_len);
        MHD_add_response_header(resp, "Inference-Header-Content-Length", n);
    }
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after_s > 0) {
        char n[16];
        snprintf(n, sizeof(n), "%d", r->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, n);
    }
    enum MHD_Result ok = MHD_queue_response(req->conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static slim_server_request *request_new(slim_server *srv, struct MHD_Connection *conn,
                                        const char *url, const char *method)
{
    slim_server_request *req = calloc(1, sizeof(*req));
    if (!req || !(req->url = strdup(url))) {
        free(req);
        return NULL;
    }
    req->srv = srv;
    req->conn = conn;
    snprintf(req->method, sizeof(req->method), "%s", method);
    req->infer_header_len = -1;
    req->reply.infer_header_len = -1;
    atomic_fetch_add(&srv->in_flight, 1);
    return req;
}

static void request_free(slim_server_request *req)
{
    slim_server_infer_free(&req->infer);
    slim_server_admission_release(req->srv->admission, req);
    slim_tensors_free(req->task.outputs, req->task.n_outputs);
    slim_server_model_release(req->task.model);
    slim_server_reply_free(&req->reply);
    free(req->body);
    free(req->url);
    atomic_fetch_sub(&req->srv->in_flight, 1);
    free(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    if (*con_cls)
        request_free(*con_cls);
    *con_cls = NULL;
}

static bool body_append(slim_server_request *req, const char *data, size_t n)
{
    size_t max = req->srv->opts.max_request_bytes;
    if (req->body_len + n > max)
        return false;
    if (req->body_len + n + 1 > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap : 4096;
        while (cap < req->body_len + n + 1)
            cap *= 2;
        char *p = realloc(req->body, cap);
        if (!p)
            return false;
        req->body = p;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, n);
    req->body_len += n;
    req->body[req->body_len] = '\0';
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    slim_server *srv = cls;
    slim_server_request *req = *con_cls;
    if (!req) {
        if (!(req = request_new(srv, conn, url, method)))
            return MHD_NO;
        *con_cls = req;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->opts.max_request_bytes) {
            /* A client that waits for "100 Continue" gets the 413 before it
             * sends anything (MHD then closes the connection). Others are
             * already sending: read and drop the body, then answer, so they
             * see the 413 rather than a reset connection. */
            const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                             MHD_HTTP_HEADER_EXPECT);
            req->too_large = true;
            if (expect && strcasecmp(expect, "100-continue") == 0) {
                slim_server_reply_error(&req->reply, 413,
                                        "request body of %s bytes exceeds the limit of %zu bytes "
                                        "(--max-request-bytes)", cl, srv->opts.max_request_bytes);
                req->reply_ready = true;
                return send_reply(req);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!req->too_large && !req->reply_ready && !body_append(req, upload_data, *upload_data_size)) {
            req->too_large = true;
            free(req->body);
            req->body = NULL;
            req->body_len = req->body_cap = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->reply_ready && !req->suspended)
        return MHD_YES; /* already answered (the early 413) */

    if (req->suspended) { /* resumed by the worker */
        req->suspended = false;
        slim_server_infer_finish(req);
        if (req->suspended) /* to run again (admission.c) */
            return MHD_YES;
    } else if (req->too_large) {
        slim_server_reply_error(&req->reply, 413,
                                "request body exceeds the limit of %zu bytes (--max-request-bytes)",
                                srv->opts.max_request_bytes);
    } else {
        req->t_begin = slim_server_now_us();
        const char *hl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     "Inference-Header-Content-Length");
        if (hl) {
            char *end;
            long long v = strtoll(hl, &end, 10);
            if (!*hl || *end || v < 0) {
                slim_server_reply_error(&req->reply, 400,
                                        "Inference-Header-Content-Length \"%s\" is not a byte count", hl);
                req->reply_ready = true;
                return send_reply(req);
            }
            req->infer_header_len = v;
        }
        slim_server_route(req);
        if (req->suspended)
            return MHD_YES;
    }
    req->reply_ready = true;
    return send_reply(req);
}

/* ---- start and stop ----------------------------------------------------- */

static slim_status bind_address(const slim_server_opts *opts, struct sockaddr_storage *ss,
                                unsigned *flags, slim_err *err)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    const char *host = strcmp(opts->host, "localhost") == 0 ? "127.0.0.1" : opts->host;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)opts->port);
        return SLIM_OK;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)opts->port);
        *flags |= MHD_USE_IPv6;
        return SLIM_OK;
    }
    return slim_errf(err, SLIM_EINVAL, "--host %s: not an IPv4 or IPv6 address", opts->host);
}

slim_status slim_server_start(slim_server *srv, const slim_server_opts *opts, slim_err *err)
{
    memset(srv, 0, sizeof(*srv));
    srv->opts = *opts;
    atomic_init(&srv->in_flight, 0);
    slim_server_metrics_init(&srv->metrics);
    struct sockaddr_storage addr;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    slim_status s = bind_address(opts, &addr, &flags, err);
    if (s != SLIM_OK)
        goto err_metrics;
    if (!(srv->admission = slim_server_admission_start(opts->queue_capacity, err))) {
        s = err->status;
        goto err_metrics;
    }
    if ((s = slim_server_repo_open(&srv->repo, opts->repository, &srv->metrics, opts->workers,
                                   opts->queue_capacity, opts->device, err)) != SLIM_OK)
        goto err_repo;
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)opts->port, NULL, NULL, on_request, srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opts->http_threads,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
        MHD_OPTION_END);
    if (!srv->daemon) {
        s = slim_errf(err, SLIM_EIO, "could not listen on %s:%d (is the port in use?)", opts->host,
                      opts->port);
        goto err_repo;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opts->port;
    return SLIM_OK;

err_repo:
    slim_server_repo_close(&srv->repo);
    slim_server_admission_free(srv->admission);
err_metrics:
    slim_server_metrics_free(&srv->metrics);
    return s;
}

void slim_server_stop(slim_server *srv)
{
    /* No new connections; open ones may still finish what they sent. */
    atomic_store(&srv->stopping, true);
    MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    /* Requests waiting for input memory are answered 503 now. */
    slim_server_admission_stop(srv->admission);
    /* MHD_stop_daemon must not meet a suspended connection, so wait for
     * every inference to come back first (bounded, in case a client keeps
     * a connection busy forever). */
    int64_t deadline = slim_server_now_us() + (int64_t)SHUTDOWN_GRACE_S * 1000000;
    while (atomic_load(&srv->in_flight) > 0 && slim_server_now_us() < deadline)
        usleep(10000);
    MHD_stop_daemon(srv->daemon);
    /* Stops each model's instances as its last reference goes. */
    slim_server_repo_close(&srv->repo);
    slim_server_admission_free(srv->admission);
    slim_server_metrics_free(&srv->metrics);
}
