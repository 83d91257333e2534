/*
 * residency_view.c - what residency looks like from outside: its /metrics
 * families and its part of GET /v2/debug/memory (residents least recently
 * used first, so the next eviction is the first line).
 */
#include "alloc.h"
#include "device.h"
#include "residency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Load duration buckets, as residency.c counts them. */
static const char *const bucket_le[] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                                        "0.5", "1", "2.5", "5", "10", "+Inf"};

static size_t entry_resident_bytes(const slim_server_entry *e, bool *resident)
{
    size_t b = 0;
    *resident = false;
    for (int j = 0; j < e->n_slots; j++)
        if (e->slots[j].live) {
            *resident = true;
            b += e->slots[j].live->resident_bytes;
        }
    return b;
}

static void header(slim_server_buf *out, const char *name, const char *type, const char *help)
{
    slim_server_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

#define MAX_DEVICES 17

static void device_metrics(slim_server_repo *repo, slim_server_buf *out)
{
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    header(out, "slim_memory_budget_bytes", "gauge",
           "The budget resident models share on each device (--memory-limit; 0: none)");
    for (int d = 0; d < n; d++)
        slim_server_buf_printf(out, "slim_memory_budget_bytes{device=\"%s\"} %zu\n",
                               devs[d]->name, slim__residency_budget(devs[d]->name, NULL, 0));
    header(out, "slim_models_resident_bytes", "gauge",
           "Footprint of the resident models on each device (weights, arenas, workspace)");
    for (int d = 0; d < n; d++) {
        size_t used = 0;
        for (int i = 0; i < repo->n_entries; i++) {
            const slim_server_entry *e = &repo->entries[i];
            for (int j = 0; j < e->n_slots; j++)
                if (e->slots[j].live && strcmp(e->slots[j].live->budget_device, devs[d]->name) == 0)
                    used += e->slots[j].live->resident_bytes;
        }
        slim_server_buf_printf(out, "slim_models_resident_bytes{device=\"%s\"} %zu\n",
                               devs[d]->name, used);
    }
    header(out, "slim_models_loading_bytes", "gauge",
           "Bytes the budget holds for the loads under way on each device (their files, then "
           "their footprints and weights as read)");
    for (int d = 0; d < n; d++)
        slim_server_buf_printf(out, "slim_models_loading_bytes{device=\"%s\"} %zu\n",
                               devs[d]->name, slim__residency_loading_bytes(repo, devs[d]->name));
}

void slim_server_residency_metrics(slim_server_repo *repo, slim_server_buf *out)
{
    pthread_mutex_lock(&repo->mu);
    static const char *const names[] = {"slim_model_resident", "slim_model_resident_bytes",
                                        "slim_model_predicted_bytes", "slim_model_loads_total",
                                        "slim_model_evictions_total"};
    static const char *const helps[] = {
        "Whether the model is resident (1) or not (0)",
        "Footprint the resident model counts against its device's budget",
        "Footprint predicted before its last load (0: not predicted)",
        "Loads of the model that went into the table",
        "Times the model was evicted to make room for another"};
    for (int f = 0; f < 5; f++) {
        header(out, names[f], f >= 3 ? "counter" : "gauge", helps[f]);
        for (int i = 0; i < repo->n_entries; i++) {
            const slim_server_entry *e = &repo->entries[i];
            bool resident;
            size_t bytes = entry_resident_bytes(e, &resident);
            unsigned long long v = f == 0   ? resident
                                   : f == 1 ? bytes
                                   : f == 2 ? e->res.predicted_bytes
                                   : f == 3 ? e->res.loads : e->res.evictions;
            slim_server_buf_printf(out, "%s{model=\"%s\"} %llu\n", names[f], e->name, v);
        }
    }
    header(out, "slim_model_load_duration_seconds", "histogram",
           "How long the model's loads took (reading, converting, planning)");
    for (int i = 0; i < repo->n_entries; i++) {
        const slim_server_entry *e = &repo->entries[i];
        uint64_t cum = 0;
        for (int b = 0; b < 12; b++) {
            cum += e->res.load_hist[b];
            slim_server_buf_printf(out, "slim_model_load_duration_seconds_bucket{model=\"%s\","
                                   "le=\"%s\"} %llu\n", e->name, bucket_le[b],
                                   (unsigned long long)cum);
        }
        slim_server_buf_printf(out, "slim_model_load_duration_seconds_sum{model=\"%s\"} %.6f\n"
                               "slim_model_load_duration_seconds_count{model=\"%s\"} %llu\n",
                               e->name, (double)e->res.load_us_sum / 1e6, e->name,
                               (unsigned long long)cum);
    }
    device_metrics(repo, out);
    pthread_mutex_unlock(&repo->mu);
}

/* The resident model versions, least recently used first (under mu). */
typedef struct resident {
    const slim_server_entry *e;
    const slim_server_model *m;
} resident;

static int cmp_lru(const void *a, const void *b)
{
    const resident *x = a, *y = b;
    if (x->e->res.last_used_us != y->e->res.last_used_us)
        return x->e->res.last_used_us < y->e->res.last_used_us ? -1 : 1;
    return strcmp(x->e->name, y->e->name);
}

static int residents_lru(slim_server_repo *repo, resident **out)
{
    int n = 0;
    for (int i = 0; i < repo->n_entries; i++)
        for (int j = 0; j < repo->entries[i].n_slots; j++)
            n += repo->entries[i].slots[j].live != NULL;
    resident *r = calloc((size_t)n + 1, sizeof(*r));
    if (!r) {
        *out = NULL;
        return 0;
    }
    n = 0;
    for (int i = 0; i < repo->n_entries; i++)
        for (int j = 0; j < repo->entries[i].n_slots; j++)
            if (repo->entries[i].slots[j].live)
                r[n++] = (resident){&repo->entries[i], repo->entries[i].slots[j].live};
    qsort(r, (size_t)n, sizeof(*r), cmp_lru);
    *out = r;
    return n;
}

static const char *mode_str(slim_server_control_mode m)
{
    return m == SLIM_SERVER_CONTROL_EXPLICIT ? "explicit"
           : m == SLIM_SERVER_CONTROL_ON_DEMAND ? "on-demand" : "none";
}

void slim_server_residency_debug(slim_server_repo *repo, cJSON *root)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return;
    pthread_mutex_lock(&repo->mu);
    resident *r;
    int n = residents_lru(repo, &r);
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        char v[24];
        snprintf(v, sizeof(v), "%lld", (long long)r[i].m->version);
        cJSON_AddStringToObject(o, "name", r[i].e->name);
        cJSON_AddStringToObject(o, "version", v);
        cJSON_AddStringToObject(o, "device", r[i].m->budget_device);
        cJSON_AddNumberToObject(o, "resident_bytes", (double)r[i].m->resident_bytes);
        cJSON_AddNumberToObject(o, "predicted_bytes", (double)r[i].e->res.predicted_bytes);
        cJSON_AddBoolToObject(o, "pinned", r[i].e->res.pinned);
        cJSON_AddNumberToObject(o, "priority", r[i].e->res.priority);
        cJSON_AddBoolToObject(o, "busy", atomic_load(&r[i].m->refs) > 1);
        cJSON_AddNumberToObject(o, "last_used_us", (double)r[i].e->res.last_used_us);
        cJSON_AddItemToArray(arr, o);
    }
    free(r);
    pthread_mutex_unlock(&repo->mu);
    cJSON_AddStringToObject(root, "model_control_mode", mode_str(repo->mode));
    cJSON_AddItemToObject(root, "residents", arr);
}

void slim_server_residency_debug_text(slim_server_repo *repo, slim_server_buf *out)
{
    pthread_mutex_lock(&repo->mu);
    resident *r;
    int n = residents_lru(repo, &r);
    slim_server_buf_printf(out, "\nresident models, least recently used first "
                           "(--model-control-mode %s)\n%-24s %7s %-8s %14s %14s\n",
                           mode_str(repo->mode), "model", "version", "device", "resident",
                           "predicted");
    for (int i = 0; i < n; i++)
        slim_server_buf_printf(out, "%-24s %7lld %-8s %14zu %14zu%s\n", r[i].e->name,
                               (long long)r[i].m->version, r[i].m->budget_device,
                               r[i].m->resident_bytes, r[i].e->res.predicted_bytes,
                               r[i].e->res.pinned ? " pinned" : "");
    free(r);
    pthread_mutex_unlock(&repo->mu);
}
