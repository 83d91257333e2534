/* test_sparse.c - the sparse kernels (kernels/cpu/sparse.c) against a dense
 * double-precision reference over random masks and odd shapes, the AVX-512
 * path against the C path bit for bit, batch independence, and the pruning
 * pass (quant/prune.c): the 2:4 pattern, exact magnitude counts, global
 * scope, graphs rewritten to SparseMatMul. */
#include "testutil.h"

#include "npz.h"
#include "prune.h"
#include "sparse.h"
#include "alloc.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    return tu_xrnd(&rng_state);
}

static float rndf(void) /* in [-1, 1) */
{
    return tu_xrndf(&rng_state);
}

/* An encoded weight with its buffers. */
typedef struct {
    slim_sparse_w w;
    float *dense;      /* [k][n], what the encoding holds (values rounded to vdtype) */
    void *values, *idx;
    int32_t *rowptr;
    float *bias;
    int64_t nnz;
} enc;

static void enc_free(enc *e)
{
    free(e->dense);
    free(e->values);
    free(e->idx);
    free(e->rowptr);
    free(e->bias);
}

/* A random [k][n] weight with each entry kept with probability `density`
 * (channel 0 always empty when n > 1), encoded csr or 2:4, values in vdt. */
static void make(enc *e, int64_t k, int64_t n, double density, bool two4, slim_dtype vdt,
                 bool bias)
{
    memset(e, 0, sizeof(*e));
    e->dense = malloc(sizeof(float) * (size_t)(k * n));
    for (int64_t i = 0; i < k * n; i++) {
        bool keep = (double)(rnd() % 10000) < density * 10000 && !(n > 1 && i % n == 0);
        float v = keep ? rndf() : 0.0f;
        if (vdt == SLIM_F16)
            v = slim_f16_to_f32(slim_f32_to_f16(v));
        else if (vdt == SLIM_BF16)
            v = slim_bf16_to_f32(slim_f32_to_bf16(v));
        e->dense[i] = v;
    }
    if (two4)
        slim_prune_24(e->dense, n, k, false);
    e->w.enc = two4 ? SLIM_SPARSE_24 : SLIM_SPARSE_CSR;
    e->w.n = n;
    e->w.k = k;
    e->w.vdtype = vdt;
    float *vals;
    if (two4) {
        e->nnz = n * 2 * slim_sparse_24_groups(k);
        vals = malloc(sizeof(float) * (size_t)e->nnz);
        e->idx = malloc((size_t)(n * slim_sparse_24_idx_bytes(k)));
        ck_assert(slim_sparse_24_encode(e->dense, n, k, false, 1.0f, vals, e->idx));
        e->w.idtype = SLIM_U8;
    } else {
        e->nnz = slim_sparse_count_nnz(e->dense, n, k, false);
        vals = malloc(sizeof(float) * (size_t)(e->nnz + 1));
        e->w.idtype = slim_sparse_csr_idtype(k);
        e->idx = malloc(slim_dtype_size(e->w.idtype) * (size_t)(e->nnz + 1));
        e->rowptr = malloc(sizeof(int32_t) * (size_t)(n + 1));
        slim_sparse_csr_encode(e->dense, n, k, false, 1.0f, vals, e->idx, e->rowptr);
    }
    if (vdt == SLIM_F32) {
        e->values = vals;
    } else {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(e->nnz + 1));
        for (int64_t i = 0; i < e->nnz; i++)
            h[i] = vdt == SLIM_F16 ? slim_f32_to_f16(vals[i]) : slim_f32_to_bf16(vals[i]);
        free(vals);
        e->values = h;
    }
    if (bias) {
        e->bias = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++)
            e->bias[j] = rndf();
    }
    e->w.values = e->values;
    e->w.idx = e->idx;
    e->w.rowptr = e->rowptr;
    e->w.bias = e->bias;
    slim_err err;
    ck_assert_msg(slim_sparse_check(&e->w, e->nnz, &err) == SLIM_OK, "%s", err.msg);
}

static float *rand_x(int64_t m, int64_t k)
{
    float *x = malloc(sizeof(float) * (size_t)(m * k + 1));
    for (int64_t i = 0; i < m * k; i++)
        x[i] = rndf() * 2;
    return x;
}

