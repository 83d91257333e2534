/*
 * server.h - slimserve's HTTP server (internal): the KServe v2 / Open
 * Inference Protocol as Triton speaks it over HTTP.
 *
 * How a request travels:
 *
 *     MHD thread (http.c)            gathers the body, calls the router
 *       -> routes.c                  health, metadata, repository, metrics
 *       -> infer_codec.c             JSON (+ binary) -> typed tensors
 *       -> batcher.c queue           typed task, in its model's queue; the
 *                                    connection is suspended
 *     the model's instance thread    batcher.c merges queued requests of one
 *                                    input shape; batch_run.c runs the batch
 *                                    (halving it on out-of-memory), splits
 *                                    the outputs and resumes each connection
 *     MHD thread                     infer_codec.c encodes the outputs, answers
 *
 * A request may be stopped before its answer is ready: its deadline passes
 * (config.json "request_timeout_ms", the request's "timeout" parameter),
 * its client disconnects, its model is unloaded, or the server stops. The
 * batcher answers a queued request at once; a running one is answered when
 * its run returns, which a cancelled run does at its next check (runtime/
 * cancel.h). batcher.c has the rules for a batch whose requests disagree.
 *
 * JSON never reaches the runtime, and no HTTP thread ever waits for a model,
 * so health checks and /metrics answer while every worker is busy.
 *
 * Loaded models are refcounted (slim_server_model): a request holds a
 * reference from routing to its answer, so an unload while it runs only
 * takes the model out of the table; the last holder frees it.
 */
#ifndef SLIM_SERVER_H
#define SLIM_SERVER_H

#include "alloc.h"
#include "cancel.h"
#include "log.h"
#include "slim.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLIM_SERVER_NAME "slimserve"
#define SLIM_SERVER_VERSION "0.1.0"

struct MHD_Connection;

/* ---- a growable byte buffer (http.c) ------------------------------------ */

/* Appends never fail loudly: an allocation failure sets oom and later
 * appends do nothing, so a builder is checked once, at the end. */
typedef struct slim_server_buf {
    char *data;
    size_t len, cap;
    bool oom;
} slim_server_buf;

