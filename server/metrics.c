/*
 * metrics.c - GET /metrics in the Prometheus text exposition format.
 *
 * Triton's nv_inference_* counters, renamed slim_*, per model and version,
 * then process figures, then the same counters under Triton's own names
 * (nv_*, render_triton) for Triton dashboards. Each section is one function
 * in `sections`; a later issue (memory gauges, say) adds its renderer to
 * that table.
 *
 * Batching (batcher.c, batch_run.c) adds the slim_batch_size and
 * slim_queue_wait_us histograms, slim_batch_halvings_total,
 * slim_model_oom_total, slim_requests_rejected_total{reason} and the
 * slim_batch_ceiling gauge. The wait histogram is not called
 * slim_queue_duration_us: under OpenMetrics that family name belongs to
 * the slim_queue_duration_us_total counter.
 *
 * Counters live in slim_server_stats records that are created on first use
 * and kept until shutdown, so a model that is unloaded and loaded again
 * keeps counting where it left off (Prometheus counters never go back).
 */
#include "buf.h"
#include "device.h"
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *failure_names[] = {
#define SLIM__FAIL_NAME(name) #name,
    SLIM_SERVER_FAILURE_MAP(SLIM__FAIL_NAME)
#undef SLIM__FAIL_NAME
};
_Static_assert(sizeof(failure_names) / sizeof(failure_names[0]) == SLIM_SERVER_FAIL_COUNT,
               "failure_names out of step with SLIM_SERVER_FAILURE_MAP");

void slim_server_metrics_init(slim_server_metrics *mx)
{
    pthread_mutex_init(&mx->mu, NULL);
    mx->head = NULL;
}

void slim_server_metrics_free(slim_server_metrics *mx)
{
    slim_server_stats *s = mx->head;
    while (s) {
        slim_server_stats *next = s->next;
        free(atomic_load(&s->batch_stats)); /* stats.c's per-batch-size table */
        free(s->model);
        free(s);
        s = next;
    }
    mx->head = NULL;
    pthread_mutex_destroy(&mx->mu);
}

slim_server_stats *slim_server_metrics_get(slim_server_metrics *mx, const char *model,
                                           int64_t version)
{
    pthread_mutex_lock(&mx->mu);
    slim_server_stats *s, **tail = &mx->head;
    for (s = mx->head; s; tail = &s->next, s = s->next)
        if (s->version == version && strcmp(s->model, model) == 0)
            goto out;
    /* Appended at the tail: the exposition lists models in load order. */
    s = calloc(1, sizeof(*s));
    if (!s || !(s->model = strdup(model))) {
        free(s);
        s = NULL;
        goto out;
    }
    s->version = version;
    *tail = s;
out:
    pthread_mutex_unlock(&mx->mu);
    return s;
}

/* ---- sections ----------------------------------------------------------- */

typedef struct counter_def {
    const char *name, *help;
    size_t offset; /* of the atomic counter in slim_server_stats */
} counter_def;

#define STAT(field) offsetof(slim_server_stats, field)

static const counter_def counters[] = {
    {"slim_request_success_total", "Number of successful inference requests", STAT(success)},
    {"slim_inference_count_total",
     "Number of inferences performed (a batch of n counts n)", STAT(inference_count)},
    {"slim_execution_count_total", "Number of model executions", STAT(execution_count)},
    {"slim_request_duration_us_total",
     "Cumulative inference request duration, receipt to response, in microseconds",
     STAT(request_us)},
    {"slim_queue_duration_us_total",
     "Cumulative time requests waited for a worker, in microseconds", STAT(queue_us)},
    {"slim_compute_duration_us_total",
     "Cumulative model execution time, in microseconds", STAT(compute_us)},
};

static unsigned long long load(const slim_server_stats *s, size_t offset)
{
    return (unsigned long long)atomic_load(
        (const atomic_uint_least64_t *)((const char *)s + offset));
}

