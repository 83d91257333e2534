/*
 * qconv_image.c - the int8 convolution's per-image u8 path (qconv_impl.h):
 * the image quantized once, byte im2col, the exact product, one epilogue.
 *
 * Why per image: quantizing each im2col row on its own (slim_qgemm's way)
 * quantizes every input pixel kh * kw times -- nine times for a 3x3 conv --
 * and copies four bytes per value into the rows; on ResNet-50 that was
 * 16-18% (quantization) and 11% (im2col) of the int8 run. One scale per
 * image keeps the batching guarantee (nothing depends on the other images)
 * and makes the codes of a pixel the same in every row that reads it, so
 * rows are byte copies and padding is the zero point.
 *
 * Every step is exact or one correctly rounded operation in a fixed order
 * (min and max; x * inv rounded half to even; integer sums; fma, add,
 * max), so the C, AVX2 and AVX-512 paths agree bit for bit and the C path
 * is the tests' oracle.
 */
#include "qconv_impl.h"
#include "qgemm_impl.h"

#include "kernel.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define QI_X86 1
#define QI_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define QI_AVX2 __attribute__((target("avx2,fma")))
#endif

/* ---- the image's range and codes ---------------------------------------- */

#define QI_PARTS 64

typedef struct {
    const float *x;
    uint8_t *q;
    int64_t n, step;
    float lo[QI_PARTS], hi[QI_PARTS];
    unsigned bad[QI_PARTS];
    float inv;
    int32_t zp;
    slim_qgemm_isa isa;      /* the loops of this path */
} qimage_job;

/* round(x * inv) + zp in [0, 255], the product rounded half to even as
 * cvtps2dq does. nearbyintf (a libm call here) rather than adding 1.5 *
 * 2^23: a build allowed FMA would contract that into one rounding.
 * Returns whether x holds a NaN (its code is then meaningless). */
static bool codes_c(const float *x, int64_t n, float inv, int32_t zp, uint8_t *q)
{
    bool nan = false;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) {
            nan = true;
            q[i] = 0;
            continue;
        }
        int32_t v = (int32_t)nearbyintf(x[i] * inv) + zp;
        q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    return nan;
}

#ifdef QI_X86
QI_AVX512
static bool codes_avx512(const float *x, int64_t n, float inv, int32_t zp, uint8_t *q)
{
    __m512 vinv = _mm512_set1_ps(inv);
    __m512i vzp = _mm512_set1_epi32(zp), lo = _mm512_setzero_si512(), hi = _mm512_set1_epi32(255);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 mk = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(mk, x + i);
        nan |= _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q);
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(xv, vinv));
        v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, vzp), lo), hi);
        _mm_mask_storeu_epi8(q + i, mk, _mm512_cvtepi32_epi8(v));
    }
    return nan != 0;
}

QI_AVX2
static bool codes_avx2(const float *x, int64_t n, float inv, int32_t zp, uint8_t *q)
{
    __m256 vinv = _mm256_set1_ps(inv);
    __m256i vzp = _mm256_set1_epi32(zp), lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(255);
    int64_t i = 0;
    int nan = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        nan |= _mm256_movemask_ps(_mm256_cmp_ps(xv, xv, _CMP_UNORD_Q));
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(xv, vinv));
        v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, vzp), lo), hi);
        _Alignas(32) int32_t t[8];
        _mm256_store_si256((__m256i *)t, v);
        for (int k = 0; k < 8; k++)
            q[i + k] = (uint8_t)t[k];
    }
    return codes_c(x + i, n - i, inv, zp, q + i) || nan;
}
#endif

static void minmax_part(int64_t begin, int64_t end, void *user)
{
    qimage_job *j = user;
    for (int64_t t = begin; t < end; t++) {
        int64_t i0 = t * j->step, len = j->n - i0 < j->step ? j->n - i0 : j->step;
        slim__f32_range(j->isa, j->x + i0, len, &j->lo[t], &j->hi[t], &j->bad[t]);
    }
}

