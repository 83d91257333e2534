/*
 * shm.h - Triton's shared-memory extensions: a client on the same host
 * registers a region (a POSIX shared memory object, or a CUDA buffer by its
 * cudaIpcMemHandle) under a name, then names it in an infer request's
 * input or output parameters ("shared_memory_region", "_offset",
 * "_byte_size") instead of sending the bytes.
 *
 *     slim_server_shm_register_system("in0", "/in0_key", 0, 4096, &err);
 *     ... decode: slim_server_shm_span_get(&rq->shm, "in0", 0, 4096, &span, &err);
 *                 slim_server_shm_input(span, &tensor, "x", &err);
 *     ... encode: slim_server_shm_output(span, &out, "y", &err);
 *     slim_server_infer_free(&rq);   (releases the request's spans)
 *     slim_server_shm_unregister(SLIM_SHM_SYSTEM, "in0", &err);
 *
 * Regions are refcounted: a request holds each region it names from its
 * decoding until it is answered, and unregistering takes the name out of
 * the table at once but unmaps only when the last request holding it is
 * done (docs/server.md, "Shared memory"). The table and the HTTP endpoints
 * live in shm.c and shm_api.c; the gRPC RPCs in grpc_shm.c.
 */
#ifndef SLIM_SERVER_SHM_H
#define SLIM_SERVER_SHM_H

#include "codec.h"
#include "slim.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SLIM_SHM_SYSTEM, SLIM_SHM_CUDA } slim_server_shm_kind;

/* At most this many regions, of both kinds together, are registered. */
#define SLIM_SHM_MAX_REGIONS 256
#define SLIM_SHM_NAME_MAX 128       /* bytes of a region's name */
#define SLIM_SHM_KEY_MAX 255        /* bytes of a POSIX key (NAME_MAX) */

/* What status shows of one region. */
typedef struct slim_server_shm_info {
    char name[SLIM_SHM_NAME_MAX + 1];
    char key[SLIM_SHM_KEY_MAX + 1]; /* system regions */
    uint64_t offset, byte_size;
    int64_t device_id;              /* CUDA regions */
} slim_server_shm_info;

/* Opens the POSIX shared memory object key and maps [offset, offset +
 * byte_size) of it. SLIM_EINVAL names what is wrong: a bad name or key,
 * a name taken (by either kind: they share one namespace), a range past
 * the object's end, too many regions; SLIM_ENOTFOUND: no object of that
 * key. */
slim_status slim_server_shm_register_system(const char *name, const char *key, uint64_t offset,
                                            uint64_t byte_size, slim_err *err);
/* Opens a cudaIpcMemHandle (raw_handle, its 64 bytes) on cuda:device_id
 * through the CUDA backend (runtime/device.h, ipc_open); without a GPU,
 * SLIM_ENOTFOUND saying why. */
slim_status slim_server_shm_register_cuda(const char *name, const void *raw_handle,
                                          size_t handle_len, int64_t device_id,
                                          uint64_t byte_size, slim_err *err);
/* Unregisters name (NULL or "": every region of that kind). A region
 * still used by requests is unmapped when the last of them is answered.
 * SLIM_ENOTFOUND: no region of that kind has that name. */
slim_status slim_server_shm_unregister(slim_server_shm_kind kind, const char *name, slim_err *err);
/* The regions of a kind (name NULL or "": all), in *out (malloc'd, the
 * caller frees) and *n. SLIM_ENOTFOUND for a name not registered. */
slim_status slim_server_shm_status(slim_server_shm_kind kind, const char *name,
                                   slim_server_shm_info **out, int *n, slim_err *err);
/* Whether cuda_shared_memory can be offered: built with the CUDA backend
 * and a GPU found (asked once; starts the backend). */
bool slim_server_shm_cuda_available(void);
/* Appends the extensions implemented here to a server metadata list. */
void slim_server_shm_add_extensions(cJSON *list);
/* The same as names, for gRPC's list: returns how many (at most 2). */
int slim_server_shm_extension_names(const char **out);

/* ---- requests (decoding and encoding) ----------------------------------- */

/* A part of a region that a request reads or writes: it holds a reference
 * to the region, released with the request (slim_server_infer_free). */
typedef struct slim_server_shm_span {
    struct slim__shm_region *region;
    char *name;                     /* the region's name, for messages and replies */
    void *ptr;                      /* region base + offset (a device pointer: CUDA) */
    uint64_t offset, size;
    struct slim_server_shm_span *next;
} slim_server_shm_span;