static float *run_isa(const enc *e, slim_sparse_isa isa, int64_t m, const float *x)
{
    ck_assert(slim_sparse_set_isa(isa));
    float *y = malloc(sizeof(float) * (size_t)(m * e->w.n + 1));
    slim_err err;
    ck_assert_int_eq(slim_sparse_matmul(&e->w, m, x, e->w.k, y, e->w.n, &err), SLIM_OK);
    slim_sparse_set_isa(SLIM_SPARSE_ISA_AUTO);
    return y;
}

static bool have_avx512(void)
{
    bool ok = slim_sparse_set_isa(SLIM_SPARSE_ISA_AVX512);
    slim_sparse_set_isa(SLIM_SPARSE_ISA_AUTO);
    return ok;
}

static void check_against_dense(const enc *e, int64_t m, const float *x, const float *y)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < e->w.n; j++) {
            double ref = e->bias ? e->bias[j] : 0, mag = fabs(ref);
            for (int64_t kk = 0; kk < e->w.k; kk++) {
                ref += (double)x[i * e->w.k + kk] * e->dense[kk * e->w.n + j];
                mag += fabs((double)x[i * e->w.k + kk] * e->dense[kk * e->w.n + j]);
            }
            float got = y[i * e->w.n + j];
            ck_assert_msg(fabs(got - ref) <= 1e-5 * mag + 1e-30, "row %lld channel %lld: %g vs "
                          "%g", (long long)i, (long long)j, got, ref);
        }
}

START_TEST(test_kernels_match_dense_on_odd_shapes)
{
    static const int64_t shapes[][3] = {{1, 1, 1},  {3, 1, 5},    {17, 7, 1},  {16, 5, 17},
                                        {64, 33, 19}, {130, 65, 40}, {70, 100, 33}, {5, 6, 31},
                                        /* K chunked (over 512), int32 indices (over 65536) */
                                        {70, 1100, 20}, {16, 70001, 3}};
    static const double densities[] = {0.0, 0.1, 0.5, 1.0};
    static const slim_dtype vdts[] = {SLIM_F32, SLIM_F16, SLIM_BF16};
    bool avx = have_avx512();
    rng_state = 11;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (size_t d = 0; d < 4; d++)
            for (int two4 = 0; two4 < 2; two4++)
                for (int vd = 0; vd < 3; vd++) {
                    int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
                    enc e;
                    make(&e, k, n, densities[d], two4, vdts[vd], (s + d) % 2 == 0);
                    float *x = rand_x(m, k);
                    float *yc = run_isa(&e, SLIM_SPARSE_ISA_C, m, x);
                    check_against_dense(&e, m, x, yc);
                    if (avx) {
                        float *ya = run_isa(&e, SLIM_SPARSE_ISA_AVX512, m, x);
                        ck_assert_msg(memcmp(ya, yc, sizeof(float) * (size_t)(m * n)) == 0,
                                      "AVX-512 differs from C: m %lld k %lld n %lld density %g "
                                      "2:4 %d", (long long)m, (long long)k, (long long)n,
                                      densities[d], two4);
                        free(ya);
                    }
                    free(yc);
                    free(x);
                    enc_free(&e);
                }
}
END_TEST

START_TEST(test_row_result_independent_of_batch)
{
    bool avx = have_avx512();
    rng_state = 5;
    for (int two4 = 0; two4 < 2; two4++) {
        enc e;
        make(&e, 77, 45, 0.3, two4, SLIM_F32, true);
        int64_t m = 150;
        float *x = rand_x(m, 77);
        for (int pass = 0; pass < 1 + avx; pass++) {
            slim_sparse_isa isa = pass ? SLIM_SPARSE_ISA_AVX512 : SLIM_SPARSE_ISA_C;
            float *all = run_isa(&e, isa, m, x);
            /* Alone, in a block of 17 (the 16-row tail path), of 64 + 3. */
            static const int64_t starts[] = {0, 63, 64, 100, 149};
            static const int64_t lens[] = {1, 17, 67};
            for (int a = 0; a < 5; a++)
                for (int b = 0; b < 3; b++) {
                    int64_t r0 = starts[a], len = r0 + lens[b] <= m ? lens[b] : m - r0;
                    float *part = run_isa(&e, isa, len, x + r0 * 77);
                    ck_assert_msg(memcmp(part, all + r0 * 45, sizeof(float) * (size_t)(len * 45))
                                  == 0, "rows %lld..%lld differ from the full batch (isa %d)",
                                  (long long)r0, (long long)(r0 + len), isa);
                    free(part);
                }
            free(all);
        }
        free(x);
        enc_free(&e);
    }
}
END_TEST

