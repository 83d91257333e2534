/*
 * simplify_shapes.c - movement that moves nothing is taken out.
 *
 *   Identity(x)                          -> x
 *   Transpose(Transpose(x, p), q)        -> x when p[q[i]] == i, else one
 *                                           Transpose(x, p[q[i]])
 *   Reshape(R(x), s), R a Reshape, Flatten, Squeeze or Unsqueeze
 *                                        -> Reshape(x, s) when s is a
 *                                           constant without 0 (0 copies a
 *                                           dim of R's output) or allowzero
 *   Squeeze(Unsqueeze(x, a), a), Unsqueeze(Squeeze(x, a), a) -> x
 *   Cast(x, to) where x already has type `to` -> x
 *
 * Exporters and other rewrites leave these behind; each costs a node and,
 * for Transpose and Cast, a copy of the tensor. A removed node's readers
 * read its source instead. When its output is a graph output, the name
 * stays: the node producing the source produces the output under its name
 * instead (when the source is itself an input, weight or output, the node
 * stays). Nodes only the removed ones read are removed too. A value a
 * subgraph reads from the outer scope is left as it is.
 *
 * The rewrites drop checks the removed nodes made: a Squeeze of a dim that
 * is not 1 no longer fails once its Unsqueeze cancels it. A graph that
 * loads and runs without the pass computes the same with it.
 *
 * A type is known without shape inference only where it is certain: a
 * weight's, a graph input's declared type (requests must match it), a
 * Cast's `to`, int64 from Shape / Size / ArgMax / NonZero, and through
 * ops whose output has their input's type.
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

#define SIMPLIFY_ROUNDS 8

static bool is_op(const slim_node *n, const char *op)
{
    return n && (!n->domain[0] || strcmp(n->domain, "ai.onnx") == 0) &&
           strcmp(n->op_type, op) == 0;
}

static const slim_node *producer(const slim_graph *g, const slim_pass_uses *u, int v)
{
    return v >= 0 && v < u->n_values && u->producer[v] >= 0 ? &g->nodes[u->producer[v]] : NULL;
}

/* ---- types --------------------------------------------------------------- */

static slim_dtype known_type(const slim_graph *g, const slim_pass_uses *u, int v, int depth)
{
    static const char *const same_as_first[] = {
        "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile",
        "Slice", "Gather", "GatherElements", "Concat", "Neg", "Abs", "Relu", "Sqrt", "Erf",
        "Tanh", "Sigmoid", "Softmax", "Gelu", "Floor", "Ceil", NULL,
    };
    if (v < 0 || v >= g->n_values || depth > 32)
        return SLIM_DTYPE_UNDEFINED;
    const slim_value *val = &g->values[v];
    if (val->kind == SLIM_VALUE_INITIALIZER)
        return val->init.dtype;
    if (val->kind == SLIM_VALUE_INPUT)
        return val->info.kind == SLIM_KIND_TENSOR ? val->info.dtype : SLIM_DTYPE_UNDEFINED;
    const slim_node *p = producer(g, u, v);
    if (!p || (p->domain[0] && strcmp(p->domain, "ai.onnx") != 0) || p->n_out < 1 ||
        p->out[0] != v)
        return SLIM_DTYPE_UNDEFINED;
    if (is_op(p, "Cast")) {
        const slim_attr *to = slim_node_attr(p, "to");
        return to && to->type == SLIM_ATTR_INT && to->i > 0 && to->i < 64
                   ? slim_dtype_from_onnx((int)to->i)
                   : SLIM_DTYPE_UNDEFINED;
    }
    if (is_op(p, "Shape") || is_op(p, "Size") || is_op(p, "ArgMax") || is_op(p, "ArgMin") ||
        is_op(p, "NonZero"))
        return SLIM_I64;
    for (int i = 0; same_as_first[i]; i++)
        if (is_op(p, same_as_first[i]) && p->n_in >= 1)
            return known_type(g, u, p->in[0], depth + 1);
    return SLIM_DTYPE_UNDEFINED;
}

