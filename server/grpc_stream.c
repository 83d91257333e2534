/*
 * grpc_stream.c - ModelStreamInfer: one call carrying many infer requests,
 * each answered by a ModelStreamInferResponse as its run ends (completion
 * order; clients match answers by request id, as with Triton). A request
 * that fails is answered with error_message and the stream goes on.
 *
 * One read and at most one write are outstanding at a time (gRPC allows a
 * read and a write side by side, not two writes): answers that are ready
 * while a write is under way wait in a queue. The stream ends once the
 * client has half-closed and every request is answered: then the status
 * (OK) goes out and, when that completes, everything is freed. A client
 * that goes away ends the stream the same way (its writes fail at once).
 *
 * A client that cancels the stream (or goes away) is noticed while the
 * stream is open, as for a unary ModelInfer: a RECV_CLOSE_ON_SERVER asked
 * for at the start (close_tag) completes then, and sets `gone`, which the
 * batcher and admission's line ask about every few tens of ms; the
 * stream's queued and running requests are cancelled (counted failed, as
 * a cancelled call is) instead of running for nobody. The stream is freed
 * on the later of that close and its status batch (tags counts them).
 *
 * Each request counts in srv->in_flight from its arrival until its model
 * reference is given back, so a drain waits for requests, not for idle
 * streams; a request that arrives once the server is stopping is answered
 * with an error without touching the repository.
 */
#include "clock.h"
#include "grpc_impl.h"
#include "log.h"
#include "repository.h"
#include "routes.h"
#include "server.h"
#include "trace.h"

#include <grpc/byte_buffer_reader.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stream stream;

typedef struct slim__grpc_tag {
    slim__grpc_phase phase;         /* first: what on_event reads */
    stream *st;
} slim__grpc_tag;

/* One request of the stream, from its arrival to its answer's send. */
typedef struct item {
    slim__grpc_admit admit;         /* its admission (grpc_rpcs.c) */
    stream *st;
    int64_t t_begin, decode_ns;
    slim_server_infer rq;
    slim_server_task task;
    uint8_t *answer;                /* a packed ModelStreamInferResponse */
    size_t len;
    struct item *next;              /* in the send queue */
} item;

struct stream {
    slim__grpc_call *c;             /* the call, its details and metadata */
    slim_server *srv;
    slim__grpc_tag read_tag, send_tag, done_tag, close_tag;
    bool close_early;               /* close_tag asked for: the status batch has no close */
    atomic_int tags;                /* of done_tag and close_tag, still to complete */
    atomic_bool gone;               /* the client cancelled or left (close_tag said so) */
    pthread_mutex_t mu;
    item *head, *tail;              /* answers waiting for the write side */
    item *sending;                  /* the answer being written */
    int open;                       /* requests not yet answered or written */
    bool read_done;                 /* the client half-closed (or went away) */
    bool metadata_sent;
    bool finished;                  /* the status is on its way */
    grpc_byte_buffer *recv, *send;
};

static void item_free(item *it)
{
    if (it->task.model) {
        slim_server_infer_free(&it->rq);
        slim_tensors_free(it->task.outputs, it->task.n_outputs);
        slim_server_model_release(it->task.model);
        it->task.model = NULL;
    }
    slim__grpc_admit_free(&it->admit);
    free(it->answer);
    free(it);
}

/* Wraps already packed bytes as field `field` (length-delimited) of a
 * ModelStreamInferResponse: 1 error_message, 2 infer_response. */
