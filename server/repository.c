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
 */
#include "batcher.h"
#include "cancel.h"
#include "config.h"
#include "file.h"
#include "log.h"
#include "memory.h"
#include "metrics.h"
#include "model.h"
#include "repository.h"
#include "residency.h"
#include "warmup.h"
#include "clock.h"
#include "pipeline.h" /* slim_model_file_is_slim */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void slim_server_model_ref(slim_server_model *m)
{
    atomic_fetch_add(&m->refs, 1);
}

static void model_free(slim_server_model *m)
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
        model_free(m);
}

static bool parse_version(const char *s, int64_t *out)
{
    if (!s[0] || strlen(s) > 15)
        return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    *out = strtoll(s, NULL, 10);
    return true;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_slot(const void *a, const void *b)
{
    return cmp_i64(&((const slim_server_slot *)a)->version, &((const slim_server_slot *)b)->version);
}

static void entry_clear(slim_server_entry *e)
{
    for (int i = 0; i < e->n_slots; i++)
        slim_server_model_release(e->slots[i].live);
    free(e->slots);
    e->slots = NULL;
    e->n_slots = 0;
}

/* Loads path; an ONNX model meant to be converted ("convert": true, or
 * --convert-cache and not "convert": false) loads from its cached .slim,
 * made now if missing. The precision is baked into that file, so it loads
 * as it is. A conversion that fails (a read-only cache folder, a full disk,
 * a damaged cached file) is logged and the ONNX file served instead: the
 * cache saves time and memory, it must not take a model away. */
static slim_status load_converted(slim_server_repo *repo, const char *name, int64_t version,
                                  const char *path, const slim_load_opts *lo,
                                  const slim_server_config *cfg, slim_model **out, slim_err *err)
{
    bool want = cfg->convert > 0 || (cfg->convert == 0 && repo->convert_cache);
    /* The cache's key does not cover pruning: a pruned model loads (and
     * prunes) from its own file. */
    if (!want || slim_model_file_is_slim(path) || lo->compress.prune)
        return slim_model_load(path, lo, out, err);
    const char *dir = repo->convert_cache ? repo->convert_cache
                                          : slim_server_convert_cache_default();
    char cached[4096];
    bool fresh = false;
    slim_err cerr = {0};
    /* A second try converts afresh after a damaged cached file is dropped. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (slim_server_convert_cached(dir, name, version, path, lo, cached, sizeof(cached),
                                       &fresh, &cerr) != SLIM_OK)
            break;
        /* The precision and int8 pass are baked into the file; fp32-strict
         * is not (it is how the GPU runs the file's float32 products). */
        bool strict = lo->compress.precision && strcmp(lo->compress.precision, "fp32-strict") == 0;
        slim_load_opts clo = {.place.device = lo->place.device,
                              .compress.precision = strict ? lo->compress.precision : NULL};
        slim_status s = slim_model_load(cached, &clo, out, &cerr);
        if (s == SLIM_OK) {
            slim_server_log(SLIM_LOG_INFO, NULL, "model \"%s\" version %lld: serving %s (%s)",
                            name, (long long)version, cached,
                            fresh ? "converted now" : "converted before");
            return SLIM_OK;
        }
        /* A damaged file is dropped, so the next load converts afresh; any
         * other failure (memory, the device) would fail the ONNX file too. */
        if (s != SLIM_EPARSE && s != SLIM_EIO) {
            *err = cerr;
            return s;
        }
        slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\" version %lld: dropping %s: %s",
                        name, (long long)version, cached, cerr.msg);
        unlink(cached);
        if (fresh)
            break; /* written and verified just now, yet unreadable: give up */
    }
    slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\" version %lld: not converted, serving %s: %s",
                    name, (long long)version, path, cerr.msg);
    return slim_model_load(path, lo, out, err);
}

/* KServe v2 requests and responses carry tensors only: a model whose inputs
 * or outputs are sequences or optionals (runtime/container.h) runs with
 * `slim run`, but is not served. */
