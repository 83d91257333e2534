/*
 * norm_simd.h - the vector rows of norm.c's LayerNormalization.
 */
#ifndef SLIM_NORM_SIMD_H
#define SLIM_NORM_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
/* rows rows of r floats from xs to ys: y = (x - mean) / sqrt(var + eps) *
 * scale + bias, mean 0 when rms; statistics and the affine step in double,
 * as the portable rows. Only on a CPU with AVX-512F and VL. */
void slim_ln_rows_f32_avx512(const float *xs, float *ys, int64_t rows, int64_t r, bool rms,
                             double eps, const double *scale, const double *bias);
#endif

#endif
