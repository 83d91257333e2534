/* test_plan.c - the activation arena planner, its cache, and runs on it.
 *
 * Graphs here are built from a few ops whose results the test computes
 * itself (MatMul by a weight, Relu, Neg, Add, Sum of one input, Reshape to
 * the same shape), so every plan is also checked by running the model and
 * comparing with that reference. Every value is a [rows, width] float
 * matrix. */
#include "testutil.h"
#include "device.h"
#include "plan.h"
#include "slim_init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building graphs ------------------------------------------------------- */

static slim_graph *new_graph(void)
{
    slim_graph *g = slim_graph_new();
    ck_assert_ptr_nonnull(g);
    g->opset = 17; /* before the nodes: each takes the graph's opset */
    return g;
}

static void add_node(slim_graph *g, const char *name, const char *op, int n_in,
                     const char *const *in, const char *out)
{
    ck_assert_int_ge(slim_graph_add_node(g, name, op, "", n_in, in, 1, &out), 0);
}

static int value_id(const slim_graph *g, const char *name)
{
    int v = slim_graph_find_value(g, name);
    ck_assert_msg(v >= 0, "no value %s", name);
    return v;
}

/* A [rows, cols] weight with small deterministic values. */
static void add_weight(slim_graph *g, const char *name, int64_t rows, int64_t cols, unsigned seed)
{
    int v = slim_graph_value(g, name);
    ck_assert_int_ge(v, 0);
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_f32(2, (int64_t[]){rows, cols}, NULL);
    float *w = g->values[v].init.data;
    for (int64_t i = 0; i < rows * cols; i++) {
        seed = seed * 1103515245u + 12345u;
        w[i] = ((float)((seed >> 16) % 2001) / 1000.0f - 1.0f) / sqrtf((float)rows);
    }
}

/* The Reshape target [-1, width]: the same shape, so Reshape is a pure view. */
static void add_shape(slim_graph *g, const char *name, int64_t width)
{
    int v = slim_graph_value(g, name);
    ck_assert_int_ge(v, 0);
    g->values[v].kind = SLIM_VALUE_INITIALIZER;
    g->values[v].init = tu_i64(1, (int64_t[]){2}, (int64_t[]){-1, width});
}

static void set_input(slim_graph *g, const char *name, int64_t width)
{
    int v = slim_graph_value(g, name);
    ck_assert_int_eq(slim_graph_add_input(g, v), SLIM_OK);
    g->values[v].info.dtype = SLIM_F32;
    g->values[v].info.ndim = 2;
    g->values[v].info.dims[0] = -1;
    g->values[v].info.dims[1] = width;
}

static slim_model *finish(slim_graph *g)
{
    slim_model *m;
    slim_err err = {0};
    ck_assert_msg(slim_model_from_graph(g, &m, &err) == SLIM_OK, "%s", err.msg);
    return m;
}

static slim_plan *plan_for(const slim_model *m, int64_t rows, int64_t width)
{
    slim_tensor sig = {.dtype = SLIM_F32, .ndim = 2, .dims = {rows, width}};
    slim_plan *p = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_plan_build(m, &sig, &p, &err) == SLIM_OK, "%s", err.msg);
    return p;
}

/* Finalize sorts nodes: steps are looked up, not assumed. */
static int step_of(const slim_model *m, const char *node)
{
    for (int i = 0; i < m->graph->n_nodes; i++)
        if (strcmp(m->graph->nodes[i].name, node) == 0)
            return i;
    ck_abort_msg("no node %s", node);
    return -1;
}

static int buffer_of(const slim_model *m, const slim_plan *p, const char *name)
{
    return p->buffer_of_value[value_id(m->graph, name)];
}

/* ---- the reference ---------------------------------------------------------- */

