/*
 * log.c - log lines in text or JSON, and request ids (log.h).
 *
 * JSON lines are for log collectors (Kubernetes, Loki, Elasticsearch): one
 * object a line, RFC 3339 UTC timestamps with milliseconds, and the
 * request's id, so a client's X-Request-ID finds every line its request
 * caused. Text lines stay what slimserve always printed ("slimserve: ..."),
 * so people reading a terminal see no change.
 *
 * A line is built in a fixed buffer and written with a single write(2):
 * stderr is unbuffered, and several fputs calls from several threads would
 * interleave mid-line. Lines up to PIPE_BUF (4096) bytes are atomic on a
 * pipe, which is how container runtimes collect stderr; the buffer is
 * that size and a longer message is cut (with "...") to fit.
 */
#include "buf.h"
#include "log.h"
#include "outfile.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096

/* Every setting is read by any thread writing a line while another may
 * change it (the logging extension): atomics, read once per line. */
static _Atomic slim_log_format log_format = SLIM_LOG_TEXT;
static atomic_bool log_access = true;
static atomic_bool log_info = true, log_warnings = true, log_errors = true;
static atomic_uint log_verbose;

/* ---- where lines go ------------------------------------------------------
 * Lines are written to out_fd: stderr until a log_file is set. Then a
 * descriptor of our own (a dup of stderr) is pointed at the file with
 * dup2(), which swaps it atomically under concurrent write()s: a line goes
 * wholly to the old file or wholly to the new one, and no writer takes a
 * lock. Back to "" points it at stderr again. */
static atomic_int out_fd = STDERR_FILENO;
static int own_fd = -1;                 /* under set_mu */
static pthread_mutex_t set_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_file[1024];             /* under set_mu: "" or the full path */
static const char *log_dir;             /* --log-dir */

void slim_server_log_init(slim_log_format format, bool access)
{
    atomic_store(&log_format, format);
    atomic_store(&log_access, access);
}

slim_log_format slim_server_log_format(void)
{
    return atomic_load(&log_format);
}

bool slim_server_log_access_enabled(void)
{
    return atomic_load(&log_access);
}

bool slim_server_log_parse_format(const char *s, slim_log_format *out)
{
    if (s && strcmp(s, "text") == 0)
        *out = SLIM_LOG_TEXT;
    else if (s && strcmp(s, "json") == 0)
        *out = SLIM_LOG_JSON;
    else
        return false;
    return true;
}

/* ---- run-time settings (the logging extension) -------------------------- */

const char *slim_server_log_format_name(slim_log_format f)
{
    return f == SLIM_LOG_JSON ? "json" : f == SLIM_LOG_ISO8601 ? "ISO8601" : "default";
}

void slim_server_log_set_dir(const char *dir)
{
    log_dir = dir;
}

void slim_server_log_settings_get(slim_server_log_settings *out)
{
    pthread_mutex_lock(&set_mu);
    snprintf(out->file, sizeof(out->file), "%s", log_file);
    pthread_mutex_unlock(&set_mu);
    out->info = atomic_load(&log_info);
    out->warnings = atomic_load(&log_warnings);
    out->errors = atomic_load(&log_errors);
    out->verbose_level = atomic_load(&log_verbose);
    out->format = atomic_load(&log_format);
}

static const char *type_name(int type)
{
    return type == SLIM_LOG_VALUE_BOOL ? "a boolean"
           : type == SLIM_LOG_VALUE_UINT ? "an unsigned integer" : "a string";
}

/* Checks one value into next; a log_file's name is kept in *file (it is
 * opened once every value has passed, so a refused update creates no file). */
