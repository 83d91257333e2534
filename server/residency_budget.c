/*
 * residency_budget.c - a device's budget, kept apart from its allocator's
 * limit.
 *
 * --memory-limit sets the allocator's limit, and the residency counts
 * footprints against it. But a .slim model's weights are mapped from its
 * file, outside the allocator: with the limit at the whole budget the
 * allocator could fill it with live blocks and its cache of freed run
 * memory while the mapped weights sit on top (measured: RSS up to 13 MiB
 * over budget plus the fixed overhead). So the budget is remembered here,
 * and the limit becomes the budget less the mapped bytes the residency
 * counts (residency.c says which).
 */
#include "alloc.h"
#include "device.h"
#include "residency.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_BUDGETS 17

typedef struct budget_rec {
    slim_allocator *alloc;
    char device[32];
    size_t budget;   /* as set from outside */
    size_t set;      /* the limit last set here */
} budget_rec;

/* Process-wide, as the allocators are. */
static pthread_mutex_t budgets_mu = PTHREAD_MUTEX_INITIALIZER;
static budget_rec budgets[MAX_BUDGETS];
static int n_budgets;

/* Under budgets_mu. NULL when the table is full (then the limit is left
 * alone and is the budget, as before). */
static budget_rec *rec_of(slim_allocator *a, const char *device)
{
    size_t limit = slim_allocator_limit(a);
    for (int i = 0; i < n_budgets; i++)
        if (budgets[i].alloc == a) {
            /* set from outside since (a test, another tool): the new budget */
            if (limit != budgets[i].set)
                budgets[i].budget = budgets[i].set = limit;
            return &budgets[i];
        }
    if (n_budgets == MAX_BUDGETS)
        return NULL;
    budgets[n_budgets] = (budget_rec){.alloc = a, .budget = limit, .set = limit};
    snprintf(budgets[n_budgets].device, sizeof(budgets[n_budgets].device), "%s", device);
    return &budgets[n_budgets++];
}

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
    pthread_mutex_lock(&budgets_mu);
    budget_rec *r = rec_of(dev->alloc, dev->name);
    size_t budget = r ? r->budget : slim_allocator_limit(dev->alloc);
    pthread_mutex_unlock(&budgets_mu);
    return budget;
}

void slim__residency_limit_less(const char *device, size_t mapped)
{
    slim_device *dev;
    slim_err err = {0};
    if (slim_device_get(device, &dev, &err) != SLIM_OK)
        return;
    pthread_mutex_lock(&budgets_mu);
    budget_rec *r = rec_of(dev->alloc, dev->name);
    if (r && r->budget) {
        r->set = r->budget > mapped ? r->budget - mapped : 1;
        /* under budgets_mu, so two callers cannot set it out of order */
        slim_allocator_set_limit_trim(dev->alloc, r->set);
    }
    pthread_mutex_unlock(&budgets_mu);
}

int slim__residency_budget_devices(char (*names)[32], int cap)
{
    int n = 0;
    pthread_mutex_lock(&budgets_mu);
    for (int i = 0; i < n_budgets && n < cap; i++)
        if (budgets[i].budget)
            snprintf(names[n++], sizeof(names[0]), "%s", budgets[i].device);
    pthread_mutex_unlock(&budgets_mu);
    return n;
}
