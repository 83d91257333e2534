/*
 * memory.c - where every byte goes: the allocator's figures and each
 * model's share, for /metrics and GET /v2/debug/memory.
 *
 * The device figures come from the CPU caching allocator (alloc.h); the
 * per-model figures from the model's memory account (weights plus what
 * its runs hold) and its cached arena plans (one per input signature).
 * Nothing here allocates device memory, so the endpoints answer even when
 * the allocator is at its limit.
 */
#include "alloc.h"
#include "buf.h"
#include "codec.h"
#include "config.h"
#include "device.h"
#include "log.h"
#include "memory.h"
#include "model.h"
#include "plan.h"
#include "repository.h"
#include "residency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#include <pthread.h>
#include <sys/stat.h>
#endif

#define ARENA_SIZES_MAX SLIM_PLAN_CACHE_MAX

slim_status slim_server_memory_attach(slim_server_model *m, slim_err *err)
{
    slim_mem_account *acct = m->model->account;
    snprintf(acct->name, sizeof(acct->name), "model \"%s\" version %lld", m->name,
             (long long)m->version);
    if (m->cfg.memory_limit &&
        slim_model_set_memory_limit(m->model, m->cfg.memory_limit, err) != SLIM_OK)
        return slim_err_prefix(err, "config.json: \"memory_limit\": ");
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++) {
        char name[16];
        if (m->cfg.device_limits[i] &&
            slim_mem_account_set_device_limit(acct, slim_mem_device_slot_name(i, name, sizeof(name)),
                                              m->cfg.device_limits[i], err) != SLIM_OK)
            return slim_err_prefix(err, "config.json: \"memory_limit\": ");
    }
    return SLIM_OK;
}

/* A device slot the model has touched or is limited on: the per-device
 * families show only those. */
static bool slot_used(const slim_mem_account *acct, int slot)
{
    return atomic_load(&acct->dev[slot].peak) || atomic_load(&acct->dev[slot].limit);
}

#define MAX_DEVICES 17

/* A model that does not batch runs one request at a time: batch 1. */
static int64_t footprint_batch(const slim_server_model *m)
{
    return m->cfg.max_batch_size > 0 ? m->cfg.max_batch_size : 1;
}

/* Predictions by what they depend on: the file (path, size, modification
 * time), the model's config and the load's precision and device. A
 * prediction is a dry load plus up to a second of workspace runs
 * (pipeline/footprint.h); an on-demand server reloads an evicted model
 * many times, and each cold load must not pay for it again. */
#define PREDICT_CACHE 128

typedef struct {
    char *key;
    slim_footprint fp;
} predict_entry;

static pthread_mutex_t predict_mu = PTHREAD_MUTEX_INITIALIZER;
static predict_entry predict_cache[PREDICT_CACHE];
static int predict_next; /* the slot replaced next: first in, first out */

/* The cache key, malloc'ed; NULL when the file cannot be stat'ed or out of
 * memory (then the prediction is simply not cached). */
static char *predict_key(const slim_server_model *m, const char *path, const slim_load_opts *lo)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    cJSON *cfg = slim_server_config_to_json(&m->cfg);
    char *cfg_text = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    cJSON_Delete(cfg);
    if (!cfg_text)
        return NULL;
    const char *prec = lo->compress.precision ? lo->compress.precision : "";
    const char *dev = lo->place.device ? lo->place.device : "";
    size_t n = strlen(path) + strlen(cfg_text) + strlen(prec) + strlen(dev) + 96;
    char *key = malloc(n);
    if (key)
        snprintf(key, n, "%s|%lld|%lld.%09ld|%s|%s|%lld|%s", path, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, prec, dev,
                 (long long)footprint_batch(m), cfg_text);
    free(cfg_text);
    return key;
}

static bool predict_lookup(const char *key, slim_footprint *out)
{
    bool hit = false;
    pthread_mutex_lock(&predict_mu);
    for (int i = 0; i < PREDICT_CACHE && !hit; i++)
        if (predict_cache[i].key && strcmp(predict_cache[i].key, key) == 0) {
            *out = predict_cache[i].fp;
            hit = true;
        }
    pthread_mutex_unlock(&predict_mu);
    return hit;
}

