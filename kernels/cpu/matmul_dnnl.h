/*
 * matmul_dnnl.h - FusedMatMul on oneDNN (matmul_dnnl.c): what the
 * fuse_matmul pass needs to make such nodes.
 *
 *     slim_fmm_pack(&w, &packed, &err);   // W [K, N] -> packed parts
 *
 * The node is com.slimserve FusedMatMul(A [..., K], Wp, B [N]) -> Y [..., N]
 * with attributes K, N and activation (SLIM_FMM_ACT_*). Wp holds W's
 * columns in slim_num_threads() parts, each packed in the layout oneDNN's
 * matmul picks for it. Built only where oneDNN was found (SLIM_HAVE_DNNL).
 */
#ifndef SLIM_MATMUL_DNNL_H
#define SLIM_MATMUL_DNNL_H

#include "kernel.h"

enum { SLIM_FMM_ACT_NONE = 0, SLIM_FMM_ACT_RELU = 1, SLIM_FMM_ACT_GELU_ERF = 2 };

/* A new 1-D float32 host tensor holding w [K, N] packed; EUNSUPPORTED when
 * oneDNN takes no such matmul. */
slim_status slim_fmm_pack(const slim_tensor *w, slim_tensor *out, slim_err *err);

#endif
