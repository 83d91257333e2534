/*
 * pass.h - graph optimization passes, run once at load on the graph before
 * slim_graph_finalize (so the planner plans the optimized graph), by the
 * load pipeline's pass registry (pipeline/registry.c; slim_passes_run in
 * pipeline/pipeline.h runs them on a bare graph).
 *
 * A pass is one file in passes/ with one slim_pass entry, listed in the
 * registry with its stage and devices. A pass must leave
 * every graph output computing the same function of the graph inputs (up
 * to float rounding), keep output and input names, and free what it stops
 * using (a weight nothing reads any more stops being an initializer). Each
 * pass sees only default-domain float32 nodes it understands and leaves the
 * rest, so passes compose with the int8 and half-precision passes that run
 * before them (pipeline/registry.c).
 *
 * Pass writers edit the graph with the rewrite kit (rewrite.h), which
 * pass.h includes.
 */
#ifndef SLIM_PASS_H
#define SLIM_PASS_H

#include "graph.h"
#include "rewrite.h"

typedef struct slim_pass {
    const char *name;
    /* Rewrites g; *changed counts the rewrites made. */
    slim_status (*run)(slim_graph *g, int *changed, slim_err *err);
} slim_pass;

/* FusedMatMul (passes/fuse_matmul.c) for a file: every float32 MatMul
 * weight packed, as `slim convert` stores them (none with
 * SLIM_FUSE_MATMUL=0, or without oneDNN). */
slim_status slim_pass_pack_matmul(slim_graph *g, slim_err *err);
/* Every FusedMatMul back to MatMul [+ Add] [+ Relu | GELU's nodes], its
 * weight unpacked: for a GPU, where no kernel runs it. */
slim_status slim_pass_defuse_matmul(slim_graph *g, slim_err *err);
/* Three sibling projections of one input (an attention block's Q, K, V)
 * as one MatMul [+ Add] + Split (passes/merge_qkv.c), before the int8 and
 * half passes. The caller's hooks (each may be NULL): nodes for which
 * skip(node, user) says true stay as they are, and so do the three whose
 * weights [K, N_i] group_ok(w, 3, user) refuses. *merged counts the groups
 * merged. */
typedef struct {
    bool (*skip)(const slim_node *n, void *user);
    bool (*group_ok)(const slim_tensor *const *w, int n, void *user);
    void *user;
} slim_merge_hooks;
slim_status slim_pass_merge_qkv(slim_graph *g, const slim_merge_hooks *hooks, int *merged,
                                slim_err *err);
/* The merge undone (MatMul [+ Add] per part of a Split of the last axis
 * into three): for a GPU, which has no Split kernel. */
slim_status slim_pass_unmerge_qkv(slim_graph *g, slim_err *err);

#endif
