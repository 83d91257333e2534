/* test_half.c - fp16 / bf16 conversions at their edges, the half-weight
 * product (kernels/cpu/hgemm.c) on every path against a double reference,
 * its AVX-512 path against its C path bit for bit, the batch guarantee,
 * and the half-weights pass (quant/half.c) on small graphs. */
#include "testutil.h"

#include "half.h"
#include "hgemm.h"
#include "pass.h"
#include "pipeline.h"
#include "slim_init.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    return tu_xrnd(&rng_state);
}

static float rndf(void) /* in [-1, 1) */
{
    return tu_xrndf(&rng_state);
}

static float bits_f(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* ---- conversions ---------------------------------------------------------- */

START_TEST(test_f16_edges)
{
    /* Exact values, signed zeros, the largest finite half. */
    ck_assert_uint_eq(slim_f32_to_f16(0.0f), 0x0000);
    ck_assert_uint_eq(slim_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(slim_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(slim_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(slim_f32_to_f16(65504.0f), 0x7bff);
    /* Overflow: 65520 is the midpoint to the next (infinite) step. */
    ck_assert_uint_eq(slim_f32_to_f16(65519.0f), 0x7bff);
    ck_assert_uint_eq(slim_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(slim_f32_to_f16(-1e6f), 0xfc00);
    ck_assert_uint_eq(slim_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(slim_f32_to_f16(-INFINITY), 0xfc00);
    /* NaN stays NaN (exponent all ones, mantissa not 0), sign kept. */
    uint16_t h = slim_f32_to_f16(NAN);
    ck_assert((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
    h = slim_f32_to_f16(-NAN);
    ck_assert((h & 0x8000) && (h & 0x3ff) != 0);
    /* Round to nearest even between normals: 1 + 2^-11 is halfway between
     * 1 and 1 + 2^-10 -> 1 (even); 1 + 3 * 2^-11 -> 1 + 2^-9 (even). */
    ck_assert_uint_eq(slim_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    ck_assert_uint_eq(slim_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    ck_assert_uint_eq(slim_f32_to_f16(nextafterf(1.0f + ldexpf(1, -11), 2)), 0x3c01);
    /* Subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even); a hair
     * above rounds up; 3 * 2^-25 ties to 2 * 2^-24 (even). */
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1, -24)), 0x0001);
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1, -25)), 0x0000);
    ck_assert_uint_eq(slim_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    ck_assert_uint_eq(slim_f32_to_f16(3 * ldexpf(1, -25)), 0x0002);
    ck_assert_uint_eq(slim_f32_to_f16(-ldexpf(1, -24)), 0x8001);
    ck_assert_uint_eq(slim_f32_to_f16(ldexpf(1023, -24)), 0x03ff); /* largest subnormal */
    /* Just under the smallest normal rounds up into it. */
    ck_assert_uint_eq(slim_f32_to_f16(nextafterf(ldexpf(1, -14), 0)), 0x0400);
    ck_assert_uint_eq(slim_f32_to_f16(1e-10f), 0x0000);
    /* Back to float32: exact, subnormals included. */
    ck_assert(slim_f16_to_f32(0x0001) == ldexpf(1, -24));
    ck_assert(slim_f16_to_f32(0x03ff) == ldexpf(1023, -24));
    ck_assert(slim_f16_to_f32(0x0400) == ldexpf(1, -14));
    ck_assert(slim_f16_to_f32(0x7bff) == 65504.0f);
    ck_assert(isinf(slim_f16_to_f32(0x7c00)) && slim_f16_to_f32(0x7c00) > 0);
    ck_assert(isinf(slim_f16_to_f32(0xfc00)) && slim_f16_to_f32(0xfc00) < 0);
    ck_assert(isnan(slim_f16_to_f32(0x7e00)));
    ck_assert(isnan(slim_f16_to_f32(0x7c01)));
    ck_assert_uint_eq(f_bits(slim_f16_to_f32(0x8000)), 0x80000000u);
    /* Every half survives the round trip (NaNs stay NaN). */
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = slim_f16_to_f32((uint16_t)b);
        if (isnan(f))
            ck_assert(isnan(slim_f16_to_f32(slim_f32_to_f16(f))));
        else
            ck_assert_uint_eq(slim_f32_to_f16(f), b);
    }
}
END_TEST

START_TEST(test_bf16_edges)
{
    ck_assert_uint_eq(slim_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(slim_f32_to_bf16(-0.0f), 0x8000);
    /* Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7. */
    ck_assert_uint_eq(slim_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);
    ck_assert_uint_eq(slim_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
    ck_assert_uint_eq(slim_f32_to_bf16(nextafterf(1.0f + ldexpf(1, -8), 2)), 0x3f81);
    /* The largest float rounds past the largest bf16: infinity. */
    ck_assert_uint_eq(slim_f32_to_bf16(FLT_MAX), 0x7f80);
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x7f7f7fffu)), 0x7f7f);
    ck_assert_uint_eq(slim_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(slim_f32_to_bf16(-INFINITY), 0xff80);
    /* NaN stays NaN even when its payload sits in the low bits only (a
     * plain round would carry it into infinity). */
    uint16_t h = slim_f32_to_bf16(bits_f(0x7f800001u));
    ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
    h = slim_f32_to_bf16(bits_f(0xffffffffu));
    ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0 && (h & 0x8000));
    /* Subnormals keep float32's exponent range: same rounding rule. */
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x00010000u)), 0x0001);
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x00008000u)), 0x0000); /* tie -> even 0 */
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x00018000u)), 0x0002); /* tie -> even 2 */
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x00008001u)), 0x0001);
    ck_assert_uint_eq(slim_f32_to_bf16(bits_f(0x007fffffu)), 0x0080); /* up into normals */
    /* Back: exact, a shift. */
    ck_assert_uint_eq(f_bits(slim_bf16_to_f32(0x0001)), 0x00010000u);
    ck_assert_uint_eq(f_bits(slim_bf16_to_f32(0xff80)), 0xff800000u);
    ck_assert(isnan(slim_bf16_to_f32(0x7fc0)));
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = slim_bf16_to_f32((uint16_t)b);
        if (isnan(f))
            ck_assert(isnan(slim_bf16_to_f32(slim_f32_to_bf16(f))));
        else
            ck_assert_uint_eq(slim_f32_to_bf16(f), b);
    }
}
END_TEST

