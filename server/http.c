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
 *
 * Connections, their deadlines and how many there may be are in
 * connections.c. Requests with a body that cannot be framed or is declared
 * too large are answered at the first call, before any of the body is read.
 */
#include "admission.h"
#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "connections_impl.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "repository.h"
#include "residency.h"
#include "routes.h"
#include "server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* MHD's own inactivity timeout is a backstop behind our deadlines: it must
 * fire later than they do, or it would close a late body without its 408. */
#define MHD_TIMEOUT_MARGIN_S 10
/* libmicrohttpd lines (one per refused connection, for one) a second before
 * the rest are only counted: a flood of connections must not fill a disk. */
#define LOG_LINES_PER_S 20
/* Bodies of requests other than inferences (repository load/unload/index,
 * debug): a small JSON object each. Held far below --max-request-bytes,
 * since their JSON is parsed outside any memory admission: 64 MiB of
 * "[0,0,..." would take 2.6 GB of cJSON nodes. */
#define CONTROL_BODY_MAX 65536
/* A body is allocated at its Content-Length up to this much at once. */
#define BODY_PREALLOC_MAX ((size_t)8 << 20)
#define BODY_ALIGN 64               /* as infer_codec.c reads binary tensors in place */
/* Body buffers kept for the next bodies (body_take): from the heap's mmap
 * threshold (memory.c fixes it at 128 KiB) up to BODY_KEEP_MAX, at most
 * BODY_KEEP of them and BODY_KEEP_BYTES in all, each freed once unused for
 * BODY_KEEP_US. */
#define BODY_KEEP_MIN ((size_t)128 << 10)
#define BODY_KEEP_MAX ((size_t)1 << 20)
#define BODY_KEEP 16
#define BODY_KEEP_BYTES ((size_t)4 << 20)
#define BODY_KEEP_US 2000000

static bool is_infer(const char *url)
{
    size_t n = strlen(url);
    return n >= 6 && strcmp(url + n - 6, "/infer") == 0;
}

/* The most body bytes this request may send. */
static size_t body_limit(const slim_server_request *req)
{
    return is_infer(req->url) ? req->srv->opts.max_request_bytes : CONTROL_BODY_MAX;
}

static const char *body_limit_name(const slim_server_request *req)
{
    return body_limit(req) == req->srv->opts.max_request_bytes ? "--max-request-bytes"
                                                                : "requests other than infer";
}

/* ---- what can be refused before the body -------------------------------- */

typedef struct header_counts {
    int content_length, transfer_encoding, infer_header;
} header_counts;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    header_counts *n = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        n->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        n->transfer_encoding++;
    else if (strcasecmp(key, "Inference-Header-Content-Length") == 0)
        n->infer_header++;
    return MHD_YES;
}

/* Decimal digits only: strtoll would also take " 112", "+112" or "-0". */
static bool parse_byte_count(const char *s, long long *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 18 || strspn(s, "0123456789") != n)
        return false;
    *out = strtoll(s, NULL, 10);
    return true;
}

/* Checks what the headers say about the body. MHD frames the body by the
 * first Content-Length it sees, or by Transfer-Encoding when both are
 * present, so any doubt about where a request ends is refused outright: a
 * proxy in front could have framed it differently. Returns whether
 * req->reply now holds the answer. */
