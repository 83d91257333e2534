/*
 * repository.c - the model repository: folders on disk, models in memory.
 *
 *     ROOT/<model>/config.json        optional; defaults when absent
 *     ROOT/<model>/<version>/model.onnx (or model.slim, preferred when both are there)
 *
 * The version folders that config.json's version_policy selects are loaded
 * (Triton's default: the highest one; version_policy.c); requests that name
 * no version go to the highest ready one. Folders the policy leaves out are
 * listed UNAVAILABLE and answered 404, and cost no memory. A model or version that fails to load stays in
 * the table with its reason (repository index: UNAVAILABLE), and the server
 * goes on serving the rest.
 *
 * Locking: `mu` guards the table and is held only for lookups and swaps,
 * never while a model loads from disk. Loads run side by side: a load that
 * takes long (a large model, a slow disk) must not stall the loads and
 * unloads of other models, nor shutdown, behind a lock. Each load or unload
 * takes a sequence number when it starts, and the one started last wins: a
 * load that finishes after a later load or unload of the same model has
 * taken effect drops what it built and answers 409. A request takes its own
 * reference under `mu`; load and unload drop the table's reference, and
 * whoever drops the last one frees the model.
 *
 * This file keeps the table; reading one model folder from disk (its
 * config, versions and their loads) is repository_folder.c's.
 */
#include "batcher.h"
#include "cancel.h"
#include "config.h"
#include "log.h"
#include "memory.h"
#include "metrics.h"
#include "model.h"
#include "repository.h"
#include "repository_impl.h"
#include "residency.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void slim_server_model_ref(slim_server_model *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void slim__repo_model_free(slim_server_model *m)
{
    if (!m)
        return;
    bool had_model = m->model != NULL;
    /* No request holds the model any more, so its queue is empty: this
     * only joins the idle instance threads. */
    slim_server_batcher_stop(m->batcher);
    slim_model_free(m->model);
    slim_server_config_free(&m->cfg);
    free(m->name);
    free(m);
    /* An unloaded model's weights and cached arenas go back to the system
     * now rather than waiting in the cache for a model that may never come. */
    if (had_model)
        slim_server_memory_trim();
}

void slim_server_model_release(slim_server_model *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1)
        slim__repo_model_free(m);
}

static void entry_clear(slim_server_entry *e)
{
    for (int i = 0; i < e->n_slots; i++)
        slim_server_model_release(e->slots[i].live);
    free(e->slots);
    e->slots = NULL;
    e->n_slots = 0;
}


static slim_server_entry *find_entry(slim_server_repo *repo, const char *name)
{
    for (int i = 0; i < repo->n_entries; i++)
        if (strcmp(repo->entries[i].name, name) == 0)
            return &repo->entries[i];
    return NULL;
}

static bool valid_name(const char *name)
{
    return name[0] && name[0] != '.' && !strchr(name, '/') && strlen(name) < 256;
}

/* Every model version of fresh and of the table's entry e: the loads'
 * reservations end now that their models are in the table or dropped. */
static void settle_entry(slim_server_repo *repo, slim_server_entry *e)
{
    for (int i = 0; e && i < e->n_slots; i++)
        slim__residency_settle(repo, e->slots[i].live);
}

/* load false: only lists the model's versions (control modes). cfg_json:
 * a load request's "config" in place of the folder's, or NULL. */