/* ---- the product ---------------------------------------------------------- */

static const slim_hgemm_isa all_isas[] = {SLIM_HGEMM_C, SLIM_HGEMM_AVX512,
                                          SLIM_HGEMM_AVX512BF16};

static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rndf() * scale;
}

/* y in double from the packed (rounded) weights; xround rounds x to bf16
 * first (what the vdpbf16ps path multiplies). */
static void reference(const float *x, int64_t m, int64_t n, int64_t k, const uint16_t *packed,
                      slim_dtype wt, const float *bias, int act, bool xround, double *y,
                      double *mag)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int64_t c = 0; c < k; c++) {
                double xv = xround ? slim_bf16_to_f32(slim_f32_to_bf16(x[r * k + c])) : x[r * k + c];
                double p = xv * slim_hgemm_packed_get(packed, n, k, wt, j, c);
                s += p;
                a += fabs(p);
            }
            if (bias)
                s += bias[j];
            y[r * n + j] = act == SLIM_HGEMM_ACT_RELU && !(s > 0) ? 0
                           : act == SLIM_HGEMM_ACT_GELU ? 0.5 * s * (1 + erf(s / sqrt(2.0)))
                                                        : s;
            mag[r * n + j] = a + (bias ? fabs(bias[j]) : 0);
            /* Gelu's slope is at most 1.13; its polynomial is within
             * 1e-7 x max(|y|, 1) (gelu_poly.h), folded into the magnitude. */
            if (act == SLIM_HGEMM_ACT_GELU)
                mag[r * n + j] = 1.13 * mag[r * n + j] + 2e-7 * fmax(fabs(s), 1.0) / ldexp(1, -23);
        }
}

static void run_isa(slim_hgemm_isa isa, const float *x, int64_t m, int64_t n, int64_t k,
                    const uint16_t *packed, slim_dtype wt, const float *bias, int act, float *y)
{
    ck_assert(slim_hgemm_set_isa(isa));
    void *scratch = NULL;
    ck_assert_int_eq(posix_memalign(&scratch, 64, slim_hgemm_scratch_bytes(m, k) + 64), 0);
    slim_hgemm_args a = {.m = m, .n = n, .k = k, .x = x, .ldx = k, .packed = packed, .wtype = wt,
                         .bias = bias, .act = (slim_hgemm_act)act,
                         .y = y, .ldy = n};
    slim_hgemm(&a, scratch);
    free(scratch);
    slim_hgemm_set_isa(SLIM_HGEMM_AUTO);
}

