/*
 * fuse_layernorm.c - LayerNorm written out in elementary ops becomes one
 * LayerNormalization node (kernels/cpu/norm.c).
 *
 * PyTorch exports nn.LayerNorm below opset 17 as
 *   m = ReduceMean(x, axes=[-1])      d = Sub(x, m)
 *   v = ReduceMean(Pow(d, 2), [-1])   n = Div(d, Sqrt(Add(v, eps)))
 *   y = Add(Mul(n, gamma), beta)
 * and hand-written models square with Mul(d, d), compute x - m twice (one
 * squared, one divided) and divide by multiplying with the reciprocal
 * square root: Reciprocal(Sqrt(.)), Div(1, Sqrt(.)) or Pow(., -0.5). Nine nodes and four passes over the activation become one
 * node that reads each row once, with the statistics in double.
 *
 * It matches only what is provably the same function: both reductions
 * over the last axis alone (axes [-1], keepdims), the Sub in that order,
 * epsilon a float constant, gamma and beta constant float32 vectors [D]
 * (beta optional), every intermediate read by the next op only and no
 * graph output. gamma is required: it gives LayerNormalization's Scale
 * its length. One case is left out of "the same": x whose last dim is 1
 * with gamma longer, which the written-out ops broadcast (to beta) and
 * LayerNormalization refuses with an error naming the Scale.
 */
#include "pass.h"

#include <math.h>
#include <string.h>

/* A ReduceMean over axes [-1] keeping dims (the axes an attribute before
 * opset 18, a constant input from 18). */
static bool mean_last_axis(const slim__pattern *p, const slim_node *n)
{
    if (n->n_out != 1 || n->n_in < 1 || slim_attr_int(n, "keepdims", 1) != 1)
        return false;
    int64_t axes[2];
    if (n->n_in >= 2 && n->in[1] >= 0) {
        const slim_value *a = &p->g->values[n->in[1]];
        return a->kind == SLIM_VALUE_INITIALIZER && a->init.dtype == SLIM_I64 && a->init.data &&
               !a->init.device && slim_tensor_numel(&a->init) == 1 && a->init.ndim <= 1 &&
               ((const int64_t *)a->init.data)[0] == -1;
    }
    return slim_attr_ints(n, "axes", axes, 2) == 1 && axes[0] == -1;
}

static bool scalar_is(const slim_graph *g, int v, double want)
{
    double c;
    return slim__pattern_scalar(g, v, 1, &c) && c == want;
}

/* The value n's constant float32 vector operand holds, when n reads it
 * beside x: [D] elements. */
static int vector_operand(const slim_graph *g, const slim_node *n, int x, int64_t *d)
{
    int c = slim__pattern_other(n, x);
    const slim_tensor *t = c >= 0 && c != x ? slim_pass_const_f32(g, c) : NULL;
    if (!t || t->ndim != 1 || t->dims[0] < 1 || (*d >= 0 && t->dims[0] != *d))
        return -1;
    *d = t->dims[0];
    return c;
}

/* From the Sqrt's input e = v + eps: the node computing d / sqrt(e) (or
 * d * rsqrt(e)), with its helpers marked in `used`; NULL when none does. */
static slim_node *normalize(slim__pattern *p, int e, int d, slim_node **used, int *n_used)
{
    slim_node *sq = slim__pattern_sole(p, e, "Sqrt");
    slim_node *r = NULL;
    if (sq) {
        used[(*n_used)++] = sq;
        int s = sq->out[0];
        slim_node *div = slim__pattern_sole(p, s, "Div");
        if (div && div->n_in != 2)
            div = NULL;
        if (div && div->in[0] == d && div->in[1] == s)
            return div;
        r = slim__pattern_sole(p, s, "Reciprocal");
        if (!r && div && div->in[1] == s && div->in[0] != s && slim_pass_const_f32(p->g, div->in[0]) &&
            scalar_is(p->g, div->in[0], 1.0))
            r = div;
    } else {
        slim_node *pw = slim__pattern_sole(p, e, "Pow");
        if (pw && pw->n_in == 2 && pw->in[0] == e && scalar_is(p->g, pw->in[1], -0.5))
            r = pw;
    }
    if (!r)
        return NULL;
    used[(*n_used)++] = r;
    slim_node *mul = slim__pattern_sole(p, r->out[0], "Mul");
    return mul && slim__pattern_other(mul, r->out[0]) == d ? mul : NULL;
}

