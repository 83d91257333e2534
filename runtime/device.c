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

/* Large-pool segments (over 2 MiB: packed weights, big activations) ask
 * for transparent huge pages, which most hosts give only when asked
 * (/sys/kernel/mm/transparent_hugepage/enabled = madvise). A FusedMatMul
 * at a few rows streams all its weights once per run, and on 4 KiB pages
 * that stream pays a TLB walk every 4 KiB and the hardware prefetchers
 * stop at each page's end: BERT-base seq 16 batch 1 took 0.70, 0.95 and
 * 0.91x the time in three A/B runs on loaded cores; batch 8 and seq 128
 * moved both ways within the noise (bench/results/bert_thp_2026-11-27.txt).
 * Outputs are the same bits. The small pool's 2 MiB segments are not
 * 2 MiB-aligned, so they would get none anyway. Asked only with
 * SLIM_THP=1 (read at each segment, rare, so a test can switch it): a
 * huge page makes 2 MiB resident at the first touch, so an arena segment
 * touched in part would count more resident bytes than it uses, against a
 * server that promises RSS within its budget; the gain is not shown on a
 * quiet machine yet. */
#define SLIM_THP_MIN ((size_t)2 << 20)

static bool slim__thp_wanted(void)
{
    const char *e = getenv("SLIM_THP");
    return e && strcmp(e, "1") == 0;
}

/* Segments are mapped from the kernel and unmapped when the allocator
 * gives them back. With malloc, glibc raises its mmap threshold after the
 * first 20 MiB segment is freed, later segments come from the heap, and
 * their pages stay resident after free: a 600 s soak under a 30 MiB limit
 * grew the process from 98 to 194 MiB while the allocator held 30
 * (docs/benchmarks.md, soak_2026-11-23). Pages are page-aligned, which is
 * more than SLIM_CPU_ALIGN. */
static void *host_segment_alloc(void *ctx, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (size > SLIM_THP_MIN && slim__thp_wanted())
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
