/*
 * fuse_attention.c - an exported multi-head attention block becomes one
 * com.slimserve FusedAttention node (kernels/cpu/attention.c) reading the
 * 3D projections [B, S, H*d] and writing the block's output directly: no
 * transposes, no [B, H, S, T] score tensors, the scale folded into the
 * product and the mask added row by row.
 *
 * The block, as PyTorch and bench/gen_encoder.py export BERT:
 *
 *   q = Transpose(Reshape(Q, [a, b, H, d]), perm 0,2,1,3)
 *   k = Transpose(Reshape(K, [a, b, H, d]), perm 0,2,3,1)
 *       or Transpose(Transpose(..., perm 0,2,1,3), perm 0,1,3,2)
 *   v = Transpose(Reshape(V, [a, b, H, dv]), perm 0,2,1,3)
 *   p = Softmax(Add(Mul(MatMul(q, k), c), mask), axis -1)
 *   out = Reshape(Transpose(MatMul(p, v), perm 0,2,1,3), shape)
 *
 * with Div by c instead of Mul, scalar scales on q or k at any step (and
 * on Q, K before their Reshape), several or none, the mask Add in either
 * operand order or absent, Softmax of any opset whose axis means the last
 * one. Reshape targets must be constants; their 0 and -1 entries are kept
 * and applied by the kernel with Reshape's rules, so shapes the block
 * refused are refused still. Every value inside the block must have the
 * block as its only reader (and be no graph output); Q, K, V and the mask
 * may be read elsewhere, and may come from any node (MatMul, Add, the int8
 * and half passes' operators).
 *
 * The mask must broadcast as the Add did. Its rank is proved at load (at
 * most 4, followed through Unsqueeze, Cast and elementwise ops to a graph
 * input or a constant); a dim known here that cannot fit the scores
 * leaves the block alone. The dims known only at run time are checked by
 * the kernel, which refuses a mask that would broadcast the scores to a
 * larger shape (the block's output would have grown with it) instead of
 * computing something else.
 */
#include "pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCK 48 /* nodes in one block, scale steps included */

typedef struct {
    int n_dead;
    int dead[MAX_BLOCK];
    double scale;
} fa_match;

typedef struct {
    int x;          /* the 3D input, before the Reshape */
    int64_t r[4];   /* the Reshape's target */
} fa_heads;

