/*
 * alloc.c - the caching allocator (alloc.h) and its statistics; the accounts
 * it charges are in mem_account.c.
 *
 * Layout. A segment is one piece of device memory; its blocks tile it and
 * form a doubly linked list by address, so a freed block can merge with
 * free neighbours in O(1). The header at the segment's base address is
 * never merged away (merging keeps the lower header), so seg->first stays
 * the same for the segment's whole life.
 *
 * Free blocks. Each pool keeps size-binned free lists, TLSF style: sizes are
 * counted in 512-byte units u; u < 16 gets a bin of its own, above that each
 * power of two is cut into 8 linear sub-bins (so a bin's sizes differ by at
 * most 12.5%), and a bitmap marks the non-empty bins. A lookup scans only
 * the request's own bin for the best fit (blocks there may be too small),
 * then takes the best fit of the next non-empty bin, whose blocks all fit.
 * Every block in a higher bin is larger than any in a lower one, so this is
 * exact best fit at the cost of scanning one or two short lists.
 *
 * Statistics follow torch.cuda.memory_stats. "Inactive split" is the free
 * blocks of segments cut into more than one block: each operation on a
 * segment takes the segment's share before and after and records the
 * difference, which keeps the figure exact without case analysis.
 *
 * Under AddressSanitizer, host ("cpu") memory of free blocks is poisoned,
 * so a use after slim_buffer_unref is still caught although the memory
 * stays cached.
 */
#include "alloc.h"
#include "mem_account.h"

#include <assert.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__SANITIZE_ADDRESS__)
#define SLIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLIM_ASAN 1
#endif
#endif
#ifdef SLIM_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(a, p, n) do { if ((a)->host_memory) ASAN_POISON_MEMORY_REGION(p, n); } while (0)
#define UNPOISON(a, p, n) do { if ((a)->host_memory) ASAN_UNPOISON_MEMORY_REGION(p, n); } while (0)
#else
#define POISON(a, p, n) ((void)(a), (void)(p), (void)(n))
#define UNPOISON(a, p, n) ((void)(a), (void)(p), (void)(n))
#endif

/* Host buffers have always been readable up to a multiple of 64 bytes
 * (slim_tensor_alloc's promise); ASan leaves that much addressable. */
#define HOST_ALIGN ((size_t)64)

/* Anything larger cannot be rounded to a segment without overflowing, and
 * no device has it anyway. */
#define MAX_REQUEST (SIZE_MAX / 4)

#define BIN_SUB_LOG2 3
#define BIN_SUB (1 << BIN_SUB_LOG2)
#define BIN_WORDS 7
#define BIN_COUNT (BIN_WORDS * 64)   /* sizes below 2^64 need 424 */

typedef struct slim_segment slim_segment;

struct slim_block {
    char *ptr;
    size_t size;                /* rounded; what the block spans */
    size_t requested;           /* what the caller asked for */
    size_t charged;             /* what its account was charged */
    slim_segment *seg;
    slim_block *prev, *next;    /* neighbours in the segment, by address */
    slim_block *bin_prev, *bin_next; /* free: its bin; spare header: free list */
    slim_mem_account *acct;
    int bin;
    bool in_use;
};

struct slim_segment {
    char *base;
    size_t size;
    slim_pool_kind pool;
    int n_blocks, n_free;
    size_t free_bytes;
    slim_block *first;
    slim_segment *prev, *next;  /* the allocator's list of all segments */
};

typedef struct slim_pool {
    slim_block *bins[BIN_COUNT];
    uint64_t nonempty[BIN_WORDS];
} slim_pool;

struct slim_allocator {
    pthread_mutex_t lock;
    slim_alloc_backend backend;
    char device[32];
    int slot;                   /* the device's slot in accounts; -1: none */
    bool host_memory;           /* the backend hands out host addresses */
    atomic_size_t limit;
    atomic_size_t cache_cap;    /* 0: none; see slim_allocator_set_cache_cap */
    atomic_size_t cache_slack;  /* 0: none; see slim_allocator_set_cache_slack */
    slim_pool pools[SLIM_POOL_COUNT]; /* SMALL and LARGE used */
    slim_segment *segments;
    slim_block *spare;          /* recycled block headers */
    slim_mem_stats stats;
};

/* ---- statistics ----------------------------------------------------------- */

static void stat_update(slim_mem_stat *s, int64_t delta)
{
    s->current += delta;
    if (delta > 0)
        s->allocated += delta;
    else
        s->freed -= delta;
    if (s->current > s->peak)
        s->peak = s->current;
}