static void predict_store(char *key, const slim_footprint *fp)
{
    pthread_mutex_lock(&predict_mu);
    predict_entry *e = &predict_cache[predict_next];
    predict_next = (predict_next + 1) % PREDICT_CACHE;
    free(e->key);
    e->key = key;
    e->fp = *fp;
    pthread_mutex_unlock(&predict_mu);
}

void slim_server_memory_predict(slim_server_model *m, const char *path,
                                const slim_load_opts *lo)
{
    slim_err err;
    char *key = predict_key(m, path, lo);
    if (key && predict_lookup(key, &m->predicted)) {
        free(key);
        return;
    }
    if (slim_model_predict(path, lo, footprint_batch(m), &m->predicted, &err) != SLIM_OK) {
        memset(&m->predicted, 0, sizeof(m->predicted));
        slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\" version %lld: no footprint "
                        "predicted: %s", m->name, (long long)m->version, err.msg);
        free(key); /* a failure may be the moment's (out of memory): tried again next load */
        return;
    }
    if (key)
        predict_store(key, &m->predicted);
}

void slim_server_memory_measure(slim_server_model *m)
{
    slim_model_footprint(m->model, footprint_batch(m), &m->actual);
    /* The workspace is the prediction's measurement: measuring the served
     * model too would run it at every load. */
    if (m->predicted.workspace_measured) {
        m->actual.workspace_bytes = m->predicted.workspace_bytes;
        m->actual.total_bytes += m->actual.workspace_bytes;
    }
}

static void footprint_side(cJSON *parent, const char *key, const slim_footprint *fp)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "weight_bytes", (double)fp->weight_bytes);
    cJSON_AddNumberToObject(o, "mapped_bytes", (double)fp->mapped_bytes);
    cJSON_AddNumberToObject(o, "arena_bytes_1", (double)fp->arena_bytes_1);
    cJSON_AddNumberToObject(o, "arena_bytes_max", (double)fp->arena_bytes_max);
    cJSON_AddNumberToObject(o, "workspace_bytes", (double)fp->workspace_bytes);
    cJSON_AddNumberToObject(o, "total_bytes", (double)fp->total_bytes);
}

void slim_server_memory_footprint_json(cJSON *o, const slim_server_model *m)
{
    cJSON_AddNumberToObject(o, "predicted_bytes", (double)m->predicted.total_bytes);
    cJSON_AddNumberToObject(o, "actual_bytes", (double)m->actual.total_bytes);
    cJSON *fp = cJSON_AddObjectToObject(o, "footprint");
    if (!fp)
        return;
    cJSON_AddNumberToObject(fp, "max_batch", (double)footprint_batch(m));
    footprint_side(fp, "predicted", &m->predicted);
    footprint_side(fp, "actual", &m->actual);
}

void slim_server_memory_trim(void)
{
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int i = 0; i < n && i < MAX_DEVICES; i++)
        slim_allocator_empty_cache(devs[i]->alloc);
    if (slim_device_pinned_host())
        slim_allocator_empty_cache(slim_device_pinned_host()->alloc);
}

/* Request bodies, decoded tensors and JSON replies come and go through
 * malloc at every size up to the request limit. glibc raises its mmap
 * threshold each time a large mmap'ed block is freed, after which blocks of
 * that size come from the heaps, and the heaps keep freed pages: the soak
 * (docs/memory.md) saw resident memory grow by a fifth over ten minutes
 * with the allocator flat. A fixed threshold keeps large buffers on mmap, so
 * freeing one returns it; MALLOC_MMAP_THRESHOLD_ in the environment wins.
 *
 * glibc also gives threads their own heaps (arenas), up to 8 per core, each
 * keeping its own free pages: with the HTTP, admission and instance threads
 * spread over them, the soak still grew idle RSS outside the allocator by
 * 5 MiB in six minutes (+7.5%); with two arenas it was flat (+0.5% idle,
 * -0.2% under load) at the same request rate. MALLOC_ARENA_MAX wins. */
#define HEAP_ARENAS 2

