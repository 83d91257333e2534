/*
 * test_pass_rewrite.c - the rewriting passes: fold_constants,
 * simplify_shapes, fuse_layernorm, fuse_gelu. Each small graph is loaded
 * twice, as written and after every pass (slim_passes_run, as a load does),
 * and run on the same input: the outputs must agree, and the optimized
 * graph must hold what the rewrite makes - or, for a near miss (a wrong
 * constant, a wrong axis, a value read in the middle of the pattern), the
 * pattern must still be there.
 */
#include "testutil.h"

#include "pass.h"
#include "slim_format.h"
#include "pipeline.h"
#include "slim_init.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- building graphs ------------------------------------------------------ */

static slim_graph *G; /* the graph being built */
static uint32_t rng_state;

static float rndf(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A new graph, opset 17, with float32 input "x" of the given shape (-1: a
 * dynamic dim). */
static void begin(int ndim, const int64_t *dims)
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

static void init(const char *name, slim_tensor t)
{
    int v = slim_graph_value(G, name);
    G->values[v].kind = SLIM_VALUE_INITIALIZER;
    G->values[v].init = t;
}

/* A float32 scalar (rank 0) initializer. */
static void scalar(const char *name, float c)
{
    init(name, tu_f32(0, NULL, &c));
}

static void ints(const char *name, int n, const int64_t *v)
{
    init(name, tu_i64(1, (int64_t[]){n}, v));
}

/* A float32 vector of n values in [lo, hi). */
static void vec(const char *name, int64_t n, float lo, float hi)
{
    float *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = lo + (hi - lo) * (rndf() + 1.0f) / 2.0f;
    init(name, tu_f32(1, &n, d));
    free(d);
}

/* Appends node `out` (named as its output) reading the n_in names after. */
static slim_node *op(const char *op_type, const char *out, int n_in, ...)
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

static void output(const char *name)
{
    slim_graph_add_output(G, slim_graph_find_value(G, name));
}

static int count_op(const slim_graph *g, const char *op_type)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        c += strcmp(g->nodes[i].op_type, op_type) == 0;
    return c;
}

/* ---- running them --------------------------------------------------------- */

typedef void (*build_fn)(void);

typedef struct pair {
    slim_model *ref, *opt;
} pair;

