/*
 * sgemm_panel.h - a float32 product on the calling thread, with no JIT and
 * no BLAS: for the short products a kernel splits across the pool itself
 * (the attention core's Q K^T and P V, through slim_sgemm_serial).
 *
 *     if (!slim__sgemm_panel(trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
 *         ... run it some other way (no AVX-512 here, or no memory for the panel)
 *
 * Why it exists: oneDNN's sgemm builds its JIT kernels (3.4 MiB of
 * executable pages) on its first call and keeps them for the life of the
 * process; no API frees them. An int8 model's only float32 products are its
 * attention's, so sending those here keeps a server that loaded and
 * unloaded such a model at the RSS it started with (docs/memory.md, "Giving
 * back").
 *
 * Every element of C is alpha times one chain of fused multiply-adds over
 * k in order (plus beta times C), whatever m is and wherever its row sits:
 * a row's result does not depend on the rows that share the call.
 */
#ifndef SLIM_SGEMM_PANEL_H
#define SLIM_SGEMM_PANEL_H

#include <stdbool.h>
#include <stdint.h>

/* C[m x n] = alpha * A[m x k] * op(B) + beta * C, row-major, A not
 * transposed; op(B) is B [k x n] or, with trans_b, B [n x k] transposed.
 * beta 0 ignores C's contents. Returns false, having done nothing, when it
 * cannot run here (no AVX-512, or no memory for B's panel). */
bool slim__sgemm_panel(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc);

#endif
