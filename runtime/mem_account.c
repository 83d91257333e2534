/*
 * mem_account.c - memory accounts (alloc.h): who holds how much of each
 * device, and the per-owner limits the allocator checks before it looks for
 * a block.
 *
 * An account's total and its per-device figures are separate atomics, each
 * charged by compare-and-swap against its own limit: the total first, then
 * the device's slot, undoing the total when the slot refuses. A block's
 * charge is credited to the same slot when it is freed (the allocator knows
 * its device), from whatever thread frees it.
 */
#include "mem_account.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local slim_mem_account *current_account;

slim_mem_account *slim_mem_account_new(const char *name, size_t limit)
{
    slim_mem_account *acct = calloc(1, sizeof(*acct));
    if (!acct)
        return NULL;
    snprintf(acct->name, sizeof(acct->name), "%s", name ? name : "");
    atomic_init(&acct->limit, limit);
    atomic_init(&acct->current, 0);
    atomic_init(&acct->peak, 0);
    atomic_init(&acct->ooms, 0);
    atomic_init(&acct->refs, 1);
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++) {
        atomic_init(&acct->dev[i].limit, 0);
        atomic_init(&acct->dev[i].current, 0);
        atomic_init(&acct->dev[i].peak, 0);
    }
    return acct;
}

void slim_mem_account_ref(slim_mem_account *acct)
{
    if (acct)
        atomic_fetch_add(&acct->refs, 1);
}

void slim_mem_account_unref(slim_mem_account *acct)
{
    if (acct && atomic_fetch_sub(&acct->refs, 1) == 1)
        free(acct);
}

slim_mem_account *slim_mem_account_enter(slim_mem_account *acct)
{
    slim_mem_account *prev = current_account;
    current_account = acct;
    return prev;
}

slim_mem_account *slim_mem_account_current(void)
{
    return current_account;
}

int slim_mem_device_slot(const char *device)
{
    if (!device)
        return -1;
    if (strcmp(device, "cpu") == 0)
        return 0;
    if (strncmp(device, "cuda:", 5) != 0 || device[5] < '0' || device[5] > '9')
        return -1;
    char *end;
    long n = strtol(device + 5, &end, 10);
    if (*end || n >= SLIM_MEM_DEVICE_SLOTS - 1)
        return -1;
    return 1 + (int)n;
}

const char *slim_mem_device_slot_name(int slot, char *buf, size_t cap)
{
    if (slot == 0)
        snprintf(buf, cap, "cpu");
    else
        snprintf(buf, cap, "cuda:%d", slot - 1);
    return buf;
}

slim_status slim_mem_account_set_device_limit(slim_mem_account *acct, const char *device,
                                              size_t bytes, slim_err *err)
{
    int slot = slim_mem_device_slot(device);
    if (slot < 0)
        return slim_errf(err, SLIM_EINVAL, "no memory limit can be set on device \"%s\": "
                         "expected \"cpu\" or \"cuda:N\" with N below %d", device,
                         SLIM_MEM_DEVICE_SLOTS - 1);
    size_t held = atomic_load(&acct->dev[slot].current);
    if (bytes && held > bytes) {
        char a[32], b[32];
        return slim_errf(err, SLIM_EOOM, "%s: the %s limit on %s is below the %s it already "
                         "holds there", acct->name, slim_format_bytes(bytes, a, sizeof(a)), device,
                         slim_format_bytes(held, b, sizeof(b)));
    }
    atomic_store(&acct->dev[slot].limit, bytes);
    return SLIM_OK;
}

/* Adds bytes to a counter unless that would pass limit (0: none); on
 * refusal *held is what it holds. A compare-and-swap, so two threads cannot
 * both squeeze under the same limit. */
static bool counter_charge(atomic_size_t *current, size_t limit, size_t bytes, size_t *held)
{
    size_t cur = atomic_load(current);
    do {
        if (limit && (bytes > limit || cur > limit - bytes)) {
            *held = cur;
            return false;
        }
    } while (!atomic_compare_exchange_weak(current, &cur, cur + bytes));
    *held = cur + bytes;
    return true;
}

static void counter_note_peak(atomic_size_t *peak_at, size_t held)
{
    size_t peak = atomic_load(peak_at);
    while (held > peak && !atomic_compare_exchange_weak(peak_at, &peak, held))
        ;
}

/* Reserves bytes in the account's total and in its slot for the device
 * (slot -1: the total only). On refusal fills err with whose limit it was
 * and what is held. held[0] / held[1]: the total / the slot after. */
bool slim_mem_account_charge(slim_mem_account *acct, int slot, const char *device, size_t bytes,
                           size_t size, size_t held[2], slim_err *err)
{
    char h[32], l[32], s[32];
    size_t limit = atomic_load(&acct->limit);
    if (!counter_charge(&acct->current, limit, bytes, &held[0])) {
        slim_errf(err, SLIM_EOOM, "out of memory: %s holds %s of its %s limit and asked for %s "
                  "(%zu bytes)", acct->name, slim_format_bytes(held[0], h, sizeof(h)),
                  slim_format_bytes(limit, l, sizeof(l)), slim_format_bytes(size, s, sizeof(s)),
                  size);
        return false;
    }
    if (slot < 0)
        return true;
    limit = atomic_load(&acct->dev[slot].limit);
    if (!counter_charge(&acct->dev[slot].current, limit, bytes, &held[1])) {
        atomic_fetch_sub(&acct->current, bytes);
        slim_errf(err, SLIM_EOOM, "out of memory on %s: %s holds %s of its %s limit there and "
                  "asked for %s (%zu bytes)", device, acct->name,
                  slim_format_bytes(held[1], h, sizeof(h)), slim_format_bytes(limit, l, sizeof(l)),
                  slim_format_bytes(size, s, sizeof(s)), size);
        return false;
    }
    return true;
}

/* Once the block is really there: a charge undone by a device OOM should
 * not leave a peak behind. */
void slim_mem_account_note_peak(slim_mem_account *acct, int slot, const size_t held[2])
{
    counter_note_peak(&acct->peak, held[0]);
    if (slot >= 0)
        counter_note_peak(&acct->dev[slot].peak, held[1]);
}

void slim_mem_account_credit(slim_mem_account *acct, int slot, size_t bytes)
{
    atomic_fetch_sub(&acct->current, bytes);
    if (slot >= 0)
        atomic_fetch_sub(&acct->dev[slot].current, bytes);
}