static void labels(slim_server_buf *out, const slim_server_stats *s)
{
    slim_server_buf_puts(out, "{model=");
    /* Model names are folder names; JSON escaping matches Prometheus' rules
     * for the characters that can occur there (\ and "). */
    slim_server_buf_json_string(out, s->model);
    slim_server_buf_printf(out, ",version=\"%lld\"", (long long)s->version);
}

static void render_inference(slim_server_metrics *mx, slim_server_buf *out)
{
    pthread_mutex_lock(&mx->mu);
    for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
        slim_server_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", counters[c].name,
                               counters[c].help, counters[c].name);
        for (const slim_server_stats *s = mx->head; s; s = s->next) {
            slim_server_buf_puts(out, counters[c].name);
            labels(out, s);
            slim_server_buf_printf(out, "} %llu\n", load(s, counters[c].offset));
        }
        if (c == 0) { /* failures right after successes, as Triton lists them */
            slim_server_buf_puts(out, "# HELP slim_request_failure_total Number of failed "
                                      "inference requests, by reason\n"
                                      "# TYPE slim_request_failure_total counter\n");
            for (const slim_server_stats *s = mx->head; s; s = s->next)
                for (int r = 0; r < SLIM_SERVER_FAIL_COUNT; r++) {
                    slim_server_buf_puts(out, "slim_request_failure_total");
                    labels(out, s);
                    slim_server_buf_printf(out, ",reason=\"%s\"} %llu\n", failure_names[r],
                                           (unsigned long long)atomic_load(&s->failure[r]));
                }
        }
    }
    pthread_mutex_unlock(&mx->mu);
}

/* ---- batching ----------------------------------------------------------- */

/* Upper bounds of the finite buckets; the last bucket is +Inf. */
static const int64_t queue_bounds_us[SLIM_SERVER_QUEUE_BUCKETS - 1] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000};

static int64_t batch_bound(int i)
{
    return (int64_t)1 << i; /* 1, 2, 4, ... */
}

void slim_server_stats_observe_batch(slim_server_stats *s, int64_t rows)
{
    int i = 0;
    while (i < SLIM_SERVER_BATCH_BUCKETS - 1 && rows > batch_bound(i))
        i++;
    atomic_fetch_add(&s->batch_hist[i], 1);
    atomic_fetch_add(&s->batch_rows, (uint64_t)rows);
}

void slim_server_stats_observe_queue(slim_server_stats *s, int64_t wait_us)
{
    int i = 0;
    while (i < SLIM_SERVER_QUEUE_BUCKETS - 1 && wait_us > queue_bounds_us[i])
        i++;
    atomic_fetch_add(&s->queue_hist[i], 1);
    atomic_fetch_add(&s->queue_wait_us, (uint64_t)(wait_us > 0 ? wait_us : 0));
}

static void render_histogram(slim_server_buf *out, const slim_server_stats *s, const char *name,
                             const atomic_uint_least64_t *hist, int n_buckets,
                             int64_t (*bound)(int), const atomic_uint_least64_t *sum)
{
    unsigned long long cumulative = 0;
    for (int i = 0; i < n_buckets; i++) {
        cumulative += (unsigned long long)atomic_load(&hist[i]);
        slim_server_buf_printf(out, "%s_bucket", name);
        labels(out, s);
        if (i < n_buckets - 1)
            slim_server_buf_printf(out, ",le=\"%lld\"} %llu\n", (long long)bound(i), cumulative);
        else
            slim_server_buf_printf(out, ",le=\"+Inf\"} %llu\n", cumulative);
    }
    slim_server_buf_printf(out, "%s_sum", name);
    labels(out, s);
    slim_server_buf_printf(out, "} %llu\n", (unsigned long long)atomic_load(sum));
    slim_server_buf_printf(out, "%s_count", name);
    labels(out, s);
    slim_server_buf_printf(out, "} %llu\n", cumulative);
}

static int64_t queue_bound(int i)
{
    return queue_bounds_us[i];
}

static void render_counter(slim_server_buf *out, const slim_server_stats *s, const char *name,
                           const char *extra_label, const atomic_uint_least64_t *v)
{
    slim_server_buf_puts(out, name);
    labels(out, s);
    slim_server_buf_printf(out, "%s} %llu\n", extra_label ? extra_label : "",
                           (unsigned long long)atomic_load(v));
}

