/*
 * grpc_impl.h - private to the gRPC service (grpc_server.c, grpc_rpcs.c):
 * one call's state and the hand-over between the transport and the RPCs.
 *
 * A call goes through three completions of one tag (the call itself):
 * REQUESTED (a new call arrived), READ (its one request message is in),
 * SENT (the answer, status and close are done: freed). ModelInfer is a
 * registered method whose message arrives with the call, so its REQUESTED
 * is its READ: one completion-queue round trip fewer per inference. An RPC
 * answered at once replies from the completion-queue thread; ModelInfer's
 * run ends on the model's instance thread, which, while other requests
 * wait for a run, hands the answer back to a completion-queue thread
 * (DONE, through an empty batch: gRPC posts its tag at once) so that the
 * packing and sending stay off the model's thread, as HTTP's do, and
 * otherwise answers itself; load/unload answer from a thread of their own, so
 * no completion-queue thread ever waits for a model and health RPCs
 * always answer.
 */
#ifndef SLIM_SERVER_GRPC_IMPL_H
#define SLIM_SERVER_GRPC_IMPL_H

#include "admission.h"
#include "batcher.h"
#include "codec.h"
#include "grpc.h"

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include <pthread.h>
#include <stdatomic.h>

/* What a completion-queue tag is: a call (unary: REQUESTED, READ, SENT) or
 * one of a stream's tags (grpc_stream.c). Every tag starts with its phase. */
typedef enum {
    SLIM__GRPC_REQUESTED, SLIM__GRPC_READ, SLIM__GRPC_SENT, SLIM__GRPC_CLOSED,
    SLIM__GRPC_DONE,                /* ModelInfer's run ended: answer it */
    SLIM__GRPC_STREAM_READ, SLIM__GRPC_STREAM_SENT, SLIM__GRPC_STREAM_DONE,
    SLIM__GRPC_STREAM_CLOSED,
} slim__grpc_phase;

struct slim__grpc_call;

/* One infer request (a ModelInfer call, a stream's message) from its
 * unpacking to its answer: its admission ticket (admission.h; first, so
 * the ticket's callbacks find the rest), its message until decoded (it may
 * wait in admission's line for memory for its inputs), and where it goes. */
typedef struct slim__grpc_admit {
    slim_server_admission_ticket ticket;
    struct slim__grpc_call *c;      /* the call: its server */
    void *q;                        /* Inference__ModelInferRequest, until decoded */
    bool q_in_place;                /* its raw_input_contents point into bytes */
    grpc_slice bytes;               /* the packed message, held while q is */
    slim_server_infer *rq;
    slim_server_task *task;
    int64_t *decode_ns;
    /* Answers the request with a failure (a status, or a stream's error). */
    void (*fail)(struct slim__grpc_admit *ad, grpc_status_code code, const char *msg);
    /* Whether its client left (NULL: not known). */
    bool (*gone)(struct slim__grpc_admit *ad);
} slim__grpc_admit;

/* The tag of a call's early RECV_CLOSE_ON_SERVER (phase CLOSED). */
typedef struct slim__grpc_close_tag {
    slim__grpc_phase phase;
    struct slim__grpc_call *c;
} slim__grpc_close_tag;

typedef struct slim__grpc_call {
    slim__grpc_phase phase;         /* first: the tag's kind */
    slim_server_grpc *g;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    /* the answer */
    grpc_byte_buffer *send;
    grpc_status_code code;
    char *msg;
    int close_cancelled;
    bool counted;                   /* in srv->in_flight */
    /* ModelInfer watches for its client leaving: a RECV_CLOSE_ON_SERVER of
     * its own (close_tag, CLOSED) from the start, so the call is freed on
     * the later of that and SENT (tags counts them down). */
    slim__grpc_close_tag close_tag;
    bool close_early;
    atomic_int tags;
    atomic_bool gone;               /* the client cancelled (the batcher asks) */
    /* A registered ModelInfer call (grpc_server.c): its message came with
     * it, and its deadline here rather than in details. */
    bool registered;
    gpr_timespec deadline;
    /* ModelInfer under way */
    int64_t t_begin, decode_ns;
    slim_server_infer rq;
    slim_server_task task;
    slim__grpc_admit admit;
} slim__grpc_call;

struct slim_server_grpc {
    slim_server *srv;
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t threads[4];
    int n_threads;
    int port;
    atomic_bool shut;               /* grpc_server_shutdown_and_notify called */
    atomic_bool shut_done;          /* ... and its tag came back: destroy may follow */
    atomic_int calls;               /* call structs alive */
    void *infer_method;             /* ModelInfer, registered (NULL: generic) */
};

/* The request message's bytes (one contiguous copy, malloc'd). */
uint8_t *slim__grpc_read(slim__grpc_call *c, size_t *len);
/* The same without the copy: one slice (unref it), empty when none. */
grpc_slice slim__grpc_read_slice(slim__grpc_call *c);
/* A received message's bytes as one slice (unref it): a new reference to
 * the slice it came in when it came in one, else one copy; empty when b is
 * NULL or cannot be read. b stays the caller's. */
