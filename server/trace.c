/*
 * trace.c - the trace extension's settings and trace lines (trace.h).
 *
 * Cost when off: slim_server_trace_on() is one relaxed load where a
 * request is answered, and the run stores its start time (one store per
 * request): the timestamps come from what the batcher records anyway for
 * the statistics extension (t_queued, the run's phases), read once the
 * request is answered. When on, a request
 * takes mu to count itself and, when sampled, writes one line under it:
 * tracing is a diagnosis tool, and sampled lines are rare.
 *
 * Scopes: the global one and one per model that has settings of its own.
 * Each field of a model's scope is set or falls back to the global one,
 * and the state that goes with a field lives with the scope that owns it:
 * the request counter with trace_rate, the traces left with trace_count,
 * the open file (its index and bytes) with trace_file.
 */
#include "buf.h"
#include "clock.h"
#include "log.h"
#include "outfile.h"
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_MODEL_SCOPES 256
#define MODEL_NAME_MAX 256

enum { F_LEVEL, F_RATE, F_COUNT, F_FILE, F_FREQ, F_N };
static const char *const FIELD[F_N] = {"trace_level", "trace_rate", "trace_count", "trace_file",
                                       "log_frequency"};

typedef struct scope {
    char model[MODEL_NAME_MAX + 1];   /* "" for the global scope */
    unsigned set;                     /* model scopes: the fields it owns (1 << F_...) */
    bool timestamps;
    int64_t rate, count, freq;
    char file[1024];                  /* "" or the full path */
    /* the state of the fields it owns */
    uint64_t seen;                    /* requests counted for trace_rate */
    int64_t left;                     /* traces left (trace_count); -1: no limit */
    int fd;                           /* trace_file's current file; -1: not open */
    int64_t file_idx, in_file;        /* log_frequency: which file, traces in it */
    size_t bytes;                     /* written since trace_file was set */
    bool capped;                      /* max_bytes reached: writes no more */
} scope;

atomic_bool slim__trace_on;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static scope global = {.rate = 1000, .count = -1, .left = -1, .fd = -1};
static scope *models[MAX_MODEL_SCOPES];
static int n_models;
static const char *trace_dir;
static size_t max_bytes = 64u << 20;
static atomic_uint_least64_t trace_ids;

void slim_server_trace_init(const char *dir, size_t cap)
{
    trace_dir = dir;
    if (cap)
        max_bytes = cap;
}

static void writer_reset(scope *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    s->file_idx = s->in_file = 0;
    s->bytes = 0;
    s->capped = false;
}

void slim_server_trace_close(void)
{
    pthread_mutex_lock(&mu);
    writer_reset(&global);
    for (int i = 0; i < n_models; i++)
        writer_reset(models[i]);
    pthread_mutex_unlock(&mu);
}

/* ---- scopes (under mu) -------------------------------------------------- */

static scope *find_model(const char *model)
{
    for (int i = 0; model && *model && i < n_models; i++)
        if (strcmp(models[i]->model, model) == 0)
            return models[i];
    return NULL;
}

/* The scope that owns field f for model's requests. */
static scope *owner(scope *ms, int f)
{
    return ms && (ms->set & (1u << f)) ? ms : &global;
}

static void recompute_on(void)
{
    bool on = global.timestamps;
    for (int i = 0; i < n_models && !on; i++)
        on = owner(models[i], F_LEVEL)->timestamps;
    atomic_store(&slim__trace_on, on);
}

static void remove_model(scope *ms)
{
    for (int i = 0; i < n_models; i++)
        if (models[i] == ms) {
            writer_reset(ms);
            free(ms);
            models[i] = models[--n_models];
            return;
        }
}

/* ---- settings ------------------------------------------------------------ */

/* A whole decimal number in [lo, 2^31), the only form the settings take. */
static bool parse_int(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '-')) /* strtoll takes " 5", "+5" */
        return false;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > INT32_MAX)
        return false;
    *out = v;
    return true;
}

