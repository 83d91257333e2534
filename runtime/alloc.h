/*
 * alloc.h - the caching allocator: one per device, shared by every model,
 * instance and request.
 *
 *     slim_allocator *a = slim_device_cpu()->alloc;       (the device owns it)
 *     slim_block *blk;
 *     void *p = slim_allocator_alloc(a, nbytes, &blk, &err); (NULL: err says why)
 *     ...
 *     slim_allocator_free(a, blk);                          (back to the cache)
 *
 * Backing memory comes from the device in segments (a backend's
 * segment_alloc: aligned_alloc on the host, cudaMalloc on a GPU). A segment
 * is cut into blocks; freed blocks go back to one of two size-binned pools
 * and merge with free neighbours of the same segment. Segments go back to
 * the device only on slim_allocator_empty_cache, or under pressure: when a
 * new segment would pass the limit or the device refuses, the allocator
 * frees its fully free cached segments and tries once more before it
 * reports SLIM_EOOM. The policy follows PyTorch's CUDA caching allocator:
 *
 *   - request sizes are rounded up to a multiple of 512 bytes;
 *   - requests of at most 1 MiB come from the small pool, whose segments
 *     are 2 MiB; larger ones from the large pool, whose segments are
 *     20 MiB for requests under 10 MiB and the request rounded up to a
 *     multiple of 2 MiB otherwise (a segment is cut to the rounded request
 *     when a full one would pass the limit but the request alone fits);
 *   - a cached block is split when the remainder is at least 512 bytes
 *     (small pool) or more than 1 MiB (large pool).
 *
 * Accounts: a slim_mem_account attributes blocks to an owner (a model) and
 * caps what it may hold. The account charged is the calling thread's
 * current one (slim_mem_account_enter); a block remembers it, so a free
 * from another thread credits the right owner. Accounts are what give
 * per-model limits and per-model figures; the device limit caps reserved
 * (segment) bytes across all of them. An account also keeps its figures per
 * device, with an optional limit on each, so a model placed on a GPU can be
 * held to so much of that GPU whatever it holds on the host.
 *
 * Everything here is thread-safe (one mutex per allocator; a cache hit is
 * a bin lookup under that mutex).
 */
#ifndef SLIM_ALLOC_H
#define SLIM_ALLOC_H

#include "slim.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLIM_ALLOC_MIN_BLOCK   ((size_t)512)
#define SLIM_ALLOC_SMALL_SIZE  ((size_t)1 << 20)   /* largest small-pool request */
#define SLIM_ALLOC_SMALL_SEG   ((size_t)2 << 20)
#define SLIM_ALLOC_LARGE_SEG   ((size_t)20 << 20)
#define SLIM_ALLOC_MIN_LARGE   ((size_t)10 << 20)  /* from here segments fit the request */
#define SLIM_ALLOC_ROUND_LARGE ((size_t)2 << 20)

/* Where segments come from. segment_alloc returns NULL when the device
 * refuses; both run with the allocator's mutex held. */
typedef struct slim_alloc_backend {
    const char *device;                 /* "cpu", "cuda:0": used in messages and labels */
    void *(*segment_alloc)(void *ctx, size_t size);
    void (*segment_free)(void *ctx, void *ptr, size_t size);
    void *ctx;
} slim_alloc_backend;

typedef struct slim_allocator slim_allocator;
typedef struct slim_block slim_block;       /* opaque; one handed-out block */

/* ---- statistics, as torch.cuda.memory_stats ---------------------------- */

typedef enum {
    SLIM_POOL_ALL,
    SLIM_POOL_SMALL,
    SLIM_POOL_LARGE,
    SLIM_POOL_COUNT
} slim_pool_kind;

/* One figure: its value now, its highest since the last peak reset, and
 * the running totals of what was added and taken away. */
typedef struct slim_mem_stat {
    int64_t current, peak, allocated, freed;
} slim_mem_stat;

typedef struct slim_mem_stats {
    /* bytes, per pool */
    slim_mem_stat allocated_bytes[SLIM_POOL_COUNT];      /* blocks handed out (rounded) */
    slim_mem_stat reserved_bytes[SLIM_POOL_COUNT];       /* segments held from the device */
    slim_mem_stat active_bytes[SLIM_POOL_COUNT];         /* blocks in use or not yet reusable */
    slim_mem_stat inactive_split_bytes[SLIM_POOL_COUNT]; /* free blocks inside split segments */
    slim_mem_stat requested_bytes[SLIM_POOL_COUNT];      /* what callers asked for, unrounded */
    /* counts, per pool */
    slim_mem_stat allocation[SLIM_POOL_COUNT];           /* blocks handed out */
    slim_mem_stat segment[SLIM_POOL_COUNT];              /* .allocated/.freed: segment allocs/frees */
    slim_mem_stat active[SLIM_POOL_COUNT];
    slim_mem_stat inactive_split[SLIM_POOL_COUNT];
    /* events */
    uint64_t num_cache_hits;    /* allocations served from cached blocks */
    uint64_t num_alloc_retries; /* cache flushed and the segment allocation retried */
    uint64_t num_ooms;          /* allocations that failed (limit or device) */
    uint64_t num_device_frees;  /* segments given back (empty_cache or pressure) */
    size_t limit_bytes;         /* 0: no limit */
} slim_mem_stats;

/* ---- accounts ----------------------------------------------------------- */

/* An account's figures on one device. Slot 0 is "cpu", slot 1 + N is
 * "cuda:N"; an allocator whose device has no slot charges only the total. */
#define SLIM_MEM_DEVICE_SLOTS 17

typedef struct slim_mem_account_device {
    atomic_size_t limit;        /* 0: no limit on this device */
    atomic_size_t current;
    atomic_size_t peak;
} slim_mem_account_device;

