/*
 * device.c - the CPU device and refcounted buffers.
 *
 * The CPU device's allocator is made on first use (pthread_once, so two
 * threads asking at once get the same one) and lives as long as the
 * process: buffers may be dropped at any time, even during exit.
 */
#include "device.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SLIM_CPU_ALIGN 64

/* Transparent huge pages, for what is streamed whole. A FusedMatMul at a
 * few rows reads all its packed weights once per run, and on 4 KiB pages
 * that stream pays a TLB walk every 4 KiB and the hardware prefetchers stop
 * at each page's end: BERT-base seq 16 batch 1 is bound by it (85M weights
 * at ~12 GB/s). Most hosts give huge pages only when asked
 * (/sys/kernel/mm/transparent_hugepage/enabled = madvise).
 *
 * A huge page makes 2 MiB resident at its first touch, so asking for one
 * where only part of it is used would count more resident bytes than are
 * used, against a server that promises RSS within its budget (an arena
 * segment is touched only as far as its plan reaches). So by default only
 * the 2 MiB pages lying wholly inside a buffer its owner writes whole and
 * keeps (slim_buffer_advise_whole: packed weights) are asked for: they
 * would all be resident on small pages too. SLIM_THP (read at each call,
 * rare, so a test can switch it):
 *   unset  whole buffers only (the default);
 *   0      none;
 *   1      every large-pool segment too, as first tried (arenas included).
 * Outputs are the same bits either way. */
#define SLIM_THP_MIN ((size_t)2 << 20)

typedef enum { THP_NONE, THP_WHOLE, THP_ALL } thp_mode;

static thp_mode slim__thp_mode(void)
{
    const char *e = getenv("SLIM_THP");
    if (!e || !*e)
        return THP_WHOLE;
    if (strcmp(e, "0") == 0)
        return THP_NONE;
    return strcmp(e, "1") == 0 ? THP_ALL : THP_WHOLE;
}

/* Segments are mapped from the kernel and unmapped when the allocator
 * gives them back. With malloc, glibc raises its mmap threshold after the
 * first 20 MiB segment is freed, later segments come from the heap, and
 * their pages stay resident after free: a 600 s soak under a 30 MiB limit
 * grew the process from 98 to 194 MiB while the allocator held 30
 * (docs/benchmarks.md, soak_2026-11-23). Pages are page-aligned, which is
 * more than SLIM_CPU_ALIGN.
 *
 * Large segments start on a 2 MiB boundary (mapped 2 MiB longer, the ends
 * unmapped again: nothing is touched, so nothing grows), so that a block at
 * the head of a segment is made of whole huge pages rather than missing
 * one at either end. */
static void *host_segment_alloc(void *ctx, size_t size)
{
    if (size <= SLIM_THP_MIN) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    const size_t span = size + SLIM_THP_MIN;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + SLIM_THP_MIN - 1) & ~(uintptr_t)(SLIM_THP_MIN - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + span > p + size)
        munmap(p + size, (size_t)(raw + span - (p + size)));
    if (slim__thp_mode() == THP_ALL)
        madvise(p, size, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
    return p;
}

static void host_segment_free(void *ctx, void *ptr, size_t size)
{
    munmap(ptr, size);
}

static slim_device cpu_device = {.name = "cpu", .description = "host memory"};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_device_init(void)
{
    const slim_alloc_backend host = {
        .device = "cpu",
        .segment_alloc = host_segment_alloc,
        .segment_free = host_segment_free,
    };
    /* NULL when the host is out of memory at startup: slim_buffer_new
     * reports it rather than crashing. */
    cpu_device.alloc = slim_allocator_new(&host);
}

slim_device *slim_device_cpu(void)
{
    pthread_once(&cpu_once, cpu_device_init);
    return &cpu_device;
}

/* The 2 MiB pages wholly inside b's bytes: [*lo, *hi), false when none. */
static bool whole_huge_range(const slim_buffer *b, uintptr_t *lo, uintptr_t *hi)
{
    const uintptr_t mask = (uintptr_t)SLIM_THP_MIN - 1;
    if (!b || !b->ptr || b->dev != &cpu_device)
        return false;
    *lo = ((uintptr_t)b->ptr + mask) & ~mask;
    *hi = ((uintptr_t)b->ptr + b->size) & ~mask;
    return *hi > *lo;
}

