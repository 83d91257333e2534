/*
 * residency.c - many models under one memory budget.
 *
 * --model-control-mode none loads every model at start, as before, and
 * never evicts. explicit loads what --load-model or the repository API
 * asks; on-demand lists every model and loads it at its first request.
 * In both, a model that was loaded stays "wanted": evicted, it loads again
 * at its next request; unloaded through the API, it does not.
 *
 * Before a load, its footprint is predicted from the file and config
 * (pipeline/footprint.h) and reserved against its device's budget; if it
 * does not fit, resident models that no request holds (a request holds
 * its model from routing to its answer, so refs == 1 means nothing queued
 * or running) are evicted, lowest "priority" first, then least recently
 * used. Pinned models are never evicted. A model that cannot fit even
 * with every evictable model gone is refused (507), naming its bytes and
 * the budget; one whose way is blocked by busy models waits for them,
 * bounded, then fails 503.
 *
 * A request for a model that is not resident waits, suspended, for one
 * load (concurrent first requests share it), bounded by the model's queue
 * timeout; then it is routed again (http.c), holding a reference taken
 * when the load finished, so the model cannot be evicted before the
 * request reaches its queue. Loads run on threads of their own: no HTTP
 * thread waits, and other models' traffic goes on.
 *
 * Everything here is under the repository's mu, held only for bookkeeping:
 * never while a model loads or is freed.
 */
#include "alloc.h"
#include "clock.h"
#include "codec.h"
#include "device.h"
#include "http.h"
#include "log.h"
#include "model.h"
#include "pipeline.h" /* slim_model_file_is_slim */
#include "residency.h"
#include "server.h"

#include <microhttpd.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct waiter {
    slim_server_request *req;
    char name[256];
    int64_t version;
    int64_t deadline_us;
    struct waiter *next;
} waiter;

#define MAX_RESERVED 32

typedef struct slim_server_residency_state {
    slim_server_control_mode mode;
    pthread_cond_t cv;              /* with repo->mu: waiters, loads, room */
    pthread_t reaper;
    bool reaper_started, stopping;
    waiter *waiters;
    int loads_running;              /* residency load threads alive */
    slim__reservation reserved[MAX_RESERVED];
} slim_server_residency_state;

/* Load durations: slim_model_load_duration_seconds's bucket bounds. */
static const double load_buckets_s[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5, 1, 2.5, 5, 10};
#define N_BUCKETS (sizeof(load_buckets_s) / sizeof(load_buckets_s[0]))

bool slim_server_control_mode_parse(const char *s, slim_server_control_mode *out)
{
    if (strcmp(s, "none") == 0)
        *out = SLIM_SERVER_CONTROL_NONE;
    else if (strcmp(s, "explicit") == 0)
        *out = SLIM_SERVER_CONTROL_EXPLICIT;
    else if (strcmp(s, "on-demand") == 0)
        *out = SLIM_SERVER_CONTROL_ON_DEMAND;
    else
        return false;
    return true;
}

bool slim__residency_loads_at_start(const slim_server_control *ctl, const char *name)
{
    if (ctl->mode == SLIM_SERVER_CONTROL_NONE)
        return true;
    for (int i = 0; ctl->mode == SLIM_SERVER_CONTROL_EXPLICIT && i < ctl->n_load; i++)
        if (strcmp(ctl->load[i], name) == 0)
            return true;
    return false;
}

