/* test_executor.c - run order, memory release, errors, concurrent runs. */
#include "testutil.h"
#include "device.h"
#include "slim_init.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of blocks the CPU allocator has handed out, as a baseline. */
static int64_t allocated_now(void)
{
    slim_mem_stats s;
    slim_allocator_stats(slim_device_cpu()->alloc, &s);
    return s.allocated_bytes[SLIM_POOL_ALL].current;
}

static int64_t allocated_peak(void)
{
    slim_mem_stats s;
    slim_allocator_stats(slim_device_cpu()->alloc, &s);
    return s.allocated_bytes[SLIM_POOL_ALL].peak;
}

/* x -> Add(x, x) -> Relu -> Neg -> Abs -> Add(.., x) = y: a chain whose
 * intermediates each die after one step. */
static slim_model *chain_model(void)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "a", "Add", "", 2, (const char *[]){"x", "x"}, 1, (const char *[]){"t1"});
    slim_graph_add_node(g, "b", "Relu", "", 1, (const char *[]){"t1"}, 1, (const char *[]){"t2"});
    slim_graph_add_node(g, "c", "Neg", "", 1, (const char *[]){"t2"}, 1, (const char *[]){"t3"});
    slim_graph_add_node(g, "d", "Abs", "", 1, (const char *[]){"t3"}, 1, (const char *[]){"t4"});
    slim_graph_add_node(g, "e", "Add", "", 2, (const char *[]){"t4", "x"}, 1, (const char *[]){"y"});
    slim_graph_add_input(g, slim_graph_find_value(g, "x"));
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_value *x = &g->values[slim_graph_find_value(g, "x")];
    x->info.dtype = SLIM_F32;
    x->info.ndim = 2;
    x->info.dims[0] = -1;
    x->info.dims[1] = 4;
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

START_TEST(runs_a_chain_and_frees_intermediates)
{
    slim_model *m = chain_model();
    int64_t rows = 1024;
    slim_tensor x = tu_f32(2, (int64_t[]){rows, 4}, NULL);
    for (int64_t i = 0; i < rows * 4; i++)
        ((float *)x.data)[i] = (float)(i % 7) - 3.0f;
    int64_t base = allocated_now();
    slim_allocator_reset_peaks(slim_device_cpu()->alloc);
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    const char *names[] = {"x"};
    ck_assert_msg(slim_model_run(m, 1, names, &x, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(n_out, 1);
    for (int64_t i = 0; i < rows * 4; i++) {
        float v = ((float *)x.data)[i];
        float want = (v > 0 ? 2 * v : 0) + v;
        ck_assert_float_eq_tol(((float *)out[0].data)[i], want, 1e-6);
    }
    /* A chain needs at most two live activations at any step (the arena)
     * besides the output, which lives on its own. (one is a multiple of
     * the allocator's 512-byte rounding.) */
    int64_t one = rows * 4 * (int64_t)sizeof(float);
    int64_t peak = allocated_peak() - base;
    ck_assert_msg(peak <= 3 * one, "peak %lld bytes, expected <= %lld", (long long)peak,
                  (long long)(3 * one));
    /* Only the returned output is still allocated: the arena went back. */
    ck_assert_int_eq(allocated_now() - base, one);
    slim_tensors_free(out, n_out);
    ck_assert_int_eq(allocated_now(), base);
    slim_tensor_release(&x);
    slim_model_free(m);
}
END_TEST

START_TEST(bad_inputs_are_named)
{
    slim_model *m = chain_model();
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    slim_tensor x = tu_f32(2, (int64_t[]){2, 3}, NULL);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"x\""));
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"nope"}, &x, &out, &n_out, &err),
                     SLIM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "nope"));
    ck_assert_int_eq(slim_model_run(m, 0, NULL, NULL, &out, &n_out, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing"));
    slim_tensor_release(&x);
    slim_tensor xi = tu_i64(2, (int64_t[]){2, 4}, NULL);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &xi, &out, &n_out, &err),
                     SLIM_ETYPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "int64"));
    slim_tensor_release(&xi);
    slim_model_free(m);
}
END_TEST

