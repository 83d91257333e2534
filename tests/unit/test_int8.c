/* test_int8.c - the int8 kernel (kernels/cpu/qgemm.c) against a scalar
 * reference written here, and its AVX2 / AVX-512 VNNI paths against its C
 * path bit for bit. The int8 pass (quant/int8.c) is tested in
 * test_int8_pass.c. */
#include "testutil.h"

#include "int8.h"
#include "gelu_poly.h"
#include "pass.h"
#include "qgemm.h"
#include "pipeline.h"
#include "slim_init.h"

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

/* Rows of several kinds: mixed signs, all positive (zero point 0), all
 * negative (zero point 255), zeros, one huge outlier. */
static void fill_rows(float *x, int64_t m, int64_t k)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++) {
            float v = rndf() * 3.0f;
            switch (i % 5) {
            case 1: v = fabsf(v) + 0.5f; break;
            case 2: v = -fabsf(v) - 0.5f; break;
            case 3: v = 0; break;
            case 4: v = j == k / 2 ? 500.0f : v; break;
            default: break;
            }
            x[i * k + j] = v;
        }
}

static void fill_weights(int8_t *w, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n * k; i++)
        w[i] = (int8_t)((int)(rnd() % 255) - 127);
    if (n * k > 2) { /* the extremes, for saturation */
        w[0] = 127;
        w[1] = -127;
    }
}

/* The definition, with 64-bit sums: what every path must give. */
static float act_ref(float v, slim_qgemm_act act)
{
    if (act == SLIM_QGEMM_ACT_RELU)
        return v > 0 ? v : 0.0f;
    return act == SLIM_QGEMM_ACT_GELU ? slim_qgemm_gelu(v) : v;
}

static void reference(const float *x, int64_t m, int64_t n, int64_t k, const int8_t *w,
                      const float *sw, const float *bias, slim_qgemm_act act, float *y)
{
    uint8_t *q = malloc((size_t)slim_qgemm_k4(k));
    for (int64_t i = 0; i < m; i++) {
        float sx;
        int32_t zx;
        slim_qgemm_set_isa(SLIM_QGEMM_C);
        slim_qgemm_quantize_row(x + i * k, k, q, &sx, &zx);
        for (int64_t j = 0; j < n; j++) {
            int64_t acc = 0;
            for (int64_t c = 0; c < k; c++)
                acc += ((int64_t)q[c] - zx) * w[j * k + c];
            float v = fmaf((float)acc, sx * sw[j], bias ? bias[j] : 0.0f);
            y[i * n + j] = act_ref(v, act);
        }
    }
    free(q);
}

typedef struct {
    int8_t *packed;
    int32_t *colsum;
    float *sw, *bias;
} packed_w;

static packed_w pack(const int8_t *w, int64_t n, int64_t k)
{
    packed_w p;
    ck_assert_int_eq(posix_memalign((void **)&p.packed, 64, slim_qgemm_packed_bytes(n, k)), 0);
    p.colsum = malloc(sizeof(int32_t) * (size_t)n);
    p.sw = malloc(sizeof(float) * (size_t)n);
    p.bias = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++) {
        p.sw[j] = 0.001f + 0.01f * fabsf(rndf());
        p.bias[j] = rndf();
    }
    slim_qgemm_pack(w, n, k, p.packed, p.colsum);
    return p;
}

static void unpack_free(packed_w *p)
{
    free(p->packed);
    free(p->colsum);
    free(p->sw);
    free(p->bias);
}

static void run_isa(slim_qgemm_isa isa, const float *x, int64_t m, int64_t n, int64_t k,
                    const packed_w *p, bool bias, slim_qgemm_act act, float *y)
{
    ck_assert(slim_qgemm_set_isa(isa));
    slim_qgemm_args a = {.m = m, .n = n, .k = k, .x = x, .ldx = k, .packed = p->packed,
                         .colsum = p->colsum, .w_scale = p->sw, .bias = bias ? p->bias : NULL,
                         .act = act, .y = y, .ldy = n};
    void *scratch;
    ck_assert_int_eq(posix_memalign(&scratch, 64, slim_qgemm_scratch_bytes(m, k)), 0);
    slim_qgemm(&a, scratch);
    free(scratch);
}

