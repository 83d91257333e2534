/*
 * grpc_server.c - the gRPC transport: a grpc_server on --grpc-port with
 * one completion queue and a few threads reading it, calls taken with
 * grpc_server_request_call (any method; grpc_rpcs.c dispatches on the
 * name), one request message read per call, one answer written.
 *
 * Shutdown, in main.c's order: slim_server_grpc_shutdown stops new calls
 * (calls under way go on), slim_server_stop drains them with the HTTP
 * requests (each call is counted in srv->in_flight from its arrival to its
 * answer), then slim_server_grpc_free cancels what is left and joins.
 */
#include "clock.h"
#include "grpc_impl.h"
#include "log.h"
#include "server.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include <limits.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Calls waiting for a client at once: more than the threads, so a burst of
 * new calls does not wait for a request_call round trip each. */
#define PENDING_CALLS 32
#define SHUTDOWN_TAG ((void *)1)
#define INFER_METHOD "/inference.GRPCInferenceService/ModelInfer"
#define SLIM_GRPC_MAX_FRAME (1 << 20) /* bytes; HTTP/2 allows up to 16 MiB - 1 */

static void on_event(void *tag, bool ok);

bool slim_server_grpc_available(void)
{
    return true;
}

/* Waits for one more call: of any method (generic), or a ModelInfer call
 * with its message (registered). */
static void request_one(slim_server_grpc *g, bool registered)
{
    slim__grpc_call *c = calloc(1, sizeof(*c));
    if (!c)
        return; /* one fewer waiting; the next completion asks again */
    c->g = g;
    c->phase = SLIM__GRPC_REQUESTED;
    c->registered = registered;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    atomic_fetch_add(&g->calls, 1);
    grpc_call_error e =
        registered ? grpc_server_request_registered_call(g->server, g->infer_method, &c->call,
                                                         &c->deadline, &c->md, &c->recv, g->cq,
                                                         g->cq, c)
                   : grpc_server_request_call(g->server, &c->call, &c->details, &c->md, g->cq,
                                              g->cq, c);
    if (e != GRPC_CALL_OK) {
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->md);
        atomic_fetch_sub(&g->calls, 1);
        free(c);
    }
}

void slim__grpc_call_free(slim__grpc_call *c)
{
    slim_server_grpc *g = c->g;
    if (c->task.model) { /* a ModelInfer that was decoded */
        slim_server_infer_free(&c->rq);
        slim_tensors_free(c->task.outputs, c->task.n_outputs);
        slim_server_model_release(c->task.model);
    }
    slim__grpc_admit_free(&c->admit); /* its inputs are freed: their budget returns */
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    if (c->send)
        grpc_byte_buffer_destroy(c->send);
    free(c->msg);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->call)
        grpc_call_unref(c->call);
    /* Last: a drain that sees none in flight may free the repository. */
    if (c->counted)
        atomic_fetch_sub(&g->srv->in_flight, 1);
    free(c);
    atomic_fetch_sub(&g->calls, 1);
}

grpc_slice slim__grpc_buffer_slice(grpc_byte_buffer *b)
{
    grpc_byte_buffer_reader r;
    if (!b || !grpc_byte_buffer_reader_init(&r, b))
        return grpc_empty_slice();
    /* readall always copies; a message that came in one slice (a small
     * one usually does) is that slice, referenced. */
    grpc_slice *first, *second, s;
    if (grpc_byte_buffer_reader_peek(&r, &first) && !grpc_byte_buffer_reader_peek(&r, &second)) {
        s = grpc_slice_ref(*first);
    } else {
        grpc_byte_buffer_reader_destroy(&r); /* back to the start */
        if (!grpc_byte_buffer_reader_init(&r, b))
            return grpc_empty_slice();
        s = grpc_byte_buffer_reader_readall(&r);
    }
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

grpc_slice slim__grpc_read_slice(slim__grpc_call *c)
{
    return slim__grpc_buffer_slice(c->recv);
}

uint8_t *slim__grpc_read(slim__grpc_call *c, size_t *len)
{
    *len = 0;
    grpc_slice s = slim__grpc_read_slice(c);
    size_t n = GRPC_SLICE_LENGTH(s);
    uint8_t *out = malloc(n ? n : 1);
    if (out) {
        memcpy(out, GRPC_SLICE_START_PTR(s), n);
        *len = n;
    }
    grpc_slice_unref(s);
    return out;
}

bool slim__grpc_watch_close(slim__grpc_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    c->close_tag.phase = SLIM__GRPC_CLOSED;
    c->close_tag.c = c;
    atomic_store(&c->tags, 2);
    c->close_early = true;
    if (grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL) != GRPC_CALL_OK) {
        c->close_early = false;
        return false;
    }
    return true;
}

