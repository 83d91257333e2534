/*
 * norm_simd.c - LayerNormalization rows of float32 on AVX-512 (norm.c
 * chooses it by CPUID; its ln_rows_f32 is the portable path).
 */
#include "norm_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>

/* The rows sixteen floats at a time, in float32 with a correction: the
 * mean m of a first pass, then c = sum(x - m) and q = sum((x - m)^2) in a
 * second, so mean = m + c / r and var = (q - c^2 / r) / r are the centred
 * statistics even where m was rounded (x = 50 +- 10: within 2e-6 of a
 * long double reference, as the tests hold them). Each sum runs in two 16-lane accumulators over the row
 * in order, then a fixed tree, so a row's result depends on the row alone.
 * The double version spent a third of a short row (d = 64: 128 rows took 5
 * us) in its dependency chain of conversions and sums. */
__attribute__((target("avx512f,avx512vl")))
static inline __mmask16 ln_tail(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

__attribute__((target("avx512f,avx512vl")))
void slim_ln_rows_f32_avx512(const float *xs, float *ys, int64_t rows, int64_t r, bool rms,
                             float eps, const float *scale, const float *bias)
{
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t o = 0; o < rows; o++) {
        const float *x = xs + o * r;
        float *y = ys + o * r;
        float m = 0;
        if (!rms) {
            __m512 a0 = zero, a1 = zero;
            int64_t i = 0;
            for (; i + 32 <= r; i += 32) {
                a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
                a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
            }
            for (; i < r; i += 16)
                a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(ln_tail(r - i), x + i));
            m = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) / (float)r;
        }
        __m512 vm = _mm512_set1_ps(m), c0 = zero, c1 = zero, q0 = zero, q1 = zero;
        int64_t i = 0;
        for (; i + 32 <= r; i += 32) {
            __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
            __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm);
            c0 = _mm512_add_ps(c0, d0);
            c1 = _mm512_add_ps(c1, d1);
            q0 = _mm512_fmadd_ps(d0, d0, q0);
            q1 = _mm512_fmadd_ps(d1, d1, q1);
        }
        for (; i < r; i += 16) {
            __mmask16 k = ln_tail(r - i);
            __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), vm);
            c0 = _mm512_add_ps(c0, d);
            q0 = _mm512_fmadd_ps(d, d, q0);
        }
        float c = rms ? 0.0f : _mm512_reduce_add_ps(_mm512_add_ps(c0, c1));
        float q = _mm512_reduce_add_ps(_mm512_add_ps(q0, q1));
        float var = (q - c * (c / (float)r)) / (float)r;
        float inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
        __m512 vmean = _mm512_set1_ps(m + c / (float)r), vi = _mm512_set1_ps(inv);
        for (i = 0; i < r; i += 16) {
            __mmask16 k = ln_tail(r - i);
            __m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vmean), vi);
            __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + i) : zero;
            _mm512_mask_storeu_ps(y + i, k,
                                  _mm512_fmadd_ps(t, _mm512_maskz_loadu_ps(k, scale + i), b));
        }
    }
}

#endif