static const slim_qgemm_isa isas[] = {SLIM_QGEMM_C, SLIM_QGEMM_AVX2, SLIM_QGEMM_AVX512VNNI};

/* Three projections' outlier input channels: the same rows scaled up in
 * all three agree (they can be merged and quantized as one), another row
 * in one of them does not, and no outliers anywhere agree. */
START_TEST(test_same_outliers)
{
    enum { K = 64, N = 32 };
    float *d[3];
    slim_tensor t[3];
    const slim_tensor *w[3] = {&t[0], &t[1], &t[2]};
    for (int i = 0; i < 3; i++) {
        d[i] = malloc(sizeof(float) * K * N);
        for (int j = 0; j < K * N; j++)
            d[i][j] = rndf();
        t[i] = (slim_tensor){.dtype = SLIM_F32, .ndim = 2, .dims = {K, N}, .data = d[i]};
    }
    ck_assert(slim_int8_same_outliers(w, 3)); /* none */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < N; j++) {
            d[i][7 * N + j] *= 8.0f;
            d[i][40 * N + j] *= 8.0f;
        }
    ck_assert(slim_int8_same_outliers(w, 3));
    for (int j = 0; j < N; j++)
        d[2][21 * N + j] *= 8.0f;
    ck_assert(!slim_int8_same_outliers(w, 3));
    for (int i = 0; i < 3; i++)
        free(d[i]);
}
END_TEST

/* Rows with a NaN or an infinity among others in one call (the AVX-512
 * path quantizes 16 rows at a time): those rows' outputs are NaN on every
 * path, the others bitwise the C path's. */
START_TEST(test_bad_rows_inside_a_block)
{
    const int64_t m = 37, n = 20, k = 65;
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    int8_t *w = malloc((size_t)(n * k));
    float *want = malloc(sizeof(float) * (size_t)(m * n));
    float *got = malloc(sizeof(float) * (size_t)(m * n));
    fill_rows(x, m, k);
    fill_weights(w, n, k);
    x[5 * k + 3] = NAN;
    x[20 * k + 64] = INFINITY;
    x[33 * k] = -INFINITY;
    packed_w p = pack(w, n, k);
    run_isa(SLIM_QGEMM_C, x, m, n, k, &p, true, SLIM_QGEMM_ACT_NONE, want);
    for (size_t i = 1; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (!slim_qgemm_isa_supported(isas[i]))
            continue;
        run_isa(isas[i], x, m, n, k, &p, true, SLIM_QGEMM_ACT_NONE, got);
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) {
                float u = got[r * n + c], v = want[r * n + c];
                bool bad = r == 5 || r == 20 || r == 33;
                ck_assert_msg(bad ? isnan(u) && isnan(v) : memcmp(&u, &v, sizeof(u)) == 0,
                              "%s row %lld col %lld: %g vs %g", slim_qgemm_isa_name(isas[i]),
                              (long long)r, (long long)c, u, v);
            }
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    unpack_free(&p);
    free(x);
    free(w);
    free(want);
    free(got);
}
END_TEST