grpc_slice slim__grpc_buffer_slice(grpc_byte_buffer *b);
/* Answers OK with msg packed; frees nothing of msg. */
void slim__grpc_reply(slim__grpc_call *c, const ProtobufCMessage *msg);
/* Answers OK with an already packed message (malloc'd; taken over). */
void slim__grpc_reply_packed(slim__grpc_call *c, uint8_t *bytes, size_t len);
/* Answers with a failure status and message. */
void slim__grpc_fail(slim__grpc_call *c, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The gRPC code Triton gives where its HTTP endpoint gives http_status. */
grpc_status_code slim__grpc_code(int http_status);
/* ---- shared by the RPCs (grpc_rpcs.c) ---- */
/* "" is the latest ready version (-1); otherwise canonical digits. */
bool slim__grpc_parse_version(const char *s, int64_t *out);
/* The model, or NULL with the call answered (NOT_FOUND, UNAVAILABLE...). */
slim_server_model *slim__grpc_acquire(slim__grpc_call *c, const char *name, const char *version);
/* Unpacks the request message as desc; NULL with the call answered. */
ProtobufCMessage *slim__grpc_unpack(slim__grpc_call *c, const ProtobufCMessageDescriptor *desc);
/* The RPCs of grpc_models.c. */
void slim__grpc_model_metadata(slim__grpc_call *c);
void slim__grpc_model_config(slim__grpc_call *c);
void slim__grpc_model_statistics(slim__grpc_call *c);
/* The RPCs of grpc_ext.c: the logging and trace extensions. */
void slim__grpc_log_settings(slim__grpc_call *c);
void slim__grpc_trace_setting(slim__grpc_call *c);
/* The shared-memory RPCs of grpc_shm.c. */
void slim__grpc_shm_system_status(slim__grpc_call *c);
void slim__grpc_shm_system_register(slim__grpc_call *c);
void slim__grpc_shm_system_unregister(slim__grpc_call *c);
void slim__grpc_shm_cuda_status(slim__grpc_call *c);
void slim__grpc_shm_cuda_register(slim__grpc_call *c);
void slim__grpc_shm_cuda_unregister(slim__grpc_call *c);

/* ---- ModelStreamInfer (grpc_stream.c) ---- */
/* Takes call c over as a stream, its first message in c->recv (counted in
 * flight, c->counted); answers each request as its run ends. */
void slim__grpc_stream_start(slim__grpc_call *c);
/* A completion of one of a stream's tags. */
void slim__grpc_stream_event(void *tag, bool ok);
/* Frees call c (its struct, its grpc_call, what it holds). */
void slim__grpc_call_free(slim__grpc_call *c);
/* The status a failed task is answered with. */
grpc_status_code slim__grpc_task_code(const slim_server_task *t);
/* ModelInfer's statistics for one successful request (routes.c's rule). */
void slim__grpc_count_success(slim_server_model *m, const slim_server_infer *rq,
                              const slim_server_task *t, int64_t t_begin, int64_t decode_ns,
                              int64_t t_encode);
/* Unpacks a ModelInferRequest's bytes (a slice, taken over: its raw inputs
 * are read from it in place) and passes it through admission
 * (ad->c, rq, task, decode_ns, fail and gone set): once its inputs fit it
 * is decoded and queued as ad->task (model reference, deadline), now or
 * later; otherwise, or when it is bad, answered through ad->fail. From
 * the model's acquisition on, ad->task->model holds its reference (the
 * caller releases it with the request, and calls
 * slim_server_admission_ticket_release when its inputs are freed). */
void slim__grpc_infer_submit(slim__grpc_admit *ad, grpc_slice bytes, int64_t t_begin);
/* What slim__grpc_infer_submit's request still holds (a message not yet
 * decoded, its share of admission's budget). */
void slim__grpc_admit_free(slim__grpc_admit *ad);
/* ad's task ran out of memory even alone on its model (status SLIM_EOOM):
 * it waits at the head of admission's line and runs again, alone, once no
 * other inputs are held (slim_server_admission_ticket_retry_alone); true
 * when it will (its done is called again), false when the 507 stands. */
bool slim__grpc_retry_alone(slim__grpc_admit *ad);

/* Answers ModelInfer call c whose run succeeded: packs its outputs and
 * sends them (on a queue thread, phase DONE; see infer_done). */
void slim__grpc_infer_answer(slim__grpc_call *c);

/* Starts watching for c's client leaving (c->gone); false if it cannot. */
bool slim__grpc_watch_close(slim__grpc_call *c);

/* Serves call c, whose request message is in; answers it now or later. */
void slim__grpc_dispatch(slim__grpc_call *c);

#endif