void slim_server_buf_append(slim_server_buf *b, const void *p, size_t n);
void slim_server_buf_puts(slim_server_buf *b, const char *s);
void slim_server_buf_printf(slim_server_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "quoted"; bytes that are not valid UTF-8 become \ufffd, so a reply that
 * echoes a client's bytes is still valid UTF-8 JSON. */
void slim_server_buf_json_string(slim_server_buf *b, const char *s);
void slim_server_buf_free(slim_server_buf *b);
/* Length of the well-formed UTF-8 sequence at p (n bytes left), 0 if none. */
size_t slim_server_utf8_len(const unsigned char *p, size_t n);

int64_t slim_server_now_us(void); /* monotonic clock */

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
struct MHD_Response;
struct MHD_Response *slim_server_reply_response(slim_server_reply *r);

/* ---- model configuration (config.c) ------------------------------------- */

typedef struct slim_server_io {
    char *name;
    slim_dtype dtype;
    int ndim;                   /* -1: any rank; excludes the batch dim */
    int64_t dims[SLIM_MAX_DIMS];/* -1: dynamic */
} slim_server_io;

/* "dynamic_batching" in config.json, with Triton's names. */
#define SLIM_SERVER_MAX_PREFERRED 16

typedef enum {
    SLIM_SERVER_TIMEOUT_REJECT,     /* an expired request is answered 503 */
    SLIM_SERVER_TIMEOUT_DELAY,      /* ... goes to the back of the queue, once */
} slim_server_timeout_action;

typedef struct slim_server_batching {
    bool enabled;                   /* the key is present: queued requests merge */
    int64_t max_queue_delay_us;     /* how long the oldest request waits for company */
    int preferred[SLIM_SERVER_MAX_PREFERRED]; /* preferred_batch_size, ascending */
    int n_preferred;
    /* default_queue_policy */
    int max_queue_size;             /* 0: the server's --queue-size */
    int64_t default_timeout_us;     /* 0: requests wait as long as it takes */
    slim_server_timeout_action timeout_action;
    bool allow_timeout_override;    /* a request's "timeout" parameter counts */
    /* slimserve's own: full batches without out-of-memory before the
     * batch ceiling of an input shape is raised again */
    int oom_probe_after;
} slim_server_batching;

/* "version_policy" in config.json (version_policy.c), Triton's: which
 * version folders are loaded. The default is {"latest": {"num_versions": 1}}. */
typedef enum {
    SLIM_SERVER_VERSIONS_LATEST,    /* the num_versions highest */
    SLIM_SERVER_VERSIONS_ALL,
    SLIM_SERVER_VERSIONS_SPECIFIC,  /* those listed */
} slim_server_version_kind;

typedef struct slim_server_version_policy {
    slim_server_version_kind kind;
    int num_versions;               /* LATEST */
    int64_t *versions;              /* SPECIFIC: ascending, no repeats */
    int n_versions;
} slim_server_version_policy;

/* Parses the "version_policy" value; errors name the field. */
slim_status slim_server_version_policy_parse(const cJSON *v, slim_server_version_policy *p,
                                             slim_err *err);
/* Whether version folder i of the n in `all` (ascending) is loaded. */
bool slim_server_version_policy_selects(const slim_server_version_policy *p,
                                        const int64_t *all, int n, int i);
cJSON *slim_server_version_policy_to_json(const slim_server_version_policy *p);
void slim_server_version_policy_free(slim_server_version_policy *p);

typedef struct slim_server_config {
    char *name;
    char *platform;
    int max_batch_size;         /* 0: the model does not batch */
    int instance_count;         /* 0 until resolved: the server's --workers */
    slim_server_batching batching;
    slim_server_io *inputs, *outputs;
    int n_inputs, n_outputs;
    size_t memory_limit;        /* bytes the model may hold at once; 0: no limit */
    int64_t request_timeout_ms; /* deadline of every request, queue plus run; 0: none */
    /* "memory_limit": {"cuda:0": ..., "cpu": ...}: what it may hold on each
     * device, by account slot (alloc.h; 0: no limit there). */
    size_t device_limits[SLIM_MEM_DEVICE_SLOTS];
    char *device;               /* "cuda:0"...; NULL: the server's --device */
    char *precision;            /* "fp16", "bf16", "int8"; NULL: fp32 */
    char **int8_exclude;        /* "int8": {"exclude": [...]}: layers kept in fp32 */
    int n_int8_exclude;
    double int8_max_error;      /* "int8": {"max_error": x}; 0: no budget */
    /* "pruning": {"method", "amount", "scope", "masks", "ops", "storage"}
     * (quant/prune.h); prune_method NULL: none. prune_masks is as written,
     * relative to the model's folder (the repository resolves it). */
    char *prune_method, *prune_masks, *prune_storage;
    double prune_amount;
    bool prune_global;
    char **prune_ops;
    int n_prune_ops;
    char *int8_fallback;        /* "int8": {"fallback": "bf16"}: left-float layers half */
    char *activations;          /* "activations": "fp32" | "fp16" | "bf16"; NULL: unset */
    char **half_exclude;        /* "half": {"exclude": [...]}: layers kept in fp32 */
    int n_half_exclude;
    int convert;                /* "convert": 1 true, -1 false, 0 not given
                                   (then --convert-cache decides) */
    slim_server_version_policy versions; /* which version folders load */
    /* Keys kept as given so /config shows them: dynamic_batching (also
     * parsed into `batching`), and keys later issues act on (precision,
     * pruning). */
    cJSON *reserved;
} slim_server_config;

/* dir_name is the model's folder name: config "name" must equal it. text
 * NULL gives the defaults. Errors name the offending key. */
slim_status slim_server_config_parse(const char *text, const char *dir_name,
                                     slim_server_config *cfg, slim_err *err);
/* Checks declared inputs/outputs against the model and fills in the ones
 * left out, so afterwards cfg describes every model input and output. */
slim_status slim_server_config_resolve(slim_server_config *cfg, const slim_model *m,
                                       slim_err *err);
cJSON *slim_server_config_to_json(const slim_server_config *cfg);
void slim_server_config_free(slim_server_config *cfg);

const char *slim_server_dtype_kserve(slim_dtype t);  /* "FP32", NULL if none */
slim_dtype slim_server_dtype_from_kserve(const char *s);
const char *slim_server_dtype_triton(slim_dtype t);  /* "TYPE_FP32" */
slim_dtype slim_server_dtype_from_triton(const char *s);

/* ---- metrics (metrics.c) ------------------------------------------------- */

#define SLIM_SERVER_FAILURE_MAP(X) \
    X(BAD_REQUEST)                 \
    X(REJECTED)                    \
    X(MEMORY)                      \
    X(BACKEND)                     \
    X(CANCELED)                    \
    X(OTHER)

typedef enum {
#define SLIM__FAIL_ENUM(name) SLIM_SERVER_FAIL_##name,
    SLIM_SERVER_FAILURE_MAP(SLIM__FAIL_ENUM)
#undef SLIM__FAIL_ENUM
    SLIM_SERVER_FAIL_COUNT
} slim_server_failure;

/* Counters of one model version; they outlive unload/load cycles. */
/* Histogram buckets: batch sizes 1, 2, 4 .. 1024 and +Inf; queue waits
 * from 100 us to 10 s and +Inf (metrics.c has the bounds). */
#define SLIM_SERVER_BATCH_BUCKETS 12
#define SLIM_SERVER_QUEUE_BUCKETS 17

/* Triton's statistics extension (stats.c): counters per batch size, in an
 * open-addressed table of this many sizes, allocated at a model version's
 * first run. Sizes past it (a model batching over 256 distinct sizes)
 * are counted in the totals only. */
#define SLIM_SERVER_BATCH_STAT_SLOTS 256

typedef struct slim_server_batch_stat {
    atomic_int_least64_t size;      /* 0: a free slot */
    atomic_uint_least64_t count, input_ns, infer_ns, output_ns;
} slim_server_batch_stat;

typedef struct slim_server_stats {
    char *model;
    int64_t version;
    atomic_uint_least64_t success, failure[SLIM_SERVER_FAIL_COUNT];
    atomic_uint_least64_t inference_count, execution_count;
    atomic_uint_least64_t request_us, queue_us, compute_us;
    /* the statistics extension: request time split by outcome, compute
     * split into decoding/merging inputs, the model run, and splitting/
     * encoding outputs (of successful requests) */
    atomic_uint_least64_t success_us, fail_us;
    atomic_uint_least64_t input_ns, infer_ns, output_ns;
    atomic_uint_least64_t last_inference_ms; /* wall clock, ms since the epoch */
    _Atomic(slim_server_batch_stat *) batch_stats;
    /* batching: per-bucket (not cumulative) counts, sums */
    atomic_uint_least64_t batch_hist[SLIM_SERVER_BATCH_BUCKETS], batch_rows;
    atomic_uint_least64_t queue_hist[SLIM_SERVER_QUEUE_BUCKETS], queue_wait_us;
    atomic_uint_least64_t halvings, ooms, rejected_queue_full, rejected_timeout;
    atomic_int batch_ceiling;       /* tightest ceiling over the model's input shapes */
    atomic_int live_batchers;       /* the gauge is shown while > 0 */
    struct slim_server_stats *next;
} slim_server_stats;

typedef struct slim_server_metrics {
    pthread_mutex_t mu;
    slim_server_stats *head;
} slim_server_metrics;

void slim_server_metrics_init(slim_server_metrics *mx);
void slim_server_metrics_free(slim_server_metrics *mx);
/* Finds or creates; NULL only when out of memory. */
slim_server_stats *slim_server_metrics_get(slim_server_metrics *mx, const char *model,
                                           int64_t version);
/* Prometheus text exposition format, all sections. */
void slim_server_metrics_render(slim_server_metrics *mx, slim_server_buf *out);
/* One batch run of `rows` rows; one request's wait in the queue. */
void slim_server_stats_observe_batch(slim_server_stats *s, int64_t rows);
void slim_server_stats_observe_queue(slim_server_stats *s, int64_t wait_us);

/* ---- the statistics extension (stats.c) --------------------------------- */

int64_t slim_server_now_ns(void); /* monotonic clock */
/* One successful model run of `rows` rows and its three phases. */
void slim_server_stats_observe_run(slim_server_stats *s, int64_t rows, int64_t input_ns,
                                   int64_t infer_ns, int64_t output_ns);
/* An inference request of this model version has ended (last_inference). */
void slim_server_stats_touch(slim_server_stats *s);

/* ---- repository (repository.c) ------------------------------------------ */

typedef struct slim_server_model {
    char *name;
    int64_t version;
    slim_server_config cfg;     /* resolved against this version's model */
    slim_model *model;
    slim_server_stats *stats;
    struct slim_server_batcher *batcher; /* its queue and instance threads */
    atomic_int refs;
} slim_server_model;

void slim_server_model_ref(slim_server_model *m);
void slim_server_model_release(slim_server_model *m); /* frees at zero */

typedef struct slim_server_slot {   /* one version folder */
    int64_t version;
    slim_server_model *live;        /* the table's reference; NULL if not ready */
    bool by_policy;                 /* left out by version_policy: 404, not 503 */
    char reason[1024];              /* why not ready */
} slim_server_slot;

typedef struct slim_server_entry {  /* one model folder */
    char *name;
    slim_server_slot *slots;        /* ascending versions */
    int n_slots;
    char reason[1024];              /* model-level failure (config.json, no versions) */
    bool failed;
    uint64_t seq;                   /* the load/unload whose result this holds */
} slim_server_entry;

/* Repository loads/unloads under way at once; more are answered 503. */
#define SLIM_SERVER_MAX_REPO_OPS 16

typedef struct slim_server_repo {
    char *root;
    slim_server_metrics *metrics;
    pthread_mutex_t mu;             /* guards entries and slots */
    uint64_t op_seq;                /* loads/unloads started so far (under mu) */
    int default_instances;          /* --workers: instance_count when not set */
    const char *default_device;     /* --device: where models run unless config.json says */
    const char *default_precision;  /* --precision: unless config.json says; NULL: fp32 */
    int default_queue_size;         /* --queue-size: max_queue_size when not set */
    int load_timeout_s;             /* --load-timeout: a load's time bound; 0: none */
    /* The tokens of the loads under way (under mu), for shutdown to cancel. */
    struct slim_cancel *loads[SLIM_SERVER_MAX_REPO_OPS];
    const char *convert_cache;      /* --convert-cache: every ONNX model converted
                                       there; NULL: only "convert": true ones, into
                                       slim_server_convert_cache_default() */
    slim_server_entry *entries;
    int n_entries, cap_entries;
} slim_server_repo;

/* Why a version folder that the model's version_policy leaves out is not
 * served (repository index). */
#define SLIM_SERVER_POLICY_REASON "unloaded by version policy"

/* Scans root and loads every model found; a model that fails is recorded,
 * not fatal. Fails only when root can't be read. instances and queue_size
 * are the defaults of instance_count and max_queue_size; device is where
 * models load unless their config.json says ("device"; NULL: the CPU), and
 * precision how ("precision"; NULL: fp32). */
slim_status slim_server_repo_open(slim_server_repo *repo, const char *root,
                                  slim_server_metrics *metrics, int instances,
                                  int queue_size, const char *device, const char *precision,
                                  const char *convert_cache, int load_timeout_s, slim_err *err);
void slim_server_repo_close(slim_server_repo *repo);
/* Cancels the loads under way (SIGTERM); each fails at its next check. */
void slim_server_repo_cancel_loads(slim_server_repo *repo);

/* version < 0: the highest ready one. On success returns a new reference;
 * otherwise NULL with *http_status (404 unknown, 503 not ready) and msg. */
slim_server_model *slim_server_repo_acquire(slim_server_repo *repo, const char *name,
                                            int64_t version, int *http_status,
                                            char *msg, size_t cap);
/* The ready versions of name, ascending; returns how many (<= cap). */
int slim_server_repo_ready_versions(slim_server_repo *repo, const char *name,
                                    int64_t *out, int cap);
/* (Re)loads name from disk; *http_status says how a failure should read. */
slim_status slim_server_repo_load(slim_server_repo *repo, const char *name,
                                  int *http_status, slim_err *err);
slim_status slim_server_repo_unload(slim_server_repo *repo, const char *name,
                                    int *http_status, slim_err *err);
/* New references to the ready versions of `name` (every model when NULL),
 * by name then version; returns how many (<= cap). */
int slim_server_repo_ready_models(slim_server_repo *repo, const char *name,
                                  slim_server_model **out, int cap);
/* [{"name","version","state","reason"}...] */
cJSON *slim_server_repo_index(slim_server_repo *repo, bool ready_only);

/* ---- conversion cache (convert_cache.c) --------------------------------- */

/* The .slim conversion of src with opts' precision and int8 exclusions
 * (its device is ignored: the file is placed when it loads), written into
 * cache_dir (created) unless a file with its key is already there: its path
 * in out, *converted true when it was written now. */
slim_status slim_server_convert_cached(const char *cache_dir, const char *model,
                                       int64_t version, const char *src,
                                       const slim_load_opts *opts, char *out, size_t cap,
                                       bool *converted, slim_err *err);
/* $SLIMSERVE_CACHE_DIR, else $XDG_CACHE_HOME/slimserve, else
 * $HOME/.cache/slimserve, else /tmp/slimserve-cache. */
const char *slim_server_convert_cache_default(void);

/* ---- memory (memory.c) -------------------------------------------------- */

/* Names the model's memory account after it and applies cfg.memory_limit
 * (fails when the weights alone are over it). */
slim_status slim_server_memory_attach(slim_server_model *m, slim_err *err);
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

/* ---- inference requests (infer_codec.c) --------------------------------- */

typedef struct slim_server_out_req {
    int index;                  /* the model output's index */
    bool binary;
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
} slim_server_infer;

/* Parses a request body's JSON strictly (cJSON alone is lenient): only
 * whitespace may follow the value, and no string may hold a NUL (cJSON
 * would cut it there, so "in\u0000put" would match an input "in"). NULL
 * with err naming the byte on failure. Numbers written with a fraction or
 * an exponent ("3136.0", "1e3") are marked, for slim_server_json_integer. */
cJSON *slim_server_json_parse(const char *text, size_t len, slim_err *err);
/* The bytes cJSON can malloc to parse these len bytes, at most (a count of
 * the values and strings in them; infer_codec.c says how it was measured). */
size_t slim_server_json_parse_bound(const char *text, size_t len);
/* v is a number written as an integer, within [lo, hi]; *out gets it. */
bool slim_server_json_integer(const cJSON *v, double lo, double hi, int64_t *out);

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

/* ---- per-model scheduler (batcher.c) and batch runs (batch_run.c) ------ */

struct slim_server_shape;       /* one input signature's queue state (batcher.c) */

typedef struct slim_server_task {
    slim_server_model *model;       /* a reference held by the request */
    const slim_server_infer *rq;
    /* set by the scheduler */
    struct slim_server_shape *shape;/* NULL when the model does not batch */
    int64_t rows;                   /* the request's batch size (1 when not batching) */
    int64_t deadline;               /* queue timeout (monotonic us); 0: none */
    bool delayed;                   /* timed out under timeout_action DELAY */
    /* set by the submitter: the request's own deadline, queue plus run
     * (monotonic us; 0: none), answered 504 when it passes */
    int64_t run_deadline;
    int64_t run_timeout_us;         /* that timeout, for the message */
    bool timeout_from_request;      /* the "timeout" parameter (else request_timeout_ms) */
    /* Whether the client went away (a peek at its socket); called by the
     * batcher every few tens of ms while the task is queued or running, so
     * it must be cheap and never block. NULL: never asked. */
    bool (*gone)(struct slim_server_task *t);
    /* The process is about to exit with t's run still going (it did not
     * stop when cancelled): tell the client directly, without blocking.
     * NULL: nothing to tell. */
    void (*abandon)(struct slim_server_task *t);
    /* the scheduler's: SLIM_CANCEL_CLIENT once gone() said so */
    atomic_int cancelled;
    /* filled by the instance that ran it */
    slim_status status;
    slim_err err;
    int http_status;                /* for a failure; 0: from status */
    slim_server_failure failure;    /* for a failure: the metrics reason */
    slim_tensor *outputs;           /* may view one buffer shared with its batch */
    int n_outputs;
    int64_t t_queued, t_started, t_done;
    int64_t input_ns, infer_ns, output_ns; /* phases of the run that answered it */
    /* called by the instance once the task is done; must not block */
    void (*done)(struct slim_server_task *t);
    void *user;
    struct slim_server_task *next;
} slim_server_task;

typedef struct slim_server_batcher slim_server_batcher;

/* Starts m's queue and m->cfg.instance_count instance threads; the model
 * owns the batcher and stops it in model_free. queue_size is the default
 * of max_queue_size. */
slim_status slim_server_batcher_create(slim_server_model *m, int queue_size,
                                       slim_server_batcher **out, slim_err *err);
/* Queues t. timeout_us > 0 overrides the queue policy's timeout (the
 * request's "timeout" parameter). false when the queue is full: err says
 * so and the caller answers 503 with Retry-After. */
bool slim_server_batcher_submit(slim_server_batcher *b, slim_server_task *t,
                                int64_t timeout_us, slim_err *err);
/* Runs what is queued, then joins the threads and frees the batcher. */
void slim_server_batcher_stop(slim_server_batcher *b);
/* Any thread: every request of b's model is cancelled for `why`
 * (SLIM_CANCEL_UNLOAD, SLIM_CANCEL_SHUTDOWN) and answered 503: queued ones
 * at once, running ones when their run stops (at its next check); later
 * submits are refused. For good: an unloaded model never runs again. */
void slim_server_batcher_cancel(slim_server_batcher *b, slim_cancel_reason why);
/* The same for every batcher alive, those of unloaded or replaced models
 * that still hold requests included (shutdown). */
void slim_server_batchers_cancel_all(slim_cancel_reason why);
/* Tasks submitted to any batcher and not yet answered (their connections
 * are suspended until they are). */
int64_t slim_server_batchers_pending(void);
/* Calls t->abandon for every task still running on any batcher (the
 * process exits next, without waiting for them); returns how many. */
int64_t slim_server_batchers_abandon(void);

/* ---- the server (http.c, routes.c) -------------------------------------- */

typedef struct slim_server_opts {
    const char *repository;
    const char *host;
    int port;
    size_t max_request_bytes;
    /* Largest reply body (infer_codec.c): an answer that would be larger is
     * refused 507 before it is built, its size named. 0: no limit. */
    size_t max_response_bytes;
    int workers;                    /* instance_count unless config.json sets it */
    int queue_capacity;             /* max_queue_size unless config.json sets it */
    int http_threads;
    size_t memory_limit;            /* the CPU allocator's limit; 0: none */
    const char *device;             /* default device of models; NULL: cpu */
    const char *precision;          /* default precision of models; NULL: fp32 */
    const char *convert_cache;      /* --convert-cache DIR */
    /* Slow or silent clients (http.c): a request whose body has not fully
     * arrived body_timeout_s after its headers is answered 408; a
     * connection with no request in progress is closed after
     * idle_timeout_s. At most max_connections connections, of which one
     * client address may hold max_connections_per_client (0: no limit). */
    int body_timeout_s;
    int idle_timeout_s;
    int max_connections;
    int max_connections_per_client;
    /* SIGTERM: how long running requests may go on before they are
     * cancelled (routes.c, slim_server_drain). */
    int shutdown_grace_s;
    /* A model load (start or the repository API) that takes longer fails
     * with a message naming the flag (repository.c); 0: no bound. */
    int load_timeout_s;
    /* When set, every endpoint but the health checks (and /metrics, unless
     * api_key_metrics) needs "Authorization: Bearer KEY" or "X-API-Key:
     * KEY"; others are answered 401 (auth.c). */
    const char *api_key;
    bool api_key_metrics;
} slim_server_opts;

struct slim_server_conn;            /* one connection's deadlines (http.c) */

struct slim_server_admission;
typedef struct slim_server_admission slim_server_admission;

typedef struct slim_server {
    slim_server_opts opts;
    slim_server_admission *admission; /* requests waiting for input memory */
    slim_server_metrics metrics;
    slim_server_repo repo;
    struct MHD_Daemon *daemon;
    atomic_int in_flight;           /* requests begun and not yet completed */
    atomic_bool stopping;           /* shutdown has begun: new requests get 503 */
    int port;                       /* the port actually bound */
    /* Open connections and the thread that enforces their deadlines
     * (http.c); conns_mu guards the list and every conn's phase. */
    pthread_mutex_t conns_mu;
    pthread_cond_t conns_cv;        /* wakes the watchdog to stop */
    pthread_t watchdog;
    bool watchdog_stop;
    struct slim_server_conn *conns;
    int64_t n_conns;
    int64_t n_open;                 /* of them, not being closed: held to --max-connections */
    int64_t n_lane;                 /* and past it, for health checks only (connections.c) */
    atomic_uint_least64_t body_timeouts, idle_closes;
    atomic_uint_least64_t evicted, refused, laned; /* at --max-connections (connections.c) */
    atomic_uint_least64_t unauthorized;  /* 401s (auth.c) */
    /* Repository loads and unloads run on threads of their own, their
     * connections suspended (routes.c), so that a long load holds no HTTP
     * thread and the connections it serves; shutdown cancels and waits. */
    atomic_int repo_ops;
} slim_server;

/* One HTTP request while it is being served. */
typedef struct slim_server_request {
    slim_server *srv;
    struct MHD_Connection *conn;
    struct slim_server_conn *sc;    /* its connection's deadlines; may be NULL */
    char method[16];
    char *url;
    char *body;
    size_t body_len, body_cap;
    bool too_large;
    /* Under --memory-limit a body of known length lives in the CPU
     * allocator (admission.c): its block, and the bytes counted for it. */
    struct slim_block *body_block;
    size_t body_held;
    bool body_waiting;              /* suspended until its body may be read */
    bool body_refused;              /* it may not: dropped as it comes, reply set */
    struct slim_block *parse_block; /* the JSON tree's reservation while it parses */
    long long infer_header_len;     /* from the request header; -1 if absent */
    int64_t t_begin;                /* when the body was complete */
    int64_t t_arrived;              /* when the headers were (the access log) */
    char id[SLIM_REQUEST_ID_MAX + 1]; /* X-Request-ID, given or made up */
    int64_t decode_ns;              /* decoding its inputs (statistics) */
    /* an answer waiting to be sent (set by a route or after a task) */
    bool reply_ready;
    slim_server_reply reply;
    bool logged;                    /* its access line is written */
    /* inference in progress */
    bool suspended;
    bool repo_op;                   /* suspended for a load/unload, not a run */
    int64_t declared_timeout_us;    /* its "timeout" parameter as read before decoding
                                       (admission: the deadline of a wait) */
    int64_t timeout_us;             /* the request's "timeout" parameter where the
                                       queue policy takes it (admission); 0: none */
    int client_fd;                  /* its socket, peeked at while suspended */
    size_t admitted_bytes;          /* its inputs' share of the admission budget */
    bool admitted_alone;            /* admitted with nothing else holding inputs */
    bool admission_counted;         /* its bytes are in the budget now */
    slim_server_infer infer;
    slim_server_task task;
} slim_server_request;

slim_status slim_server_start(slim_server *srv, const slim_server_opts *opts, slim_err *err);
/* Stops accepting, lets in-flight requests finish (slim_server_drain),
 * frees everything. false: runs still going after being cancelled (a
 * kernel that does not check): nothing was freed, and the caller should
 * exit without waiting for them. */
bool slim_server_stop(slim_server *srv);
/* Shutdown, once new requests are refused: waits up to opts.shutdown_grace_s
 * for in-flight requests, then cancels the runs still going (each answered
 * 503) and waits a moment for them to stop and their answers to go out.
 * Returns whether no request is left suspended, which MHD_stop_daemon
 * needs. */
bool slim_server_drain(slim_server *srv);

/* ---- API keys (auth.c) -------------------------------------------------- */

/* Whether req (its headers in, nothing of its body read) may go on. When
 * not, req->reply holds the 401 and the refusal is counted. */
bool slim_server_auth_check(slim_server_request *req);
/* slim_http_unauthorized_total, in Prometheus text. */
void slim_server_auth_metrics(slim_server *srv, slim_server_buf *out);
/* GET /v2/models[/M[/versions/V]]/stats: Triton's statistics extension.
 * name NULL: every model; version < 0: every ready version. */
void slim_server_stats_route(slim_server_request *req, const char *name, int64_t version);

/* slim_http_connections and slim_http_timeouts_total, in Prometheus text. */
void slim_server_http_metrics(slim_server *srv, slim_server_buf *out);

/* Serves one request whose body is complete. Either fills req->reply (and
 * sets reply_ready) or suspends the connection for an inference. */
void slim_server_route(slim_server_request *req);
/* Called on the HTTP thread when a suspended inference has been resumed. */
void slim_server_infer_finish(slim_server_request *req);
/* Decodes req's body into req->infer (and its "timeout" parameter into
 * req->timeout_us); SLIM_EOOM when the inputs do not fit in memory now. */
slim_status slim_server_infer_decode_request(slim_server_request *req, slim_err *err);
/* Whether the client on fd has gone (closed, or shut its sending side): a
 * peek, for suspended connections, which libmicrohttpd does not watch. */
bool slim_server_socket_gone(int fd);
/* Queues a decoded request on its model; answers 503 when the queue is
 * full. The connection may already be suspended (admission.c). */
void slim_server_infer_submit(slim_server_request *req);
/* Counts a failed request of model m under reason `why`. */
void slim_server_count_failure(const slim_server_model *m, slim_server_failure why,
                               int64_t t_begin);

/* ---- waiting for input memory (admission.c) ----------------------------- */

/* capacity: how many requests may wait at once (--queue-size); repo: whose
 * models' weights stay out of what a request can ever get. */
slim_server_admission *slim_server_admission_start(slim_server_repo *repo, int capacity,
                                                   slim_err *err);
/* request_need.c, for admission.c: what a request needs before it runs.
 * Under a CPU memory limit, the bytes its JSON header's tree can take are
 * reserved in the allocator while it is parsed (SLIM_EOOM: not now). */
slim_status slim__request_reserve_parse(slim_server_request *req, slim_err *err);
void slim__request_release_parse(slim_server_request *req);
typedef struct slim__request_need {
    size_t inputs;              /* its decoded inputs */
    size_t run;                 /* inputs + a one-row run's arena + its outputs (known ones) */
    bool known;                 /* the header parsed: the figures mean something */
    int64_t timeout_us;         /* its "timeout" parameter (0: none or not valid yet) */
} slim__request_need;
/* From its JSON header (parsed under the reservation above). */
slim__request_need slim__request_declared_need(const slim_server_request *req);
/* The answer's size at most, from its decoded inputs; 0 when an output's
 * shape depends on data. */
size_t slim__request_reply_bound(const slim_server_request *req);
/* A body of len bytes is about to be read (its headers are in): */
typedef enum {
    SLIM_SERVER_BODY_READ,      /* read it (into req->body when it was allocated here) */
    SLIM_SERVER_BODY_WAIT,      /* suspended; resumed with body_refused or room for it */
    SLIM_SERVER_BODY_ANSWERED,  /* req->reply is set (507: it can never fit; 503) */
} slim_server_body_result;
slim_server_body_result slim_server_admission_body(slim_server_admission *a,
                                                   slim_server_request *req, size_t len);
/* Gives the body's memory back (the request is done). */
void slim_server_admission_body_free(slim_server_admission *a, slim_server_request *req);
/* Decodes req (its model in req->task.model) and queues it on the model
 * when its inputs fit; otherwise it waits, suspended, or is answered 503 or
 * 507 (req->reply) without suspending. Returns whether req->reply is set. */
bool slim_server_admission_admit(slim_server_admission *a, slim_server_request *req);
/* req's inputs are freed: its share of the budget returns (once). */
void slim_server_admission_release(slim_server_admission *a, slim_server_request *req);
/* req ran out of memory even alone on its model. When other requests'
 * inputs held memory meanwhile, its own inputs are freed and it waits,
 * suspended, at the head of the line, to be admitted when no other inputs
 * are held and to run before anything else is admitted; returns true.
 * False when it already ran that way: the 507 stands. */
bool slim_server_admission_retry_alone(slim_server_admission *a, slim_server_request *req);
/* Answers every waiting request 503 and stops the thread; parking after
 * this answers at once. free also stops. */
void slim_server_admission_stop(slim_server_admission *a);
void slim_server_admission_free(slim_server_admission *a);
/* slim_requests_waiting_for_memory and the counters of what became of
 * them, in Prometheus text. */
void slim_server_admission_metrics(slim_server_admission *a, slim_server_buf *out);

#endif