static void codes_part(int64_t begin, int64_t end, void *user)
{
    qimage_job *j = user;
    for (int64_t t = begin; t < end; t++) {
        int64_t i0 = t * j->step, len = j->n - i0 < j->step ? j->n - i0 : j->step;
#ifdef QI_X86
        if (j->isa == SLIM_QGEMM_AVX512VNNI) {
            codes_avx512(j->x + i0, len, j->inv, j->zp, j->q + i0);
            continue;
        }
        if (j->isa == SLIM_QGEMM_AVX2) {
            codes_avx2(j->x + i0, len, j->inv, j->zp, j->q + i0);
            continue;
        }
#endif
        codes_c(j->x + i0, len, j->inv, j->zp, j->q + i0);
    }
}

bool slim_qconv_codes_params(float lo, float hi, float *scale, int32_t *zp)
{
    *scale = NAN;
    *zp = 0;
    if (!isfinite(lo) || !isfinite(hi))
        return false;
    lo = lo < 0.0f ? lo : 0.0f;
    hi = hi > 0.0f ? hi : 0.0f;
    /* As slim_qgemm_quantize_row's parameters: 255 levels over the range
     * with 0 inside it; an all-zero range gets scale 1. */
    float s = (hi - lo) / 255.0f;
    *zp = 0;
    *scale = s;
    if (!isfinite(s))
        return false;
    if (!(s > 0)) {
        *scale = 1.0f;
        return true;
    }
    /* -lo / s is in [0, 255]: round half to even without a libm call;
     * volatile keeps the compiler from folding the two steps. */
    volatile float t = -lo / s + 0x1.0p23f;
    int32_t z = (int32_t)(t - 0x1.0p23f);
    *zp = z < 0 ? 0 : z > 255 ? 255 : z;
    return true;
}

bool slim__qconv_codes(const float *x, int64_t n, float inv, int32_t zp, uint8_t *q)
{
    /* A NaN has no code: the caller marks its image. Only a NaN: an
     * infinity is clipped to the Clip's finite bounds before. */
#ifdef QI_X86
    slim_qgemm_isa isa = slim_qgemm_get_isa();
    if (isa == SLIM_QGEMM_AVX512VNNI)
        return codes_avx512(x, n, inv, zp, q);
    if (isa == SLIM_QGEMM_AVX2)
        return codes_avx2(x, n, inv, zp, q);
#endif
    return codes_c(x, n, inv, zp, q);
}

void slim__qconv_quantize_image(const float *x, int64_t n, uint8_t *q, float *scale, int32_t *zp)
{
    qimage_job j = {.x = x, .q = q, .n = n};
    int64_t parts = (n + 16383) / 16384;
    parts = parts < 1 ? 1 : parts > QI_PARTS ? QI_PARTS : parts;
    j.step = ((n + parts - 1) / parts + 63) & ~(int64_t)63;
    parts = (n + j.step - 1) / j.step;
    j.isa = slim_qgemm_get_isa();
    slim_parallel_for(parts, 1, minmax_part, &j);
    float lo = 0.0f, hi = 0.0f;
    unsigned bad = 0;
    for (int64_t t = 0; t < parts; t++) {
        lo = j.lo[t] < lo ? j.lo[t] : lo;
        hi = j.hi[t] > hi ? j.hi[t] : hi;
        bad |= j.bad[t];
    }
    float s;
    int32_t z;
    bool finite = slim_qconv_codes_params(lo, hi, &s, &z);
    if (bad || !finite) {
        memset(q, 0, (size_t)n);
        *scale = NAN;
        *zp = 0;
        return;
    }
    if (!(s > 0)) {
        memset(q, 0, (size_t)n);
        *scale = 1.0f;
        *zp = 0;
        return;
    }
    j.zp = z;
    j.inv = 1.0f / s;
    *scale = s;
    *zp = j.zp;
    slim_parallel_for(parts, 1, codes_part, &j);
}

/* ---- byte im2col ---------------------------------------------------------- */