static slim_model *load(build_fn build, bool passes)
{
    build();
    slim_err err = {0};
    if (passes)
        ck_assert_msg(slim_passes_run(G, &err) == SLIM_OK, "%s", err.msg);
    slim_model *m;
    ck_assert_msg(slim_model_from_graph(G, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

/* Runs both models on x of the given shape (values in [-scale, scale)) and
 * checks each output within tol of the largest reference magnitude. */
static void agree(const pair *p, int ndim, const int64_t *dims, float scale, double tol)
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

static pair both(build_fn build, int ndim, const int64_t *dims, float scale, double tol)
{
    pair p = {load(build, false), load(build, true)};
    agree(&p, ndim, dims, scale, tol);
    return p;
}

static void pair_free(pair *p)
{
    slim_model_free(p->ref);
    slim_model_free(p->opt);
}

/* ==== fold_constants ======================================================= */

/* x[2,3] static. c = Constant(2.5); w = Add(a, c) of weights -> folds;
 * the shape arithmetic Shape(x) -> Gather(scalar 1) -> Unsqueeze ->
 * Concat([-1], .) -> Reshape(x * w, .) folds down to a constant [-1, 3]. */
static void build_fold(void)
{
    begin(2, (int64_t[]){2, 3});
    slim_node *c = op("Constant", "c", 0);
    tu_attr_f(c, "value_float", 2.5f);
    rng_state = 5;
    vec("a", 3, -1, 1);
    op("Add", "w", 2, "a", "c");
    op("Mul", "xw", 2, "x", "w");
    op("Shape", "sh", 1, "x");
    init("one", tu_i64(0, NULL, (int64_t[]){1}));
    op("Gather", "d1", 2, "sh", "one");
    ints("axis0", 1, (int64_t[]){0});
    op("Unsqueeze", "d1u", 2, "d1", "axis0");
    ints("minus1", 1, (int64_t[]){-1});
    slim_node *cc = op("Concat", "shape", 2, "minus1", "d1u");
    tu_attr_i(cc, "axis", 0);
    op("Reshape", "y", 2, "xw", "shape");
    output("y");
}

START_TEST(fold_constants_static_shapes)
{
    pair p = both(build_fold, 2, (int64_t[]){2, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    /* Constant, Add, Shape, Gather, Unsqueeze, Concat folded; Mul and
     * Reshape stay. */
    ck_assert_int_eq(g->n_nodes, 2);
    ck_assert_int_eq(count_op(g, "Mul"), 1);
    ck_assert_int_eq(count_op(g, "Reshape"), 1);
    int shape = slim_graph_find_value(g, "shape");
    ck_assert_int_eq(g->values[shape].kind, SLIM_VALUE_INITIALIZER);
    const int64_t *s = g->values[shape].init.data;
    ck_assert_int_eq(s[0], -1);
    ck_assert_int_eq(s[1], 3);
    pair_free(&p);
}
END_TEST

/* The same graph with x[?, 3]: Gather picks the static dim 1, but Shape
 * of a dynamic value never folds. */
static void build_fold_dynamic(void)
{
    build_fold();
    int x = slim_graph_find_value(G, "x");
    G->values[x].info.dims[0] = -1;
}

START_TEST(fold_constants_dynamic_shape_stays)
{
    pair p = both(build_fold_dynamic, 2, (int64_t[]){4, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "Shape"), 1);
    ck_assert_int_eq(count_op(g, "Gather"), 1);
    ck_assert_int_eq(count_op(g, "Unsqueeze"), 1);
    ck_assert_int_eq(count_op(g, "Concat"), 1);
    ck_assert_int_eq(count_op(g, "Constant"), 0);
    ck_assert_int_eq(count_op(g, "Add"), 0);
    pair_free(&p);
}
END_TEST

/* Not folded: a random op, a result over the size cap (ConstantOfShape of
 * 8 MiB), and a constant node that is a graph output (its name stays a
 * node's output). */
static void build_no_fold(void)
{
    begin(2, (int64_t[]){2, 3});
    slim_node *r = op("RandomUniform", "noise", 0);
    tu_attr_ints(r, "shape", 2, (int64_t[]){2, 3});
    tu_attr_f(r, "low", 0.0f);
    tu_attr_f(r, "high", 0.0f); /* always 0, so both models agree */
    op("Add", "y", 2, "x", "noise");
    ints("big_shape", 2, (int64_t[]){1024, 2048});
    op("ConstantOfShape", "big", 1, "big_shape");
    op("ReduceMax", "big_max", 1, "big");
    op("Add", "y2", 2, "x", "big_max");
    slim_node *c = op("Constant", "c_out", 0);
    tu_attr_f(c, "value_float", 1.5f);
    output("y");
    output("y2");
    output("c_out");
}

START_TEST(fold_constants_left_alone)
{
    pair p = both(build_no_fold, 2, (int64_t[]){2, 3}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "RandomUniform"), 1);
    ck_assert_int_eq(count_op(g, "ConstantOfShape"), 1);
    ck_assert_int_eq(count_op(g, "ReduceMax"), 1);
    ck_assert_int_eq(count_op(g, "Constant"), 1);
    pair_free(&p);
}
END_TEST

/* A kernel failing on constant inputs would fail every request: the load
 * fails, naming the node. */
START_TEST(fold_constants_error_names_node)
{
    begin(2, (int64_t[]){2, 3});
    rng_state = 1;
    vec("a", 6, -1, 1);
    ints("bad_shape", 2, (int64_t[]){4, 4});
    op("Reshape", "bad_reshape", 2, "a", "bad_shape");
    op("Add", "y", 2, "x", "bad_reshape");
    output("y");
    slim_err err = {0};
    ck_assert_int_ne(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad_reshape"));
    slim_graph_free(G);

    /* An index out of range in a constant Gather. */
    begin(1, (int64_t[]){3});
    vec("table", 3, -1, 1);
    ints("idx", 1, (int64_t[]){7});
    op("Gather", "bad_gather", 2, "table", "idx");
    op("Add", "y", 2, "x", "bad_gather");
    output("y");
    ck_assert_int_ne(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad_gather"));
    slim_graph_free(G);
}
END_TEST

/* Hostile graphs: a cycle of constant-looking nodes and a node whose
 * output is also an initializer are left for finalize to refuse. */
START_TEST(fold_constants_hostile_graphs)
{
    begin(1, (int64_t[]){3});
    scalar("k", 2.0f);
    op("Add", "p", 2, "q", "k");
    op("Add", "q", 2, "p", "k");
    op("Add", "y", 2, "x", "q");
    output("y");
    slim_err err = {0};
    ck_assert_int_eq(slim_passes_run(G, &err), SLIM_OK);
    slim_model *m;
    ck_assert_int_ne(slim_model_from_graph(G, &m, &err), SLIM_OK); /* frees G */

    begin(1, (int64_t[]){3});
    scalar("k", 2.0f);
    scalar("w", 1.0f);
    op("Add", "w", 2, "k", "k"); /* writes over an initializer */
    op("Add", "y", 2, "x", "w");
    output("y");
    ck_assert_int_eq(slim_passes_run(G, &err), SLIM_OK);
    ck_assert_int_ne(slim_model_from_graph(G, &m, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "already produced"));
}
END_TEST

/* ==== simplify_shapes ====================================================== */

/* x[?,3,4]: Identity, Transpose and its inverse, Reshape of Reshape,
 * Squeeze of Unsqueeze, Cast to float32 of float32: Reshape(x, [-1,4,3])
 * + 1 in the end, and y2 (a graph output made by an Identity) keeps its
 * name. */
static void build_movement(void)
{
    begin(3, (int64_t[]){-1, 3, 4});
    op("Identity", "i1", 1, "x");
    slim_node *t = op("Transpose", "t1", 1, "i1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){1, 2, 0});
    t = op("Transpose", "t2", 1, "t1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){2, 0, 1});
    ints("flat", 2, (int64_t[]){-1, 12});
    ints("back", 3, (int64_t[]){-1, 4, 3});
    op("Reshape", "r1", 2, "t2", "flat");
    op("Reshape", "r2", 2, "r1", "back");
    ints("ax", 1, (int64_t[]){1});
    op("Unsqueeze", "u", 2, "r2", "ax");
    op("Squeeze", "s", 2, "u", "ax");
    slim_node *c = op("Cast", "c", 1, "s");
    tu_attr_i(c, "to", 1); /* FLOAT */
    scalar("one", 1.0f);
    op("Add", "y", 2, "c", "one");
    op("Identity", "y2", 1, "y");
    output("y2");
}

START_TEST(simplify_removes_movement)
{
    pair p = both(build_movement, 3, (int64_t[]){2, 3, 4}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(g->n_nodes, 2);
    const slim_node *r = &g->nodes[0], *add = &g->nodes[1];
    ck_assert_str_eq(r->op_type, "Reshape");
    ck_assert_str_eq(g->values[r->in[0]].name, "x");
    ck_assert_str_eq(add->op_type, "Add");
    ck_assert_int_eq(add->in[0], r->out[0]);
    ck_assert_str_eq(g->values[add->out[0]].name, "y2");
    pair_free(&p);
}
END_TEST

/* Two transposes that are not inverse become one; a value read in the
 * middle (t1 also an output) keeps both. */
static void build_transposes(void)
{
    begin(3, (int64_t[]){2, 3, 4});
    slim_node *t = op("Transpose", "t1", 1, "x");
    tu_attr_ints(t, "perm", 3, (int64_t[]){1, 0, 2});
    t = op("Transpose", "y", 1, "t1");
    tu_attr_ints(t, "perm", 3, (int64_t[]){0, 2, 1});
    t = op("Transpose", "m1", 1, "x");
    tu_attr_ints(t, "perm", 3, (int64_t[]){2, 1, 0});
    op("Transpose", "m2", 1, "m1"); /* no perm: reverse, the inverse */
    output("y");
    output("m1");
    output("m2");
}

START_TEST(simplify_transposes)
{
    pair p = both(build_transposes, 3, (int64_t[]){2, 3, 4}, 1.0f, 0);
    const slim_graph *g = p.opt->graph;
    /* y = one Transpose of x; m1 stays (an output); m2 = x needs a node to
     * keep its name, and x is a graph input: it stays too. */
    ck_assert_int_eq(count_op(g, "Transpose"), 3);
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->values[g->nodes[i].out[0]].name, "y") == 0) {
            ck_assert_str_eq(g->values[g->nodes[i].in[0]].name, "x");
            int64_t perm[3];
            ck_assert_int_eq(slim_attr_ints(&g->nodes[i], "perm", perm, 3), 3);
            ck_assert_int_eq(perm[0], 1);
            ck_assert_int_eq(perm[1], 2);
            ck_assert_int_eq(perm[2], 0);
        }
    pair_free(&p);
}
END_TEST

/* Near misses: a Reshape whose shape holds 0 (a dim of the first
 * Reshape's output), Squeeze on other axes than the Unsqueeze's, a Cast
 * to another type and back. */
static void build_movement_kept(void)
{
    begin(3, (int64_t[]){2, 3, 4});
    ints("s1", 3, (int64_t[]){3, 2, 4});
    ints("s2", 2, (int64_t[]){0, -1});
    op("Reshape", "r1", 2, "x", "s1");
    op("Reshape", "r2", 2, "r1", "s2"); /* [3, 8], where x would give [2, 12] */
    ints("a02", 2, (int64_t[]){0, 2});
    ints("a0", 1, (int64_t[]){0});
    op("Unsqueeze", "u", 2, "r2", "a02"); /* [1, 3, 1, 8] */
    op("Squeeze", "s", 2, "u", "a0");     /* [3, 1, 8] */
    slim_node *c = op("Cast", "c", 1, "s");
    tu_attr_i(c, "to", 6); /* INT32: truncates */
    c = op("Cast", "y", 1, "c");
    tu_attr_i(c, "to", 1);
    output("y");
}

START_TEST(simplify_near_misses)
{
    pair p = both(build_movement_kept, 3, (int64_t[]){2, 3, 4}, 4.0f, 0);
    const slim_graph *g = p.opt->graph;
    ck_assert_int_eq(count_op(g, "Reshape"), 2);
    ck_assert_int_eq(count_op(g, "Unsqueeze"), 1);
    ck_assert_int_eq(count_op(g, "Squeeze"), 1);
    ck_assert_int_eq(count_op(g, "Cast"), 2);
    pair_free(&p);
}
END_TEST

/* ==== fuse_layernorm ======================================================= */

enum { LN_POW, LN_MUL_SQUARE };
enum { LN_DIV, LN_RECIPROCAL, LN_ONE_OVER, LN_POW_HALF };

static int ln_square, ln_norm, ln_beta = 1, ln_axis = -1, ln_sub_swapped, ln_leak, ln_constant_nodes,
    ln_two_subs;
static float ln_exponent = 2.0f;

/* x[N,5,16] -> LayerNorm spelled out over the last axis -> y. */
static void build_ln(void)
{
    begin(3, (int64_t[]){-1, 5, 16});
    rng_state = 77;
    vec("gamma", 16, 0.5f, 1.5f);
    vec("beta", 16, -0.3f, 0.3f);
    if (ln_constant_nodes) { /* as torch.onnx writes Python scalars */
        tu_attr_f(op("Constant", "eps", 0), "value_float", 1e-5f);
        tu_attr_f(op("Constant", "two", 0), "value_float", ln_exponent);
    } else {
        scalar("eps", 1e-5f);
        scalar("two", ln_exponent);
    }
    scalar("one", 1.0f);
    scalar("mhalf", -0.5f);
    slim_node *m = op("ReduceMean", "m", 1, "x");
    tu_attr_ints(m, "axes", 1, (int64_t[]){ln_axis});
    if (ln_sub_swapped)
        op("Sub", "d", 2, "m", "x");
    else
        op("Sub", "d", 2, "x", "m");
    const char *dn = "d"; /* the divided difference */
    if (ln_two_subs) { /* x - m again for the division */
        op("Sub", "d2", 2, "x", "m");
        dn = "d2";
    }
    if (ln_square == LN_POW)
        op("Pow", "sq", 2, "d", "two");
    else
        op("Mul", "sq", 2, "d", "d");
    m = op("ReduceMean", "v", 1, "sq");
    tu_attr_ints(m, "axes", 1, (int64_t[]){ln_axis});
    op("Add", "e", 2, "eps", "v");
    if (ln_norm == LN_POW_HALF) {
        op("Pow", "r", 2, "e", "mhalf");
        op("Mul", "n", 2, "r", dn);
    } else {
        op("Sqrt", "s", 1, "e");
        if (ln_norm == LN_DIV)
            op("Div", "n", 2, dn, "s");
        else {
            if (ln_norm == LN_RECIPROCAL)
                op("Reciprocal", "r", 1, "s");
            else
                op("Div", "r", 2, "one", "s");
            op("Mul", "n", 2, dn, "r");
        }
    }
    op("Mul", ln_beta ? "g" : "y", 2, "gamma", "n");
    if (ln_beta)
        op("Add", "y", 2, "g", "beta");
    output("y");
    if (ln_leak)
        output("s"); /* read in the middle of the pattern */
}

static void ln_reset(void)
{
    ln_square = LN_POW;
    ln_norm = LN_DIV;
    ln_beta = 1;
    ln_axis = -1;
    ln_sub_swapped = ln_leak = ln_constant_nodes = ln_two_subs = 0;
    ln_exponent = 2.0f;
}

START_TEST(fuse_layernorm_variants)
{
    int64_t dims[3] = {3, 5, 16};
    for (int sq = LN_POW; sq <= LN_MUL_SQUARE; sq++)
        for (int nm = LN_DIV; nm <= LN_POW_HALF; nm++)
            for (int b = 0; b < 4; b++) {
                ln_reset();
                ln_square = sq;
                ln_norm = nm;
                ln_beta = b & 1;
                ln_two_subs = b >> 1;
                pair p = both(build_ln, 3, dims, 3.0f, 1e-5);
                const slim_graph *g = p.opt->graph;
                ck_assert_int_eq(g->n_nodes, 1);
                const slim_node *n = &g->nodes[0];
                ck_assert_str_eq(n->op_type, "LayerNormalization");
                ck_assert_int_eq(n->n_in, ln_beta ? 3 : 2);
                ck_assert_int_eq(slim_attr_int(n, "axis", 0), -1);
                ck_assert(slim_attr_float(n, "epsilon", 0) == 1e-5f);
                pair_free(&p);
            }
}
END_TEST

/* Epsilon and the exponent from Constant nodes: fold_constants makes them
 * initializers first. */
START_TEST(fuse_layernorm_constant_nodes)
{
    ln_reset();
    ln_constant_nodes = 1;
    pair p = both(build_ln, 3, (int64_t[]){2, 5, 16}, 3.0f, 1e-5);
    ck_assert_int_eq(p.opt->graph->n_nodes, 1);
    ck_assert_str_eq(p.opt->graph->nodes[0].op_type, "LayerNormalization");
    pair_free(&p);
}
END_TEST

START_TEST(fuse_layernorm_near_misses)
{
    int64_t dims[3] = {3, 5, 16};
    for (int c = 0; c < 4; c++) {
        ln_reset();
        if (c == 0)
            ln_exponent = 4.0f; /* a different function */
        else if (c == 1)
            ln_axis = 1; /* statistics over another axis */
        else if (c == 2)
            ln_sub_swapped = 1; /* m - x */
        else
            ln_leak = 1; /* sqrt(var + eps) is also an output */
        pair p = both(build_ln, 3, dims, 3.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "LayerNormalization"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "ReduceMean"), 2);
        pair_free(&p);
    }
}
END_TEST

/* ==== fold_attention_scale (GPU placements) =============================== */

static float attn_c;
static int attn_div, attn_q_bias, attn_scores_out;

/* x[2,4,16]: Q and K projections (MatMul [+ Add], Reshape to 2 heads of 8,
 * Transpose), S = Q K^T scaled by attn_c (Mul, or Div by 1 / attn_c),
 * Softmax. attn_scores_out: S is a graph output too. */
static void build_attention(void)
{
    begin(3, (int64_t[]){2, 4, 16});
    rng_state = 9;
    float wd[256];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 256; i++)
            wd[i] = rndf() * 0.5f;
        init(k ? "wk" : "wq", tu_f32(2, (int64_t[]){16, 16}, wd));
    }
    vec("bq", 16, -0.5f, 0.5f);
    vec("bk", 16, -0.5f, 0.5f);
    ints("heads", 4, (int64_t[]){2, 4, 2, 8});
    op("MatMul", "qm", 2, "x", "wq");
    if (attn_q_bias)
        op("Add", "qb", 2, "qm", "bq");
    op("Reshape", "qr", 2, attn_q_bias ? "qb" : "qm", "heads");
    tu_attr_ints(op("Transpose", "q", 1, "qr"), "perm", 4, (int64_t[]){0, 2, 1, 3});
    op("MatMul", "km", 2, "x", "wk");
    op("Add", "kb", 2, "bk", "km");
    op("Reshape", "kr", 2, "kb", "heads");
    tu_attr_ints(op("Transpose", "kt", 1, "kr"), "perm", 4, (int64_t[]){0, 2, 3, 1});
    op("MatMul", "s", 2, "q", "kt");
    scalar("c", attn_div ? 1.0f / attn_c : attn_c);
    op(attn_div ? "Div" : "Mul", "ss", 2, "s", "c");
    tu_attr_i(op("Softmax", "y", 1, "ss"), "axis", -1);
    output("y");
    if (attn_scores_out)
        output("s");
}

/* The passes a GPU placement runs (host false) against none. */
static pair both_for_device(build_fn build, int ndim, const int64_t *dims, double tol)
{
    pair p = {load(build, false), NULL};
    build();
    slim_err err = {0};
    ck_assert_msg(slim_passes_run_for(G, false, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_msg(slim_model_from_graph(G, &p.opt, &err) == SLIM_OK, "%s", err.msg);
    agree(&p, ndim, dims, 2.0f, tol);
    return p;
}

START_TEST(fold_attention_scale_forms)
{
    int64_t dims[3] = {2, 4, 16};
    /* 1/8, a power of two: exact, so bitwise; 1/sqrt(8) by Div: rounded
     * once; Q without a bias (K, with its bias first, is not tried). */
    const struct { float c; int div, q_bias; double tol; } cases[] = {
        {0.125f, 0, 1, 0.0}, {0.35355339f, 1, 1, 1e-6}, {0.125f, 0, 0, 0.0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        attn_c = cases[i].c;
        attn_div = cases[i].div;
        attn_q_bias = cases[i].q_bias;
        attn_scores_out = 0;
        pair p = both_for_device(build_attention, 3, dims, cases[i].tol);
        ck_assert_int_eq(count_op(p.opt->graph, "Mul") + count_op(p.opt->graph, "Div"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Softmax"), 1);
        pair_free(&p);
    }
    /* Near miss: the scores are read twice (an output too): nothing moves. */
    attn_c = 0.125f;
    attn_div = 0;
    attn_q_bias = 1;
    attn_scores_out = 1;
    pair p = both_for_device(build_attention, 3, dims, 0.0);
    ck_assert_int_eq(count_op(p.opt->graph, "Mul"), 1);
    pair_free(&p);
}
END_TEST

/* ==== fuse_gelu ============================================================ */

enum { G_X_S_HALF, G_X_HALF_S, G_S_HALF_X };

static int gelu_group, gelu_div_scale, gelu_div_two, gelu_leak, gelu_cube_mul;
static float gelu_c = 0.70710678f, gelu_half = 0.5f, gelu_k = 0.7978845608f, gelu_a = 0.044715f;

/* x * 0.5 * (1 + s), grouped as gelu_group says, writing y. */
static void gelu_product(const char *s)
{
    scalar("half", gelu_half);
    scalar("two", 1.0f / gelu_half);
    const char *h = gelu_div_two ? "two" : "half", *hop = gelu_div_two ? "Div" : "Mul";
    if (gelu_group == G_X_S_HALF) {
        op("Mul", "p", 2, s, "x");
        op(hop, "y", 2, "p", h);
    } else if (gelu_group == G_X_HALF_S) {
        op(hop, "p", 2, "x", h);
        op("Mul", "y", 2, "p", s);
    } else {
        op("Mul", "p", 2, "half", s);
        op("Mul", "y", 2, "x", "p");
    }
    output("y");
}

static void build_gelu_erf(void)
{
    begin(2, (int64_t[]){-1, 64});
    scalar("c", gelu_div_scale ? 1.0f / gelu_c : gelu_c);
    scalar("one", 1.0f);
    if (gelu_div_scale)
        op("Div", "t", 2, "x", "c");
    else
        op("Mul", "t", 2, "c", "x");
    op("Erf", "e", 1, "t");
    op("Add", "s", 2, "one", "e");
    if (gelu_leak)
        output("e");
    gelu_product("s");
}

static void build_gelu_tanh(void)
{
    begin(2, (int64_t[]){-1, 64});
    scalar("k", gelu_k);
    scalar("a", gelu_a);
    scalar("three", 3.0f);
    scalar("one", 1.0f);
    if (gelu_cube_mul) {
        op("Mul", "x2", 2, "x", "x");
        op("Mul", "x3", 2, "x2", "x");
    } else {
        op("Pow", "x3", 2, "x", "three");
    }
    op("Mul", "ax3", 2, "a", "x3");
    op("Add", "in", 2, "x", "ax3");
    op("Mul", "t", 2, "in", "k");
    op("Tanh", "th", 1, "t");
    op("Add", "s", 2, "th", "one");
    if (gelu_leak)
        output("in");
    gelu_product("s");
}

static void gelu_reset(void)
{
    gelu_group = G_X_S_HALF;
    gelu_div_scale = gelu_div_two = gelu_leak = gelu_cube_mul = 0;
    gelu_c = 0.70710678f;
    gelu_half = 0.5f;
    gelu_k = 0.7978845608f;
    gelu_a = 0.044715f;
}

static void assert_gelu(const slim_graph *g, const char *approximate)
{
    ck_assert_int_eq(g->n_nodes, 1);
    ck_assert_str_eq(g->nodes[0].op_type, "Gelu");
    ck_assert_str_eq(slim_attr_str(&g->nodes[0], "approximate", "none"), approximate);
    ck_assert_str_eq(g->values[g->nodes[0].in[0]].name, "x");
    ck_assert_str_eq(g->values[g->nodes[0].out[0]].name, "y");
}

START_TEST(fuse_gelu_erf_orders)
{
    int64_t dims[2] = {3, 64};
    for (int grp = G_X_S_HALF; grp <= G_S_HALF_X; grp++)
        for (int div = 0; div < 2; div++)
            for (int two = 0; two < 2; two++) {
                if (grp == G_S_HALF_X && two)
                    continue; /* that grouping is built with Mul(0.5, s) only */
                gelu_reset();
                gelu_group = grp;
                gelu_div_scale = div;
                gelu_div_two = two;
                pair p = both(build_gelu_erf, 2, dims, 4.0f, 1e-6);
                assert_gelu(p.opt->graph, "none");
                pair_free(&p);
            }
}
END_TEST

/* The server's conversion cache, converting on the host for a GPU (fp16,
 * the whole graph half, no host passes): GELU is fused before the graph
 * goes half, since the passes match float32 constants only. The file keeps
 * the ONNX Gelu node, cast to half, and no Erf chain. */
START_TEST(gpu_conversion_fuses_before_half)
{
    gelu_reset();
    build_gelu_erf();
    char path[] = "/tmp/slim_gelu_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    slim_err err = {0};
    ck_assert_msg(slim_format_write(G, path, &err) == SLIM_OK, "%s", err.msg);
    slim_graph_free(G);
    G = NULL;
    slim_load_opts o = {.compress.precision = "fp16", .optimize.no_passes = true,
                        .compress.half.whole_graph = true};
    slim_model *m;
    ck_assert_msg(slim_model_load(path, &o, &m, &err) == SLIM_OK, "%s", err.msg);
    unlink(path);
    const slim_graph *g = m->graph;
    ck_assert_int_eq(count_op(g, "Erf"), 0);
    ck_assert_int_eq(count_op(g, "Gelu"), 1);
    /* Gelu reads x cast to half (the float32 input keeps its type). */
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "Gelu") == 0) {
            int producer = g->values[g->nodes[i].in[0]].producer;
            ck_assert_int_ge(producer, 0);
            ck_assert_str_eq(g->nodes[producer].op_type, "Cast");
            ck_assert_int_eq(slim_attr_int(&g->nodes[producer], "to", 0), 10); /* FLOAT16 */
        }
    slim_model_free(m);
}
END_TEST

START_TEST(fuse_gelu_tanh_forms)
{
    int64_t dims[2] = {3, 64};
    for (int grp = G_X_S_HALF; grp <= G_S_HALF_X; grp++)
        for (int cube = 0; cube < 2; cube++) {
            gelu_reset();
            gelu_group = grp;
            gelu_cube_mul = cube;
            pair p = both(build_gelu_tanh, 2, dims, 4.0f, 1e-6);
            assert_gelu(p.opt->graph, "tanh");
            pair_free(&p);
        }
}
END_TEST

START_TEST(fuse_gelu_near_misses)
{
    int64_t dims[2] = {3, 64};
    for (int c = 0; c < 5; c++) {
        gelu_reset();
        if (c == 0)
            gelu_c = 0.6f; /* erf(0.6 x): another function */
        else if (c == 1)
            gelu_c = 0.7072f; /* 1.3e-4 off: past the tolerance */
        else if (c == 2)
            gelu_half = 0.25f;
        else if (c == 3)
            gelu_leak = 1;
        else
            gelu_group = G_X_HALF_S, gelu_c = 1.702f; /* sigmoid-GELU's constant */
        pair p = both(build_gelu_erf, 2, dims, 4.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Gelu"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Erf"), 1);
        pair_free(&p);
    }
    for (int c = 0; c < 3; c++) {
        gelu_reset();
        if (c == 0)
            gelu_a = 0.05f;
        else if (c == 1)
            gelu_k = 0.75f;
        else
            gelu_leak = 1;
        pair p = both(build_gelu_tanh, 2, dims, 4.0f, 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Gelu"), 0);
        ck_assert_int_eq(count_op(p.opt->graph, "Tanh"), 1);
        pair_free(&p);
    }
}
END_TEST

/* The constants of a typed-out GELU within tolerance still match:
 * 1.4142 and 0.70711 as a person writes them. */
START_TEST(fuse_gelu_rounded_constants)
{
    int64_t dims[2] = {3, 64};
    gelu_reset();
    gelu_div_scale = 1;
    gelu_c = 1.0f / 1.4142f;
    pair p = both(build_gelu_erf, 2, dims, 4.0f, 1e-4);
    assert_gelu(p.opt->graph, "none");
    pair_free(&p);
}
END_TEST

/* Nodes with too few inputs reach the passes before finalize checks them
 * against their schema: the matchers must not read past them (ASan). */
START_TEST(patterns_with_short_nodes)
{
    for (int c = 0; c < 4; c++) {
        begin(2, (int64_t[]){-1, 16});
        scalar("c", 0.70710678f);
        scalar("one", 1.0f);
        scalar("two", 2.0f);
        scalar("eps", 1e-5f);
        slim_node *m = op("ReduceMean", "m", 1, "x");
        tu_attr_ints(m, "axes", 1, (int64_t[]){-1});
        op("Sub", "d", 2, "x", "m");
        op("Pow", "sq", c == 0 ? 1 : 2, "d", "two");
        m = op("ReduceMean", "v", c == 1 ? 0 : 1, "sq");
        tu_attr_ints(m, "axes", 1, (int64_t[]){-1});
        op("Add", "e", 2, "v", "eps");
        op("Sqrt", "s", 1, "e");
        op("Div", "n", c == 2 ? 1 : 2, "d", "s");
        op("Mul", "t", 2, "n", "c");
        op("Erf", "er", 1, "t");
        op("Add", "a", 2, "er", "one");
        op("Mul", "p", 2, "a", "n");
        op("Div", "y", c == 3 ? 1 : 2, "p", "two");
        output("y");
        slim_err err = {0};
        slim_passes_run(G, &err);
        slim_model *mdl;
        ck_assert_int_ne(slim_model_from_graph(G, &mdl, &err), SLIM_OK); /* frees G */
    }
}
END_TEST

Suite *rewrite_suite(void)
{
    Suite *s = suite_create("pass_rewrite");
    TCase *tc = tcase_create("rewrite");
    tcase_add_test(tc, fold_constants_static_shapes);
    tcase_add_test(tc, fold_constants_dynamic_shape_stays);
    tcase_add_test(tc, fold_constants_left_alone);
    tcase_add_test(tc, fold_constants_error_names_node);
    tcase_add_test(tc, fold_constants_hostile_graphs);
    tcase_add_test(tc, simplify_removes_movement);
    tcase_add_test(tc, simplify_transposes);
    tcase_add_test(tc, simplify_near_misses);
    tcase_add_test(tc, fuse_layernorm_variants);
    tcase_add_test(tc, fuse_layernorm_constant_nodes);
    tcase_add_test(tc, fuse_layernorm_near_misses);
    tcase_add_test(tc, fuse_gelu_erf_orders);
    tcase_add_test(tc, gpu_conversion_fuses_before_half);
    tcase_add_test(tc, fold_attention_scale_forms);
    tcase_add_test(tc, fuse_gelu_tanh_forms);
    tcase_add_test(tc, fuse_gelu_near_misses);
    tcase_add_test(tc, fuse_gelu_rounded_constants);
    tcase_add_test(tc, patterns_with_short_nodes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(rewrite_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