static slim_status repo_load(slim_server_repo *repo, const char *name, const char *cfg_json,
                             bool load, int *http_status, slim_err *err)
{
    char dir[4096];
    struct stat st;
    slim_status s = SLIM_OK;
    snprintf(dir, sizeof(dir), "%s/%s", repo->root, name);
    if (!valid_name(name) || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        *http_status = 404;
        return slim_errf(err, SLIM_ENOTFOUND, "failed to load \"%s\": no such model folder in %s",
                         name, repo->root);
    }
    pthread_mutex_lock(&repo->mu);
    const uint64_t seq = ++repo->op_seq;
    pthread_mutex_unlock(&repo->mu);

    slim_server_entry fresh = {.seq = seq};
    int64_t t0 = slim_server_now_us();
    bool ready = slim__repo_entry_build(repo, name, cfg_json, &fresh, load);
    char why[1024] = "";
    if (!ready && fresh.failed)
        snprintf(why, sizeof(why), "%s", fresh.reason);
    /* The reason of a version that was meant to load, when there is one. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; !ready && !why[0] && i < fresh.n_slots; i++)
            if (pass || !fresh.slots[i].by_policy)
                snprintf(why, sizeof(why), "%s", fresh.slots[i].reason);

    pthread_mutex_lock(&repo->mu);
    slim_server_entry *e = find_entry(repo, name);
    bool superseded = e && e->seq > seq;
    if (!e && repo->n_entries == repo->cap_entries) {
        int cap = repo->cap_entries ? 2 * repo->cap_entries : 16;
        slim_server_entry *grown = realloc(repo->entries, (size_t)cap * sizeof(*grown));
        if (grown) {
            repo->entries = grown;
            repo->cap_entries = cap;
        }
    }
    if (superseded) {
        /* fresh is dropped below, outside the lock */
    } else if (e) {
        /* Swap: the old versions leave the table now; requests that hold
         * them finish on them, and the last one frees them (below). */
        slim__residency_carry(&fresh.res, &e->res);
        slim_server_entry old = *e;
        fresh.name = old.name;
        *e = fresh;
        old.name = NULL;
        fresh = old;
    } else if (repo->n_entries < repo->cap_entries && (fresh.name = strdup(name))) {
        repo->entries[repo->n_entries++] = fresh;
        memset(&fresh, 0, sizeof(fresh));
    } else {
        ready = false;
        snprintf(why, sizeof(why), "out of memory");
    }
    slim_server_entry *now = superseded ? NULL : find_entry(repo, name);
    if (now && load && ready) {
        slim__residency_loaded(now, slim_server_now_us() - t0);
        now->res.wanted = true;
    }
    settle_entry(repo, now);
    settle_entry(repo, &fresh);
    int refused = now ? now->res.refused : fresh.res.refused;
    pthread_mutex_unlock(&repo->mu);
    if (now && load && ready)
        slim_server_log(SLIM_LOG_INFO, NULL, "model \"%s\" is resident (loaded in %.1f ms)", name,
                        (double)(slim_server_now_us() - t0) / 1000.0);

    if (superseded) {
        *http_status = 409;
        s = slim_errf(err, SLIM_EINVAL, "failed to load \"%s\": a later load or unload of it "
                      "finished first, so this one's result was dropped", name);
    } else if (!ready && load) {
        *http_status = refused ? refused : 400;
        s = slim_errf(err, refused == 507 ? SLIM_EOOM : SLIM_EINVAL, "failed to load \"%s\": %s",
                      name, why);
    }
    entry_clear(&fresh);
    free(fresh.name);
    slim__residency_follow(repo); /* a swap's old versions are out */
    return s;
}

slim_status slim_server_repo_load(slim_server_repo *repo, const char *name, int *http_status,
                                  slim_err *err)
{
    return repo_load(repo, name, NULL, true, http_status, err);
}

slim_status slim_server_repo_load_config(slim_server_repo *repo, const char *name,
                                         const char *cfg_json, int *http_status, slim_err *err)
{
    return repo_load(repo, name, cfg_json, true, http_status, err);
}

slim_status slim_server_repo_unload(slim_server_repo *repo, const char *name, int *http_status,
                                    slim_err *err)
{
    pthread_mutex_lock(&repo->mu);
    slim_server_entry *e = find_entry(repo, name);
    slim_server_model *dropped[256];
    int n_dropped = 0;
    if (e) {
        e->seq = ++repo->op_seq; /* a load still running for it loses */
        e->res.wanted = false;   /* an API unload: no request loads it again */
    }
    for (int i = 0; e && i < e->n_slots; i++) {
        if (e->slots[i].live && n_dropped < 256) {
            dropped[n_dropped++] = e->slots[i].live;
            e->slots[i].live = NULL;
        }
        if (!e->slots[i].by_policy)
            snprintf(e->slots[i].reason, sizeof(e->slots[i].reason), "unloaded");
    }
    pthread_mutex_unlock(&repo->mu);
    for (int i = 0; i < n_dropped; i++) {
        /* its queued and running requests are answered 503 now */
        slim_server_batcher_cancel(dropped[i]->batcher, SLIM_CANCEL_UNLOAD);
        slim_server_model_release(dropped[i]);
    }
    slim__residency_follow(repo); /* their mapped weights no longer count */
    if (!e) {
        *http_status = 404;
        return slim_errf(err, SLIM_ENOTFOUND, "failed to unload \"%s\": no such model", name);
    }
    return SLIM_OK;
}

