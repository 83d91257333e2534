/*
 * gelu_poly.h - ONNX Gelu (approximate "none"), y * (1 + erf(y / sqrt 2)) / 2,
 * for the epilogues of the int8 and half-weight products (qgemm.c, hgemm.c),
 * computed while the outputs are still in registers.
 *
 * Gelu(y) = y Phi(y). With a = |y| and the upper tail Q(a) = 1 - Phi(a),
 * Gelu(y) = y - y Q(a) for y >= 0 and y Q(a) below: no 1 + erf that
 * cancels for negative y, one branch for every y. Q comes from a table of
 * polynomials (gelu_table.h, made by scripts/gen_gelu_table.py): [0, 5.5)
 * in 16 intervals, each a degree-5 polynomial in the position u in [0, 1)
 * inside it; beyond 5.5, Q < 1.9e-8 is taken as 0. Within 1e-7 x max(|y|,
 * 1) of the exact Gelu (7.5e-8 measured on [-10, 10]). In AVX-512 the six
 * coefficients of 16 lanes are six vpermps from registers: about 22
 * operations a vector with no division and no exp, against 36 (one a
 * vdivps) for the Abramowitz-Stegun erf it replaces, whose Gelu took half
 * the time of a 128 x 256 x 64 int8 product with it.
 *
 * Every step is one correctly rounded operation written out -- fmaf, never
 * a * b + c that a compiler may or may not contract -- and the AVX-512
 * version performs the same ones in the same order, so the two agree bit
 * for bit. (On baseline x86-64 fmaf and floorf are libm calls: the C
 * version is exact but slow; it is the oracle and the fallback.)
 */
#ifndef SLIM_GELU_POLY_H
#define SLIM_GELU_POLY_H

#include "gelu_table.h"

#include <math.h>
#include <stdint.h>

static inline float slim_gelu_poly(float y)
{
    float a = fabsf(y), t = a * SLIM_GELU_SCALE, fi = floorf(t);
    /* NaN and t >= 16 take interval 0: their lanes end as NaN or masked */
    int i = t < (float)SLIM_GELU_N ? (int)fi : 0;
    float u = t - fi; /* exact */
    float p = slim_gelu_coef[5][i];
    p = fmaf(p, u, slim_gelu_coef[4][i]);
    p = fmaf(p, u, slim_gelu_coef[3][i]);
    p = fmaf(p, u, slim_gelu_coef[2][i]);
    p = fmaf(p, u, slim_gelu_coef[1][i]);
    p = fmaf(p, u, slim_gelu_coef[0][i]);
    float yq = y * p;
    if (a >= SLIM_GELU_AMAX)
        yq = 0.0f; /* Gelu is y or 0 to float precision */
    return y >= 0.0f ? y - yq : yq; /* NaN: yq, NaN */
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SLIM_GELU_TARGET __attribute__((target("avx512f,fma"), always_inline))

/* The table in registers: loaded once per epilogue, outside its loops. */
typedef struct {
    __m512 c[6];
} slim_gelu_tab16;

SLIM_GELU_TARGET static inline slim_gelu_tab16 slim_gelu_load16(void)
{
    slim_gelu_tab16 t;
    for (int k = 0; k < 6; k++)
        t.c[k] = _mm512_loadu_ps(slim_gelu_coef[k]);
    return t;
}

/* slim_gelu_poly's operations on 16 values. vpermps reads the low 4 bits
 * of each index, so lanes past the table (NaN, a >= 5.5) pick some
 * interval and are then NaN or masked, as in the C version. */
SLIM_GELU_TARGET static inline __m512 slim_gelu_poly16t(__m512 y, const slim_gelu_tab16 *tb)
{
    __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_set1_epi32((int32_t)0x80000000u),
                                                       _mm512_castps_si512(y)));
    __m512 t = _mm512_mul_ps(a, _mm512_set1_ps(SLIM_GELU_SCALE));
    __m512 fi = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512i i = _mm512_cvttps_epi32(fi);
    __m512 u = _mm512_sub_ps(t, fi);
    __m512 p = _mm512_permutexvar_ps(i, tb->c[5]);
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, tb->c[4]));
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, tb->c[3]));
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, tb->c[2]));
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, tb->c[1]));
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, tb->c[0]));
    __m512 yq = _mm512_maskz_mul_ps(
        ~_mm512_cmp_ps_mask(a, _mm512_set1_ps(SLIM_GELU_AMAX), _CMP_GE_OQ), y, p);
    /* y >= 0 (ordered: NaN takes yq, NaN) */
    __mmask16 pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(pos, yq, _mm512_sub_ps(y, yq));
}

SLIM_GELU_TARGET static inline __m512 slim_gelu_poly16(__m512 y)
{
    slim_gelu_tab16 tb = slim_gelu_load16();
    return slim_gelu_poly16t(y, &tb);
}
#endif

#endif