static bool check_value(const slim_server_log_value *v, slim_server_log_settings *next,
                        const char **file, char *err, size_t cap)
{
    static const struct { const char *key; int type; } KEYS[] = {
        {"log_file", SLIM_LOG_VALUE_STRING}, {"log_info", SLIM_LOG_VALUE_BOOL},
        {"log_warnings", SLIM_LOG_VALUE_BOOL}, {"log_errors", SLIM_LOG_VALUE_BOOL},
        {"log_verbose_level", SLIM_LOG_VALUE_UINT}, {"log_format", SLIM_LOG_VALUE_STRING}};
    size_t k = 0;
    while (k < sizeof(KEYS) / sizeof(KEYS[0]) && strcmp(KEYS[k].key, v->key) != 0)
        k++;
    if (k == sizeof(KEYS) / sizeof(KEYS[0])) {
        snprintf(err, cap, "unknown log setting \"%.100s\" (log_file, log_info, log_warnings, "
                 "log_errors, log_verbose_level, log_format)", v->key);
        return false;
    }
    if ((int)v->type != KEYS[k].type) {
        snprintf(err, cap, "log setting %s must be %s", v->key, type_name(KEYS[k].type));
        return false;
    }
    switch (k) {
    case 0:
        *file = v->s;
        next->file[0] = '\0';
        return !v->s[0] || slim_server_outfile_check(log_dir, v->s, "log_file", next->file,
                                                     sizeof(next->file), err, cap);
    case 1: next->info = v->b; return true;
    case 2: next->warnings = v->b; return true;
    case 3: next->errors = v->b; return true;
    case 4:
        if (v->u > 0xffffffffu) {
            snprintf(err, cap, "log setting log_verbose_level must be an unsigned 32-bit integer");
            return false;
        }
        next->verbose_level = (unsigned)v->u;
        return true;
    default:
        if (strcmp(v->s, "default") == 0)
            next->format = SLIM_LOG_TEXT;
        else if (strcmp(v->s, "ISO8601") == 0)
            next->format = SLIM_LOG_ISO8601;
        else if (strcmp(v->s, "json") == 0)
            next->format = SLIM_LOG_JSON;
        else {
            snprintf(err, cap, "log setting log_format \"%.100s\" is not one of \"default\", "
                     "\"ISO8601\", \"json\"", v->s);
            return false;
        }
        return true;
    }
}

bool slim_server_log_settings_update(const slim_server_log_value *vals, size_t n, char *err,
                                     size_t err_cap)
{
    pthread_mutex_lock(&set_mu);
    slim_server_log_settings next = {.info = atomic_load(&log_info),
                                     .warnings = atomic_load(&log_warnings),
                                     .errors = atomic_load(&log_errors),
                                     .verbose_level = atomic_load(&log_verbose),
                                     .format = atomic_load(&log_format)};
    snprintf(next.file, sizeof(next.file), "%s", log_file);
    int fd = -1;
    const char *file = NULL;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = check_value(&vals[i], &next, &file, err, err_cap);
    if (ok && file && file[0]) {
        fd = slim_server_outfile_open(log_dir, file, "log_file", next.file, sizeof(next.file),
                                      err, err_cap);
        ok = fd >= 0;
    }
    if (ok && file) {
        if (own_fd < 0 && fd >= 0)
            own_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd >= 0 && own_fd < 0) {
            snprintf(err, err_cap, "log_file: no descriptor is free for it");
            ok = false;
        } else if (own_fd >= 0) {
            /* Lines in flight finish on the old file; the next go to the new. */
            (void)dup2(fd >= 0 ? fd : STDERR_FILENO, own_fd);
            (void)fcntl(own_fd, F_SETFD, FD_CLOEXEC); /* dup2 clears it */
            atomic_store_explicit(&out_fd, own_fd, memory_order_release);
            snprintf(log_file, sizeof(log_file), "%s", next.file);
        }
    }
    if (fd >= 0)
        close(fd);
    if (ok) {
        atomic_store(&log_info, next.info);
        atomic_store(&log_warnings, next.warnings);
        atomic_store(&log_errors, next.errors);
        atomic_store(&log_verbose, next.verbose_level);
        atomic_store(&log_format, next.format);
    }
    pthread_mutex_unlock(&set_mu);
    return ok;
}