/* Evaluates the graph in plain C: every value a malloc'd [rows, width]. */
static float **reference(const slim_graph *g, const float *x, int64_t rows, int64_t *width)
{
    float **val = calloc((size_t)g->n_values, sizeof(float *));
    ck_assert_ptr_nonnull(val);
    for (int v = 0; v < g->n_values; v++)
        width[v] = g->values[v].kind == SLIM_VALUE_INITIALIZER ? g->values[v].init.dims[1] : 0;
    int xv = g->inputs[0];
    width[xv] = g->values[xv].info.dims[1];
    val[xv] = malloc(sizeof(float) * (size_t)(rows * width[xv]));
    memcpy(val[xv], x, sizeof(float) * (size_t)(rows * width[xv]));
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        int a = n->in[0], y = n->out[0];
        const char *op = n->op_type;
        width[y] = strcmp(op, "MatMul") == 0 ? g->values[n->in[1]].init.dims[1] : width[a];
        int64_t cnt = rows * width[y];
        float *out = malloc(sizeof(float) * (size_t)cnt);
        ck_assert_ptr_nonnull(out);
        for (int64_t e = 0; e < cnt; e++) {
            if (strcmp(op, "MatMul") == 0) {
                const float *w = g->values[n->in[1]].init.data;
                int64_t r = e / width[y], c = e % width[y];
                double s = 0;
                for (int64_t k = 0; k < width[a]; k++)
                    s += (double)val[a][r * width[a] + k] * w[k * width[y] + c];
                out[e] = (float)s;
            } else if (strcmp(op, "Relu") == 0) {
                out[e] = val[a][e] > 0 ? val[a][e] : 0;
            } else if (strcmp(op, "Neg") == 0) {
                out[e] = -val[a][e];
            } else if (strcmp(op, "Add") == 0) {
                out[e] = val[a][e] + val[n->in[1]][e];
            } else { /* Sum of one input, Reshape to the same shape */
                out[e] = val[a][e];
            }
        }
        val[y] = out;
    }
    return val;
}

static void free_reference(const slim_graph *g, float **val)
{
    for (int v = 0; v < g->n_values; v++)
        free(val[v]);
    free(val);
}

static float input_at(int64_t i, int salt)
{
    return (float)((i * 7 + salt) % 11) / 4.0f - 1.25f;
}

/* Runs m on a deterministic [rows, width] input and compares every graph
 * output with the reference. */
static void run_and_compare(const slim_model *m, int64_t rows, int salt)
{
    const slim_graph *g = m->graph;
    int64_t width0 = g->values[g->inputs[0]].info.dims[1];
    slim_tensor x = tu_f32(2, (int64_t[]){rows, width0}, NULL);
    for (int64_t i = 0; i < rows * width0; i++)
        ((float *)x.data)[i] = input_at(i, salt);
    int64_t *width = calloc((size_t)g->n_values, sizeof(int64_t));
    ck_assert_ptr_nonnull(width);
    float **want = reference(g, x.data, rows, width);
    slim_tensor *out;
    int n_out;
    slim_err err = {0};
    const char *name = g->values[g->inputs[0]].name;
    ck_assert_msg(slim_model_run(m, 1, &name, &x, &out, &n_out, &err) == SLIM_OK, "%s", err.msg);
    ck_assert_int_eq(n_out, g->n_outputs);
    for (int k = 0; k < n_out; k++) {
        int v = g->outputs[k];
        tu_assert_shape(&out[k], 2, (int64_t[]){rows, width[v]});
        for (int64_t e = 0; e < rows * width[v]; e++) {
            float got = ((float *)out[k].data)[e], ref = want[v][e];
            ck_assert_msg(fabsf(got - ref) <= 1e-4f * fmaxf(1.0f, fabsf(ref)),
                          "output %s[%lld] = %g, expected %g", g->values[v].name, (long long)e,
                          got, ref);
        }
    }
    slim_tensors_free(out, n_out);
    free_reference(g, want);
    free(width);
    slim_tensor_release(&x);
}

/* ---- invariants every plan keeps -------------------------------------------- */

