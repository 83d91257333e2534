/*
 * residency_budget.c - a device's budget, and the allocator's cache held
 * to the budget less the mapped weights.
 *
 * --memory-limit sets the allocator's limit, and the residency counts
 * footprints against it as the budget. But a .slim model's weights are
 * mapped from its file, outside the allocator, so the allocator could fill
 * the whole budget with live blocks and its cache of freed run memory while
 * the mapped weights sat on top (measured: RSS up to 13 MiB over budget
 * plus the fixed overhead). The cache is the part that can go without
 * failing anything: the allocator's cache cap is set to the budget less
 * the mapped bytes the residency counts (residency.c says which), so a
 * segment freed over it goes back at once. The limit itself stays the
 * budget: lowering it made loads fail out of memory (507) in the
 * benchmark, because request inputs and outputs come out of the allocator
 * but not out of the residency's bookkeeping.
 *
 * The cap alone still let the cache fill the room under it: the budget
 * counts every resident model's arenas at max_batch_size, but only the
 * models running hold theirs, so with the budget full the cache held the
 * rest (56 MiB reserved for 22.5 allocated at the benchmark's RSS peak,
 * which went 8.1 MiB over budget plus the fixed overhead, memory outside
 * the allocator on top). So under a budget the CPU's cache is also held to
 * a slack over what is allocated (slim_allocator_set_cache_slack: the
 * give-back's max(8 MiB, 10%)) at every moment, and large blocks get
 * segments of their own, which can go back when freed.
 */
#include "alloc.h"
#include "device.h"
#include "residency.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_BUDGETS 17
#define CACHE_SLACK ((size_t)8 << 20) /* docs/memory.md, "Giving back" */

/* Process-wide, as the allocators are: the devices the residency has
 * capped, for slim__residency_follow. */
static pthread_mutex_t budgets_mu = PTHREAD_MUTEX_INITIALIZER;
static char budget_devices[MAX_BUDGETS][32];
static int n_budgets;

size_t slim__residency_budget(const char *device, char *canon, size_t cap)
{
    slim_device *dev;
    slim_err err = {0};
    if (slim_device_get(device ? device : "cpu", &dev, &err) != SLIM_OK) {
        if (canon)
            snprintf(canon, cap, "%s", device ? device : "cpu");
        return 0;
    }
    if (canon)
        snprintf(canon, cap, "%s", dev->name);
    return slim_allocator_limit(dev->alloc);
}

void slim__residency_cap_cache(const char *device, size_t mapped)
{
    slim_device *dev;
    slim_err err = {0};
    if (slim_device_get(device, &dev, &err) != SLIM_OK)
        return;
    size_t budget = slim_allocator_limit(dev->alloc);
    if (!budget)
        return;
    pthread_mutex_lock(&budgets_mu);
    bool known = false;
    for (int i = 0; i < n_budgets && !known; i++)
        known = strcmp(budget_devices[i], dev->name) == 0;
    if (!known && n_budgets < MAX_BUDGETS)
        snprintf(budget_devices[n_budgets++], sizeof(budget_devices[0]), "%s", dev->name);
    /* under budgets_mu, so two callers cannot set it out of order; at
     * least one byte: 0 would mean no cap */
    slim_allocator_set_cache_cap(dev->alloc, budget > mapped ? budget - mapped : 1);
    /* Host memory only: there a segment is an mmap, cheap to give back and
     * take again; a GPU's cudaFree synchronizes the device, and the GPU's
     * cache keeps its 20 MiB segments as before. */
    if (dev == slim_device_cpu())
        slim_allocator_set_cache_slack(dev->alloc, CACHE_SLACK);
    pthread_mutex_unlock(&budgets_mu);
}

int slim__residency_budget_devices(char (*names)[32], int cap)
{
    int n = 0;
    pthread_mutex_lock(&budgets_mu);
    for (int i = 0; i < n_budgets && n < cap; i++)
        snprintf(names[n++], sizeof(names[0]), "%.31s", budget_devices[i]);
    pthread_mutex_unlock(&budgets_mu);
    return n;
}
