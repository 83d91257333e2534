/*
 * norm_simd.c - LayerNormalization rows of float32 on AVX-512 (norm.c
 * chooses it by CPUID; its ln_rows_f32 is the portable path).
 */
#include "norm_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>

/* ln_rows_f32 eight doubles at a time: the sums in two 8-lane doubles
 * accumulators (a fixed order per row length, so a row's result does not
 * depend on the rows beside it), the affine step fused. The scalar loops
 * could not be vectorized (a double sum may not be reordered) and cost a
 * few percent of an encoder. */
__attribute__((target("avx512f,avx512vl")))
static double ln_hsum(__m512d a)
{
    __m256d lo = _mm512_castpd512_pd256(a), hi = _mm512_extractf64x4_pd(a, 1);
    __m256d s = _mm256_add_pd(lo, hi);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

__attribute__((target("avx512f,avx512vl")))
void slim_ln_rows_f32_avx512(const float *xs, float *ys, int64_t rows, int64_t r, bool rms,
                             double eps, const double *scale, const double *bias)
{
    for (int64_t o = 0; o < rows; o++) {
        const float *x = xs + o * r;
        float *y = ys + o * r;
        double m = 0;
        if (!rms) {
            __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
            int64_t i = 0;
            for (; i + 16 <= r; i += 16) {
                a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
                a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)));
            }
            for (; i < r; i += 8) {
                __mmask8 k = r - i >= 8 ? 0xff : (__mmask8)((1u << (r - i)) - 1);
                a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i)));
            }
            m = ln_hsum(_mm512_add_pd(a0, a1)) / (double)r;
        }
        __m512d vm = _mm512_set1_pd(m), s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
        int64_t i = 0;
        for (; i + 16 <= r; i += 16) {
            __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), vm);
            __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), vm);
            s0 = _mm512_fmadd_pd(d0, d0, s0);
            s1 = _mm512_fmadd_pd(d1, d1, s1);
        }
        for (; i < r; i += 8) {
            __mmask8 k = r - i >= 8 ? 0xff : (__mmask8)((1u << (r - i)) - 1);
            __m512d d = _mm512_maskz_sub_pd(k, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i)), vm);
            s0 = _mm512_fmadd_pd(d, d, s0);
        }
        double inv = 1.0 / sqrt(ln_hsum(_mm512_add_pd(s0, s1)) / (double)r + eps);
        __m512d vi = _mm512_set1_pd(inv);
        for (i = 0; i < r; i += 8) {
            __mmask8 k = r - i >= 8 ? 0xff : (__mmask8)((1u << (r - i)) - 1);
            __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i)), vm);
            __m512d v = _mm512_fmadd_pd(_mm512_mul_pd(d, vi), _mm512_maskz_loadu_pd(k, scale + i),
                                        _mm512_maskz_loadu_pd(k, bias + i));
            _mm256_mask_storeu_ps(y + i, k, _mm512_cvtpd_ps(v));
        }
    }
}

#endif