START_TEST(test_paths_match_reference_on_odd_shapes)
{
    const int64_t ms[] = {1, 2, 3, 4, 5, 7, 13, 50};
    const int64_t ns[] = {1, 3, 16, 17, 63, 64, 65, 130};
    const int64_t ks[] = {1, 3, 4, 5, 63, 64, 65, 300};
    int checked_paths = 0;
    for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
        for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
            for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++) {
                int64_t m = ms[a], n = ns[b], k = ks[c];
                bool bias = (a + b) % 2;
                slim_qgemm_act act = (b + c) % 3 == 0   ? SLIM_QGEMM_ACT_RELU
                                     : (b + c) % 3 == 1 ? SLIM_QGEMM_ACT_GELU
                                                        : SLIM_QGEMM_ACT_NONE;
                float *x = malloc(sizeof(float) * (size_t)(m * k));
                int8_t *w = malloc((size_t)(n * k));
                float *want = malloc(sizeof(float) * (size_t)(m * n));
                float *got = malloc(sizeof(float) * (size_t)(m * n));
                fill_rows(x, m, k);
                fill_weights(w, n, k);
                packed_w p = pack(w, n, k);
                reference(x, m, n, k, w, p.sw, bias ? p.bias : NULL, act, want);
                for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
                    if (!slim_qgemm_isa_supported(isas[i]))
                        continue;
                    checked_paths++;
                    memset(got, 0xFF, sizeof(float) * (size_t)(m * n));
                    run_isa(isas[i], x, m, n, k, &p, bias, act, got);
                    ck_assert_msg(memcmp(got, want, sizeof(float) * (size_t)(m * n)) == 0,
                                  "%s differs from the reference at m=%lld n=%lld k=%lld",
                                  slim_qgemm_isa_name(isas[i]), (long long)m, (long long)n,
                                  (long long)k);
                }
                unpack_free(&p);
                free(x);
                free(w);
                free(want);
                free(got);
            }
    ck_assert_int_ge(checked_paths, 8 * 8 * 8); /* the C path at least */
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
}
END_TEST

/* The epilogue's Gelu against erf in double precision: what lets the
 * fusion pass replace the float Gelu op by it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,fma"))) static void gelu16(const float *y, float *out)
{
    _mm512_storeu_ps(out, slim_gelu_poly16(_mm512_loadu_ps(y)));
}
#endif

START_TEST(test_gelu_accuracy)
{
    /* Relative to max(|y|, 1): where erf is near -1, 1 + erf cancels (in
     * any float Gelu), leaving an absolute error of a few 1e-8. */
    double worst = 0;
    for (int i = -200000; i <= 200000; i++) {
        float y = (float)i * 5e-5f; /* [-10, 10] */
        double want = 0.5 * (double)y * (1.0 + erf((double)y / sqrt(2.0)));
        double got = slim_qgemm_gelu(y);
        double e = fabs(got - want) / fmax(fabs((double)y), 1.0);
        worst = e > worst ? e : worst;
    }
    ck_assert_msg(worst < 1.2e-7, "worst error %g", worst); /* 7.5e-8 measured */
    ck_assert_float_eq(slim_qgemm_gelu(0.0f), 0.0f);
    ck_assert_float_eq(slim_qgemm_gelu(100.0f), 100.0f);
    ck_assert_float_eq(slim_qgemm_gelu(-100.0f), 0.0f);
    ck_assert_float_eq(slim_qgemm_gelu(INFINITY), INFINITY);
    ck_assert_float_eq(slim_qgemm_gelu(-INFINITY), 0.0f);
    ck_assert(isnan(slim_qgemm_gelu(NAN)));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* The AVX-512 version, 16 at a time, bit for bit: every interval's
     * edges (a float either side of i / SCALE), the cut at 5.5, the
     * specials, and a sweep. */
    if (!__builtin_cpu_supports("avx512f"))
        return;
    float ys[4096], got[16];
    int n = 0;
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, SLIM_GELU_AMAX,
                              -SLIM_GELU_AMAX, 1e-30f, -1e-30f, 3e38f, -3e38f};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++)
        ys[n++] = specials[i];
    for (int i = 0; i <= SLIM_GELU_N; i++) {
        float edge = (float)i / SLIM_GELU_SCALE;
        const float around[] = {nextafterf(edge, 0.0f), edge, nextafterf(edge, 100.0f)};
        for (int s = 0; s < 3; s++) {
            ys[n++] = around[s];
            ys[n++] = -around[s];
        }
    }
    while (n < 4096) {
        ys[n] = (float)(n - 2048) * 0.0037f;
        n++;
    }
    for (int b = 0; b < n; b += 16) {
        gelu16(ys + b, got);
        for (int l = 0; l < 16; l++) {
            float want = slim_gelu_poly(ys[b + l]);
            ck_assert_msg(memcmp(&want, &got[l], sizeof(float)) == 0 ||
                              (isnan(want) && isnan(got[l])),
                          "Gelu(%a): C %a, AVX-512 %a", (double)ys[b + l], (double)want,
                          (double)got[l]);
        }
    }