void slim_buffer_advise_whole(slim_buffer *b)
{
    uintptr_t lo, hi;
    if (slim__thp_mode() == THP_NONE || !whole_huge_range(b, &lo, &hi))
        return;
    /* Advice only: a refusal (no THP on this host) changes nothing. A
     * block reused from the cache (a weight packed where the previous
     * one's plain copy was freed) is already backed by small pages, and
     * the first touch would keep them: its bytes are dropped first (the
     * owner writes them all), and where the kernel frees the emptied page
     * tables too (Linux 6.14+) the first touch then takes huge pages. */
    if (madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0) {
        b->huge = true;
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
}

slim_status slim_buffer_new(slim_device *dev, size_t size, slim_buffer **out, slim_err *err)
{
    *out = NULL;
    if (!dev)
        return slim_errf(err, SLIM_EINVAL, "no device given for a buffer of %zu bytes", size);
    if (size > 0 && !dev->alloc)
        return slim_errf(err, SLIM_ENOMEM, "the %s device has no allocator (out of host memory "
                         "when it was set up)", dev->name);
    slim_buffer *b = malloc(sizeof(*b));
    if (!b)
        return slim_errf(err, SLIM_ENOMEM, "cannot allocate a buffer header");
    *b = (slim_buffer){.dev = dev, .size = size};
    atomic_init(&b->refs, 1);
    if (size > 0) {
        /* The allocator's message says what failed; without a caller's err
         * the status still has to come from somewhere. */
        slim_err local;
        slim_err *e = err ? err : &local;
        e->status = SLIM_ENOMEM;
        b->ptr = slim_allocator_alloc(dev->alloc, size, &b->block, e);
        if (!b->ptr) {
            free(b);
            return e->status;
        }
    }
    *out = b;
    return SLIM_OK;
}

void slim_buffer_ref(slim_buffer *b)
{
    if (b)
        atomic_fetch_add(&b->refs, 1);
}

void slim_buffer_unref(slim_buffer *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    if (b->release) {
        b->release(b);
        return;
    }
    uintptr_t lo, hi;
    /* The range goes back to small pages before the block goes back to
     * the cache: its next owner may be an arena touched only in part. The
     * huge pages already there stay resident, as small ones would. With
     * SLIM_THP=1 the whole segment asked for them and keeps asking. */
    if (b->huge && slim__thp_mode() != THP_ALL && whole_huge_range(b, &lo, &hi))
        madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE);
    if (b->block)
        slim_allocator_free(b->dev->alloc, b->block);
    free(b);
}

/* ---- mapped model files ----------------------------------------------------- */

/* A handful of entries (one per loaded .slim model); lookups come only from
 * Gathers over tables of several MiB, so a locked scan costs nothing. */
typedef struct {
    const char *base;
    size_t size;
    int fd;
} file_map;

static pthread_mutex_t file_maps_mu = PTHREAD_MUTEX_INITIALIZER;
static file_map *file_maps;
static int n_file_maps, cap_file_maps;

void slim_file_map_register(const void *base, size_t size, int fd)
{
    pthread_mutex_lock(&file_maps_mu);
    if (n_file_maps == cap_file_maps) {
        int cap = cap_file_maps ? 2 * cap_file_maps : 8;
        file_map *m = realloc(file_maps, sizeof(*m) * (size_t)cap);
        if (!m) { /* not registered: the kernels read through the mapping */
            pthread_mutex_unlock(&file_maps_mu);
            return;
        }
        file_maps = m;
        cap_file_maps = cap;
    }
    file_maps[n_file_maps++] = (file_map){base, size, fd};
    pthread_mutex_unlock(&file_maps_mu);
}

void slim_file_map_unregister(const void *base)
{
    pthread_mutex_lock(&file_maps_mu);
    for (int i = 0; i < n_file_maps; i++)
        if (file_maps[i].base == base) {
            file_maps[i] = file_maps[--n_file_maps];
            break;
        }
    pthread_mutex_unlock(&file_maps_mu);
}

bool slim_file_map_lookup(const void *p, size_t n, int *fd, int64_t *offset)
{
    const char *c = p;
    bool found = false;
    pthread_mutex_lock(&file_maps_mu);
    for (int i = 0; i < n_file_maps && !found; i++) {
        const file_map *m = &file_maps[i];
        if (c >= m->base && n <= m->size && (size_t)(c - m->base) <= m->size - n) {
            *fd = m->fd;
            *offset = (int64_t)(c - m->base);
            found = true;
        }
    }
    pthread_mutex_unlock(&file_maps_mu);
    return found;
}