void slim_server_memory_tune_heap(void)
{
#ifdef __GLIBC__
    if (!getenv("MALLOC_MMAP_THRESHOLD_"))
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, HEAP_ARENAS);
#endif
}

/* The smaller blocks that stay on the heaps leave free pages between live
 * ones, in every thread's arena; glibc gives those back only on a trim. */
void slim_server_memory_trim_heap(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* ---- walking the loaded models ------------------------------------------ */

typedef void (*model_visit)(const slim_server_model *m, void *user);

/* Calls visit for every ready model version, under the repository lock:
 * visits only read atomics and the plan cache (its own lock, never held
 * while taking the repository's). */
static void each_model(slim_server_repo *repo, model_visit visit, void *user)
{
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        for (int j = 0; j < e->n_slots; j++)
            if (e->slots[j].live)
                visit(e->slots[j].live, user);
    }
    pthread_mutex_unlock(&repo->mu);
}

/* ---- Prometheus ----------------------------------------------------------- */

typedef struct device_family {
    const char *name, *type, *help;
    int64_t (*value)(const slim_mem_stats *s);
} device_family;

static int64_t allocated_now(const slim_mem_stats *s) { return s->allocated_bytes[SLIM_POOL_ALL].current; }
static int64_t reserved_now(const slim_mem_stats *s) { return s->reserved_bytes[SLIM_POOL_ALL].current; }
static int64_t active_now(const slim_mem_stats *s) { return s->active_bytes[SLIM_POOL_ALL].current; }
static int64_t split_now(const slim_mem_stats *s) { return s->inactive_split_bytes[SLIM_POOL_ALL].current; }
static int64_t allocated_peak(const slim_mem_stats *s) { return s->allocated_bytes[SLIM_POOL_ALL].peak; }
static int64_t reserved_peak(const slim_mem_stats *s) { return s->reserved_bytes[SLIM_POOL_ALL].peak; }
static int64_t limit(const slim_mem_stats *s) { return (int64_t)s->limit_bytes; }
static int64_t segment_allocs(const slim_mem_stats *s) { return s->segment[SLIM_POOL_ALL].allocated; }
static int64_t segment_frees(const slim_mem_stats *s) { return s->segment[SLIM_POOL_ALL].freed; }
static int64_t cache_hits(const slim_mem_stats *s) { return (int64_t)s->num_cache_hits; }
static int64_t retries(const slim_mem_stats *s) { return (int64_t)s->num_alloc_retries; }
static int64_t ooms(const slim_mem_stats *s) { return (int64_t)s->num_ooms; }

static const device_family device_families[] = {
    {"slim_memory_allocated_bytes", "gauge", "Bytes of blocks handed out by the caching allocator", allocated_now},
    {"slim_memory_reserved_bytes", "gauge", "Bytes of segments the caching allocator holds from the device", reserved_now},
    {"slim_memory_active_bytes", "gauge", "Bytes of blocks in use or not yet reusable", active_now},
    {"slim_memory_inactive_split_bytes", "gauge", "Free bytes inside split segments (fragmentation)", split_now},
    {"slim_memory_peak_allocated_bytes", "gauge", "Highest allocated bytes since start or the last peak reset", allocated_peak},
    {"slim_memory_peak_reserved_bytes", "gauge", "Highest reserved bytes since start or the last peak reset", reserved_peak},
    {"slim_memory_limit_bytes", "gauge", "The device memory limit (0: none)", limit},
    {"slim_allocator_segment_allocs_total", "counter", "Segments allocated from the device", segment_allocs},
    {"slim_allocator_segment_frees_total", "counter", "Segments given back to the device", segment_frees},
    {"slim_allocator_cache_hits_total", "counter", "Allocations served from cached blocks", cache_hits},
    {"slim_allocator_alloc_retries_total", "counter", "Allocations that flushed the cache and retried", retries},
    {"slim_oom_total", "counter", "Allocations that failed: over a limit or refused by the device", ooms},
};

