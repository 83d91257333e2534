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
 * The helpers below are for pass writers: they work on a graph that is not
 * yet finalized, where n_consumers and producer are not set.
 */
#ifndef SLIM_PASS_H
#define SLIM_PASS_H

#include "graph.h"

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

/* ---- helpers (passes/pass.c) ---------------------------------------------- */

/* Per value: the producing node (or -1), readers (input slots) and the last
 * reading node; recompute after rewriting. */
typedef struct slim_pass_uses {
    int n_values;
    int *producer, *readers, *reader;
} slim_pass_uses;

slim_status slim_pass_uses_init(slim_pass_uses *u, const slim_graph *g, slim_err *err);
void slim_pass_uses_free(slim_pass_uses *u);

/* What a fusing pass walks the graph with: the uses, computed once before
 * it rewrites, and the nodes it has folded into others (marked, removed
 * together at the end so the node indices in `uses` stay valid). */
typedef struct slim_pass_walk {
    slim_pass_uses uses;
    bool *dead;                 /* one per node */
} slim_pass_walk;

slim_status slim_pass_walk_init(slim_pass_walk *w, const slim_graph *g, slim_err *err);
/* Sweeps the dead nodes when st is SLIM_OK (slim_pass_sweep), frees the
 * walk, and returns st. */
slim_status slim_pass_walk_finish(slim_pass_walk *w, slim_graph *g, slim_status st);

/* The value's host float32 initializer, or NULL. */
const slim_tensor *slim_pass_const_f32(const slim_graph *g, int v);
/* The node reading v when exactly one slot does, v is no graph output and
 * the node is a default-domain op_type; else NULL. */
slim_node *slim_pass_sole_reader(slim_graph *g, const slim_pass_uses *u, int v,
                                 const char *op_type);
/* Removes the nodes marked dead (freeing them), then releases initializers
 * no node reads and no output names. */
void slim_pass_sweep(slim_graph *g, bool *dead);
/* A weight just replaced by its packed copy, released now when `reader`
 * was its only reader (and it is no graph output), so packing a model holds
 * one original at a time beside the packed copies instead of all of them
 * until the sweep. A weight in a mapped .slim file has its pages dropped
 * from the process as well: packing read them all. */
void slim_pass_drop_replaced(slim_graph *g, int v, const slim_node *reader);
/* Sets or adds an attribute on n; strings and arrays are copied. */
slim_status slim_pass_set_int(slim_node *n, const char *name, int64_t v, slim_err *err);
slim_status slim_pass_set_float(slim_node *n, const char *name, float v, slim_err *err);
slim_status slim_pass_set_str(slim_node *n, const char *name, const char *v, slim_err *err);
slim_status slim_pass_set_ints(slim_node *n, const char *name, const int64_t *v, int count,
                               slim_err *err);

#endif
