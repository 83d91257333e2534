/*
 * codec.h - the KServe v2 wire format: an infer request's JSON (+ binary)
 * body decoded into typed tensors, the outputs encoded back
 * (infer_codec.c), the reply every route fills in and its handing to
 * libmicrohttpd (reply.c), and the datatype names (datatype.c). JSON ends
 * here: what crosses to the batcher is a slim_server_infer of tensors.
 *
 *     slim_server_infer rq = {0};
 *     if (slim_server_infer_decode(body, len, -1, model, &rq, &err) != SLIM_OK)
 *         slim_server_reply_error(&reply, 400, "%s", err.msg);
 *     ... run ...
 *     slim_server_infer_encode(&rq, model, outs, n_outs, &reply, &err);
 *     slim_server_infer_free(&rq);
 */
#ifndef SLIM_SERVER_CODEC_H
#define SLIM_SERVER_CODEC_H

#include "slim.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct slim_buffer;
struct MHD_Response;
typedef struct slim_server_model slim_server_model;

/* ---- what an HTTP answer is made of ------------------------------------- */

/* Bytes sent after a reply's body as they are, from a tensor's buffer
 * (a reference held until they are sent): binary outputs, not copied. */
typedef struct slim_server_reply_part {
    const void *data;
    size_t len;
    struct slim_buffer *buf;
} slim_server_reply_part;

typedef struct slim_server_reply {
    int status;                 /* HTTP status */
    char *body;                 /* malloc'd, owned by the reply */
    size_t len;
    slim_server_reply_part *parts; /* malloc'd; follow the body */
    int n_parts;
    const char *content_type;   /* static string */
    long long infer_header_len; /* >= 0: Inference-Header-Content-Length */
    const char *allow;          /* for 405: the methods that are allowed */
    int retry_after_s;          /* > 0: a Retry-After header (503 queue full) */
    bool auth_challenge;        /* a 401: WWW-Authenticate: Bearer */
} slim_server_reply;

/* Fills reply with {"error": "..."} and the given status. */
void slim_server_reply_error(slim_server_reply *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Takes ownership of json (cJSON_Delete'd here). Invalid UTF-8 in its
 * strings is replaced by U+FFFD. */
void slim_server_reply_json(slim_server_reply *r, int status, cJSON *json);
void slim_server_reply_free(slim_server_reply *r);
/* Drops the n parts' buffer references (the array stays). */
void slim_server_reply_parts_free(slim_server_reply_part *parts, int n);
/* The reply's length on the wire: its body and its parts. */
size_t slim_server_reply_size(const slim_server_reply *r);
/* A libmicrohttpd response carrying r's body and parts, which it takes
 * over (r keeps its status and headers); NULL when out of memory. */
struct MHD_Response *slim_server_reply_response(slim_server_reply *r);

/* ---- inference requests (infer_codec.c) --------------------------------- */

typedef struct slim_server_out_req {
    int index;                  /* the model output's index */
    bool binary;
    struct slim_server_shm_span *shm; /* written into this region (shm.h); NULL: in the reply */
} slim_server_out_req;

typedef struct slim_server_infer {
    char *id;                   /* echoed; NULL when the request had none */
    int n_inputs;
    const char **names;         /* point into the model's io names */
    slim_tensor *inputs;        /* own their data */
    int n_outputs;
    slim_server_out_req *outputs; /* in the order they will be answered */
    int64_t batch;              /* for inference_count: 1 when not batching */
    int64_t timeout_us;         /* "parameters": {"timeout": us}; 0: not given */
    size_t max_reply_bytes;     /* --max-response-bytes (0: none), set by admission.c */
    struct slim_server_shm_span *shm; /* the shared memory the request uses, held until freed */
} slim_server_infer;

/* Parses a request body's JSON strictly (cJSON alone is lenient): only
 * whitespace may follow the value, and no string may hold a NUL (cJSON
 * would cut it there, so "in\u0000put" would match an input "in"). NULL
 * with err naming the byte on failure. Numbers written with a fraction or
 * an exponent ("3136.0", "1e3") are marked, so that a field that takes an
 * integer refuses them. */
cJSON *slim_server_json_parse(const char *text, size_t len, slim_err *err);
/* The bytes cJSON can malloc to parse these len bytes, at most (a count of
 * the values and strings in them; infer_codec.c says how it was measured). */
size_t slim_server_json_parse_bound(const char *text, size_t len);

/* Decodes an infer request body. header_len < 0: the whole body is JSON;
 * otherwise the first header_len bytes are, and binary tensors follow.
 * Failures are the caller's fault (HTTP 400) and name the problem. */
slim_status slim_server_infer_decode(const char *body, size_t len, long long header_len,
                                     const slim_server_model *m, slim_server_infer *out,
                                     slim_err *err);
/* The most bytes the answer with outputs of these shapes can take (their
 * data unused): binary outputs exactly, JSON ones at the longest each
 * element can print. */
size_t slim_server_infer_reply_bound(const slim_server_infer *rq, const slim_server_model *m,
                                     const slim_tensor *outs, int n_outs);
/* Whether an output is asked for as JSON (binary_data_output helps). */
bool slim_server_infer_any_json(const slim_server_infer *rq);
/* Answers with the requested outputs; JSON, or JSON header + binary (the
 * binary outputs as reply parts, not copied). SLIM_EOOM, with a message
 * naming the size, when the answer would pass rq->max_reply_bytes: the
 * caller's 500 is then a 507 (err->status says). */
slim_status slim_server_infer_encode(const slim_server_infer *rq, const slim_server_model *m,
                                     const slim_tensor *outs, int n_outs,
                                     slim_server_reply *reply, slim_err *err);
void slim_server_infer_free(slim_server_infer *rq);
/* Checks input t's shape against io, the model's declared input (rank,
 * fixed dims, the batch dim against max_batch_size); the gRPC codec uses
 * it too, so both protocols refuse a shape with the same words. */
typedef struct slim_server_io slim_server_io;
slim_status slim_server_infer_check_shape(const slim_server_model *m, const slim_server_io *io,
                                          const slim_tensor *t, slim_err *err);
/* Index of the input or output called name among ios, or -1. */
int slim_server_infer_find_io(const slim_server_io *ios, int n, const char *name);
/* An inference request's input `name` with its datatype (a KServe name,
 * or NULL when the request gave none), checked against the model and the
 * inputs already in rq: *io gets the model's declaration, *dt the type.
 * Shared by the JSON and gRPC decoders, so both refuse with the same words. */
slim_status slim_server_infer_input_type(const slim_server_model *m, const slim_server_infer *rq,
                                         const char *name, const char *datatype,
                                         const slim_server_io **io, slim_dtype *dt,
                                         slim_err *err);

/* ---- datatype names (datatype.c) ---------------------------------------- */

const char *slim_server_dtype_kserve(slim_dtype t);  /* "FP32", NULL if none */
slim_dtype slim_server_dtype_from_kserve(const char *s);
const char *slim_server_dtype_triton(slim_dtype t);  /* "TYPE_FP32" */
slim_dtype slim_server_dtype_from_triton(const char *s);

#endif