static bool is_op(const slim_node *n, const char *op)
{
    return n && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

static bool take(fa_match *m, const slim_graph *g, const slim_node *n)
{
    if (m->n_dead >= MAX_BLOCK)
        return false;
    m->dead[m->n_dead++] = (int)(n - g->nodes);
    return true;
}

/* The node producing v, when it is op, v is its only output, exactly one
 * slot reads v and v is no graph output. */
static slim_node *sole_producer(slim_graph *g, const slim_pass_uses *u, const bool *dead, int v,
                                const char *op)
{
    if (v < 0 || v >= u->n_values || u->readers[v] != 1 || g->values[v].is_output)
        return NULL;
    int p = u->producer[v];
    if (p < 0 || dead[p])
        return NULL;
    slim_node *n = &g->nodes[p];
    return is_op(n, op) && n->n_out == 1 && n->out[0] == v ? n : NULL;
}

/* A finite float32 constant with one element and at most max_rank dims
 * (so that multiplying by it keeps the other operand's shape). */
static bool scalar(const slim_graph *g, int v, int max_rank, double *c)
{
    const slim_tensor *t = slim_pass_const_f32(g, v);
    if (!t || slim_tensor_numel(t) != 1 || t->ndim > max_rank)
        return false;
    *c = *(const float *)t->data;
    return isfinite(*c);
}

/* Steps back from *v over Mul / Div by scalar constants, folding them
 * into m->scale. */
static bool peel_scales(slim_graph *g, const slim_pass_uses *u, const bool *dead, int *v,
                        int max_rank, fa_match *m)
{
    for (;;) {
        slim_node *n = sole_producer(g, u, dead, *v, "Mul");
        double c;
        int x = -1;
        if (n && n->n_in == 2) {
            if (scalar(g, n->in[1], max_rank, &c))
                x = n->in[0];
            else if (scalar(g, n->in[0], max_rank, &c))
                x = n->in[1];
        } else if ((n = sole_producer(g, u, dead, *v, "Div")) && n->n_in == 2 &&
                   scalar(g, n->in[1], max_rank, &c) && c != 0) {
            x = n->in[0];
            c = 1.0 / c;
        }
        if (x < 0)
            return true;
        if (!take(m, g, n))
            return false;
        m->scale *= c;
        *v = x;
    }
}

static bool perm_is(const slim_node *n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t p[5];
    return is_op(n, "Transpose") && n->n_in == 1 && slim_attr_ints(n, "perm", p, 5) == 4 &&
           p[0] == a && p[1] == b && p[2] == c && p[3] == d;
}

/* The constant int64 target of a Reshape (allowzero off): count entries,
 * at most cap. */
static bool reshape_target(const slim_graph *g, const slim_node *n, int64_t *r, int cap,
                           int *count)
{
    if (!is_op(n, "Reshape") || n->n_in != 2 || slim_attr_int(n, "allowzero", 0) != 0)
        return false;
    int v = n->in[1];
    if (v < 0 || g->values[v].kind != SLIM_VALUE_INITIALIZER)
        return false;
    const slim_tensor *t = &g->values[v].init;
    if (t->dtype != SLIM_I64 || t->device || !t->data || t->ndim != 1 || t->dims[0] < 1 ||
        t->dims[0] > cap)
        return false;
    int minus = 0;
    for (int i = 0; i < t->dims[0]; i++) {
        r[i] = ((const int64_t *)t->data)[i];
        if (r[i] < -1)
            return false;
        minus += r[i] == -1;
    }
    *count = (int)t->dims[0];
    return minus <= 1;
}

/* From the 4D head tensor v (after the Reshape) back to the 3D input. */
static bool match_split(slim_graph *g, const slim_pass_uses *u, const bool *dead, int v,
                        fa_heads *h, fa_match *m)
{
    int count;
    if (!peel_scales(g, u, dead, &v, 4, m))
        return false;
    slim_node *rs = sole_producer(g, u, dead, v, "Reshape");
    /* Head counts and sizes the kernel takes (FusedAttention's prepare);
     * a block with others stays as it is. */
    const int64_t cap = (int64_t)1 << 24;
    if (!rs || !reshape_target(g, rs, h->r, 4, &count) || count != 4 || h->r[2] < 1 ||
        h->r[3] < 1 || h->r[2] > cap || h->r[3] > cap || !take(m, g, rs))
        return false;
    h->x = rs->in[0];
    /* A scale on the 3D input: only rank 0 or 1 constants, which cannot
     * raise its rank. */
    return peel_scales(g, u, dead, &h->x, 1, m);
}

/* q (perm 0,2,1,3 of the heads) or v. */
static bool match_heads(slim_graph *g, const slim_pass_uses *u, const bool *dead, int v,
                        bool scaled, fa_heads *h, fa_match *m)
{
    if (scaled && !peel_scales(g, u, dead, &v, 4, m))
        return false;
    slim_node *t = sole_producer(g, u, dead, v, "Transpose");
    return t && perm_is(t, 0, 2, 1, 3) && take(m, g, t) && match_split(g, u, dead, t->in[0], h, m);
}

/* k as [B, H, d, T]: one Transpose (0,2,3,1) of the heads, or (0,1,3,2) of
 * the (0,2,1,3) one. */
static bool match_keys(slim_graph *g, const slim_pass_uses *u, const bool *dead, int v,
                       fa_heads *h, fa_match *m)
{
    if (!peel_scales(g, u, dead, &v, 4, m))
        return false;
    slim_node *t = sole_producer(g, u, dead, v, "Transpose");
    if (!t || !take(m, g, t))
        return false;
    if (perm_is(t, 0, 2, 3, 1))
        return match_split(g, u, dead, t->in[0], h, m);
    return perm_is(t, 0, 1, 3, 2) && match_heads(g, u, dead, t->in[0], true, h, m);
}

/* The static shape of a mask value: rank and dims (-1 where known only at
 * run time), through the ops a mask is built with. *budget caps the values
 * visited: a graph of Adds reading one value twice, nested, would
 * otherwise take exponential time. */
static bool mask_shape(const slim_graph *g, const slim_pass_uses *u, int v, int *budget,
                       int *rank, int64_t *dims)
{
    if (v < 0 || --*budget < 0)
        return false;
    const slim_value *val = &g->values[v];
    if (val->kind == SLIM_VALUE_INITIALIZER || val->kind == SLIM_VALUE_INPUT) {
        /* A graph input's declared rank and fixed dims are checked when
         * a request arrives (executor.c). */
        const int nd = val->kind == SLIM_VALUE_INPUT ? val->info.ndim : val->init.ndim;
        if (nd < 0 || nd > SLIM_MAX_DIMS)
            return false;
        *rank = nd;
        for (int i = 0; i < nd; i++) {
            int64_t d = val->kind == SLIM_VALUE_INPUT ? val->info.dims[i] : val->init.dims[i];
            dims[i] = d >= 0 ? d : -1;
        }
        return true;
    }
    int p = u->producer[v];
    if (p < 0)
        return false;
    const slim_node *n = &g->nodes[p];
    if (n->domain[0] || n->n_out != 1 || n->n_in < 1)
        return false;
    if (is_op(n, "Cast") || is_op(n, "Identity") || is_op(n, "Neg") || is_op(n, "Not"))
        return mask_shape(g, u, n->in[0], budget, rank, dims);
    if (is_op(n, "Unsqueeze")) {
        int64_t axes[SLIM_MAX_DIMS];
        int na = -1;
        if (n->n_in >= 2 && n->in[1] >= 0) {
            const slim_value *av = &g->values[n->in[1]];
            const slim_tensor *t = &av->init;
            if (av->kind != SLIM_VALUE_INITIALIZER || t->dtype != SLIM_I64 || !t->data ||
                t->device || t->ndim != 1 || t->dims[0] > SLIM_MAX_DIMS)
                return false;
            na = (int)t->dims[0];
            memcpy(axes, t->data, sizeof(int64_t) * (size_t)na);
        } else {
            na = slim_attr_ints(n, "axes", axes, SLIM_MAX_DIMS);
        }
        int r;
        int64_t in[SLIM_MAX_DIMS];
        if (na < 1 || !mask_shape(g, u, n->in[0], budget, &r, in) || r + na > SLIM_MAX_DIMS)
            return false;
        bool ones[SLIM_MAX_DIMS] = {false};
        for (int i = 0; i < na; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + r + na : axes[i];
            if (a < 0 || a >= r + na || ones[a])
                return false;
            ones[a] = true;
        }
        *rank = r + na;
        for (int i = 0, k = 0; i < r + na; i++)
            dims[i] = ones[i] ? 1 : in[k++];
        return true;
    }
    if ((is_op(n, "Add") || is_op(n, "Sub") || is_op(n, "Mul") || is_op(n, "Div")) &&
        n->n_in == 2) {
        int ra, rb;
        int64_t a[SLIM_MAX_DIMS], b[SLIM_MAX_DIMS];
        if (!mask_shape(g, u, n->in[0], budget, &ra, a) ||
            !mask_shape(g, u, n->in[1], budget, &rb, b))
            return false;
        *rank = ra > rb ? ra : rb;
        for (int i = 0; i < *rank; i++) {
            int ia = i - (*rank - ra), ib = i - (*rank - rb);
            int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
            if (x == 1 || x == y)
                dims[i] = y;
            else if (y == 1)
                dims[i] = x;
            else if (x < 0 || y < 0)
                dims[i] = x < 0 ? y : x; /* the known one, if it broadcasts at all */
            else
                return false;
        }
        return true;
    }
    return false;
}

/* The mask can only be added as the Add did: rank <= 4, and a head dim
 * known here of 1 or H. */
static bool mask_fits(const slim_graph *g, const slim_pass_uses *u, int mask, int64_t heads)
{
    int rank, budget = 64;
    int64_t dims[SLIM_MAX_DIMS];
    if (!mask_shape(g, u, mask, &budget, &rank, dims) || rank > 4)
        return false;
    int h = rank - 3; /* the head axis, when the mask reaches it */
    return h < 0 || dims[h] < 0 || dims[h] == 1 || dims[h] == heads;
}

/* Whether Softmax sm normalizes the last axis of its 4D input. */
static bool softmax_last(const slim_node *sm)
{
    const slim_attr *a = slim_node_attr(sm, "axis");
    if (sm->opset < 13) /* coerced to 2D at axis: the last one only when it is 3 */
        return a && (a->i == -1 || a->i == 3);
    int64_t axis = a ? a->i : -1;
    return axis == -1 || axis == 3;
}

static slim_status rewrite(slim_graph *g, slim_node *rs, const fa_heads *q, const fa_heads *k,
                           const fa_heads *v, int mask, const int64_t *out, int n_out,
                           float scale, slim_err *err)
{
    int *in = malloc(sizeof(int) * 4);
    char *ot = strdup("FusedAttention"), *dom = strdup("com.slimserve");
    if (!in || !ot || !dom) {
        free(in);
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    in[0] = q->x;
    in[1] = k->x;
    in[2] = v->x;
    in[3] = mask;
    free(rs->in);
    free(rs->op_type);
    free(rs->domain);
    for (int a = 0; a < rs->n_attrs; a++)
        slim_attr_clear(&rs->attrs[a]);
    free(rs->attrs);
    rs->attrs = NULL;
    rs->n_attrs = 0;
    rs->in = in;
    rs->n_in = mask >= 0 ? 4 : 3;
    rs->op_type = ot;
    rs->domain = dom;
    rs->opset = 1;
    slim_status st;
    if ((st = slim_pass_set_int(rs, "num_heads", q->r[2], err)) ||
        (st = slim_pass_set_int(rs, "head_size", q->r[3], err)) ||
        (st = slim_pass_set_int(rs, "v_head_size", v->r[3], err)) ||
        (st = slim_pass_set_float(rs, "scale", scale, err)) ||
        (st = slim_pass_set_ints(rs, "q_shape", q->r, 2, err)) ||
        (st = slim_pass_set_ints(rs, "k_shape", k->r, 2, err)) ||
        (st = slim_pass_set_ints(rs, "v_shape", v->r, 2, err)) ||
        (st = slim_pass_set_ints(rs, "out_shape", out, n_out, err)))
        return st;
    return SLIM_OK;
}

/* Tries the block around Softmax sm; rewrites it and marks its nodes dead
 * when it matches. */
static slim_status try_block(slim_graph *g, slim_pass_walk *w, slim_node *sm, bool *fused,
                             slim_err *err)
{
    const slim_pass_uses *u = &w->uses;
    const bool *dead = w->dead;
    fa_match m = {.scale = 1.0};
    *fused = false;
    if (sm->n_in != 1 || sm->n_out != 1 || !softmax_last(sm) || !take(&m, g, sm))
        return SLIM_OK;
    /* Scores: [scales] MatMul, plus the mask when there is one. */
    int s = sm->in[0], mask = -1;
    slim_node *add = sole_producer(g, u, dead, s, "Add"), *qk = NULL;
    if (add && add->n_in == 2) {
        for (int side = 0; side < 2 && !qk; side++) {
            fa_match t = m;
            int x = add->in[side];
            if (peel_scales(g, u, dead, &x, 4, &t) && (qk = sole_producer(g, u, dead, x, "MatMul"))) {
                m = t;
                mask = add->in[1 - side];
            }
        }
        if (!qk || !take(&m, g, add))
            return SLIM_OK;
    } else {
        if (!peel_scales(g, u, dead, &s, 4, &m) || !(qk = sole_producer(g, u, dead, s, "MatMul")))
            return SLIM_OK;
    }
    fa_heads q, k, v;
    if (qk->n_in != 2 || !take(&m, g, qk) || !match_heads(g, u, dead, qk->in[0], true, &q, &m) ||
        !match_keys(g, u, dead, qk->in[1], &k, &m))
        return SLIM_OK;
    /* The context: MatMul(p, v), Transpose back, Reshape to the output. */
    slim_node *pv = slim_pass_sole_reader(g, u, sm->out[0], "MatMul");
    if (!pv || dead[pv - g->nodes] || pv->n_in != 2 || pv->n_out != 1 || pv->in[0] != sm->out[0] ||
        !take(&m, g, pv) || !match_heads(g, u, dead, pv->in[1], false, &v, &m))
        return SLIM_OK;
    slim_node *tr = slim_pass_sole_reader(g, u, pv->out[0], "Transpose");
    if (!tr || dead[tr - g->nodes] || tr->n_out != 1 || !perm_is(tr, 0, 2, 1, 3) ||
        !take(&m, g, tr))
        return SLIM_OK;
    slim_node *rs = slim_pass_sole_reader(g, u, tr->out[0], "Reshape");
    int64_t out[SLIM_MAX_DIMS];
    int n_out;
    if (!rs || dead[rs - g->nodes] || rs->n_out != 1 ||
        !reshape_target(g, rs, out, SLIM_MAX_DIMS, &n_out))
        return SLIM_OK;
    /* One head count and one key size for all three; the block's MatMuls
     * would broadcast or refuse anything else. */
    if (q.r[2] != k.r[2] || v.r[2] != k.r[2] || q.r[3] != k.r[3] || !isfinite(m.scale) ||
        fabs(m.scale) > 3.0e38)
        return SLIM_OK;
    if (mask >= 0 && !mask_fits(g, u, mask, q.r[2]))
        return SLIM_OK;
    /* Matched: rs becomes the fused node, the rest of the block goes. */
    for (int i = 0; i < m.n_dead; i++)
        if (w->dead[m.dead[i]])
            return SLIM_OK; /* shared with an earlier block: cannot happen, but cheap to refuse */
    slim_status st = rewrite(g, rs, &q, &k, &v, mask, out, n_out, (float)m.scale, err);
    if (st)
        return st;
    for (int i = 0; i < m.n_dead; i++)
        w->dead[m.dead[i]] = true;
    *fused = true;
    return SLIM_OK;
}

static slim_status fuse_attention_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        bool fused = false;
        if (w.dead[i] || !is_op(n, "Softmax"))
            continue;
        st = try_block(g, &w, n, &fused, err);
        *changed += fused;
    }
    return slim_pass_walk_finish(&w, g, st);
}

/* FusedAttention's CUDA kernel takes half operands: for a model on a GPU
 * the pass runs only when the graph goes half after it, on request
 * (slim_passes_run_gpu). */
const slim_pass slim__pass_fuse_attention = {"fuse_attention", fuse_attention_run};