slim_status slim__residency_check_names(const slim_server_control *ctl, const char *root,
                                        slim_err *err)
{
    for (int i = 0; i < ctl->n_load; i++) {
        char path[4096];
        struct stat st;
        const char *n = ctl->load[i];
        snprintf(path, sizeof(path), "%s/%s", root, n);
        if (!n[0] || n[0] == '.' || strchr(n, '/') || stat(path, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            return slim_errf(err, SLIM_ENOTFOUND, "--load-model %s: no such model folder in %s",
                             n, root);
    }
    return SLIM_OK;
}

void slim__residency_configure(slim_server_residency *r, const slim_server_config *cfg,
                               slim_server_control_mode mode)
{
    const cJSON *pinned = cJSON_GetObjectItemCaseSensitive(cfg->reserved, "pinned");
    const cJSON *priority = cJSON_GetObjectItemCaseSensitive(cfg->reserved, "priority");
    r->pinned = cJSON_IsTrue(pinned);
    r->priority = cJSON_IsNumber(priority) ? (int)priority->valuedouble : 0;
    /* The queue timeout bounds a request's wait in the queue; waiting for
     * the model to load is the same wait, so it is bounded the same way. */
    r->wait_us = cfg->batching.default_timeout_us ? cfg->batching.default_timeout_us
                 : cfg->request_timeout_ms        ? cfg->request_timeout_ms * 1000
                                                  : (int64_t)SLIM_SERVER_LOAD_WAIT_DEFAULT_MS * 1000;
    if (mode == SLIM_SERVER_CONTROL_ON_DEMAND)
        r->wanted = true;
}

void slim__residency_carry(slim_server_residency *fresh, const slim_server_residency *old)
{
    fresh->wanted = old->wanted || fresh->wanted;
    fresh->loading = old->loading;
    fresh->last_used_us = old->last_used_us;
    fresh->predicted_bytes = old->predicted_bytes;
    fresh->loads = old->loads;
    fresh->evictions = old->evictions;
    memcpy(fresh->load_hist, old->load_hist, sizeof(fresh->load_hist));
    fresh->load_us_sum = old->load_us_sum;
}

void slim__residency_loaded(slim_server_entry *e, int64_t load_us)
{
    e->res.loads++;
    e->res.last_used_us = slim_server_now_us(); /* a fresh load is not the first to go */
    e->res.load_us_sum += (uint64_t)load_us;
    size_t b = 0;
    while (b < N_BUCKETS && (double)load_us / 1e6 > load_buckets_s[b])
        b++;
    e->res.load_hist[b]++;
}

/* ---- the budget --------------------------------------------------------- */

/* The device's canonical name ("cpu", "cuda:0") and its budget (0: none). */
static size_t budget_of(const char *device, char *canon, size_t cap)
{
    return slim__residency_budget(device, canon, cap);
}

size_t slim__residency_loading_bytes(const slim_server_repo *repo, const char *device)
{
    size_t bytes = 0;
    const slim_server_residency_state *st = repo->residency;
    for (int i = 0; st && i < MAX_RESERVED; i++)
        if (st->reserved[i].held && strcmp(st->reserved[i].device, device) == 0)
            bytes += st->reserved[i].bytes;
    return bytes;
}

/* Resident and reserved bytes on device (under mu). */
static size_t used_on(slim_server_repo *repo, const char *device, size_t *pinned)
{
    size_t used = 0;
    if (pinned)
        *pinned = 0;
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        for (int j = 0; j < e->n_slots; j++) {
            const slim_server_model *m = e->slots[j].live;
            if (m && strcmp(m->budget_device, device) == 0) {
                used += m->resident_bytes;
                if (pinned && e->res.pinned)
                    *pinned += m->resident_bytes;
            }
        }
    }
    return used + slim__residency_loading_bytes(repo, device);
}

/* Weights mapped from .slim files on device by the models in the table
 * (under mu); the allocator does not see them. A load under way counts
 * once it settles (a few milliseconds after it maps its file). */
static size_t mapped_on(const slim_server_repo *repo, const char *device)
{
    size_t mapped = 0;
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        for (int j = 0; j < e->n_slots; j++) {
            const slim_server_model *m = e->slots[j].live;
            if (m && strcmp(m->budget_device, device) == 0)
                mapped += m->actual.mapped_bytes;
        }
    }
    return mapped;
}

/* Under mu, after the table or the reservations changed on device: the
 * allocator's cache cap follows (residency_budget.c). Only in explicit and
 * on-demand modes: mode none caches as before. */
static void follow_locked(slim_server_repo *repo, const char *device)
{
    const slim_server_residency_state *st = repo->residency;
    if (st && st->mode != SLIM_SERVER_CONTROL_NONE)
        slim__residency_cap_cache(device, mapped_on(repo, device));
}

void slim__residency_follow(slim_server_repo *repo)
{
    char devices[17][32];
    int n = slim__residency_budget_devices(devices, 17);
    pthread_mutex_lock(&repo->mu);
    for (int i = 0; i < n; i++)
        follow_locked(repo, devices[i]);
    pthread_mutex_unlock(&repo->mu);
}

/* The model's predicted footprint, or its file's size when it could not
 * be predicted (a shape the planner cannot see through). */
