/* test_kernel_bounds.c - work and memory bounded by the tensors (issue 29):
 * pool and conv windows far wider than their input, Einsum contracted
 * pairwise (against a naive reference), kernel scratch charged to the
 * memory account, and long kernels that stop at their deadline. */
#include "testutil.h"
#include "alloc.h"
#include "cancel.h"
#include "slim_init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* The test's own peak resident set (check runs each test in a child). */
static size_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

static double now_s(void)
{
    return (double)slim_cancel_now_ns() / 1e9;
}

/* tu_run under a model memory limit (0: none); *peak gets the model
 * account's peak, which every tensor and kernel scratch is charged to. */
static slim_status run_limited(slim_graph *g, const slim_tensor *in, int n_in, size_t limit,
                               size_t *peak, slim_tensor **out, int *n_out, slim_err *err)
{
    slim_model *m;
    slim_status st = slim_model_from_graph(g, &m, err);
    ck_assert_int_eq(st, SLIM_OK);
    ck_assert_int_eq(slim_model_set_memory_limit(m, limit, err), SLIM_OK);
    const char *names[8];
    for (int i = 0; i < n_in; i++)
        names[i] = slim_model_input(m, i)->name;
    st = slim_model_run(m, n_in, names, in, out, n_out, err);
    *peak = atomic_load(&m->account->peak);
    if (st == SLIM_OK) { /* the output is all that stays */
        size_t held = atomic_load(&m->account->current);
        ck_assert_uint_ge(held, slim_tensor_nbytes(&(*out)[0]));
        ck_assert_uint_lt(held - slim_tensor_nbytes(&(*out)[0]), 4096);
    }
    slim_model_free(m);
    return st;
}

/* ---- pools over a window of 4e8 on one element ---------------------------- */

/* The model: kernel 1 x k, pads k-1 on both sides of the width, a
 * 1x1x1x1 input; stride s along the width. */
static slim_graph *wide_pool(const char *op, int64_t k, int64_t s, int count_include_pad)
{
    slim_graph *g = tu_graph(op, 13, 1, (const char *[]){"x"}, 1);
    tu_attr_ints(tu_node0(g), "kernel_shape", 2, (int64_t[]){1, k});
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){0, k - 1, 0, k - 1});
    tu_attr_ints(tu_node0(g), "strides", 2, (int64_t[]){1, s});
    if (count_include_pad >= 0)
        tu_attr_i(tu_node0(g), "count_include_pad", count_include_pad);
    return g;
}

static void run_wide_pool(const char *op, int cip, float want)
{
    /* Output width (1 + 2(k-1) - k) / s + 1 = 4; every window holds the
     * element, and all k of its taps lie in the padded input. */
    slim_tensor in = tu_f32(4, (int64_t[]){1, 1, 1, 1}, (float[]){3.5f});
    slim_tensor *out;
    int n_out;
    slim_err err;
    ck_assert_int_eq(tu_run(wide_pool(op, 400000000, 100000000, cip), &in, 1, &out, &n_out, &err),
                     SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 1, 4});
    tu_assert_close_f32(&out[0], (float[]){want, want, want, want}, 4, 1e-6);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&in, 1);
}

START_TEST(test_pool_window_4e8_strided)
{
    run_wide_pool("MaxPool", -1, 3.5f);
    run_wide_pool("AveragePool", 0, 3.5f);
    run_wide_pool("AveragePool", 1, 3.5f / 4e8f); /* the padding counts */
    run_wide_pool("LpPool", -1, 3.5f);
    /* Scratch sized by the kernel (a range per tap) was 12.8 GB here. */
    ck_assert_uint_lt(peak_rss(), 256 * MiB);
}
END_TEST

/* The stride-1 form under a 1 GiB account: with a 1e8 window the
 * output (400 MB) is all the run holds; with 4e8 the 1.6 GB output itself
 * is refused, cleanly. */
