/*
 * test_pass_rewrite_util.h - what the rewriting-pass tests
 * (test_pass_rewrite.c, test_pass_rewrite_gelu.c) share: building a small
 * graph in G, and loading it twice (as written and after every pass) to
 * run both on one input.
 *
 *     static void build(void) { begin(2, (int64_t[]){-1, 16}); scalar("c", 2.0f);
 *                               op("Mul", "y", 2, "x", "c"); output("y"); }
 *     pair p = both(build, 2, (int64_t[]){3, 16}, 1.0f, 1e-6); // outputs agree
 *     ck_assert_int_eq(count_op(p.opt->graph, "Mul"), 1);
 *     pair_free(&p);
 */
#ifndef SLIM_TEST_PASS_REWRITE_UTIL_H
#define SLIM_TEST_PASS_REWRITE_UTIL_H

#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

extern slim_graph *G;       /* the graph being built */
extern uint32_t rng_state;  /* rndf's linear congruential stream; cases reseed it */

float rndf(void);
/* A new graph, opset 17, with float32 input "x" of the given shape (-1: a
 * dynamic dim). */
void begin(int ndim, const int64_t *dims);
void init(const char *name, slim_tensor t);
/* A float32 scalar (rank 0) initializer. */
void scalar(const char *name, float c);
void ints(const char *name, int n, const int64_t *v);
/* A float32 vector of n values in [lo, hi). */
void vec(const char *name, int64_t n, float lo, float hi);
/* Appends node `out` (named as its output) reading the n_in names after. */
slim_node *op(const char *op_type, const char *out, int n_in, ...);
void output(const char *name);
int count_op(const slim_graph *g, const char *op_type);

typedef void (*build_fn)(void);

typedef struct pair {
    slim_model *ref, *opt;
} pair;

/* G built by build (and consumed), optimized when passes is true. */
slim_model *load(build_fn build, bool passes);
/* Runs both models on x of the given shape (values in [-scale, scale)) and
 * checks each output within tol of the largest reference magnitude. */
void agree(const pair *p, int ndim, const int64_t *dims, float scale, double tol);
pair both(build_fn build, int ndim, const int64_t *dims, float scale, double tol);
void pair_free(pair *p);

#endif
