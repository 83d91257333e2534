/*
 * test_cuda_ops.c - the cross-device op test (see cuda_cases.h), and the
 * CUDA device's allocator and placement checks.
 *
 * Without a GPU (no backend library, no driver, no device) it prints why
 * and exits 77, which CTest reports as skipped.
 */
#include "cuda_cases.h"

#include "device.h"
#include "slim_init.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static slim_device *gpu;

/* ---- the builder ------------------------------------------------------- */

static slim_attr *add_attr(slim_node *n, const char *name, slim_attr_type type)
{
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (size_t)(n->n_attrs + 1));
    ck_assert_ptr_nonnull(n->attrs);
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->type = type;
    return a;
}

void cc_op(cc_builder *b, const char *op_type, int opset, int n_in, const char *const *in,
           int n_out)
{
    ck_assert_int_le(n_in, CC_MAX_IN);
    ck_assert_int_le(n_out, 16);
    b->g = slim_graph_new();
    ck_assert_ptr_nonnull(b->g);
    b->g->opset = opset;
    const char *outs[16];
    char out_names[16][8];
    for (int i = 0; i < n_out; i++) {
        snprintf(out_names[i], sizeof(out_names[i]), "y%d", i);
        outs[i] = out_names[i];
    }
    b->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        b->in_names[i] = in[i] && in[i][0] ? in[i] : "";
    int id = slim_graph_add_node(b->g, "node0", op_type, "", n_in, b->in_names, n_out, outs);
    ck_assert_int_ge(id, 0);
    b->g->nodes[id].opset = opset;
    for (int i = 0; i < n_out; i++)
        ck_assert_int_eq(slim_graph_add_output(b->g, slim_graph_find_value(b->g, outs[i])),
                         SLIM_OK);
}

slim_node *cc_node(cc_builder *b)
{
    return &b->g->nodes[0];
}

void cc_attr_i(cc_builder *b, const char *name, int64_t v)
{
    add_attr(cc_node(b), name, SLIM_ATTR_INT)->i = v;
}

void cc_attr_f(cc_builder *b, const char *name, float v)
{
    add_attr(cc_node(b), name, SLIM_ATTR_FLOAT)->f = v;
}

void cc_attr_s(cc_builder *b, const char *name, const char *v)
{
    add_attr(cc_node(b), name, SLIM_ATTR_STRING)->s = strdup(v);
}

