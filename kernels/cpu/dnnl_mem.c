/*
 * dnnl_mem.c - oneDNN memory objects kept per thread (dnnl_mem.h).
 *
 * oneDNN's C API takes buffers only as memory objects. Making four to seven
 * of them around every convolution part (src, W, bias, dst, the depthwise
 * post-op's W and bias, the scratchpad) and destroying them after cost
 * about 40% of a small FusedConv's time in malloc, memalign and free
 * (perf, a chain of 40 FusedConvs on 2x2 planes: 6.3 us a node against
 * onnxruntime's 1.5): at batch 1 MobileNetV2 runs 37 FusedConvs of two
 * parts each, many of them 20-100 us long.
 *
 * So each thread keeps the memories it made, in a small open-addressed
 * table keyed by the descriptor's address (each part's descriptors live in
 * its cached primitive set), and repoints a kept one at the run's buffer
 * with dnnl_memory_set_data_handle, which initializes the buffer exactly
 * as creation does (oneDNN: "as if dnnl_memory_set_data_handle() had been
 * called"). A key whose descriptor has changed (an address freed with
 * a model and reused) gets a new memory. Per thread, not shared: a memory
 * object holds one handle, and two threads running the same part for
 * different images would repoint it under each other.
 *
 * Size: at most SLOTS memories of about 1 KB (a 696-byte descriptor and
 * oneDNN's bookkeeping) per thread that runs convolutions: oneDNN's own
 * allocations, outside slimserve's accounting as the primitives are. A
 * model binds 4-7 descriptors per part and 2 per reorder: MobileNetV2 on
 * 2 threads (37 FusedConvs of 2 parts) about 400 in all, shared between
 * the threads by which parts each ran. Past SLOTS, evicted ones are made
 * again: slower, never wrong.
 */
#include "dnnl_mem.h"
#include "conv_dnnl_impl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define SLOTS 512  /* a power of two */
#define WINDOW 16  /* slots probed per key; > SLIM_DNNL_MEM_PER_EXEC */

typedef struct mem_slot {
    const dnnl_memory_desc_t *key;
    dnnl_memory_t mem;
    unsigned stamp; /* the set (slim__dnnl_mem_begin) that last bound it */
} mem_slot;

typedef struct mem_table {
    mem_slot slot[SLOTS];
    unsigned stamp, bound; /* the current set, and how many binds it made */
} mem_table;

static __thread mem_table *table;
static pthread_key_t table_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* At thread exit: the thread's memories (the engine outlives them). */
static void table_free(void *p)
{
    mem_table *t = p;
    for (int i = 0; i < SLOTS; i++)
        dnnl_memory_destroy(t->slot[i].mem);
    free(t);
}

static void key_init(void)
{
    if (pthread_key_create(&table_key, table_free) != 0)
        table_key = 0;
}

static mem_table *get_table(void)
{
    if (table)
        return table;
    pthread_once(&key_once, key_init);
    /* raw: a per-thread cache of oneDNN handles, freed at thread exit */
    mem_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    /* stamps start at 1, so that an empty slot (stamp 0) is never "bound" */
    t->stamp = 1;
    if (pthread_setspecific(table_key, t) != 0) {
        free(t);
        return NULL;
    }
    table = t;
    return t;
}

void slim__dnnl_mem_begin(void)
{
    mem_table *t = get_table();
    if (t) {
        t->stamp = t->stamp + 1 ? t->stamp + 1 : 1;
        t->bound = 0;
    }
}

static size_t slot_of(const void *key)
{
    uintptr_t k = (uintptr_t)key;
    k ^= k >> 17;
    k *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(k >> 24) & (SLOTS - 1);
}

dnnl_status_t slim__dnnl_mem_bind(const dnnl_memory_desc_t *md, void *handle, dnnl_memory_t *out)
{
    *out = NULL;
    mem_table *t = get_table();
    if (!t)
        return dnnl_out_of_memory;
    if (t->bound >= SLIM_DNNL_MEM_PER_EXEC) /* a caller without slim__dnnl_mem_begin */
        return dnnl_runtime_error;
    size_t first = slot_of(md);
    mem_slot *victim = NULL;
    for (int i = 0; i < WINDOW; i++) {
        mem_slot *s = &t->slot[(first + (size_t)i) & (SLOTS - 1)];
        if (s->stamp == t->stamp)
            continue; /* bound in this set already: in use */
        if (s->key == md && s->mem) {
            const dnnl_memory_desc_t *have = NULL;
            if (dnnl_memory_get_memory_desc(s->mem, &have) == dnnl_success &&
                dnnl_memory_desc_equal(have, md)) {
                dnnl_status_t st = dnnl_memory_set_data_handle(s->mem, handle);
                if (st != dnnl_success)
                    return st;
                s->stamp = t->stamp;
                t->bound++;
                *out = s->mem;
                return dnnl_success;
            }
        }
        if (!victim || (victim->mem && !s->mem))
            victim = s; /* the first free slot, else the first not in use */
    }
    /* WINDOW > SLIM_DNNL_MEM_PER_EXEC: some slot is not in use. */
    dnnl_memory_t m = NULL;
    dnnl_status_t st = dnnl_memory_create(&m, md, slim__fconv_engine(), handle);
    if (st != dnnl_success)
        return st;
    dnnl_memory_destroy(victim->mem);
    victim->key = md;
    victim->mem = m;
    victim->stamp = t->stamp;
    t->bound++;
    *out = m;
    return dnnl_success;
}