START_TEST(test_paths_match_reference_on_odd_shapes)
{
    rng_state = 1234;
    int cases = 0;
    for (int it = 0; it < 60; it++) {
        int64_t m = 1 + rnd() % 67, n = 1 + rnd() % 67, k = 1 + rnd() % 67;
        if (it < 4) { /* the corners */
            m = it & 1 ? 67 : 1;
            n = it & 2 ? 67 : 1;
            k = it < 2 ? 1 : 67;
        }
        slim_dtype wt = it % 2 ? SLIM_BF16 : SLIM_F16;
        int act = it % 3; /* none, Relu, Gelu */
        bool with_bias = it % 4 != 0;
        float *x = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
        float *bias = malloc(sizeof(float) * (size_t)n);
        fill(x, m * k, 2.0f);
        fill(w, n * k, 0.5f);
        fill(bias, n, 0.3f);
        uint16_t *packed = malloc(sizeof(uint16_t) * slim_hgemm_packed_elems(n, k));
        /* Half the cases pack from MatMul's k x n layout. */
        if (it % 3 == 2) {
            float *wt_kn = malloc(sizeof(float) * (size_t)(n * k));
            for (int64_t j = 0; j < n; j++)
                for (int64_t c = 0; c < k; c++)
                    wt_kn[c * n + j] = w[j * k + c];
            slim_hgemm_pack(wt_kn, n, k, 1, n, wt, packed);
            free(wt_kn);
        } else {
            slim_hgemm_pack(w, n, k, k, 1, wt, packed);
        }
        double *ref = malloc(sizeof(double) * (size_t)(m * n)), *mag = malloc(sizeof(double) * (size_t)(m * n));
        float *yc = malloc(sizeof(float) * (size_t)(m * n)), *y = malloc(sizeof(float) * (size_t)(m * n));
        run_isa(SLIM_HGEMM_C, x, m, n, k, packed, wt, with_bias ? bias : NULL, act, yc);
        for (size_t i = 0; i < sizeof(all_isas) / sizeof(all_isas[0]); i++) {
            slim_hgemm_isa isa = all_isas[i];
            if (!slim_hgemm_isa_supported(isa))
                continue;
            bool dp = isa == SLIM_HGEMM_AVX512BF16 && wt == SLIM_BF16;
            reference(x, m, n, k, packed, wt, with_bias ? bias : NULL, act, dp, ref, mag);
            memset(y, 0x5a, sizeof(float) * (size_t)(m * n));
            run_isa(isa, x, m, n, k, packed, wt, with_bias ? bias : NULL, act, y);
            for (int64_t e = 0; e < m * n; e++) {
                /* float32 sums of k products: k ulps of the magnitude. */
                double tol = (double)(k + 2) * ldexp(1, -23) * mag[e] + 1e-30;
                ck_assert_msg(fabs(y[e] - ref[e]) <= tol, "%s %s m %lld n %lld k %lld [%lld]: %g vs %g",
                              slim_hgemm_isa_name(isa), slim_dtype_name(wt), (long long)m,
                              (long long)n, (long long)k, (long long)e, y[e], ref[e]);
            }
            /* The float32 paths agree bit for bit with the C path. */
            if (!dp)
                ck_assert_msg(memcmp(y, yc, sizeof(float) * (size_t)(m * n)) == 0,
                              "%s differs from c: m %lld n %lld k %lld", slim_hgemm_isa_name(isa),
                              (long long)m, (long long)n, (long long)k);
            cases++;
        }
        free(x);
        free(w);
        free(bias);
        free(packed);
        free(ref);
        free(mag);
        free(yc);
        free(y);
    }
    ck_assert_int_ge(cases, 60);
}
END_TEST

/* A row's result is bitwise the same alone, in a batch of 1..67 rows, and
 * at any position in it: on every path. */
