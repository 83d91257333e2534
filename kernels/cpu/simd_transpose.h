/*
 * simd_transpose.h - a 16 x 16 float transpose in AVX-512 registers, for
 * the kernels that turn rows into columns on the way into a panel:
 *
 *     __m512 r[16];                      (r[i]: row i, 16 floats)
 *     ... load the rows (zeros past the edge) ...
 *     slim__transpose16_ps(r);           (r[j]: column j; lane i is row i's)
 *
 * Element by element, such a copy was the larger part of a short product
 * (sgemm_panel.c's panel of B transposed) and 60% of a 16-token attention
 * head (attention_core.c's K transposed), and 16-lane gathers were slower
 * still. Shuffles only, so no value changes. Header-only and always
 * inlined: the callers keep r in registers around it, and each is itself
 * compiled for AVX-512 (target attribute), which this must inline into.
 */
#ifndef SLIM_SIMD_TRANSPOSE_H
#define SLIM_SIMD_TRANSPOSE_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

__attribute__((target("avx512f"), always_inline)) static inline void
slim__transpose16_ps(__m512 r[16])
{
    __m512 t[16];
    /* Within each 128-bit lane: pairs of rows interleaved, then pairs of
     * pairs, so that r[4g + c]'s lane L holds column 4L + c of rows
     * 4g..4g+3. */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* Then the four groups' lanes gathered: column 4L + c takes lane L of
     * r[c], r[4 + c], r[8 + c], r[12 + c] (six lane shuffles per c, where
     * two rounds over all sixteen take eight). */
    for (int c = 0; c < 4; c++) {
        const __m512 u = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
        const __m512 v = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 w = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 x = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_f32x4(u, w, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(u, w, 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(v, x, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(v, x, 0xDD);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}
#endif

#endif