static void family_header(slim_server_buf *out, const char *name, const char *type,
                          const char *help)
{
    slim_server_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Model names are checked when loaded (no quotes or backslashes), so they
 * go into label values as they are. */
static void put_weight_bytes(const slim_server_model *m, void *user)
{
    slim_server_buf_printf(user, "slim_model_weight_bytes{model=\"%s\",version=\"%lld\"} %zu\n",
                           m->name, (long long)m->version, m->model->weight_bytes);
}

/* One sample per data type the model's weights hold: an int8 model shows
 * its int8 codes beside the float32 scales and biases and int32 column
 * sums, and what stayed float32. A separate family, so that the total's
 * existing series keep their labels. */
static void put_weight_bytes_by_dtype(const slim_server_model *m, void *user)
{
    for (int t = SLIM_DTYPE_UNDEFINED + 1; t < SLIM_DTYPE_COUNT; t++)
        if (m->model->weight_bytes_by_dtype[t])
            slim_server_buf_printf(user, "slim_model_weight_bytes_by_dtype{model=\"%s\","
                                   "version=\"%lld\",dtype=\"%s\"} %zu\n", m->name,
                                   (long long)m->version, slim_dtype_name((slim_dtype)t),
                                   m->model->weight_bytes_by_dtype[t]);
}

static void put_arena_bytes(const slim_server_model *m, void *user)
{
    int64_t batch[ARENA_SIZES_MAX];
    size_t bytes[ARENA_SIZES_MAX];
    int n = slim_model_plan_sizes(m->model, batch, bytes, ARENA_SIZES_MAX);
    for (int i = 0; i < n; i++)
        slim_server_buf_printf(user, "slim_model_arena_bytes{model=\"%s\",version=\"%lld\","
                               "batch=\"%lld\"} %zu\n", m->name, (long long)m->version,
                               (long long)batch[i], bytes[i]);
}

static void put_model_held(const slim_server_model *m, void *user)
{
    slim_server_buf_printf(user, "slim_model_memory_bytes{model=\"%s\",version=\"%lld\"} %zu\n",
                           m->name, (long long)m->version,
                           atomic_load(&m->model->account->current));
}

static void put_model_peak(const slim_server_model *m, void *user)
{
    slim_server_buf_printf(user, "slim_model_memory_peak_bytes{model=\"%s\",version=\"%lld\"} %zu\n",
                           m->name, (long long)m->version, atomic_load(&m->model->account->peak));
}

static void put_model_limit(const slim_server_model *m, void *user)
{
    slim_server_buf_printf(user, "slim_model_memory_limit_bytes{model=\"%s\",version=\"%lld\"} %zu\n",
                           m->name, (long long)m->version, atomic_load(&m->model->account->limit));
}

/* One series per device the model holds memory on (or is limited on). */
static void put_device_figure(const slim_server_model *m, void *user, const char *family,
                              size_t (*figure)(const slim_mem_account_device *d))
{
    const slim_mem_account *acct = m->model->account;
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++) {
        char dev[16];
        if (slot_used(acct, i))
            slim_server_buf_printf(user, "%s{model=\"%s\",version=\"%lld\",device=\"%s\"} %zu\n",
                                   family, m->name, (long long)m->version,
                                   slim_mem_device_slot_name(i, dev, sizeof(dev)),
                                   figure(&acct->dev[i]));
    }
}

static size_t dev_current(const slim_mem_account_device *d) { return atomic_load(&d->current); }
static size_t dev_peak(const slim_mem_account_device *d) { return atomic_load(&d->peak); }
static size_t dev_limit(const slim_mem_account_device *d) { return atomic_load(&d->limit); }

static void put_model_device_held(const slim_server_model *m, void *user)
{
    put_device_figure(m, user, "slim_model_device_memory_bytes", dev_current);
}

static void put_model_device_peak(const slim_server_model *m, void *user)
{
    put_device_figure(m, user, "slim_model_device_memory_peak_bytes", dev_peak);
}

static void put_model_device_limit(const slim_server_model *m, void *user)
{
    put_device_figure(m, user, "slim_model_device_memory_limit_bytes", dev_limit);
}

typedef struct model_family {
    const char *name, *help;
    model_visit put;
} model_family;

