/* testutil.c - see testutil.h. */
#include "testutil.h"

#include "pipeline.h" /* slim_passes_run */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

slim_graph *tu_graph(const char *op_type, int opset, int n_in,
                     const char *const *in_names, int n_out)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = opset;
    const char *outs[16];
    char out_names[16][16];
    ck_assert_int_le(n_out, 16);
    for (int i = 0; i < n_out; i++) {
        snprintf(out_names[i], sizeof(out_names[i]), "y%d", i);
        outs[i] = out_names[i];
    }
    const char *ins[32];
    ck_assert_int_le(n_in, 32);
    for (int i = 0; i < n_in; i++)
        ins[i] = (in_names[i] && in_names[i][0]) ? in_names[i] : "";
    int node = slim_graph_add_node(g, "node0", op_type, "", n_in, ins, n_out, outs);
    ck_assert_int_ge(node, 0);
    g->nodes[node].opset = opset;
    for (int i = 0; i < n_in; i++)
        if (ins[i][0])
            ck_assert_int_eq(slim_graph_add_input(g, slim_graph_find_value(g, ins[i])), SLIM_OK);
    for (int i = 0; i < n_out; i++)
        ck_assert_int_eq(slim_graph_add_output(g, slim_graph_find_value(g, outs[i])), SLIM_OK);
    return g;
}

slim_node *tu_node0(slim_graph *g)
{
    return &g->nodes[0];
}

static slim_attr *add_attr(slim_node *n, const char *name, slim_attr_type type)
{
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup(name);
    a->type = type;
    return a;
}

void tu_attr_i(slim_node *n, const char *name, int64_t v)
{
    add_attr(n, name, SLIM_ATTR_INT)->i = v;
}

void tu_attr_f(slim_node *n, const char *name, float v)
{
    add_attr(n, name, SLIM_ATTR_FLOAT)->f = v;
}

void tu_attr_s(slim_node *n, const char *name, const char *v)
{
    add_attr(n, name, SLIM_ATTR_STRING)->s = strdup(v);
}

void tu_attr_ints(slim_node *n, const char *name, int count, const int64_t *v)
{
    slim_attr *a = add_attr(n, name, SLIM_ATTR_INTS);
    a->n = count;
    a->ints = malloc(sizeof(int64_t) * (count ? count : 1));
    memcpy(a->ints, v, sizeof(int64_t) * count);
}

void tu_attr_floats(slim_node *n, const char *name, int count, const float *v)
{
    slim_attr *a = add_attr(n, name, SLIM_ATTR_FLOATS);
    a->n = count;
    a->floats = malloc(sizeof(float) * (count ? count : 1));
    memcpy(a->floats, v, sizeof(float) * count);
}

slim_tensor tu_tensor(slim_dtype dt, int ndim, const int64_t *dims, const void *data)
{
    slim_tensor t = {.dtype = dt, .ndim = ndim};
    for (int i = 0; i < ndim; i++)
        t.dims[i] = dims[i];
    ck_assert_int_eq(slim_tensor_alloc(&t, NULL), SLIM_OK);
    if (data && slim_tensor_nbytes(&t))
        memcpy(t.data, data, slim_tensor_nbytes(&t));
    return t;
}

slim_tensor tu_f32(int ndim, const int64_t *dims, const float *data)
{
    return tu_tensor(SLIM_F32, ndim, dims, data);
}

slim_tensor tu_i64(int ndim, const int64_t *dims, const int64_t *data)
{
    return tu_tensor(SLIM_I64, ndim, dims, data);
}

void tu_free_inputs(slim_tensor *in, int n)
{
    for (int i = 0; i < n; i++)
        slim_tensor_release(&in[i]);
}

slim_status tu_run(slim_graph *g, const slim_tensor *in, int n_in,
                   slim_tensor **out, int *n_out, slim_err *err)
{
    slim_model *m;
    slim_status st = slim_model_from_graph(g, &m, err);
    if (st)
        return st;
    const char *names[32];
    ck_assert_int_eq(n_in, slim_model_num_inputs(m));
    for (int i = 0; i < n_in; i++)
        names[i] = slim_model_input(m, i)->name;
    st = slim_model_run(m, n_in, names, in, out, n_out, err);
    slim_model_free(m);
    return st;
}