#endif
}
END_TEST

/* The AMX tiles (16 rows x a full panel, K in 64-byte steps plus a
 * vpdpbusd tail) against the VNNI loops and the C path: rows around the
 * tile and task sizes, panels full and narrow, k with and without a tail,
 * outlier channels and Gelu in the epilogue; bitwise equal. Where the CPU
 * has no AMX, slim_qgemm_set_amx(true) says so and the VNNI loops run
 * twice (the comparison still holds). */
START_TEST(test_amx_tiles_match_vnni)
{
    const int64_t ms[] = {16, 31, 33, 100};
    const int64_t ns[] = {64, 100, 192};
    const int64_t ks[] = {64, 100, 768};
    const int64_t no = 3;
    for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
        for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
            for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++) {
                int64_t m = ms[a], n = ns[b], k = ks[c];
                float *x = malloc(sizeof(float) * (size_t)(m * k));
                int8_t *w = malloc((size_t)(n * k)), *oq = malloc((size_t)(no * n));
                float *os = malloc(sizeof(float) * (size_t)n);
                float *want = malloc(sizeof(float) * (size_t)(m * n));
                float *got = malloc(sizeof(float) * (size_t)(m * n));
                int64_t oidx[3] = {1, k / 2, k - 1};
                fill_rows(x, m, k);
                fill_weights(w, n, k);
                for (int64_t o = 0; o < no; o++)
                    for (int64_t j = 0; j < n; j++)
                        w[j * k + oidx[o]] = 0;
                fill_weights(oq, no, n);
                for (int64_t j = 0; j < n; j++)
                    os[j] = 0.02f * fabsf(rndf());
                packed_w p = pack(w, n, k);
                void *scratch;
                ck_assert_int_eq(posix_memalign(&scratch, 64, slim_qgemm_scratch_bytes(m, k)), 0);
                slim_qgemm_args q = {.m = m, .n = n, .k = k, .x = x, .ldx = k,
                                     .packed = p.packed, .colsum = p.colsum, .w_scale = p.sw,
                                     .bias = p.bias, .act = SLIM_QGEMM_ACT_GELU, .y = want,
                                     .ldy = n, .n_outl = no, .outl_idx = oidx, .outl_q = oq,
                                     .outl_scale = os};
                ck_assert(slim_qgemm_set_isa(SLIM_QGEMM_C));
                slim_qgemm(&q, scratch);
                q.y = got;
                for (int amx = 0; amx < 2 && slim_qgemm_set_isa(SLIM_QGEMM_AVX512VNNI); amx++) {
                    bool on = slim_qgemm_set_amx(amx == 1);
                    ck_assert(on == (amx == 1 && slim_qgemm_amx_active()));
                    memset(got, 0xFF, sizeof(float) * (size_t)(m * n));
                    slim_qgemm(&q, scratch);
                    ck_assert_msg(memcmp(got, want, sizeof(float) * (size_t)(m * n)) == 0,
                                  "amx %d (on: %d) differs from c at m=%lld n=%lld k=%lld", amx,
                                  (int)on, (long long)m, (long long)n, (long long)k);
                }
                slim_qgemm_set_amx(true);
                slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
                free(scratch);
                unpack_free(&p);
                free(x);
                free(w);
                free(oq);
                free(os);
                free(want);
                free(got);
            }
}
END_TEST

/* Outlier channels with every activation, on full 64-channel panels (the
 * 6-row loop, whose epilogue adds them in registers) and narrow ones, rows
 * 1 to 50, 5 outliers in k = 100 (gathered per row at quantization) and in
 * k = 40 (more than k / 16 + 1: read from x): every path gives the C path's
 * bits, and a row alone gives the same bits as in the batch. */