void cc_attr_ints(cc_builder *b, const char *name, int n, const int64_t *v)
{
    slim_attr *a = add_attr(cc_node(b), name, SLIM_ATTR_INTS);
    a->n = n;
    a->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

void cc_attr_floats(cc_builder *b, const char *name, int n, const float *v)
{
    slim_attr *a = add_attr(cc_node(b), name, SLIM_ATTR_FLOATS);
    a->n = n;
    a->floats = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(a->floats, v, sizeof(float) * (size_t)n);
}

static double next_uniform(cc_builder *b)
{
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return (double)(b->rng >> 11) / 9007199254740992.0;
}

static double next_normal(cc_builder *b)
{
    double u = next_uniform(b), v = next_uniform(b);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static slim_tensor *input_tensor(cc_builder *b, int k, slim_dtype dt, int ndim,
                                 const int64_t *dims)
{
    ck_assert_int_lt(k, b->n_in);
    ck_assert_msg(b->in_names[k][0], "input %d is absent", k);
    slim_tensor *t = &b->in[k];
    slim_tensor_release(t);
    *t = (slim_tensor){.dtype = dt, .ndim = ndim};
    for (int d = 0; d < ndim; d++)
        t->dims[d] = dims[d];
    ck_assert_int_eq(slim_tensor_alloc(t, NULL), SLIM_OK);
    return t;
}

static void fill(cc_builder *b, slim_tensor *t, bool normal, double lo, double hi)
{
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double x = normal ? next_normal(b) : lo + (hi - lo) * next_uniform(b);
        if (slim_dtype_is_float(t->dtype))
            slim_store_f64(t->dtype, t->data, i, x);
        else if (t->dtype == SLIM_BOOL)
            ((uint8_t *)t->data)[i] = x >= (normal ? 0.0 : (lo + hi) / 2);
        else
            slim_store_i64(t->dtype, t->data, i, (int64_t)floor(normal ? x * 1.5 : x));
    }
}

void cc_randn(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims)
{
    fill(b, input_tensor(b, k, dt, ndim, dims), true, 0, 0);
}

void cc_uniform(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims, double lo,
                double hi)
{
    fill(b, input_tensor(b, k, dt, ndim, dims), false, lo, hi);
}

void cc_ints(cc_builder *b, int k, slim_dtype dt, int ndim, const int64_t *dims,
             const int64_t *vals)
{
    slim_tensor *t = input_tensor(b, k, dt, ndim, dims);
    for (int64_t i = 0; i < slim_tensor_numel(t); i++)
        slim_store_i64(dt, t->data, i, vals[i]);
}

void cc_weight(cc_builder *b, int k)
{
    b->weight[k] = true;
}

/* ---- running ------------------------------------------------------------- */

/* Builds the case's model (placed on dev unless NULL) and runs it; with
 * keep > 0 only the first keep items of each graph input's leading dim,
 * with invariant set in the executor's row-invariant mode, and with strict
 * as a model loaded "fp32-strict" (no TF32). */
static void run_case_as(const cc_case *c, uint64_t seed, slim_device *dev, bool invariant,
                        bool strict, int64_t keep, slim_tensor **out, int *n_out, int *on_dev,
                        int *on_cpu)
{
    cc_builder b = {.rng = seed | 1};
    c->build(&b);
    ck_assert_ptr_nonnull(b.g);
    /* The values were drawn whole, so the weights are the same either way
     * and the kept items are a prefix of the whole run's. */
    for (int k = 0; keep > 0 && k < b.n_in; k++)
        if (!b.weight[k] && b.in[k].ndim > 0 && b.in[k].dims[0] > keep)
            b.in[k].dims[0] = keep;
    slim_graph *g = b.g;
    const char *names[CC_MAX_IN];
    slim_tensor given[CC_MAX_IN];
    int n_given = 0;
    for (int k = 0; k < b.n_in; k++) {
        if (!b.in_names[k][0] || slim_graph_find_value(g, b.in_names[k]) < 0)
            continue;
        int v = slim_graph_find_value(g, b.in_names[k]);
        ck_assert_msg(b.in[k].dtype != SLIM_DTYPE_UNDEFINED, "%s: input %d has no values",
                      c->name, k);
        if (g->values[v].kind != SLIM_VALUE_INTERMEDIATE)
            continue; /* the same name given twice */
        if (b.weight[k]) {
            g->values[v].kind = SLIM_VALUE_INITIALIZER;
            g->values[v].init = b.in[k];
            b.in[k] = (slim_tensor){0};
        } else {
            ck_assert_int_eq(slim_graph_add_input(g, v), SLIM_OK);
            /* Declared as given, so placement sees its dtype. */
            g->values[v].info.dtype = b.in[k].dtype;
            g->values[v].info.ndim = b.in[k].ndim;
            for (int d = 0; d < b.in[k].ndim; d++)
                g->values[v].info.dims[d] = b.in[k].dims[d];
            names[n_given] = g->values[v].name;
            given[n_given++] = b.in[k];
            b.in[k] = (slim_tensor){0};
        }
    }
    slim_model *m;
    slim_err err;
    slim_status st = slim_model_from_graph(g, &m, &err);
    ck_assert_msg(st == SLIM_OK, "%s: %s", c->name, err.msg);
    if (dev) {
        st = slim_model_place(m, dev, &err);
        ck_assert_msg(st == SLIM_OK, "%s: placing: %s", c->name, err.msg);
    }
    slim_model_set_batch_invariant(m, invariant);
    slim_model_set_fp32_strict(m, strict);
    int copies;
    slim_model_placement(m, on_dev, on_cpu, &copies);
    /* Inputs are matched by name: the model's own (placing rebuilt the
     * graph, keeping the inputs' names and order). */
    for (int i = 0; i < n_given; i++)
        names[i] = slim_model_input(m, i)->name;
    st = slim_model_run(m, n_given, names, given, out, n_out, &err);
    ck_assert_msg(st == SLIM_OK, "%s on %s: %s", c->name, dev ? dev->name : "cpu", err.msg);
    for (int i = 0; i < n_given; i++)
        slim_tensor_release(&given[i]);
    for (int k = 0; k < CC_MAX_IN; k++)
        slim_tensor_release(&b.in[k]);
    slim_model_free(m);
}

static void run_case(const cc_case *c, uint64_t seed, slim_device *dev, bool strict,
                     slim_tensor **out, int *n_out, int *on_dev, int *on_cpu)
{
    run_case_as(c, seed, dev, false, strict, 0, out, n_out, on_dev, on_cpu);
}

/* Whether the case's node is a float32 product, which the GPU runs on
 * TF32 unless the model is fp32-strict. */
static bool fp32_product(const cc_case *c)
{
    static const char *const products[] = {"MatMul", "Gemm", "MatMulBias", "Conv"};
    cc_builder b = {.rng = 1};
    c->build(&b);
    ck_assert_ptr_nonnull(b.g);
    bool yes = false;
    for (size_t i = 0; i < sizeof(products) / sizeof(products[0]); i++)
        yes |= strcmp(cc_node(&b)->op_type, products[i]) == 0;
    yes = yes && b.in[0].dtype == SLIM_F32;
    slim_graph_free(b.g);
    for (int k = 0; k < CC_MAX_IN; k++)
        slim_tensor_release(&b.in[k]);
    return yes;
}

/* The tolerance of a GPU run: TF32's for a float32 product unless the run
 * is fp32-strict. */
static double tol_of(const cc_case *c, bool tf32, bool strict)
{
    return tf32 && !strict ? CC_TF32_TOL : c->tol;
}

static void compare(const cc_case *c, double case_tol, int k, const slim_tensor *got,
                    const slim_tensor *want)
{
    char a[160], b[160];
    ck_assert_msg(got->dtype == want->dtype, "%s: output %d is %s on the GPU, %s on the CPU",
                  c->name, k, slim_dtype_name(got->dtype), slim_dtype_name(want->dtype));
    ck_assert_msg(got->ndim == want->ndim &&
                      !memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->ndim),
                  "%s: output %d has shape %s on the GPU, %s on the CPU", c->name, k,
                  slim_shape_str(got->ndim, got->dims, a, sizeof(a)),
                  slim_shape_str(want->ndim, want->dims, b, sizeof(b)));
    int64_t n = slim_tensor_numel(want);
    for (int64_t i = 0; i < n; i++) {
        double g, w;
        if (slim_dtype_is_float(want->dtype)) {
            g = slim_load_f64(got->dtype, got->data, i);
            w = slim_load_f64(want->dtype, want->data, i);
        } else {
            g = (double)slim_load_i64(got->dtype, got->data, i);
            w = (double)slim_load_i64(want->dtype, want->data, i);
        }
        if (isnan(w) && isnan(g))
            continue;
        if (isinf(w) && g == w)
            continue;
        double tol = slim_dtype_is_float(want->dtype) ? case_tol : 0;
        ck_assert_msg(fabs(g - w) <= tol * (1 + fabs(w)),
                      "%s: output %d element %lld: GPU %.7g, CPU %.7g (tol %g)", c->name, k,
                      (long long)i, g, w, tol);
    }
}

