/*
 * log.h - slimserve's log lines, in text (as before) or one JSON object a
 * line, and the id every request carries.
 *
 *     slim_server_log_init(SLIM_LOG_JSON, true);
 *     slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\" failed to load: %s", name, why);
 *     slim_server_log_access(id, "POST", "/v2/models/mlp/infer", 200, 0.41, 1234);
 *
 * text:  slimserve: model "mlp" failed to load: ...
 * json:  {"ts":"2026-11-24T10:00:00.123Z","level":"warn","msg":"model \"mlp\" ..."}
 *
 * Every line is written to stderr with one write(2), so lines from
 * different threads never interleave. Nothing here allocates: a line is
 * built in a buffer on the stack (long messages are cut, never lost whole).
 * Until slim_server_log_init is called the format is text.
 */
#ifndef SLIM_SERVER_LOG_H
#define SLIM_SERVER_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SLIM_LOG_TEXT, SLIM_LOG_JSON } slim_log_format;

typedef enum { SLIM_LOG_DEBUG, SLIM_LOG_INFO, SLIM_LOG_WARN, SLIM_LOG_ERROR } slim_log_level;

/* access: one line per request (slim_server_log_access); off drops them. */
void slim_server_log_init(slim_log_format format, bool access);
slim_log_format slim_server_log_format(void);
bool slim_server_log_access_enabled(void);
/* "text" / "json" -> format; false for anything else. */
bool slim_server_log_parse_format(const char *s, slim_log_format *out);

/* One line; request_id may be NULL. In text mode: "slimserve: MSG". */
void slim_server_log(slim_log_level level, const char *request_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The access line of one answered request, at info level. status 0: the
 * request got no reply (the client left, or a deadline closed it). */
void slim_server_log_access(const char *request_id, const char *method, const char *path,
                            int status, double duration_ms, size_t bytes);

/* Request ids: an incoming X-Request-ID is kept when it is 1..128
 * printable ASCII characters (space to '~'); otherwise one is made up. */
#define SLIM_REQUEST_ID_MAX 128
bool slim_server_request_id_valid(const char *s);
/* 32 hex digits, unique within the process and random across processes. */
void slim_server_request_id_new(char out[SLIM_REQUEST_ID_MAX + 1]);

#endif