slim_server_entry *slim__repo_find_entry(slim_server_repo *repo, const char *name)
{
    return find_entry(repo, name);
}

slim_server_model *slim_server_repo_acquire(slim_server_repo *repo, const char *name,
                                            int64_t version, int *http_status, char *msg,
                                            size_t cap)
{
    pthread_mutex_lock(&repo->mu);
    slim_server_model *m = slim__repo_acquire_locked(repo, name, version, http_status, msg, cap,
                                                     NULL);
    pthread_mutex_unlock(&repo->mu);
    return m;
}

slim_server_model *slim__repo_acquire_locked(slim_server_repo *repo, const char *name,
                                             int64_t version, int *http_status, char *msg,
                                             size_t cap, bool *loadable)
{
    slim_server_model *m = NULL;
    int64_t wanted_version = version;
    if (loadable)
        *loadable = false;
    slim_server_entry *e = find_entry(repo, name);
    if (!e) {
        *http_status = 404;
        snprintf(msg, cap, "Request for unknown model: '%s' is not found", name);
        goto out;
    }
    if (version < 0) {
        for (int i = e->n_slots - 1; i >= 0 && !m; i--)
            m = e->slots[i].live;
        if (!m) {
            /* Why the highest version meant to load is not ready. */
            const char *why = e->failed ? e->reason : "no versions";
            for (int i = e->n_slots - 1; !e->failed && i >= 0; i--)
                if (!e->slots[i].by_policy || i == 0) {
                    why = e->slots[i].reason;
                    break;
                }
            *http_status = 503;
            snprintf(msg, cap, "model '%s' is not ready: %s", name, why);
        }
        goto out;
    }
    for (int i = 0; i < e->n_slots; i++) {
        if (e->slots[i].version != version)
            continue;
        if (e->slots[i].by_policy) {
            *http_status = 404;
            snprintf(msg, cap, "Request for unknown model: '%s' version %lld is not found (%s)",
                     name, (long long)version, e->slots[i].reason);
            goto out;
        }
        if (!(m = e->slots[i].live)) {
            *http_status = 503;
            snprintf(msg, cap, "model '%s' version %lld is not ready: %s", name,
                     (long long)version, e->slots[i].reason);
        }
        goto out;
    }
    *http_status = 404;
    snprintf(msg, cap, "Request for unknown model: '%s' version %lld is not found", name,
             (long long)version);
out:
    if (m) {
        slim_server_model_ref(m);
        e->res.last_used_us = slim_server_now_us(); /* least recently used goes first */
    } else if (loadable && e && *http_status == 503 && e->res.wanted && !e->failed &&
               repo->mode != SLIM_SERVER_CONTROL_NONE) {
        /* Not resident, yet meant to be served: a request loads it. */
        bool any = false;
        for (int i = 0; i < e->n_slots; i++)
            any |= !e->slots[i].by_policy &&
                   (wanted_version < 0 || e->slots[i].version == wanted_version);
        *loadable = any;
    }
    return m;
}

int slim_server_repo_ready_versions(slim_server_repo *repo, const char *name, int64_t *out,
                                    int cap)
{
    int n = 0;
    pthread_mutex_lock(&repo->mu);
    slim_server_entry *e = find_entry(repo, name);
    for (int i = 0; e && i < e->n_slots && n < cap; i++)
        if (e->slots[i].live)
            out[n++] = e->slots[i].version;
    pthread_mutex_unlock(&repo->mu);
    return n;
}

int slim_server_repo_ready_models(slim_server_repo *repo, const char *name,
                                  slim_server_model **out, int cap)
{
    int n = 0;
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        if (name && strcmp(e->name, name) != 0)
            continue;
        for (int j = 0; j < e->n_slots && n < cap; j++)
            if (e->slots[j].live) {
                slim_server_model_ref(e->slots[j].live);
                out[n++] = e->slots[j].live;
            }
    }
    pthread_mutex_unlock(&repo->mu);
    return n;
}

static void index_add(cJSON *arr, const char *name, int64_t version,
                      const slim_server_model *live, const char *reason)
{
    bool ready = live != NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "name", name);
    if (version >= 0) {
        char v[32];
        snprintf(v, sizeof(v), "%lld", (long long)version);
        cJSON_AddStringToObject(o, "version", v);
    }
    cJSON_AddStringToObject(o, "state", ready ? "READY" : "UNAVAILABLE");
    cJSON_AddStringToObject(o, "reason", ready ? "" : reason);
    if (live)
        slim_server_memory_footprint_json(o, live);
    cJSON_AddItemToArray(arr, o);
}