static const cc_case *const *all_tables(void)
{
    static const cc_case *const tables[] = {
        cc_cases_elementwise, cc_cases_norm, cc_cases_reduce, cc_cases_movement,
        cc_cases_pool,        cc_cases_matmul, cc_cases_conv, cc_cases_attention, NULL,
    };
    return tables;
}

static int n_cases;
static const cc_case **cases;

START_TEST(test_case)
{
    const cc_case *c = cases[_i];
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(_i + 1);
    slim_tensor *cpu_out, *gpu_out;
    int n_cpu, n_gpu, on_dev, on_cpu;
    run_case(c, seed, NULL, false, &cpu_out, &n_cpu, &on_dev, &on_cpu);
    /* By default, then (for a float32 product) fp32-strict. */
    bool tf32 = fp32_product(c);
    for (int strict = 0; strict <= tf32; strict++) {
        run_case(c, seed, gpu, strict, &gpu_out, &n_gpu, &on_dev, &on_cpu);
        ck_assert_int_eq(n_cpu, n_gpu);
        if (!c->cpu_ok)
            ck_assert_msg(on_dev == 1 && on_cpu == 0, "%s: the node did not run on %s",
                          c->name, gpu->name);
        for (int k = 0; k < n_cpu; k++) {
            ck_assert_msg(!gpu_out[k].device, "%s: output %d left on the GPU", c->name, k);
            compare(c, tol_of(c, tf32, strict), k, &gpu_out[k], &cpu_out[k]);
        }
        slim_tensors_free(gpu_out, n_gpu);
    }
    slim_tensors_free(cpu_out, n_cpu);
}
END_TEST