static void im2col_part(int64_t begin, int64_t end, void *user)
{
    const slim__qconv_block *b = user;
    const slim_qconv *q = b->q;
    int64_t cg = q->c / q->groups;
    for (int64_t r = begin; r < end; r++) {
        int64_t p = b->p0 + r, oy = p / q->ow, ox = p % q->ow;
        uint8_t *dst = b->rows + r * b->k4;
        int64_t ix0 = ox * q->sw - q->pl, ix1 = ix0 + (q->kw - 1) * q->dw;
        /* One group's channels of kw adjacent pixels are one run of bytes
         * when the group is the whole pixel and the kernel row is not
         * dilated: one copy per kernel row (the stem's 7 x 3 bytes were 7
         * copies of 3: memcpy calls were 8% of ResNet-50's int8 run). */
        bool whole = q->groups == 1 && q->dw == 1 && ix0 >= 0 && ix1 < q->w;
        for (int64_t ky = 0; ky < q->kh; ky++) {
            int64_t iy = oy * q->sh - q->pt + ky * q->dh;
            if (whole && iy >= 0 && iy < q->h) {
                memcpy(dst, b->xq + (iy * q->w + ix0) * q->c, (size_t)(q->kw * cg));
                dst += q->kw * cg;
                continue;
            }
            for (int64_t kx = 0; kx < q->kw; kx++, dst += cg) {
                int64_t ix = ox * q->sw - q->pl + kx * q->dw;
                if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
                    memset(dst, b->zx, (size_t)cg); /* the code of 0.0 */
                else
                    memcpy(dst, b->xq + (iy * q->w + ix) * q->c + b->g * cg, (size_t)cg);
            }
        }
        /* The K padding meets zero weights: any byte would do. */
        memset(dst, 0, (size_t)(b->k4 - b->kg));
    }
}

void slim__qconv_im2col_u8(const slim__qconv_block *b)
{
    slim_parallel_for(b->nr, 1 + 16384 / b->k4, im2col_part, (void *)b);
}

/* ---- the epilogue --------------------------------------------------------- */

/* Output row r (pixel p0 + r) from its int32 sums, in place: the same
 * operations as slim_qgemm's epilogue, then the residual Add and the Relu
 * as those nodes compute them. fmaf is a libm call on the baseline build:
 * exact, and the vector paths below use the instruction. */
static void epilogue_row_c(const slim__qconv_block *b, int64_t r, int64_t j0)
{
    float *y = b->dst + r * b->ldd;
    const float *res = b->res ? b->res + (b->p0 + r) * b->res_lp : NULL;
    for (int64_t j = j0; j < b->mg; j++) {
        int32_t acc;
        memcpy(&acc, &y[j], sizeof(acc));
        float v = fmaf((float)acc, b->sxw[j], b->bias ? b->bias[j] : 0.0f);
        if (res)
            v = v + res[j * b->res_lc];
        v = b->act == SLIM_QGEMM_ACT_RELU && !(v > 0) ? 0.0f : v;
        y[j] = b->clip ? slim__qconv_clip(v, b->clip_lo, b->clip_hi) : v;
    }
}

#ifdef QI_X86
QI_AVX512
static void epilogue_row_avx512(const slim__qconv_block *b, int64_t r)
{
    float *y = b->dst + r * b->ldd;
    const float *res = b->res ? b->res + (b->p0 + r) * b->res_lp : NULL;
    __m512 zero = _mm512_setzero_ps();
    __m512 lo = _mm512_set1_ps(b->clip_lo), hi = _mm512_set1_ps(b->clip_hi);
    bool relu = b->act == SLIM_QGEMM_ACT_RELU;
    /* Codes go out from the registers (no float row to store and read). */
    uint8_t *codes = b->codes ? b->codes + r * b->ldc : NULL;
    __m512 cinv = _mm512_set1_ps(b->cinv);
    __m512i czp = _mm512_set1_epi32(b->czp);
    __mmask16 nan = 0;
    for (int64_t j = 0; j < b->mg; j += 16) {
        __mmask16 mk = b->mg - j >= 16 ? 0xFFFF : (__mmask16)((1u << (b->mg - j)) - 1);
        __m512 acc = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mk, y + j));
        __m512 bias = b->bias ? _mm512_maskz_loadu_ps(mk, b->bias + j) : zero;
        __m512 v = _mm512_fmadd_ps(acc, _mm512_maskz_loadu_ps(mk, b->sxw + j), bias);
        if (res) {
            __m512 rv;
            if (b->res_lc == 1) {
                rv = _mm512_maskz_loadu_ps(mk, res + j);
            } else { /* the residual laid out NCHW: a strided column */
                float t[16] = {0};
                for (int k = 0; k < 16 && j + k < b->mg; k++)
                    t[k] = res[(j + k) * b->res_lc];
                rv = _mm512_loadu_ps(t);
            }
            v = _mm512_add_ps(v, rv);
        }
        /* max(v, 0) returns its second operand for a NaN or a zero: the
         * C path's !(v > 0) ? 0 : v. */
        if (relu)
            v = _mm512_max_ps(v, zero);
        if (b->clip) { /* ordered compares: a NaN takes neither bound */
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
        }
        if (codes)
            nan |= slim__qconv_codes16(v, cinv, czp, mk, codes + j);
        else
            _mm512_mask_storeu_ps(y + j, mk, v);
    }
    if (nan)
        __atomic_store_n(b->bad, 1, __ATOMIC_RELAXED);
}