/* Every batch size from 1 to 20 (the in-place rows below 4, padded 16-row
 * blocks, a 64-row block plus a tail), cut from anywhere in a batch of 70,
 * gives bitwise the full batch's rows, on every path and encoding; and the
 * AVX-512 path gives the C path's bits. Densities 0.05 to 0.9 make the
 * interleaved channels' lengths differ (their common part and their tails),
 * n = 37 leaves partial groups of 8 and 16 channels, K = 1100 crosses the
 * 512-wide K chunks. Each sub-batch is copied to a buffer of its exact
 * size, so a read past its last row shows under the sanitizers. */
START_TEST(test_small_batches_bitwise)
{
    static const int64_t ks[] = {9, 100, 1100};
    static const double densities[] = {0.05, 0.3, 0.9};
    static const slim_dtype vdts[] = {SLIM_F32, SLIM_F16, SLIM_BF16};
    bool avx = have_avx512();
    rng_state = 23;
    for (int ki = 0; ki < 3; ki++)
        for (int two4 = 0; two4 < 2; two4++)
            for (int vd = 0; vd < 3; vd++) {
                /* 37 channels: blocks of 16, 16, 5; 70: five blocks, so the
                 * few-rows 2:4 path runs four blocks side by side and one */
                int64_t k = ks[ki], n = vd == 2 ? 70 : 37, m = 70;
                enc e;
                make(&e, k, n, densities[(ki + vd) % 3], two4, vdts[vd], vd != 1);
                float *x = rand_x(m, k);
                float *ref = run_isa(&e, SLIM_SPARSE_ISA_C, m, x);
                if (avx) {
                    float *all = run_isa(&e, SLIM_SPARSE_ISA_AVX512, m, x);
                    ck_assert_msg(memcmp(all, ref, sizeof(float) * (size_t)(m * n)) == 0,
                                  "AVX-512 differs from C: k %lld 2:4 %d dtype %d", (long long)k,
                                  two4, vd);
                    free(all);
                }
                for (int pass = 0; pass < 1 + avx; pass++)
                    for (int64_t len = 1; len <= 20; len++) {
                        int64_t r0 = (len * 13) % (m - len + 1);
                        float *xs = malloc(sizeof(float) * (size_t)(len * k));
                        memcpy(xs, x + r0 * k, sizeof(float) * (size_t)(len * k));
                        float *y = run_isa(&e, pass ? SLIM_SPARSE_ISA_AVX512 : SLIM_SPARSE_ISA_C,
                                           len, xs);
                        ck_assert_msg(memcmp(y, ref + r0 * n, sizeof(float) * (size_t)(len * n))
                                      == 0, "%lld rows from %lld differ from the batch of %lld "
                                      "(k %lld, 2:4 %d, dtype %d, %s)", (long long)len,
                                      (long long)r0, (long long)m, (long long)k, two4, vd,
                                      pass ? "avx512" : "c");
                        free(y);
                        free(xs);
                    }
                free(ref);
                free(x);
                enc_free(&e);
            }
}
END_TEST

/* The transposed x is scratch from the allocator, so a memory account's
 * limit refuses it (a clean error, no crash, nothing written past y);
 * batches small enough to read x in place need none and still run. */
START_TEST(test_scratch_through_allocator)
{
    if (!have_avx512())
        return;
    rng_state = 31;
    for (int two4 = 0; two4 < 2; two4++) {
        enc e;
        make(&e, 1024, 40, 0.2, two4, SLIM_F32, true);
        float *x = rand_x(64, 1024);
        float *y = malloc(sizeof(float) * 64 * 40);
        slim_mem_account *acct = slim_mem_account_new("test_sparse", 64 << 10);
        ck_assert_ptr_nonnull(acct);
        slim_mem_account *prev = slim_mem_account_enter(acct);
        slim_err err;
        ck_assert(slim_sparse_set_isa(SLIM_SPARSE_ISA_AVX512));
        /* 64 rows x 1024 k transposed: 256 KiB, over the 64 KiB limit */
        slim_status st = slim_sparse_matmul(&e.w, 64, x, 1024, y, 40, &err);
        ck_assert_int_eq(st, SLIM_EOOM);
        ck_assert_msg(strlen(err.msg) > 0, "no message");
        /* 2 rows: in place, no scratch */
        ck_assert_int_eq(slim_sparse_matmul(&e.w, 2, x, 1024, y, 40, &err), SLIM_OK);
        slim_sparse_set_isa(SLIM_SPARSE_ISA_AUTO);
        slim_mem_account_enter(prev);
        ck_assert_uint_eq(atomic_load(&acct->current), 0);  /* nothing left charged */
        slim_mem_account_unref(acct);
        float *ref = run_isa(&e, SLIM_SPARSE_ISA_C, 2, x);
        ck_assert(memcmp(ref, y, sizeof(float) * 2 * 40) == 0);
        free(ref);
        free(y);
        free(x);
        enc_free(&e);
    }
}
END_TEST

