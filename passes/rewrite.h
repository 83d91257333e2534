/*
 * rewrite.h - the graph-rewrite kit every pass shares (the optimization
 * passes here, the compression passes in quant/): who reads and produces
 * each value, nodes marked dead and swept at the end, weights released as
 * soon as nothing reads them, attributes set, nodes turned into others.
 * It works on a graph that is not yet finalized, where n_consumers and
 * producer are not set. Three layers, each built on the one before:
 *
 *   slim_pass_uses / slim_pass_walk (rewrite.c): per-value producer and
 *       readers, the dead nodes of a fusing pass, the sweep.
 *   slim__pattern (rewrite_pattern.c): per-value reader lists, for passes
 *       that recognize spelled-out functions (fuse_layernorm, fuse_gelu):
 *
 *       slim__pattern p;
 *       if ((st = slim__pattern_init(&p, g, err))) return st;
 *       ... slim__pattern_sole(&p, v, "Sqrt") ... p.w.dead[i] = true ...
 *       return slim__pattern_finish(&p, st);   (sweeps the dead nodes)
 *
 *     The reader lists are of the graph as it was at init: a matcher
 *     rewrites only the last node of what it matched (in place, keeping its
 *     output) and marks the rest dead, so the lists stay true for every
 *     value a later match can reach.
 *   slim_rewrite (rewrite_layer.c): the weight layers (MatMul, Gemm,
 *       Gather, Conv) the compression passes (int8, half, prune) turn into
 *       com.slimserve operators:
 *
 *       slim_rewrite rw;
 *       if ((st = slim_rewrite_init(&rw, g, 2, "converting to half precision", err)))
 *           return st;
 *       slim_rewrite_begin(&rw);                  // readers before the pass
 *       for (int i = 0; i < n_nodes; i++) {       // the nodes there were at the start
 *           int wv;
 *           if (rw.dead[i] || slim_rewrite_layer_kind(g, &g->nodes[i], 3, 8, &wv) !=
 *                                 SLIM_REWRITE_LINEAR)
 *               continue;
 *           why = slim_rewrite_linear_of(g, &g->nodes[i], max_k, max_n, "too big", &l);
 *           ... slim_rewrite_linear_bias(&rw, n, &l, &bias, &add, ...); rw.dead[add] = true
 *           ... slim_rewrite_sole_reader(&rw, out, "Relu") -> fused: rw.dead[r] = true
 *           ... slim_graph_add_initializer(...) for the new weights
 *           st = slim_rewrite_matmul_node(&g->nodes[i], "MatMulHalf", n_in, in, out, l.k, l.n,
 *                                         relu, rw.what, err);
 *           slim_rewrite_drop_unread(&rw, true);  // the float weight goes now
 *       }
 *       st = slim_rewrite_finish(&rw, st);        // drops unread, removes dead, frees
 *
 *     Node removal there is not slim_pass_sweep: that one also releases
 *     initializers nothing read before the pass, which the compression
 *     passes leave as they found them.
 */
#ifndef SLIM_REWRITE_H
#define SLIM_REWRITE_H

#include "graph.h"

/* ---- the graph as passes see it (rewrite.c) -------------------------------- */

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

/* The value's host float32 initializer with its data (one with no elements
 * counts; a weight already released by slim_pass_drop_replaced does not),
 * or NULL. */
const slim_tensor *slim_pass_const_f32(const slim_graph *g, int v);
/* Clip's bounds (c a Clip node) when they are constants: inputs from opset
 * 11, attributes before; false when they are not. Used by the passes that
 * fuse a Clip (ReLU6 is Clip(0, 6)) into a convolution's epilogue. */
bool slim_pass_clip_bounds(const slim_graph *g, const slim_node *c, float *lo, float *hi);
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

/* ---- pattern matching (rewrite_pattern.c) ------------------------------------ */


typedef struct slim__pattern {
    slim_graph *g;
    slim_pass_walk w;       /* uses (producer, reader counts) and dead nodes */
    int *start, *readers;   /* the nodes reading v: readers[start[v] .. start[v + 1]) */
} slim__pattern;

slim_status slim__pattern_init(slim__pattern *p, slim_graph *g, slim_err *err);
/* Frees p; sweeps the dead nodes when st is SLIM_OK. Returns st. */
slim_status slim__pattern_finish(slim__pattern *p, slim_status st);

/* n is op in the default domain. */
bool slim__pattern_is(const slim_node *n, const char *op);
/* v's producer when it is a live op with one output, else NULL. */
slim_node *slim__pattern_producer(const slim__pattern *p, int v, const char *op);
/* The live op reading v when it is v's only reader slot and v is no graph
 * output, else NULL. */
slim_node *slim__pattern_sole(const slim__pattern *p, int v, const char *op);
/* Binary node n reading x: its other operand (x itself for op(x, x)), or
 * -1 when n does not read x or is not binary. */
int slim__pattern_other(const slim_node *n, int x);
/* The value of constant v when it is a float or integer initializer with
 * one element and at most max_ndim dims. */
bool slim__pattern_scalar(const slim_graph *g, int v, int max_ndim, double *c);
/* |a - b| <= rel * |b|. */
bool slim__pattern_near(double a, double b, double rel);

/* Turns n into op_type (default domain, the given opset) reading in[0..n_in)
 * with no attributes; its outputs stay. */
slim_status slim__pattern_become(slim_node *n, const char *op_type, int opset, int n_in,
                                 const int *in, slim_err *err);

