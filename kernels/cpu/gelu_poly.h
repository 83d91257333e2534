/*
 * gelu_poly.h - ONNX Gelu (approximate "none"), y * (1 + erf(y / sqrt 2)) / 2,
 * for the epilogues of the int8 and half-weight products (qgemm.c, hgemm.c),
 * computed while the outputs are still in registers.
 *
 * Gelu(y) = h + h * erf(y / sqrt 2), h = y / 2. erf by two polynomials
 * (|x| < 0.921875, and 1 - exp(-x^2) * poly(|x|) up to 3.925, then 1), exp
 * by a rounded power of two times a polynomial: within 1e-7 x max(|y|, 1) of
 * the exact Gelu (9.2e-8 measured). Every step is one correctly rounded
 * operation written out -- fmaf, never a * b + c that a compiler may or may
 * not contract -- and the AVX-512 version performs the same ones in the
 * same order, so the two agree bit for bit. (On baseline x86-64 fmaf is a
 * libm call: the C version is exact but slow; it is the oracle and the
 * fallback.)
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
    float h = 0.5f * y, x = y * 0.70710678118654752f;
    float a = fabsf(x), z = a * a;
    float s = 8.36500622e-05f;
    s = fmaf(s, z, -0.000814139203f);
    s = fmaf(s, z, 0.00520090526f);
    s = fmaf(s, z, -0.0268593412f);
    s = fmaf(s, z, 0.112836942f);
    s = fmaf(s, z, -0.376126349f);
    s = fmaf(s, z, 1.12837923f) * a;
    float b = 1.87023306e-06f;
    b = fmaf(b, a, -5.31483784e-05f);
    b = fmaf(b, a, 0.000683296297f);
    b = fmaf(b, a, -0.00526775047f);
    b = fmaf(b, a, 0.0272385683f);
    b = fmaf(b, a, -0.10024523f);
    b = fmaf(b, a, 0.272415906f);
    b = fmaf(b, a, -0.560680807f);
    b = fmaf(b, a, 0.889092207f);
    b = fmaf(b, a, -1.08935606f);
    b = fmaf(b, a, 0.993754804f);
    b = fmaf(-slim_gelu_exp_neg(-z), b, 1.0f);
    float e = a < 0.921875f ? s : a >= 3.925f ? 1.0f : b; /* NaN takes b: NaN */
    return fmaf(h, copysignf(e, x), h);
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
    __m512 x = _mm512_mul_ps(y, _mm512_set1_ps(0.70710678118654752f));
    __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(x)));
    __m512 z = _mm512_mul_ps(a, a);
    __m512 s = _mm512_set1_ps(8.36500622e-05f);
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(-0.000814139203f));
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(0.00520090526f));
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(-0.0268593412f));
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(0.112836942f));
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(-0.376126349f));
    s = _mm512_mul_ps(_mm512_fmadd_ps(s, z, _mm512_set1_ps(1.12837923f)), a);
    __m512 b = _mm512_set1_ps(1.87023306e-06f);
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(-5.31483784e-05f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(0.000683296297f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(-0.00526775047f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(0.0272385683f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(-0.10024523f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(0.272415906f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(-0.560680807f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(0.889092207f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(-1.08935606f));
    b = _mm512_fmadd_ps(b, a, _mm512_set1_ps(0.993754804f));
    __m512 nz = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(z), sign));
    b = _mm512_fnmadd_ps(slim_gelu_exp_neg16(nz), b, _mm512_set1_ps(1.0f)); /* fma(-e, b, 1) */
    __m512 e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(3.925f), _CMP_GE_OQ), b,
                                    _mm512_set1_ps(1.0f));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.921875f), _CMP_LT_OQ), e, s);
    e = _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign, _mm512_castps_si512(e)),
                                            _mm512_and_si512(sign, _mm512_castps_si512(x))));
    return _mm512_fmadd_ps(h, e, h);
}
#endif

#endif