static uint8_t *wrap(int field, const void *bytes, size_t len, size_t *out_len)
{
    uint8_t head[16];
    size_t n = 0;
    head[n++] = (uint8_t)(field << 3 | 2);
    size_t v = len;
    do {
        head[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    uint8_t *out = malloc(n + len);
    if (!out)
        return NULL;
    memcpy(out, head, n);
    if (len)
        memcpy(out + n, bytes, len);
    *out_len = n + len;
    return out;
}

/* The status batch, once nothing is left (st->mu held). */
static void finish_locked(stream *st)
{
    if (st->finished || !st->read_done || st->open > 0 || st->sending)
        return;
    st->finished = true;
    grpc_op ops[3];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    grpc_slice details = grpc_empty_slice();
    if (!st->metadata_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
    ops[n++].data.send_status_from_server.status_details = &details;
    if (!st->close_early) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &st->c->close_cancelled;
    }
    if (grpc_call_start_batch(st->c->call, ops, n, &st->done_tag, NULL) != GRPC_CALL_OK)
        slim_server_log(SLIM_LOG_WARN, NULL, "grpc: could not end a stream");
}

/* Writes the next queued answer, or ends the stream (st->mu held). */
static void pump_locked(stream *st)
{
    if (st->sending || !st->head) {
        finish_locked(st);
        return;
    }
    item *it = st->head;
    st->head = it->next;
    if (!st->head)
        st->tail = NULL;
    st->sending = it;
    grpc_slice s = grpc_slice_new(it->answer, it->len, free);
    it->answer = NULL; /* the slice frees it */
    st->send = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!st->metadata_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        st->metadata_sent = true;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = st->send;
    if (grpc_call_start_batch(st->c->call, ops, n, &st->send_tag, NULL) != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(st->send);
        st->send = NULL;
        st->sending = NULL;
        st->open--;
        item_free(it);
        pump_locked(st);
    }
}

/* An answer is ready (any thread). The request's model reference goes
 * back first: from here the request is out of the server's hands. */
static void answer(item *it, uint8_t *bytes, size_t len)
{
    stream *st = it->st;
    slim_server *srv = st->srv;
    if (it->task.model) {
        slim_server_infer_free(&it->rq);
        slim_tensors_free(it->task.outputs, it->task.n_outputs);
        it->task.outputs = NULL;
        it->task.n_outputs = 0;
        slim_server_model_release(it->task.model);
        it->task.model = NULL;
    }
    slim__grpc_admit_free(&it->admit); /* before in_flight: the drain may free admission */
    it->answer = bytes;
    it->len = len;
    pthread_mutex_lock(&st->mu);
    if (bytes) {
        if (st->tail)
            st->tail->next = it;
        else
            st->head = it;
        st->tail = it;
    } else { /* out of memory: this request goes unanswered */
        st->open--;
        free(it);
    }
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
    atomic_fetch_sub(&srv->in_flight, 1);
}

static void answer_error(item *it, const char *msg)
{
    size_t len = 0;
    uint8_t *bytes = wrap(1, msg, strlen(msg), &len);
    answer(it, bytes, len);
}

static void item_done(slim_server_task *t)
{
    item *it = t->user;
    slim_server_model *m = t->model;
    if (t->status != SLIM_OK) {
        if (slim__grpc_retry_alone(&it->admit))
            return; /* runs again alone: done is called again */
        slim_server_count_failure(m, t->failure, it->t_begin);
        answer_error(it, t->err.msg);
        return;
    }
    slim_err err = {0};
    int64_t t_encode = slim_server_now_ns();
    uint8_t *bytes;
    size_t len;
    if (slim_server_grpc_infer_encode(&it->rq, m, t->outputs, t->n_outputs, &bytes, &len, &err) !=
        SLIM_OK) {
        slim_server_count_failure(m, SLIM_SERVER_FAIL_OTHER, it->t_begin);
        answer_error(it, err.msg);
        return;
    }
    slim__grpc_count_success(m, &it->rq, t, it->t_begin, it->decode_ns, t_encode);
    if (slim_server_trace_on()) /* trace extension: one branch when off */
        slim_server_trace_request(m->name, m->version, it->rq.id, t, it->t_begin);
    size_t out_len = 0;
    uint8_t *out = wrap(2, bytes, len, &out_len);
    free(bytes);
    answer(it, out, out_len);
}

/* Whether the stream's client left (a flag set on a queue thread: cheap). */
static bool item_gone(slim_server_task *t)
{
    const item *it = t->user;
    return atomic_load(&it->st->gone);
}

static bool item_admit_gone(slim__grpc_admit *ad)
{
    return atomic_load(&((item *)ad)->st->gone);
}

static void item_fail(slim__grpc_admit *ad, grpc_status_code code, const char *msg)
{
    (void)code; /* a stream answers a failed request with its message */
    answer_error((item *)ad, msg);
}

/* One request message (bytes, taken over), counted in flight and open
 * already. */
static void handle(stream *st, grpc_slice bytes)
{
    item *it = calloc(1, sizeof(*it));
    if (!it) {
        grpc_slice_unref(bytes);
        pthread_mutex_lock(&st->mu);
        st->open--;
        pump_locked(st);
        pthread_mutex_unlock(&st->mu);
        atomic_fetch_sub(&st->srv->in_flight, 1);
        return;
    }
    it->st = st;
    if (atomic_load(&st->srv->stopping)) {
        grpc_slice_unref(bytes);
        answer_error(it, "the server is shutting down");
        return;
    }
    it->t_begin = slim_server_now_us();
    it->task.done = item_done;
    it->task.user = it;
    it->admit.c = st->c;
    it->admit.rq = &it->rq;
    it->admit.task = &it->task;
    it->admit.decode_ns = &it->decode_ns;
    it->admit.fail = item_fail;
    if (st->close_early) { /* its client leaving cancels it, queued or running */
        it->task.gone = item_gone;
        it->admit.gone = item_admit_gone;
    }
    slim__grpc_infer_submit(&it->admit, bytes, it->t_begin);
}

static void read_next(stream *st)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &st->recv;
    if (grpc_call_start_batch(st->c->call, &op, 1, &st->read_tag, NULL) != GRPC_CALL_OK) {
        pthread_mutex_lock(&st->mu);
        st->read_done = true;
        pump_locked(st);
        pthread_mutex_unlock(&st->mu);
    }
}

/* Handles the message in st->recv (if any) and reads the next. */
static void take_message(stream *st)
{
    grpc_byte_buffer *b = st->recv;
    st->recv = NULL;
    grpc_slice s = slim__grpc_buffer_slice(b);
    grpc_byte_buffer_destroy(b); /* s holds its own reference */
    /* Open before the next read is asked for: that read may fail at once
     * on another thread, and must not find the stream empty and end it. */
    pthread_mutex_lock(&st->mu);
    st->open++;
    pthread_mutex_unlock(&st->mu);
    /* Read on before the model runs, so requests pipeline. */
    read_next(st);
    handle(st, s);
}

void slim__grpc_stream_start(slim__grpc_call *c)
{
    stream *st = calloc(1, sizeof(*st));
    if (!st) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        return;
    }
    st->c = c;
    st->srv = c->g->srv;
    st->read_tag = (slim__grpc_tag){SLIM__GRPC_STREAM_READ, st};
    st->send_tag = (slim__grpc_tag){SLIM__GRPC_STREAM_SENT, st};
    st->done_tag = (slim__grpc_tag){SLIM__GRPC_STREAM_DONE, st};
    st->close_tag = (slim__grpc_tag){SLIM__GRPC_STREAM_CLOSED, st};
    pthread_mutex_init(&st->mu, NULL);
    /* Watch for the client leaving from the start (before the first
     * message is handled, so that its request is watched too). */
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    atomic_init(&st->gone, false);
    atomic_init(&st->tags, 2);
    st->close_early = true;
    if (grpc_call_start_batch(c->call, &op, 1, &st->close_tag, NULL) != GRPC_CALL_OK) {
        st->close_early = false;
        atomic_store(&st->tags, 1);
    }
    /* The first message's in-flight count goes with its request now. */
    c->counted = false;
    st->recv = c->recv;
    c->recv = NULL;
    take_message(st);
}

