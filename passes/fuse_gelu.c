/*
 * fuse_gelu.c - GELU written out in elementary ops becomes one Gelu node
 * (ONNX opset 20; kernels/cpu/elementwise.c).
 *
 * The exact form, x * 0.5 * (1 + erf(x / sqrt(2))), is how PyTorch exports
 * nn.GELU below opset 20 and how bench/gen_encoder.py writes it; the tanh
 * form, 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), is
 * GPT-2's and PyTorch's approximate="tanh". Either is five to nine
 * elementwise passes over the activation; Gelu is one.
 *
 * Matched from the Erf (Tanh) node outwards:
 *   erf:  Div(x, sqrt2) or Mul(x, 1/sqrt2), in either operand order
 *   tanh: Mul(Add(x, Mul(x^3, 0.044715)), sqrt(2/pi)), x^3 as Pow(x, 3),
 *         Mul(x, Mul(x, x)) or Mul(Mul(x, x), x), operands in any order
 *   then Add(., 1), and the product of x, 0.5 and that sum in any of its
 *   three groupings: (x * s) * 0.5, (x * 0.5) * s, (s * 0.5) * x, where
 *   * 0.5 may be / 2.
 * Every intermediate must be read by the next op only and be no graph
 * output; the constants are float scalars (rank 0, so no broadcast can
 * change the shape). 0.5, 1, 2 and 3 must be exact; sqrt2, 1/sqrt2,
 * sqrt(2/pi) and 0.044715 within 1e-4 relative: what a value typed with
 * five digits or rounded to float32 meets, and far from the constants of
 * other functions (1.702 of the sigmoid form, 0.5 or 1 for typos).
 */
#include "pass.h"

#include <string.h>

#define GELU_REL 1e-4

typedef struct gelu_match {
    slim_node *nodes[12];
    int n;
} gelu_match;

/* A float32 scalar constant's value (float32: x is, or the graph would
 * not type-check). */
static bool f32_scalar(const slim_graph *g, int v, double *c)
{
    const slim_tensor *t = slim_pass_const_f32(g, v);
    return t && slim__pattern_scalar(g, v, 0, c);
}

static bool exact(const slim_graph *g, int v, double want)
{
    double c;
    return f32_scalar(g, v, &c) && c == want;
}

static bool close_to(const slim_graph *g, int v, double want)
{
    double c;
    return f32_scalar(g, v, &c) && slim__pattern_near(c, want, GELU_REL);
}

/* Binary op node n reading x and a scalar c (either order); -1 if not. */
static bool with_const(const slim_node *n, int x, int *c)
{
    *c = slim__pattern_other(n, x);
    return *c >= 0 && *c != x;
}

/* v = x * 0.5 (Mul either order, or Div(x, 2)): x, or -1. */
static int half_of(const slim__pattern *p, int v)
{
    const slim_graph *g = p->g;
    slim_node *n = slim__pattern_producer(p, v, "Mul");
    if (n && n->n_in == 2) {
        if (exact(g, n->in[1], 0.5))
            return n->in[0];
        if (exact(g, n->in[0], 0.5))
            return n->in[1];
    }
    n = slim__pattern_producer(p, v, "Div");
    return n && n->n_in == 2 && exact(g, n->in[1], 2.0) ? n->in[0] : -1;
}

/* The node after s = 1 + f(x) that completes x * 0.5 * s; NULL if none. */
static slim_node *product(slim__pattern *p, int x, int s, gelu_match *m)
{
    const slim_graph *g = p->g;
    slim_node *m1 = slim__pattern_sole(p, s, "Mul");
    int o = m1 ? slim__pattern_other(m1, s) : -1;
    if (o < 0 || o == s)
        return NULL;
    if (o == x) { /* (x * s) * 0.5 */
        m->nodes[m->n++] = m1;
        slim_node *m2 = slim__pattern_sole(p, m1->out[0], "Mul");
        int c;
        if (m2 && with_const(m2, m1->out[0], &c) && exact(g, c, 0.5))
            return m2;
        m2 = slim__pattern_sole(p, m1->out[0], "Div");
        return m2 && m2->n_in == 2 && m2->in[0] == m1->out[0] && exact(g, m2->in[1], 2.0) ? m2
                                                                                         : NULL;
    }
    if (exact(g, o, 0.5)) { /* (s * 0.5) * x */
        m->nodes[m->n++] = m1;
        slim_node *m2 = slim__pattern_sole(p, m1->out[0], "Mul");
        return m2 && slim__pattern_other(m2, m1->out[0]) == x ? m2 : NULL;
    }
    /* (x * 0.5) * s, the half read by this Mul only */
    if (half_of(p, o) == x && p->w.uses.readers[o] == 1 && !g->values[o].is_output) {
        m->nodes[m->n++] = &p->g->nodes[p->w.uses.producer[o]];
        return m1;
    }
    return NULL;
}

/* s = Add(f, 1) read from f's only reader; its output, or -1. */
static int plus_one(slim__pattern *p, int f, gelu_match *m)
{
    slim_node *add = slim__pattern_sole(p, f, "Add");
    int c;
    if (!add || !with_const(add, f, &c) || !exact(p->g, c, 1.0))
        return -1;
    m->nodes[m->n++] = add;
    return add->out[0];
}