/* ---- attribute and constant helpers -------------------------------------- */

/* The node's axes (attribute before opset 13, a constant input from 13),
 * sorted; -1 when absent, not constant or repeated. */
static int axes_of(const slim_graph *g, const slim_node *n, int64_t *axes)
{
    int count = -1;
    if (n->n_in >= 2 && n->in[1] >= 0) {
        const slim_value *val = &g->values[n->in[1]];
        if (val->kind != SLIM_VALUE_INITIALIZER || val->init.dtype != SLIM_I64 ||
            val->init.ndim != 1 || val->init.dims[0] > SLIM_MAX_DIMS || !val->init.data)
            return -1;
        count = (int)val->init.dims[0];
        memcpy(axes, val->init.data, sizeof(int64_t) * (size_t)count);
    } else {
        count = slim_attr_ints(n, "axes", axes, SLIM_MAX_DIMS);
        if (count > SLIM_MAX_DIMS)
            return -1;
    }
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0 && axes[j - 1] > axes[j]; j--) {
            int64_t t = axes[j];
            axes[j] = axes[j - 1];
            axes[j - 1] = t;
        }
    for (int i = 1; i < count; i++)
        if (axes[i] == axes[i - 1])
            return -1;
    return count;
}

/* A Transpose's perm: its count (0 when absent: reverse), -1 when not a
 * permutation. */
static int perm_of(const slim_node *n, int64_t *perm)
{
    int count = slim_attr_ints(n, "perm", perm, SLIM_MAX_DIMS);
    if (count < 0)
        return 0;
    if (count == 0 || count > SLIM_MAX_DIMS)
        return -1;
    bool seen[SLIM_MAX_DIMS] = {false};
    for (int i = 0; i < count; i++) {
        if (perm[i] < 0 || perm[i] >= count || seen[perm[i]])
            return -1;
        seen[perm[i]] = true;
    }
    return count;
}

/* ---- one round ----------------------------------------------------------- */

typedef struct simplify {
    slim_graph *g;
    slim_pass_walk w;
    int *repl;      /* per value: the value it equals, or -1 */
    bool *pinned;   /* per value: read by a subgraph (an implicit input) */
    int changes;
} simplify;

static int resolve(const simplify *s, int v)
{
    for (int steps = 0; v >= 0 && s->repl[v] >= 0 && steps <= s->g->n_values; steps++)
        v = s->repl[v];
    return v;
}

/* Node n (one output y) computes its input x unchanged. */
static void equals(simplify *s, const slim_node *n, int x)
{
    int y = n->out[0];
    if (x < 0 || y < 0 || x == y || s->pinned[y] || s->pinned[x] || s->repl[y] >= 0)
        return;
    s->repl[y] = x;
}

/* Transpose(Transpose(x, p), q). */
static slim_status transposes(simplify *s, slim_node *t2, slim_err *err)
{
    const slim_pass_uses *u = &s->w.uses;
    const slim_node *t1 = producer(s->g, u, t2->in[0]);
    if (!is_op(t1, "Transpose") || t1->n_in < 1 || t1->n_out != 1 || t1->in[0] < 0)
        return SLIM_OK;
    int64_t p[SLIM_MAX_DIMS], q[SLIM_MAX_DIMS], r[SLIM_MAX_DIMS];
    int np = perm_of(t1, p), nq = perm_of(t2, q);
    if (np < 0 || nq < 0 || (np && nq && np != nq))
        return SLIM_OK;
    if (!np && !nq) { /* reverse twice */
        equals(s, t2, t1->in[0]);
        return SLIM_OK;
    }
    int rank = np ? np : nq;
    for (int i = 0; i < rank; i++) {
        if (!np)
            p[i] = rank - 1 - i;
        if (!nq)
            q[i] = rank - 1 - i;
    }
    bool identity = true;
    for (int i = 0; i < rank; i++) {
        r[i] = p[q[i]];
        identity = identity && r[i] == i;
    }
    if (identity) {
        equals(s, t2, t1->in[0]);
        return SLIM_OK;
    }
    /* One transpose instead of two, when the first has no other reader. */
    if (u->readers[t2->in[0]] != 1 || s->g->values[t2->in[0]].is_output ||
        s->pinned[t2->in[0]])
        return SLIM_OK;
    slim_status st = slim_pass_set_ints(t2, "perm", r, rank, err);
    if (!st) {
        t2->in[0] = t1->in[0];
        s->changes++;
    }
    return st;
}

