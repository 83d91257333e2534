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
 * Every line is written with one write(2), so lines from different
 * threads never interleave. Nothing here allocates: a line is built in a
 * buffer on the stack (long messages are cut, never lost whole). Until
 * slim_server_log_init is called the format is text.
 *
 * Triton's logging extension (GET/POST /v2/logging, gRPC LogSettings)
 * switches the levels, the format and the file at run time from any
 * thread (slim_server_log_settings_*); a line being written meanwhile
 * follows the old settings or the new ones, never a mix of files.
 */
#ifndef SLIM_SERVER_LOG_H
#define SLIM_SERVER_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ISO8601: the text line after a UTC timestamp and the level's letter,
 * "2026-11-24T10:00:00Z I slimserve: ..." (Triton's "ISO8601" format). */
typedef enum { SLIM_LOG_TEXT, SLIM_LOG_JSON, SLIM_LOG_ISO8601 } slim_log_format;

typedef enum { SLIM_LOG_DEBUG, SLIM_LOG_INFO, SLIM_LOG_WARN, SLIM_LOG_ERROR } slim_log_level;

/* access: one line per request (slim_server_log_access); off drops them. */
void slim_server_log_init(slim_log_format format, bool access);
slim_log_format slim_server_log_format(void);
bool slim_server_log_access_enabled(void);
/* "text" / "json" -> format; false for anything else. */
bool slim_server_log_parse_format(const char *s, slim_log_format *out);

/* ---- run-time settings (Triton's logging extension) ----------------------
 * Which lines are written: debug ones when verbose_level >= 1 (0 by
 * default, as Triton), info (access lines among them), warning and error
 * ones each when on (all on by default). file: "" is stderr; otherwise a
 * file name inside dir (the operator's --log-dir), opened for appending. */
typedef struct slim_server_log_settings {
    char file[1024];              /* as reported: "" or dir/name */
    bool info, warnings, errors;
    unsigned verbose_level;
    slim_log_format format;
} slim_server_log_settings;

/* The directory log_file names must be in (--log-dir); NULL: none, and
 * any log_file but "" is refused. */
void slim_server_log_set_dir(const char *dir);
void slim_server_log_settings_get(slim_server_log_settings *out);
/* One setting by Triton's name ("log_file", "log_info", "log_warnings",
 * "log_errors", "log_verbose_level", "log_format"), its value given as the
 * type the name takes (the others are NULL/ignored). Checked only: nothing
 * changes. false with err naming the field. */
typedef struct slim_server_log_value {
    const char *key;
    enum { SLIM_LOG_VALUE_BOOL, SLIM_LOG_VALUE_UINT, SLIM_LOG_VALUE_STRING } type;
    bool b;
    uint64_t u;
    const char *s;
} slim_server_log_value;
/* Applies n settings at once, or none when one is bad (err names it:
 * an unknown name, a wrong type, a format or file that is not allowed). */
bool slim_server_log_settings_update(const slim_server_log_value *vals, size_t n,
                                     char *err, size_t err_cap);
/* The format's name as the logging extension reports it: "default",
 * "ISO8601" or "json". */
const char *slim_server_log_format_name(slim_log_format f);

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
