/*
 * repository_folder.c - one model folder on disk read into a table entry
 * (repository_impl.h): config.json, the version folders and the versions
 * that version_policy selects, each loaded (under the load's time bound and
 * the residency budget), converted through the .slim cache when asked,
 * warmed up and given its batcher. The table itself, and the swaps that put
 * an entry into it, are repository.c's.
 *
 * Nothing here takes the repository's mu but to settle a failed load's
 * reservation: a load runs outside the lock (see repository.c), so a slow
 * disk never stalls the other models' requests.
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
#include "warmup.h"
#include "pipeline.h" /* slim_model_file_is_slim */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    slim__repo_model_free(m);
    return s;
}

/* Reads ROOT/name from disk into e (name and slots). Failures are written
 * into e's reasons; the return value only says whether anything is ready. */
bool slim__repo_entry_build(slim_server_repo *repo, const char *name, const char *cfg_override,
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