static const model_family model_families[] = {
    {"slim_model_weight_bytes", "Bytes of the model's weights (loaded once, shared read-only)", put_weight_bytes},
    {"slim_model_weight_bytes_by_dtype", "The model's weight bytes by data type (they sum to slim_model_weight_bytes)", put_weight_bytes_by_dtype},
    {"slim_model_arena_bytes", "Planned activation arena per run, per cached batch size", put_arena_bytes},
    {"slim_model_memory_bytes", "Bytes the model holds now: weights and its runs' memory", put_model_held},
    {"slim_model_memory_peak_bytes", "Highest bytes the model has held at once", put_model_peak},
    {"slim_model_memory_limit_bytes", "The model's memory limit from config.json (0: none)", put_model_limit},
    {"slim_model_device_memory_bytes", "Bytes the model holds now on each device", put_model_device_held},
    {"slim_model_device_memory_peak_bytes", "Highest bytes the model has held at once on each device", put_model_device_peak},
    {"slim_model_device_memory_limit_bytes", "The model's memory limit on each device from config.json (0: none)", put_model_device_limit},
};

static void put_model_device(const slim_server_model *m, void *user)
{
    slim_server_buf_printf(user, "slim_model_device_info{model=\"%s\",version=\"%lld\","
                           "device=\"%s\"} 1\n", m->name, (long long)m->version,
                           slim_device_or_cpu(m->model->device)->name);
}

void slim_server_memory_metrics(slim_server_repo *repo, slim_server_buf *out)
{
    slim_device *devs[MAX_DEVICES + 1];
    slim_mem_stats s[MAX_DEVICES + 1];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    /* The GPUs' pinned host memory (outputs copied back) is an allocator
     * family of its own, "cuda-pinned"; it has no cudaMemGetInfo below. */
    int n_alloc = n;
    if (slim_device_pinned_host())
        devs[n_alloc++] = slim_device_pinned_host();
    for (int d = 0; d < n_alloc; d++)
        slim_allocator_stats(devs[d]->alloc, &s[d]);
    for (size_t i = 0; i < sizeof(device_families) / sizeof(device_families[0]); i++) {
        const device_family *f = &device_families[i];
        family_header(out, f->name, f->type, f->help);
        for (int d = 0; d < n_alloc; d++)
            slim_server_buf_printf(out, "%s{device=\"%s\"} %lld\n", f->name, devs[d]->name,
                                   (long long)f->value(&s[d]));
    }
    if (n > 1) {
        /* The GPU's own view (cudaMemGetInfo), other processes included. */
        family_header(out, "slim_device_memory_free_bytes", "gauge",
                      "Free memory the device reports (cudaMemGetInfo)");
        size_t free_b[MAX_DEVICES], total_b[MAX_DEVICES];
        for (int d = 1; d < n; d++) {
            devs[d]->backend->mem_info(devs[d], &free_b[d], &total_b[d]);
            slim_server_buf_printf(out, "slim_device_memory_free_bytes{device=\"%s\"} %zu\n",
                                   devs[d]->name, free_b[d]);
        }
        family_header(out, "slim_device_memory_total_bytes", "gauge",
                      "Total memory the device reports (cudaMemGetInfo)");
        for (int d = 1; d < n; d++)
            slim_server_buf_printf(out, "slim_device_memory_total_bytes{device=\"%s\"} %zu\n",
                                   devs[d]->name, total_b[d]);
    }
    family_header(out, "slim_model_device_info", "gauge", "The device each model runs on");
    each_model(repo, put_model_device, out);
    for (size_t i = 0; i < sizeof(model_families) / sizeof(model_families[0]); i++) {
        family_header(out, model_families[i].name, "gauge", model_families[i].help);
        each_model(repo, model_families[i].put, out);
    }
}

/* ---- /v2/debug/memory ------------------------------------------------------ */

static cJSON *stat_json(const slim_mem_stat *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "current", (double)st->current);
    cJSON_AddNumberToObject(o, "peak", (double)st->peak);
    cJSON_AddNumberToObject(o, "allocated", (double)st->allocated);
    cJSON_AddNumberToObject(o, "freed", (double)st->freed);
    return o;
}