/* Status, message (if any) and close in one batch (the close is already
 * asked for when the call watches for its client leaving); SENT frees the
 * call, or the later of SENT and CLOSED. */
static void send_answer(slim__grpc_call *c)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    grpc_slice details = grpc_slice_from_copied_string(c->msg ? c->msg : "");
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->send) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->code;
    ops[n++].data.send_status_from_server.status_details = &details;
    if (!c->close_early) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &c->close_cancelled;
    }
    c->phase = SLIM__GRPC_SENT;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, c, NULL);
    grpc_slice_unref(details); /* the batch holds its own reference */
    if (e != GRPC_CALL_OK) {
        slim_server_log(SLIM_LOG_WARN, NULL, "grpc: could not answer a call (error %d)", (int)e);
        if (!c->close_early || atomic_fetch_sub(&c->tags, 1) == 1)
            slim__grpc_call_free(c);
    }
}

void slim__grpc_reply(slim__grpc_call *c, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    c->send = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    c->code = GRPC_STATUS_OK;
    send_answer(c);
}

void slim__grpc_reply_packed(slim__grpc_call *c, uint8_t *bytes, size_t len)
{
    grpc_slice s = grpc_slice_new(bytes, len, free);
    c->send = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    c->code = GRPC_STATUS_OK;
    send_answer(c);
}

void slim__grpc_fail(slim__grpc_call *c, grpc_status_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[2048];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    free(c->msg);
    c->msg = strdup(buf);
    c->code = code;
    send_answer(c);
}

grpc_status_code slim__grpc_code(int http_status)
{
    switch (http_status) {
    case 200: return GRPC_STATUS_OK;
    case 400: case 413: return GRPC_STATUS_INVALID_ARGUMENT;
    case 401: return GRPC_STATUS_UNAUTHENTICATED;
    case 404: return GRPC_STATUS_NOT_FOUND;
    case 408: case 504: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case 409: return GRPC_STATUS_ALREADY_EXISTS;
    case 501: return GRPC_STATUS_UNIMPLEMENTED;
    case 503: return GRPC_STATUS_UNAVAILABLE;
    case 507: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    default: return GRPC_STATUS_INTERNAL;
    }
}