/* A figure changes in its pool and in the "all" row together. */
static void pool_update(slim_mem_stat *per_pool, slim_pool_kind pool, int64_t delta)
{
    if (!delta)
        return;
    stat_update(&per_pool[SLIM_POOL_ALL], delta);
    stat_update(&per_pool[pool], delta);
}

typedef struct { int64_t blocks, bytes; } split_share;

static split_share segment_split_share(const slim_segment *seg)
{
    if (seg->n_blocks < 2)
        return (split_share){0, 0};
    return (split_share){seg->n_free, (int64_t)seg->free_bytes};
}

static void record_split_change(slim_allocator *a, const slim_segment *seg, split_share before)
{
    split_share after = segment_split_share(seg);
    pool_update(a->stats.inactive_split, seg->pool, after.blocks - before.blocks);
    pool_update(a->stats.inactive_split_bytes, seg->pool, after.bytes - before.bytes);
}

/* ---- size policy (PyTorch's) ------------------------------------------------ */

static size_t round_size(size_t size)
{
    if (size < SLIM_ALLOC_MIN_BLOCK)
        return SLIM_ALLOC_MIN_BLOCK;
    return (size + SLIM_ALLOC_MIN_BLOCK - 1) / SLIM_ALLOC_MIN_BLOCK * SLIM_ALLOC_MIN_BLOCK;
}

static slim_pool_kind pool_of(size_t rounded)
{
    return rounded <= SLIM_ALLOC_SMALL_SIZE ? SLIM_POOL_SMALL : SLIM_POOL_LARGE;
}

/* With a cache slack set, a large request gets a segment of its own size
 * (rounded to 2 MiB) rather than a share of 20 MiB: a block freed then
 * leaves a segment with nothing in use, which can go back, instead of a
 * hole in a segment another live block keeps (measured under a budget: 56
 * MiB reserved for 22.5 MiB allocated, mostly such holes). */
static size_t segment_size_for(const slim_allocator *a, size_t rounded)
{
    if (rounded <= SLIM_ALLOC_SMALL_SIZE)
        return SLIM_ALLOC_SMALL_SEG;
    if (rounded < SLIM_ALLOC_MIN_LARGE && !atomic_load(&a->cache_slack))
        return SLIM_ALLOC_LARGE_SEG;
    return (rounded + SLIM_ALLOC_ROUND_LARGE - 1) / SLIM_ALLOC_ROUND_LARGE * SLIM_ALLOC_ROUND_LARGE;
}

/* Large-pool remainders of 1 MiB or less stay with the block: cutting them
 * off would leave slivers no large request can use. */
static bool should_split(slim_pool_kind pool, size_t remaining)
{
    if (pool == SLIM_POOL_SMALL)
        return remaining >= SLIM_ALLOC_MIN_BLOCK;
    return remaining > SLIM_ALLOC_SMALL_SIZE;
}

/* ---- bins ----------------------------------------------------------------- */

static int size_bin(size_t size)
{
    uint64_t u = size / SLIM_ALLOC_MIN_BLOCK;
    if (u < 2 * BIN_SUB)
        return (int)u;
    int log2 = 63 - __builtin_clzll(u);
    int sub = (int)((u >> (log2 - BIN_SUB_LOG2)) & (BIN_SUB - 1));
    return (log2 - BIN_SUB_LOG2 + 1) * BIN_SUB + sub;
}

static void bin_insert(slim_pool *p, slim_block *b)
{
    int i = size_bin(b->size);
    b->bin = i;
    b->bin_prev = NULL;
    b->bin_next = p->bins[i];
    if (b->bin_next)
        b->bin_next->bin_prev = b;
    p->bins[i] = b;
    p->nonempty[i / 64] |= (uint64_t)1 << (i % 64);
}

static void bin_remove(slim_pool *p, slim_block *b)
{
    int i = b->bin;
    if (b->bin_prev)
        b->bin_prev->bin_next = b->bin_next;
    else
        p->bins[i] = b->bin_next;
    if (b->bin_next)
        b->bin_next->bin_prev = b->bin_prev;
    if (!p->bins[i])
        p->nonempty[i / 64] &= ~((uint64_t)1 << (i % 64));
    b->bin_prev = b->bin_next = NULL;
}