cJSON *slim_server_repo_index(slim_server_repo *repo, bool ready_only)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return NULL;
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        if (e->failed && !ready_only)
            index_add(arr, e->name, -1, NULL, e->reason);
        for (int j = 0; j < e->n_slots; j++)
            if (e->slots[j].live || !ready_only)
                index_add(arr, e->name, e->slots[j].version, e->slots[j].live,
                          e->slots[j].reason);
    }
    pthread_mutex_unlock(&repo->mu);
    return arr;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void slim_server_repo_cancel_loads(slim_server_repo *repo)
{
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < SLIM_SERVER_MAX_REPO_OPS; i++)
        slim_cancel_request(repo->loads[i], SLIM_CANCEL_SHUTDOWN);
    pthread_mutex_unlock(&repo->mu);
}

int slim_server_repo_track_load(slim_server_repo *repo, struct slim_cancel *tok)
{
    int slot = -1;
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < SLIM_SERVER_MAX_REPO_OPS && slot < 0; i++)
        if (!repo->loads[i])
            repo->loads[slot = i] = tok;
    pthread_mutex_unlock(&repo->mu);
    return slot;
}

void slim_server_repo_untrack_load(slim_server_repo *repo, int slot)
{
    pthread_mutex_lock(&repo->mu);
    if (slot >= 0)
        repo->loads[slot] = NULL;
    pthread_mutex_unlock(&repo->mu);
}

slim_status slim_server_repo_open(slim_server_repo *repo, const char *root,
                                  slim_server_metrics *metrics, int instances, int queue_size,
                                  const char *device, const char *precision,
                                  const char *convert_cache, int load_timeout_s, slim_err *err)
{
    const slim_server_control none = {.mode = SLIM_SERVER_CONTROL_NONE};
    return slim_server_repo_open_with(repo, &none, root, metrics, instances, queue_size, device,
                                      precision, convert_cache, load_timeout_s, err);
}

slim_status slim_server_repo_open_with(slim_server_repo *repo, const slim_server_control *ctl,
                                       const char *root, slim_server_metrics *metrics,
                                       int instances, int queue_size, const char *device,
                                       const char *precision, const char *convert_cache,
                                       int load_timeout_s, slim_err *err)
{
    memset(repo, 0, sizeof(*repo));
    repo->load_timeout_s = load_timeout_s;
    repo->default_device = device;
    repo->default_precision = precision;
    repo->convert_cache = convert_cache;
    pthread_mutex_init(&repo->mu, NULL);
    repo->metrics = metrics;
    repo->default_instances = instances;
    repo->default_queue_size = queue_size;
    if (!(repo->root = strdup(root)))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status rs = slim__residency_open(repo, ctl->mode, err);
    if (rs != SLIM_OK)
        return rs;
    if ((rs = slim__residency_check_names(ctl, root, err)) != SLIM_OK)
        return rs;
    DIR *d = opendir(root);
    if (!d)
        return slim_errf(err, SLIM_EIO, "model repository %s: %s", root, strerror(errno));
    char *names[1024];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
        if (valid_name(de->d_name) && stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
            (names[n] = strdup(de->d_name)))
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
    for (int i = 0; i < n; i++) {
        int status;
        slim_err lerr = {0};
        bool load = slim__residency_loads_at_start(ctl, names[i]);
        if (repo_load(repo, names[i], NULL, load, &status, &lerr) != SLIM_OK)
            slim_server_log(SLIM_LOG_ERROR, NULL, "%s", lerr.msg);
        else if (load)
            slim_server_log(SLIM_LOG_INFO, NULL, "loaded model \"%s\"", names[i]);
        free(names[i]);
    }
    return SLIM_OK;
}

void slim_server_repo_close(slim_server_repo *repo)
{
    slim__residency_close(repo);
    for (int i = 0; i < repo->n_entries; i++) {
        entry_clear(&repo->entries[i]);
        free(repo->entries[i].name);
    }
    free(repo->entries);
    free(repo->root);
    pthread_mutex_destroy(&repo->mu);
    memset(repo, 0, sizeof(*repo));
}