static bool refuse_framing(slim_server_request *req)
{
    struct MHD_Connection *conn = req->conn;
    slim_server_reply *r = &req->reply;
    header_counts n = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &n);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *hl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 "Inference-Header-Content-Length");
    size_t max = body_limit(req);
    if (n.content_length > 1)
        slim_server_reply_error(r, 400, "Content-Length is given %d times; give it once",
                                n.content_length);
    else if (n.transfer_encoding > 1)
        slim_server_reply_error(r, 400, "Transfer-Encoding is given %d times; give it once",
                                n.transfer_encoding);
    else if (cl && te)
        slim_server_reply_error(r, 400, "both Content-Length and Transfer-Encoding are given; "
                                "the body's length is ambiguous, give one");
    else if (te && strcasecmp(te, "chunked") != 0)
        slim_server_reply_error(r, 501, "Transfer-Encoding \"%s\" is not supported; send the "
                                "body as it is or chunked", te);
    else if (n.infer_header > 1)
        slim_server_reply_error(r, 400, "Inference-Header-Content-Length is given %d times; "
                                "give it once", n.infer_header);
    else if (hl && !parse_byte_count(hl, &req->infer_header_len))
        slim_server_reply_error(r, 400, "Inference-Header-Content-Length \"%s\" is not a byte "
                                "count (decimal digits only)", hl);
    else if (cl && strtoull(cl, NULL, 10) > max)
        /* Before any of the body is read. MHD closes the connection after
         * the reply; a client still sending may see that as a reset, one
         * that waits for "100 Continue" or reads while it sends sees 413. */
        slim_server_reply_error(r, 413, "request body of %s bytes exceeds the limit of %zu "
                                "bytes (%s)", cl, max, body_limit_name(req));
    else
        return false;
    return true;
}

/* ---- MHD callbacks ------------------------------------------------------ */