START_TEST(test_24_pattern)
{
    rng_state = 3;
    for (int64_t k = 1; k <= 11; k++)
        for (int nk = 0; nk < 2; nk++) {
            int64_t n = 7;
            float *w = malloc(sizeof(float) * (size_t)(k * n)), *orig = malloc(sizeof(float) * (size_t)(k * n));
            for (int64_t i = 0; i < k * n; i++)
                orig[i] = w[i] = rndf();
            slim_prune_24(w, n, k, nk);
            for (int64_t j = 0; j < n; j++)
                for (int64_t g = 0; g < k; g += 4) {
                    int width = k - g < 4 ? (int)(k - g) : 4, kept = 0;
                    float min_kept = INFINITY, max_dropped = 0;
                    for (int q = 0; q < width; q++) {
                        int64_t at = nk ? j * k + g + q : (g + q) * n + j;
                        if (w[at] != 0) {
                            ck_assert(w[at] == orig[at]);
                            kept++;
                            min_kept = fminf(min_kept, fabsf(orig[at]));
                        } else {
                            max_dropped = fmaxf(max_dropped, fabsf(orig[at]));
                        }
                    }
                    /* Two of four along K (the tail: all of 1 or 2, two of 3). */
                    ck_assert_int_eq(kept, width < 2 ? width : 2);
                    ck_assert(kept == width || min_kept >= max_dropped);
                }
            free(w);
            free(orig);
        }
}
END_TEST

START_TEST(test_magnitude_exact_count_with_ties)
{
    rng_state = 9;
    int64_t n = 1000;
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t c = 0; c <= n; c += 137) {
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)((int)(rnd() % 7) - 3) + 0.5f; /* 6 levels: many ties */
        float *orig = malloc(sizeof(float) * (size_t)n);
        memcpy(orig, w, sizeof(float) * (size_t)n);
        slim_err err;
        int64_t len = n;
        ck_assert_int_eq(slim_prune_smallest(&w, &len, 1, c, &err), SLIM_OK);
        int64_t zeros = 0;
        float max_zeroed = 0, min_kept = INFINITY;
        for (int64_t i = 0; i < n; i++) {
            if (w[i] == 0) {
                zeros++;
                max_zeroed = fmaxf(max_zeroed, fabsf(orig[i]));
            } else {
                min_kept = fminf(min_kept, fabsf(orig[i]));
            }
        }
        ck_assert_int_eq(zeros, c);
        ck_assert(max_zeroed <= min_kept);
        free(orig);
    }
    free(w);
}
END_TEST

START_TEST(test_global_scope)
{
    rng_state = 21;
    int64_t la = 300, lb = 500;
    float *a = malloc(sizeof(float) * (size_t)la), *b = malloc(sizeof(float) * (size_t)lb);
    for (int64_t i = 0; i < la; i++)
        a[i] = rndf() * 0.1f;  /* a small layer ... */
    for (int64_t i = 0; i < lb; i++)
        b[i] = rndf() * 10.0f; /* ... and a large one */
    float *ws[2] = {a, b};
    int64_t len[2] = {la, lb};
    slim_err err;
    ck_assert_int_eq(slim_prune_smallest(ws, len, 2, 400, &err), SLIM_OK);
    int64_t za = 0, zb = 0;
    for (int64_t i = 0; i < la; i++)
        za += a[i] == 0;
    for (int64_t i = 0; i < lb; i++)
        zb += b[i] == 0;
    /* 400 of 800 in all; the whole small layer goes first. */
    ck_assert_int_eq(za + zb, 400);
    ck_assert_int_eq(za, la);
    free(a);
    free(b);
}
END_TEST