void tu_assert_shape(const slim_tensor *t, int ndim, const int64_t *dims)
{
    ck_assert_int_eq(t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_int_eq(t->dims[i], dims[i]);
}

void tu_assert_close_f32(const slim_tensor *t, const float *expected, int64_t n, double tol)
{
    ck_assert_int_eq(t->dtype, SLIM_F32);
    ck_assert_int_eq(slim_tensor_numel(t), n);
    const float *got = t->data;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - expected[i]);
        if (!(d <= tol + tol * fabs(expected[i])))
            ck_abort_msg("element %lld: got %.7g, expected %.7g (tol %g)",
                         (long long)i, got[i], expected[i], tol);
    }
}

float tu_rndf(uint32_t *rng)
{
    *rng = *rng * 1664525u + 1013904223u;
    return (float)((*rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

slim_graph *tu_graph_x(void)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = 17;
    int x = slim_graph_value(g, "x");
    slim_graph_add_input(g, x);
    g->values[x].kind = SLIM_VALUE_INPUT;
    g->values[x].info.dtype = SLIM_F32;
    return g;
}

void tu_init_f32(slim_graph *g, uint32_t *rng, const char *name, int ndim, const int64_t *dims,
                 float lo, float hi)
{
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = lo + (hi - lo) * (tu_rndf(rng) + 1.0f) / 2.0f;
    int v = slim_graph_value(g, name);
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(ndim, dims, d);
    free(d);
}

slim_node *tu_op(slim_graph *g, const char *op_type, const char *out, int n_in, ...)
{
    const char *in[8];
    ck_assert_int_le(n_in, 8);
    va_list ap;
    va_start(ap, n_in);
    for (int i = 0; i < n_in; i++)
        in[i] = va_arg(ap, const char *);
    va_end(ap);
    int id = slim_graph_add_node(g, out, op_type, "", n_in, in, 1, (const char *[]){out});
    ck_assert_int_ge(id, 0);
    g->nodes[id].opset = g->opset;
    return &g->nodes[id];
}

int tu_count_op(const slim_graph *g, const char *op_type)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += strcmp(g->nodes[i].op_type, op_type) == 0;
    return c;
}

uint32_t tu_xrnd(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint32_t)(*state >> 11);
}

float tu_xrndf(uint64_t *state)
{
    return (float)(tu_xrnd(state) % 2000001) / 1000000.0f - 1.0f;
}

slim_tensor tu_input(uint32_t *rng, uint32_t seed, int ndim, const int64_t *dims)
{
    slim_tensor t = tu_tensor(SLIM_F32, ndim, dims, NULL);
    float *d = t.data;
    *rng = seed;
    for (int64_t i = 0; i < slim_tensor_numel(&t); i++)
        d[i] = tu_rndf(rng);
    return t;
}

slim_tensor tu_xinput(uint64_t *rng, uint64_t seed, int ndim, const int64_t *dims)
{
    slim_tensor t = tu_tensor(SLIM_F32, ndim, dims, NULL);
    float *d = t.data;
    *rng = seed;
    for (int64_t i = 0; i < slim_tensor_numel(&t); i++)
        d[i] = tu_xrndf(rng) * 2;
    return t;
}

int tu_xinit(slim_graph *g, uint64_t *rng, const char *name, int ndim, const int64_t *dims,
             float scale)
{
    int v = slim_graph_value(g, name);
    int64_t n = slim_shape_numel(ndim, dims);
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = tu_xrndf(rng) * scale;
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(ndim, dims, d);
    free(d);
    return v;
}

void tu_set_io(slim_graph *g, const char *in, slim_dtype dt, const char *out)
{
    int x = slim_graph_find_value(g, in);
    slim_graph_add_input(g, x);
    g->values[x].info.dtype = dt;
    slim_graph_add_output(g, slim_graph_find_value(g, out));
}

/* tu_two_layers, or without its Add and Relu (tu_mm_gemm): the nodes, then
 * the weights in the order they were always drawn. */
