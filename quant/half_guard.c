/*
 * half_guard.c - half activations with float32 guards (half.h:
 * slim_quant_half_activations).
 *
 * The whole-graph pass (fp16.c) makes every float value half. Some
 * operators lose too much that way: LayerNormalization, Softmax and the
 * reductions sum many terms (a sum of squares overflows fp16 long before
 * its mean does), and the spelled-out LayerNorm (ReduceMean, Sub, Pow or
 * Mul, ReduceMean, Add, Sqrt, Div) does the same step by step. Those nodes
 * are "guarded": they read float32 and write float32. So are the
 * half-weight operators (MatMulHalf, GatherHalf, ConvHalf), which take
 * float32 activations and accumulate in float32 anyway; when one feeds a
 * guarded node directly (a projection into a LayerNorm, the case where an
 * fp16 activation overflows) the value never passes through half.
 *
 * Where a guarded node reads a value made outside the guarded set, a
 * HalfCast to float32 goes in between; where an unguarded node reads a
 * guarded node's output, a HalfCast to half. HalfCast passes non-float
 * values through (types are known only at run time: a ReduceSum may add
 * int64 shape values). Initializers that only guarded nodes read stay
 * float32; a graph input that a guarded node reads is read directly, not
 * through its half copy.
 */
#include "half.h"

#include "fp16.h"
#include "kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool guarded_op(const slim_node *n)
{
    static const char *const slimserve[] = {"MatMulHalf", "GatherHalf", "ConvHalf"};
    static const char *const onnx[] = {"LayerNormalization", "SimplifiedLayerNormalization",
                                       "GroupNormalization", "InstanceNormalization",
                                       "Softmax", "LogSoftmax"};
    if (strcmp(n->domain, "com.slimserve") == 0) {
        for (size_t i = 0; i < sizeof(slimserve) / sizeof(slimserve[0]); i++)
            if (strcmp(n->op_type, slimserve[i]) == 0)
                return true;
        return false;
    }
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return false;
    if (strncmp(n->op_type, "Reduce", 6) == 0)
        return true;
    for (size_t i = 0; i < sizeof(onnx) / sizeof(onnx[0]); i++)
        if (strcmp(n->op_type, onnx[i]) == 0)
            return true;
    return false;
}

static bool is_op(const slim_node *n, const char *op)
{
    return !n->domain[0] && strcmp(n->op_type, op) == 0;
}

/* The node producing each value, or -1. */
static int *producers(const slim_graph *g)
{
    int *p = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    if (!p)
        return NULL;
    for (int v = 0; v < g->n_values; v++)
        p[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0)
                p[g->nodes[i].out[k]] = i;
    return p;
}

/* The spelled-out LayerNorm: for d = Sub(x, ReduceMean(x)), the nodes from
 * d forward through Pow / Mul / ReduceMean / Add / Sqrt up to the Div that
 * divides d, marked guarded when that Div is found. */
static void mark_spelled_layernorm(const slim_graph *g, const int *prod, bool *guard)
{
    int *queue = malloc(sizeof(int) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    bool *seen = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(bool));
    if (!queue || !seen)
        goto out; /* the guards are an accuracy measure: without memory, none extra */
    for (int s = 0; s < g->n_nodes; s++) {
        const slim_node *sub = &g->nodes[s];
        if (!is_op(sub, "Sub") || sub->n_in != 2 || sub->n_out < 1 || sub->in[1] < 0)
            continue;
        int m = prod[sub->in[1]];
        if (m < 0 || !is_op(&g->nodes[m], "ReduceMean") || g->nodes[m].in[0] != sub->in[0])
            continue;
        int d = sub->out[0];
        memset(seen, 0, sizeof(bool) * (size_t)g->n_nodes);
        int head = 0, tail = 0;
        bool found = false;
        queue[tail++] = s;
        seen[s] = true;
        /* Breadth first over a few steps; the chain is 6 nodes long. */
        for (int depth = 0; depth < 7 && head < tail; depth++) {
            int end = tail;
            for (; head < end; head++) {
                const slim_node *n = &g->nodes[queue[head]];
                if (is_op(n, "Div") && n->in[0] == d) {
                    found = true;
                    continue; /* the normalized value: what follows is not the chain */
                }
                for (int i = 0; i < g->n_nodes; i++) {
                    const slim_node *r = &g->nodes[i];
                    if (seen[i] || !(is_op(r, "Pow") || is_op(r, "Mul") ||
                                     is_op(r, "ReduceMean") || is_op(r, "Add") ||
                                     is_op(r, "Sqrt") || is_op(r, "Div")))
                        continue;
                    bool reads = false;
                    for (int k = 0; k < r->n_in && !reads; k++)
                        reads = r->in[k] >= 0 && r->in[k] == n->out[0];
                    if (reads) {
                        seen[i] = true;
                        queue[tail++] = i;
                    }
                }
            }
        }
        if (!found)
            continue;
        for (int i = 0; i < tail; i++)
            guard[queue[i]] = true;
    }
out:
    free(queue);
    free(seen);
}

