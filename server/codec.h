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
    int64_t class_count;        /* > 0: the classification extension's top-k */
} slim_server_out_req;

typedef struct slim_server_infer {
    char *id;                   /* echoed; NULL when the request had none */
    int n_inputs;
    const char **names;         /* point into the model's io names */
    slim_tensor *inputs;        /* own their data, or (buf NULL) borrow it: from a
                                 * shared memory span, or the body (decode_in_place) */
    int n_outputs;
    slim_server_out_req *outputs; /* in the order they will be answered */
    int64_t batch;              /* for inference_count: 1 when not batching */
    int64_t timeout_us;         /* "parameters": {"timeout": us}; 0: not given */
    size_t max_reply_bytes;     /* --max-response-bytes (0: none), set by admission.c */
    struct slim_server_shm_span *shm; /* the shared memory the request uses, held until freed */
} slim_server_infer;

/* Bit set in a cJSON number's type when its text has a fraction or an
 * exponent. cJSON only looks at type & 0xFF and at its own two flag bits
 * (256, 512), so the bit stays private to slimserve. */
#define SLIM_SERVER_JSON_NOT_INTEGRAL (1 << 14)

/* Parses a request body's JSON strictly (cJSON alone is lenient): only
 * whitespace may follow the value, and no string may hold a NUL (cJSON
 * would cut it there, so "in\u0000put" would match an input "in"). NULL
 * with err naming the byte on failure. Numbers written with a fraction or
 * an exponent ("3136.0", "1e3") are marked, so that a field that takes an
 * integer refuses them. */
cJSON *slim_server_json_parse(const char *text, size_t len, slim_err *err);
/* v is a number written as an integer, within [lo, hi]; *out gets it. */
bool slim_server_json_integer(const cJSON *v, double lo, double hi, int64_t *out);
/* The bytes cJSON can malloc to parse these len bytes, at most (a count of
 * the values and strings in them; infer_codec.c says how it was measured). */
size_t slim_server_json_parse_bound(const char *text, size_t len);

/* Decodes an infer request body. header_len < 0: the whole body is JSON;
 * otherwise the first header_len bytes are, and binary tensors follow.
 * Failures are the caller's fault (HTTP 400) and name the problem. */
slim_status slim_server_infer_decode(const char *body, size_t len, long long header_len,
                                     const slim_server_model *m, slim_server_infer *out,
                                     slim_err *err);
/* The same, but a binary tensor whose bytes are aligned like the
 * allocator's blocks (64 bytes) points into the body instead of being
 * copied out of it (its buf NULL): the body must stay where it is, unchanged,
 * until *out is freed. (A 150 KB image was copied once more per request,
 * on the way to the model, for nothing; server/http.c aligns a body's
 * binary part when it knows the JSON header's length.) */
slim_status slim_server_infer_decode_in_place(const char *body, size_t len, long long header_len,
                                              const slim_server_model *m,
                                              slim_server_infer *out, slim_err *err);
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

/* ---- BYTES tensors (bytes_codec.c) ---------------------------------------
 *
 * KServe's BYTES is the engine's string tensor (SLIM_STRING). On the wire
 * each element is a 4-byte little-endian length and then its bytes (HTTP's
 * binary data, gRPC's raw contents); in JSON a string. Every element a
 * client sends is checked: lengths inside the data, valid UTF-8 in JSON,
 * and the decoded tensor (16 bytes an element plus the bytes) within
 * --max-request-bytes, so that a small body of empty strings cannot
 * decode into a tensor many times its size. */

/* The limit on a decoded BYTES input's bytes (0: none); the server sets it
 * from --max-request-bytes at start. */
void slim_server_bytes_set_limit(size_t max_bytes);
/* String tensor t (dtype and shape set, no data) from n bytes of wire
 * form; `what` names the field in messages ("binary data",
 * "raw_input_contents"). Errors name the input, the element and the limit. */
slim_status slim_server_bytes_from_wire(const void *data, size_t n, slim_tensor *t,
                                        const char *name, const char *what, slim_err *err);
/* String tensor t from `count` elements, element i lens[i] bytes at
 * ptrs[i]: gRPC's bytes_contents. */
slim_status slim_server_bytes_from_list(const void *const *ptrs, const size_t *lens,
                                        size_t count, slim_tensor *t, const char *name,
                                        slim_err *err);
/* String tensor t from JSON "data" (strings, nested as for numbers; the
 * caller has checked the count and nesting). */
slim_status slim_server_bytes_from_json(const cJSON *data, slim_tensor *t, const char *name,
                                        slim_err *err);
/* Bytes of t's wire form, and t in it (wire_size bytes at out). */
size_t slim_server_bytes_wire_size(const slim_tensor *t);
void slim_server_bytes_to_wire(const slim_tensor *t, void *out);
/* The most bytes put_json writes for t: its data as a JSON list. */
size_t slim_server_bytes_json_bound(const slim_tensor *t);
struct slim_server_buf;
/* "data":["...",...]: bytes that are not UTF-8 become U+FFFD (JSON has
 * no other way to carry them: ask for binary to get them as they are). */
void slim_server_bytes_put_json(struct slim_server_buf *b, const slim_tensor *t);

/* ---- the classification extension (classify.c) --------------------------
 *
 * An output asked for with "classification": K (HTTP) or the gRPC
 * parameter of that name answers, per batch row (the whole output when
 * the model does not batch), its K largest values as BYTES strings
 * "value:index" or "value:index:label", largest first, as Triton does:
 * value as C's %f (std::to_string), integers as they are; equal values in
 * index order (Triton's std::sort leaves ties unordered; libstdc++ sorts
 * up to 16 classes stably, so the two agree there), NaN last. K past the
 * class count gives them all. Labels come from the output's
 * "label_filename" in config (one label a line, line i for class i). */

/* Checks that output idx of m can be classified (a numeric output) and
 * that k >= 1; errors name the output. */
slim_status slim_server_classify_check(const slim_server_model *m, int idx, int64_t k,
                                       slim_err *err);
/* The most bytes one class string of output idx takes. */
size_t slim_server_classify_elem_bytes(const slim_server_model *m, int idx);
/* Shape of the classified output y: rows x min(k, classes). */
void slim_server_classify_shape(const slim_server_model *m, const slim_server_out_req *out,
                                const slim_tensor *y, slim_tensor *shape);
/* The outputs as they are answered: view[i] is outs[i] (shared, not
 * referenced) except that each classified output is a new string tensor
 * of its class strings. view has n_outs entries. */
slim_status slim_server_classify_outputs(const slim_server_infer *rq, const slim_server_model *m,
                                         const slim_tensor *outs, int n_outs, slim_tensor *view,
                                         slim_err *err);
/* Releases what slim_server_classify_outputs made in view. */
void slim_server_classify_outputs_free(const slim_server_infer *rq, const slim_tensor *outs,
                                       slim_tensor *view, int n_outs);

/* ---- datatype names (datatype.c) ---------------------------------------- */

const char *slim_server_dtype_kserve(slim_dtype t);  /* "FP32", NULL if none */
slim_dtype slim_server_dtype_from_kserve(const char *s);
const char *slim_server_dtype_triton(slim_dtype t);  /* "TYPE_FP32" */
slim_dtype slim_server_dtype_from_triton(const char *s);

#endif
