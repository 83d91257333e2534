/*
 * pattern.h - what the passes that recognize spelled-out functions
 * (fuse_layernorm.c, fuse_gelu.c) walk the graph with.
 *
 *     slim__pattern p;
 *     if ((st = slim__pattern_init(&p, g, err))) return st;
 *     ... slim__pattern_sole(&p, v, "Sqrt") ... p.w.dead[i] = true ...
 *     return slim__pattern_finish(&p, g, st);   (sweeps the dead nodes)
 *
 * The reader lists are of the graph as it was at init: a matcher rewrites
 * only the last node of what it matched (in place, keeping its output) and
 * marks the rest dead, so the lists stay true for every value a later
 * match can reach.
 */
#ifndef SLIM_PATTERN_H
#define SLIM_PATTERN_H

#include "pass.h"

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
/* Sets a string attribute on n (copied). */
slim_status slim__pattern_set_string(slim_node *n, const char *name, const char *v,
                                     slim_err *err);

#endif