/* ---- the pass on graphs ------------------------------------------------------- */

/* x[*, 40] -> MatMul(w[40,24]) -> Gemm(transB, alpha, beta, C: w2[9,24]) -> y[*, 9] */
static slim_graph *two_layers(void)
{
    return tu_mm_gemm(&rng_state);
}

static slim_tensor run1(slim_graph *g, slim_tensor in)
{
    slim_err err;
    return tu_run1(g, "x", in, SLIM_OK, &err);
}

START_TEST(test_pass_sparse_equals_dense_pruned)
{
    static const char *methods[] = {"magnitude", "2:4"};
    slim_tensor x = tu_xinput(&rng_state, 7, 2, (int64_t[]){21, 40});
    for (int mth = 0; mth < 2; mth++) {
        slim_err err;
        slim_prune_report rd, rs;
        slim_prune_opts od = {.method = methods[mth], .amount = 0.9, .storage = "dense"};
        slim_graph *gd = two_layers();
        ck_assert_msg(slim_prune(gd, &od, &rd, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_str_eq(gd->nodes[0].op_type, "MatMul");
        slim_tensor yd = run1(gd, x);

        slim_prune_opts os = od;
        os.storage = "sparse";
        slim_graph *gs = two_layers();
        ck_assert_msg(slim_prune(gs, &os, &rs, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_str_eq(gs->nodes[0].op_type, "SparseMatMul");
        ck_assert_str_eq(gs->nodes[0].domain, "com.slimserve");
        ck_assert_str_eq(gs->nodes[1].op_type, "SparseMatMul");
        ck_assert_int_eq(gs->nodes[1].n_in, mth ? 5 : 5); /* Gemm's C became a bias */
        /* The float weights are gone. */
        ck_assert_int_ne(gs->values[slim_graph_find_value(gs, "w")].kind, SLIM_VALUE_INITIALIZER);
        ck_assert_int_eq(rs.n_layers, 2);
        ck_assert_str_eq(rs.layers[0].storage, mth ? "2:4" : "csr");
        if (mth == 0) {
            /* round(0.9 * 960) = 864 zeros, exactly. */
            ck_assert_int_eq((int64_t)llround(rs.layers[0].sparsity * 960), 864);
            ck_assert_uint_eq(rs.layers[0].bytes_after, 96 * 6 + 25 * 4);
        } else {
            ck_assert_double_eq_tol(rs.layers[0].sparsity, 0.5, 1e-9);
            ck_assert_uint_eq(rs.layers[0].bytes_after, 24 * (20 * 4 + 5));
        }
        slim_tensor ys = run1(gs, x);
        for (int64_t i = 0; i < 21 * 9; i++) {
            float a = ((float *)yd.data)[i], b = ((float *)ys.data)[i];
            ck_assert_msg(fabsf(a - b) <= 1e-5f * (1 + fabsf(a)), "element %lld: %g vs %g",
                          (long long)i, a, b);
        }
        /* auto: 90% csr pays, 2:4 pays. */
        slim_prune_report ra;
        slim_prune_opts oa = od;
        oa.storage = NULL;
        slim_graph *ga = two_layers();
        ck_assert_int_eq(slim_prune(ga, &oa, &ra, &err), SLIM_OK);
        ck_assert_str_eq(ra.layers[0].storage, mth ? "2:4" : "csr");
        slim_graph_free(ga);
        slim_prune_report_free(&ra);
        slim_prune_report_free(&rd);
        slim_prune_report_free(&rs);
        slim_tensor_release(&yd);
        slim_tensor_release(&ys);
    }
    /* At 30% sparsity csr does not pay: the layer stays dense, saying why. */
    slim_err err;
    slim_prune_report r;
    slim_prune_opts o = {.method = "magnitude", .amount = 0.3};
    slim_graph *g = two_layers();
    ck_assert_int_eq(slim_prune(g, &o, &r, &err), SLIM_OK);
    ck_assert_str_eq(r.layers[0].storage, "dense");
    ck_assert(strlen(r.layers[0].why) > 0);
    ck_assert_str_eq(g->nodes[0].op_type, "MatMul");
    slim_prune_report_free(&r);
    slim_graph_free(g);
    slim_tensor_release(&x);
}
END_TEST

START_TEST(test_bad_options_and_encodings_refused)
{
    slim_err err;
    slim_graph *g = two_layers();
    slim_prune_opts o = {.method = "magnitude", .amount = 1.0};
    ck_assert_int_eq(slim_prune(g, &o, NULL, &err), SLIM_EINVAL);
    o = (slim_prune_opts){.method = "3:4"};
    ck_assert_int_eq(slim_prune(g, &o, NULL, &err), SLIM_EINVAL);
    o = (slim_prune_opts){.method = "magnitude", .amount = 0.5, .ops = (const char *[]){"nope"},
                          .n_ops = 1};
    ck_assert_int_eq(slim_prune(g, &o, NULL, &err), SLIM_EINVAL);
    ck_assert(strstr(err.msg, "nope"));
    slim_graph_free(g);

    enc e;
    rng_state = 1;
    make(&e, 10, 4, 0.5, false, SLIM_F32, false);
    if (e.nnz >= 2) {
        uint16_t *ix = e.idx;
        uint16_t keep = ix[0];
        ix[0] = 10; /* past K */
        ck_assert_int_eq(slim_sparse_check(&e.w, e.nnz, &err), SLIM_EINVAL);
        ix[0] = keep;
    }
    e.rowptr[1] = e.rowptr[2] + 1; /* decreasing */
    ck_assert_int_eq(slim_sparse_check(&e.w, e.nnz, &err), SLIM_EINVAL);
    enc_free(&e);
    make(&e, 6, 3, 0.5, true, SLIM_F32, false); /* tail group of 2 */
    ((uint8_t *)e.idx)[0] |= 0xC0;              /* second group, code 3 >= 2 */
    ck_assert_int_eq(slim_sparse_check(&e.w, e.nnz, &err), SLIM_EINVAL);
    enc_free(&e);
}
END_TEST

/* A SparseMatMul node as a forged .slim file could hold it. */
static slim_graph *forged(bool weight_from_input, uint16_t bad_index)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    int id = slim_graph_add_node(g, "sp", "SparseMatMul", "com.slimserve", 4,
                                 (const char *[]){"x", "v", "i", "r"}, 1, (const char *[]){"y"});
    g->nodes[id].opset = 1;
    tu_attr_s(&g->nodes[id], "encoding", "csr");
    tu_attr_i(&g->nodes[id], "K", 4);
    int v = slim_graph_find_value(g, "v"), i = slim_graph_find_value(g, "i"),
        r = slim_graph_find_value(g, "r");
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(1, (int64_t[]){3}, (float[]){1, 2, 3});
    g->values[i].kind = SLIM_VALUE_INITIALIZER;
    g->values[i].init = tu_tensor(SLIM_U16, 1, (int64_t[]){3}, (uint16_t[]){0, 3, bad_index});
    g->values[r].kind = SLIM_VALUE_INITIALIZER;
    g->values[r].init = tu_tensor(SLIM_I32, 1, (int64_t[]){3}, (int32_t[]){0, 2, 3});
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    if (weight_from_input) {
        slim_tensor_release(&g->values[v].init);
        memset(&g->values[v].init, 0, sizeof(slim_tensor));
        g->values[v].kind = SLIM_VALUE_INTERMEDIATE;
        slim_graph_add_input(g, v);
        g->values[v].info.dtype = SLIM_F32;
    }
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    return g;
}

START_TEST(test_forged_node_refused)
{
    slim_err err;
    slim_model *m;
    /* Good: y = [x0 + 2 x3, 3 x1]. */
    ck_assert_msg(slim_model_from_graph(forged(false, 1), &m, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor x = tu_f32(2, (int64_t[]){1, 4}, (float[]){1, 10, 100, 1000}), *out;
    int n_out;
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err), SLIM_OK);
    ck_assert_float_eq(((float *)out[0].data)[0], 2001.0f);
    ck_assert_float_eq(((float *)out[0].data)[1], 30.0f);
    slim_tensors_free(out, n_out);
    slim_model_free(m);
    /* An index past K: refused at the run, naming the node. */
    ck_assert_int_eq(slim_model_from_graph(forged(false, 4), &m, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"sp\"") && strstr(err.msg, "index"), "%s", err.msg);
    slim_model_free(m);
    /* Values that are not a constant: refused at load. */
    ck_assert_int_eq(slim_model_from_graph(forged(true, 1), &m, &err), SLIM_EPARSE);
    ck_assert_msg(strstr(err.msg, "initializer"), "%s", err.msg);
    slim_tensor_release(&x);
}
END_TEST

/* np.savez_compressed(f, w=np.array([[1,0,1],[0,1,1]], np.uint8), v=np.ones(2, bool)) */
static const unsigned char npz_blob[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x80,
    0x45, 0x02, 0x53, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00,
    0x77, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x86, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x4b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b,
    0x10, 0xc9, 0xc8, 0x50, 0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5,
    0xa0, 0x5e, 0x53, 0x6a, 0xa8, 0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98,
    0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a, 0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17,
    0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a, 0x46, 0x3a, 0x0a, 0xc6, 0x9a, 0x3a, 0x0a, 0xb5,
    0x0a, 0x64, 0x03, 0x2e, 0x46, 0x06, 0x20, 0x64, 0x04, 0x00, 0x50, 0x4b, 0x03, 0x04, 0x2d,
    0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x78, 0x29, 0xbc, 0x2a, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x76, 0x2e, 0x6e, 0x70, 0x79,
    0x01, 0x00, 0x10, 0x00, 0x82, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6,
    0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x5e, 0x93, 0x64, 0xa8,
    0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92,
    0x0a, 0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02,
    0xf9, 0x1a, 0x46, 0x3a, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x14, 0x00, 0x2e, 0x46, 0x46, 0x00,
    0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21,
    0x00, 0x80, 0x45, 0x02, 0x53, 0x4b, 0x00, 0x00, 0x00, 0x86, 0x00, 0x00, 0x00, 0x05, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x77, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00,
    0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x78, 0x29, 0xbc, 0x2a, 0x46, 0x00, 0x00, 0x00,
    0x82, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x80, 0x01, 0x82, 0x00, 0x00, 0x00, 0x76, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05,
    0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x66, 0x00, 0x00, 0x00, 0xff, 0x00,
    0x00, 0x00, 0x00, 0x00,
};

START_TEST(test_npz_damaged_never_crashes)
{
    char path[] = "/tmp/test_sparse_npz_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    size_t n = sizeof(npz_blob);
    unsigned char *buf = malloc(n);
    /* The whole file reads back: w [2, 3] uint8, v [2] bool. */
    slim_err err;
    FILE *f = fopen(path, "wb");
    fwrite(npz_blob, 1, n, f);
    fclose(f);
    slim_npz *z;
    ck_assert_msg(slim_npz_open(path, &z, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(slim_npz_count(z), 2);
    for (int i = 0; i < 2; i++) {
        slim_tensor t;
        ck_assert_msg(slim_npz_load(z, i, 1 << 20, &t, &err) == SLIM_OK, "%s", err.msg);
        ck_assert_int_eq(slim_tensor_numel(&t), strcmp(slim_npz_name(z, i), "w") == 0 ? 6 : 2);
        slim_tensor_release(&t);
    }
    slim_npz_close(z);
    /* Every truncation and every flipped byte: an error or a correct read,
     * never a crash or a read out of bounds (run under ASan). */
    for (size_t len = 0; len < 2 * n; len++) {
        size_t cut = len < n ? len : n;
        memcpy(buf, npz_blob, n);
        if (len >= n)
            buf[len - n] ^= 0x5A;
        f = fopen(path, "wb");
        fwrite(buf, 1, cut, f);
        fclose(f);
        if (slim_npz_open(path, &z, &err) != SLIM_OK)
            continue;
        for (int i = 0; i < slim_npz_count(z); i++) {
            slim_tensor t;
            if (slim_npz_load(z, i, 1 << 20, &t, &err) == SLIM_OK)
                slim_tensor_release(&t);
        }
        slim_npz_close(z);
    }
    free(buf);
    remove(path);
}
END_TEST

/* A borrowed tensor over data (not read by slim_sparse_operands). */
static slim_tensor borrowed(slim_dtype dt, int ndim, int64_t d0, int64_t d1, void *data)
{
    slim_tensor t;
    memset(&t, 0, sizeof(t));
    t.dtype = dt;
    t.ndim = ndim;
    t.dims[0] = d0;
    t.dims[1] = d1;
    t.data = data;
    return t;
}

/* The one operand checker SparseMatMul and SparseConv share: the same
 * refusals for both, the channel named as each op calls it, half biases
 * only where asked for. */
START_TEST(test_shared_operand_checker)
{
    static float vals[8], bias[3];
    static uint16_t ix[8] = {0, 9, 1, 2, 3, 4, 5, 6}; /* rows {0, 9}, {1, 2, 3}, {4, 5, 6} */
    static int32_t rp[4] = {0, 2, 5, 8};
    static uint8_t codes[6];
    slim_tensor v = borrowed(SLIM_F32, 1, 8, 0, vals), i = borrowed(SLIM_U16, 1, 8, 0, ix);
    slim_tensor r = borrowed(SLIM_I32, 1, 4, 0, rp), b = borrowed(SLIM_F32, 1, 3, 0, bias);
    slim_tensor hb = borrowed(SLIM_F16, 1, 3, 0, bias), sc = borrowed(SLIM_F32, 1, 2, 0, bias);
    slim_sparse_w w;
    int64_t nnz = -1;
    slim_err err = {0};
    ck_assert_msg(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &i, &r, &b, NULL, 'M', false, &w,
                                       &nnz, &err) == SLIM_OK, "%s", err.msg);
    ck_assert(w.n == 3 && nnz == 8 && w.rowptr == rp && w.bias == NULL && w.k == 10);
    ck_assert_int_eq(slim_sparse_check(&w, nnz, &err), SLIM_OK);
    const char who[2] = {'N', 'M'};
    for (int q = 0; q < 2; q++) {
        char want[32];
        snprintf(want, sizeof(want), "[%c + 1]", who[q]);
        ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &i, NULL, NULL, NULL,
                                              who[q], q == 0, &w, &nnz, &err), SLIM_ESHAPE);
        ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
        slim_tensor wide = borrowed(SLIM_I32, 1, 8, 0, ix); /* K <= 65536 takes uint16 */
        ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &wide, &r, NULL, NULL,
                                              who[q], q == 0, &w, &nnz, &err), SLIM_ETYPE);
        ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &i, &r, NULL, &sc,
                                              who[q], q == 0, &w, &nnz, &err), SLIM_ESHAPE);
        ck_assert_msg(strstr(err.msg, "scale"), "%s", err.msg);
        /* 2:4 of K = 10: 3 groups, values [n, 6], codes [n, 2]; no row pointers */
        slim_tensor v24 = borrowed(SLIM_F32, 2, 1, 6, vals), i24 = borrowed(SLIM_U8, 2, 1, 2,
                                                                             codes);
        ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_24, 10, &v24, &i24, &r, NULL, NULL,
                                              who[q], q == 0, &w, &nnz, &err), SLIM_EINVAL);
        ck_assert_msg(slim_sparse_operands(SLIM_SPARSE_24, 10, &v24, &i24, NULL, NULL, NULL,
                                           who[q], q == 0, &w, &nnz, &err) == SLIM_OK,
                      "%s", err.msg);
        ck_assert(w.n == 1 && nnz == 6);
    }
    /* A float16 bias: SparseMatMul's (half) yes, SparseConv's no. */
    ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &i, &r, &hb, NULL, 'N', true,
                                          &w, &nnz, &err), SLIM_OK);
    ck_assert_int_eq(slim_sparse_operands(SLIM_SPARSE_CSR, 10, &v, &i, &r, &hb, NULL, 'M', false,
                                          &w, &nnz, &err), SLIM_ESHAPE);
    ck_assert_msg(strstr(err.msg, "float32 [3]"), "%s", err.msg);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("sparse");
    TCase *tk = tcase_create("kernel");
    tcase_add_test(tk, test_kernels_match_dense_on_odd_shapes);
    tcase_add_test(tk, test_row_result_independent_of_batch);
    tcase_add_test(tk, test_small_batches_bitwise);
    tcase_add_test(tk, test_scratch_through_allocator);
    suite_add_tcase(s, tk);
    TCase *tp = tcase_create("pass");
    tcase_add_test(tp, test_24_pattern);
    tcase_add_test(tp, test_magnitude_exact_count_with_ties);
    tcase_add_test(tp, test_global_scope);
    tcase_add_test(tp, test_pass_sparse_equals_dense_pruned);
    tcase_add_test(tp, test_bad_options_and_encodings_refused);
    tcase_add_test(tp, test_forged_node_refused);
    tcase_add_test(tp, test_shared_operand_checker);
    tcase_add_test(tp, test_npz_damaged_never_crashes);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