/* Applies one value to `next` (a copy of the scope); false with err. */
static bool apply(scope *next, bool is_model, const slim_server_trace_value *v,
                  unsigned *touched, char *err, size_t cap)
{
    int f = 0;
    while (f < F_N && strcmp(FIELD[f], v->key) != 0)
        f++;
    if (f == F_N) {
        snprintf(err, cap, "unknown trace setting \"%.100s\" (trace_level, trace_rate, "
                 "trace_count, trace_file, log_frequency)", v->key);
        return false;
    }
    *touched |= 1u << f;
    if (v->n == 0) { /* clear: a model's falls back; the global one is its default */
        if (is_model) {
            next->set &= ~(1u << f);
            return true;
        }
        static const scope dflt = {.rate = 1000, .count = -1};
        if (f == F_LEVEL) next->timestamps = false;
        if (f == F_RATE) next->rate = dflt.rate;
        if (f == F_COUNT) next->count = dflt.count;
        if (f == F_FILE) next->file[0] = '\0';
        if (f == F_FREQ) next->freq = 0;
        return true;
    }
    if (f != F_LEVEL && v->n != 1) {
        snprintf(err, cap, "trace setting %s takes one value, not %zu", v->key, v->n);
        return false;
    }
    const char *s = v->vals[0];
    bool ok = true;
    switch (f) {
    case F_LEVEL: {
        bool off = false, ts = false;
        for (size_t i = 0; i < v->n && ok; i++) {
            off |= strcmp(v->vals[i], "OFF") == 0;
            ts |= strcmp(v->vals[i], "TIMESTAMPS") == 0;
            if (strcmp(v->vals[i], "OFF") != 0 && strcmp(v->vals[i], "TIMESTAMPS") != 0) {
                snprintf(err, cap, "trace setting trace_level \"%.60s\" is not one of \"OFF\", "
                         "\"TIMESTAMPS\"%s", v->vals[i],
                         strcmp(v->vals[i], "TENSORS") == 0 ? " (TENSORS is not supported)" : "");
                return false;
            }
        }
        if (off && ts) {
            snprintf(err, cap, "trace setting trace_level: \"OFF\" cannot be given with "
                     "\"TIMESTAMPS\"");
            return false;
        }
        next->timestamps = ts;
        break;
    }
    case F_RATE: ok = parse_int(s, 1, &next->rate); break;
    case F_COUNT: ok = parse_int(s, -1, &next->count); break;
    case F_FREQ: ok = parse_int(s, 0, &next->freq); break;
    default:
        next->file[0] = '\0';
        if (*s && !slim_server_outfile_check(trace_dir, s, "trace_file", next->file,
                                             sizeof(next->file), err, cap))
            return false;
    }
    if (!ok) {
        snprintf(err, cap, "trace setting %s \"%.40s\" is not %s", v->key, s,
                 f == F_RATE ? "a whole number from 1 to 2147483647"
                 : f == F_COUNT ? "-1 (no limit) or a whole number from 0 to 2147483647"
                                : "a whole number from 0 to 2147483647");
        return false;
    }
    next->set |= 1u << f;
    return true;
}

/* What the new settings change in the state that goes with each field:
 * setting trace_count again restarts its count, trace_rate its counter,
 * trace_file (or log_frequency) its file and byte budget. */
static void commit(scope *s, const scope *next, unsigned touched)
{
    s->set = next->set;
    s->timestamps = next->timestamps;
    s->rate = next->rate;
    s->count = next->count;
    s->freq = next->freq;
    snprintf(s->file, sizeof(s->file), "%s", next->file);
    if (touched & (1u << F_COUNT))
        s->left = s->count;
    if (touched & (1u << F_RATE))
        s->seen = 0;
    if (touched & ((1u << F_FILE) | (1u << F_FREQ)))
        writer_reset(s);
}

/* Tracing with no file to write to would drop every trace silently: the
 * settings in effect for a model scope ms (NULL: the global scope g). */