static size_t predicted_or_file(const char *path, size_t predicted)
{
    struct stat st;
    if (predicted)
        return predicted;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

void slim__residency_measure(slim_server_model *m, const char *device)
{
    char canon[32];
    budget_of(device, canon, sizeof(canon));
    snprintf(m->budget_device, sizeof(m->budget_device), "%s", canon);
    m->resident_bytes = m->actual.total_bytes ? m->actual.total_bytes
                                              : atomic_load(&m->model->account->current);
}

/* The evictable model to go first on device (under mu): resident, held by
 * no request, not pinned, not just loaded for waiting requests; lowest
 * priority, then least recently used. */
static slim_server_slot *pick_victim(slim_server_repo *repo, const char *device,
                                     slim_server_entry **owner)
{
    slim_server_slot *best = NULL;
    slim_server_entry *best_e = NULL;
    for (int i = 0; i < repo->n_entries; i++) {
        slim_server_entry *e = &repo->entries[i];
        /* loading: just loaded for waiting requests that have not taken
         * it yet (load_main clears the flag as they do) */
        if (e->res.pinned || e->res.loading)
            continue;
        for (int j = 0; j < e->n_slots; j++) {
            slim_server_model *m = e->slots[j].live;
            if (!m || strcmp(m->budget_device, device) != 0 || atomic_load(&m->refs) != 1)
                continue;
            if (!best || e->res.priority < best_e->res.priority ||
                (e->res.priority == best_e->res.priority &&
                 e->res.last_used_us < best_e->res.last_used_us)) {
                best = &e->slots[j];
                best_e = e;
            }
        }
    }
    *owner = best_e;
    return best;
}

/* Under mu. */
static bool reserve_slot(slim_server_repo *repo, const char *device, size_t bytes,
                         slim__reservation *out)
{
    slim_server_residency_state *st = repo->residency;
    for (int i = 0; i < MAX_RESERVED; i++)
        if (!st->reserved[i].held) {
            snprintf(st->reserved[i].device, sizeof(st->reserved[i].device), "%s", device);
            st->reserved[i].bytes = bytes;
            st->reserved[i].held = true;
            *out = st->reserved[i];
            return true;
        }
    return false;
}

/* Under mu. */
static void release_reservation(slim_server_repo *repo, const char *device, size_t bytes)
{
    slim_server_residency_state *st = repo->residency;
    for (int i = 0; i < MAX_RESERVED; i++)
        if (st->reserved[i].held && st->reserved[i].bytes == bytes &&
            strcmp(st->reserved[i].device, device) == 0) {
            st->reserved[i].held = false;
            break;
        }
    /* a load settled (its model's mapped weights now count from the
     * table), failed, or an evicted model was freed */
    follow_locked(repo, device);
    pthread_cond_broadcast(&st->cv);
}

/* How long a load waits for busy models to become idle and evictable. */
#define ROOM_WAIT_MS 30000

slim_status slim__residency_reserve(slim_server_repo *repo, const char *name, const char *path,
                                    const slim_load_opts *lo, const slim_footprint *predicted,
                                    slim__reservation *out, slim_err *err)
{
    slim__reservation prior = *out;
    memset(out, 0, sizeof(*out));
    slim_server_residency_state *st = repo->residency;
    if (!st || st->mode == SLIM_SERVER_CONTROL_NONE)
        return SLIM_OK;
    char device[32];
    size_t budget = budget_of(lo->place.device, device, sizeof(device));
    static const slim_footprint unknown;
    if (!predicted)
        predicted = &unknown;
    size_t footprint = predicted_or_file(path, predicted->total_bytes);
    /* While it loads, a model holds its weights twice where they are
     * allocated (as read, and as converted/fused): measured, the peak of an
     * ONNX load is its footprint plus its allocated weights. Mapped .slim
     * weights are not copied. */
    size_t headroom = predicted->weight_bytes > predicted->mapped_bytes
                          ? predicted->weight_bytes - predicted->mapped_bytes : 0;
    /* No prediction: its dry run can itself run out under a tight budget
     * (it reads the weights). The file's size stands in for the footprint,
     * and again for the headroom unless the weights map (.slim). */
    if (!predicted->total_bytes && !slim_model_file_is_slim(path))
        headroom = footprint;
    size_t need = footprint + headroom;
    pthread_mutex_lock(&repo->mu);
    slim_server_entry *e = slim__repo_find_entry(repo, name);
    if (e && predicted != &unknown)
        e->res.predicted_bytes = footprint;
    if (prior.held) { /* the provisional reservation: kept when it covers the prediction */
        if (need <= prior.bytes) {
            *out = prior;
            pthread_mutex_unlock(&repo->mu);
            return SLIM_OK;
        }
        release_reservation(repo, prior.device, prior.bytes);
    }
    if (!budget) {
        pthread_mutex_unlock(&repo->mu);
        return SLIM_OK;
    }
    int64_t give_up = slim_server_now_us() + (int64_t)ROOM_WAIT_MS * 1000;
    slim_status s = SLIM_OK;
    const bool provisional = predicted == &unknown;
    for (;;) {
        size_t pinned, used = used_on(repo, device, &pinned);
        /* The file's size is only a stand-in (an int8 model needs a quarter
         * of it): it may ask for everything evictable, never refuse. */
        if (provisional && need + pinned > budget)
            need = budget > pinned ? budget - pinned : 0;
        if (need + pinned > budget) {
            s = slim_errf(err, SLIM_EOOM, "model \"%s\" needs %zu bytes to load (%s "
                          "footprint %zu, load headroom %zu) and does not fit in the budget of "
                          "%s, %zu bytes (--memory-limit)%s", name, need,
                          predicted->total_bytes ? "predicted" : "no prediction; its file's size as",
                          footprint, headroom, device, budget, pinned ? ", even with every "
                          "model evicted but the pinned ones, which hold " : "");
            if (pinned) {
                char tail[64];
                snprintf(tail, sizeof(tail), "%zu bytes", pinned);
                strncat(err->msg, tail, sizeof(err->msg) - strlen(err->msg) - 1);
            }
            break;
        }
        if (used + need <= budget) {
            if (!reserve_slot(repo, device, need, out))
                s = slim_errf(err, SLIM_ETIMEDOUT, "too many loads under way; try again");
            break;
        }
        slim_server_entry *owner;
        slim_server_slot *victim = pick_victim(repo, device, &owner);
        if (victim) {
            slim_server_model *m = victim->live;
            victim->live = NULL;
            snprintf(victim->reason, sizeof(victim->reason), "evicted to make room for \"%s\" "
                     "(it loads again at its next request)", name);
            owner->res.evictions++;
            /* owner may move once mu is let go (the table grows) */
            const bool by_priority = owner->res.priority != 0;
            /* Its memory is held until it is freed (its instance threads
             * joined): counted meanwhile, or another load would start in
             * memory that is not free yet. */
            slim__reservation going = {0};
            reserve_slot(repo, device, m->resident_bytes, &going);
            pthread_mutex_unlock(&repo->mu);
            slim_server_log(SLIM_LOG_INFO, NULL, "evicting model \"%s\" version %lld (%zu bytes "
                            "on %s, least recently used%s) to make room for \"%s\" (%zu bytes; "
                            "%zu of the budget %zu in use)", m->name, (long long)m->version,
                            m->resident_bytes, device, by_priority ? " at its priority" : "",
                            name, need, used, budget);
            slim_server_model_release(m); /* the table's reference: frees it */
            pthread_mutex_lock(&repo->mu);
            if (going.held)
                release_reservation(repo, going.device, going.bytes);
            continue;
        }
        if (st->stopping || slim_server_now_us() > give_up) {
            s = slim_errf(err, SLIM_ETIMEDOUT, "model \"%s\" needs %zu bytes and the models "
                          "holding the budget of %s (%zu of %zu bytes) stayed busy; try again",
                          name, need, device, used, budget);
            break;
        }
        /* Every model in the way has requests queued or running: wait for
         * one to finish (polled: requests do not signal their release). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&st->cv, &repo->mu, &ts);
    }
    pthread_mutex_unlock(&repo->mu);
    if (s == SLIM_EOOM)
        slim_server_log(SLIM_LOG_WARN, NULL, "refusing to load: %s", err->msg);
    return s;
}

void slim__residency_settle(slim_server_repo *repo, slim_server_model *m)
{
    if (m && m->reserved_bytes && repo->residency) {
        release_reservation(repo, m->budget_device, m->reserved_bytes);
        m->reserved_bytes = 0;
    }
}

void slim__residency_unreserve(slim_server_repo *repo, slim__reservation *r)
{
    slim_server_residency_state *st = repo->residency;
    if (!st || !r->held)
        return;
    pthread_mutex_lock(&repo->mu);
    release_reservation(repo, r->device, r->bytes);
    pthread_mutex_unlock(&repo->mu);
    r->held = false;
}

/* ---- requests waiting for a load ----------------------------------------- */

typedef struct load_job {
    slim_server_repo *repo;
    char name[256];
} load_job;

/* Hands waiting requests back to their connections (outside mu). */
static void resume_all(waiter *list)
{
    while (list) {
        waiter *next = list->next;
        MHD_resume_connection(list->req->conn); /* req may be gone after this */
        free(list);
        list = next;
    }
}

/* Answers w 503 with Retry-After: its wait is over without its model. */
static void answer_503(waiter *w, const char *why)
{
    slim_server_reply_error(&w->req->reply, 503, "%s", why);
    w->req->reply.retry_after_s = 1;
    w->req->repo_op = true; /* http.c sends the reply as it is */
}

static void *load_main(void *arg);

/* Starts name's load on a thread of its own (under mu); false: none. */
static bool start_load(slim_server_repo *repo, slim_server_entry *e)
{
    slim_server_residency_state *st = repo->residency;
    load_job *job = calloc(1, sizeof(*job));
    if (!job)
        return false;
    job->repo = repo;
    snprintf(job->name, sizeof(job->name), "%s", e->name);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool ok = pthread_create(&th, &attr, load_main, job) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        free(job);
        return false;
    }
    e->res.loading = true;
    st->loads_running++;
    return true;
}

/* After name's load: each waiter takes its model (a reference it carries
 * back into routing) or its answer; those whose model was evicted again in
 * between stay and wait for another load. Under mu; returns the requests
 * to resume. */
static waiter *finish_waiters(slim_server_repo *repo, const char *name, int fail_status,
                              const char *fail_msg)
{
    slim_server_residency_state *st = repo->residency;
    waiter *done = NULL, **pp = &st->waiters;
    bool again = false;
    while (*pp) {
        waiter *w = *pp;
        if (strcmp(w->name, name) != 0) {
            pp = &w->next;
            continue;
        }
        int status = 503;
        char msg[1200];
        bool loadable = false;
        slim_server_model *m = slim__repo_acquire_locked(repo, name, w->version, &status, msg,
                                                         sizeof(msg), &loadable);
        if (!m && loadable && !fail_status && !st->stopping) {
            again = true;
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (m) {
            w->req->residency_model = m;
            w->req->residency_wait = true;
        } else if (fail_status == 507) {
            slim_server_reply_error(&w->req->reply, 507, "%s", fail_msg);
            w->req->repo_op = true;
        } else if (fail_status) {
            answer_503(w, fail_msg);
        } else {
            slim_server_reply_error(&w->req->reply, status, "%s", msg);
            if (status == 503)
                w->req->reply.retry_after_s = 1;
            w->req->repo_op = true;
        }
        w->next = done;
        done = w;
    }
    slim_server_entry *e = slim__repo_find_entry(repo, name);
    if (again && e && !e->res.loading && !start_load(repo, e)) {
        /* no thread: the waiters time out (reaper) */
    }
    return done;
}

static void *load_main(void *arg)
{
    load_job *job = arg;
    slim_server_repo *repo = job->repo;
    slim_server_residency_state *st = repo->residency;
    int status = 200;
    slim_err err = {0};
    slim_server_log(SLIM_LOG_INFO, NULL, "loading model \"%s\" for a request (not resident)",
                    job->name);
    slim_status s = slim_server_repo_load(repo, job->name, &status, &err);
    if (s == SLIM_OK)
        status = 0;
    else if (status != 507)
        status = 503;
    pthread_mutex_lock(&repo->mu);
    slim_server_entry *e = slim__repo_find_entry(repo, job->name);
    if (e)
        e->res.loading = false;
    waiter *done = finish_waiters(repo, job->name, status, err.msg);
    st->loads_running--;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&repo->mu);
    resume_all(done);
    free(job);
    return NULL;
}

/* Answers the waits that time out, and all of them once stopping. */
static void *reaper_main(void *arg)
{
    slim_server_repo *repo = arg;
    slim_server_residency_state *st = repo->residency;
    pthread_mutex_lock(&repo->mu);
    while (!st->stopping || st->waiters) {
        int64_t now = slim_server_now_us();
        waiter *done = NULL, **pp = &st->waiters;
        while (*pp) {
            waiter *w = *pp;
            if (!st->stopping && now < w->deadline_us) {
                pp = &w->next;
                continue;
            }
            *pp = w->next;
            char why[600];
            if (st->stopping)
                snprintf(why, sizeof(why), "the server is shutting down; model '%s' was not "
                         "loaded", w->name);
            else
                snprintf(why, sizeof(why), "model '%s' is loading and was not resident within "
                         "the request's wait (its queue timeout); try again", w->name);
            answer_503(w, why);
            slim_server_log(SLIM_LOG_WARN, w->req->id, "%s", why);
            w->next = done;
            done = w;
        }
        if (done) {
            pthread_mutex_unlock(&repo->mu);
            resume_all(done);
            pthread_mutex_lock(&repo->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&st->cv, &repo->mu, &ts);
    }
    pthread_mutex_unlock(&repo->mu);
    return NULL;
}

slim_server_model *slim_server_residency_acquire(slim_server_request *req, const char *name,
                                                 int64_t version, int *http_status, char *msg,
                                                 size_t cap, bool *waiting)
{
    *waiting = false;
    if (req->residency_model) { /* taken for it when its load finished */
        slim_server_model *m = req->residency_model;
        req->residency_model = NULL;
        return m;
    }
    slim_server_repo *repo = &req->srv->repo;
    slim_server_residency_state *st = repo->residency;
    bool loadable = false;
    pthread_mutex_lock(&repo->mu);
    slim_server_model *m = slim__repo_acquire_locked(repo, name, version, http_status, msg, cap,
                                                     &loadable);
    if (m || !loadable || !st) {
        pthread_mutex_unlock(&repo->mu);
        return m;
    }
    slim_server_entry *e = slim__repo_find_entry(repo, name);
    waiter *w = calloc(1, sizeof(*w));
    if (st->stopping || !w || (!e->res.loading && !start_load(repo, e))) {
        pthread_mutex_unlock(&repo->mu);
        free(w);
        *http_status = 503;
        snprintf(msg, cap, "model '%s' is not resident and could not be loaded now; try again",
                 name);
        return NULL;
    }
    w->req = req;
    snprintf(w->name, sizeof(w->name), "%s", name);
    w->version = version;
    /* From when the request's body was complete, like its queue time. */
    w->deadline_us = req->t_begin + e->res.wait_us;
    /* Suspended under mu: the load cannot finish and resume it first. */
    MHD_suspend_connection(req->conn);
    req->suspended = true;
    req->repo_op = false;
    w->next = st->waiters;
    st->waiters = w;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&repo->mu);
    slim_server_log(SLIM_LOG_INFO, req->id, "request waits for model \"%s\" to load", name);
    *waiting = true;
    return NULL;
}

slim_status slim__residency_open(slim_server_repo *repo, slim_server_control_mode mode,
                                 slim_err *err)
{
    slim_server_residency_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->mode = mode;
    pthread_cond_init(&st->cv, NULL);
    repo->residency = st;
    repo->mode = mode;
    if (mode != SLIM_SERVER_CONTROL_NONE) {
        if (pthread_create(&st->reaper, NULL, reaper_main, repo) != 0)
            return slim_errf(err, SLIM_ENOMEM, "no thread for the residency watch");
        st->reaper_started = true;
    }
    return SLIM_OK;
}

void slim_server_residency_stop(slim_server_repo *repo)
{
    slim_server_residency_state *st = repo->residency;
    if (!st)
        return;
    pthread_mutex_lock(&repo->mu);
    st->stopping = true;
    pthread_cond_broadcast(&st->cv);
    while (st->loads_running > 0) {
        pthread_mutex_unlock(&repo->mu);
        slim_server_repo_cancel_loads(repo);
        struct timespec ts = {.tv_nsec = 10 * 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&repo->mu);
    }
    pthread_mutex_unlock(&repo->mu);
    if (st->reaper_started) {
        pthread_join(st->reaper, NULL); /* it answers the waits left, then ends */
        st->reaper_started = false;
    }
}

void slim__residency_close(slim_server_repo *repo)
{
    slim_server_residency_state *st = repo->residency;
    if (!st)
        return;
    slim_server_residency_stop(repo);
    pthread_cond_destroy(&st->cv);
    free(st);
    repo->residency = NULL;
}