/* ---- a line in a fixed buffer ------------------------------------------- */

typedef struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
    bool cut;
} line;

/* Room is kept for the closing "}\n" (or "...\n"). */
#define LINE_RESERVE 8

static void put(line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->buf) - LINE_RESERVE - l->len;
    if (n > room) {
        n = room;
        l->cut = true;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void puts_(line *l, const char *s)
{
    put(l, s, strlen(s));
}

static void printf_(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(line *l, const char *fmt, ...)
{
    char tmp[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        put(l, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string of at most `budget` bytes, quotes included: escapes, and
 * U+FFFD for bytes that are not UTF-8 (a client's path or id may be
 * anything). Past the budget the string is cut, never a sequence in half,
 * and the closing quote is always written, so a JSON line stays valid
 * however long its parts are: the budgets of one line's strings add up to
 * less than the buffer (see the callers). */
static void json_string(line *l, const char *s, size_t budget)
{
    size_t room = sizeof(l->buf) - LINE_RESERVE - l->len;
    size_t stop = l->len + (budget < room ? budget : room) - 1; /* the closing quote */
    l->buf[l->len++] = '"';
    size_t n = strlen(s);
    for (const unsigned char *p = (const unsigned char *)s, *end = p + n; p < end;) {
        size_t len = slim_server_utf8_len(p, (size_t)(end - p));
        char piece[8];
        size_t k;
        if (*p == '"' || *p == '\\') {
            piece[0] = '\\', piece[1] = (char)*p, k = 2;
        } else if (*p == '\n') {
            memcpy(piece, "\\n", 2), k = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(piece, sizeof(piece), "\\u%04x", *p), k = 6;
        } else if (len == 0) {
            memcpy(piece, "\\ufffd", 6), k = 6, len = 1;
        } else {
            memcpy(piece, p, len), k = len;
        }
        if (l->len + k > stop) {
            l->cut = true;
            break;
        }
        memcpy(l->buf + l->len, piece, k);
        l->len += k;
        p += len ? len : 1;
    }
    l->buf[l->len++] = '"';
}

/* Budgets of the JSON strings in one line (bytes, quotes included); with
 * the timestamp, keys and numbers they stay under LINE_MAX_BYTES. */
#define BUDGET_MSG 2048
#define BUDGET_ID 300   /* 128 printable characters, each escaped at most to 2 */
#define BUDGET_METHOD 40
#define BUDGET_PATH 1024

static void finish(line *l, slim_log_format format)
{
    /* The reserve is always there for the ending. */
    if (format == SLIM_LOG_JSON) {
        memcpy(l->buf + l->len, "}\n", 2);
        l->len += 2;
    } else {
        if (l->cut) {
            memcpy(l->buf + l->len, "...", 3);
            l->len += 3;
        }
        l->buf[l->len++] = '\n';
    }
    ssize_t w = write(atomic_load_explicit(&out_fd, memory_order_acquire), l->buf, l->len);
    (void)w; /* nowhere to report a failed log write */
}

static const char *level_name(slim_log_level level)
{
    switch (level) {
    case SLIM_LOG_DEBUG: return "debug";
    case SLIM_LOG_INFO: return "info";
    case SLIM_LOG_WARN: return "warn";
    default: return "error";
    }
}

/* {"ts":...,"level":...,"msg":...[,"request_id":...] -- the caller adds
 * its fields and finish() closes the object. */
static void json_begin(line *l, slim_log_level level, const char *msg, const char *request_id)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);
    printf_(l, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", when, level_name(level));
    json_string(l, msg, BUDGET_MSG);
    if (request_id) {
        puts_(l, ",\"request_id\":");
        json_string(l, request_id, BUDGET_ID);
    }
}

static bool level_on(slim_log_level level)
{
    switch (level) {
    case SLIM_LOG_DEBUG: return atomic_load_explicit(&log_verbose, memory_order_relaxed) >= 1;
    case SLIM_LOG_INFO: return atomic_load_explicit(&log_info, memory_order_relaxed);
    case SLIM_LOG_WARN: return atomic_load_explicit(&log_warnings, memory_order_relaxed);
    default: return atomic_load_explicit(&log_errors, memory_order_relaxed);
    }
}

/* ISO8601's prefix: "2026-11-24T10:00:00Z I " (Triton's letters). */
static void iso_begin(line *l, slim_log_level level)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    static const char letter[] = {'V', 'I', 'W', 'E'};
    printf_(l, "%s %c ", when, letter[level]);
}

void slim_server_log(slim_log_level level, const char *request_id, const char *fmt, ...)
{
    if (!level_on(level))
        return;
    char msg[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    line l = {.len = 0};
    slim_log_format format = atomic_load(&log_format);
    if (format == SLIM_LOG_JSON) {
        json_begin(&l, level, msg, request_id);
    } else {
        if (format == SLIM_LOG_ISO8601)
            iso_begin(&l, level);
        puts_(&l, "slimserve: ");
        puts_(&l, msg);
        if (request_id) {
            puts_(&l, " request_id=");
            puts_(&l, request_id);
        }
    }
    finish(&l, format);
}

void slim_server_log_access(const char *request_id, const char *method, const char *path,
                            int status, double duration_ms, size_t bytes)
{
    if (!atomic_load_explicit(&log_access, memory_order_relaxed) || !level_on(SLIM_LOG_INFO))
        return;
    line l = {.len = 0};
    slim_log_format format = atomic_load(&log_format);
    if (format == SLIM_LOG_JSON) {
        json_begin(&l, SLIM_LOG_INFO, "request", request_id);
        puts_(&l, ",\"method\":");
        json_string(&l, method, BUDGET_METHOD);
        puts_(&l, ",\"path\":");
        json_string(&l, path, BUDGET_PATH);
        printf_(&l, ",\"status\":%d,\"duration_ms\":%.3f,\"bytes\":%zu", status, duration_ms,
                bytes);
    } else {
        /* The path is the client's: control bytes would forge log lines. */
        char safe[1024];
        size_t n = 0;
        for (const char *p = path; *p && n + 1 < sizeof(safe); p++)
            safe[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
        safe[n] = '\0';
        if (format == SLIM_LOG_ISO8601)
            iso_begin(&l, SLIM_LOG_INFO);
        printf_(&l, "slimserve: %s %s %d %.3f ms %zu bytes request_id=%s", method, safe, status,
                duration_ms, bytes, request_id ? request_id : "-");
    }
    finish(&l, format);
}

/* ---- request ids -------------------------------------------------------- */

bool slim_server_request_id_valid(const char *s)
{
    size_t n = 0;
    for (; s && s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || n >= SLIM_REQUEST_ID_MAX)
            return false;
    return n > 0;
}

/* splitmix64 is a bijection of its input: distinct counters give distinct
 * ids within a process; the random seed keeps replicas apart. */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t id_seed[2];
static atomic_uint_least64_t id_counter;
static pthread_once_t id_once = PTHREAD_ONCE_INIT;

static void id_seed_init(void)
{
    if (getrandom(id_seed, sizeof(id_seed), 0) != (ssize_t)sizeof(id_seed)) {
        struct timespec ts; /* no entropy: time and pid still part replicas */
        clock_gettime(CLOCK_REALTIME, &ts);
        id_seed[0] = splitmix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
        id_seed[1] = splitmix64((uint64_t)getpid());
    }
}

void slim_server_request_id_new(char out[SLIM_REQUEST_ID_MAX + 1])
{
    pthread_once(&id_once, id_seed_init);
    uint64_t n = atomic_fetch_add(&id_counter, 1);
    snprintf(out, SLIM_REQUEST_ID_MAX + 1, "%016llx%016llx",
             (unsigned long long)id_seed[0], (unsigned long long)splitmix64(id_seed[1] + n));
}