static void check_invariants(const slim_model *m, const slim_plan *p)
{
    const slim_graph *g = m->graph;
    size_t end = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        const slim_plan_buffer *x = &p->buffers[b];
        ck_assert_uint_eq(x->offset % SLIM_PLAN_ALIGN, 0);
        ck_assert_int_le(x->first, x->last);
        if (x->offset + x->size > end)
            end = x->offset + x->size;
        for (int c = b + 1; c < p->n_buffers; c++) {
            const slim_plan_buffer *y = &p->buffers[c];
            if (x->first > y->last || y->first > x->last)
                continue;
            ck_assert_msg(x->offset + x->size <= y->offset || y->offset + y->size <= x->offset,
                          "buffers %d [%zu,+%zu) and %d [%zu,+%zu) overlap while both alive "
                          "(steps %d-%d, %d-%d)", b, x->offset, x->size, c, y->offset, y->size,
                          x->first, x->last, y->first, y->last);
        }
    }
    ck_assert_uint_ge(p->arena_bytes, end);
    ck_assert_uint_ge(p->arena_bytes, p->lower_bound_bytes);
    /* The lower bound, recomputed, and every value inside its buffer's life. */
    size_t bound = 0;
    for (int s = 0; s < g->n_nodes; s++) {
        size_t live = 0;
        for (int b = 0; b < p->n_buffers; b++)
            if (p->buffers[b].first <= s && s <= p->buffers[b].last)
                live += p->buffers[b].size;
        bound = live > bound ? live : bound;
    }
    ck_assert_uint_eq(p->lower_bound_bytes, bound);
    for (int s = 0; s < g->n_nodes; s++) {
        const slim_node *n = &g->nodes[s];
        for (int k = 0; k < n->n_in + n->n_out; k++) {
            int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
            if (v < 0 || p->buffer_of_value[v] < 0)
                continue;
            const slim_plan_buffer *x = &p->buffers[p->buffer_of_value[v]];
            ck_assert_msg(x->first <= s && s <= x->last, "value %s used at step %d outside "
                          "its buffer's life %d-%d", g->values[v].name, s, x->first, x->last);
            ck_assert_uint_eq(p->value_bytes[v], x->size);
            ck_assert(!g->values[v].is_output);
            ck_assert_int_eq(g->values[v].kind, SLIM_VALUE_INTERMEDIATE);
        }
    }
}

/* ---- known answers ----------------------------------------------------------- */

enum { ROWS = 16, WIDTH = 4, ACT = ROWS * WIDTH * 4 }; /* one activation: 256 bytes */

/* x -> MatMul -> t1 -> MatMul -> t2 -> MatMul -> t3 -> MatMul -> y */
START_TEST(chain_needs_two_activations)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 1);
    const char *names[] = {"x", "t1", "t2", "t3", "y"};
    for (int i = 0; i < 4; i++)
        add_node(g, names[i + 1], "MatMul", 2, (const char *[]){names[i], "w"}, names[i + 1]);
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "y"));
    slim_model *m = finish(g);
    slim_plan *p = plan_for(m, ROWS, WIDTH);
    check_invariants(m, p);
    ck_assert_int_eq(p->n_buffers, 3);
    ck_assert_uint_eq(p->arena_bytes, 2 * ACT);
    ck_assert_uint_eq(p->lower_bound_bytes, 2 * ACT);
    ck_assert_uint_eq(p->naive_bytes, 3 * ACT);
    ck_assert_int_eq(p->n_inplace, 0);
    ck_assert_int_eq(p->batch, ROWS);
    ck_assert_int_eq(buffer_of(m, p, "y"), -1);
    ck_assert_int_eq(buffer_of(m, p, "x"), -1);
    ck_assert_int_eq(buffer_of(m, p, "w"), -1);
    /* t1 and t3 never live together: they share the place t2 does not. */
    ck_assert_uint_eq(p->buffers[buffer_of(m, p, "t1")].offset,
                      p->buffers[buffer_of(m, p, "t3")].offset);
    ck_assert_uint_ne(p->buffers[buffer_of(m, p, "t1")].offset,
                      p->buffers[buffer_of(m, p, "t2")].offset);
    slim_plan_free(p);
    run_and_compare(m, ROWS, 1);
    run_and_compare(m, 3, 2);
    slim_model_free(m);
}
END_TEST

