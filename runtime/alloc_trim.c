/* alloc_trim.c - giving back what a load or an unload no longer uses.
 *
 * A load's peak is far above what the loaded model holds: the float32
 * weights before int8 or half conversion, the protobuf being decoded, the
 * conversion's scratch. The caching allocator keeps every segment it ever
 * took until asked (alloc.h), and glibc keeps the free pages of its heaps,
 * so without this an idle server holds several times its weights (issue
 * 31: a MiniLM-sized int8 encoder held 24 MB allocated and 120 MB
 * reserved). slim_model_load and slim_model_free call slim_memory_give_back
 * at their end; docs/memory.md ("Giving back") has the figures. */
#include "alloc_trim.h"
#include "alloc.h"
#include "device.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__
#include <sys/mman.h>
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21 /* Linux 5.4; older headers lack the name */
#endif
#endif

#ifdef __GLIBC__
#include <malloc.h>
#endif

#define MAX_DEVICES 32

size_t slim_allocator_trim(slim_allocator *a)
{
    /* Only fully free segments can go: a segment is one device allocation
     * (aligned_alloc, cudaMalloc), given back whole or not at all. What
     * stays reserved beyond allocated is then the free space inside
     * segments that also hold a live block. */
    return a ? slim_allocator_empty_cache(a) : 0;
}

static pthread_mutex_t hooks_mu = PTHREAD_MUTEX_INITIALIZER;
static slim_idle_hook hooks[SLIM_IDLE_HOOKS];
static atomic_int n_hooks;

bool slim_memory_on_idle(slim_idle_hook fn)
{
    bool ok = true;
    pthread_mutex_lock(&hooks_mu);
    int n = atomic_load(&n_hooks);
    bool known = false;
    for (int i = 0; i < n; i++)
        known = known || hooks[i] == fn;
    if (!known && n < SLIM_IDLE_HOOKS) {
        hooks[n] = fn;
        atomic_store(&n_hooks, n + 1); /* published after the slot is set */
    } else if (!known)
        ok = false;
    pthread_mutex_unlock(&hooks_mu);
    return ok;
}

#ifdef __linux__
/* One line of /proc/self/maps: its range and the file it maps (inode 0:
 * anonymous). */
typedef struct map_line {
    uintptr_t lo, hi;
    unsigned dev_major, dev_minor;
    unsigned long inode;
} map_line;

static bool read_map_line(FILE *f, map_line *m)
{
    char line[512];
    if (!fgets(line, sizeof(line), f))
        return false;
    unsigned long lo = 0, hi = 0, off = 0;
    char perms[8];
    m->inode = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &m->dev_major,
               &m->dev_minor, &m->inode) != 7)
        m->inode = 0;
    m->lo = lo;
    m->hi = hi;
    /* A path longer than the buffer continues on the next read: skip it. */
    while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
        ;
    return true;
}

size_t slim_memory_page_out_object(const void *addr)
{
    /* The object's file by its device and inode (the mapping holding
     * addr), not by name: a library is found through a symlink (.so.2)
     * that the maps show resolved (.so.2.6). */
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    map_line m, own = {0};
    while (read_map_line(f, &m))
        if ((uintptr_t)addr >= m.lo && (uintptr_t)addr < m.hi) {
            own = m;
            break;
        }
    size_t advised = 0;
    if (own.inode) {
        rewind(f);
        while (read_map_line(f, &m))
            if (m.inode == own.inode && m.dev_major == own.dev_major &&
                m.dev_minor == own.dev_minor &&
                madvise((void *)m.lo, m.hi - m.lo, MADV_PAGEOUT) == 0)
                advised += m.hi - m.lo;
    }
    fclose(f);
    return advised;
}
#else
size_t slim_memory_page_out_object(const void *addr)
{
    (void)addr;
    return 0;
}
#endif

static bool allocator_idle(slim_allocator *a)
{
    if (!a)
        return true;
    slim_mem_stats s;
    slim_allocator_stats(a, &s);
    return s.allocated_bytes[SLIM_POOL_ALL].current == 0;
}

bool slim_memory_idle(void)
{
    slim_device *devs[MAX_DEVICES];
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int i = 0; i < n && i < MAX_DEVICES; i++)
        if (!allocator_idle(devs[i]->alloc))
            return false;
    return !slim_device_pinned_host() || allocator_idle(slim_device_pinned_host()->alloc);
}

size_t slim_memory_give_back(void)
{
    size_t freed = 0;
    slim_device *devs[MAX_DEVICES];
    /* load false: a device nobody started holds nothing to give back. */
    int n = slim_device_list(devs, MAX_DEVICES, false, NULL);
    for (int i = 0; i < n && i < MAX_DEVICES; i++)
        freed += slim_allocator_trim(devs[i]->alloc);
    if (slim_device_pinned_host())
        freed += slim_allocator_trim(slim_device_pinned_host()->alloc);
    /* Nothing live: no model is loaded or running (a load's give-back
     * comes while its model holds its weights, so never here), and the
     * libraries' caches serve no one. A model loaded later builds what it
     * needs again, as the first ever did. */
    int hooked = atomic_load(&n_hooks);
    if (hooked && slim_memory_idle())
        for (int i = 0; i < hooked; i++)
            hooks[i]();
#ifdef __GLIBC__
    /* The ONNX loader's protobuf decode and the passes' small mallocs
     * leave free pages between live blocks in glibc's heaps; only a trim
     * returns them (the heaps' tops are returned on free already). */
    malloc_trim(0);
#endif
    return freed;
}
