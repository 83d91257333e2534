/* test_kernel_util.h - what the operator tests test_linalg_norm.c and
 * test_reduce.c share: a seeded fill, and one-node runs that must succeed
 * or must fail with a given status.
 *
 *     int n_out;
 *     slim_tensor *out = run_ok(g, in, 2, &n_out);   // the test fails on an error
 *     assert_i64(&out[0], (int64_t[]){0, 2}, 2);
 *     slim_tensors_free(out, n_out);
 *
 * run_ok and run_fails consume g (tu_run); run_fails frees the inputs too. */
#ifndef SLIM_TEST_KERNEL_UTIL_H
#define SLIM_TEST_KERNEL_UTIL_H

#include "testutil.h"

#include <stdint.h>

/* n values in [-1, 1) from a linear congruential stream seeded with seed. */
void fill_random(float *v, int64_t n, unsigned seed);
/* Runs g, asserting success. */
slim_tensor *run_ok(slim_graph *g, slim_tensor *in, int n_in, int *n_out);
/* Runs g, asserting it fails with status `want`. */
void run_fails(slim_graph *g, slim_tensor *in, int n_in, slim_status want);
/* Asserts t int64 with the n values of want. */
void assert_i64(const slim_tensor *t, const int64_t *want, int64_t n);

#endif