/* A residual block: t1 -> MatMul -> t2 -> MatMul -> t3, t4 = t3 + t1 (in
 * place over t3), y = MatMul(t4). At t3's step t1, t2, t3 are all alive. */
START_TEST(residual_block_keeps_the_skip_alive)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 2);
    add_node(g, "a", "MatMul", 2, (const char *[]){"x", "w"}, "t1");
    add_node(g, "b", "MatMul", 2, (const char *[]){"t1", "w"}, "t2");
    add_node(g, "c", "MatMul", 2, (const char *[]){"t2", "w"}, "t3");
    add_node(g, "d", "Add", 2, (const char *[]){"t3", "t1"}, "t4");
    add_node(g, "e", "MatMul", 2, (const char *[]){"t4", "w"}, "y");
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "y"));
    slim_model *m = finish(g);
    slim_plan *p = plan_for(m, ROWS, WIDTH);
    check_invariants(m, p);
    ck_assert_int_eq(p->n_inplace, 1);
    ck_assert_int_eq(p->n_buffers, 3);
    ck_assert_int_eq(buffer_of(m, p, "t3"), buffer_of(m, p, "t4"));
    ck_assert_int_ne(buffer_of(m, p, "t1"), buffer_of(m, p, "t4"));
    const slim_plan_buffer *skip = &p->buffers[buffer_of(m, p, "t1")];
    ck_assert_int_eq(skip->first, step_of(m, "a"));
    ck_assert_int_eq(skip->last, step_of(m, "d"));
    ck_assert_uint_eq(p->lower_bound_bytes, 3 * ACT);
    ck_assert_uint_eq(p->arena_bytes, 3 * ACT);
    slim_plan_free(p);
    run_and_compare(m, ROWS, 3);
    slim_model_free(m);
}
END_TEST

/* t1 -> Reshape -> t2 -> Reshape -> t3 -> MatMul: one buffer of three
 * values, alive until t3's reader. */
START_TEST(views_share_their_source_buffer)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 3);
    add_shape(g, "shape", WIDTH);
    add_node(g, "a", "MatMul", 2, (const char *[]){"x", "w"}, "t1");
    add_node(g, "b", "Reshape", 2, (const char *[]){"t1", "shape"}, "t2");
    add_node(g, "c", "Reshape", 2, (const char *[]){"t2", "shape"}, "t3");
    add_node(g, "d", "MatMul", 2, (const char *[]){"t3", "w"}, "y");
    /* A view of the graph input is borrowed, not planned. */
    add_node(g, "e", "Reshape", 2, (const char *[]){"x", "shape"}, "xv");
    add_node(g, "f", "MatMul", 2, (const char *[]){"xv", "w"}, "y2");
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "y"));
    slim_graph_add_output(g, value_id(g, "y2"));
    slim_model *m = finish(g);
    slim_plan *p = plan_for(m, ROWS, WIDTH);
    check_invariants(m, p);
    ck_assert_int_eq(p->n_buffers, 1);
    int b = buffer_of(m, p, "t1");
    ck_assert_int_ge(b, 0);
    ck_assert_int_eq(buffer_of(m, p, "t2"), b);
    ck_assert_int_eq(buffer_of(m, p, "t3"), b);
    ck_assert_int_eq(buffer_of(m, p, "xv"), -1);
    ck_assert_int_eq(p->buffers[b].n_values, 3);
    ck_assert_int_eq(p->buffers[b].root, value_id(m->graph, "t1"));
    ck_assert_int_eq(p->buffers[b].first, step_of(m, "a"));
    ck_assert_int_eq(p->buffers[b].last, step_of(m, "d"));
    ck_assert_uint_eq(p->arena_bytes, ACT);
    slim_plan_free(p);
    run_and_compare(m, ROWS, 4);
    slim_model_free(m);
}
END_TEST

/* t1 = MatMul(x), t2 = Relu(t1) in place, t3 = Neg(t2) in place, then
 * Add(t3, t3) may not be: its second input lives in the same buffer. */