static slim_status check_tensor_io(const slim_model *m, slim_err *err)
{
    for (int io = 0; io < 2; io++) {
        int n = io ? slim_model_num_outputs(m) : slim_model_num_inputs(m);
        for (int i = 0; i < n; i++) {
            const slim_io_info *info = io ? slim_model_output(m, i) : slim_model_input(m, i);
            if (info->kind != SLIM_KIND_TENSOR)
                return slim_errf(err, SLIM_EUNSUPPORTED, "%s \"%s\" is %s %s: the server "
                                 "serves models whose inputs and outputs are tensors (the "
                                 "KServe v2 protocol carries nothing else)",
                                 io ? "output" : "input", info->name,
                                 info->kind == SLIM_KIND_OPTIONAL ? "an" : "a",
                                 info->kind == SLIM_KIND_OPTIONAL ? "optional" : "sequence");
        }
    }
    return SLIM_OK;
}

static slim_status load_version(slim_server_repo *repo, const char *name, const char *cfg_text,
                                int64_t version, slim_server_model **out, slim_err *err)
{
    /* A converted model.slim is served in preference to model.onnx: it maps
     * instead of parsing, and replicas share its pages. */
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s/%lld/model.slim", repo->root, name, (long long)version);
    if (stat(path, &st) != 0)
        snprintf(path, sizeof(path), "%s/%s/%lld/model.onnx", repo->root, name, (long long)version);
    slim_server_model *m = calloc(1, sizeof(*m));
    if (!m || !(m->name = strdup(name))) {
        free(m);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    m->version = version;
    atomic_init(&m->refs, 1);
    slim_status s;
    if (stat(path, &st) != 0) {
        s = slim_errf(err, SLIM_ENOTFOUND, "%s: %s", path, strerror(errno));
        goto err;
    }
    /* The config first: it says where and in what precision to load. */
    if ((s = slim_server_config_parse(cfg_text, name, &m->cfg, err)) != SLIM_OK)
        goto err;
    slim_load_opts lo = {.place.device = m->cfg.device ? m->cfg.device : repo->default_device,
                         .compress.precision = m->cfg.precision ? m->cfg.precision
                                                                : repo->default_precision,
                         .compress.int8.exclude = (const char *const *)m->cfg.int8_exclude,
                         .compress.int8.n_exclude = m->cfg.n_int8_exclude,
                         .compress.int8.max_error = m->cfg.int8_max_error,
                         .compress.int8.fallback = m->cfg.int8_fallback,
                         .compress.half.activations = m->cfg.activations,
                         .compress.half.exclude = (const char *const *)m->cfg.half_exclude,
                         .compress.half.n_exclude = m->cfg.n_half_exclude};
    /* "pruning": the masks path is relative to the model's folder. */
    slim_prune_opts po = {.method = m->cfg.prune_method, .amount = m->cfg.prune_amount,
                          .global = m->cfg.prune_global, .storage = m->cfg.prune_storage,
                          .ops = (const char *const *)m->cfg.prune_ops,
                          .n_ops = m->cfg.n_prune_ops,
                          /* sparse or dense for the rows its batches bring */
                          .batch = m->cfg.max_batch_size > 0 ? m->cfg.max_batch_size : 1};
    char masks[4096];
    if (m->cfg.prune_masks) {
        snprintf(masks, sizeof(masks), "%s/%s/%s", repo->root, name, m->cfg.prune_masks);
        po.masks = masks;
    }
    if (m->cfg.prune_method)
        lo.compress.prune = &po;
    /* A load is bounded in time like a request: the loader checks the
     * token between stages and passes, and every run a load makes (int8
     * samples, folded constants) between nodes and inside long kernels. */
    slim_cancel tok;
    slim_cancel_init(&tok, slim_cancel_deadline_after_ms((int64_t)repo->load_timeout_s * 1000));
    slim_cancel *prev_tok = slim_cancel_enter(&tok);
    int slot = slim_server_repo_track_load(repo, &tok);
    /* Under a budget, room is made first (residency.c): evictions, or 507. */
    /* The prediction is a dry run that reads the weights: it runs inside a
     * provisional reservation from the file's size, grown after if short. */
    slim__reservation resv = {0};
    s = slim__residency_reserve(repo, name, path, &lo, NULL, &resv, err);
    if (s == SLIM_OK) {
        slim_server_memory_predict(m, path, &lo);
        /* A prediction cut short by shutdown or --load-timeout: the load
         * would only read the file again before its first check. */
        s = slim_cancel_status(err);
        if (s == SLIM_OK)
            s = slim__residency_reserve(repo, name, path, &lo, &m->predicted, &resv, err);
        if (s != SLIM_OK)
            slim__residency_unreserve(repo, &resv);
    }
    if (s == SLIM_OK) {
        s = load_converted(repo, name, version, path, &lo, &m->cfg, &m->model, err);
        if (s != SLIM_OK || !resv.held) {
            slim__residency_unreserve(repo, &resv);
        } else { /* carried by m until it is in the table */
            snprintf(m->budget_device, sizeof(m->budget_device), "%s", resv.device);
            m->reserved_bytes = resv.bytes;
        }
    }
    slim_server_repo_untrack_load(repo, slot);
    slim_cancel_enter(prev_tok);
    if (s == SLIM_ETIMEDOUT)
        slim_errf(err, s, "loading %s took longer than --load-timeout %d s", path,
                  repo->load_timeout_s);
    if (s != SLIM_OK)
        goto err;
    if ((s = check_tensor_io(m->model, err)) != SLIM_OK)
        goto err;
    if ((s = slim_server_config_resolve(&m->cfg, m->model, err)) != SLIM_OK ||
        (s = slim_server_config_load_labels(&m->cfg, repo->root, name, err)) != SLIM_OK)
        goto err;
    if ((s = slim_server_memory_attach(m, err)) != SLIM_OK)
        goto err;
    slim_server_memory_measure(m);
    slim__residency_measure(m, lo.place.device);
    /* A request's answer must not depend on the batch it was merged into
     * or halved out of, so every run of a batching model computes rows the
     * same way (single requests included). */
    slim_model_set_batch_invariant(m->model, m->cfg.max_batch_size > 0);
    /* model_warmup: still within the load's time bound, before READY */
    if ((s = slim_server_warmup(repo, m, tok.deadline_ns, err)) != SLIM_OK)
        goto err;
    if (!(m->stats = slim_server_metrics_get(repo->metrics, name, version))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto err;
    }
    if (!m->cfg.instance_count)
        m->cfg.instance_count = repo->default_instances > 0 ? repo->default_instances : 1;
    if ((s = slim_server_batcher_create(m, repo->default_queue_size, &m->batcher, err)) != SLIM_OK)
        goto err;
    *out = m;
    return SLIM_OK;
err:
    if (m->reserved_bytes) {
        pthread_mutex_lock(&repo->mu);
        slim__residency_settle(repo, m);
        pthread_mutex_unlock(&repo->mu);
    }
    model_free(m);
    return s;
}

/* Reads ROOT/name from disk into e (name and slots). Failures are written
 * into e's reasons; the return value only says whether anything is ready. */
static bool entry_build(slim_server_repo *repo, const char *name, const char *cfg_override,
                        slim_server_entry *e, bool load)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/%s", repo->root, name);
    slim_err err = {0};
    char *cfg_text = NULL;
    /* config.json (or Triton's config.pbtxt) is optional; one that cannot
     * be read (or is a FIFO, which would block the load) fails the model.
     * A load request's "config" replaces both, for this load. */
    slim_status cs = cfg_override ? ((cfg_text = strdup(cfg_override))
                                         ? SLIM_OK : slim_errf(&err, SLIM_ENOMEM, "out of memory"))
                                  : slim_server_config_read(dir, name, &cfg_text, &err);
    if (cs != SLIM_OK && cs != SLIM_ENOTFOUND) {
        snprintf(e->reason, sizeof(e->reason), "%s", err.msg);
        e->failed = true;
        return false;
    }
    int64_t versions[256];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) && n < 256) {
        int64_t v;
        char sub[4400];
        struct stat st;
        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        if (parse_version(de->d_name, &v) && stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            versions[n++] = v;
    }
    if (d)
        closedir(d);
    qsort(versions, (size_t)n, sizeof(versions[0]), cmp_i64);
    if (n == 0) {
        snprintf(e->reason, sizeof(e->reason),
                 "no version folder (such as %.900s/1/model.onnx) in the model folder", dir);
        e->failed = true;
        free(cfg_text);
        return false;
    }
    /* A bad config.json fails every version with one clear reason. */
    slim_server_config probe;
    bool cfg_ok = slim_server_config_parse(cfg_text, name, &probe, &err) == SLIM_OK;
    const slim_server_version_policy *policy = cfg_ok ? &probe.versions : NULL;
    if (cfg_ok)
        slim__residency_configure(&e->res, &probe, repo->mode);
    /* Versions a "specific" policy lists that have no folder get a slot
     * too, so the index says why they are missing. */
    int n_missing = 0;
    for (int j = 0; policy && policy->kind == SLIM_SERVER_VERSIONS_SPECIFIC &&
                    j < policy->n_versions; j++)
        n_missing += !bsearch(&policy->versions[j], versions, (size_t)n, sizeof(int64_t), cmp_i64);
    if (!(e->slots = calloc((size_t)(n + n_missing), sizeof(*e->slots)))) {
        snprintf(e->reason, sizeof(e->reason), "out of memory");
        e->failed = true;
        if (cfg_ok)
            slim_server_config_free(&probe);
        free(cfg_text);
        return false;
    }
    e->n_slots = n + n_missing;
    bool any = false;
    for (int i = 0; i < n; i++) {
        slim_server_slot *slot = &e->slots[i];
        slot->version = versions[i];
        if (!cfg_ok) {
            snprintf(slot->reason, sizeof(slot->reason), "%s", err.msg);
        } else if (!slim_server_version_policy_selects(policy, versions, n, i)) {
            slot->by_policy = true;
            snprintf(slot->reason, sizeof(slot->reason), SLIM_SERVER_POLICY_REASON);
        } else if (!load) {
            snprintf(slot->reason, sizeof(slot->reason), "%s",
                     repo->mode == SLIM_SERVER_CONTROL_ON_DEMAND
                         ? "not resident: loads at its first request (--model-control-mode "
                           "on-demand)"
                         : "not loaded (--model-control-mode explicit: --load-model or the "
                           "repository API loads it)");
        } else if (load_version(repo, name, cfg_text, versions[i], &slot->live, &err) != SLIM_OK) {
            snprintf(slot->reason, sizeof(slot->reason), "%s", err.msg);
            /* Refused by the budget: 507, or 503 when busy models were in the way. */
            if (repo->mode != SLIM_SERVER_CONTROL_NONE && !e->res.refused)
                e->res.refused = err.status == SLIM_EOOM ? 507
                                 : err.status == SLIM_ETIMEDOUT ? 503 : 0;
            slim_server_log(SLIM_LOG_ERROR, NULL, "model \"%s\" version %lld failed to load: %s",
                            name, (long long)versions[i], err.msg);
        } else {
            any = true;
        }
    }
    for (int j = 0, k = n; k < n + n_missing; j++) {
        int64_t v = policy->versions[j];
        if (bsearch(&v, versions, (size_t)n, sizeof(int64_t), cmp_i64))
            continue;
        e->slots[k].version = v;
        e->slots[k].by_policy = true;
        snprintf(e->slots[k].reason, sizeof(e->slots[k].reason),
                 "version_policy.specific lists version %lld but there is no folder %.900s/%lld",
                 (long long)v, dir, (long long)v);
        k++;
    }
    qsort(e->slots, (size_t)e->n_slots, sizeof(*e->slots), cmp_slot);
    if (cfg_ok)
        slim_server_config_free(&probe);
    free(cfg_text);
    return any;
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
    bool ready = entry_build(repo, name, cfg_json, &fresh, load);
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
