/*
 * memory.h - the server's side of memory accounting (memory.c): a model's
 * memory account and limit, giving memory back, and the memory metrics and
 * debug endpoints.
 */
#ifndef SLIM_SERVER_MEMORY_H
#define SLIM_SERVER_MEMORY_H

#include "buf.h"
#include "slim.h"

#include <stdbool.h>

typedef struct slim_server_model slim_server_model;
typedef struct slim_server_repo slim_server_repo;
typedef struct slim_server_reply slim_server_reply;

/* Names the model's memory account after it and applies cfg.memory_limit
 * (fails when the weights alone are over it). */
slim_status slim_server_memory_attach(slim_server_model *m, slim_err *err);
/* The model's footprint (pipeline/footprint.h) at its max_batch_size:
 * predicted from path and lo before the load (a failure is logged and
 * leaves predicted zero), and measured on the loaded model after. */
void slim_server_memory_predict(slim_server_model *m, const char *path,
                                const slim_load_opts *lo);
void slim_server_memory_measure(slim_server_model *m);
/* "predicted_bytes", "actual_bytes" and a "footprint" object with both
 * sides' figures, added to o (index entries, metadata, statistics). */
struct cJSON;
void slim_server_memory_footprint_json(struct cJSON *o, const slim_server_model *m);
/* Gives cached, unused device memory back (after an unload). */
void slim_server_memory_trim(void);
/* malloc settings for a long-running server (at start, before threads),
 * and giving the heaps' free pages back (called every few seconds). */
void slim_server_memory_tune_heap(void);
void slim_server_memory_trim_heap(void);
/* The slim_memory_* and slim_allocator_* families, and per-model weight
 * and arena bytes, in Prometheus text format. */
void slim_server_memory_metrics(slim_server_repo *repo, slim_server_buf *out);
/* GET /v2/debug/memory[?format=text]: stats per device and per model. */
void slim_server_memory_debug(slim_server_repo *repo, bool text, slim_server_reply *reply);
/* POST /v2/debug/memory/reset_peaks: every peak (device and models) set to
 * its current value; answers with the JSON above. */
void slim_server_memory_reset_peaks(slim_server_repo *repo, slim_server_reply *reply);

#endif
