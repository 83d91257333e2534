/*
 * qgemm_quant.c - the int8 product's per-row activation quantization
 * (qgemm.h): each row of x to u8 with its own scale and zero point, on the
 * C, AVX2 and AVX-512 paths, which agree bit for bit (the C path is the
 * tests' oracle). qgemm.c calls the path's rows function from its
 * scheduled tasks (slim__qgemm_quantizer).
 */
#include "qgemm.h"
#include "qgemm_impl.h"

#include <math.h>
#include <string.h>

/* ---- per-row activation quantization ------------------------------------ */

/* Scale and zero point of a row with minimum lo <= 0 <= hi. Shared by every
 * path so that they agree bit for bit. */
static void row_params(float lo, float hi, float *scale, float *inv, int32_t *zp)
{
    float s = (hi - lo) / 255.0f;
    if (!(s > 0) || !isfinite(s)) {
        /* All zeros: any scale represents them; an overflowing range
         * (hi - lo > FLT_MAX) is treated like a non-finite row. */
        *scale = s > 0 ? NAN : 1.0f;
        *inv = s > 0 ? 0.0f : 1.0f;
        *zp = 0;
        return;
    }
    /* -lo / s is in [0, 255] (lo <= 0 <= hi): adding and taking away 2^23
     * rounds it to the nearest integer, ties to even, as nearbyintf did,
     * without its call (a libm call on the baseline build, which saves and
     * restores the FP environment: the larger part of quantizing a short
     * row). volatile keeps the compiler from folding the two steps. */
    volatile float t = -lo / s + 0x1.0p23f;
    int32_t z = (int32_t)(t - 0x1.0p23f);
    *zp = z < 0 ? 0 : z > 255 ? 255 : z;
    *scale = s;
    *inv = 1.0f / s;
}

static void quantize_row_c(const float *x, int64_t k, uint8_t *q, float *scale, int32_t *zp)
{
    int64_t k4 = slim_qgemm_k4(k);
    float probe = 0, lo = 0, hi = 0;
    for (int64_t i = 0; i < k; i++)
        probe += x[i] * 0.0f; /* NaN when any element is NaN or infinite */
    if (probe != 0) {
        memset(q, 0, (size_t)k4);
        *scale = NAN;
        *zp = 0;
        return;
    }
    for (int64_t i = 0; i < k; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float inv;
    row_params(lo, hi, scale, &inv, zp);
    for (int64_t i = 0; i < k; i++) {
        int32_t v = (int32_t)nearbyintf(x[i] * inv) + *zp;
        q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    memset(q + k, 0, (size_t)(k4 - k));
}

#ifdef QGEMM_X86

/* The row's minimum (with 0) and maximum (with 0) in one reduction tree:
 * max over hi's lanes and over -lo's lanes side by side, 4 shuffles. */
AVX512_TARGET
static inline void minmax_reduce(__m512 lo, __m512 hi, float *mn, float *mx)
{
    __m512 nlo = _mm512_sub_ps(_mm512_setzero_ps(), lo);
    __m512 m = _mm512_max_ps(_mm512_shuffle_f32x4(hi, nlo, 0x44), _mm512_shuffle_f32x4(hi, nlo, 0xEE));
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0xB1));
    m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4E));
    m = _mm512_max_ps(m, _mm512_permute_ps(m, 0xB1));
    *mx = _mm512_cvtss_f32(m);
    *mn = -_mm512_cvtss_f32(_mm512_shuffle_f32x4(m, m, 0xEE));
}

/* The range of n floats with 0 (min <= 0 <= max) into *mn and *mx, and
 * whether any is NaN or infinite (fpclass: QNaN, +Inf, -Inf, SNaN): 1 or
 * 0. min and max are exact, so the order of the lanes cannot matter (a
 * zero's sign may, and the scales made from the range are the same). */
