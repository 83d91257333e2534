/*
 * test_passes_util.c - the pass tests' shared helpers (test_passes_util.h).
 */
#include "test_passes_util.h"

#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

uint32_t tp_rng;

float tp_rndf(void)
{
    return tu_rndf(&tp_rng);
}

void tp_add_init(slim_graph *g, const char *name, int ndim, const int64_t *dims, float lo,
                 float hi)
{
    tu_init_f32(g, &tp_rng, name, ndim, dims, lo, hi);
}

int tp_node(slim_graph *g, const char *name, const char *op, int n_in, const char *const *in,
            const char *out)
{
    int id = slim_graph_add_node(g, name, op, "", n_in, in, 1, (const char *[]){out});
    g->nodes[id].opset = 17;
    return id;
}

void tp_graph_io(slim_graph *g)
{
    int x = slim_graph_find_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = SLIM_F32;
    slim_graph_add_output(g, slim_graph_find_value(g, "y"));
}

slim_tensor tp_run(slim_model *m, const slim_tensor *x)
{
    slim_tensor *out = NULL, y;
    int n_out;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    y = out[0];
    for (int i = 1; i < n_out; i++) /* the first output is the one compared */
        slim_tensor_release(&out[i]);
    free(out);
    return y;
}

void tp_assert_close(const slim_tensor *a, const slim_tensor *ref, double rel)
{
    ck_assert_int_eq(slim_tensor_numel(a), slim_tensor_numel(ref));
    ck_assert(tu_max_abs(ref) > 0.1); /* a graph that outputs zeros would prove nothing */
    tu_assert_close_max(a, ref, rel);
}

slim_graph *tp_mlp(const tp_mlp_spec *s)
{
    slim_graph *g = slim_graph_new();
    g->opset = 17;
    tp_rng = s->seed;
    tp_add_init(g, "w1", 2, (int64_t[]){s->k, s->h}, -s->w, s->w);
    tp_add_init(g, "b1", 1, (int64_t[]){s->h}, -s->b1, s->b1);
    tp_add_init(g, "w2", 2, (int64_t[]){s->h, s->no}, -s->w, s->w);
    tp_add_init(g, "b2", 1, (int64_t[]){s->no}, -0.2f, 0.2f);
    tp_add_init(g, "inv_sqrt2", 0, NULL, 0.70710678f, 0.70710678f);
    tp_add_init(g, "one", 0, NULL, 1.0f, 1.0f);
    tp_add_init(g, "half", 0, NULL, 0.5f, 0.5f);
    tp_node(g, "mm1", "MatMul", 2, (const char *[]){"x", "w1"}, "h");
    tp_node(g, "add1", "Add", 2, (const char *[]){"h", "b1"}, "f");
    tp_node(g, "g1", "Mul", 2, (const char *[]){"f", "inv_sqrt2"}, "t1");
    tp_node(g, "g2", "Erf", 1, (const char *[]){"t1"}, "t2");
    tp_node(g, "g3", "Add", 2, (const char *[]){"t2", "one"}, "t3");
    tp_node(g, "g4", "Mul", 2, (const char *[]){"f", "t3"}, "t4");
    tp_node(g, "g5", "Mul", 2, (const char *[]){"t4", "half"}, "gelu");
    tp_node(g, "mm2", "MatMul", 2, (const char *[]){"gelu", "w2"}, "h2");
    if (s->bias_first)
        tp_node(g, "add2", "Add", 2, (const char *[]){"b2", "h2"}, "f2");
    else
        tp_node(g, "add2", "Add", 2, (const char *[]){"h2", "b2"}, "f2");
    tp_node(g, "relu", "Relu", 1, (const char *[]){"f2"}, "y");
    tp_graph_io(g);
    return g;
}

slim_tensor tp_input(uint32_t seed, int ndim, const int64_t *dims)
{
    return tu_input(&tp_rng, seed, ndim, dims);
}

void tp_compare_and_free(slim_model *ref, slim_model *opt, slim_tensor x, double rel)
{
    slim_tensor a = tp_run(ref, &x), b = tp_run(opt, &x);
    tp_assert_close(&b, &a, rel);
    slim_tensor_release(&a);
    slim_tensor_release(&b);
    slim_tensor_release(&x);
    slim_model_free(ref);
    slim_model_free(opt);
}

void tp_assert_batch_invariant(slim_model *m, const slim_tensor *x, const slim_tensor *all,
                               const char *what)
{
    int64_t n = x->dims[0], per_in = slim_tensor_numel(x) / n;
    int64_t per_out = slim_tensor_numel(all) / n, dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    dims[0] = 1;
    for (int64_t i = 0; i < n; i++) {
        slim_tensor one = tu_f32(x->ndim, dims, (const float *)x->data + i * per_in);
        slim_tensor y = tp_run(m, &one);
        ck_assert_msg(memcmp(y.data, (const float *)all->data + i * per_out,
                             sizeof(float) * (size_t)per_out) == 0,
                      "%s: image %lld alone differs from in the batch", what, (long long)i);
        slim_tensor_release(&y);
        slim_tensor_release(&one);
    }
}

int tp_main(Suite *suite)
{
    slim_init();
    setenv("SLIM_NUM_THREADS", "2", 1); /* FusedMatMul's column parts: one per thread */
    setenv("SLIM_FUSE_MATMUL", "1", 1); /* packs mapped weights too */
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
