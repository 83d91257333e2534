/*
 * residency.h - many models under one memory budget (residency.c):
 * --model-control-mode, loading a model at its first request, and evicting
 * the least recently used idle models when a load needs room.
 *
 * The budget of a device is its --memory-limit (the allocator's limit; 0:
 * no budget). Against it count each resident model's footprint (weights,
 * mapped or allocated; arenas at max_batch_size; workspace) and the
 * predicted footprint of every load under way. The repository's mu guards
 * all of it (repository.h), so a request taking a model and an eviction
 * choosing it cannot cross.
 *
 * The allocator's cache is held to the budget less the weights the
 * resident models map from .slim files (residency_budget.c), which take
 * memory the allocator does not see: what it keeps reserved beyond its
 * live blocks, plus the mapped weights, stays within the budget (a .slim
 * load under way counts from when it settles).
 */
#ifndef SLIM_SERVER_RESIDENCY_H
#define SLIM_SERVER_RESIDENCY_H

#include "buf.h"
#include "repository.h"
#include "slim.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

typedef struct slim_server_request slim_server_request;

/* How long a request waits for its model's load when config.json sets no
 * queue timeout nor request_timeout_ms. */
#define SLIM_SERVER_LOAD_WAIT_DEFAULT_MS 30000

/* ---- for repository.c --------------------------------------------------- */

/* Starts the state (and, unless mode is none, the thread answering waits
 * that time out); close stops it: waiting requests are answered 503. */
slim_status slim__residency_open(slim_server_repo *repo, slim_server_control_mode mode,
                                 slim_err *err);
void slim__residency_close(slim_server_repo *repo);
/* Whether the model folder name loads at start: every one in mode none,
 * --load-model's in explicit, none on-demand (each at its first request). */
bool slim__residency_loads_at_start(const slim_server_control *ctl, const char *name);
/* Every --load-model name is a model folder in root. */
slim_status slim__residency_check_names(const slim_server_control *ctl, const char *root,
                                        slim_err *err);
/* The residency settings of a model folder from its config.json. */
void slim__residency_configure(slim_server_residency *r, const slim_server_config *cfg,
                               slim_server_control_mode mode);
/* What a load carries over from the entry it replaces. */
void slim__residency_carry(slim_server_residency *fresh, const slim_server_residency *old);

/* A reservation of budget bytes for a load under way. */
typedef struct slim__reservation {
    char device[32];
    size_t bytes;
    bool held;
} slim__reservation;

/* Before a version loads, with its predicted footprint (NULL or total 0:
 * its file's size counts; *out held: grows that reservation when short,
 * else *out starts empty): makes room for it and the load's own transient
 * copy of its allocated weights,
 * evicting idle models least recently used first (lower "priority"
 * first). Fails SLIM_EOOM (507) when it cannot fit even with every other
 * evictable model gone, SLIM_ETIMEDOUT when the models in the way stay
 * busy. Nothing is reserved in mode none or without a budget. */
slim_status slim__residency_reserve(slim_server_repo *repo, const char *name, const char *path,
                                    const slim_load_opts *lo, const slim_footprint *predicted,
                                    slim__reservation *out, slim_err *err);
/* The load failed: its reservation ends. */
void slim__residency_unreserve(slim_server_repo *repo, slim__reservation *r);
/* Bytes reserved on device by the loads under way (under repo->mu): what
 * the budget counts beyond the resident models. */
size_t slim__residency_loading_bytes(const slim_server_repo *repo, const char *device);
/* Under mu, once the loaded model m is in the table (or dropped): the
 * reservation it carries ends, its footprint now counts instead. */
void slim__residency_settle(slim_server_repo *repo, slim_server_model *m);
/* A loaded model's footprint, counted while it is resident. */
void slim__residency_measure(slim_server_model *m, const char *device);
/* After models left the table (an unload, a reload's swap): the allocator
 * limit follows the mapped weights still counted (takes mu). */
void slim__residency_follow(slim_server_repo *repo);

/* ---- residency_budget.c ---------------------------------------------------- */

/* The budget of device (NULL: "cpu"; 0: none), its allocator's limit
 * (--memory-limit), and its canonical name. */
size_t slim__residency_budget(const char *device, char *canon, size_t cap);
/* Caps device's allocator cache at its budget less mapped bytes
 * (slim_allocator_set_cache_cap), giving back cached segments over it now.
 * Nothing without a budget. */
void slim__residency_cap_cache(const char *device, size_t mapped);
/* The devices whose cache the residency has capped, up to cap. */
int slim__residency_budget_devices(char (*names)[32], int cap);
/* A load finished into the table (under mu): counters and the histogram. */
void slim__residency_loaded(slim_server_entry *e, int64_t load_us);

/* ---- for routes.c and http.c -------------------------------------------- */

/* A new reference to the model a request names, as slim_server_repo_acquire;
 * when it is not resident but loads on demand, the request is suspended
 * until its load is done (then routed again, http.c) or its wait times out
 * (503, Retry-After), NULL is returned and *waiting set. */
slim_server_model *slim_server_residency_acquire(slim_server_request *req, const char *name,
                                                 int64_t version, int *http_status, char *msg,
                                                 size_t cap, bool *waiting);
/* Shutdown: waiting requests are answered 503, loads cancelled and joined. */
void slim_server_residency_stop(slim_server_repo *repo);

/* slim_model_resident, _resident_bytes, _predicted_bytes, _loads_total,
 * _evictions_total, _load_duration_seconds; slim_memory_budget_bytes and
 * slim_models_resident_bytes per device. */
void slim_server_residency_metrics(slim_server_repo *repo, slim_server_buf *out);
/* {"mode", "budgets": [...], "residents": [...] least recently used first}. */
void slim_server_residency_debug(slim_server_repo *repo, cJSON *root);
void slim_server_residency_debug_text(slim_server_repo *repo, slim_server_buf *out);

/* "none", "explicit", "on-demand" */
bool slim_server_control_mode_parse(const char *s, slim_server_control_mode *out);

#endif