AVX512_TARGET __attribute__((always_inline))
static inline unsigned range_avx512(const float *x, int64_t n, float *mn, float *mx)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512 lo0 = zero, lo1 = zero, hi0 = zero, hi1 = zero;
    __mmask16 b = 0;
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
        __m512 v0 = _mm512_loadu_ps(x + c), v1 = _mm512_loadu_ps(x + c + 16);
        b |= _mm512_fpclass_ps_mask(v0, 0x99) | _mm512_fpclass_ps_mask(v1, 0x99);
        lo0 = _mm512_min_ps(lo0, v0);
        hi0 = _mm512_max_ps(hi0, v0);
        lo1 = _mm512_min_ps(lo1, v1);
        hi1 = _mm512_max_ps(hi1, v1);
    }
    for (; c < n; c += 16) {
        __mmask16 mk = n - c >= 16 ? 0xFFFF : (__mmask16)((1u << (n - c)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(mk, x + c);
        b |= _mm512_fpclass_ps_mask(v, 0x99);
        lo0 = _mm512_min_ps(lo0, v);
        hi0 = _mm512_max_ps(hi0, v);
    }
    minmax_reduce(_mm512_min_ps(lo0, lo1), _mm512_max_ps(hi0, hi1), mn, mx);
    return b != 0;
}

AVX512_TARGET __attribute__((noinline))
static unsigned range_avx512_call(const float *x, int64_t n, float *mn, float *mx)
{
    return range_avx512(x, n, mn, mx);
}

/* Rows a block at a time in three passes -- every row's range, then every
 * row's scale and zero point, then every row's bytes -- so that the
 * out-of-order core overlaps one row's reductions and divisions with the
 * next row's instead of waiting on each: a short row (d = 64) had been one
 * chain of latencies, 85 cycles. Each row gets the arithmetic of the C path
 * (the same range, row_params, and rounding), so the results are bitwise
 * the same. */
#define QROWS 16

AVX512_TARGET
static void quantize_rows_avx512(const float *x, int64_t ldx, int64_t rows, int64_t k, uint8_t *q,
                                 int64_t ldq, float *scale, int32_t *zp)
{
    int64_t k4 = slim_qgemm_k4(k);
    for (int64_t r0 = 0; r0 < rows; r0 += QROWS) {
        int n = rows - r0 < QROWS ? (int)(rows - r0) : QROWS;
        float mn[QROWS], mx[QROWS], inv[QROWS];
        unsigned bad = 0;
        for (int i = 0; i < n; i++)
            bad |= range_avx512(x + (r0 + i) * ldx, k, &mn[i], &mx[i]) << i;
        for (int i = 0; i < n; i++) {
            if (bad >> i & 1) {
                scale[r0 + i] = NAN;
                zp[r0 + i] = 0;
            } else {
                row_params(mn[i], mx[i], &scale[r0 + i], &inv[i], &zp[r0 + i]);
            }
        }
        const __m512i v0 = _mm512_setzero_si512();
        for (int i = 0; i < n; i++) {
            const float *xr = x + (r0 + i) * ldx;
            uint8_t *qr = q + (r0 + i) * ldq;
            if (bad >> i & 1) {
                memset(qr, 0, (size_t)k4);
                continue;
            }
            __m512 vinv = _mm512_set1_ps(inv[i]);
            __m512i vzp = _mm512_set1_epi32(zp[r0 + i]);
            /* _mm512_cvtps_epi32 rounds by MXCSR, to nearest even by
             * default: the same as nearbyintf in the C path. */
            /* max(v, 0) then unsigned saturation to 255; whole vectors
             * stored plainly (a masked store costs several on Zen 4). */
            int64_t c = 0;
            for (; c + 16 <= k; c += 16) {
                __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xr + c), vinv));
                v = _mm512_max_epi32(_mm512_add_epi32(v, vzp), v0);
                _mm_storeu_si128((__m128i *)(qr + c), _mm512_cvtusepi32_epi8(v));
            }
            if (c < k) {
                __mmask16 mk = (__mmask16)((1u << (k - c)) - 1);
                __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xr + c), vinv));
                v = _mm512_max_epi32(_mm512_add_epi32(v, vzp), v0);
                _mm_mask_storeu_epi8(qr + c, mk, _mm512_cvtusepi32_epi8(v));
            }
            if (k4 > k)
                memset(qr + k, 0, (size_t)(k4 - k));
        }
    }
}

/* The same on AVX2 (the C loop took 20x as long: 0.4 ms for 128 rows of
 * 768, a sixth of the AVX2 product's time). The tail of k % 8 elements
 * goes through the C expressions, which round the same way. */