static enum MHD_Result send_reply(slim_server_request *req)
{
    slim_server_reply *r = &req->reply;
    size_t size = slim_server_reply_size(r);
    struct MHD_Response *resp = slim_server_reply_response(r);
    if (!resp)
        return MHD_NO; /* the reply (and body) are freed with the request */
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
    if (r->auth_challenge)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    MHD_add_response_header(resp, "X-Request-ID", req->id);
    if (slim__conn_is_lane(req->srv, req->sc)) /* one reply, then its slot is free */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(req->conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    req->logged = true;
    slim_server_log_access(req->id, req->method, req->url, r->status,
                           (double)(slim_server_now_us() - req->t_arrived) / 1000.0, size);
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
    req->t_arrived = slim_server_now_us();
    snprintf(req->method, sizeof(req->method), "%s", method);
    /* The client's id when it is sane, so its logs and ours line up. */
    const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-ID");
    if (slim_server_request_id_valid(id))
        snprintf(req->id, sizeof(req->id), "%s", id);
    else
        slim_server_request_id_new(req->id);
    req->infer_header_len = -1;
    req->reply.infer_header_len = -1;
    atomic_fetch_add(&srv->in_flight, 1);
    return req;
}

/* ---- body buffers ---------------------------------------------------------- */

/* A body over the heap's mmap threshold is a fresh mapping per request:
 * its pages fault in as the body is copied into it (37 for a 150 KB
 * image), and unmapping it
 * interrupts every core running one of the server's threads to flush
 * their TLBs, the model's kernel threads included. So the last few such
 * buffers are kept and handed to the next bodies that fit: a client
 * sending images one after another reuses one buffer, and 8 clients whose
 * requests are batched together (all 8 bodies in flight at once, then all
 * freed as the batch is answered) reuse 8. Two were kept at first, so 6 of
 * a batch's 8 bodies faulted in afresh: 23 minor faults per request at
 * c=8 against 0.5 at c=1 (bench_serving's cnn). Bounded: BODY_KEEP
 * buffers of at most BODY_KEEP_MAX bytes, BODY_KEEP_BYTES (4 MiB) in all,
 * which may stay resident while the server is idle; one not reused for
 * BODY_KEEP_US is freed at the next take or give, so a burst of large bodies does not
 * leave its buffers behind for long under a different load. They are
 * plain malloc blocks: realloc and free still apply to them. */
static struct {
    pthread_mutex_t mu;
    char *buf[BODY_KEEP];
    size_t cap[BODY_KEEP];
    int64_t since[BODY_KEEP];
    size_t bytes; /* the sum of cap over the kept buffers */
} kept = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under kept.mu: frees the buffers unused for BODY_KEEP_US. */
static void body_drop_stale(int64_t now)
{
    for (int i = 0; i < BODY_KEEP; i++)
        if (kept.buf[i] && now - kept.since[i] >= BODY_KEEP_US) {
            free(kept.buf[i]);
            kept.buf[i] = NULL;
            kept.bytes -= kept.cap[i];
        }
}

/* A buffer of at least need bytes (*cap: its size), or NULL. */
static char *body_take(size_t need, size_t *cap)
{
    if (need >= BODY_KEEP_MIN && need <= BODY_KEEP_MAX) {
        int best = -1;
        pthread_mutex_lock(&kept.mu);
        body_drop_stale(slim_server_now_us());
        for (int i = 0; i < BODY_KEEP; i++)
            if (kept.buf[i] && kept.cap[i] >= need && (best < 0 || kept.cap[i] < kept.cap[best]))
                best = i;
        char *p = best >= 0 ? kept.buf[best] : NULL;
        if (p) {
            *cap = kept.cap[best];
            kept.buf[best] = NULL;
            kept.bytes -= kept.cap[best];
        }
        pthread_mutex_unlock(&kept.mu);
        if (p)
            return p;
    }
    char *p = malloc(need);
    if (p)
        *cap = need;
    return p;
}

/* Keeps a body's buffer for the next body, in place of a smaller one, or
 * frees it. */
static void body_give(char *p, size_t cap)
{
    if (!p)
        return;
    if (cap >= BODY_KEEP_MIN && cap <= BODY_KEEP_MAX) {
        int64_t now = slim_server_now_us();
        pthread_mutex_lock(&kept.mu);
        body_drop_stale(now);
        int empty = -1, smallest = -1;
        for (int i = 0; i < BODY_KEEP; i++) {
            if (!kept.buf[i]) {
                if (empty < 0)
                    empty = i;
            } else if (smallest < 0 || kept.cap[i] < kept.cap[smallest]) {
                smallest = i;
            }
        }
        /* Into an empty slot within the budget, else in place of the
         * smallest buffer if that is smaller (and the budget allows);
         * otherwise the buffers already kept are as useful: freed. */
        int slot = -1;
        if (empty >= 0 && kept.bytes + cap <= BODY_KEEP_BYTES)
            slot = empty;
        else if (smallest >= 0 && kept.cap[smallest] < cap &&
                 kept.bytes - kept.cap[smallest] + cap <= BODY_KEEP_BYTES)
            slot = smallest;
        char *old = p;
        if (slot >= 0) {
            old = kept.buf[slot];
            kept.bytes += cap - (old ? kept.cap[slot] : 0);
            kept.buf[slot] = p;
            kept.cap[slot] = cap;
            kept.since[slot] = now;
        }
        pthread_mutex_unlock(&kept.mu);
        free(old);
        return;
    }
    free(p);
}

static void request_free(slim_server_request *req)
{
    slim_server_infer_free(&req->infer);
    slim_server_admission_release(req->srv->admission, req);
    slim_server_admission_body_free(req->srv->admission, req);
    slim_tensors_free(req->task.outputs, req->task.n_outputs);
    slim_server_model_release(req->task.model);
    slim_server_model_release(req->residency_model); /* its connection closed first */
    slim_server_reply_free(&req->reply);
    body_give(req->body ? req->body - req->body_pad : NULL, req->body_cap + req->body_pad);
    free(req->url);
    atomic_fetch_sub(&req->srv->in_flight, 1);
    free(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    slim_server_request *req = *con_cls;
    if (req && !req->logged) /* the client left, or a deadline closed it */
        slim_server_log_access(req->id, req->method, req->url, 0,
                               (double)(slim_server_now_us() - req->t_arrived) / 1000.0, 0);
    if (req)
        request_free(req);
    *con_cls = NULL;
    /* Kept alive: the idle deadline runs until the next request's headers. */
    slim__conn_set(cls, slim__conn_of(conn), CONN_IDLE);
}

static bool body_append(slim_server_request *req, const char *data, size_t n)
{
    size_t max = body_limit(req);
    if (req->body_len + n > max)
        return false;
    if (req->body_block) /* allocated to its Content-Length, which MHD holds it to */
        if (req->body_len + n + 1 > req->body_cap)
            return false;
    if (req->body_len + n + 1 > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap : 4096;
        while (cap < req->body_len + n + 1)
            cap *= 2;
        char *p = realloc(req->body ? req->body - req->body_pad : NULL, cap + req->body_pad);
        if (!p)
            return false;
        req->body = p + req->body_pad; /* (the binary part's alignment may be lost: copied then) */
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, n);
    req->body_len += n;
    req->body[req->body_len] = '\0';
    return true;
}

/* Under --memory-limit, a body whose length the headers give is admitted
 * before any of it is read (admission.c), into the allocator. A chunked
 * body is not (its length is known only at its end): it is held to
 * --max-request-bytes, and its JSON is admitted once it is complete. */
static slim_server_body_result admit_body(slim_server_request *req)
{
    const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
    if (!len)
        return SLIM_SERVER_BODY_READ;
    slim_server_body_result r = slim_server_admission_body(req->srv->admission, req,
                                                           (size_t)len);
    if (r == SLIM_SERVER_BODY_READ && !req->body && len <= body_limit(req)) {
        /* Sized once, so the body is not copied as it grows; up to a cap,
         * since the length is only the client's word until the bytes come. */
        size_t cap = (size_t)(len < BODY_PREALLOC_MAX ? len : BODY_PREALLOC_MAX) + 1;
        /* The binary part (after the JSON header) starts on a 64-byte
         * boundary, so that its tensors are read in place rather than
         * copied out (routes.c, slim_server_infer_decode_in_place). */
        long long hl = req->infer_header_len;
        size_t room = hl >= 0 && (unsigned long long)hl < len ? BODY_ALIGN - 1 : 0, total = 0;
        char *p = body_take(cap + room, &total);
        if (p) {
            size_t pad = room ? (BODY_ALIGN - ((uintptr_t)p + (size_t)hl) % BODY_ALIGN) % BODY_ALIGN
                              : 0;
            req->body = p + pad;
            req->body_pad = pad;
            req->body_cap = total - pad;
        }
    }
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    slim_server *srv = cls;
    slim_server_request *req = *con_cls;
    if (!req) { /* the headers are in; nothing of the body is read yet */
        if (!(req = request_new(srv, conn, url, method)))
            return MHD_NO;
        *con_cls = req;
        req->sc = slim__conn_of(conn);
        if (slim__conn_take_control_mark(srv, req->sc)) {
            /* 404 rather than 400: no endpoint, model or version has such a
             * name, as for any other unknown path. */
            slim_server_reply_error(&req->reply, 404, "unknown endpoint: the request's path or "
                                    "query holds a control character (%%00-%%1F or %%7F), which "
                                    "no model, version or parameter has");
            slim__conn_set(srv, req->sc, CONN_BUSY);
            req->reply_ready = true;
            return send_reply(req);
        }
        if (slim__conn_is_lane(srv, req->sc) && strcmp(url, "/v2/health/live") != 0 &&
            strcmp(url, "/v2/health/ready") != 0) {
            slim_server_reply_error(&req->reply, 503, "the server is at --max-connections (%d): "
                                    "past it only /v2/health/live and /v2/health/ready are "
                                    "answered; retry later", srv->opts.max_connections);
            req->reply.retry_after_s = 1;
            slim__conn_set(srv, req->sc, CONN_BUSY);
            req->reply_ready = true;
            return send_reply(req);
        }
        if (is_infer(url)) /* a client whose next request a batch may wait for */
            slim__conn_mark_sender(srv, req->sc);
        if (refuse_framing(req) || !slim_server_auth_check(req)) {
            slim__conn_set(srv, req->sc, CONN_BUSY);
            req->reply_ready = true;
            return send_reply(req);
        }
        switch (admit_body(req)) {
        case SLIM_SERVER_BODY_READ:
            slim__conn_set(srv, req->sc, CONN_BODY);
            return MHD_YES;
        case SLIM_SERVER_BODY_WAIT: /* no body deadline while it may not be sent */
            slim__conn_set(srv, req->sc, CONN_BUSY);
            req->body_waiting = true;
            return MHD_YES;
        case SLIM_SERVER_BODY_ANSWERED:
            break;
        }
        slim__conn_set(srv, req->sc, CONN_BUSY);
        req->reply_ready = true;
        return send_reply(req);
    }
    if (req->body_waiting) { /* resumed by admission.c: room for the body, or a refusal */
        req->body_waiting = false;
        req->suspended = false;
        if (!req->body_refused)
            slim__conn_set(srv, req->sc, CONN_BODY); /* its deadline counts from now */
        else if (!*upload_data_size) { /* nothing of the body read: answer now */
            req->reply_ready = true;
            return send_reply(req);
        }
        if (!*upload_data_size)
            return MHD_YES;
    }
    if (*upload_data_size) {
        if (slim__conn_closing(srv, req->sc))
            return MHD_NO; /* answered 408 already: MHD closes */
        if (req->body_refused) {
            *upload_data_size = 0; /* dropped; the reply goes at the end */
            return MHD_YES;
        }
        if (!req->too_large && !body_append(req, upload_data, *upload_data_size)) {
            /* Chunked, so only now known to be too large: the rest is read
             * and dropped (within --body-timeout), then answered 413. */
            req->too_large = true;
            slim_server_admission_body_free(srv->admission, req);
            free(req->body ? req->body - req->body_pad : NULL);
            req->body = NULL;
            req->body_len = req->body_cap = req->body_pad = 0;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->body_refused && !req->reply_ready) {
        slim__conn_set(srv, req->sc, CONN_BUSY);
        req->reply_ready = true;
        return send_reply(req);
    }
    if (req->reply_ready && !req->suspended)
        return MHD_YES; /* already answered (refused at the first call) */

    if (req->suspended && req->repo_op) { /* a load/unload's thread resumed it */
        req->suspended = false;
    } else if (req->suspended && req->residency_wait) { /* its model is resident now */
        req->suspended = false;
        req->residency_wait = false;
        slim_server_route(req);
        if (req->suspended)
            return MHD_YES;
    } else if (req->suspended) { /* resumed by the worker */
        req->suspended = false;
        slim_server_infer_finish(req);
        if (req->suspended) /* to run again (admission.c) */
            return MHD_YES;
    } else if (!slim__conn_set(srv, req->sc, CONN_BUSY)) {
        return MHD_NO; /* the body came in just as its deadline passed: 408 sent */
    } else if (req->too_large) {
        slim_server_reply_error(&req->reply, 413, "request body exceeds the limit of %zu bytes "
                                "(%s)", body_limit(req), body_limit_name(req));
    } else {
        req->t_begin = slim_server_now_us();
        slim_server_route(req);
        if (req->suspended)
            return MHD_YES;
    }
    req->reply_ready = true;
    return send_reply(req);
}

/* MHD's log lines go to the log (log.c), LOG_LINES_PER_S a second at most: one is
 * written per refused connection, and refusing a flood must not turn into
 * writing one. The budget is the process's, like stderr. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t second;
    static long lines, dropped;
    int64_t now = slim_server_now_us() / 1000000;
    pthread_mutex_lock(&mu);
    if (now != second) {
        if (dropped)
            slim_server_log(SLIM_LOG_WARN, NULL, "http: %ld earlier messages not shown (over "
                            "%d a second)", dropped, LOG_LINES_PER_S);
        second = now;
        lines = dropped = 0;
    }
    if (lines++ < LOG_LINES_PER_S) {
        char msg[1024];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        size_t n = strlen(msg);
        while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
            msg[--n] = '\0'; /* MHD ends its lines; ours are ended by the log */
        slim_server_log(SLIM_LOG_WARN, NULL, "http: %s", msg);
    } else if (!dropped++) {
        slim_server_log(SLIM_LOG_WARN, NULL, "http: over %d messages this second; the rest "
                        "are only counted", LOG_LINES_PER_S);
    }
    pthread_mutex_unlock(&mu);
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
    atomic_init(&srv->serving, false);
    slim_server_bytes_set_limit(opts->max_request_bytes);
    slim_server_metrics_init(&srv->metrics);
    struct sockaddr_storage addr;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    slim_status s = bind_address(opts, &addr, &flags, err);
    if (s != SLIM_OK)
        goto err_metrics;
    if (!(srv->admission = slim_server_admission_start(&srv->repo, opts->queue_capacity, err))) {
        s = err->status;
        goto err_metrics;
    }
    if ((s = slim_server_repo_open_with(&srv->repo, &opts->control, opts->repository,
                                        &srv->metrics, opts->workers, opts->queue_capacity,
                                        opts->device, opts->precision, opts->convert_cache,
                                        opts->load_timeout_s, err)) != SLIM_OK)
        goto err_repo;
    if ((s = slim__conn_watchdog_start(srv, err)) != SLIM_OK)
        goto err_repo;
    int longest = opts->body_timeout_s > opts->idle_timeout_s ? opts->body_timeout_s
                                                               : opts->idle_timeout_s;
    /* --max-connections is kept by accept_policy; the per-address limit by
     * MHD, counted across its threads, before accept_policy is asked. */
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)opts->port, slim__conn_accept, srv, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, /* first, or MHD logs before it */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opts->http_threads,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, slim__conn_notify, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, slim__conn_unescape, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(longest + MHD_TIMEOUT_MARGIN_S),
        MHD_OPTION_CONNECTION_LIMIT, slim__conn_mhd_limit(opts),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)opts->max_connections_per_client,
        MHD_OPTION_END);
    if (!srv->daemon) {
        s = slim_errf(err, SLIM_EIO, "could not listen on %s:%d (is the port in use?)", opts->host,
                      opts->port);
        goto err_watchdog;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opts->port;
    return SLIM_OK;

err_watchdog:
    slim__conn_watchdog_stop(srv);
err_repo:
    slim_server_repo_close(&srv->repo);
    slim_server_admission_free(srv->admission);
err_metrics:
    slim_server_metrics_free(&srv->metrics);
    return s;
}