START_TEST(test_pool_window_stride1_under_limit)
{
    slim_tensor in = tu_f32(4, (int64_t[]){1, 1, 1, 1}, (float[]){-2.0f});
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err;
    size_t peak;
    ck_assert_int_eq(run_limited(wide_pool("MaxPool", 100000000, 1, -1), &in, 1, GiB, &peak, &out,
                                 &n_out, &err),
                     SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 1, 100000000});
    const float *y = out[0].data;
    for (int64_t i = 0; i < 100000000; i++)
        if (y[i] != -2.0f)
            ck_abort_msg("y[%lld] = %g, expected -2", (long long)i, y[i]);
    slim_tensors_free(out, n_out);
    ck_assert_uint_ge(peak, 400000000);
    ck_assert_uint_le(peak, 400000000 + 64 * MiB);
    ck_assert_uint_lt(peak_rss(), 700 * MiB); /* was 3.1 GB (6.6 GB with the ranges) */

    for (int avg = 0; avg < 2; avg++) {
        slim_graph *g = wide_pool(avg ? "AveragePool" : "MaxPool", 400000000, 1, avg ? 1 : -1);
        ck_assert_int_eq(run_limited(g, &in, 1, GiB, &peak, &out, &n_out, &err), SLIM_EOOM);
        ck_assert_uint_le(peak, GiB);
    }
    ck_assert_uint_lt(peak_rss(), 700 * MiB);
    tu_free_inputs(&in, 1);
}
END_TEST

/* ---- conv kernels far wider than the input ------------------------------- */

/* x: C channels of one element; W: [C, 1, 1, k] (group C when grouped);
 * pads k-1: output o of channel c is x[c] * w[c][k-1-o]. */
static void run_wide_conv(int64_t C, bool grouped)
{
    const int64_t k = 200001;
    slim_graph *g = tu_graph("Conv", 11, 2, (const char *[]){"x", "w"}, 1);
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){0, k - 1, 0, k - 1});
    if (grouped)
        tu_attr_i(tu_node0(g), "group", C);
    int64_t cin = grouped ? 1 : C, M = grouped ? C : 1;
    float *w = malloc(sizeof(float) * (size_t)(M * cin * k)), x[2] = {2.0f, -1.0f};
    for (int64_t i = 0; i < M * cin * k; i++)
        w[i] = (float)(i % k + 1 + (i / k) * 7);
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, C, 1, 1}, x),
                         tu_f32(4, (int64_t[]){M, cin, 1, k}, w)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    size_t peak;
    ck_assert_int_eq(run_limited(g, in, 2, 0, &peak, &out, &n_out, &err), SLIM_OK);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, M, 1, k});
    /* The output (0.8 or 1.6 MB) and no scratch: im2col held 64 columns of
     * 2e5 rows (51 MB), the depthwise loop a padded plane per task. */
    ck_assert_uint_lt(peak, slim_tensor_nbytes(&out[0]) + 64 * 1024);
    const float *y = out[0].data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t o = 0; o < k; o++) {
            double want = 0;
            for (int64_t c = 0; c < cin; c++)
                want += (double)x[grouped ? m : c] * w[(m * cin + c) * k + (k - 1 - o)];
            if (fabs(y[m * k + o] - want) > 1e-6 * fabs(want))
                ck_abort_msg("y[%lld][%lld] = %g, expected %g", (long long)m, (long long)o,
                             y[m * k + o], want);
        }
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
    free(w);
}

/* im2col made this a 1 x 2e5 x 2e5 product of zeros (4e10 steps) and the
 * depthwise loop 2e5 taps per output; both now take one tap per output. */
START_TEST(test_conv_kernel_wider_than_input)
{
    run_wide_conv(2, false);
    run_wide_conv(2, true);
}
END_TEST

/* ConvInteger unrolled every (tap, output) pair as int16 columns: 3e4 x
 * 3e4 of them here (1.8 GB); the taps inside the input are 3e4. (It takes
 * at most 32768 taps, so that int32 sums cannot overflow.) */
START_TEST(test_conv_integer_kernel_wider_than_input)
{
    const int64_t k = 30001;
    slim_graph *g = tu_graph("ConvInteger", 10, 3, (const char *[]){"x", "w", "xzp"}, 1);
    tu_attr_ints(tu_node0(g), "pads", 4, (int64_t[]){0, k - 1, 0, k - 1});
    uint8_t *w = malloc((size_t)k), x = 7, xzp = 2;
    for (int64_t i = 0; i < k; i++)
        w[i] = (uint8_t)(i % 251);
    slim_tensor in[3] = {tu_tensor(SLIM_U8, 4, (int64_t[]){1, 1, 1, 1}, &x),
                         tu_tensor(SLIM_U8, 4, (int64_t[]){1, 1, 1, k}, w),
                         tu_tensor(SLIM_U8, 0, NULL, &xzp)};
    slim_tensor *out;
    int n_out;
    slim_err err;
    size_t peak;
    slim_status st = run_limited(g, in, 3, 0, &peak, &out, &n_out, &err);
    ck_assert_msg(st == SLIM_OK, "%s", err.msg);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 1, k});
    ck_assert_int_eq(out[0].dtype, SLIM_I32);
    const int32_t *y = out[0].data;
    for (int64_t o = 0; o < k; o++)
        if (y[o] != 5 * (int32_t)w[k - 1 - o])
            ck_abort_msg("y[%lld] = %d, expected %d", (long long)o, y[o], 5 * w[k - 1 - o]);
    ck_assert_uint_lt(peak, slim_tensor_nbytes(&out[0]) + 1024 * 1024); /* the shifted w, 60 KB */
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 3);
    free(w);
}
END_TEST