AVX2_TARGET
static void quantize_row_avx2(const float *x, int64_t k, uint8_t *q, float *scale, int32_t *zp)
{
    int64_t k4 = slim_qgemm_k4(k), k8 = k & ~(int64_t)7, i = 0;
    __m256 zero = _mm256_setzero_ps(), probe = zero, lo = zero, hi = zero;
    for (; i < k8; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        probe = _mm256_add_ps(probe, _mm256_mul_ps(v, zero));
        lo = _mm256_min_ps(lo, v);
        hi = _mm256_max_ps(hi, v);
    }
    float pr[8], l8[8], h8[8], p = 0, l = 0, h = 0;
    _mm256_storeu_ps(pr, probe);
    _mm256_storeu_ps(l8, lo);
    _mm256_storeu_ps(h8, hi);
    for (int c = 0; c < 8; c++) {
        p += pr[c];
        l = l8[c] < l ? l8[c] : l;
        h = h8[c] > h ? h8[c] : h;
    }
    for (; i < k; i++) {
        p += x[i] * 0.0f;
        l = x[i] < l ? x[i] : l;
        h = x[i] > h ? x[i] : h;
    }
    if (p != 0) { /* a NaN or an infinity somewhere */
        memset(q, 0, (size_t)k4);
        *scale = NAN;
        *zp = 0;
        return;
    }
    float inv;
    row_params(l, h, scale, &inv, zp);
    __m256 vinv = _mm256_set1_ps(inv);
    __m256i vzp = _mm256_set1_epi32(*zp), v0 = _mm256_setzero_si256(),
            v255 = _mm256_set1_epi32(255);
    for (i = 0; i < k8; i += 8) {
        /* cvtps rounds to nearest even (MXCSR default), as nearbyintf */
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
        v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, vzp), v0), v255);
        __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(w, w));
    }
    for (; i < k; i++) {
        int32_t v = (int32_t)nearbyintf(x[i] * inv) + *zp;
        q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    memset(q + k, 0, (size_t)(k4 - k));
}
#endif

static void quantize_rows_c(const float *x, int64_t ldx, int64_t rows, int64_t k, uint8_t *q,
                            int64_t ldq, float *scale, int32_t *zp)
{
    for (int64_t i = 0; i < rows; i++)
        quantize_row_c(x + i * ldx, k, q + i * ldq, &scale[i], &zp[i]);
}

#ifdef QGEMM_X86
static void quantize_rows_avx2(const float *x, int64_t ldx, int64_t rows, int64_t k, uint8_t *q,
                               int64_t ldq, float *scale, int32_t *zp)
{
    for (int64_t i = 0; i < rows; i++)
        quantize_row_avx2(x + i * ldx, k, q + i * ldq, &scale[i], &zp[i]);
}
#endif

slim__qgemm_rows_fn slim__qgemm_quantizer(slim_qgemm_isa isa)
{
#ifdef QGEMM_X86
    if (isa == SLIM_QGEMM_AVX512VNNI)
        return quantize_rows_avx512;
    if (isa == SLIM_QGEMM_AVX2)
        return quantize_rows_avx2;
#endif
    (void)isa;
    return quantize_rows_c;
}

void slim_qgemm_quantize_row(const float *x, int64_t k, uint8_t *q, float *scale,
                             int32_t *zero_point)
{
#ifdef QGEMM_X86
    slim_qgemm_isa isa = slim_qgemm_get_isa();
    if (isa == SLIM_QGEMM_AVX512VNNI) {
        quantize_rows_avx512(x, k, 1, k, q, slim_qgemm_k4(k), scale, zero_point);
        return;
    }
    if (isa == SLIM_QGEMM_AVX2) {
        quantize_row_avx2(x, k, q, scale, zero_point);
        return;
    }
#endif
    quantize_row_c(x, k, q, scale, zero_point);
}

void slim_qgemm_quantize_rows(const float *x, int64_t ldx, int64_t rows, int64_t k, uint8_t *q,
                              float *scale, int32_t *zero_point)
{
    int64_t k4 = slim_qgemm_k4(k);
#ifdef QGEMM_X86
    slim_qgemm_isa isa = slim_qgemm_get_isa();
    if (isa == SLIM_QGEMM_AVX512VNNI) {
        quantize_rows_avx512(x, ldx, rows, k, q, k4, scale, zero_point);
        return;
    }
    if (isa == SLIM_QGEMM_AVX2) {
        quantize_rows_avx2(x, ldx, rows, k, q, k4, scale, zero_point);
        return;
    }
#endif
    quantize_rows_c(x, ldx, rows, k, q, k4, scale, zero_point);
}

/* The range of n floats with 0, and whether any is NaN or infinite (see
 * qgemm_impl.h): the row quantizer's reduction, shared with the per-image
 * quantization of convolutions (qconv_image.c). The C loop writes min and
 * max as the vector instructions compute them (v < lo ? v : lo). */
void slim__f32_range(slim_qgemm_isa isa, const float *x, int64_t n, float *lo, float *hi,
                     unsigned *bad)
{
#ifdef QGEMM_X86
    if (isa == SLIM_QGEMM_AVX512VNNI) {
        *bad = range_avx512_call(x, n, lo, hi);
        return;
    }
#endif
    (void)isa;
    float l = 0.0f, h = 0.0f;
    unsigned b = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        uint32_t u;
        memcpy(&u, &v, sizeof(u));
        b |= (u & 0x7f800000u) == 0x7f800000u;
        l = v < l ? v : l;
        h = v > h ? v : h;
    }
    *lo = l;
    *hi = h;
    *bad = b;
}