START_TEST(test_outliers_and_activations_all_paths)
{
    const int64_t ms[] = {1, 5, 6, 7, 13, 50};
    const int64_t ns[] = {64, 130, 40};
    const int64_t no = 5;
    const slim_qgemm_act acts[] = {SLIM_QGEMM_ACT_NONE, SLIM_QGEMM_ACT_RELU,
                                   SLIM_QGEMM_ACT_GELU};
    for (size_t a = 0; a < sizeof(ms) / sizeof(ms[0]); a++)
        for (size_t b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
            for (size_t c = 0; c < 6; c++) {
                int64_t m = ms[a], n = ns[b], k = c < 3 ? 100 : 40;
                float *x = malloc(sizeof(float) * (size_t)(m * k));
                int8_t *w = malloc((size_t)(n * k)), *oq = malloc((size_t)(no * n));
                float *os = malloc(sizeof(float) * (size_t)n);
                float *want = malloc(sizeof(float) * (size_t)(m * n));
                float *got = malloc(sizeof(float) * (size_t)(m * n));
                int64_t oidx[5] = {3, 17, 50 % k, 51 % k, 99 % k};
                fill_rows(x, m, k);
                fill_weights(w, n, k);
                for (int64_t o = 0; o < no; o++)
                    for (int64_t j = 0; j < n; j++)
                        w[j * k + oidx[o]] = 0;
                fill_weights(oq, no, n);
                for (int64_t j = 0; j < n; j++)
                    os[j] = 0.02f * fabsf(rndf());
                packed_w p = pack(w, n, k);
                void *scratch;
                ck_assert_int_eq(posix_memalign(&scratch, 64, slim_qgemm_scratch_bytes(m, k)), 0);
                for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
                    if (!slim_qgemm_set_isa(isas[i]))
                        continue;
                    slim_qgemm_args q = {.m = m, .n = n, .k = k, .x = x, .ldx = k,
                                         .packed = p.packed, .colsum = p.colsum, .w_scale = p.sw,
                                         .bias = p.bias, .act = acts[c % 3], .y = got, .ldy = n,
                                         .n_outl = no, .outl_idx = oidx, .outl_q = oq,
                                         .outl_scale = os};
                    slim_qgemm(&q, scratch);
                    if (i == 0)
                        memcpy(want, got, sizeof(float) * (size_t)(m * n));
                    ck_assert_msg(memcmp(got, want, sizeof(float) * (size_t)(m * n)) == 0,
                                  "%s differs from c at m=%lld n=%lld act %d",
                                  slim_qgemm_isa_name(isas[i]), (long long)m, (long long)n,
                                  (int)acts[c % 3]);
                    float one[130];
                    q.m = 1;
                    q.y = one;
                    for (int64_t r = 0; r < m; r += 3) {
                        q.x = x + r * k;
                        slim_qgemm(&q, scratch);
                        ck_assert(memcmp(one, want + r * n, sizeof(float) * (size_t)n) == 0);
                    }
                }
                slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
                free(scratch);
                unpack_free(&p);
                free(x);
                free(w);
                free(oq);
                free(os);
                free(want);
                free(got);
            }
}
END_TEST

/* A row's result is the same bits alone and in any batch (the batching
 * guarantee): its quantization parameters are its own. */
START_TEST(test_row_result_independent_of_batch)
{
    const int64_t n = 70, k = 97, m = 23;
    float *x = malloc(sizeof(float) * m * k), *y = malloc(sizeof(float) * m * n);
    float *one = malloc(sizeof(float) * n);
    int8_t *w = malloc(n * k);
    fill_rows(x, m, k);
    fill_weights(w, n, k);
    packed_w p = pack(w, n, k);
    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (!slim_qgemm_isa_supported(isas[i]))
            continue;
        run_isa(isas[i], x, m, n, k, &p, true, SLIM_QGEMM_ACT_NONE, y);
        for (int64_t r = 0; r < m; r++) {
            run_isa(isas[i], x + r * k, 1, n, k, &p, true, SLIM_QGEMM_ACT_NONE, one);
            ck_assert_msg(memcmp(one, y + r * n, sizeof(float) * n) == 0,
                          "%s: row %lld alone differs from row %lld of the batch",
                          slim_qgemm_isa_name(isas[i]), (long long)r, (long long)r);
        }
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
    unpack_free(&p);
    free(x);
    free(y);
    free(one);
    free(w);
}
END_TEST

