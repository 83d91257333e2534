/* profile.c - per-operator time totals (see profile.h). */
#include "profile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLIM_PROFILE_MAX 4096

typedef struct entry {
    char node[96], op[64], device[16]; /* node "" when totalled per op type */
    long calls;
    double ms;
    double bytes; /* output bytes, summed over calls */
} entry;

static atomic_bool enabled, per_node;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry entries[SLIM_PROFILE_MAX];
static int n_entries;

void slim_profile_enable(bool on)
{
    atomic_store(&enabled, on);
}

bool slim_profile_enabled(void)
{
    return atomic_load_explicit(&enabled, memory_order_relaxed);
}

static int by_time(const void *a, const void *b);

void slim_profile_per_node(bool on)
{
    atomic_store(&per_node, on);
}

void slim_profile_add_node(const char *node, const char *op_type, const char *device, double ms,
                           size_t bytes)
{
    if (!atomic_load(&per_node))
        node = "";
    pthread_mutex_lock(&mu);
    int i = 0;
    /* Linear: a few hundred nodes, looked up once per node run while
     * profiling, which is not what is being measured. */
    while (i < n_entries &&
           (strcmp(entries[i].node, node) != 0 || strcmp(entries[i].op, op_type) != 0 ||
            strcmp(entries[i].device, device) != 0))
        i++;
    if (i == n_entries && n_entries < SLIM_PROFILE_MAX) {
        snprintf(entries[i].node, sizeof(entries[i].node), "%s", node);
        snprintf(entries[i].op, sizeof(entries[i].op), "%s", op_type);
        snprintf(entries[i].device, sizeof(entries[i].device), "%s", device);
        entries[i].calls = 0;
        entries[i].ms = entries[i].bytes = 0;
        n_entries++;
    }
    if (i < n_entries) {
        entries[i].calls++;
        entries[i].ms += ms;
        entries[i].bytes += (double)bytes;
    }
    pthread_mutex_unlock(&mu);
}

void slim_profile_add(const char *op_type, const char *device, double ms)
{
    slim_profile_add_node("", op_type, device, ms, 0);
}

void slim_profile_print_nodes(FILE *f, long runs, int top)
{
    pthread_mutex_lock(&mu);
    qsort(entries, (size_t)n_entries, sizeof(entry), by_time);
    double total = 0;
    for (int i = 0; i < n_entries; i++)
        total += entries[i].ms;
    if (runs < 1)
        runs = 1;
    fprintf(f, "%-32s %-20s %-8s %10s %7s %12s\n", "node", "op", "device", "ms/run", "share",
            "out bytes");
    for (int i = 0; i < n_entries && (top <= 0 || i < top); i++)
        fprintf(f, "%-32s %-20s %-8s %10.3f %6.1f%% %12.0f\n", entries[i].node, entries[i].op,
                entries[i].device, entries[i].ms / (double)runs,
                total > 0 ? 100 * entries[i].ms / total : 0,
                entries[i].bytes / (double)runs);
    if (top > 0 && n_entries > top)
        fprintf(f, "(%d more nodes)\n", n_entries - top);
    pthread_mutex_unlock(&mu);
}

static int by_time(const void *a, const void *b)
{
    double x = ((const entry *)a)->ms, y = ((const entry *)b)->ms;
    return x > y ? -1 : x < y;
}

void slim_profile_print(FILE *f)
{
    pthread_mutex_lock(&mu);
    qsort(entries, (size_t)n_entries, sizeof(entry), by_time);
    double total = 0;
    for (int i = 0; i < n_entries; i++)
        total += entries[i].ms;
    fprintf(f, "%-24s %-8s %8s %12s %7s\n", "op", "device", "calls", "total ms", "share");
    for (int i = 0; i < n_entries; i++)
        fprintf(f, "%-24s %-8s %8ld %12.3f %6.1f%%\n", entries[i].op, entries[i].device,
                entries[i].calls, entries[i].ms, total > 0 ? 100 * entries[i].ms / total : 0);
    pthread_mutex_unlock(&mu);
}

void slim_profile_reset(void)
{
    pthread_mutex_lock(&mu);
    n_entries = 0;
    pthread_mutex_unlock(&mu);
}