/* The first non-empty bin at or after i, or -1. */
static int next_nonempty_bin(const slim_pool *p, int i)
{
    if (i >= BIN_COUNT)
        return -1;
    int w = i / 64;
    uint64_t bits = p->nonempty[w] & (~(uint64_t)0 << (i % 64));
    while (!bits) {
        if (++w == BIN_WORDS)
            return -1;
        bits = p->nonempty[w];
    }
    return w * 64 + __builtin_ctzll(bits);
}

static slim_block *best_fit_in_bin(const slim_pool *p, int i, size_t size)
{
    slim_block *best = NULL;
    for (slim_block *b = p->bins[i]; b; b = b->bin_next) {
        if (b->size >= size && (!best || b->size < best->size)) {
            best = b;
            if (b->size == size)
                break;
        }
    }
    return best;
}

static slim_block *find_free_block(const slim_pool *p, size_t size)
{
    int i = size_bin(size);
    slim_block *b = best_fit_in_bin(p, i, size);
    if (b)
        return b;
    i = next_nonempty_bin(p, i + 1);
    return i < 0 ? NULL : best_fit_in_bin(p, i, size);
}

/* ---- block headers ----------------------------------------------------------- */

static slim_block *header_get(slim_allocator *a)
{
    slim_block *b = a->spare;
    if (b)
        a->spare = b->bin_next;
    else if (!(b = malloc(sizeof(*b))))
        return NULL;
    memset(b, 0, sizeof(*b));
    return b;
}

static void header_put(slim_allocator *a, slim_block *b)
{
    b->bin_next = a->spare;
    a->spare = b;
}

/* ---- segments --------------------------------------------------------------- */

typedef enum { SEG_OK, SEG_OVER_LIMIT, SEG_REFUSED, SEG_NO_HOST_MEMORY } seg_result;

static bool fits_limit(slim_allocator *a, size_t size)
{
    size_t limit = atomic_load(&a->limit);
    size_t reserved = (size_t)a->stats.reserved_bytes[SLIM_POOL_ALL].current;
    return !limit || (size <= limit && reserved <= limit - size);
}

/* A new segment of exactly size bytes, as one free block in its pool. */
static seg_result segment_new(slim_allocator *a, slim_pool_kind pool, size_t size)
{
    if (!fits_limit(a, size))
        return SEG_OVER_LIMIT;
    /* Headers first: a host malloc failure should not cost a device call. */
    slim_segment *seg = malloc(sizeof(*seg));
    slim_block *b = header_get(a);
    if (!seg || !b)
        goto no_host_memory;
    char *base = a->backend.segment_alloc(a->backend.ctx, size);
    if (!base) {
        free(seg);
        header_put(a, b);
        return SEG_REFUSED;
    }
    POISON(a, base, size);
    *seg = (slim_segment){.base = base, .size = size, .pool = pool, .n_blocks = 1,
                          .n_free = 1, .free_bytes = size, .first = b, .next = a->segments};
    if (a->segments)
        a->segments->prev = seg;
    a->segments = seg;
    b->ptr = base;
    b->size = size;
    b->seg = seg;
    bin_insert(&a->pools[pool], b);
    pool_update(a->stats.reserved_bytes, pool, (int64_t)size);
    pool_update(a->stats.segment, pool, 1);
    return SEG_OK;

no_host_memory:
    free(seg);
    if (b)
        header_put(a, b);
    return SEG_NO_HOST_MEMORY;
}

static void segment_release(slim_allocator *a, slim_segment *seg)
{
    assert(seg->n_blocks == 1 && seg->n_free == 1);
    bin_remove(&a->pools[seg->pool], seg->first);
    header_put(a, seg->first);
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        a->segments = seg->next;
    if (seg->next)
        seg->next->prev = seg->prev;
    UNPOISON(a, seg->base, seg->size);
    a->backend.segment_free(a->backend.ctx, seg->base, seg->size);
    pool_update(a->stats.reserved_bytes, seg->pool, -(int64_t)seg->size);
    pool_update(a->stats.segment, seg->pool, -1);
    a->stats.num_device_frees++;
    free(seg);
}

static size_t release_free_segments(slim_allocator *a)
{
    size_t freed = 0;
    slim_segment *next;
    for (slim_segment *seg = a->segments; seg; seg = next) {
        next = seg->next;
        if (seg->n_blocks == 1 && seg->n_free == 1) {
            freed += seg->size;
            segment_release(a, seg);
        }
    }
    return freed;
}

/* Whether the cache (reserved less allocated) is over what the cap and
 * the slack allow (the lock held). */
