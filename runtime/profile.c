/* profile.c - per-operator time totals (see profile.h). */
#include "profile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLIM_PROFILE_MAX 256

typedef struct entry {
    char op[64], device[16];
    long calls;
    double ms;
} entry;

static atomic_bool enabled;
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

void slim_profile_add(const char *op_type, const char *device, double ms)
{
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < n_entries &&
           (strcmp(entries[i].op, op_type) != 0 || strcmp(entries[i].device, device) != 0))
        i++;
    if (i == n_entries && n_entries < SLIM_PROFILE_MAX) {
        snprintf(entries[i].op, sizeof(entries[i].op), "%s", op_type);
        snprintf(entries[i].device, sizeof(entries[i].device), "%s", device);
        n_entries++;
    }
    if (i < n_entries) {
        entries[i].calls++;
        entries[i].ms += ms;
    }
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