/* {"all": {...}, "small_pool": {...}, "large_pool": {...}} */
static cJSON *pools_json(const slim_mem_stat *per_pool)
{
    static const char *const names[SLIM_POOL_COUNT] = {"all", "small_pool", "large_pool"};
    cJSON *o = cJSON_CreateObject();
    for (int p = 0; o && p < SLIM_POOL_COUNT; p++)
        cJSON_AddItemToObject(o, names[p], stat_json(&per_pool[p]));
    return o;
}

static cJSON *device_json(slim_allocator *a)
{
    slim_mem_stats s;
    slim_allocator_stats(a, &s);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "device", slim_allocator_device(a));
    cJSON_AddNumberToObject(o, "limit_bytes", (double)s.limit_bytes);
    cJSON_AddItemToObject(o, "allocated_bytes", pools_json(s.allocated_bytes));
    cJSON_AddItemToObject(o, "reserved_bytes", pools_json(s.reserved_bytes));
    cJSON_AddItemToObject(o, "active_bytes", pools_json(s.active_bytes));
    cJSON_AddItemToObject(o, "inactive_split_bytes", pools_json(s.inactive_split_bytes));
    cJSON_AddItemToObject(o, "requested_bytes", pools_json(s.requested_bytes));
    cJSON_AddItemToObject(o, "allocation", pools_json(s.allocation));
    cJSON_AddItemToObject(o, "segment", pools_json(s.segment));
    cJSON_AddItemToObject(o, "active", pools_json(s.active));
    cJSON_AddItemToObject(o, "inactive_split", pools_json(s.inactive_split));
    cJSON_AddNumberToObject(o, "num_cache_hits", (double)s.num_cache_hits);
    cJSON_AddNumberToObject(o, "num_alloc_retries", (double)s.num_alloc_retries);
    cJSON_AddNumberToObject(o, "num_ooms", (double)s.num_ooms);
    cJSON_AddNumberToObject(o, "num_device_frees", (double)s.num_device_frees);
    return o;
}

static void add_model_json(const slim_server_model *m, void *user)
{
    cJSON *o = cJSON_CreateObject(), *arenas = cJSON_CreateArray();
    if (!o || !arenas) {
        cJSON_Delete(o);
        cJSON_Delete(arenas);
        return;
    }
    const slim_mem_account *acct = m->model->account;
    cJSON_AddStringToObject(o, "name", m->name);
    char version[24];
    snprintf(version, sizeof(version), "%lld", (long long)m->version);
    cJSON_AddStringToObject(o, "version", version);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)m->model->weight_bytes);
    cJSON_AddNumberToObject(o, "parameters", (double)m->model->param_count);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)atomic_load(&acct->current));
    cJSON_AddNumberToObject(o, "memory_peak_bytes", (double)atomic_load(&acct->peak));
    cJSON_AddNumberToObject(o, "memory_limit_bytes", (double)atomic_load(&acct->limit));
    cJSON_AddNumberToObject(o, "ooms", (double)atomic_load(&acct->ooms));
    cJSON *by_device = cJSON_AddObjectToObject(o, "devices");
    for (int i = 0; by_device && i < SLIM_MEM_DEVICE_SLOTS; i++) {
        char dev[16];
        cJSON *d;
        if (!slot_used(acct, i) ||
            !(d = cJSON_AddObjectToObject(by_device, slim_mem_device_slot_name(i, dev, sizeof(dev)))))
            continue;
        cJSON_AddNumberToObject(d, "memory_bytes", (double)atomic_load(&acct->dev[i].current));
        cJSON_AddNumberToObject(d, "memory_peak_bytes", (double)atomic_load(&acct->dev[i].peak));
        cJSON_AddNumberToObject(d, "memory_limit_bytes", (double)atomic_load(&acct->dev[i].limit));
    }
    int64_t batch[ARENA_SIZES_MAX];
    size_t bytes[ARENA_SIZES_MAX];
    int n = slim_model_plan_sizes(m->model, batch, bytes, ARENA_SIZES_MAX);
    for (int i = 0; i < n; i++) {
        cJSON *a = cJSON_CreateObject();
        if (!a)
            break;
        cJSON_AddNumberToObject(a, "batch", (double)batch[i]);
        cJSON_AddNumberToObject(a, "arena_bytes", (double)bytes[i]);
        cJSON_AddItemToArray(arenas, a);
    }
    cJSON_AddItemToObject(o, "arenas", arenas);
    cJSON_AddItemToArray(user, o);
}