bool slim_server_stop(slim_server *srv)
{
    /* No new connections (accept_policy closes them); open ones may still
     * finish what they sent. */
    atomic_store(&srv->stopping, true);
    /* Requests waiting for input memory are answered 503 now. */
    slim_server_admission_stop(srv->admission);
    /* Requests waiting for a model's load too; on-demand loads stop. */
    slim_server_residency_stop(&srv->repo);
    /* Loads under way stop at their next check (between stages and passes,
     * inside the runs they make) and answer; their connections are
     * suspended, so MHD must not stop before they are back. */
    while (atomic_load(&srv->repo_ops) > 0) {
        slim_server_repo_cancel_loads(&srv->repo);
        usleep(10000);
    }
    /* MHD_stop_daemon must not meet a suspended connection: in-flight
     * requests get the grace period, then what still runs is cancelled
     * (routes.c). A request whose body never comes is answered 408
     * meanwhile: the watchdog runs until MHD has stopped. */
    if (!slim_server_drain(srv))
        return false;
    MHD_stop_daemon(srv->daemon);
    slim__conn_watchdog_stop(srv);
    /* Stops each model's instances as its last reference goes. */
    slim_server_repo_close(&srv->repo);
    slim_server_admission_free(srv->admission);
    slim_server_metrics_free(&srv->metrics);
    return true;
}
