/* test_pass_rewrite_util.c - the rewriting-pass tests' graph building and
 * twin runs (see test_pass_rewrite_util.h). */
#include "test_pass_rewrite_util.h"

#include "pass.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- building graphs ------------------------------------------------------ */

slim_graph *G; /* the graph being built */
uint32_t rng_state;

float rndf(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A new graph, opset 17, with float32 input "x" of the given shape (-1: a
 * dynamic dim). */
void begin(int ndim, const int64_t *dims)
{
    G = slim_graph_new();
    G->opset = 17;
    int x = slim_graph_value(G, "x");
    slim_graph_add_input(G, x);
    G->values[x].kind = SLIM_VALUE_INPUT;
    G->values[x].info.dtype = SLIM_F32;
    G->values[x].info.ndim = ndim;
    for (int d = 0; d < ndim; d++)
        G->values[x].info.dims[d] = dims[d];
}

void init(const char *name, slim_tensor t)
{
    int v = slim_graph_value(G, name);
    G->values[v].kind = SLIM_VALUE_INITIALIZER;
    G->values[v].init = t;
}

/* A float32 scalar (rank 0) initializer. */
void scalar(const char *name, float c)
{
    init(name, tu_f32(0, NULL, &c));
}

void ints(const char *name, int n, const int64_t *v)
{
    init(name, tu_i64(1, (int64_t[]){n}, v));
}

/* A float32 vector of n values in [lo, hi). */
void vec(const char *name, int64_t n, float lo, float hi)
{
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = lo + (hi - lo) * (rndf() + 1.0f) / 2.0f;
    init(name, tu_f32(1, &n, d));
    free(d);
}

/* Appends node `out` (named as its output) reading the n_in names after. */
slim_node *op(const char *op_type, const char *out, int n_in, ...)
{
    const char *in[8];
    va_list ap;
    va_start(ap, n_in);
    for (int i = 0; i < n_in; i++)
        in[i] = va_arg(ap, const char *);
    va_end(ap);
    int id = slim_graph_add_node(G, out, op_type, "", n_in, in, 1, (const char *[]){out});
    ck_assert_int_ge(id, 0);
    G->nodes[id].opset = G->opset;
    return &G->nodes[id];
}

void output(const char *name)
{
    slim_graph_add_output(G, slim_graph_find_value(G, name));
}

int count_op(const slim_graph *g, const char *op_type)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += strcmp(g->nodes[i].op_type, op_type) == 0;
    return c;
}

/* ---- running them --------------------------------------------------------- */



slim_model *load(build_fn build, bool passes)
{
    build();
    return tu_model(G, passes);
}

/* Runs both models on x of the given shape (values in [-scale, scale)) and
 * checks each output within tol of the largest reference magnitude. */
void agree(const pair *p, int ndim, const int64_t *dims, float scale, double tol)
{
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)n);
    rng_state = 1234;
    for (int64_t i = 0; i < n; i++)
        d[i] = scale * rndf();
    slim_tensor x = tu_f32(ndim, dims, d);
    free(d);
    slim_tensor *a = NULL, *b = NULL;
    int na, nb;
    slim_err err = {0};
    ck_assert_msg(slim_model_run(p->ref, 1, (const char *[]){"x"}, &x, &a, &na, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_msg(slim_model_run(p->opt, 1, (const char *[]){"x"}, &x, &b, &nb, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(na, nb);
    for (int o = 0; o < na; o++) {
        /* Outputs keep their names and order. */
        ck_assert_str_eq(slim_model_output(p->ref, o)->name, slim_model_output(p->opt, o)->name);
        ck_assert_int_eq(a[o].ndim, b[o].ndim);
        for (int k = 0; k < a[o].ndim; k++)
            ck_assert_int_eq(a[o].dims[k], b[o].dims[k]);
        ck_assert_int_eq(a[o].dtype, b[o].dtype);
        if (a[o].dtype != SLIM_F32) {
            ck_assert_int_eq(memcmp(a[o].data, b[o].data, slim_tensor_nbytes(&a[o])), 0);
            continue;
        }
        int64_t m = slim_tensor_numel(&a[o]);
        const float *u = a[o].data, *v = b[o].data;
        double mx = 0;
        for (int64_t i = 0; i < m; i++)
            mx = fmax(mx, fabs(u[i]));
        ck_assert(mx > 0.05); /* a graph that outputs zeros would prove nothing */
        for (int64_t i = 0; i < m; i++)
            ck_assert_msg(fabs(u[i] - v[i]) <= tol * mx, "output %d element %lld: %g vs %g", o,
                          (long long)i, u[i], v[i]);
    }
    slim_tensors_free(a, na);
    slim_tensors_free(b, nb);
    slim_tensor_release(&x);
}

pair both(build_fn build, int ndim, const int64_t *dims, float scale, double tol)
{
    pair p = {load(build, false), load(build, true)};
    agree(&p, ndim, dims, scale, tol);
    return p;
}

void pair_free(pair *p)
{
    slim_model_free(p->ref);
    slim_model_free(p->opt);
}
