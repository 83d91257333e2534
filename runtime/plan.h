/*
 * plan.h - activation memory planning: one arena per input-shape signature.
 *
 *     const slim_plan *p;
 *     slim_model_plan(m, input_shapes, &p, &err);  (cached per signature)
 *     ... p->arena_bytes, p->buffer_of_value[v], p->buffers[b].offset
 *
 * For one set of input shapes the planner infers every value's shape
 * (slim_model_infer_shapes), gathers values that share storage into
 * buffers (a view and its source; an elementwise output written in place
 * over an input read for the last time), gives each buffer a lifetime in
 * node steps, and assigns offsets in one arena so that buffers alive at
 * the same step never overlap (greedy by size with best fit, Pisarchyk &
 * Lee 2020; the smaller of that and greedy by breadth is kept).
 *
 * Not planned, and allocated on their own at run time: graph inputs and
 * weights (borrowed), graph outputs and anything that shares storage with
 * one (they outlive the run), and values whose shape depends on data the
 * planner cannot see. A run gets its arena from the device allocator in
 * one block and drops it at the end.
 *
 * lower_bound_bytes is the largest sum of planned buffer sizes alive at any
 * one step: no placement of these buffers can use less.
 */
#ifndef SLIM_PLAN_H
#define SLIM_PLAN_H

#include "model.h"

#include <stdio.h>

#define SLIM_PLAN_ALIGN 64

typedef struct slim_plan_buffer {
    int root;                   /* the value whose node allocates it */
    size_t size;                /* bytes (unaligned) */
    size_t offset;              /* in the arena, SLIM_PLAN_ALIGN aligned */
    int first, last;            /* node steps it is alive, inclusive */
    int n_values;               /* values stored in it (views, in-place outputs) */
} slim_plan_buffer;

typedef struct slim_plan {
    int n_inputs;
    slim_tensor *inputs;        /* the signature: dtype and shape of each graph input */
    int64_t batch;              /* dims[0] of the first input, -1 when it has none */
    size_t arena_bytes;
    size_t lower_bound_bytes;
    size_t naive_bytes;         /* every planned value in its own buffer */
    int n_inplace;              /* outputs written over their input */
    int n_buffers;
    slim_plan_buffer *buffers;
    int n_values;
    int *buffer_of_value;       /* [n_values]: index into buffers, -1 when not planned */
    size_t *value_bytes;        /* [n_values]: planned byte size (0 when not planned) */
    const char *strategy;       /* "greedy-by-size" or "greedy-by-breadth" */
} slim_plan;

/* input_shapes[i] gives dtype and shape of graph input i (data unused).
 * Fails only on errors shape inference reports. */
slim_status slim_plan_build(const slim_model *m, const slim_tensor *input_shapes,
                            slim_plan **out, slim_err *err);
void slim_plan_free(slim_plan *p);

/* Human-readable plan: one line per buffer (values, size, lifetime,
 * offset), then "arena_bytes: N", "lower_bound_bytes: N" and friends. */
void slim_plan_print(const slim_model *m, const slim_plan *p, FILE *f);

/* The model's plan for these input shapes: built on first use, cached in
 * the model (thread-safe) and valid until the model is freed. Up to
 * SLIM_PLAN_CACHE_MAX signatures are cached; past that *out is a new plan
 * that the caller frees (*owned set true). */
#define SLIM_PLAN_CACHE_MAX 64
slim_status slim_model_plan(const slim_model *m, const slim_tensor *input_shapes,
                            const slim_plan **out, bool *owned, slim_err *err);

/* Snapshot of the cached plans, for metrics: up to cap (batch, arena_bytes)
 * pairs; returns how many. */
int slim_model_plan_sizes(const slim_model *m, int64_t *batch, size_t *arena_bytes, int cap);

/* The cache's life, tied to the model's (model.c). */
struct slim_plan_cache *slim__plan_cache_new(void);
void slim__plan_cache_free(struct slim_plan_cache *c);

#endif