START_TEST(relu_after_matmul_runs_in_place)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 4);
    add_node(g, "a", "MatMul", 2, (const char *[]){"x", "w"}, "t1");
    add_node(g, "b", "Relu", 1, (const char *[]){"t1"}, "t2");
    add_node(g, "c", "Neg", 1, (const char *[]){"t2"}, "t3");
    add_node(g, "d", "Add", 2, (const char *[]){"t3", "t3"}, "t4");
    add_node(g, "e", "MatMul", 2, (const char *[]){"t4", "w"}, "y");
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "y"));
    slim_model *m = finish(g);
    slim_plan *p = plan_for(m, ROWS, WIDTH);
    check_invariants(m, p);
    ck_assert_int_eq(p->n_inplace, 2);
    ck_assert_int_eq(buffer_of(m, p, "t1"), buffer_of(m, p, "t2"));
    ck_assert_int_eq(buffer_of(m, p, "t2"), buffer_of(m, p, "t3"));
    ck_assert_int_ne(buffer_of(m, p, "t3"), buffer_of(m, p, "t4"));
    ck_assert_int_eq(p->n_buffers, 2);
    ck_assert_uint_eq(p->arena_bytes, 2 * ACT);
    slim_plan_free(p);
    run_and_compare(m, ROWS, 5);
    run_and_compare(m, 5, 6);
    slim_model_free(m);
}
END_TEST

/* t1 is a graph output and t2 a view that is one: neither their buffers
 * nor an in-place write over them may be in the arena. */
START_TEST(graph_outputs_stay_out_of_the_arena)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 5);
    add_shape(g, "shape", WIDTH);
    add_node(g, "a", "MatMul", 2, (const char *[]){"x", "w"}, "t1");
    add_node(g, "b", "Relu", 1, (const char *[]){"t1"}, "t2");
    add_node(g, "c", "MatMul", 2, (const char *[]){"t2", "w"}, "t3");
    add_node(g, "d", "Reshape", 2, (const char *[]){"t3", "shape"}, "t3v");
    add_node(g, "e", "Neg", 1, (const char *[]){"t3v"}, "y");
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "t1"));
    slim_graph_add_output(g, value_id(g, "y"));
    slim_graph_add_output(g, value_id(g, "t3v"));
    slim_model *m = finish(g);
    slim_plan *p = plan_for(m, ROWS, WIDTH);
    check_invariants(m, p);
    ck_assert_int_eq(buffer_of(m, p, "t1"), -1);
    ck_assert_int_eq(buffer_of(m, p, "t3"), -1);
    ck_assert_int_eq(buffer_of(m, p, "t3v"), -1);
    ck_assert_int_ge(buffer_of(m, p, "t2"), 0);
    ck_assert_int_eq(p->n_inplace, 0);
    ck_assert_int_eq(p->n_buffers, 1);
    slim_plan_free(p);
    run_and_compare(m, ROWS, 7);
    slim_model_free(m);
}
END_TEST

/* Reshape to a shape given as a graph input: its data is not known while
 * planning, so the view and what follows are allocated on their own. */