START_TEST(test_quantize_row_round_trip_and_edges)
{
    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (!slim_qgemm_isa_supported(isas[i]))
            continue;
        slim_qgemm_set_isa(isas[i]);
        float x[37];
        uint8_t q[40];
        float s;
        int32_t zp;
        for (int kind = 0; kind < 5; kind++) {
            fill_rows(x, 1, 37);
            for (int j = 0; j < 37; j++)
                x[j] = kind == 1 ? fabsf(x[j]) + 0.5f : kind == 2 ? -fabsf(x[j]) - 0.5f : x[j];
            if (kind == 3)
                x[5] = 0;
            memset(q, 0xAB, sizeof(q));
            slim_qgemm_quantize_row(x, 37, q, &s, &zp);
            ck_assert(s > 0);
            ck_assert_int_ge(zp, 0);
            ck_assert_int_le(zp, 255);
            if (kind == 1)
                ck_assert_int_eq(zp, 0);   /* all positive: 0 is the bottom */
            if (kind == 2)
                ck_assert_int_eq(zp, 255); /* all negative: 0 is the top */
            if (kind == 3)
                ck_assert_int_eq(q[5], zp); /* 0 is exact */
            for (int j = 0; j < 37; j++)
                ck_assert_msg(fabsf(((float)q[j] - (float)zp) * s - x[j]) <= 0.5001f * s,
                              "%s kind %d element %d: %g back as %g", slim_qgemm_isa_name(isas[i]),
                              kind, j, x[j], ((float)q[j] - (float)zp) * s);
            for (int j = 37; j < 40; j++)
                ck_assert_int_eq(q[j], 0); /* padding to k4 */
        }
        x[7] = NAN;
        slim_qgemm_quantize_row(x, 37, q, &s, &zp);
        ck_assert(isnan(s));
        x[7] = INFINITY;
        slim_qgemm_quantize_row(x, 37, q, &s, &zp);
        ck_assert(isnan(s));
        x[7] = 1.0f;
        x[35] = -INFINITY; /* in the vector paths' scalar tail */
        slim_qgemm_quantize_row(x, 37, q, &s, &zp);
        ck_assert(isnan(s));
    }
    /* Every path quantizes to the C path's bytes, signed zeros included. */
    for (int kind = 0; kind < 4; kind++) {
        float x[45];
        uint8_t want[48], got[48];
        float ws, gs;
        int32_t wz, gz;
        fill_rows(x, 1, 45);
        for (int j = 0; j < 45; j++)
            x[j] = kind == 0 ? x[j] : kind == 1 ? (j % 3 ? -0.0f : fabsf(x[j]))
                 : kind == 2 ? (j % 3 ? -0.0f : -fabsf(x[j])) : -0.0f;
        slim_qgemm_set_isa(SLIM_QGEMM_C);
        slim_qgemm_quantize_row(x, 45, want, &ws, &wz);
        for (size_t i = 1; i < sizeof(isas) / sizeof(isas[0]); i++) {
            if (!slim_qgemm_set_isa(isas[i]))
                continue;
            slim_qgemm_quantize_row(x, 45, got, &gs, &gz);
            ck_assert_msg(memcmp(got, want, 48) == 0 && gz == wz &&
                              memcmp(&gs, &ws, sizeof(float)) == 0,
                          "%s kind %d", slim_qgemm_isa_name(isas[i]), kind);
        }
    }
    slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
}
END_TEST

START_TEST(test_pack_unpack_and_colsum)
{
    const int64_t n = 83, k = 131;
    int8_t *w = malloc(n * k), *back = malloc(n * k);
    fill_weights(w, n, k);
    packed_w p = pack(w, n, k);
    slim_qgemm_unpack(p.packed, n, k, back);
    ck_assert_int_eq(memcmp(w, back, n * k), 0);
    for (int64_t j = 0; j < n; j++) {
        int32_t s = 0;
        for (int64_t c = 0; c < k; c++)
            s += w[j * k + c];
        ck_assert_int_eq(p.colsum[j], s);
    }
    ck_assert_uint_eq(slim_qgemm_packed_bytes(n, k), 96 * 132);
    unpack_free(&p);
    free(w);
    free(back);
}
END_TEST