/* A HalfCast of value v to `to` (ONNX code), made once per (v, to). */
static int cast_of(slim_graph *g, int v, int to, int *made, slim_err *err)
{
    if (made[v] >= 0)
        return made[v];
    char name[1024];
    snprintf(name, sizeof(name), "%s@%s", g->values[v].name, to == 1 ? "f32" : "half");
    char from[1024];
    snprintf(from, sizeof(from), "%s", g->values[v].name);
    char node_name[1100];
    snprintf(node_name, sizeof(node_name), "half_guard_%s", name);
    int id = slim_graph_add_node(g, node_name, "HalfCast", "com.slimserve", 1,
                                 (const char *const[]){from}, 1, (const char *const[]){name});
    slim_attr *a = id >= 0 ? calloc(1, sizeof(*a)) : NULL;
    if (!a || !(a->name = strdup("to"))) {
        free(a);
        slim_errf(err, SLIM_ENOMEM, "out of memory guarding half activations");
        return -1;
    }
    a->type = SLIM_ATTR_INT;
    a->i = to;
    slim_node *n = &g->nodes[id];
    n->attrs = a;
    n->n_attrs = 1;
    n->opset = 1;
    made[v] = n->out[0];
    return made[v];
}

slim_status slim_quant_half_activations(slim_graph *g, slim_dtype half, slim_err *err)
{
    if (half != SLIM_F16 && half != SLIM_BF16)
        return slim_errf(err, SLIM_EINVAL, "half activations: the type must be fp16 or bf16");
    int n_nodes = g->n_nodes, n_values = g->n_values;
    bool *guard = calloc((size_t)n_nodes + 1, sizeof(bool));
    bool *keep = calloc((size_t)n_values + 1, sizeof(bool));
    bool *unguarded_reader = calloc((size_t)n_values + 1, sizeof(bool));
    int *prod = producers(g);
    slim_status st = SLIM_OK;
    if (!guard || !keep || !unguarded_reader || !prod) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory guarding half activations");
        goto done;
    }
    for (int i = 0; i < n_nodes; i++)
        guard[i] = guarded_op(&g->nodes[i]);
    mark_spelled_layernorm(g, prod, guard);
    /* Initializers only guarded nodes read stay float32. */
    for (int i = 0; i < n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0 && !guard[i])
                unguarded_reader[v] = true;
        }
    for (int i = 0; i < n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0 && guard[i] && g->values[v].kind == SLIM_VALUE_INITIALIZER &&
                !unguarded_reader[v])
                keep[v] = true;
        }
    int first_new_node = g->n_nodes;
    if ((st = slim_quant_half_keep(g, half, keep, NULL, err)))
        goto done;
    /* fp16.c renamed graph outputs (a node now makes name@half, a Cast
     * makes name) and gave inputs half copies: the producers again. */
    free(prod);
    if (!(prod = producers(g))) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory guarding half activations");
        goto done;
    }
    int nv = g->n_values;
    /* Room for the casts: at most one per value and direction. */
    int *to_f32 = malloc(sizeof(int) * (size_t)(nv + 1) * 2);
    if (!to_f32) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory guarding half activations");
        goto done;
    }
    int *to_half = to_f32 + nv + 1;
    for (int v = 0; v < 2 * (nv + 1); v++)
        to_f32[v] = -1;
    int code = slim_dtype_to_onnx(half);
    int end = g->n_nodes;
    for (int i = 0; i < end && !st; i++) {
        /* The Casts fp16.c added (at the interface) are unguarded. */
        bool gi = i < first_new_node ? guard[i] : false;
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v < 0 || v >= nv)
                continue;
            int p = prod[v];
            bool from_guard = p >= 0 && p < first_new_node && guard[p];
            if (gi) {
                if (from_guard || (v < n_values && keep[v]))
                    continue;
                /* A graph input's half copy: read the input itself. */
                if (p >= first_new_node && is_op(&g->nodes[p], "Cast") &&
                    g->values[g->nodes[p].in[0]].kind == SLIM_VALUE_INPUT) {
                    g->nodes[i].in[k] = g->nodes[p].in[0];
                    continue;
                }
                if (g->values[v].kind == SLIM_VALUE_INITIALIZER &&
                    g->values[v].init.dtype != half)
                    continue; /* int64 axes and the like */
                int c = cast_of(g, v, 1, to_f32, err);
                if (c < 0) {
                    st = SLIM_ENOMEM;
                    break;
                }
                g->nodes[i].in[k] = c;
            } else if (from_guard) {
                /* fp16.c's Cast to a float32 graph output takes the float32
                 * value as it is. */
                if (i >= first_new_node && is_op(&g->nodes[i], "Cast"))
                    continue;
                int c = cast_of(g, v, code, to_half, err);
                if (c < 0) {
                    st = SLIM_ENOMEM;
                    break;
                }
                g->nodes[i].in[k] = c;
            }
        }
    }
    free(to_f32);
done:
    free(guard);
    free(keep);
    free(unguarded_reader);
    free(prod);
    return st;
}