/* One completion of call c's tag. */
static void on_event(void *tag, bool ok)
{
    slim__grpc_phase phase = *(slim__grpc_phase *)tag;
    if (phase >= SLIM__GRPC_STREAM_READ) {
        slim__grpc_stream_event(tag, ok);
        return;
    }
    if (phase == SLIM__GRPC_CLOSED) {
        slim__grpc_call *cc = ((slim__grpc_close_tag *)tag)->c;
        atomic_store(&cc->gone, !ok || cc->close_cancelled);
        if (atomic_fetch_sub(&cc->tags, 1) == 1)
            slim__grpc_call_free(cc);
        return;
    }
    slim__grpc_call *c = tag;
    slim_server_grpc *g = c->g;
    switch (phase) {
    case SLIM__GRPC_REQUESTED: {
        if (!ok) { /* the server is shutting down */
            slim__grpc_call_free(c);
            return;
        }
        if (!atomic_load(&g->shut))
            request_one(g, c->registered);
        if (c->registered) { /* its message came with it: read already */
            c->details.method = grpc_slice_from_static_string(INFER_METHOD);
            c->details.deadline = c->deadline;
            c->phase = SLIM__GRPC_READ;
            on_event(c, true);
            return;
        }
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &c->recv;
        c->phase = SLIM__GRPC_READ;
        if (grpc_call_start_batch(c->call, &op, 1, c, NULL) != GRPC_CALL_OK)
            slim__grpc_call_free(c);
        return;
    }
    case SLIM__GRPC_READ:
        if (!ok) { /* the client went away */
            slim__grpc_call_free(c);
            return;
        }
        if (!c->recv) { /* it half-closed without a message */
            slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "the call carried no request "
                            "message");
            return;
        }
        /* In flight from here (not while its message is awaited: a client
         * that never sends one must not hold up a drain), counted before
         * dispatch reads `stopping`, so a drain that saw none in flight
         * cannot miss this call. */
        atomic_fetch_add(&g->srv->in_flight, 1);
        c->counted = true;
        slim__grpc_dispatch(c);
        return;
    case SLIM__GRPC_SENT:
        if (!c->close_early || atomic_fetch_sub(&c->tags, 1) == 1)
            slim__grpc_call_free(c);
        return;
    case SLIM__GRPC_DONE: /* an empty batch always completes, ok */
        slim__grpc_infer_answer(c);
        return;
    default:
        return;
    }
}

static void *cq_main(void *arg)
{
    slim_server_grpc *g = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return NULL;
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == SHUTDOWN_TAG)
            atomic_store(&g->shut_done, true);
        if (ev.type != GRPC_OP_COMPLETE || ev.tag == SHUTDOWN_TAG)
            continue;
        on_event(ev.tag, ev.success != 0);
    }
}

/* gRPC core's own messages (a port it could not bind, a transport error)
 * go through the server's log, in its format (JSON lines stay JSON). */
static void grpc_log(gpr_log_func_args *a)
{
    slim_server_log(a->severity == GPR_LOG_SEVERITY_ERROR ? SLIM_LOG_WARN : SLIM_LOG_DEBUG, NULL,
                    "grpc: %s", a->message);
}

/* grpc_server_start hands the listening socket to gRPC's own threads, which
 * begin accepting a moment later (about a millisecond): a client that saw
 * the server ready over HTTP could meet "connection refused" on this port.
 * So the start waits, up to two seconds, until a connection is accepted. */
static bool grpc_wait_listening(const char *host, int port)
{
    const char *probe = host;
    if (!host[0] || !strcmp(host, "0.0.0.0"))
        probe = "127.0.0.1";
    else if (!strcmp(host, "::"))
        probe = "::1";
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(probe, service, &hints, &ai) != 0 || !ai)
        return false;
    bool ok = false;
    int64_t end = slim_server_now_us() + 2000000;
    while (!ok && slim_server_now_us() < end) {
        for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0)
                continue;
            ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
            close(fd);
        }
        if (!ok)
            usleep(1000);
    }
    freeaddrinfo(ai);
    return ok;
}