static bool cache_over(slim_allocator *a)
{
    size_t reserved = (size_t)a->stats.reserved_bytes[SLIM_POOL_ALL].current;
    size_t allocated = (size_t)a->stats.allocated_bytes[SLIM_POOL_ALL].current;
    size_t cap = atomic_load(&a->cache_cap), slack = atomic_load(&a->cache_slack);
    if (slack && allocated / 10 > slack)
        slack = allocated / 10;
    return (cap && reserved > cap) || (slack && reserved - allocated > slack);
}

/* Fully free segments given back until the cache is within the cap and
 * the slack; returns the bytes. */
static size_t release_over(slim_allocator *a)
{
    size_t freed = 0;
    slim_segment *next;
    for (slim_segment *seg = a->segments; seg && cache_over(a); seg = next) {
        next = seg->next;
        if (seg->n_blocks == 1 && seg->n_free == 1) {
            freed += seg->size;
            segment_release(a, seg);
        }
    }
    return freed;
}

/* ---- blocks ------------------------------------------------------------------- */

/* Hands out free block b for a request of rounded bytes, cutting off the
 * rest when the pool's rule allows. Without a header for the rest, the
 * whole block goes out: wasteful but correct. */
static void block_take(slim_allocator *a, slim_block *b, size_t rounded)
{
    slim_segment *seg = b->seg;
    slim_pool *pool = &a->pools[seg->pool];
    split_share before = segment_split_share(seg);
    bin_remove(pool, b);
    seg->n_free--;
    seg->free_bytes -= b->size;
    slim_block *rest;
    if (should_split(seg->pool, b->size - rounded) && (rest = header_get(a))) {
        rest->ptr = b->ptr + rounded;
        rest->size = b->size - rounded;
        rest->seg = seg;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = rounded;
        seg->n_blocks++;
        seg->n_free++;
        seg->free_bytes += rest->size;
        bin_insert(pool, rest);
    }
    b->in_use = true;
    record_split_change(a, seg, before);
}

/* b swallows the block after it; neither is in a bin. */
static void block_merge_next(slim_allocator *a, slim_block *b)
{
    slim_block *next = b->next;
    b->size += next->size;
    b->next = next->next;
    if (next->next)
        next->next->prev = b;
    b->seg->n_blocks--;
    b->seg->n_free--;
    header_put(a, next);
}

static void block_give_back(slim_allocator *a, slim_block *b)
{
    slim_segment *seg = b->seg;
    slim_pool *pool = &a->pools[seg->pool];
    split_share before = segment_split_share(seg);
    b->in_use = false;
    seg->n_free++;
    seg->free_bytes += b->size;
    if (b->next && !b->next->in_use) {
        bin_remove(pool, b->next);
        block_merge_next(a, b);
    }
    if (b->prev && !b->prev->in_use) {
        b = b->prev;
        bin_remove(pool, b);
        block_merge_next(a, b);
    }
    bin_insert(pool, b);
    record_split_change(a, seg, before);
}

/* ---- the allocator ------------------------------------------------------------- */

slim_allocator *slim_allocator_new(const slim_alloc_backend *backend)
{
    slim_allocator *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        return NULL;
    }
    a->backend = *backend;
    snprintf(a->device, sizeof(a->device), "%s", backend->device ? backend->device : "device");
    a->backend.device = a->device;
    /* Only host memory may be poisoned: ASan's shadow knows nothing of a
     * GPU's address space. "cpu" is the host device by definition. */
    a->host_memory = strcmp(a->device, "cpu") == 0;
    a->slot = slim_mem_device_slot(a->device);
    atomic_init(&a->limit, 0);
    atomic_init(&a->cache_cap, 0);
    atomic_init(&a->cache_slack, 0);
    return a;
}