/* ---- layer rewriting (rewrite_layer.c) --------------------------------------- */
typedef struct slim_rewrite {
    slim_graph *g;
    /* Per value: node input slots of live nodes reading it and the last
     * such node (uses.producer is not kept). */
    slim_pass_uses uses;
    int *readers_before;   /* per value: readers when the pass began */
    bool *dead;            /* per node: fused away */
    int first_new_value;   /* values from here on were added by the pass */
    const char *what;      /* "quantizing to int8": for out-of-memory errors */
} slim_rewrite;

/* Room for new_per_node new values per node; what names the pass in errors
 * ("out of memory <what>"). */
slim_status slim_rewrite_init(slim_rewrite *r, slim_graph *g, int new_per_node, const char *what,
                              slim_err *err);
/* Counts the readers and keeps them as the readers before the pass. */
void slim_rewrite_begin(slim_rewrite *r);
/* Recounts the readers of every value (dead nodes read nothing). */
void slim_rewrite_count(slim_rewrite *r);
/* Float weights and biases that were read before the pass and that no live
 * node reads now stop being initializers: their memory goes back to the
 * allocator. recount: count the readers first. */
void slim_rewrite_drop_unread(slim_rewrite *r, bool recount);
/* When st is SLIM_OK drops unread weights and removes the dead nodes; frees
 * the state either way and returns st. */
slim_status slim_rewrite_finish(slim_rewrite *r, slim_status st);

/* Whether one of the n names is n's name or op_type. */
bool slim_rewrite_named(const char *const *names, int n, const slim_node *node);
/* The one live default-domain op_type node reading v when exactly one
 * input slot does and v is no graph output; else NULL. */
slim_node *slim_rewrite_sole_reader(const slim_rewrite *r, int v, const char *op_type);

/* The layers the weight passes rewrite: a default-domain MatMul or Gemm
 * (weight in[1], 2-D), Gather (table in[0], 2-D) or Conv (weight in[1],
 * conv_min_ndim to conv_max_ndim dims), whose weight is a host float32
 * initializer. */
typedef enum slim_rewrite_kind {
    SLIM_REWRITE_NONE,
    SLIM_REWRITE_LINEAR,
    SLIM_REWRITE_GATHER,
    SLIM_REWRITE_CONV,
} slim_rewrite_kind;

/* What node n is (NONE: none of those); *weight gets the weight's value. */
slim_rewrite_kind slim_rewrite_layer_kind(const slim_graph *g, const slim_node *n,
                                          int conv_min_ndim, int conv_max_ndim, int *weight);
/* Why a Gather stays as it is (it gathers along axis 1), or NULL. */
const char *slim_rewrite_gather_why(const slim_node *n);

/* A 1-D or 2-D tensor (d1 unused for 1-D), allocated. */
slim_status slim_rewrite_alloc_tensor(slim_tensor *t, slim_dtype dt, int ndim, int64_t d0,
                                      int64_t d1, slim_err *err);
/* Attributes for slim_rewrite_node; false when out of memory. */
bool slim_rewrite_attr_int(slim_attr *a, const char *name, int64_t v);
bool slim_rewrite_attr_str(slim_attr *a, const char *name, const char *s);
/* Makes n a com.slimserve op_type with these inputs, output out (its only
 * one) and the na attrs (taken over, freed on failure too). */
slim_status slim_rewrite_node(slim_node *n, const char *op_type, int n_in, const int *in, int out,
                              slim_attr *attrs, int na, const char *what, slim_err *err);

/* slim_rewrite_node with the attributes of a packed matrix product: K when
 * k > 0, then N when nn > 0, then activation "Relu" when relu (none at all
 * when k is 0: a Gather). */
slim_status slim_rewrite_matmul_node(slim_node *n, const char *op_type, int n_in, const int *in,
                                     int out, int64_t k, int64_t nn, bool relu, const char *what,
                                     slim_err *err);

/* A MatMul or Gemm with a constant 2-D weight: its geometry. */
typedef struct slim_rewrite_linear {
    int x, w;
    int64_t n, k;
    bool w_nk;             /* weight stored [N, K] (Gemm transB) */
    float alpha, beta;
    int c;                 /* Gemm's C, or -1 */
} slim_rewrite_linear;

/* Fills l from node n; the weight n->in[1] must be a 2-D initializer. */
void slim_rewrite_linear_geometry(const slim_graph *g, const slim_node *n, slim_rewrite_linear *l);
/* Fills l, and says why the layer cannot be rewritten, or NULL: transA,
 * an empty weight, K over max_k or N over max_n (too_big is the reason
 * then), a C that is no constant per-channel bias, alpha or beta not
 * finite. */
const char *slim_rewrite_linear_of(const slim_graph *g, const slim_node *n, int64_t max_k,
                                   int64_t max_n, const char *too_big, slim_rewrite_linear *l);
/* Layer l's (node n's) bias, float32 [N]: Gemm's beta * C, or else a
 * constant Add of N floats that alone reads n's output, which is then fused
 * (*add gets that node, else -1). bias is left empty when there is none;
 * the float bias's bytes are added to *bytes_before. */
slim_status slim_rewrite_linear_bias(const slim_rewrite *r, const slim_node *n,
                                     const slim_rewrite_linear *l, slim_tensor *bias, int *add,
                                     size_t *bytes_before, slim_err *err);

#endif