/* Reshape(R(x), shape): R only relabels dims, so the second Reshape can
 * read x when its shape does not refer to R's dims. */
static void reshapes(simplify *s, slim_node *r2)
{
    const slim_pass_uses *u = &s->w.uses;
    const slim_node *r1 = producer(s->g, u, r2->in[0]);
    if (!r1 || r1->n_in < 1 || r1->n_out != 1 || r1->in[0] < 0 || r2->n_in < 2 ||
        !(is_op(r1, "Reshape") || is_op(r1, "Flatten") || is_op(r1, "Squeeze") ||
          is_op(r1, "Unsqueeze")))
        return;
    const slim_value *shape = r2->in[1] >= 0 ? &s->g->values[r2->in[1]] : NULL;
    if (!shape || shape->kind != SLIM_VALUE_INITIALIZER || shape->init.dtype != SLIM_I64 ||
        shape->init.ndim != 1 || !shape->init.data)
        return;
    if (!slim_attr_int(r2, "allowzero", 0))
        for (int64_t i = 0; i < shape->init.dims[0]; i++)
            if (((const int64_t *)shape->init.data)[i] == 0)
                return;
    if (s->pinned[r2->in[0]])
        return;
    r2->in[0] = r1->in[0];
    s->changes++;
}

/* Squeeze(Unsqueeze(x, a), a) and Unsqueeze(Squeeze(x, a), a). */
static void squeezes(simplify *s, const slim_node *outer, const char *inner_op)
{
    const slim_node *inner = producer(s->g, &s->w.uses, outer->in[0]);
    if (!is_op(inner, inner_op) || inner->n_in < 1 || inner->n_out != 1 || inner->in[0] < 0)
        return;
    int64_t a[SLIM_MAX_DIMS], b[SLIM_MAX_DIMS];
    int na = axes_of(s->g, inner, a), nb = axes_of(s->g, outer, b);
    /* No axes on a Squeeze means every dim of 1, which x may have too. */
    if (na <= 0 || na != nb || memcmp(a, b, sizeof(int64_t) * (size_t)na) != 0)
        return;
    equals(s, outer, inner->in[0]);
}

static slim_status find(simplify *s, slim_err *err)
{
    slim_graph *g = s->g;
    slim_status st = SLIM_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        if (n->n_in < 1 || n->n_out != 1 || n->in[0] < 0 || n->out[0] < 0 || n->n_implicit)
            continue;
        if (is_op(n, "Identity"))
            equals(s, n, n->in[0]);
        else if (is_op(n, "Transpose"))
            st = transposes(s, n, err);
        else if (is_op(n, "Reshape"))
            reshapes(s, n);
        else if (is_op(n, "Squeeze"))
            squeezes(s, n, "Unsqueeze");
        else if (is_op(n, "Unsqueeze"))
            squeezes(s, n, "Squeeze");
        else if (is_op(n, "Cast") && n->n_in == 1) {
            const slim_attr *to = slim_node_attr(n, "to");
            slim_dtype t = known_type(g, &s->w.uses, n->in[0], 0);
            if (to && to->type == SLIM_ATTR_INT && t != SLIM_DTYPE_UNDEFINED && to->i > 0 &&
                to->i < 64 && slim_dtype_from_onnx((int)to->i) == t)
                equals(s, n, n->in[0]);
        }
    }
    return st;
}

/* A graph output y that equals a value r keeps its name: r's producer
 * makes y instead, and r's readers read y. Where r has no producer that
 * may do so, y's node stays. */