START_TEST(test_row_result_independent_of_batch)
{
    rng_state = 99;
    int64_t n = 150, k = 77, m = 67;
    float *x = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
    fill(x, m * k, 3.0f);
    fill(w, n * k, 0.5f);
    float *y = malloc(sizeof(float) * (size_t)(m * n)), *y1 = malloc(sizeof(float) * (size_t)n);
    uint16_t *packed = malloc(sizeof(uint16_t) * slim_hgemm_packed_elems(n, k));
    for (int wi = 0; wi < 2; wi++) {
        slim_dtype wt = wi ? SLIM_BF16 : SLIM_F16;
        slim_hgemm_pack(w, n, k, k, 1, wt, packed);
        for (size_t i = 0; i < sizeof(all_isas) / sizeof(all_isas[0]); i++) {
            if (!slim_hgemm_isa_supported(all_isas[i]))
                continue;
            for (int64_t mm = 1; mm <= m; mm += 11) {
                run_isa(all_isas[i], x, mm, n, k, packed, wt, NULL, false, y);
                for (int64_t r = 0; r < mm; r += 3) {
                    run_isa(all_isas[i], x + r * k, 1, n, k, packed, wt, NULL, false, y1);
                    ck_assert_msg(memcmp(y + r * n, y1, sizeof(float) * (size_t)n) == 0,
                                  "%s %s: row %lld of %lld differs alone",
                                  slim_hgemm_isa_name(all_isas[i]), slim_dtype_name(wt),
                                  (long long)r, (long long)mm);
                }
            }
        }
    }
    free(x);
    free(w);
    free(y);
    free(y1);
    free(packed);
}
END_TEST

/* Many tasks on several threads (m up to 300: 7 chunks of rows; n = 150:
 * 3 panels, the last 32 wide with 10 channels past n; k odd): every path
 * agrees with C bit for bit (the float32 ones) and each row of the big
 * call is bitwise the row computed alone, wherever the threads took it. */
START_TEST(test_threaded_shapes_match_c)
{
    rng_state = 4242;
    const int64_t ms[] = {1, 7, 100, 300}, n = 150, k = 301;
    int64_t mmax = 300;
    float *x = malloc(sizeof(float) * (size_t)(mmax * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
    float *bias = malloc(sizeof(float) * (size_t)n);
    fill(x, mmax * k, 2.0f);
    fill(w, n * k, 0.5f);
    fill(bias, n, 0.3f);
    float *yc = malloc(sizeof(float) * (size_t)(mmax * n)), *y = malloc(sizeof(float) * (size_t)(mmax * n));
    float *y1 = malloc(sizeof(float) * (size_t)n);
    uint16_t *packed = malloc(sizeof(uint16_t) * slim_hgemm_packed_elems(n, k));
    int checked = 0;
    for (int wi = 0; wi < 2; wi++) {
        slim_dtype wt = wi ? SLIM_BF16 : SLIM_F16;
        slim_hgemm_pack(w, n, k, k, 1, wt, packed);
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            int64_t m = ms[mi];
            int act = mi % 3; /* none, Relu, Gelu */
            run_isa(SLIM_HGEMM_C, x, m, n, k, packed, wt, bias, act, yc);
            for (size_t i = 0; i < sizeof(all_isas) / sizeof(all_isas[0]); i++) {
                slim_hgemm_isa isa = all_isas[i];
                if (!slim_hgemm_isa_supported(isa))
                    continue;
                memset(y, 0x5a, sizeof(float) * (size_t)(m * n));
                run_isa(isa, x, m, n, k, packed, wt, bias, act, y);
                if (!(isa == SLIM_HGEMM_AVX512BF16 && wt == SLIM_BF16))
                    ck_assert_msg(memcmp(y, yc, sizeof(float) * (size_t)(m * n)) == 0,
                                  "%s %s m %lld differs from c", slim_hgemm_isa_name(isa),
                                  slim_dtype_name(wt), (long long)m);
                for (int64_t r = 0; r < m; r += 37) {
                    run_isa(isa, x + r * k, 1, n, k, packed, wt, bias, act, y1);
                    ck_assert_msg(memcmp(y + r * n, y1, sizeof(float) * (size_t)n) == 0,
                                  "%s %s: row %lld of %lld differs alone", slim_hgemm_isa_name(isa),
                                  slim_dtype_name(wt), (long long)r, (long long)m);
                }
                checked++;
            }
        }
    }
    ck_assert_int_ge(checked, 16);
    free(x);
    free(w);
    free(bias);
    free(yc);
    free(y);
    free(y1);
    free(packed);
}
END_TEST

/* slim_half_widen over many blocks (split across the threads) and odd
 * tails: every element exactly its scalar conversion, nothing written past
 * n. */
START_TEST(test_widen_matches_scalar)
{
    rng_state = 31337;
    const int64_t ns[] = {1, 15, 17, 4095, 4097, 100003};
    uint16_t *h = malloc(sizeof(uint16_t) * 100003);
    float *f = malloc(sizeof(float) * (100003 + 1));
    for (int64_t i = 0; i < 100003; i++)
        h[i] = (uint16_t)rnd();
    for (int wi = 0; wi < 2; wi++) {
        slim_dtype wt = wi ? SLIM_BF16 : SLIM_F16;
        for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
            int64_t n = ns[c];
            f[n] = 12345.0f;
            slim_half_widen(h, wt, f, n);
            ck_assert(f[n] == 12345.0f);
            for (int64_t i = 0; i < n; i++) {
                float want = wt == SLIM_F16 ? slim_f16_to_f32(h[i]) : slim_bf16_to_f32(h[i]);
                ck_assert_msg(f_bits(f[i]) == f_bits(want) || (isnan(f[i]) && isnan(want)),
                              "%s n %lld [%lld]: %08x vs %08x", slim_dtype_name(wt), (long long)n,
                              (long long)i, f_bits(f[i]), f_bits(want));
            }
        }
    }
    free(h);
    free(f);
}
END_TEST