START_TEST(data_dependent_shapes_fall_back)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 6);
    add_node(g, "a", "MatMul", 2, (const char *[]){"x", "w"}, "t1");
    add_node(g, "b", "Relu", 1, (const char *[]){"t1"}, "t2");
    add_node(g, "c", "Reshape", 2, (const char *[]){"t2", "target"}, "t3");
    add_node(g, "d", "Neg", 1, (const char *[]){"t3"}, "t4");
    add_node(g, "e", "MatMul", 2, (const char *[]){"t4", "w"}, "t5");
    add_node(g, "f", "Relu", 1, (const char *[]){"t5"}, "y");
    set_input(g, "x", WIDTH);
    int target = slim_graph_value(g, "target");
    slim_graph_add_input(g, target);
    g->values[target].info.dtype = SLIM_I64;
    g->values[target].info.ndim = 1;
    g->values[target].info.dims[0] = 2;
    slim_graph_add_output(g, value_id(g, "y"));
    slim_model *m = finish(g);
    slim_tensor sig[2] = {{.dtype = SLIM_F32, .ndim = 2, .dims = {ROWS, WIDTH}},
                          {.dtype = SLIM_I64, .ndim = 1, .dims = {2}}};
    slim_plan *p = NULL;
    slim_err err = {0};
    ck_assert_msg(slim_plan_build(m, sig, &p, &err) == SLIM_OK, "%s", err.msg);
    check_invariants(m, p);
    /* t1 and t2 are known (one in-place buffer; the view t3 joins it, its
     * size being its source's); t4 and t5 are not. */
    ck_assert_int_ge(buffer_of(m, p, "t1"), 0);
    ck_assert_int_eq(buffer_of(m, p, "t2"), buffer_of(m, p, "t1"));
    ck_assert_int_eq(buffer_of(m, p, "t4"), -1);
    ck_assert_int_eq(buffer_of(m, p, "t5"), -1);
    slim_plan_free(p);

    slim_tensor in[2] = {tu_f32(2, (int64_t[]){ROWS, WIDTH}, NULL),
                         tu_i64(1, (int64_t[]){2}, (int64_t[]){-1, WIDTH})};
    for (int i = 0; i < ROWS * WIDTH; i++)
        ((float *)in[0].data)[i] = input_at(i, 8);
    slim_tensor *out;
    int n_out;
    ck_assert_msg(slim_model_run(m, 2, (const char *[]){"x", "target"}, in, &out, &n_out, &err) ==
                      SLIM_OK, "%s", err.msg);
    /* y = relu(-(relu(x W)) W) */
    const float *w = m->graph->values[value_id(m->graph, "w")].init.data;
    for (int r = 0; r < ROWS; r++) {
        float h[WIDTH];
        for (int c = 0; c < WIDTH; c++) {
            double s = 0;
            for (int k = 0; k < WIDTH; k++)
                s += (double)((float *)in[0].data)[r * WIDTH + k] * w[k * WIDTH + c];
            h[c] = -(s > 0 ? (float)s : 0);
        }
        for (int c = 0; c < WIDTH; c++) {
            double s = 0;
            for (int k = 0; k < WIDTH; k++)
                s += (double)h[k] * w[k * WIDTH + c];
            ck_assert_float_eq_tol(((float *)out[0].data)[r * WIDTH + c], s > 0 ? s : 0, 1e-5);
        }
    }
    slim_tensors_free(out, n_out);
    tu_free_inputs(in, 2);
    slim_model_free(m);
}
END_TEST

/* ---- randomized graphs ------------------------------------------------------- */

/* A random DAG of MatMul (widths 4, 8, 16, 24 with 3 rows planned), Relu,
 * Neg, Add (two values of one width, sometimes the same one twice), Sum of
 * one input and Reshape views; inputs mostly recent, sometimes far back,
 * so lifetimes vary; some intermediates are graph outputs. */