/* ---- Einsum --------------------------------------------------------------- */

static slim_status run_einsum(const char *eq, int n, slim_tensor *in, slim_tensor **out,
                              int *n_out, slim_err *err)
{
    const char *names[8] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    slim_graph *g = tu_graph("Einsum", 12, n, names, 1);
    tu_attr_s(tu_node0(g), "equation", eq);
    return tu_run(g, in, n, out, n_out, err);
}

/* The 2.8e14-step loop: the product of eight sums. */
START_TEST(test_einsum_eight_inputs)
{
    slim_tensor in[8];
    double want = 1;
    uint32_t rng = 7;
    for (int i = 0; i < 8; i++) {
        float v[64];
        double sum = 0;
        for (int t = 0; t < 64; t++)
            sum += v[t] = 0.5f + 0.5f * tu_rndf(&rng);
        want *= sum;
        in[i] = tu_f32(1, (int64_t[]){64}, v);
    }
    slim_tensor *out;
    int n_out;
    slim_err err;
    double t0 = now_s();
    ck_assert_int_eq(run_einsum("a,b,c,d,e,f,g,h->", 8, in, &out, &n_out, &err), SLIM_OK);
    ck_assert_double_lt(now_s() - t0, 5.0); /* was days */
    ck_assert_int_eq(out[0].ndim, 0);
    ck_assert_double_le(fabs(*(float *)out[0].data - want), 1e-5 * want);
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 8);
}
END_TEST

/* A random equation over letters a..f (sizes 1..4), 1-5 operands of rank
 * 0-4 with repeated letters (diagonals) and broadcast dims of 1, against
 * the definition: every assignment of every letter, summed. */
typedef struct {
    int n_ops, rank[5], lab[5][4], out_rank, out_lab[6];
    int64_t size[6];
    bool bcast[5][4];
} ein_case;

static void ein_random_case(uint32_t *rng, ein_case *c, char *eq)
{
#define RND(n) ((int)((*rng = *rng * 1103515245u + 12345u) >> 16) % (n))
    memset(c, 0, sizeof(*c));
    for (int l = 0; l < 6; l++)
        c->size[l] = 1 + RND(4);
    c->n_ops = 1 + RND(5);
    bool used[6] = {false};
    char *p = eq;
    for (int i = 0; i < c->n_ops; i++) {
        c->rank[i] = RND(5);
        for (int d = 0; d < c->rank[i]; d++) {
            c->lab[i][d] = RND(6);
            used[c->lab[i][d]] = true;
            c->bcast[i][d] = RND(8) == 0;
            *p++ = (char)('a' + c->lab[i][d]);
        }
        *p++ = i + 1 < c->n_ops ? ',' : '-';
    }
    *p++ = '>';
    for (int l = 0; l < 6; l++)
        if (used[l] && RND(2))
            c->out_lab[c->out_rank++] = l;
    for (int d = c->out_rank - 1; d > 0; d--) { /* a random order */
        int e = RND(d + 1), t = c->out_lab[d];
        c->out_lab[d] = c->out_lab[e];
        c->out_lab[e] = t;
    }
    for (int d = 0; d < c->out_rank; d++)
        *p++ = (char)('a' + c->out_lab[d]);
    *p = 0;
    /* A letter broadcast in every operand that has it has size 1. */
    for (int l = 0; l < 6; l++) {
        bool real = false;
        for (int i = 0; i < c->n_ops; i++)
            for (int d = 0; d < c->rank[i]; d++)
                real = real || (c->lab[i][d] == l && !c->bcast[i][d]);
        if (!real)
            c->size[l] = 1;
    }
#undef RND
}

