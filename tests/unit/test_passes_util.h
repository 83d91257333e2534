/*
 * test_passes_util.h - what the pass tests (test_passes.c,
 * test_passes_matmul.c) share: a seeded stream of weights, nodes added by
 * name, a model run on its one input "x", and a comparison scaled by the
 * reference's largest value.
 *
 *     tp_rng = 7;
 *     tp_add_init(g, "w", 2, (int64_t[]){64, 128}, -0.3f, 0.3f);
 *     tp_node(g, "mm", "MatMul", 2, (const char *[]){"x", "w"}, "y");
 *     slim_tensor a = tp_run(ref, &x), b = tp_run(opt, &x);
 *     tp_assert_close(&b, &a, 1e-5);
 *
 * A model's graph is built the same way before and after a pass, so the
 * stream's seed (tp_rng) is set by whoever builds one, and every value is
 * drawn in the same order as when these lived in one file.
 */
#ifndef SLIM_TEST_PASSES_UTIL_H
#define SLIM_TEST_PASSES_UTIL_H

#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>

/* The state of the weights' stream (tu_rndf's linear congruential one). */
extern uint32_t tp_rng;

/* The next value of the stream, in [-1, 1). */
float tp_rndf(void);
/* An initializer `name` of float32 values uniform in [lo, hi). */
void tp_add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims, float lo,
                 float hi);
/* A default-domain node of opset 17 named `name`; returns its index. */
int tp_node(slim_graph *g, const char *name, const char *op, int n_in, const char *const *in,
            const char *out);
/* Makes "x" the graph's float32 input and "y" its output. */
void tp_graph_io(slim_graph *g);
/* Runs m on "x" and returns its first output (the others are released). */
slim_tensor tp_run(slim_model *m, const slim_tensor *x);
/* Every element of a within rel times ref's largest magnitude (which must
 * be over 0.1: a graph that outputs zeros would prove nothing). */
void tp_assert_close(const slim_tensor *a, const slim_tensor *ref, double rel);

/* The MatMul + bias + GELU (erf form, as exported) -> MatMul + bias + Relu
 * MLP that the FusedMatMul tests fuse: x [.., k] -> y [.., no], weights
 * uniform in [-w, w), b1 in [-b1, b1), b2 in [-0.2, 0.2), drawn after
 * tp_rng = seed. bias_first writes the second Add as Add(b2, h2), the
 * operand order the fusion must also accept. */
typedef struct {
    uint32_t seed;
    int64_t k, h, no;
    float w, b1;
    bool bias_first;
} tp_mlp_spec;
slim_graph *tp_mlp(const tp_mlp_spec *s);

/* A float32 tensor of dims from the stream, seeded with seed first. */
slim_tensor tp_input(uint32_t seed, int ndim, const int64_t *dims);
/* Runs ref and opt on x and asserts their first outputs within rel (as
 * tp_assert_close); then releases x and frees both models. */
void tp_compare_and_free(slim_model *ref, slim_model *opt, slim_tensor x, double rel);
/* Each image of x (its first dimension) run alone through m gives bitwise
 * its part of all, m's output for the whole of x; what names the case. */
void tp_assert_batch_invariant(slim_model *m, const slim_tensor *x, const slim_tensor *all,
                               const char *what);

/* The pass tests' main: slim_init, the environment they are written for
 * (two threads: FusedMatMul's column parts, one per thread; mapped weights
 * packed too), then suite; 1 when a case failed. */
int tp_main(Suite *suite);

#endif