/* ---- row invariance ---------------------------------------------------------- */

static int n_rows_cases;

/* Each case in the executor's row-invariant mode, once with the products
 * one fixed block or item per call and once grouped (SLIM_CUDA_GROUPED),
 * and a case with float32 products both on TF32 and fp32-strict: the whole
 * run against the CPU, and its leading items against the same items run
 * alone, bitwise. */
START_TEST(test_rows_invariant)
{
    const cc_rows_case *r = &cc_cases_rows[_i / 4];
    const cc_case *c = &r->c;
    bool grouped = _i % 2, strict = (_i / 2) % 2;
    bool tf32 = fp32_product(c);
    if (strict && !tf32)
        return; /* no float32 product: the same as the run before */
    setenv("SLIM_CUDA_GROUPED", grouped ? "1" : "0", 1);
    uint64_t seed = 0xD1B54A32D192ED03ull * (uint64_t)(_i / 4 + 1);
    slim_tensor *cpu_out, *whole, *alone;
    int n_cpu, n_whole, n_alone, on_dev, on_cpu;
    run_case_as(c, seed, NULL, true, false, 0, &cpu_out, &n_cpu, &on_dev, &on_cpu);
    run_case_as(c, seed, gpu, true, strict, 0, &whole, &n_whole, &on_dev, &on_cpu);
    ck_assert_msg(on_dev == 1 && on_cpu == 0, "%s: the node did not run on %s", c->name,
                  gpu->name);
    run_case_as(c, seed, gpu, true, strict, r->keep, &alone, &n_alone, &on_dev, &on_cpu);
    ck_assert_int_eq(n_cpu, n_whole);
    ck_assert_int_eq(n_whole, n_alone);
    for (int k = 0; k < n_whole; k++) {
        compare(c, tol_of(c, tf32, strict), k, &whole[k], &cpu_out[k]);
        const slim_tensor *w = &whole[k], *a = &alone[k];
        ck_assert_int_eq(w->ndim, a->ndim);
        ck_assert_int_eq(a->dims[0], r->keep);
        size_t bytes = slim_tensor_nbytes(a);
        ck_assert_uint_le(bytes, slim_tensor_nbytes(w));
        ck_assert_msg(memcmp(w->data, a->data, bytes) == 0,
                      "%s (%s): the first %lld items alone differ from the same items in the "
                      "whole run (%s)", c->name, grouped ? "grouped" : "one call per block",
                      (long long)r->keep, strict ? "fp32-strict" : "TF32");
    }
    slim_tensors_free(cpu_out, n_cpu);
    slim_tensors_free(whole, n_whole);
    slim_tensors_free(alone, n_alone);
    unsetenv("SLIM_CUDA_GROUPED");
}
END_TEST

/* ---- TF32 by default ----------------------------------------------------- */

static int n_tf32_cases;

/* A model loaded "fp32" gets TF32 products, one loaded "fp32-strict" does
 * not: the two GPU runs must differ (with 128+ random terms per element,
 * rounding operands to 10-bit mantissas cannot leave every sum unchanged),
 * each within its tolerance of the CPU. */