void slim__grpc_stream_event(void *tag, bool ok)
{
    slim__grpc_tag *t = tag;
    stream *st = t->st;
    switch (t->phase) {
    case SLIM__GRPC_STREAM_READ:
        if (ok && st->recv) {
            atomic_fetch_add(&st->srv->in_flight, 1);
            take_message(st);
            return;
        }
        pthread_mutex_lock(&st->mu);
        st->read_done = true; /* half-closed, or gone */
        pump_locked(st);
        pthread_mutex_unlock(&st->mu);
        return;
    case SLIM__GRPC_STREAM_SENT: {
        pthread_mutex_lock(&st->mu);
        item *it = st->sending;
        st->sending = NULL;
        grpc_byte_buffer_destroy(st->send);
        st->send = NULL;
        pthread_mutex_unlock(&st->mu);
        /* Freed while it still counts in `open` (it reaches the call
         * through its admission): once open is 0 the stream may end and
         * be freed on another thread at once. Not under st->mu, which
         * admission's callbacks take. */
        item_free(it);
        pthread_mutex_lock(&st->mu);
        st->open--;
        pump_locked(st);
        pthread_mutex_unlock(&st->mu);
        return;
    }
    case SLIM__GRPC_STREAM_CLOSED:
        /* at the stream's end, or earlier when its client cancelled */
        atomic_store(&st->gone, !ok || st->c->close_cancelled);
        /* fall through: the later of CLOSED and DONE frees the stream */
    case SLIM__GRPC_STREAM_DONE:
        if (atomic_fetch_sub(&st->tags, 1) != 1)
            return;
        slim__grpc_call_free(st->c);
        pthread_mutex_destroy(&st->mu);
        free(st);
        return;
    default:
        return;
    }
}
