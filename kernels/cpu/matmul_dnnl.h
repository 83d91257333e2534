/*
 * matmul_dnnl.h - FusedMatMul on oneDNN (matmul_dnnl.c): what the
 * fuse_matmul pass needs to make such nodes.
 *
 *     slim_fmm_pack(&w, &packed, &err);   // W [K, N] -> packed parts
 *
 * The node is com.slimserve FusedMatMul(A [..., K], Wp, B [N]) -> Y [..., N]
 * with attributes K, N and activation (SLIM_FMM_ACT_*), and parts and
 * layout (matmul_layout.h). Wp holds W's columns in slim_num_threads()
 * parts when packed here, each in the layout oneDNN's matmul picks for it. Built only where oneDNN was found (SLIM_HAVE_DNNL).
 */
#ifndef SLIM_MATMUL_DNNL_H
#define SLIM_MATMUL_DNNL_H

#include "kernel.h"
#include "matmul_layout.h"

/* How a weight was packed: the node's "parts" and "layout" attributes
 * (matmul_layout.h), which a .slim file stores with the packed bytes. */
typedef struct slim_fmm_packing {
    int n_bounds, n_layout;
    int64_t parts[SLIM_FMM_MAX_PARTS + 1];
    int64_t layout[SLIM_FMM_MAX_PARTS * SLIM_FMM_DESC];
} slim_fmm_packing;

/* A new 1-D float32 host tensor holding w [K, N] packed, and how;
 * EUNSUPPORTED when oneDNN takes no such matmul. */
slim_status slim_fmm_pack(const slim_tensor *w, slim_tensor *out, slim_fmm_packing *how,
                          slim_err *err);

/* The layout oneDNN picks here for W [k, n] cut at bounds (n_parts + 1 of
 * them), as matmul_layout.h describes it; false when it cannot run it. */
bool slim_fmm_layout_here(int64_t k, int64_t n, const int64_t *bounds, int n_parts,
                          int64_t *layout);

/* Registers the give-back's idle hook that empties oneDNN's primitive
 * cache once no model is held (alloc_trim.h); called as oneDNN's engine
 * is first made, here and in conv_dnnl_pack.c. */
void slim__dnnl_on_idle(void);

#endif