/* The Erf's input is x / sqrt2: x, or -1. */
static int erf_input(slim__pattern *p, int t, gelu_match *m)
{
    const slim_graph *g = p->g;
    if (p->w.uses.readers[t] != 1 || g->values[t].is_output)
        return -1;
    slim_node *n = slim__pattern_producer(p, t, "Div");
    if (n && n->n_in == 2 && close_to(g, n->in[1], 1.4142135623730951)) {
        m->nodes[m->n++] = n;
        return n->in[0];
    }
    n = slim__pattern_producer(p, t, "Mul");
    if (!n || n->n_in != 2)
        return -1;
    for (int k = 0; k < 2; k++)
        if (close_to(g, n->in[1 - k], 0.7071067811865476)) {
            m->nodes[m->n++] = n;
            return n->in[k];
        }
    return -1;
}

/* c = x^3: true when c is Pow(x, 3) or x * x * x, each product read once. */
static bool cube_of(slim__pattern *p, int c, int x, gelu_match *m)
{
    const slim_graph *g = p->g;
    if (p->w.uses.readers[c] != 1 || g->values[c].is_output)
        return false;
    slim_node *n = slim__pattern_producer(p, c, "Pow");
    if (n) {
        double e; /* the exponent may be of any numeric type */
        if (n->n_in != 2 || n->in[0] != x || !slim__pattern_scalar(g, n->in[1], 0, &e) ||
            e != 3.0)
            return false;
        m->nodes[m->n++] = n;
        return true;
    }
    n = slim__pattern_producer(p, c, "Mul");
    int sq = n ? slim__pattern_other(n, x) : -1;
    if (sq < 0 || sq == x || p->w.uses.readers[sq] != 1 || g->values[sq].is_output)
        return false;
    slim_node *n2 = slim__pattern_producer(p, sq, "Mul");
    if (!n2 || n2->n_in != 2 || n2->in[0] != x || n2->in[1] != x)
        return false;
    m->nodes[m->n++] = n;
    m->nodes[m->n++] = n2;
    return true;
}

/* The Tanh's input is sqrt(2/pi) * (x + 0.044715 * x^3): x, or -1. */
static int tanh_input(slim__pattern *p, int t, gelu_match *m)
{
    const slim_graph *g = p->g;
    if (p->w.uses.readers[t] != 1 || g->values[t].is_output)
        return -1;
    slim_node *k = slim__pattern_producer(p, t, "Mul");
    if (!k || k->n_in != 2)
        return -1;
    int inner = close_to(g, k->in[1], 0.7978845608028654)   ? k->in[0]
                : close_to(g, k->in[0], 0.7978845608028654) ? k->in[1]
                                                            : -1;
    slim_node *add = inner >= 0 ? slim__pattern_producer(p, inner, "Add") : NULL;
    if (!add || add->n_in != 2 || p->w.uses.readers[inner] != 1 || g->values[inner].is_output)
        return -1;
    for (int side = 0; side < 2; side++) {
        int x = add->in[side], c = add->in[1 - side];
        slim_node *sc = slim__pattern_producer(p, c, "Mul");
        if (!sc || sc->n_in != 2 || x == c || p->w.uses.readers[c] != 1 || g->values[c].is_output)
            continue;
        int cube = close_to(g, sc->in[1], 0.044715)   ? sc->in[0]
                   : close_to(g, sc->in[0], 0.044715) ? sc->in[1]
                                                      : -1;
        int mark = m->n;
        if (cube >= 0 && cube_of(p, cube, x, m)) {
            m->nodes[m->n++] = k;
            m->nodes[m->n++] = add;
            m->nodes[m->n++] = sc;
            return x;
        }
        m->n = mark;
    }
    return -1;
}

static slim_status match(slim__pattern *p, slim_node *f, bool tanh_form, int *changed,
                         slim_err *err)
{
    if (f->n_in != 1 || f->n_out != 1 || f->in[0] < 0 || f->out[0] < 0)
        return SLIM_OK;
    gelu_match m = {.n = 0};
    m.nodes[m.n++] = f;
    int x = tanh_form ? tanh_input(p, f->in[0], &m) : erf_input(p, f->in[0], &m);
    if (x < 0)
        return SLIM_OK;
    int s = plus_one(p, f->out[0], &m);
    slim_node *last = s >= 0 ? product(p, x, s, &m) : NULL;
    if (!last)
        return SLIM_OK;
    for (int i = 0; i < m.n; i++)
        if (p->w.dead[m.nodes[i] - p->g->nodes] || m.nodes[i] == last)
            return SLIM_OK;
    slim_status st = slim__pattern_become(last, "Gelu", 20, 1, &x, err);
    if (!st && tanh_form)
        st = slim_pass_set_str(last, "approximate", "tanh", err);
    if (st)
        return st;
    for (int i = 0; i < m.n; i++)
        p->w.dead[m.nodes[i] - p->g->nodes] = true;
    (*changed)++;
    return SLIM_OK;
}

static slim_status fuse_gelu_run(slim_graph *g, int *changed, slim_err *err)
{
    slim__pattern p;
    slim_status st = slim__pattern_init(&p, g, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        if (p.w.dead[i])
            continue;
        if (slim__pattern_is(n, "Erf"))
            st = match(&p, n, false, changed, err);
        else if (slim__pattern_is(n, "Tanh"))
            st = match(&p, n, true, changed, err);
    }
    return slim__pattern_finish(&p, st);
}

const slim_pass slim__pass_fuse_gelu = {"fuse_gelu", fuse_gelu_run};