START_TEST(test_tf32_default)
{
    const cc_case *c = &cc_cases_tf32[_i];
    uint64_t seed = 0x2545F4914F6CDD1Dull * (uint64_t)(_i + 1);
    slim_tensor *cpu_out, *tf32, *strict;
    int n_cpu, n_tf32, n_strict, on_dev, on_cpu;
    run_case(c, seed, NULL, false, &cpu_out, &n_cpu, &on_dev, &on_cpu);
    run_case(c, seed, gpu, false, &tf32, &n_tf32, &on_dev, &on_cpu);
    ck_assert_msg(on_dev == 1 && on_cpu == 0, "%s: the node did not run on %s", c->name,
                  gpu->name);
    run_case(c, seed, gpu, true, &strict, &n_strict, &on_dev, &on_cpu);
    ck_assert_int_eq(n_cpu, 1);
    ck_assert_int_eq(n_tf32, 1);
    ck_assert_int_eq(n_strict, 1);
    ck_assert(fp32_product(c));
    compare(c, CC_TF32_TOL, 0, &tf32[0], &cpu_out[0]);
    compare(c, c->tol, 0, &strict[0], &cpu_out[0]);
    ck_assert_msg(memcmp(tf32[0].data, strict[0].data, slim_tensor_nbytes(&tf32[0])) != 0,
                  "%s: the default run equals the fp32-strict one bitwise: TF32 is not on",
                  c->name);
    slim_tensors_free(cpu_out, n_cpu);
    slim_tensors_free(tf32, n_tf32);
    slim_tensors_free(strict, n_strict);
}
END_TEST

/* ---- the device's allocator ------------------------------------------------ */

START_TEST(test_gpu_allocator_oom_and_retry)
{
    /* A limit the device's cache must respect, and an OOM that frees the
     * cache and succeeds on retry: the path the batcher's halving needs. */
    slim_allocator *a = gpu->alloc;
    slim_allocator_empty_cache(a);
    size_t before = slim_allocator_limit(a);
    /* Room for 64 MiB beside what stays reserved. */
    slim_mem_stats s0;
    slim_allocator_stats(a, &s0);
    slim_allocator_set_limit(a, (size_t)s0.reserved_bytes[SLIM_POOL_ALL].current +
                                    ((size_t)64 << 20));
    slim_buffer *x, *y;
    slim_err err;
    ck_assert_int_eq(slim_buffer_new(gpu, (size_t)40 << 20, &x, &err), SLIM_OK);
    slim_status st = slim_buffer_new(gpu, (size_t)40 << 20, &y, &err);
    ck_assert_int_eq(st, SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, gpu->name), "OOM message names no device: %s", err.msg);
    slim_buffer_unref(x);
    ck_assert_int_eq(slim_buffer_new(gpu, (size_t)40 << 20, &y, &err), SLIM_OK);
    slim_buffer_unref(y);
    slim_mem_stats s;
    slim_allocator_stats(a, &s);
    ck_assert_uint_ge(s.num_ooms, 1);
    ck_assert_int_eq(s.allocated_bytes[SLIM_POOL_ALL].current,
                     s0.allocated_bytes[SLIM_POOL_ALL].current);
    slim_allocator_set_limit(a, before);
    slim_allocator_empty_cache(a);
    size_t free_b, total_b;
    gpu->backend->mem_info(gpu, &free_b, &total_b);
    ck_assert_uint_gt(total_b, 0);
    ck_assert_uint_le(free_b, total_b);
}
END_TEST

START_TEST(test_gpu_copy_roundtrip)
{
    slim_tensor t = {.dtype = SLIM_F32, .ndim = 1, .dims = {1000003}};
    slim_err err;
    ck_assert_int_eq(slim_tensor_alloc_on(&t, gpu, &err), SLIM_OK);
    ck_assert_ptr_eq(t.device, gpu);
    size_t n = slim_tensor_nbytes(&t);
    float *src = malloc(n), *dst = malloc(n);
    for (int64_t i = 0; i < t.dims[0]; i++)
        src[i] = (float)i * 0.5f - 7;
    memset(dst, 0xff, n);
    ck_assert_int_eq(gpu->backend->copy(gpu, t.data, src, n, SLIM_COPY_H2D, &err), SLIM_OK);
    ck_assert_int_eq(gpu->backend->copy(gpu, dst, t.data, n, SLIM_COPY_D2H, &err), SLIM_OK);
    ck_assert_int_eq(gpu->backend->sync(gpu, &err), SLIM_OK);
    ck_assert_int_eq(memcmp(src, dst, n), 0);
    free(src);
    free(dst);
    slim_tensor_release(&t);
}
END_TEST

