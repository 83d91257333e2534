/*
 * conv_dnnl.h - FusedConv on oneDNN (conv_dnnl.c): what the fuse_conv pass
 * needs to make such nodes.
 *
 *     int f = slim_fconv_weights_format(C, M, group);   // -1: not supported
 *     slim_fconv_pack(&w, group, f, &packed, &err);     // packed replaces w
 *
 * The node is com.slimserve FusedConv(X, W, B[, R[, DW, DB]]) -> Y with the Conv
 * attributes kernel_shape, strides, dilations, pads (all explicit), group,
 * and activation (SLIM_FCONV_ACT_*, with alpha/beta the Clip bounds),
 * weights_format and out_channels (M). DW, DB: a depthwise 3x3 (pad 1,
 * stride dw_stride, then dw_activation) run on Y, after a 1x1 conv. R, when present, is added before the activation.
 * Built only where oneDNN was found (SLIM_HAVE_DNNL).
 */
#ifndef SLIM_CONV_DNNL_H
#define SLIM_CONV_DNNL_H

#include "kernel.h"

enum { SLIM_FCONV_ACT_NONE = 0, SLIM_FCONV_ACT_RELU = 1, SLIM_FCONV_ACT_CLIP = 2 };
enum { SLIM_FCONV_W_BLOCKED = 0, SLIM_FCONV_W_DEPTHWISE = 1, SLIM_FCONV_W_PLAIN_SRC = 2 };

/* The packed layout for a conv with c input channels, m output channels
 * and this group count, or -1 when FusedConv does not take it. */
int slim_fconv_weights_format(int64_t c, int64_t m, int64_t group);
/* The packed W's dims for m output channels of c_per_group inputs: oneDNN
 * pads the channel blocks of 16, so m (and c, blocked) round up to 16
 * there, with zeros; the node's out_channels attribute keeps m. */
void slim_fconv_packed_dims(int wfmt, int64_t m, int64_t c_per_group, int64_t kh, int64_t kw,
                            int64_t dims[4]);
/* A new host tensor, slim_fconv_packed_dims's shape, holding w in layout
 * wfmt. */
slim_status slim_fconv_pack(const slim_tensor *w, int64_t group, int wfmt, slim_tensor *out,
                            slim_err *err);
/* Whether oneDNN runs a 1x1 conv c->m followed by a depthwise 3x3 of this
 * stride (pad 1) as one jit kernel rather than its reference fusion (the
 * fuse_conv pass asks, dw_merge_wanted). */
bool slim_fconv_dw_post_op_is_jit(int64_t c, int64_t m, int stride);
/* With SLIM_CONV_WINO_STORED=1, at the plan stage (before any run): the
 * 3x3 stride-1 FusedConvs on 14x14 to 28x28 planes get W transformed for
 * Winograd F(2x2, 3x3) in place of the packed W (conv_wino.c), and the
 * model's weight bytes say so. Needs every input's dims but the batch
 * known; otherwise, or without that switch, nothing changes. Such weights
 * are this load's only: `slim convert` under the switch writes a file
 * FusedConv refuses (with a message saying so). */
slim_status slim_fconv_store_winograd(slim_model *m, slim_err *err);

#endif