/* Matches the pattern from its first ReduceMean and rewrites it. */
static slim_status match(slim__pattern *p, slim_node *rm1, int *changed, slim_err *err)
{
    slim_graph *g = p->g;
    if (!mean_last_axis(p, rm1) || rm1->in[0] < 0 || rm1->out[0] < 0)
        return SLIM_OK;
    int x = rm1->in[0], m = rm1->out[0];
    slim_node *used[16];
    int n_used = 0;
    used[n_used++] = rm1;
    /* x - m once, or twice as older BERT code writes it ((x - u).pow(2)
     * and (x - u) / ...): each a Sub(x, m), nothing else reading m. */
    slim_node *subs[2];
    int n_subs = 0;
    if (g->values[m].is_output)
        return SLIM_OK;
    for (int r = p->start[m]; r < p->start[m + 1]; r++) {
        slim_node *n = &g->nodes[p->readers[r]];
        if (n_subs == 2 || p->w.dead[n - g->nodes] || !slim__pattern_is(n, "Sub") ||
            n->n_in != 2 || n->in[0] != x || n->in[1] != m || n->n_out != 1 || n->out[0] < 0 ||
            g->values[n->out[0]].is_output)
            return SLIM_OK;
        subs[n_subs++] = n;
        used[n_used++] = n;
    }
    if (!n_subs)
        return SLIM_OK;
    /* One difference is squared (once by Pow, twice by Mul(d, d)) and the
     * other (or the same) divided; nothing else reads them. */
    slim_node *sqr = NULL;
    int sq_d = -1;
    for (int i = 0; i < n_subs && !sqr; i++) {
        int dv = subs[i]->out[0];
        for (int r = p->start[dv]; r < p->start[dv + 1]; r++) {
            slim_node *n = &g->nodes[p->readers[r]];
            if ((slim__pattern_is(n, "Pow") && n->n_in == 2 && n->in[0] == dv &&
                 scalar_is(g, n->in[1], 2.0)) ||
                (slim__pattern_is(n, "Mul") && n->n_in == 2 && n->in[0] == dv && n->in[1] == dv))
                sqr = n, sq_d = dv;
        }
    }
    if (!sqr || p->w.dead[sqr - g->nodes] || sqr->n_out != 1 || sqr->out[0] < 0)
        return SLIM_OK;
    int sq_slots = sqr->in[1] == sq_d ? 2 : 1;
    int d = n_subs == 1 ? sq_d : subs[0]->out[0] == sq_d ? subs[1]->out[0] : subs[0]->out[0];
    if (n_subs == 1 ? p->w.uses.readers[d] != sq_slots + 1
                    : p->w.uses.readers[sq_d] != sq_slots || p->w.uses.readers[d] != 1)
        return SLIM_OK;
    used[n_used++] = sqr;
    slim_node *rm2 = slim__pattern_sole(p, sqr->out[0], "ReduceMean");
    if (!rm2 || !mean_last_axis(p, rm2) || rm2->in[0] != sqr->out[0])
        return SLIM_OK;
    used[n_used++] = rm2;
    slim_node *add = slim__pattern_sole(p, rm2->out[0], "Add");
    int eps_v = add ? slim__pattern_other(add, rm2->out[0]) : -1;
    double eps;
    if (!add || !slim__pattern_scalar(g, eps_v, 1, &eps) || eps_v == rm2->out[0] ||
        g->values[eps_v].init.dtype != SLIM_F32 || !isfinite(eps) || eps < 0)
        return SLIM_OK;
    used[n_used++] = add;
    slim_node *norm = normalize(p, add->out[0], d, used, &n_used);
    if (!norm)
        return SLIM_OK;
    used[n_used++] = norm;
    int64_t dim = -1;
    slim_node *scale = slim__pattern_sole(p, norm->out[0], "Mul");
    int gamma = scale ? vector_operand(g, scale, norm->out[0], &dim) : -1;
    if (gamma < 0)
        return SLIM_OK;
    slim_node *last = scale, *shift = slim__pattern_sole(p, scale->out[0], "Add");
    int beta = shift ? vector_operand(g, shift, scale->out[0], &dim) : -1;
    if (beta >= 0) {
        used[n_used++] = scale;
        last = shift;
    }
    int in[3] = {x, gamma, beta};
    slim_status st = slim__pattern_become(last, "LayerNormalization",
                                          last->opset > 17 ? last->opset : 17, beta >= 0 ? 3 : 2,
                                          in, err);
    if (!st)
        st = slim_pass_set_int(last, "axis", -1, err);
    if (!st)
        st = slim_pass_set_float(last, "epsilon", (float)eps, err);
    if (st)
        return st;
    for (int i = 0; i < n_used; i++)
        p->w.dead[used[i] - g->nodes] = true;
    (*changed)++;
    return SLIM_OK;
}

static slim_status fuse_layernorm_run(slim_graph *g, int *changed, slim_err *err)
{
    slim__pattern p;
    slim_status st = slim__pattern_init(&p, g, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_nodes && !st; i++)
        if (!p.w.dead[i] && slim__pattern_is(&g->nodes[i], "ReduceMean"))
            st = match(&p, &g->nodes[i], changed, err);
    return slim__pattern_finish(&p, st);
}

const slim_pass slim__pass_fuse_layernorm = {"fuse_layernorm", fuse_layernorm_run};