static void ein_check_case(const ein_case *c, const char *eq, bool ints, uint32_t *rng)
{
    slim_tensor in[5];
    for (int i = 0; i < c->n_ops; i++) {
        int64_t dims[4];
        for (int d = 0; d < c->rank[i]; d++)
            dims[d] = c->bcast[i][d] ? 1 : c->size[c->lab[i][d]];
        in[i] = tu_tensor(ints ? SLIM_I64 : SLIM_F64, c->rank[i], dims, NULL);
        for (int64_t e = 0; e < slim_tensor_numel(&in[i]); e++) {
            if (ints)
                ((int64_t *)in[i].data)[e] = (int64_t)(tu_rndf(rng) * 5);
            else
                ((double *)in[i].data)[e] = tu_rndf(rng);
        }
    }
    int64_t out_n = 1;
    for (int d = 0; d < c->out_rank; d++)
        out_n *= c->size[c->out_lab[d]];
    double *want = calloc((size_t)out_n, sizeof(double));
    int64_t idx[6] = {0};
    for (;;) {
        double prod = 1;
        for (int i = 0; i < c->n_ops; i++) {
            int64_t off = 0;
            for (int d = 0; d < c->rank[i]; d++)
                off = off * (c->bcast[i][d] ? 1 : c->size[c->lab[i][d]]) +
                      (c->bcast[i][d] ? 0 : idx[c->lab[i][d]]);
            prod *= ints ? (double)((int64_t *)in[i].data)[off] : ((double *)in[i].data)[off];
        }
        int64_t o = 0;
        for (int d = 0; d < c->out_rank; d++)
            o = o * c->size[c->out_lab[d]] + idx[c->out_lab[d]];
        want[o] += prod;
        int l = 5;
        for (; l >= 0; l--) {
            if (++idx[l] < c->size[l])
                break;
            idx[l] = 0;
        }
        if (l < 0)
            break;
    }
    slim_tensor *out;
    int n_out;
    slim_err err;
    slim_status st = run_einsum(eq, c->n_ops, in, &out, &n_out, &err);
    ck_assert_msg(st == SLIM_OK, "%s: %s", eq, err.msg);
    ck_assert_int_eq(slim_tensor_numel(&out[0]), out_n);
    for (int64_t o = 0; o < out_n; o++) {
        double got = ints ? (double)((int64_t *)out[0].data)[o] : ((double *)out[0].data)[o];
        ck_assert_msg(fabs(got - want[o]) <= 1e-9 * (1 + fabs(want[o])), "%s [%lld]: %g, want %g",
                      eq, (long long)o, got, want[o]);
    }
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, c->n_ops);
    free(want);
}

START_TEST(test_einsum_random_vs_naive)
{
    uint32_t rng = 2029;
    for (int t = 0; t < 300; t++) {
        ein_case c;
        char eq[64];
        ein_random_case(&rng, &c, eq);
        ein_check_case(&c, eq, t % 3 == 2, &rng);
    }
}
END_TEST

/* ---- scratch is charged to the account ---------------------------------- */

/* Einsum widens float32 to float64 in scratch: 2x a 64 MiB input, under a
 * limit of 100 MiB, is refused, naming the account; the output is 4 bytes. */
START_TEST(test_scratch_is_accounted)
{
    int64_t n = 16 << 20;
    slim_tensor in = tu_f32(1, (int64_t[]){n}, NULL);
    memset(in.data, 0, slim_tensor_nbytes(&in));
    slim_tensor *out;
    int n_out;
    slim_err err;
    size_t peak;
    slim_graph *g = tu_graph("Einsum", 12, 1, (const char *[]){"x"}, 1);
    tu_attr_s(tu_node0(g), "equation", "i->");
    ck_assert_int_eq(run_limited(g, &in, 1, 100 * MiB, &peak, &out, &n_out, &err), SLIM_EOOM);
    ck_assert_ptr_nonnull(strstr(err.msg, "Einsum"));
    ck_assert_uint_le(peak, 100 * MiB);
    g = tu_graph("Einsum", 12, 1, (const char *[]){"x"}, 1);
    tu_attr_s(tu_node0(g), "equation", "i->");
    ck_assert_int_eq(run_limited(g, &in, 1, 0, &peak, &out, &n_out, &err), SLIM_OK);
    ck_assert_uint_ge(peak, (size_t)n * 8); /* the float64 copy */
    ck_assert_float_eq(*(float *)out[0].data, 0.0f);
    slim_tensors_free(out, n_out);
    tu_free_inputs(&in, 1);
}
END_TEST