static slim_graph *two_layers(uint64_t *rng, bool bias_relu)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = 17;
    slim_graph_add_node(g, "mm", "MatMul", "", 2, (const char *[]){"x", "w"}, 1,
                        (const char *[]){"h"});
    if (bias_relu) {
        slim_graph_add_node(g, "add", "Add", "", 2, (const char *[]){"b", "h"}, 1,
                            (const char *[]){"z"});
        slim_graph_add_node(g, "relu", "Relu", "", 1, (const char *[]){"z"}, 1,
                            (const char *[]){"r"});
    }
    int gm = slim_graph_add_node(g, "fc", "Gemm", "", 3,
                                 (const char *[]){bias_relu ? "r" : "h", "w2", "c"}, 1,
                                 (const char *[]){"y"});
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i].opset = 17;
    tu_attr_i(&g->nodes[gm], "transB", 1);
    tu_attr_f(&g->nodes[gm], "alpha", 0.5f);
    tu_attr_f(&g->nodes[gm], "beta", 2.0f);
    *rng = 42;
    tu_xinit(g, rng, "w", 2, (int64_t[]){40, 24}, 0.3f);
    if (bias_relu)
        tu_xinit(g, rng, "b", 1, (int64_t[]){24}, 0.1f);
    tu_xinit(g, rng, "w2", 2, (int64_t[]){9, 24}, 0.3f);
    tu_xinit(g, rng, "c", 2, (int64_t[]){1, 9}, 0.1f);
    tu_set_io(g, "x", SLIM_F32, "y");
    return g;
}

slim_graph *tu_two_layers(uint64_t *rng)
{
    return two_layers(rng, true);
}

slim_graph *tu_mm_gemm(uint64_t *rng)
{
    return two_layers(rng, false);
}

void tu_assert_weights_gone(const slim_graph *g)
{
    ck_assert_int_ne(g->values[slim_graph_find_value(g, "w")].kind, SLIM_VALUE_INITIALIZER);
    ck_assert_ptr_null(g->values[slim_graph_find_value(g, "w")].init.data);
    ck_assert_int_ne(g->values[slim_graph_find_value(g, "w2")].kind, SLIM_VALUE_INITIALIZER);
}

slim_graph *tu_gather_graph(uint64_t *rng)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = 17;
    slim_graph_add_node(g, "emb", "Gather", "", 2, (const char *[]){"table", "ids"}, 1,
                        (const char *[]){"y"});
    g->nodes[0].opset = 17;
    tu_xinit(g, rng, "table", 2, (int64_t[]){50, 33}, 2.0f);
    tu_set_io(g, "ids", SLIM_I64, "y");
    return g;
}

slim_model *tu_model(slim_graph *g, bool passes)
{
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(g, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

slim_tensor tu_run1(slim_graph *g, const char *in_name, slim_tensor in, slim_status want,
                    slim_err *err)
{
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(g, &m, err) == SLIM_OK, "%s", err->msg);
    slim_tensor *out = NULL, y = {0};
    int n_out;
    slim_status st = slim_model_run(m, 1, (const char *[]){in_name}, &in, &out, &n_out, err);
    ck_assert_msg(st == want, "status %d: %s", st, st ? err->msg : "");
    if (!st) {
        y = out[0];
        for (int i = 1; i < n_out; i++) /* only the first is compared */
            slim_tensor_release(&out[i]);
        free(out);
    }
    slim_model_free(m);
    return y;
}

void tu_assert_refused(slim_graph *g, int ndim, const int64_t *dims, const char *why)
{
    tu_set_io(g, "x", SLIM_F32, "y");
    slim_tensor x = tu_f32(ndim, dims, NULL);
    memset(x.data, 0, slim_tensor_nbytes(&x));
    slim_err err;
    tu_run1(g, "x", x, SLIM_ESHAPE, &err);
    ck_assert_msg(strstr(err.msg, why), "%s", err.msg);
    slim_tensor_release(&x);
}

double tu_max_abs(const slim_tensor *t)
{
    int64_t n = slim_tensor_numel(t);
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(((const float *)t->data)[i]));
    return mx;
}

void tu_assert_close_max(const slim_tensor *a, const slim_tensor *ref, double rel)
{
    int64_t n = slim_tensor_numel(ref);
    ck_assert_int_eq(slim_tensor_numel(a), n);
    double mx = tu_max_abs(ref);
    for (int64_t i = 0; i < n; i++) {
        float u = ((const float *)a->data)[i], v = ((const float *)ref->data)[i];
        ck_assert_msg(fabs(u - v) <= rel * mx, "element %lld: %g vs %g (max %g)", (long long)i, u,
                      v, mx);
    }
}