/* The three parameters of an input or output, as the codecs read them. */
typedef struct slim_server_shm_params {
    const char *region;             /* NULL: not given */
    bool has_offset, has_size;
    int64_t offset, byte_size;
} slim_server_shm_params;

/* Reads the three parameters from an input's or output's JSON
 * "parameters" (NULL: none given); a wrong type is SLIM_EINVAL naming
 * `what` `name` (shm_api.c). */
slim_status slim_server_shm_params_json(const cJSON *params, const char *what, const char *name,
                                        slim_server_shm_params *p, slim_err *err);
/* Whether any of the three parameters was given. */
bool slim_server_shm_params_given(const slim_server_shm_params *p);
/* Checks p (what tensor `what` of `name` gave) and takes a span of its
 * region onto *list; *out gets it. Errors (SLIM_EINVAL) name the tensor:
 * a missing region or byte size, an unknown region, a range past the
 * region's end. */
slim_status slim_server_shm_span_get(slim_server_shm_span **list, const slim_server_shm_params *p,
                                     const char *what, const char *name,
                                     slim_server_shm_span **out, slim_err *err);
void slim_server_shm_spans_free(slim_server_shm_span *list);
/* Input t (dtype and shape set) gets its data from span: read in place
 * (borrowed, charged to nobody) when the bytes are suitably aligned on the
 * host, otherwise copied into an allocated buffer. byte_size must equal
 * t's size. */
slim_status slim_server_shm_input(const slim_server_shm_span *span, slim_tensor *t,
                                  const char *name, slim_err *err);
/* Refuses, before the run, an output whose size is known from the model's
 * config (fixed dims; rows = the request's batch, or -1 without a batch
 * dimension) and larger than its span. */
slim_status slim_server_shm_output_check(const slim_server_shm_span *span, slim_dtype dtype,
                                         int ndim, const int64_t *dims, int64_t rows,
                                         const char *name, slim_err *err);
/* Writes output t into span (SLIM_EINVAL when it does not fit). */
slim_status slim_server_shm_output(const slim_server_shm_span *span, const slim_tensor *t,
                                   const char *name, slim_err *err);

/* ---- the codecs' side (shm_api.c) ---------------------------------------- */

typedef struct slim_server_buf slim_server_buf;

/* An input's parameters p: when given (*used), t (dtype and shape set)
 * gets its data from the region, and the request holds the span. has_data:
 * the input also came with data, which is refused. */
slim_status slim_server_shm_input_take(slim_server_infer *rq, const slim_server_shm_params *p,
                                       bool has_data, slim_tensor *t, const char *name,
                                       bool *used, slim_err *err);
/* The same from the input's JSON "parameters". */
slim_status slim_server_shm_input_json(slim_server_infer *rq, const cJSON *params, bool has_data,
                                       slim_tensor *t, const char *name, bool *used, slim_err *err);
/* Requested output idx of m with parameters p: *out gets its span (NULL
 * when p names none), checked against the size the config gives it
 * (rq->batch rows when the model batches) before the run. */
slim_status slim_server_shm_output_take(slim_server_infer *rq, const slim_server_model *m,
                                        int idx, const slim_server_shm_params *p,
                                        slim_server_shm_span **out, slim_err *err);
/* The same from the output's JSON "parameters". */
slim_status slim_server_shm_output_param(slim_server_infer *rq, const slim_server_model *m,
                                         const cJSON *params, int idx,
                                         slim_server_shm_span **out, slim_err *err);
/* Writes every output of rq that names a region into it (outs: the
 * model's outputs; the codecs checked there are enough of them). */
slim_status slim_server_shm_outputs_write(const slim_server_infer *rq, const slim_server_model *m,
                                          const slim_tensor *outs, slim_err *err);
/* An output's "parameters" in the JSON reply, once it is in the region:
 * the region's name, offset (when not 0) and the bytes written. */
void slim_server_shm_output_json(slim_server_buf *b, const slim_server_shm_span *span,
                                 const slim_tensor *t);

/* ---- HTTP (shm_api.c) ---------------------------------------------------- */

/* /v2/systemsharedmemory[/region/R]/ACTION and /v2/cudasharedmemory/...:
 * region may be NULL; action is "status" (GET) or "register" /
 * "unregister" (POST, the method already checked); body is register's
 * JSON. Fills reply. */
void slim_server_shm_route(slim_server_shm_kind kind, const char *region, const char *action,
                           const char *body, size_t len, slim_server_reply *reply);

#endif