QI_AVX2
static void epilogue_row_avx2(const slim__qconv_block *b, int64_t r)
{
    float *y = b->dst + r * b->ldd;
    const float *res = b->res ? b->res + (b->p0 + r) * b->res_lp : NULL;
    __m256 zero = _mm256_setzero_ps();
    __m256 lo = _mm256_set1_ps(b->clip_lo), hi = _mm256_set1_ps(b->clip_hi);
    bool relu = b->act == SLIM_QGEMM_ACT_RELU;
    int64_t j = 0;
    for (; j + 8 <= b->mg; j += 8) {
        __m256 acc = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(y + j)));
        __m256 bias = b->bias ? _mm256_loadu_ps(b->bias + j) : zero;
        __m256 v = _mm256_fmadd_ps(acc, _mm256_loadu_ps(b->sxw + j), bias);
        if (res) {
            __m256 rv;
            if (b->res_lc == 1) {
                rv = _mm256_loadu_ps(res + j);
            } else {
                float t[8];
                for (int k = 0; k < 8; k++)
                    t[k] = res[(j + k) * b->res_lc];
                rv = _mm256_loadu_ps(t);
            }
            v = _mm256_add_ps(v, rv);
        }
        if (relu)
            v = _mm256_max_ps(v, zero);
        if (b->clip) {
            v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
            v = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
        }
        _mm256_storeu_ps(y + j, v);
    }
    if (j < b->mg)
        epilogue_row_c(b, r, j);
}
#endif

static void epilogue_part(int64_t begin, int64_t end, void *user)
{
    const slim__qconv_block *b = user;
    slim_qgemm_isa isa = slim_qgemm_get_isa();
    for (int64_t r = begin; r < end; r++) {
#ifdef QI_X86
        if (isa == SLIM_QGEMM_AVX512VNNI) {
            epilogue_row_avx512(b, r); /* its codes too */
            continue;
        }
        if (isa == SLIM_QGEMM_AVX2)
            epilogue_row_avx2(b, r);
        else
#endif
            epilogue_row_c(b, r, 0);
        /* The row is in L1 yet (a block's codes after the block measured
         * 14% of the whole-int8 MobileNetV2, from L2 and memory). */
        if (b->codes &&
            slim__qconv_codes(b->dst + r * b->ldd, b->mg, b->cinv, b->czp, b->codes + r * b->ldc))
            __atomic_store_n(b->bad, 1, __ATOMIC_RELAXED);
    }
    (void)isa;
}

void slim__qconv_product_u8(const slim__qconv_block *b, const uint8_t *a,
                            const slim_qconv_weights *w, const int8_t *packed)
{
    /* The sums go to the output's own memory (an int32 per float), and the
     * epilogue turns them into floats in place. */
    slim_qgemm_args qa = {
        .m = b->nr, .n = b->mg, .k = b->kg, .packed = packed,
        .colsum = w->colsum + b->g * b->mg, .y_i32 = (int32_t *)b->dst, .ldy = b->ldd,
    };
    slim_qgemm_u8(&qa, a, b->zxv);
    slim_parallel_for(b->nr, 1 + 4096 / b->mg, epilogue_part, (void *)b);
}