static slim_model *random_model(unsigned seed)
{
    static const int64_t widths[] = {4, 8, 16, 24};
    slim_graph *g = new_graph();
    srand(seed);
    int n_nodes = 8 + rand() % 40;
    char (*names)[16] = calloc((size_t)n_nodes + 1, sizeof(*names));
    int64_t *width = calloc((size_t)n_nodes + 1, sizeof(int64_t));
    ck_assert(names && width);
    snprintf(names[0], sizeof(names[0]), "x");
    width[0] = 8;
    for (int w = 0; w < 4; w++)
        for (int w2 = 0; w2 < 4; w2++) {
            char wn[32];
            snprintf(wn, sizeof(wn), "w%lldx%lld", (long long)widths[w], (long long)widths[w2]);
            add_weight(g, wn, widths[w], widths[w2], seed * 31u + (unsigned)(w * 4 + w2));
        }
    for (int w = 0; w < 4; w++) {
        char sn[32];
        snprintf(sn, sizeof(sn), "shape%lld", (long long)widths[w]);
        add_shape(g, sn, widths[w]);
    }
    for (int i = 1; i <= n_nodes; i++) {
        int a = rand() % 4 ? i - 1 - rand() % (i < 3 ? i : 3) : rand() % i;
        snprintf(names[i], sizeof(names[i]), "v%d", i);
        char node[24], extra[32];
        snprintf(node, sizeof(node), "n%d", i);
        int op = rand() % 7;
        width[i] = width[a];
        if (op == 0 || op == 1) {
            width[i] = widths[rand() % 4];
            snprintf(extra, sizeof(extra), "w%lldx%lld", (long long)width[a], (long long)width[i]);
            add_node(g, node, "MatMul", 2, (const char *[]){names[a], extra}, names[i]);
        } else if (op == 2) {
            add_node(g, node, "Relu", 1, (const char *[]){names[a]}, names[i]);
        } else if (op == 3) {
            add_node(g, node, "Neg", 1, (const char *[]){names[a]}, names[i]);
        } else if (op == 4) {
            int b = a;
            for (int t = 0; t < 8; t++) {
                int c = rand() % i;
                if (width[c] == width[a]) {
                    b = c;
                    break;
                }
            }
            add_node(g, node, "Add", 2, (const char *[]){names[a], names[b]}, names[i]);
        } else if (op == 5) {
            add_node(g, node, "Sum", 1, (const char *[]){names[a]}, names[i]);
        } else {
            snprintf(extra, sizeof(extra), "shape%lld", (long long)width[a]);
            add_node(g, node, "Reshape", 2, (const char *[]){names[a], extra}, names[i]);
        }
    }
    set_input(g, "x", 8);
    slim_graph_add_output(g, value_id(g, names[n_nodes]));
    for (int i = 1; i < n_nodes; i++)
        if (rand() % 10 == 0)
            slim_graph_add_output(g, value_id(g, names[i]));
    free(names);
    free(width);
    return finish(g);
}

START_TEST(random_graphs_never_overlap_live_buffers)
{
    for (unsigned seed = 1; seed <= 60; seed++) {
        slim_model *m = random_model(seed);
        for (int64_t rows = 1; rows <= 7; rows += 3) {
            slim_plan *p = plan_for(m, rows, 8);
            check_invariants(m, p);
            ck_assert_uint_le(p->arena_bytes, p->naive_bytes);
            slim_plan_free(p);
            run_and_compare(m, rows, (int)seed);
        }
        slim_model_free(m);
    }
}
END_TEST

/* ---- the cache ------------------------------------------------------------- */

START_TEST(cache_keys_plans_by_signature)
{
    slim_model *m = random_model(7);
    slim_tensor a = {.dtype = SLIM_F32, .ndim = 2, .dims = {4, 8}};
    slim_tensor b = {.dtype = SLIM_F32, .ndim = 2, .dims = {8, 8}};
    const slim_plan *p1, *p2, *p3;
    bool owned;
    slim_err err = {0};
    ck_assert_int_eq(slim_model_plan(m, &a, &p1, &owned, &err), SLIM_OK);
    ck_assert(!owned);
    ck_assert_int_eq(slim_model_plan(m, &a, &p2, &owned, &err), SLIM_OK);
    ck_assert_ptr_eq(p1, p2);
    ck_assert_int_eq(slim_model_plan(m, &b, &p3, &owned, &err), SLIM_OK);
    ck_assert_ptr_ne(p1, p3);
    ck_assert_int_eq(p3->batch, 8);
    int64_t batch[4];
    size_t bytes[4];
    ck_assert_int_eq(slim_model_plan_sizes(m, batch, bytes, 4), 2);
    ck_assert_int_eq(batch[0], 4);
    ck_assert_int_eq(batch[1], 8);
    ck_assert_uint_eq(bytes[1], p3->arena_bytes);
    /* Past the cache's capacity plans still come, owned by the caller. */
    for (int64_t rows = 100; rows < 100 + SLIM_PLAN_CACHE_MAX; rows++) {
        slim_tensor t = {.dtype = SLIM_F32, .ndim = 2, .dims = {rows, 8}};
        const slim_plan *p;
        ck_assert_int_eq(slim_model_plan(m, &t, &p, &owned, &err), SLIM_OK);
        ck_assert_int_eq(p->batch, rows);
        if (owned)
            slim_plan_free((slim_plan *)p);
    }
    ck_assert_int_eq(slim_model_plan_sizes(m, batch, bytes, 4), 4);
    slim_model_free(m);
    slim__plan_cache_free(NULL);
}
END_TEST

