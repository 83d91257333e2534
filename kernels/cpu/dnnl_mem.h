/*
 * dnnl_mem.h - oneDNN memory objects kept per thread and pointed at each
 * run's buffers (dnnl_mem.c), instead of made and destroyed around every
 * primitive execution.
 *
 *     slim__dnnl_mem_begin();                       // a new execution's set
 *     dnnl_memory_t a, b;
 *     slim__dnnl_mem_bind(&pt->src_md, src, &a);   // key: the md's address
 *     slim__dnnl_mem_bind(&pt->dst_md, dst, &b);
 *     dnnl_primitive_execute(..., a, b ...);        // never destroy a or b
 *
 * A bound memory stays valid until the calling thread's next
 * slim__dnnl_mem_begin; at most SLIM_DNNL_MEM_PER_EXEC binds per begin.
 * The objects belong to the thread and go when it exits.
 */
#ifndef SLIM_DNNL_MEM_H
#define SLIM_DNNL_MEM_H

#include <oneapi/dnnl/dnnl.h>

#define SLIM_DNNL_MEM_PER_EXEC 8

/* Starts a new set of binds on this thread: the memories of the previous
 * set may be reused (repointed) from here on. */
void slim__dnnl_mem_begin(void);

/* *out: a memory of descriptor *md over handle, on the FusedConv engine.
 * md's address is the cache key (a part's descriptor lives as long as its
 * primitive); its contents are checked too, so a freed and reused address
 * never gets a stale descriptor. A kept memory is pointed at handle with
 * dnnl_memory_set_data_handle, which is how dnnl_memory_create sets up
 * its buffer too, so the result is the memory creating would have made. */
dnnl_status_t slim__dnnl_mem_bind(const dnnl_memory_desc_t *md, void *handle, dnnl_memory_t *out);

#endif
