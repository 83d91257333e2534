/*
 * conv_dnnl_set.h - FusedConv's node state and the per-shape primitive sets
 * that conv_dnnl.c runs and conv_dnnl_build.c makes (conv_dnnl.c's opening
 * comment has the design: parts by output channel blocks, sets cached per
 * input shape).
 */
#ifndef SLIM_CONV_DNNL_SET_H
#define SLIM_CONV_DNNL_SET_H

#include "kernel.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define CACHE_SLOTS 8

/* One thread's share: input channels [c0, c1) to reorder, output channels
 * [o0, o1) to compute, with the primitives over those slices. */
typedef struct part {
    int64_t c0, c1, o0, o1;
    dnnl_primitive_t to_src, conv, res_to_dst, from_dst;
    dnnl_memory_desc_t x_md, src_md;           /* the input slice, NCHW and blocked */
    dnnl_memory_desc_t csrc_md, wei_md, bias_md, dst_md, y_md; /* the conv's */
    dnnl_memory_desc_t dww_md, dwb_md;         /* the depthwise post-op's W and B */
    dnnl_memory_desc_t scratch_md; /* the conv's scratchpad, ours to give */
    size_t scratch_bytes;
    /* bf16 products (bf16_products): this part's slice of the stored bf16
     * W (OIhw16i16o) reordered per run into the layout the conv reads */
    dnnl_primitive_t w_to_run;
    dnnl_memory_desc_t wst_md;
    /* Stored Winograd (conv_wino.c): where this part's slice of the
     * transformed W starts in W, in floats; wei_md is its layout. */
    int64_t w_off;
    /* A blocked residual read in place by a binary-add post-op (dst_md's
     * layout), rather than copied into dst for a sum post-op first. */
    bool res_binary;
} part;

/* A set's residual: none, R read beside the output (a binary add when R
 * is blocked), or R the output's own buffer (the planner wrote Y over R,
 * SLIM_OP_INPLACE3): a sum post-op over what Y holds, with no copy. */
enum { RES_NONE = 0, RES_READ = 1, RES_INPLACE = 2 };

typedef struct prim_set {
    int64_t h, w, oh, ow;      /* the input shape it was made for, the output's */
    int64_t oh1, ow1;          /* the 1x1's output, before a depthwise post-op */
    int residual;              /* RES_* */
    bool bf16;                 /* bf16 src and W, float32 sums (bf16_products) */
    int n_in_parts, n_parts;
    part *in_parts, *parts;
    size_t src_floats, dst_floats; /* blocked scratch per image */
    int64_t wino_floats;       /* stored Winograd: the parts' W, all told */
} prim_set;

typedef struct fconv_state {
    int64_t group, kernel[2], stride[2], dilation[2], pads[4];
    int act;                   /* SLIM_FCONV_ACT_* */
    float alpha, beta;
    int wfmt;                  /* SLIM_FCONV_W_* */
    int64_t m; /* output channels (W's first dim is padded to 16); 0: W's, unpadded */
    /* Set by the blocked_layout pass: X, R or Y is held in nChw16c (same
     * bytes as NCHW when channels are a multiple of 16, else padded to one
     * and shaped so), so its reorder is skipped. */
    bool in_blocked, res_blocked, out_blocked;
    /* A depthwise 3x3 (pad 1) merged in after a 1x1 (merge_depthwise in
     * fuse_conv.c): its stride, 0 when there is none, and activation. */
    int64_t dw_stride;
    int dw_act;
    float dw_alpha, dw_beta;
    /* Stored Winograd (conv_wino.c): W holds the parts' slices transformed
     * at load for oneDNN's F(2x2, 3x3) on this input plane; 0: W packed. */
    int64_t wino_h, wino_w;
    pthread_mutex_t mu;
    int n_sets;
    prim_set sets[CACHE_SLOTS];
} fconv_state;

/* M: out_channels, or W's first dim in graphs made before the attribute. */
static inline int64_t out_channels(const fconv_state *s, const slim_tensor *w)
{
    return s->m ? s->m : w->dims[0];
}

static inline int64_t out_extent(const fconv_state *s, int i, int64_t in)
{
    int64_t span = (s->kernel[i] - 1) * s->dilation[i] + 1;
    int64_t room = in + s->pads[i] + s->pads[i + 2] - span;
    return room < 0 ? -1 : room / s->stride[i] + 1;
}
/* Whether the conv has Winograd's shape (conv_dnnl_build.c). */
bool slim__fconv_wino_shape(const fconv_state *s);
/* Makes the primitives of one input shape into *set (the cache's caller
 * holds s->mu, or s is not shared yet). */
dnnl_status_t slim__fconv_build_set(const fconv_state *s, const slim_tensor *w,
                                    const slim_tensor *x, int residual, prim_set *set);
/* Whether bf16 W runs as bf16 products (conv_dnnl_build.c says when). */
bool slim__fconv_bf16_products(const fconv_state *s, const slim_tensor *w);
/* Destroys a set's primitives and frees its parts. */
void slim__fconv_set_release(prim_set *ps);
/* The primitives for x's shape: cached in s, or made for this call only and
 * *owned (the caller releases them) once the cache is full. */
slim_status slim__fconv_find_set(fconv_state *s, const slim_tensor *w, const slim_tensor *x,
                                 int residual, prim_set *out, bool *owned, slim_err *err);

#endif