/* The layout hgemm.h documents: element (j, kk) at panel p = j / 64,
 * p * 64 * k2 + (kk / 2) * width * 2 + (j % 64) * 2 + kk % 2; padding 0. */
START_TEST(test_pack_layout)
{
    int64_t n = 70, k = 5, k2 = 6, n16 = 80;
    ck_assert_int_eq(slim_hgemm_k2(k), k2);
    ck_assert_int_eq(slim_hgemm_n16(n), n16);
    ck_assert_uint_eq(slim_hgemm_packed_elems(n, k), (size_t)(n16 * k2));
    float w[70 * 5];
    for (int i = 0; i < 70 * 5; i++)
        w[i] = (float)(i + 1);
    uint16_t packed[80 * 6];
    slim_hgemm_pack(w, n, k, k, 1, SLIM_BF16, packed);
    int nonzero = 0;
    for (int i = 0; i < 80 * 6; i++)
        nonzero += packed[i] != 0;
    ck_assert_int_eq(nonzero, 70 * 5);
    /* Channel 3, k 4: panel 0 (width 64), pair 2, parity 0. */
    ck_assert_uint_eq(packed[2 * 64 * 2 + 3 * 2 + 0], slim_f32_to_bf16(w[3 * 5 + 4]));
    /* Channel 66, k 1: panel 1 (width 16) at 64 * 6, pair 0, parity 1. */
    ck_assert_uint_eq(packed[64 * 6 + 0 * 16 * 2 + 2 * 2 + 1], slim_f32_to_bf16(w[66 * 5 + 1]));
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < k; c++)
            ck_assert(slim_hgemm_packed_get(packed, n, k, SLIM_BF16, j, c) ==
                      slim_bf16_to_f32(slim_f32_to_bf16(w[j * k + c])));
}
END_TEST

/* ---- the pass ------------------------------------------------------------- */