/* An output copied back lands in the backend's pinned host memory: a host
 * tensor to the caller, whose bytes the pinned allocator shows while it is
 * held and has back (cached) once it is released. */
START_TEST(test_outputs_pinned)
{
    slim_device *pinned = slim_device_pinned_host();
    ck_assert_ptr_nonnull(pinned);
    ck_assert_str_eq(slim_device_kind(pinned), "cpu");
    const cc_case *c = &cc_cases_tf32[0];
    slim_tensor *cpu_out, *out;
    int n_cpu, n_out, on_dev, on_cpu;
    slim_mem_stats s0, s1, s2;
    run_case(c, 7, NULL, false, &cpu_out, &n_cpu, &on_dev, &on_cpu);
    slim_allocator_stats(pinned->alloc, &s0);
    run_case(c, 7, gpu, false, &out, &n_out, &on_dev, &on_cpu);
    slim_allocator_stats(pinned->alloc, &s1);
    ck_assert_int_eq(n_out, 1);
    ck_assert_ptr_null(out[0].device);
    ck_assert_ptr_eq(out[0].buf->dev, pinned);
    ck_assert_int_ge(s1.allocated_bytes[SLIM_POOL_ALL].current -
                         s0.allocated_bytes[SLIM_POOL_ALL].current,
                     (int64_t)slim_tensor_nbytes(&out[0]));
    compare(c, CC_TF32_TOL, 0, &out[0], &cpu_out[0]);
    slim_tensors_free(out, n_out);
    slim_tensors_free(cpu_out, n_cpu);
    slim_allocator_stats(pinned->alloc, &s2);
    ck_assert_int_eq(s2.allocated_bytes[SLIM_POOL_ALL].current,
                     s0.allocated_bytes[SLIM_POOL_ALL].current);
}
END_TEST

int main(void)
{
    slim_init();
    slim_err err;
    if (slim_device_get("cuda:0", &gpu, &err) != SLIM_OK) {
        printf("test_cuda_ops: skipped: %s\n", err.msg);
        fflush(stdout);
        /* _exit: a failed CUDA start leaves the runtime's allocations,
         * which LeakSanitizer would report as this test's at exit. */
        _exit(77);
    }
    printf("test_cuda_ops: %s (%s)\n", gpu->name, gpu->description);
    for (const cc_case *const *t = all_tables(); *t; t++)
        for (const cc_case *c = *t; c->name; c++)
            n_cases++;
    cases = malloc(sizeof(*cases) * (size_t)(n_cases ? n_cases : 1));
    int i = 0;
    for (const cc_case *const *t = all_tables(); *t; t++)
        for (const cc_case *c = *t; c->name; c++)
            cases[i++] = c;
    Suite *s = suite_create("cuda_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_loop_test(tc, test_case, 0, n_cases);
    for (const cc_rows_case *r = cc_cases_rows; r->c.name; r++)
        n_rows_cases++;
    for (const cc_case *c = cc_cases_tf32; c->name; c++)
        n_tf32_cases++;
    tcase_add_loop_test(tc, test_rows_invariant, 0, 4 * n_rows_cases);
    tcase_add_loop_test(tc, test_tf32_default, 0, n_tf32_cases);
    tcase_add_test(tc, test_gpu_allocator_oom_and_retry);
    tcase_add_test(tc, test_gpu_copy_roundtrip);
    tcase_add_test(tc, test_outputs_pinned);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* One process: each fork would start CUDA again (slow), and the
     * backend's state is not fork-safe. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    free(cases);
    printf("test_cuda_ops: %d cases, %d row-invariance cases (twice, fp32 ones also strict), "
           "%d TF32 cases\n", n_cases, n_rows_cases, n_tf32_cases);
    return failed ? 1 : 0;
}