static void render_batching(slim_server_metrics *mx, slim_server_buf *out)
{
    pthread_mutex_lock(&mx->mu);
    slim_server_buf_puts(out, "# HELP slim_batch_size Rows per model execution (merged requests)\n"
                              "# TYPE slim_batch_size histogram\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next)
        render_histogram(out, s, "slim_batch_size", s->batch_hist, SLIM_SERVER_BATCH_BUCKETS,
                         batch_bound, &s->batch_rows);
    slim_server_buf_puts(out, "# HELP slim_queue_wait_us Time a request waited in its model's "
                              "queue before its batch started, in microseconds\n"
                              "# TYPE slim_queue_wait_us histogram\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next)
        render_histogram(out, s, "slim_queue_wait_us", s->queue_hist, SLIM_SERVER_QUEUE_BUCKETS,
                         queue_bound, &s->queue_wait_us);
    slim_server_buf_puts(out, "# HELP slim_batch_halvings_total Batches split in halves after "
                              "running out of memory\n"
                              "# TYPE slim_batch_halvings_total counter\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next)
        render_counter(out, s, "slim_batch_halvings_total", NULL, &s->halvings);
    slim_server_buf_puts(out, "# HELP slim_model_oom_total Model runs that failed for lack of "
                              "memory under the configured limits\n"
                              "# TYPE slim_model_oom_total counter\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next)
        render_counter(out, s, "slim_model_oom_total", NULL, &s->ooms);
    slim_server_buf_puts(out, "# HELP slim_requests_rejected_total Requests refused by the "
                              "scheduler: queue full (503) or queue timeout expired\n"
                              "# TYPE slim_requests_rejected_total counter\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next) {
        render_counter(out, s, "slim_requests_rejected_total", ",reason=\"queue_full\"",
                       &s->rejected_queue_full);
        render_counter(out, s, "slim_requests_rejected_total", ",reason=\"timeout\"",
                       &s->rejected_timeout);
    }
    slim_server_buf_puts(out, "# HELP slim_batch_ceiling Largest batch, in rows, the scheduler "
                              "forms now (the tightest over the model's input shapes; lowered "
                              "by out-of-memory, raised by probing)\n"
                              "# TYPE slim_batch_ceiling gauge\n");
    for (const slim_server_stats *s = mx->head; s; s = s->next) {
        if (atomic_load(&s->live_batchers) <= 0)
            continue;
        slim_server_buf_puts(out, "slim_batch_ceiling");
        labels(out, s);
        slim_server_buf_printf(out, "} %d\n", atomic_load(&s->batch_ceiling));
    }
    pthread_mutex_unlock(&mx->mu);
}

static void render_process(slim_server_metrics *mx, slim_server_buf *out)
{
    unsigned long long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &pages_total, &pages_resident) != 2)
            pages_resident = 0;
        fclose(f);
    }
    long page = sysconf(_SC_PAGESIZE);
    slim_server_buf_printf(out,
                           "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                           "# TYPE process_resident_memory_bytes gauge\n"
                           "process_resident_memory_bytes %llu\n",
                           pages_resident * (unsigned long long)(page > 0 ? page : 4096));
}

/* ---- Triton's names ----------------------------------------------------- */

/* The nv_* families Triton dashboards and alerts read, from the same
 * counters as the slim_* ones (the statistics extension's phase times are
 * kept in ns; Triton's families are in us). Failures are one series per
 * model version, as Triton counts them, summed over slimserve's reasons. */
typedef struct nv_family {
    const char *name, *help;
    size_t offset;      /* of the counter in slim_server_stats; 0: failures */
    unsigned divisor;   /* 1000 for ns counters */
} nv_family;

static const nv_family nv_families[] = {
    {"nv_inference_request_success", "Number of successful inference requests, all batch sizes",
     STAT(success), 1},
    {"nv_inference_request_failure", "Number of failed inference requests, all batch sizes", 0, 1},
    {"nv_inference_count", "Number of inferences performed (does not include cached requests)",
     STAT(inference_count), 1},
    {"nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)",
     STAT(execution_count), 1},
    {"nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     STAT(request_us), 1},
    {"nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     STAT(queue_us), 1},
    {"nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     STAT(input_ns), 1000},
    {"nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     STAT(infer_ns), 1000},
    {"nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)", STAT(output_ns), 1000},
};

static unsigned long long nv_value(const slim_server_stats *s, const nv_family *f)
{
    if (!f->offset) {
        unsigned long long sum = 0;
        for (int r = 0; r < SLIM_SERVER_FAIL_COUNT; r++)
            sum += (unsigned long long)atomic_load(&s->failure[r]);
        return sum;
    }
    return load(s, f->offset) / f->divisor;
}

/* Host memory in use, as Triton reports it: the machine's, total less
 * available (/proc/meminfo), not the process's (process_resident_memory_bytes
 * has that). */
static unsigned long long host_memory_used(void)
{
    unsigned long long total = 0, avail = 0, v;
    char line[256], key[64];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%63[^:]: %llu", key, &v) == 2) {
            if (strcmp(key, "MemTotal") == 0)
                total = v * 1024;
            else if (strcmp(key, "MemAvailable") == 0)
                avail = v * 1024;
        }
    if (f)
        fclose(f);
    return total > avail ? total - avail : 0;
}

/* Each GPU already started (none is started for this), labelled as
 * Triton labels it: gpu_uuid="GPU-..." from the device interface; a
 * backend that gives none is labelled with the slimserve name. Used and
 * total memory, from the device's own view (cudaMemGetInfo). */
static void render_nv_gpu(slim_server_buf *out)
{
    slim_device *devs[16];
    int n = slim_device_list(devs, 16, false, NULL);
    static const char *const families[2][2] = {
        {"nv_gpu_memory_used_bytes", "GPU used memory, in bytes"},
        {"nv_gpu_memory_total_bytes", "GPU total memory, in bytes"}};
    for (int f = 0; f < 2; f++) {
        slim_server_buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", families[f][0],
                               families[f][1], families[f][0]);
        for (int i = 0; i < n; i++) {
            const slim_backend_iface *b = devs[i]->backend;
            if (!b || !b->mem_info || strcmp(slim_device_kind(devs[i]), "cpu") == 0)
                continue;
            size_t free_b = 0, total_b = 0;
            b->mem_info(devs[i], &free_b, &total_b);
            const char *uuid = b->uuid ? b->uuid(devs[i]) : NULL;
            size_t v = f ? total_b : total_b > free_b ? total_b - free_b : 0;
            slim_server_buf_printf(out, "%s{gpu_uuid=\"%s\"} %zu\n", families[f][0],
                                   uuid ? uuid : devs[i]->name, v);
        }
    }
}

static void render_triton(slim_server_metrics *mx, slim_server_buf *out)
{
    pthread_mutex_lock(&mx->mu);
    for (size_t i = 0; i < sizeof(nv_families) / sizeof(nv_families[0]); i++) {
        const nv_family *f = &nv_families[i];
        slim_server_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", f->name, f->help,
                               f->name);
        for (const slim_server_stats *s = mx->head; s; s = s->next) {
            slim_server_buf_puts(out, f->name);
            labels(out, s);
            slim_server_buf_printf(out, "} %llu\n", nv_value(s, f));
        }
    }
    pthread_mutex_unlock(&mx->mu);
    slim_server_buf_printf(out, "# HELP nv_cpu_memory_used_bytes CPU used memory, in bytes\n"
                                "# TYPE nv_cpu_memory_used_bytes gauge\n"
                                "nv_cpu_memory_used_bytes %llu\n", host_memory_used());
    render_nv_gpu(out);
}

static void (*const sections[])(slim_server_metrics *, slim_server_buf *) = {
    render_inference,
    render_batching,
    render_process,
    render_triton,
};

void slim_server_metrics_render(slim_server_metrics *mx, slim_server_buf *out)
{
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        sections[i](mx, out);
}
