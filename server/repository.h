/*
 * repository.h - the model repository: model folders, their version
 * folders, the loaded models (refcounted: a request holds a reference from
 * routing to its answer, so an unload while it runs only takes the model
 * out of the table; the last holder frees it), loads and unloads
 * (repository.c; a model folder read from disk: repository_folder.c), and
 * the .slim conversion cache (convert_cache.c).
 *
 *     slim_server_model *m = slim_server_repo_acquire(repo, "mlp", -1, &status, msg, sizeof(msg));
 *     ... m->model, m->cfg ...
 *     slim_server_model_release(m);
 */
#ifndef SLIM_SERVER_REPOSITORY_H
#define SLIM_SERVER_REPOSITORY_H

#include "config.h"
#include "footprint.h"
#include "metrics.h"
#include "slim.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct slim_cancel;
typedef struct slim_server_batcher slim_server_batcher;

typedef struct slim_server_model {
    char *name;
    int64_t version;
    slim_server_config cfg;     /* resolved against this version's model */
    slim_model *model;
    slim_server_stats *stats;
    struct slim_server_batcher *batcher; /* its queue and instance threads */
    atomic_int refs;
    /* What it counts against its device's budget while resident (weights,
     * arenas at max_batch_size, workspace: residency.c), and that device. */
    size_t resident_bytes;
    char budget_device[32];
    size_t reserved_bytes;          /* its load's reservation until it is in the table */
    /* At max_batch_size (pipeline/footprint.h): predicted from the file
     * before the load (predicted.max_batch 0 when it could not be) and
     * measured after; the index, metadata and statistics show both. */
    slim_footprint predicted, actual;
} slim_server_model;

void slim_server_model_ref(slim_server_model *m);
void slim_server_model_release(slim_server_model *m); /* frees at zero */

/* --model-control-mode (residency.c): which models are loaded, and when. */
typedef enum {
    SLIM_SERVER_CONTROL_NONE,       /* every model at start (no eviction) */
    SLIM_SERVER_CONTROL_EXPLICIT,   /* --load-model and the repository API */
    SLIM_SERVER_CONTROL_ON_DEMAND,  /* every model listed, loaded at its first request */
} slim_server_control_mode;

/* A model folder's residency (residency.c; guarded by the repository's mu). */
typedef struct slim_server_residency {
    bool wanted;                    /* loads again at a request after an eviction */
    bool loading;                   /* a residency load of it is under way */
    bool pinned;                    /* config.json "pinned": never evicted */
    int priority;                   /* config.json "priority": lower goes first */
    int64_t wait_us;                /* how long a request waits for its load */
    int64_t last_used_us;           /* the last request routed to it (LRU) */
    size_t predicted_bytes;         /* before its last load (0: not predicted) */
    uint64_t loads, evictions;
    /* slim_model_load_duration_seconds buckets (residency.c), sum in us */
    uint64_t load_hist[12];
    uint64_t load_us_sum;
    int refused;                    /* the last load's HTTP status when the budget
                                       refused it (507, 503); 0: it did not */
} slim_server_residency;

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
    slim_server_residency res;      /* residency under the budget (residency.c) */
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
    /* Residency (residency.c): the mode, the loads in flight for it, the
     * requests waiting for a load, bytes reserved for loads under way per
     * device; all under mu. */
    slim_server_control_mode mode;
    struct slim_server_residency_state *residency;
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
/* The same under --model-control-mode: ctl's mode says what loads now
 * (explicit: only ctl->load[]; on-demand: nothing, every model listed). */
typedef struct slim_server_control {
    slim_server_control_mode mode;
    const char *const *load;        /* --load-model NAME (explicit mode) */
    int n_load;
} slim_server_control;
slim_status slim_server_repo_open_with(slim_server_repo *repo, const slim_server_control *ctl,
                                       const char *root, slim_server_metrics *metrics,
                                       int instances, int queue_size, const char *device,
                                       const char *precision, const char *convert_cache,
                                       int load_timeout_s, slim_err *err);
void slim_server_repo_close(slim_server_repo *repo);
/* Cancels the loads under way (SIGTERM); each fails at its next check. */
void slim_server_repo_cancel_loads(slim_server_repo *repo);
/* Lists a load's (or warmup's) token so that cancel_loads reaches it; the
 * slot it took, or -1 when all are taken (it runs on, unlisted). untrack
 * takes the slot back (-1: nothing). */
int slim_server_repo_track_load(slim_server_repo *repo, struct slim_cancel *tok);
void slim_server_repo_untrack_load(slim_server_repo *repo, int slot);

/* version < 0: the highest ready one. On success returns a new reference;
 * otherwise NULL with *http_status (404 unknown, 503 not ready) and msg. */
slim_server_model *slim_server_repo_acquire(slim_server_repo *repo, const char *name,
                                            int64_t version, int *http_status,
                                            char *msg, size_t cap);
/* The same with mu held; *loadable (may be NULL) says that the model is not
 * resident but would load for a request (residency.c). */
slim_server_model *slim__repo_acquire_locked(slim_server_repo *repo, const char *name,
                                             int64_t version, int *http_status, char *msg,
                                             size_t cap, bool *loadable);
slim_server_entry *slim__repo_find_entry(slim_server_repo *repo, const char *name);
/* The ready versions of name, ascending; returns how many (<= cap). */
int slim_server_repo_ready_versions(slim_server_repo *repo, const char *name,
                                    int64_t *out, int cap);
/* (Re)loads name from disk; *http_status says how a failure should read. */
slim_status slim_server_repo_load(slim_server_repo *repo, const char *name,
                                  int *http_status, slim_err *err);
/* The same with cfg_json (config.json text) in place of the folder's
 * config, for this load only (Triton's load "config" parameter). */
slim_status slim_server_repo_load_config(slim_server_repo *repo, const char *name,
                                         const char *cfg_json, int *http_status, slim_err *err);
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

#endif
