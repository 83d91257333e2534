/*
 * gelu_poly.h - ONNX Gelu (approximate "none"), y * (1 + erf(y / sqrt 2)) / 2,
 * for the epilogues of the int8 and half-weight products (qgemm.c, hgemm.c),
 * computed while the outputs are still in registers.
 *
 * With h = y / 2, a = |y| / sqrt 2 and q = 1 - erf(a) = t P(t) exp(-a^2),
 * t = 1 / (1 + p a) (Abramowitz and Stegun 7.1.26: |error| <= 1.5e-7 on
 * erf), Gelu(y) = y - h q for y >= 0 and h q below: no 1 + erf that
 * cancels for negative y, one branch for every y. exp by a rounded power
 * of two times a polynomial. Within 3e-7 x max(|y|, 1) of the exact Gelu
 * (1.5e-7 measured on [-20, 20]); about 36 operations a vector against the 48 of the earlier
 * two-polynomial erf, which took half of a d = 64 int8 product with its
 * epilogue (128 x 256 x 64 with Gelu, one thread: 38.5 -> 33.8 us). Every step is one correctly rounded operation written out --
 * fmaf, never a * b + c that a compiler may or may not contract -- and the
 * AVX-512 version performs the same ones in the same order, so the two
 * agree bit for bit. (On baseline x86-64 fmaf is a libm call: the C version
 * is exact but slow; it is the oracle and the fallback.)
 */
#ifndef SLIM_GELU_POLY_H
#define SLIM_GELU_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float slim_gelu_exp_neg(float x) /* x <= 0 or NaN */
{
    float xc = x < -87.0f ? -87.0f : x; /* 2^n stays normal; NaN passes */
    float n = fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f; /* round */
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float q = 1.9875691500e-4f;
    q = fmaf(q, r, 1.3981999507e-3f);
    q = fmaf(q, r, 8.3334519073e-3f);
    q = fmaf(q, r, 4.1665795894e-2f);
    q = fmaf(q, r, 1.6666665459e-1f);
    q = fmaf(q, r, 5.0000001201e-1f);
    q = fmaf(q * r, r, r) + 1.0f;
    /* 2^n from the low mantissa bits of 2^23 + 127 + n (no float-to-int
     * conversion, which NaN would make undefined) */
    float t = n + 8388735.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof(bits));
    bits = (bits - 0x4B000000u) << 23;
    float sc;
    memcpy(&sc, &bits, sizeof(sc));
    return q * sc;
}

static inline float slim_gelu_poly(float y)
{
    float h = 0.5f * y, a = fabsf(y) * 0.70710678118654752f;
    float t = 1.0f / fmaf(0.3275911f, a, 1.0f);
    float p = 1.061405429f;
    p = fmaf(p, t, -1.453152027f);
    p = fmaf(p, t, 1.421413741f);
    p = fmaf(p, t, -0.284496736f);
    p = fmaf(p, t, 0.254829592f);
    float hq = h * (p * t * slim_gelu_exp_neg(-(a * a)));
    if (a >= 9.0f) /* q < 1e-35: Gelu is y or 0 (exp_neg stops at e^-87) */
        hq = 0.0f;
    return y >= 0.0f ? y - hq : hq; /* NaN: hq, NaN */
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SLIM_GELU_TARGET __attribute__((target("avx512f,fma"), always_inline))

SLIM_GELU_TARGET static inline __m512 slim_gelu_exp_neg16(__m512 x)
{
    __m512 xc = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* NaN passes (2nd operand) */
    __m512 big = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(1.9875691500e-4f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f));
    q = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(q, r), r, r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_castps_si512(_mm512_add_ps(n, _mm512_set1_ps(8388735.0f)));
    bits = _mm512_slli_epi32(_mm512_sub_epi32(bits, _mm512_set1_epi32(0x4B000000)), 23);
    return _mm512_mul_ps(q, _mm512_castsi512_ps(bits));
}

/* slim_gelu_poly's operations on 16 values. */
SLIM_GELU_TARGET static inline __m512 slim_gelu_poly16(__m512 y)
{
    __m512i sign = _mm512_set1_epi32((int32_t)0x80000000u);
    __m512 h = _mm512_mul_ps(_mm512_set1_ps(0.5f), y);
    __m512 a = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(y))),
                             _mm512_set1_ps(0.70710678118654752f));
    __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a,
                                                                   _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    __m512 z = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(a, a)), sign));
    __m512 hq = _mm512_mul_ps(h, _mm512_mul_ps(_mm512_mul_ps(p, t), slim_gelu_exp_neg16(z)));
    hq = _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(a, _mm512_set1_ps(9.0f), _CMP_GE_OQ), hq);
    /* y >= 0 (ordered: NaN takes hq, NaN) */
    __mmask16 pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(pos, hq, _mm512_sub_ps(y, hq));
}
#endif

#endif
