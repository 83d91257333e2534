/*
 * testutil.h - helpers for unit tests: build a one-node graph, give it
 * tensors, run it, compare results.
 *
 *     slim_graph *g = tu_graph("Gemm", 13, 3, (const char *[]){"a", "b", "c"}, 1);
 *     tu_attr_i(tu_node0(g), "transB", 1);
 *     slim_tensor in[3] = {tu_f32(2, (int64_t[]){2, 3}, (float[]){...}), ...};
 *     slim_tensor *out; int n_out; slim_err err;
 *     ck_assert_int_eq(tu_run(g, in, 3, &out, &n_out, &err), SLIM_OK);
 *     tu_assert_close_f32(&out[0], expected, 6, 1e-5);
 *     slim_tensors_free(out, n_out); tu_free_inputs(in, 3);
 *
 * tu_run consumes the graph. Input names NULL or "" are absent optional
 * inputs and get no tensor in `in`.
 */
#ifndef SLIM_TESTUTIL_H
#define SLIM_TESTUTIL_H

#include <check.h>

#include "graph.h"
#include "kernel.h"
#include "model.h"

slim_graph *tu_graph(const char *op_type, int opset, int n_in,
                     const char *const *in_names, int n_out);
slim_node *tu_node0(slim_graph *g);
void tu_attr_i(slim_node *n, const char *name, int64_t v);
void tu_attr_f(slim_node *n, const char *name, float v);
void tu_attr_s(slim_node *n, const char *name, const char *v);
void tu_attr_ints(slim_node *n, const char *name, int count, const int64_t *v);
void tu_attr_floats(slim_node *n, const char *name, int count, const float *v);

slim_tensor tu_tensor(slim_dtype dt, int ndim, const int64_t *dims, const void *data);
slim_tensor tu_f32(int ndim, const int64_t *dims, const float *data);
slim_tensor tu_i64(int ndim, const int64_t *dims, const int64_t *data);
void tu_free_inputs(slim_tensor *in, int n);

slim_status tu_run(slim_graph *g, const slim_tensor *in, int n_in,
                   slim_tensor **out, int *n_out, slim_err *err);

/* Building multi-node graphs for the pass tests: a graph whose one input
 * is "x" (float32, opset 17); initializers of values uniform in [lo, hi)
 * from the linear congruential stream *rng (tu_rndf: [-1, 1)); a
 * default-domain node whose name is its one output's; a count of nodes by
 * operator. */
float tu_rndf(uint32_t *rng);
slim_graph *tu_graph_x(void);
void tu_init_f32(slim_graph *g, uint32_t *rng, const char *name, int ndim, const int64_t *dims,
                 float lo, float hi);
slim_node *tu_op(slim_graph *g, const char *op_type, const char *out, int n_in, ...);
int tu_count_op(const slim_graph *g, const char *op_type);

/* The kernel tests' seeded xorshift stream: the next value of *state, and
 * one in [-1, 1) (2000001 levels). Each test file keeps its own state and
 * reseeds it per case, so its values stay what they were. */
uint32_t tu_xrnd(uint64_t *state);
float tu_xrndf(uint64_t *state);
/* A float32 input of dims, its values tu_rndf(rng) in order after
 * *rng = seed (the pass and conv tests' activations, in [-1, 1)). */
slim_tensor tu_input(uint32_t *rng, uint32_t seed, int ndim, const int64_t *dims);
/* A float32 input of dims, its values tu_xrndf(rng) * 2 in order after
 * *rng = seed (the quantization tests' activations, in [-2, 2)). */
slim_tensor tu_xinput(uint64_t *rng, uint64_t seed, int ndim, const int64_t *dims);

/* The quantization tests' graph helpers: an initializer "name" of values
 * tu_xrndf(rng) * scale (its value index); a graph input `in` of dtype dt
 * and output `out`; x[*, 40] -> MatMul(w[40, 24]) -> Add(b) -> Relu ->
 * Gemm(transB, alpha 0.5, beta 2, C) -> y[*, 9], its weights drawn from
 * seed 42; a model built from g (consumed) and run on `in` as in_name,
 * asserting status `want`: its first output (the rest released), or an
 * empty tensor when it failed. */
int tu_xinit(slim_graph *g, uint64_t *rng, const char *name, int ndim, const int64_t *dims,
             float scale);
void tu_set_io(slim_graph *g, const char *in, slim_dtype dt, const char *out);
slim_graph *tu_two_layers(uint64_t *rng);
/* ids (int64 input) -> Gather(table [50, 33], values tu_xrndf(rng) * 2
 * from the stream as it stands) -> y. */
slim_graph *tu_gather_graph(uint64_t *rng);
/* Asserts a tu_two_layers graph's float weights gone after a weight pass:
 * w and w2 no longer initializers, w's data released. */
void tu_assert_weights_gone(const slim_graph *g);
/* tu_two_layers without its Add(b) and Relu: x[*, 40] -> MatMul -> Gemm -> y[*, 9]. */
slim_graph *tu_mm_gemm(uint64_t *rng);
/* g (consumed) as a model, after every pass when passes is true. */
slim_model *tu_model(slim_graph *g, bool passes);
slim_tensor tu_run1(slim_graph *g, const char *in_name, slim_tensor in, slim_status want,
                    slim_err *err);

/* The largest magnitude among float32 t's elements (0 when empty). */
double tu_max_abs(const slim_tensor *t);
/* Asserts a and ref the same size and every element of a within rel times
 * ref's largest magnitude of ref's. */
void tu_assert_close_max(const slim_tensor *a, const slim_tensor *ref, double rel);

/* g (consumed) with input "x" (float32) and output "y", run on zeros of
 * dims: asserts SLIM_ESHAPE and an error message that contains why. */
void tu_assert_refused(slim_graph *g, int ndim, const int64_t *dims, const char *why);

/* Asserts shape and every element within atol + rtol*|expected|. */
void tu_assert_shape(const slim_tensor *t, int ndim, const int64_t *dims);
void tu_assert_close_f32(const slim_tensor *t, const float *expected, int64_t n, double tol);

#endif
