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
#include "alloc.h"
#include "device.h"

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
#ifdef __GLIBC__
    /* The ONNX loader's protobuf decode and the passes' small mallocs
     * leave free pages between live blocks in glibc's heaps; only a trim
     * returns them (the heaps' tops are returned on free already). */
    malloc_trim(0);
#endif
    return freed;
}