/* ---- deadlines inside long kernels --------------------------------------- */

static void expect_timeout(slim_graph *g, slim_tensor *in, int n_in)
{
    slim_cancel tok;
    slim_cancel_init(&tok, slim_cancel_deadline_after_ms(100));
    slim_cancel *prev = slim_cancel_enter(&tok);
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_err err;
    double t0 = now_s();
    slim_status st = tu_run(g, in, n_in, &out, &n_out, &err);
    double took = now_s() - t0;
    slim_cancel_enter(prev);
    ck_assert_msg(st == SLIM_ETIMEDOUT, "status %d: %s", st, err.msg);
    ck_assert_double_lt(took, 1.0);
    ck_assert_double_ge(took, 0.09);
}

/* One node of seconds: int64 products (no BLAS) of 1500 x 1500. */
START_TEST(test_einsum_stops_at_deadline)
{
    int64_t n = 1500;
    slim_tensor in[2] = {tu_tensor(SLIM_I64, 2, (int64_t[]){n, n}, NULL),
                         tu_tensor(SLIM_I64, 2, (int64_t[]){n, n}, NULL)};
    for (int i = 0; i < 2; i++)
        for (int64_t e = 0; e < n * n; e++)
            ((int64_t *)in[i].data)[e] = e % 7;
    slim_graph *g = tu_graph("Einsum", 12, 2, (const char *[]){"a", "b"}, 1);
    tu_attr_s(tu_node0(g), "equation", "ij,jk->ik");
    expect_timeout(g, in, 2);
    tu_free_inputs(in, 2);
}
END_TEST

/* One pool row of 1e8 outputs, a second or more of work. */
START_TEST(test_pool_stops_at_deadline)
{
    slim_tensor in = tu_f32(4, (int64_t[]){1, 1, 1, 1}, (float[]){1.0f});
    expect_timeout(wide_pool("AveragePool", 100000000, 1, 1), &in, 1);
    tu_free_inputs(&in, 1);
}
END_TEST

/* A Loop whose body has no nodes (it passes cond and v through) never
 * reaches the executor's between-node checks; Loop itself must look. */
START_TEST(test_loop_stops_at_deadline)
{
    setenv("SLIM_LOOP_MAX_ITERATIONS", "1000000000000", 1); /* the deadline must end it */
    slim_graph *body = slim_graph_new();
    body->opset = 16;
    const char *names[3] = {"i", "cond_in", "v_in"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(slim_graph_add_input(body, slim_graph_value(body, names[i])), SLIM_OK);
    for (int i = 1; i < 3; i++)
        ck_assert_int_eq(slim_graph_add_output(body, slim_graph_find_value(body, names[i])),
                         SLIM_OK);
    slim_graph *g = tu_graph("Loop", 16, 3, (const char *[]){"M", "cond", "v0"}, 1);
    slim_node *n = tu_node0(g);
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (size_t)(n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup("body");
    a->type = SLIM_ATTR_GRAPH;
    a->g = body;
    int64_t trip = INT64_MAX;
    uint8_t cond = 1;
    slim_tensor in[3] = {tu_i64(0, NULL, &trip), tu_tensor(SLIM_BOOL, 0, NULL, &cond),
                         tu_f32(1, (int64_t[]){1}, (float[]){4.0f})};
    expect_timeout(g, in, 3);
    tu_free_inputs(in, 3);
}
END_TEST

static Suite *kernel_bounds_suite(void)
{
    Suite *s = suite_create("kernel_bounds");
    TCase *tc = tcase_create("windows");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pool_window_4e8_strided);
    tcase_add_test(tc, test_pool_window_stride1_under_limit);
    tcase_add_test(tc, test_conv_kernel_wider_than_input);
    tcase_add_test(tc, test_conv_integer_kernel_wider_than_input);
    suite_add_tcase(s, tc);
    tc = tcase_create("einsum");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_einsum_eight_inputs);
    tcase_add_test(tc, test_einsum_random_vs_naive);
    tcase_add_test(tc, test_scratch_is_accounted);
    suite_add_tcase(s, tc);
    tc = tcase_create("cancel");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_einsum_stops_at_deadline);
    tcase_add_test(tc, test_pool_stops_at_deadline);
    tcase_add_test(tc, test_loop_stops_at_deadline);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(kernel_bounds_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