static bool check_file(const scope *ms, const scope *g, char *err, size_t cap)
{
    bool ts = ms && (ms->set & (1u << F_LEVEL)) ? ms->timestamps : g->timestamps;
    const char *file = ms && (ms->set & (1u << F_FILE)) ? ms->file : g->file;
    if (ts && !file[0]) {
        snprintf(err, cap, "trace setting trace_level TIMESTAMPS%s%.200s%s needs a trace_file "
                 "(a file name inside --trace-dir)", ms ? " for model \"" : "",
                 ms ? ms->model : "", ms ? "\"" : "");
        return false;
    }
    return true;
}

bool slim_server_trace_update(const char *model, const slim_server_trace_value *vals, size_t n,
                              char *err, size_t err_cap)
{
    bool is_model = model && *model;
    if (is_model && strlen(model) > MODEL_NAME_MAX) {
        snprintf(err, err_cap, "model name is longer than %d bytes", MODEL_NAME_MAX);
        return false;
    }
    pthread_mutex_lock(&mu);
    scope *ms = is_model ? find_model(model) : &global;
    if (is_model && n == 0) { /* Triton: a model with no settings drops its own */
        if (ms)
            remove_model(ms);
        recompute_on();
        pthread_mutex_unlock(&mu);
        return true;
    }
    scope next = {.left = -1, .fd = -1};
    if (ms)
        next = *ms;
    else
        snprintf(next.model, sizeof(next.model), "%s", model);
    unsigned touched = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = apply(&next, is_model, &vals[i], &touched, err, err_cap);
    /* What the change leaves in effect: this model, or the global scope
     * and every model that falls back on it. */
    if (ok && is_model)
        ok = check_file(&next, &global, err, err_cap);
    if (ok && !is_model) {
        ok = check_file(NULL, &next, err, err_cap);
        for (int i = 0; ok && i < n_models; i++)
            ok = check_file(models[i], &next, err, err_cap);
    }
    if (ok && !ms) {
        if (n_models == MAX_MODEL_SCOPES) {
            snprintf(err, err_cap, "trace settings exist for %d models already (the most)",
                     MAX_MODEL_SCOPES);
            ok = false;
        } else if (!(ms = calloc(1, sizeof(*ms)))) {
            snprintf(err, err_cap, "out of memory");
            ok = false;
        } else {
            *ms = (scope){.left = -1, .fd = -1};
            snprintf(ms->model, sizeof(ms->model), "%s", model);
            models[n_models++] = ms;
        }
    }
    if (ok)
        commit(ms, &next, touched);
    recompute_on();
    pthread_mutex_unlock(&mu);
    return ok;
}

void slim_server_trace_get(const char *model, slim_server_trace_view *out)
{
    pthread_mutex_lock(&mu);
    scope *ms = find_model(model);
    out->level = owner(ms, F_LEVEL)->timestamps ? "TIMESTAMPS" : "OFF";
    snprintf(out->rate, sizeof(out->rate), "%" PRId64, owner(ms, F_RATE)->rate);
    snprintf(out->count, sizeof(out->count), "%" PRId64, owner(ms, F_COUNT)->left);
    snprintf(out->log_frequency, sizeof(out->log_frequency), "%" PRId64,
             owner(ms, F_FREQ)->freq);
    snprintf(out->file, sizeof(out->file), "%s", owner(ms, F_FILE)->file);
    pthread_mutex_unlock(&mu);
}

/* ---- trace lines ------------------------------------------------------- */

/* Opens w's current file (trace_file, or trace_file.K with log_frequency). */
static bool writer_open(scope *w, int64_t freq)
{
    char name[1100], full[1200], err[400];
    const char *base = strrchr(w->file, '/') + 1;
    if (freq > 0)
        snprintf(name, sizeof(name), "%s.%" PRId64, base, w->file_idx);
    else
        snprintf(name, sizeof(name), "%s", base);
    w->fd = slim_server_outfile_open(trace_dir, name, "trace_file", full, sizeof(full), err,
                                     sizeof(err));
    if (w->fd < 0) {
        slim_server_log(SLIM_LOG_WARN, NULL, "trace: %s; traces to it are dropped until "
                        "trace_file is set again", err);
        w->capped = true;
    }
    return w->fd >= 0;
}