static void keep_output_names(simplify *s)
{
    slim_graph *g = s->g;
    const slim_pass_uses *u = &s->w.uses;
    for (int k = 0; k < g->n_outputs; k++) {
        int y = g->outputs[k];
        if (s->repl[y] < 0)
            continue;
        int r = resolve(s, s->repl[y]);
        s->repl[y] = -1;
        slim_node *p = r >= 0 && u->producer[r] >= 0 ? &g->nodes[u->producer[r]] : NULL;
        int by = u->producer[y];
        if (!p || s->w.dead[p - g->nodes] || g->values[r].kind != SLIM_VALUE_INTERMEDIATE ||
            g->values[r].is_output || s->pinned[r] || by < 0 || r == y)
            continue;
        for (int j = 0; j < p->n_out; j++)
            if (p->out[j] == r)
                p->out[j] = y;
        s->repl[r] = y;
        s->w.dead[by] = true;
    }
}

static bool movement(const slim_node *n)
{
    return is_op(n, "Identity") || is_op(n, "Transpose") || is_op(n, "Reshape") ||
           is_op(n, "Flatten") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze") ||
           is_op(n, "Cast");
}

/* Rewires every read through repl, marks the removed nodes dead, then the
 * movement nodes nothing reads any more. */
static void apply(simplify *s)
{
    slim_graph *g = s->g;
    bool *dead = s->w.dead;
    int *readers = s->w.uses.readers; /* recounted here for what remains */
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (n->n_out == 1 && n->out[0] >= 0 && s->repl[n->out[0]] >= 0)
            dead[i] = true;
    }
    memset(readers, 0, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (dead[i]) {
            s->changes++;
            continue;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) {
                n->in[k] = resolve(s, n->in[k]);
                readers[n->in[k]]++;
            }
    }
    bool again = true;
    while (again) {
        again = false;
        for (int i = 0; i < g->n_nodes; i++) {
            slim_node *n = &g->nodes[i];
            if (dead[i] || !movement(n) || n->n_implicit)
                continue;
            bool unread = true;
            for (int k = 0; k < n->n_out && unread; k++)
                unread = n->out[k] < 0 ||
                         (!readers[n->out[k]] && !g->values[n->out[k]].is_output);
            if (!unread)
                continue;
            dead[i] = true;
            s->changes++;
            again = true;
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0)
                    readers[n->in[k]]--;
        }
    }
}

/* A value two nodes produce is finalize's error to report: such a graph
 * is left as it is. */
static bool single_producers(const slim_graph *g, int *count)
{
    memset(count, 0, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++) {
            int v = g->nodes[i].out[k];
            if (v >= 0 && (++count[v] > 1 || g->values[v].kind != SLIM_VALUE_INTERMEDIATE))
                return false;
        }
    return true;
}

static slim_status simplify_run(slim_graph *g, int *changed, slim_err *err)
{
    simplify s = {.g = g};
    s.repl = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    s.pinned = malloc(sizeof(bool) * ((size_t)g->n_values + 1));
    slim_status st = SLIM_OK;
    if (!s.repl || !s.pinned)
        st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    for (int round = 0; !st && round < SIMPLIFY_ROUNDS; round++) {
        if (!single_producers(g, s.repl))
            break;
        if ((st = slim_pass_walk_init(&s.w, g, err)))
            break;
        for (int v = 0; v < g->n_values; v++) {
            s.repl[v] = -1;
            s.pinned[v] = false;
        }
        for (int i = 0; i < g->n_nodes; i++) {
            const slim_node *n = &g->nodes[i];
            for (int k = n->n_in - n->n_implicit; k < n->n_in; k++)
                if (k >= 0 && n->in[k] >= 0)
                    s.pinned[n->in[k]] = true;
        }
        s.changes = 0;
        st = find(&s, err);
        if (!st) {
            keep_output_names(&s);
            apply(&s);
        }
        st = slim_pass_walk_finish(&s.w, g, st);
        *changed += s.changes;
        if (!s.changes)
            break;
    }
    free(s.repl);
    free(s.pinned);
    return st;
}

const slim_pass slim__pass_simplify_shapes = {"simplify_shapes", simplify_run};