/* ---- limits ----------------------------------------------------------------- */

static int64_t allocated_now(void)
{
    slim_mem_stats s;
    slim_allocator_stats(slim_device_cpu()->alloc, &s);
    return s.allocated_bytes[SLIM_POOL_ALL].current;
}

/* The chain of chain_needs_two_activations on 64K rows: 1 MiB activations,
 * a 2 MiB arena. */
START_TEST(runs_over_the_model_limit_fail_cleanly)
{
    slim_graph *g = new_graph();
    add_weight(g, "w", WIDTH, WIDTH, 9);
    const char *names[] = {"x", "t1", "t2", "t3", "y"};
    for (int i = 0; i < 4; i++)
        add_node(g, names[i + 1], "MatMul", 2, (const char *[]){names[i], "w"}, names[i + 1]);
    set_input(g, "x", WIDTH);
    slim_graph_add_output(g, value_id(g, "y"));
    slim_model *m = finish(g);
    int64_t rows = 1 << 16;
    size_t act = (size_t)rows * WIDTH * sizeof(float);
    slim_tensor x = tu_f32(2, (int64_t[]){rows, WIDTH}, NULL);
    for (int64_t i = 0; i < rows * WIDTH; i++)
        ((float *)x.data)[i] = input_at(i, 9);
    int64_t base = allocated_now();
    slim_err err = {0};
    slim_tensor *out = (slim_tensor *)1;
    int n_out = 3;

    /* The arena alone is over the limit. */
    ck_assert_int_eq(slim_model_set_memory_limit(m, act, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EOOM);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(n_out, 0);
    char arena_bytes[32];
    snprintf(arena_bytes, sizeof(arena_bytes), "%zu bytes", 2 * act);
    ck_assert_msg(strstr(err.msg, arena_bytes), "message does not name the arena: %s", err.msg);
    ck_assert_int_eq(allocated_now(), base);

    /* The arena fits, the output does not: the last node fails. */
    ck_assert_int_eq(slim_model_set_memory_limit(m, 2 * act + act / 2, &err), SLIM_OK);
    ck_assert_int_eq(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err),
                     SLIM_EOOM);
    ck_assert_msg(strstr(err.msg, "node \"y\" (MatMul)"), "message: %s", err.msg);
    ck_assert_int_eq(allocated_now(), base);

    ck_assert_int_eq(slim_model_set_memory_limit(m, 0, &err), SLIM_OK);
    ck_assert_msg(slim_model_run(m, 1, (const char *[]){"x"}, &x, &out, &n_out, &err) == SLIM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(n_out, 1);
    ck_assert_int_eq(allocated_now() - base, (int64_t)act);
    slim_tensors_free(out, n_out);
    ck_assert_int_eq(allocated_now(), base);
    slim_tensor_release(&x);
    slim_model_free(m);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, chain_needs_two_activations);
    tcase_add_test(tc, residual_block_keeps_the_skip_alive);
    tcase_add_test(tc, views_share_their_source_buffer);
    tcase_add_test(tc, relu_after_matmul_runs_in_place);
    tcase_add_test(tc, graph_outputs_stay_out_of_the_arena);
    tcase_add_test(tc, data_dependent_shapes_fall_back);
    tcase_add_test(tc, random_graphs_never_overlap_live_buffers);
    tcase_add_test(tc, cache_keys_plans_by_signature);
    tcase_add_test(tc, runs_over_the_model_limit_fail_cleanly);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