/* Reshape to a shape that does not fit fails mid-graph; nothing leaks. */
START_TEST(failed_run_releases_everything)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "r", "Relu", "", 1, (const char *[]){"x"}, 1, (const char *[]){"t"});
    slim_graph_add_node(g, "s", "Reshape", "", 2, (const char *[]){"t", "shape"}, 1,
                        (const char *[]){"y"});
    slim_graph_add_input(g, slim_graph_find_value(g, "x"));
    slim_graph_add_input(g, slim_graph_find_value(g, "shape"));
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){6}, (float[]){1, 2, 3, 4, 5, 6}),
                         tu_i64(1, (int64_t[]){2}, (int64_t[]){4, 4})};
    int64_t base = allocated_now();
    slim_tensor *out = (slim_tensor *)1;
    int n_out = 7;
    slim_status st = slim_model_run(m, 2, (const char *[]){"x", "shape"}, in, &out, &n_out, &err);
    ck_assert_int_ne(st, SLIM_OK);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(n_out, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "node \"s\" (Reshape)"));
    ck_assert_int_eq(allocated_now(), base);
    tu_free_inputs(in, 2);
    slim_model_free(m);
}
END_TEST

typedef struct worker_arg {
    slim_model *m;
    int seed;
    int failures;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    for (int it = 0; it < 50; it++) {
        int64_t rows = 1 + (a->seed * 7 + it) % 33;
        slim_tensor x = tu_f32(2, (int64_t[]){rows, 4}, NULL);
        for (int64_t i = 0; i < rows * 4; i++)
            ((float *)x.data)[i] = (float)((i + a->seed) % 5) - 2.0f;
        slim_tensor *out;
        int n_out;
        slim_err err = {0};
        if (slim_model_run(a->m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err) != SLIM_OK) {
            a->failures++;
        } else {
            for (int64_t i = 0; i < rows * 4; i++) {
                float v = ((float *)x.data)[i];
                if (((float *)out[0].data)[i] != (v > 0 ? 2 * v : 0) + v)
                    a->failures++;
            }
            slim_tensors_free(out, n_out);
        }
        slim_tensor_release(&x);
    }
    return NULL;
}

START_TEST(many_threads_run_one_model)
{
    slim_model *m = chain_model();
    pthread_t th[8];
    worker_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (worker_arg){.m = m, .seed = i};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].failures, 0);
    }
    slim_model_free(m);
}
END_TEST

START_TEST(shape_planning_folds_shape_arithmetic)
{
    /* y = Reshape(x, Concat(Shape(x)[0:1], [-1])) : flatten to 2-D. */
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    slim_graph_add_node(g, "sh", "Shape", "", 1, (const char *[]){"x"}, 1, (const char *[]){"s"});
    slim_graph_add_node(g, "sl", "Slice", "", 3, (const char *[]){"s", "zero", "one"}, 1,
                        (const char *[]){"b"});
    slim_graph_add_node(g, "cc", "Concat", "", 2, (const char *[]){"b", "minus1"}, 1,
                        (const char *[]){"target"});
    slim_graph_add_node(g, "rs", "Reshape", "", 2, (const char *[]){"x", "target"}, 1,
                        (const char *[]){"y"});
    const char *consts[] = {"zero", "one", "minus1"};
    int64_t vals[] = {0, 1, -1};
    for (int i = 0; i < 3; i++) {
        int v = slim_graph_value(g, consts[i]);
        g->values[v].kind = SLIM_VALUE_INITIALIZER;
        g->values[v].init = tu_i64(1, (int64_t[]){1}, &vals[i]);
    }
    slim_node_attr(&g->nodes[0], "x"); /* no attributes: just exercise lookup */
    tu_attr_i(&g->nodes[2], "axis", 0);
    slim_graph_add_input(g, slim_graph_find_value(g, "x"));
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    slim_tensor shape_in = {.dtype = SLIM_F32, .ndim = 4, .dims = {8, 3, 4, 5}};
    slim_tensor *shapes = calloc(m->graph->n_values, sizeof(slim_tensor));
    ck_assert_msg(slim_model_infer_shapes(m, &shape_in, shapes, &err) == SLIM_OK, "%s", err.msg);
    int y = slim_graph_find_value(m->graph, "y");
    tu_assert_shape(&shapes[y], 2, (int64_t[]){8, 60});
    free(shapes);
    slim_model_free(m);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("executor");
    TCase *tc = tcase_create("run");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, runs_a_chain_and_frees_intermediates);
    tcase_add_test(tc, bad_inputs_are_named);
    tcase_add_test(tc, failed_run_releases_everything);
    tcase_add_test(tc, many_threads_run_one_model);
    tcase_add_test(tc, shape_planning_folds_shape_arithmetic);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
