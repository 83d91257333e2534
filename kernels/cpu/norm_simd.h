/*
 * norm_simd.h - the vector rows of norm.c's LayerNormalization.
 */
#ifndef SLIM_NORM_SIMD_H
#define SLIM_NORM_SIMD_H

#include <stdbool.h>
#include <stdint.h>

/* rows rows of r floats from xs to ys (xs == ys allowed): y = (x - mean) /
 * sqrt(var + eps) * scale + bias (bias NULL: none), mean 0 when rms; in
 * float32, the statistics corrected by a second pass (norm_simd.c). The
 * AVX-512 rows where the CPU has them (and SLIM_LN_PORTABLE is not 1),
 * else portable ones (the same method, summed in another order): what
 * LayerNormalization computes for float32 (norm.c), so a fused caller gets
 * its bits. */
void slim_ln_rows_f32(const float *xs, float *ys, int64_t rows, int64_t r, bool rms, float eps,
                      const float *scale, const float *bias);

#if defined(__x86_64__) && defined(__GNUC__)
/* The same rows on AVX-512F and VL, only on a CPU that has them. */
void slim_ln_rows_f32_avx512(const float *xs, float *ys, int64_t rows, int64_t r, bool rms,
                             float eps, const float *scale, const float *bias);
#endif

#endif