void slim_allocator_free_all(slim_allocator *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    slim_segment *seg = a->segments;
    while (seg) {
        slim_block *b = seg->first;
        while (b) {
            slim_block *next = b->next;
            /* Blocks still out die here: their owners must not stay charged. */
            if (b->in_use && b->acct) {
                slim_mem_account_credit(b->acct, a->slot, b->charged);
                slim_mem_account_unref(b->acct);
            }
            free(b);
            b = next;
        }
        slim_segment *next_seg = seg->next;
        UNPOISON(a, seg->base, seg->size);
        a->backend.segment_free(a->backend.ctx, seg->base, seg->size);
        free(seg);
        seg = next_seg;
    }
    while (a->spare) {
        slim_block *b = a->spare;
        a->spare = b->bin_next;
        free(b);
    }
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* A new segment for a request the cache could not serve. Under pressure
 * (the limit, or the device saying no) the fully free cached segments go
 * back first and the segment is tried once more, cut down to the request
 * itself if the full size still does not fit. */
static slim_block *grow(slim_allocator *a, slim_pool_kind pool, size_t rounded, seg_result *why)
{
    size_t full = segment_size_for(a, rounded);
    *why = segment_new(a, pool, full);
    if (*why == SEG_OVER_LIMIT || *why == SEG_REFUSED) {
        a->stats.num_alloc_retries++;
        release_free_segments(a);
        *why = segment_new(a, pool, full);
        if ((*why == SEG_OVER_LIMIT || *why == SEG_REFUSED) && full > rounded)
            *why = segment_new(a, pool, rounded);
    }
    return *why == SEG_OK ? a->segments->first : NULL;
}

/* Fills err for an allocation that found no memory; the lock is held so
 * the figures are those that made it fail. */
static slim_status explain_failure(slim_allocator *a, seg_result why, size_t size, slim_err *err)
{
    if (why == SEG_NO_HOST_MEMORY)
        return slim_errf(err, SLIM_ENOMEM, "host out of memory for the bookkeeping of %s's "
                         "allocator (asked for %zu bytes)", a->device, size);
    char asked[32], held[32], reserved[32], limit[32], segment[32];
    size_t lim = atomic_load(&a->limit);
    slim_format_bytes(size, asked, sizeof(asked));
    slim_format_bytes((size_t)a->stats.allocated_bytes[SLIM_POOL_ALL].current, held, sizeof(held));
    slim_format_bytes((size_t)a->stats.reserved_bytes[SLIM_POOL_ALL].current, reserved,
                      sizeof(reserved));
    slim_format_bytes(lim, limit, sizeof(limit));
    if (why == SEG_OVER_LIMIT)
        return slim_errf(err, SLIM_EOOM, "out of memory on %s: tried to allocate %s (%zu bytes); "
                         "%s allocated, %s reserved, limit %s", a->device, asked, size, held,
                         reserved, limit);
    slim_format_bytes(segment_size_for(a, round_size(size)), segment, sizeof(segment));
    return slim_errf(err, SLIM_EOOM, "out of memory on %s: tried to allocate %s (%zu bytes); "
                     "%s allocated, %s reserved, the device refused a %s segment%s%s%s",
                     a->device, asked, size, held, reserved, segment,
                     lim ? " (limit " : "", lim ? limit : "", lim ? ")" : "");
}

static void *fail(slim_allocator *a, slim_mem_account *acct)
{
    a->stats.num_ooms++;
    pthread_mutex_unlock(&a->lock);
    if (acct)
        atomic_fetch_add(&acct->ooms, 1);
    return NULL;
}

void *slim_allocator_alloc(slim_allocator *a, size_t size, slim_block **block, slim_err *err)
{
    *block = NULL;
    if (!a) {
        slim_errf(err, SLIM_ENOMEM, "no allocator: the device could not be set up");
        return NULL;
    }
    slim_mem_account *acct = slim_mem_account_current();
    if (size > MAX_REQUEST) {
        pthread_mutex_lock(&a->lock);
        slim_errf(err, SLIM_EOOM, "out of memory on %s: tried to allocate %zu bytes, more than "
                  "any device holds", a->device, size);
        return fail(a, acct);
    }
    size_t rounded = round_size(size);
    size_t held[2] = {0, 0};
    if (acct && !slim_mem_account_charge(acct, a->slot, a->device, rounded, size, held, err)) {
        pthread_mutex_lock(&a->lock);
        return fail(a, acct);
    }

    pthread_mutex_lock(&a->lock);
    slim_pool_kind pool = pool_of(rounded);
    seg_result why = SEG_OK;
    slim_block *b = find_free_block(&a->pools[pool], rounded);
    if (b)
        a->stats.num_cache_hits++;
    else if (!(b = grow(a, pool, rounded, &why))) {
        explain_failure(a, why, size, err);
        if (acct)
            slim_mem_account_credit(acct, a->slot, rounded);
        return fail(a, acct);
    }
    block_take(a, b, rounded);
    b->requested = size;
    b->charged = acct ? rounded : 0;
    b->acct = acct;
    slim_mem_account_ref(acct);
    pool_update(a->stats.allocation, pool, 1);
    pool_update(a->stats.active, pool, 1);
    pool_update(a->stats.allocated_bytes, pool, (int64_t)b->size);
    pool_update(a->stats.active_bytes, pool, (int64_t)b->size);
    pool_update(a->stats.requested_bytes, pool, (int64_t)size);
    size_t usable = (size + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    UNPOISON(a, b->ptr, usable < b->size ? usable : b->size);
    pthread_mutex_unlock(&a->lock);
    if (acct)
        slim_mem_account_note_peak(acct, a->slot, held);
    *block = b;
    return b->ptr;
}

void slim_allocator_free(slim_allocator *a, slim_block *b)
{
    if (!a || !b)
        return;
    pthread_mutex_lock(&a->lock);
    if (!b->in_use) {
        /* Freed twice. The header may already describe another block, so
         * this is only a best effort against corrupting the lists. */
        assert(!"slim_allocator_free: block already free");
        pthread_mutex_unlock(&a->lock);
        return;
    }
    slim_mem_account *acct = b->acct;
    size_t charged = b->charged;
    slim_pool_kind pool = b->seg->pool;
    pool_update(a->stats.allocation, pool, -1);
    pool_update(a->stats.active, pool, -1);
    pool_update(a->stats.allocated_bytes, pool, -(int64_t)b->size);
    pool_update(a->stats.active_bytes, pool, -(int64_t)b->size);
    pool_update(a->stats.requested_bytes, pool, -(int64_t)b->requested);
    POISON(a, b->ptr, b->size);
    b->acct = NULL;
    slim_segment *seg = b->seg;
    block_give_back(a, b);      /* b may be merged away here */
    /* Over the cache cap or slack a segment left with nothing in use goes
     * back now rather than waiting in the cache. */
    if (seg->n_blocks == 1 && seg->n_free == 1 && cache_over(a))
        segment_release(a, seg);
    pthread_mutex_unlock(&a->lock);
    if (acct) {
        slim_mem_account_credit(acct, a->slot, charged);
        slim_mem_account_unref(acct);
    }
}

void *slim_block_ptr(const slim_block *block)
{
    return block ? block->ptr : NULL;
}

size_t slim_block_size(const slim_block *block)
{
    return block ? block->size : 0;
}

void slim_allocator_set_limit(slim_allocator *a, size_t bytes)
{
    if (a)
        atomic_store(&a->limit, bytes);
}

size_t slim_allocator_set_cache_cap(slim_allocator *a, size_t bytes)
{
    if (!a)
        return 0;
    pthread_mutex_lock(&a->lock);
    atomic_store(&a->cache_cap, bytes);
    /* Only as many as it takes: the rest of the cache still saves the next
     * run its segments. */
    size_t freed = release_over(a);
    pthread_mutex_unlock(&a->lock);
    return freed;
}

size_t slim_allocator_set_cache_slack(slim_allocator *a, size_t bytes)
{
    if (!a)
        return 0;
    pthread_mutex_lock(&a->lock);
    atomic_store(&a->cache_slack, bytes);
    size_t freed = release_over(a);
    pthread_mutex_unlock(&a->lock);
    return freed;
}

size_t slim_allocator_limit(const slim_allocator *a)
{
    return a ? atomic_load(&a->limit) : 0;
}

size_t slim_allocator_empty_cache(slim_allocator *a)
{
    if (!a)
        return 0;
    pthread_mutex_lock(&a->lock);
    size_t freed = release_free_segments(a);
    pthread_mutex_unlock(&a->lock);
    return freed;
}

void slim_allocator_stats(slim_allocator *a, slim_mem_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
    out->limit_bytes = atomic_load(&a->limit);
}

static void reset_peak(slim_mem_stat *per_pool)
{
    for (int p = 0; p < SLIM_POOL_COUNT; p++)
        per_pool[p].peak = per_pool[p].current;
}

void slim_allocator_reset_peaks(slim_allocator *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    slim_mem_stats *s = &a->stats;
    reset_peak(s->allocated_bytes);
    reset_peak(s->reserved_bytes);
    reset_peak(s->active_bytes);
    reset_peak(s->inactive_split_bytes);
    reset_peak(s->requested_bytes);
    reset_peak(s->allocation);
    reset_peak(s->segment);
    reset_peak(s->active);
    reset_peak(s->inactive_split);
    pthread_mutex_unlock(&a->lock);
}

const char *slim_allocator_device(const slim_allocator *a)
{
    return a ? a->device : "none";
}