static void put_ts(slim_server_buf *b, const char *name, int64_t ns, bool first)
{
    slim_server_buf_printf(b, "%s{\"name\":\"%s\",\"ns\":%" PRId64 "}", first ? "" : ",", name,
                           ns);
}

/* The line: the batcher's clock (monotonic) made epoch nanoseconds.
 * The run's phases are nanoseconds from its start; the arrival and the
 * queueing are microseconds, so each timestamp is clamped to the one
 * before it (a microsecond's rounding must not read as time going back). */
static void format_line(slim_server_buf *b, const char *model, int64_t version,
                        const char *request_id, const slim_server_task *t, int64_t t_begin_us)
{
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t now = slim_server_now_ns();
    int64_t off = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - now;
    int64_t ts[7];
    ts[0] = t_begin_us * 1000;
    ts[1] = t->t_queued * 1000;
    ts[2] = t->run_ns ? t->run_ns : t->t_started * 1000;
    ts[3] = ts[2] + t->input_ns;
    ts[4] = ts[3] + t->infer_ns;
    ts[5] = ts[4] + t->output_ns;
    ts[6] = now;
    for (int i = 1; i < 7; i++)
        if (ts[i] < ts[i - 1])
            ts[i] = ts[i - 1];
    static const char *const NAME[7] = {"REQUEST_START", "QUEUE_START", "COMPUTE_START",
                                        "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                                        "COMPUTE_END", "REQUEST_END"};
    slim_server_buf_printf(b, "{\"id\":%" PRIu64 ",\"model_name\":",
                           (uint64_t)atomic_fetch_add(&trace_ids, 1) + 1);
    slim_server_buf_json_string(b, model);
    slim_server_buf_printf(b, ",\"model_version\":%" PRId64 ",\"request_id\":", version);
    slim_server_buf_json_string(b, request_id ? request_id : "");
    slim_server_buf_puts(b, ",\"timestamps\":[");
    for (int i = 0; i < 7; i++)
        put_ts(b, NAME[i], ts[i] + off, i == 0);
    slim_server_buf_puts(b, "]}\n");
}

void slim_server_trace_request(const char *model, int64_t version, const char *request_id,
                               const slim_server_task *t, int64_t t_begin_us)
{
    pthread_mutex_lock(&mu);
    scope *ms = find_model(model);
    scope *lv = owner(ms, F_LEVEL), *rt = owner(ms, F_RATE), *ct = owner(ms, F_COUNT);
    scope *w = owner(ms, F_FILE);
    int64_t freq = owner(ms, F_FREQ)->freq;
    if (!lv->timestamps || (++rt->seen % (uint64_t)rt->rate) != 0 || ct->left == 0 ||
        !w->file[0] || w->capped) {
        pthread_mutex_unlock(&mu);
        return;
    }
    slim_server_buf b = {0};
    format_line(&b, model, version, request_id, t, t_begin_us);
    if (!b.oom && w->bytes + b.len > max_bytes) {
        slim_server_log(SLIM_LOG_WARN, NULL, "trace: %s reached --trace-max-bytes (%zu bytes "
                        "written); no more traces are written to it until trace_file is set "
                        "again", w->file, w->bytes);
        w->capped = true;
    } else if (!b.oom && (w->fd >= 0 || writer_open(w, freq))) {
        ssize_t n = write(w->fd, b.data, b.len);
        if (n == (ssize_t)b.len) {
            w->bytes += b.len;
            if (ct->left > 0)
                ct->left--;
            if (freq > 0 && ++w->in_file >= freq) { /* the next trace starts file K+1 */
                close(w->fd);
                w->fd = -1;
                w->in_file = 0;
                w->file_idx++;
            }
        }
    }
    slim_server_buf_free(&b);
    pthread_mutex_unlock(&mu);
}
