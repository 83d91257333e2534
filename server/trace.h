/*
 * trace.h - Triton's trace extension (trace.c): per-request timestamps
 * written as JSON lines, switched at run time by GET/POST
 * /v2[/models/M]/trace/setting and gRPC TraceSetting.
 *
 *     slim_server_trace_init(trace_dir, 64 << 20);          (main, once)
 *     ...
 *     if (slim_server_trace_on())                           (after a success)
 *         slim_server_trace_request(m->name, m->version, id, t, t_begin);
 *
 * Settings (Triton's names, each value a string, trace_level a list):
 *   trace_level    ["OFF"] | ["TIMESTAMPS"]   (TENSORS is not supported)
 *   trace_rate     every N-th request is traced (N >= 1; default 1000)
 *   trace_count    traces left to write; -1: no limit (the default)
 *   trace_file     a file name inside --trace-dir (outfile.h); "" none
 *   log_frequency  0: every trace to trace_file; N: N traces a file, to
 *                  trace_file.0, trace_file.1, ...
 * A model's own settings override the global ones field by field; a field
 * it clears (null over HTTP, an empty list over gRPC) falls back to the
 * global one, and a request naming the model with no settings removes all
 * of its own. Files are bounded: once the traces written since a scope's
 * trace_file was set reach max_bytes, that scope writes no more and a
 * warning is logged (set trace_file again to go on).
 */
#ifndef SLIM_SERVER_TRACE_H
#define SLIM_SERVER_TRACE_H

#include "batcher.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* dir: --trace-dir (NULL: no trace_file may be set, so no tracing);
 * max_bytes: --trace-max-bytes. Call before serving. */
void slim_server_trace_init(const char *dir, size_t max_bytes);
/* Closes the trace files (the process is stopping). */
void slim_server_trace_close(void);

/* Whether any scope traces: the one branch the request path pays. */
extern atomic_bool slim__trace_on;
static inline bool slim_server_trace_on(void)
{
    return atomic_load_explicit(&slim__trace_on, memory_order_relaxed);
}

/* One request of model@version answered (t as the batcher left it,
 * t_begin_us: its arrival on slim_server_now_us's clock): counted for
 * trace_rate, and written when sampled. request_id may be NULL. */
void slim_server_trace_request(const char *model, int64_t version, const char *request_id,
                               const slim_server_task *t, int64_t t_begin_us);

/* One setting to change: n values (n == 0: clear it). */
typedef struct slim_server_trace_value {
    const char *key;
    const char *const *vals;
    size_t n;
} slim_server_trace_value;

/* model NULL or "": the global settings. All or nothing: false with err
 * naming the field when one is bad. With a model and n == 0, the model's
 * own settings are removed. */
bool slim_server_trace_update(const char *model, const slim_server_trace_value *vals, size_t n,
                              char *err, size_t err_cap);

/* The settings in effect for model (NULL: global), as Triton reports them. */
typedef struct slim_server_trace_view {
    const char *level;          /* "OFF" or "TIMESTAMPS" */
    char rate[24], count[24], log_frequency[24];
    char file[1100];
} slim_server_trace_view;
void slim_server_trace_get(const char *model, slim_server_trace_view *out);

#endif
