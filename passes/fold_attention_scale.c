/*
 * fold_attention_scale.c - attention's 1/sqrt(d) moved from the scores into
 * a projection's weights (models placed on a GPU).
 *
 * Exported attention scales the scores, S = (Q K^T) * c (or / c), where Q
 * and K are projections, Transpose(Reshape(x W + b)). The scores are the
 * largest activation of the block (batch x heads x seq x seq), and the Mul
 * is a full pass over them per layer; (Q K^T) c = (Q c) K^T, and Q c is
 * x (W c) + b c. So W and b are scaled once at load and the Mul goes. On
 * an H100 it was 2% of BERT-base's fp16 time at batch 32 (the profile in
 * docs/benchmarks.md, gpu_h100_2026-11-26_profile).
 *
 * When c is a power of two (d = 64: 1/8) the scaled weights are exact and
 * the outputs bitwise the same; otherwise W c is rounded once, in double.
 * On the host FusedAttention applies the scale inside its kernel, so this
 * pass runs for GPU placements only (pass.c).
 *
 * Applies when the product's only reader is the Mul/Div by a float32 scalar
 * initializer, and one operand of the product comes, each value read once,
 * through Reshape and Transpose only, from MatMul(x, W) [+ Add bias] with W
 * (and the bias) float32 initializers that nothing else reads.
 */
#include "pass.h"

#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* v's producer when v is read exactly once and is no graph output. */
static slim_node *sole_producer(slim_graph *g, const slim_pass_uses *u, int v)
{
    /* Values past u's were added by this walk (scaled weights). */
    if (v < 0 || v >= u->n_values || u->readers[v] != 1 || g->values[v].is_output ||
        u->producer[v] < 0)
        return NULL;
    slim_node *n = &g->nodes[u->producer[v]];
    return n->domain[0] || n->n_out != 1 ? NULL : n;
}

static bool is_op(const slim_node *n, const char *op)
{
    return n && strcmp(n->op_type, op) == 0;
}

/* A float32 initializer only one input slot reads. */
static bool own_weight(slim_graph *g, const slim_pass_uses *u, int v)
{
    return v >= 0 && v < u->n_values && slim_pass_const_f32(g, v) && u->readers[v] == 1 &&
           !g->values[v].is_output;
}

/* The projection behind v: *mm the MatMul, *add its bias Add or NULL, *wk
 * the Add's input slot holding the bias. */
static bool projection(slim_graph *g, const slim_pass_uses *u, int v, slim_node **mm,
                       slim_node **add, int *bk)
{
    slim_node *n = sole_producer(g, u, v);
    /* Passes run before validation: a hostile node may have no inputs. */
    for (int hops = 0; hops < 4 && (is_op(n, "Reshape") || is_op(n, "Transpose")); hops++)
        n = n->n_in >= 1 ? sole_producer(g, u, n->in[0]) : NULL;
    *add = NULL;
    if (is_op(n, "Add") && n->n_in == 2) {
        *bk = own_weight(g, u, n->in[1]) ? 1 : own_weight(g, u, n->in[0]) ? 0 : -1;
        if (*bk < 0)
            return false;
        *add = n;
        n = sole_producer(g, u, n->in[1 - *bk]);
    }
    if (!is_op(n, "MatMul") || n->n_in != 2 || !own_weight(g, u, n->in[1]))
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, n->in[1]);
    *mm = n;
    return w->ndim == 2;
}

/* Initializer v times c, as a new initializer; slot *in of `reader` then
 * reads it and the old one is released. */
static slim_status scale_weight(slim_graph *g, slim_node *reader, int slot, double c,
                                slim_err *err)
{
    int old = reader->in[slot];
    const slim_tensor *w = slim_pass_const_f32(g, old);
    slim_tensor nw = {0};
    slim_tensor_set_like(&nw, w);
    slim_status st = slim_tensor_alloc(&nw, err);
    if (st)
        return st;
    const float *src = w->data;
    float *dst = nw.data;
    for (int64_t i = 0, n = slim_tensor_numel(w); i < n; i++)
        dst[i] = (float)((double)src[i] * c);
    int nv = slim_graph_add_initializer(g, g->values[old].name, "_scaled", &nw, err);
    if (nv < 0)
        return SLIM_ENOMEM;
    reader->in[slot] = nv;
    slim_pass_drop_replaced(g, old, reader);
    return SLIM_OK;
}

static slim_status fold_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *prod = &g->nodes[i];
        if (prod->domain[0] || !is_op(prod, "MatMul") || prod->n_in != 2 || prod->n_out != 1 ||
            prod->out[0] < 0 || w.dead[i])
            continue;
        slim_node *scale = slim_pass_sole_reader(g, u, prod->out[0], "Mul");
        if (!scale)
            scale = slim_pass_sole_reader(g, u, prod->out[0], "Div");
        if (!scale || scale->n_in != 2 || scale->n_out != 1 || scale->out[0] < 0)
            continue;
        bool div = is_op(scale, "Div");
        int ck = scale->in[0] == prod->out[0] ? 1 : 0;
        if (div && ck != 1)
            continue; /* c / S is no scaling */
        const slim_tensor *ct = slim_pass_const_f32(g, scale->in[ck]);
        if (!ct || slim_tensor_numel(ct) != 1)
            continue;
        double c = ((const float *)ct->data)[0];
        if (div)
            c = 1.0 / c;
        if (!isfinite(c) || c == 0.0)
            continue;
        slim_node *mm = NULL, *add = NULL;
        int bk = -1;
        if (!projection(g, u, prod->in[0], &mm, &add, &bk) &&
            !projection(g, u, prod->in[1], &mm, &add, &bk))
            continue;
        if ((st = scale_weight(g, mm, 1, c, err)) ||
            (add && (st = scale_weight(g, add, bk, c, err))))
            break;
        prod->out[0] = scale->out[0];
        w.dead[scale - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_fold_attention_scale = {"fold_attention_scale", fold_run};