static void add_model_text(const slim_server_model *m, void *user)
{
    const slim_mem_account *acct = m->model->account;
    char w[32], cur[32], peak[32], lim[32];
    slim_server_buf_printf(user, "%-24s %7lld %12s %12s %12s %12s\n", m->name,
                           (long long)m->version,
                           slim_format_bytes(m->model->weight_bytes, w, sizeof(w)),
                           slim_format_bytes(atomic_load(&acct->current), cur, sizeof(cur)),
                           slim_format_bytes(atomic_load(&acct->peak), peak, sizeof(peak)),
                           atomic_load(&acct->limit)
                               ? slim_format_bytes(atomic_load(&acct->limit), lim, sizeof(lim))
                               : "none");
    int64_t batch[ARENA_SIZES_MAX];
    size_t bytes[ARENA_SIZES_MAX];
    int n = slim_model_plan_sizes(m->model, batch, bytes, ARENA_SIZES_MAX);
    for (int i = 0; i < n; i++)
        slim_server_buf_printf(user, "    arena at batch %-6lld %12s\n", (long long)batch[i],
                               slim_format_bytes(bytes[i], w, sizeof(w)));
}

static void debug_text(slim_server_repo *repo, slim_server_reply *reply)
{
    slim_server_buf b = {0};
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int d = 0; d < n && d < MAX_DEVICES; d++) {
        slim_mem_stats s;
        slim_allocator_stats(devs[d]->alloc, &s);
        char *table = slim_mem_stats_summary(&s, devs[d]->name);
        if (table)
            slim_server_buf_puts(&b, table);
        else
            b.oom = true;
        free(table);
    }
    slim_server_buf_printf(&b, "\n%-24s %7s %12s %12s %12s %12s\n", "model", "version",
                           "weights", "holds", "peak", "limit");
    each_model(repo, add_model_text, &b);
    slim_server_residency_debug_text(repo, &b);
    if (b.oom) {
        slim_server_buf_free(&b);
        slim_server_reply_error(reply, 500, "out of memory while writing the memory summary");
        return;
    }
    slim_server_reply_free(reply);
    reply->status = 200;
    reply->body = b.data;
    reply->len = b.len;
    reply->content_type = "text/plain; charset=utf-8";
}

void slim_server_memory_debug(slim_server_repo *repo, bool text, slim_server_reply *reply)
{
    if (text) {
        debug_text(repo, reply);
        return;
    }
    cJSON *root = cJSON_CreateObject(), *devices = cJSON_CreateArray(),
          *models = cJSON_CreateArray();
    if (!root || !devices || !models) {
        cJSON_Delete(root);
        cJSON_Delete(devices);
        cJSON_Delete(models);
        slim_server_reply_error(reply, 500, "out of memory while writing the memory summary");
        return;
    }
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int d = 0; d < n && d < MAX_DEVICES; d++)
        cJSON_AddItemToArray(devices, device_json(devs[d]->alloc));
    cJSON_AddItemToObject(root, "devices", devices);
    each_model(repo, add_model_json, models);
    cJSON_AddItemToObject(root, "models", models);
    slim_server_residency_debug(repo, root);
    slim_server_reply_json(reply, 200, root);
}

static void reset_model_peak(const slim_server_model *m, void *user)
{
    (void)user;
    slim_mem_account *acct = m->model->account;
    atomic_store(&acct->peak, atomic_load(&acct->current));
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++)
        atomic_store(&acct->dev[i].peak, atomic_load(&acct->dev[i].current));
}

void slim_server_memory_reset_peaks(slim_server_repo *repo, slim_server_reply *reply)
{
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int d = 0; d < n && d < MAX_DEVICES; d++)
        slim_allocator_reset_peaks(devs[d]->alloc);
    each_model(repo, reset_model_peak, NULL);
    slim_server_memory_debug(repo, false, reply);
}