/* Refcounted: the owner holds one reference and every block charged to the
 * account holds another, so an output freed after its model is gone still
 * credits a live account. */
typedef struct slim_mem_account {
    char name[128];             /* in OOM messages, e.g. model "resnet" */
    atomic_size_t limit;        /* 0: no limit; caps the sum over devices */
    atomic_size_t current;      /* bytes of blocks it holds (rounded) */
    atomic_size_t peak;
    atomic_uint_least64_t ooms; /* allocations that failed while it was charged */
    atomic_int refs;
    slim_mem_account_device dev[SLIM_MEM_DEVICE_SLOTS];
} slim_mem_account;

/* The slot of a device name ("cpu" 0, "cuda:N" 1 + N), or -1 when it has
 * none. */
int slim_mem_device_slot(const char *device);
/* The device name of a slot into buf ("cpu", "cuda:3"). */
const char *slim_mem_device_slot_name(int slot, char *buf, size_t cap);
/* Sets acct's limit on device (0: none). Fails, naming both, when the
 * device has no slot or the account already holds more there. */
slim_status slim_mem_account_set_device_limit(slim_mem_account *acct, const char *device,
                                              size_t bytes, slim_err *err);

/* NULL when out of memory. */
slim_mem_account *slim_mem_account_new(const char *name, size_t limit);
void slim_mem_account_ref(slim_mem_account *acct);
void slim_mem_account_unref(slim_mem_account *acct);
/* Makes acct the calling thread's current account (NULL: none) and returns
 * the previous one, to be restored with another enter. */
slim_mem_account *slim_mem_account_enter(slim_mem_account *acct);
slim_mem_account *slim_mem_account_current(void);

/* ---- the allocator ------------------------------------------------------- */

/* The backend struct is copied. NULL when out of memory. */
slim_allocator *slim_allocator_new(const slim_alloc_backend *backend);
/* Gives every segment back; blocks still handed out become invalid. */
void slim_allocator_free_all(slim_allocator *a);

/* size 0 is served as the minimum block. On failure returns NULL with
 * err->status SLIM_EOOM and a message naming the device, the bytes asked
 * for, allocated, reserved and allowed (and the account's figures when its
 * limit was the cause). */
void *slim_allocator_alloc(slim_allocator *a, size_t size, slim_block **block, slim_err *err);
void slim_allocator_free(slim_allocator *a, slim_block *block);
void *slim_block_ptr(const slim_block *block);
size_t slim_block_size(const slim_block *block);   /* rounded size */

/* 0 removes the limit. Lowering it below what is reserved does not free
 * blocks in use; later segment allocations fail until it fits again. */
void slim_allocator_set_limit(slim_allocator *a, size_t bytes);
/* A cap on what the allocator keeps reserved when it could give back:
 * unlike the limit it never fails an allocation, but a segment that is
 * left with nothing in use goes back to the device at once while reserved
 * is over the cap. Setting it gives back fully free segments until
 * reserved fits under it (or none is left); returns the bytes given back.
 * 0: no cap (segments wait in the cache for empty_cache or pressure). */
size_t slim_allocator_set_cache_cap(slim_allocator *a, size_t bytes);
/* A bound on the cache itself, reserved less allocated: at most
 * max(bytes, 10% of allocated), the give-back's documented slack, at any
 * moment rather than only after a give-back. Like the cap it never fails an
 * allocation: a segment left with nothing in use goes back at once while
 * the cache is over it, and setting it gives back fully free segments until
 * it fits. While it is set, a large-pool request under 10 MiB gets a
 * segment of its own (rounded to 2 MiB) instead of a share of 20 MiB, so
 * that freeing it leaves a segment that can go back rather than a hole
 * beside another live block. Returns the bytes given back. 0: none. */
size_t slim_allocator_set_cache_slack(slim_allocator *a, size_t bytes);
size_t slim_allocator_limit(const slim_allocator *a);
/* Gives back every segment with no block in use; returns the bytes freed. */
size_t slim_allocator_empty_cache(slim_allocator *a);
void slim_allocator_stats(slim_allocator *a, slim_mem_stats *out);
/* alloc_trim.c: slim_allocator_empty_cache under the name the give-back
 * uses (NULL: nothing); returns the bytes given back. */
size_t slim_allocator_trim(slim_allocator *a);
/* Every started device's allocator trimmed (the pinned host's too), then
 * glibc's free heap pages returned (malloc_trim). Afterwards each
 * allocator's reserved bytes are its allocated bytes plus the free space
 * inside segments that still hold a live block: docs/memory.md ("Giving
 * back") documents the slack, max(8 MiB, 10% of allocated), that the
 * tests hold it to. Returns the segment bytes given back. Called at the
 * end of slim_model_load and slim_model_free. */
size_t slim_memory_give_back(void);
/* Sets every peak to its current value. */
void slim_allocator_reset_peaks(slim_allocator *a);
const char *slim_allocator_device(const slim_allocator *a);

/* A table like torch.cuda.memory_summary(): the figures above, current /
 * peak / total allocated / total freed, per pool. Returns malloc'd text. */
char *slim_mem_stats_summary(const slim_mem_stats *s, const char *device);

/* "2GiB", "512Mi", "1.5g", "1000000" -> bytes; false (err filled, naming
 * the text) when it is not a size. K/Ki/KiB, M/Mi/MiB, G/Gi/GiB, T/Ti/TiB
 * (any case) are powers of 1024, as docker's "-m 2g"; KB, MB, GB, TB are
 * powers of 1000. */
bool slim_parse_bytes(const char *text, size_t *out, slim_err *err);
/* "12.0 MiB" into buf. */
const char *slim_format_bytes(size_t bytes, char *buf, size_t cap);

#endif