START_TEST(test_pass_fuses_and_matches_fp32)
{
    slim_tensor x = tu_xinput(&rng_state, 7, 2, (int64_t[]){5, 40});
    slim_err err;
    slim_tensor ref = tu_run1(tu_two_layers(&rng_state), "x", x, SLIM_OK, &err);
    for (int h = 0; h < 2; h++) {
        slim_dtype half = h ? SLIM_BF16 : SLIM_F16;
        slim_graph *g = tu_two_layers(&rng_state);
        slim_half_opts o = {.half = half};
        slim_half_report rep;
        ck_assert_int_eq(slim_quant_half_weights(g, &o, &rep, &err), SLIM_OK);
        ck_assert_int_eq(g->n_nodes, 2); /* Add and Relu fused into the first */
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulHalf");
        ck_assert_str_eq(g->nodes[0].domain, "com.slimserve");
        ck_assert_str_eq(slim_attr_str(&g->nodes[0], "activation", ""), "Relu");
        ck_assert_int_eq(g->nodes[0].n_in, 3);
        ck_assert_int_eq(g->values[g->nodes[0].in[1]].init.dtype, half);
        ck_assert_str_eq(g->nodes[1].op_type, "MatMulHalf");
        tu_assert_weights_gone(g);
        ck_assert_int_eq(rep.n_layers, 2);
        ck_assert(rep.layers[0].converted && rep.layers[1].converted);
        ck_assert_uint_eq(rep.layers[0].bytes_before, (40 * 24 + 24) * 4);
        /* 24 channels pad to 32, k 40: 32 * 40 halves + the bias. */
        ck_assert_uint_eq(rep.layers[0].bytes_after, 32 * 40 * 2 + 24 * 4);
        slim_half_report_free(&rep);
        slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
        tu_assert_close_max(&y, &ref, h ? 2e-2 : 2e-3);
        slim_tensor_release(&y);
    }
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

/* x [5, 40] -> MatMul(w [40, 24]) -> Add(b) -> Gelu (opset 20) -> y */
static slim_graph *gelu_layer(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 20;
    slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"hh"});
    slim_graph_add_node(g, "add", "Add", "", 2, (const char *[]){"hh", "b"}, 1,
                        (const char *[]){"z"});
    slim_graph_add_node(g, "gelu", "Gelu", "", 1, (const char *[]){"z"}, 1, (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 20;
    rng_state = 42;
    tu_xinit(g, &rng_state, "w", 2, (int64_t[]){40, 24}, 0.3f);
    tu_xinit(g, &rng_state, "b", 1, (int64_t[]){24}, 0.1f);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

/* A Gelu reading a MatMulHalf becomes its activation (the graph passes'
 * fuse_int8_epilogue), computed in the product's epilogue; the result
 * stays the float32 model's to the weights' rounding. */
START_TEST(test_gelu_fused_into_epilogue)
{
    slim_tensor x = tu_xinput(&rng_state, 8, 2, (int64_t[]){5, 40});
    slim_err err;
    slim_tensor ref = tu_run1(gelu_layer(), "x", x, SLIM_OK, &err);
    for (int h = 0; h < 2; h++) {
        slim_graph *g = gelu_layer();
        slim_half_opts o = {.half = h ? SLIM_BF16 : SLIM_F16};
        ck_assert_int_eq(slim_quant_half_weights(g, &o, NULL, &err), SLIM_OK);
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(g->n_nodes, 1);
        ck_assert_str_eq(g->nodes[0].op_type, "MatMulHalf");
        ck_assert_str_eq(slim_attr_str(&g->nodes[0], "activation", ""), "Gelu");
        slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
        tu_assert_close_max(&y, &ref, h ? 2e-2 : 2e-3);
        slim_tensor_release(&y);
    }
    slim_tensor_release(&ref);
    slim_tensor_release(&x);
}
END_TEST

START_TEST(test_pass_exclude_by_name_and_type)
{
    slim_err err;
    slim_graph *g = tu_two_layers(&rng_state);
    slim_half_opts o = {.half = SLIM_BF16, .exclude = (const char *[]){"fc"}, .n_exclude = 1};
    slim_half_report rep;
    ck_assert_int_eq(slim_quant_half_weights(g, &o, &rep, &err), SLIM_OK);
    ck_assert_int_eq(rep.n_layers, 2);
    ck_assert(rep.layers[0].converted);
    ck_assert(!rep.layers[1].converted);
    ck_assert_str_eq(rep.layers[1].why, "excluded");
    ck_assert_int_eq(g->values[slim_graph_find_value(g, "w2")].kind, SLIM_VALUE_INITIALIZER);
    slim_half_report_free(&rep);
    slim_graph_free(g);
    g = tu_two_layers(&rng_state);
    slim_half_opts o2 = {.half = SLIM_F16, .exclude = (const char *[]){"MatMul"}, .n_exclude = 1};
    ck_assert_int_eq(slim_quant_half_weights(g, &o2, NULL, &err), SLIM_OK);
    ck_assert_str_eq(g->nodes[0].op_type, "MatMul");
    ck_assert_str_eq(g->nodes[g->n_nodes - 1].op_type, "MatMulHalf");
    slim_graph_free(g);
    slim_half_opts bad = {.half = SLIM_F32};
    g = tu_two_layers(&rng_state);
    ck_assert_int_eq(slim_quant_half_weights(g, &bad, NULL, &err), SLIM_EINVAL);
    slim_graph_free(g);
}
END_TEST

START_TEST(test_gather_half)
{
    for (int h = 0; h < 2; h++) {
        slim_dtype half = h ? SLIM_BF16 : SLIM_F16;
        rng_state = 5;
        slim_graph *g = tu_gather_graph(&rng_state);
        float t[50 * 33];
        memcpy(t, g->values[slim_graph_find_value(g, "table")].init.data, sizeof(t));
        slim_err err;
        slim_half_opts o = {.half = half};
        ck_assert_int_eq(slim_quant_half_weights(g, &o, NULL, &err), SLIM_OK);
        ck_assert_str_eq(g->nodes[0].op_type, "GatherHalf");
        slim_tensor ids = tu_i64(2, (int64_t[]){2, 2}, (int64_t[]){0, 49, -1, 7});
        slim_tensor y = tu_run1(g, "ids", ids, SLIM_OK, &err);
        tu_assert_shape(&y, 3, (int64_t[]){2, 2, 33});
        const int64_t rows[4] = {0, 49, 49, 7};
        for (int i = 0; i < 4; i++)
            for (int c = 0; c < 33; c++) {
                float v = t[rows[i] * 33 + c];
                float want = h ? slim_bf16_to_f32(slim_f32_to_bf16(v))
                               : slim_f16_to_f32(slim_f32_to_f16(v));
                ck_assert(((float *)y.data)[i * 33 + c] == want);
            }
        slim_tensor_release(&y);
        slim_tensor_release(&ids);
    }
}
END_TEST

/* A MatMulHalf whose packed weight does not match its K and N (a forged
 * file) is refused with a message before the kernel reads it. */
START_TEST(test_malformed_node_refused)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "q", "MatMulHalf", "com.slimserve", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 1;
    tu_attr_i(&g->nodes[0], "K", 8);
    tu_attr_i(&g->nodes[0], "N", 3);
    int w = slim_graph_value(g, "w");
    g->values[w].kind = SLIM_VALUE_INITIALIZER;
    uint16_t wb[16 * 4] = {0}; /* [16, 8] expected */
    g->values[w].init = tu_tensor(SLIM_BF16, 2, (int64_t[]){16, 4}, wb);
    tu_assert_refused(g, 2, (int64_t[]){2, 8}, "packed weight");
}
END_TEST

/* Half activations: MatMul -> LayerNormalization -> Relu. The projection
 * (MatMulHalf) writes float32 straight into the guarded LayerNorm, whose
 * output reaches the unguarded Relu through one HalfCast to half; the
 * LayerNorm's parameters stay float32. Values past fp16's range in the
 * projection's output come through. */
START_TEST(test_guards)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "proj", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"h"});
    int ln = slim_graph_add_node(g, "ln", "LayerNormalization", "", 3,
                                 (const char *[]){"h", "gamma", "beta"}, 1, (const char *[]){"n"});
    slim_graph_add_node(g, "relu", "Relu", "", 1, (const char *[]){"n"}, 1, (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_i(&g->nodes[ln], "axis", -1);
    rng_state = 77;
    tu_xinit(g, &rng_state, "w", 2, (int64_t[]){16, 8}, 1.0f);
    float *w = g->values[slim_graph_find_value(g, "w")].init.data;
    for (int k = 0; k < 16; k++)
        w[k * 8] = 30000.0f; /* channel 0: ~16 * 30000, past 65504 */
    tu_xinit(g, &rng_state, "gamma", 1, (int64_t[]){8}, 1.0f);
    tu_xinit(g, &rng_state, "beta", 1, (int64_t[]){8}, 0.1f);
    tu_set_io(g, "x", SLIM_F32, "y");
    g->values[slim_graph_find_value(g, "y")].info.dtype = SLIM_F32; /* declared, as ONNX does */
    slim_err err;
    slim_half_opts o = {.half = SLIM_F16};
    ck_assert_int_eq(slim_quant_half_weights(g, &o, NULL, &err), SLIM_OK);
    ck_assert_msg(slim_quant_half_activations(g, SLIM_F16, &err) == SLIM_OK, "%s", err.msg);
    int casts = 0, relu = -1, lnode = -1, mm = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        casts += strcmp(g->nodes[i].op_type, "HalfCast") == 0;
        if (strcmp(g->nodes[i].name, "relu") == 0)
            relu = i;
        if (strcmp(g->nodes[i].name, "ln") == 0)
            lnode = i;
        if (strcmp(g->nodes[i].name, "proj") == 0)
            mm = i;
    }
    ck_assert_int_eq(casts, 1);
    ck_assert_str_eq(g->nodes[mm].op_type, "MatMulHalf");
    ck_assert_int_eq(g->nodes[mm].in[0], slim_graph_find_value(g, "x")); /* the input as given */
    ck_assert_int_eq(g->nodes[lnode].in[0], g->nodes[mm].out[0]);      /* no cast between */
    ck_assert_int_eq(g->values[g->nodes[lnode].in[1]].init.dtype, SLIM_F32);
    ck_assert_int_ne(g->nodes[relu].in[0], g->nodes[lnode].out[0]);    /* through the cast */
    float xv[2 * 16];
    for (int i = 0; i < 32; i++)
        xv[i] = 1.0f + 0.01f * (float)i;
    slim_tensor x = tu_f32(2, (int64_t[]){2, 16}, xv);
    slim_tensor y = tu_run1(g, "x", x, SLIM_OK, &err);
    ck_assert_int_eq(y.dtype, SLIM_F32);
    for (int i = 0; i < 16; i++)
        ck_assert_msg(isfinite(((float *)y.data)[i]), "element %d is not finite", i);
    slim_tensor_release(&y);
    slim_tensor_release(&x);
}
END_TEST

