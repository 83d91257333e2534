/*
 * grpc.h - the KServe v2 / Triton gRPC service (inference.GRPCInferenceService,
 * proto/inference.proto) beside the HTTP server, over the gRPC core C API
 * (grpc_server.c: transport, calls, shutdown; grpc_rpcs.c and grpc_models.c:
 * the RPCs; grpc_stream.c: ModelStreamInfer;
 * grpc_codec.c: ModelInferRequest -> slim_server_infer and outputs ->
 * ModelInferResponse). It reuses the HTTP server's components: the
 * repository, the batcher queues, the statistics, the API key rule, the
 * size caps; only the wire format differs.
 *
 *     slim_server_grpc *g = NULL;
 *     if (slim_server_grpc_start(&srv, opts.host, 8001, &g, &err) != SLIM_OK) ...
 *     slim_server_grpc_shutdown(g);     // no new calls (before slim_server_stop)
 *     slim_server_stop(&srv);           // drains gRPC calls too (in_flight)
 *     slim_server_grpc_free(g);
 *
 * Built only where libgrpc-dev is found (SLIM_HAVE_GRPC); otherwise start
 * fails with a message saying so.
 */
#ifndef SLIM_SERVER_GRPC_H
#define SLIM_SERVER_GRPC_H

#include "slim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct slim_server slim_server;
typedef struct slim_server_grpc slim_server_grpc;
typedef struct slim_server_model slim_server_model;
typedef struct slim_server_infer slim_server_infer;

/* Whether this build has the gRPC service. */
bool slim_server_grpc_available(void);
/* Listens on host:port (0 is refused: the caller skips gRPC then) with
 * threads of its own; srv must be started. */
slim_status slim_server_grpc_start(slim_server *srv, const char *host, int port,
                                   slim_server_grpc **out, slim_err *err);
/* The port bound. */
int slim_server_grpc_port(const slim_server_grpc *g);
/* Stops taking new calls; those under way go on. */
void slim_server_grpc_shutdown(slim_server_grpc *g);
/* Cancels what is left, joins the threads, frees. NULL is fine. */
void slim_server_grpc_free(slim_server_grpc *g);

/* ---- the infer codec (grpc_codec.c), also driven by the fuzz target ----- */

/* Unpacks a packed ModelInferRequest (an Inference__ModelInferRequest, from
 * inference.pb-c.h) leaving its raw_input_contents in data, which must then
 * outlive the message (*in_place true; otherwise it is protobuf-c's own
 * unpack, which copied them). NULL when data is not such a message, as
 * protobuf-c decides (grpc_wire.c). Freed with the next function. */
void *slim_server_grpc_infer_unpack(const uint8_t *data, size_t len, bool *in_place);
void slim_server_grpc_infer_unpacked_free(void *msg, bool in_place);
/* Decodes a packed ModelInferRequest for model m into rq (its inputs own
 * their data); failures are the client's (INVALID_ARGUMENT) except
 * SLIM_EOOM/SLIM_ENOMEM, and name the problem as the HTTP codec does. */
slim_status slim_server_grpc_infer_decode(const uint8_t *data, size_t len,
                                          const slim_server_model *m, slim_server_infer *rq,
                                          slim_err *err);
/* The same from a message already unpacked (an Inference__ModelInferRequest,
 * from inference.pb-c.h): the server unpacks once to find the model. */
slim_status slim_server_grpc_infer_decode_msg(const void *msg, const slim_server_model *m,
                                              slim_server_infer *rq, slim_err *err);
/* A packed ModelInferResponse with rq's requested outputs as
 * raw_output_contents (malloc'd into *out). SLIM_EOOM when it would pass
 * rq->max_reply_bytes. */
slim_status slim_server_grpc_infer_encode(const slim_server_infer *rq, const slim_server_model *m,
                                          const slim_tensor *outs, int n_outs, uint8_t **out,
                                          size_t *len, slim_err *err);

#endif