slim_status slim_server_grpc_start(slim_server *srv, const char *host, int port,
                                   slim_server_grpc **out, slim_err *err)
{
    *out = NULL;
    slim_server_grpc *g = calloc(1, sizeof(*g));
    if (!g)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    g->srv = srv;
    atomic_init(&g->calls, 0);
    gpr_set_log_function(grpc_log);
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
    grpc_init();
    /* The same caps as HTTP's bodies and answers: gRPC itself refuses a
     * larger message with RESOURCE_EXHAUSTED before it is buffered. */
    size_t in_cap = srv->opts.max_request_bytes, out_cap = srv->opts.max_response_bytes;
    grpc_arg args[4];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = in_cap && in_cap < INT_MAX ? (int)in_cap : -1;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = out_cap && out_cap < INT_MAX ? (int)out_cap : -1;
    /* No SO_REUSEPORT: a second server on the same port must fail to
     * bind, not share the first one's clients. */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    /* A request's tensors arrive in HTTP/2 DATA frames of at most the size
     * the server advertises (16 KiB by default): a 16 KiB tensor then
     * takes two frames, each a read and a parse. Advertising larger frames
     * lets a client send such a request in one. */
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
    args[3].value.integer = SLIM_GRPC_MAX_FRAME;
    grpc_channel_args ch = {4, args};
    g->cq = grpc_completion_queue_create_for_next(NULL);
    g->server = grpc_server_create(&ch, NULL);
    grpc_server_register_completion_queue(g->server, g->cq, NULL);
    /* ModelInfer's message is read with the call (one completion, not two);
     * NULL (not registered) leaves it to the generic calls. */
    g->infer_method = grpc_server_register_method(g->server, INFER_METHOD, NULL,
                                                  GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    char addr[300];
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    g->port = grpc_server_add_http2_port(g->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (g->port <= 0) {
        grpc_server_destroy(g->server);
        grpc_completion_queue_shutdown(g->cq);
        while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(g->cq);
        free(g);
        grpc_shutdown();
        return slim_errf(err, SLIM_EIO, "gRPC: cannot listen on %s (--grpc-port)", addr);
    }
    grpc_server_start(g->server);
    for (int i = 0; i < PENDING_CALLS; i++) {
        request_one(g, false);
        if (g->infer_method)
            request_one(g, true);
    }
    /* Two threads: an answer (packing a message) never holds up the next
     * call's first read; the work of a call is small, models run elsewhere. */
    for (int i = 0; i < 2; i++)
        if (pthread_create(&g->threads[g->n_threads], NULL, cq_main, g) == 0)
            g->n_threads++;
    if (!grpc_wait_listening(host, g->port))
        slim_server_log(SLIM_LOG_WARN, NULL,
                        "gRPC: port %d accepted no connection within 2 s of starting", g->port);
    *out = g;
    return SLIM_OK;
}

int slim_server_grpc_port(const slim_server_grpc *g)
{
    return g ? g->port : 0;
}

void slim_server_grpc_shutdown(slim_server_grpc *g)
{
    if (!g || atomic_exchange(&g->shut, true))
        return;
    grpc_server_shutdown_and_notify(g->server, g->cq, SHUTDOWN_TAG);
}

void slim_server_grpc_free(slim_server_grpc *g)
{
    if (!g)
        return;
    slim_server_grpc_shutdown(g);
    /* What still waits (a call whose answer never came) is cancelled; the
     * drain has answered every request that reached a model. */
    grpc_server_cancel_all_calls(g->server);
    int64_t end = slim_server_now_us() + 2000000;
    while (atomic_load(&g->calls) > 0 && slim_server_now_us() < end)
        usleep(5000);
    /* grpc_server_destroy wants the shutdown complete (its tag delivered):
     * the listeners close on gRPC's threads after shutdown_and_notify, and
     * destroying the server before they have aborts the process (gRPC's
     * "listeners_destroyed_ == listeners_.size()"), which a SIGTERM just
     * after the start met. Bounded: no queue thread, no tag. */
    end = slim_server_now_us() + 5000000;
    while (g->n_threads > 0 && !atomic_load(&g->shut_done) && slim_server_now_us() < end)
        usleep(1000);
    grpc_server_destroy(g->server);
    grpc_completion_queue_shutdown(g->cq);
    for (int i = 0; i < g->n_threads; i++)
        pthread_join(g->threads[i], NULL);
    grpc_completion_queue_destroy(g->cq);
    free(g);
    grpc_shutdown();
}