/* HalfCast converts float values and passes anything else through. */
START_TEST(test_half_cast_passes_ints)
{
    slim_graph *g = tu_graph("HalfCast", 17, 1, (const char *[]){"x"}, 1);
    slim_node *n = tu_node0(g);
    free(n->domain);
    n->domain = strdup("com.slimserve");
    n->opset = 1;
    tu_attr_i(n, "to", 10);
    slim_tensor in = tu_i64(1, (int64_t[]){3}, (int64_t[]){1, -2, 1LL << 40});
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_msg(tu_run(g, &in, 1, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(out[0].dtype, SLIM_I64);
    ck_assert(memcmp(out[0].data, in.data, 3 * sizeof(int64_t)) == 0);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&in, 1);
    g = tu_graph("HalfCast", 17, 1, (const char *[]){"x"}, 1);
    n = tu_node0(g);
    free(n->domain);
    n->domain = strdup("com.slimserve");
    n->opset = 1;
    tu_attr_i(n, "to", 10);
    in = tu_f32(1, (int64_t[]){3}, (float[]){1.0f, 65520.0f, ldexpf(1, -25)});
    ck_assert_msg(tu_run(g, &in, 1, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(out[0].dtype, SLIM_F16);
    const uint16_t *h = out[0].data;
    ck_assert_uint_eq(h[0], 0x3c00);
    ck_assert_uint_eq(h[1], 0x7c00);
    ck_assert_uint_eq(h[2], 0x0000);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&in, 1);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("convert");
    tcase_add_test(tc, test_f16_edges);
    tcase_add_test(tc, test_bf16_edges);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_paths_match_reference_on_odd_shapes);
    tcase_add_test(tk, test_row_result_independent_of_batch);
    tcase_add_test(tk, test_threaded_shapes_match_c);
    tcase_add_test(tk, test_widen_matches_scalar);
    tcase_add_test(tk, test_pack_layout);
    suite_add_tcase(s, tk);
    TCase *tp = tcase_create("pass");
    tcase_add_test(tp, test_pass_fuses_and_matches_fp32);
    tcase_add_test(tp, test_pass_exclude_by_name_and_type);
    tcase_add_test(tp, test_gelu_fused_into_epilogue);
    tcase_add_test(tp, test_gather_half);
    tcase_add_test(tp, test_malformed_node_refused);
    tcase_add_test(tp, test_guards);
    tcase_add_test(tp, test_half_cast_passes_ints);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