/* slim_qgemm_u8 (MatMulInteger's fast path): pre-quantized u8 rows times a
 * weight packed from k x n storage give exactly sum (x - zx) * w on every
 * path, over odd shapes, zero points 0, 131 and 255, and -128 weights
 * (legal in ONNX's int8, unlike the pass's codes). */
START_TEST(test_u8_int32_exact)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 19, 37}, {13, 70, 131}, {50, 130, 64}};
    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        int64_t m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2], k4 = slim_qgemm_k4(k);
        uint8_t *qx = calloc((size_t)(m * k4), 1);
        int8_t *b = malloc((size_t)(k * n)), *packed;
        int32_t zx[64], *colsum = malloc(sizeof(int32_t) * (size_t)n);
        int32_t *want = malloc(sizeof(int32_t) * (size_t)(m * n));
        int32_t *got = malloc(sizeof(int32_t) * (size_t)(m * n));
        ck_assert(posix_memalign((void **)&packed, 64, slim_qgemm_packed_bytes(n, k)) == 0);
        rng_state = 99 + sh;
        for (int64_t i = 0; i < m * k; i++)
            qx[(i / k) * k4 + i % k] = (uint8_t)(rnd() % 256);
        for (int64_t i = 0; i < k * n; i++)
            b[i] = (int8_t)((int)(rnd() % 256) - 128);
        b[0] = -128;
        for (int64_t r = 0; r < m; r++)
            zx[r] = r % 3 == 0 ? 0 : r % 3 == 1 ? 131 : 255;
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < n; j++) {
                int64_t acc = 0;
                for (int64_t c = 0; c < k; c++)
                    acc += ((int64_t)qx[r * k4 + c] - zx[r]) * b[c * n + j];
                want[r * n + j] = (int32_t)acc;
            }
        slim_qgemm_pack_kn(b, k, n, n, packed, colsum);
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
            if (!slim_qgemm_isa_supported(isas[i]))
                continue;
            ck_assert(slim_qgemm_set_isa(isas[i]));
            memset(got, 0x5a, sizeof(int32_t) * (size_t)(m * n));
            slim_qgemm_args a = {.m = m, .n = n, .k = k, .packed = packed, .colsum = colsum,
                                 .y_i32 = got, .ldy = n};
            slim_qgemm_u8(&a, qx, zx);
            ck_assert_msg(memcmp(got, want, sizeof(int32_t) * (size_t)(m * n)) == 0,
                          "%s, m %lld n %lld k %lld", slim_qgemm_isa_name(isas[i]),
                          (long long)m, (long long)n, (long long)k);
        }
        slim_qgemm_set_isa(SLIM_QGEMM_AUTO);
        free(qx);
        free(b);
        free(packed);
        free(colsum);
        free(want);
        free(got);
    }
}
END_TEST

int main(void)
{
    slim_init();
    /* These tests hold the single int8 weight (bytes, inputs, errors); the
     * second weight of SLIM_INT8_RESIDUAL has its own (test_int8_res.c). */
    setenv("SLIM_INT8_RESIDUAL", "off", 1);
    Suite *s = suite_create("int8");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_paths_match_reference_on_odd_shapes);
    tcase_add_test(tk, test_row_result_independent_of_batch);
    tcase_add_test(tk, test_quantize_row_round_trip_and_edges);
    tcase_add_test(tk, test_pack_unpack_and_colsum);
    tcase_add_test(tk, test_u8_int32_exact);
    tcase_add_test(tk, test_gelu_accuracy);
    tcase_add_test(tk, test_bad_rows_inside_a_block);
    tcase_add_test(tk, test_same_outliers);
    tcase_add_test(tk, test_outliers_and_activations_all_paths);
    tcase_add_test(tk, test_amx_tiles_match_vnni);
    suite_add_tcase(s, tk);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
