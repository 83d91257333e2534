/*
 * conv_dnnl_impl.h - the oneDNN helpers conv_dnnl.c and conv_dnnl_pack.c
 * share (FusedConv's engine, streams, reorders and weight layouts).
 */
#ifndef SLIM_CONV_DNNL_IMPL_H
#define SLIM_CONV_DNNL_IMPL_H

#include "kernel.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>

static inline int64_t slim__fconv_round16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

/* The CPU engine (NULL when oneDNN has none), made once. */
dnnl_engine_t slim__fconv_engine(void);
/* The calling thread's stream (NULL when oneDNN cannot give one), with
 * oneDNN's own threads kept to this one. */
dnnl_stream_t slim__fconv_stream(void);
/* W's descriptor with m output channels (a slice of them when packed) of
 * c input channels per group; oneDNN pads m and (blocked) c to 16. */
void slim__fconv_weights_md(dnnl_memory_desc_t *md, int64_t m, int64_t c, int64_t kh, int64_t kw,
                            int wfmt, bool packed);
/* One reorder between two memories over the given buffers. */
dnnl_status_t slim__fconv_run_reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *smd,
                                      void *src, const dnnl_memory_desc_t *dmd, void *dst,
                                      dnnl_stream_t s);
dnnl_status_t slim__fconv_make_reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *a,
                                       const dnnl_memory_desc_t *b);

#endif
