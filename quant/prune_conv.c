/*
 * prune_conv.c - Conv layers in the pruning pass (see prune_conv.h).
 *
 * Why BatchNormalization is folded here and not left to passes/fold_bn.c:
 * the prune pass runs before the optimization passes, and fold_bn matches
 * a Conv only. Folding first also prunes what the model computes with:
 * BN scales each output channel, so the magnitudes that matter are those
 * of the folded weight (a channel of small weights and a large BN scale
 * would otherwise lose the most and matter the most). A conv kept dense
 * gets the same folded weight and bias that fold_bn would have made (the
 * same double products rounded once), only pruned.
 *
 * Why the epilogue is fused here: fuse_conv.c turns a Conv with its
 * residual Add and Relu into one FusedConv; a SparseConv left with them as
 * separate nodes would pay a read and a write of the activation for each.
 * The rules are fuse_conv's: the Add and the Relu must each be the only
 * reader, and the Add's other operand must come from a node that keeps a
 * conv output's shape (Add broadcasts, the fused residual does not; shapes
 * are not known at load). When both of an Add's operands are SparseConvs,
 * the one in slot 0 takes it, whatever the node order.
 */
#include "prune_conv.h"

#include "kernel.h"
#include "pass.h"
#include "rewrite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool feeds_depthwise(const slim_graph *g, const slim_node *n);
static bool reads_depthwise(const slim_graph *g, const slim_node *n);

bool slim__prune_conv_of(const slim_graph *g, const slim_node *n, int64_t *m, int64_t *k,
                         bool *depthwise)
{
    if (n->domain[0] || strcmp(n->op_type, "Conv") != 0 || n->n_in < 2 || n->n_out != 1 ||
        n->out[0] < 0)
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, n->in[1]);
    if (!w || w->ndim != 4 || w->dims[0] < 1 || w->dims[1] < 1)
        return false;
    int64_t group = slim_attr_int(n, "group", 1);
    *m = w->dims[0];
    *k = w->dims[1] * w->dims[2] * w->dims[3];
    *depthwise = group > 1 && w->dims[1] == 1 && group == *m;
    return *k > 0;
}

const char *slim__prune_conv_why(const slim_graph *g, const slim_node *n, int64_t m, bool forced,
                                 bool two4)
{
    const char *pad = slim_attr_str(n, "auto_pad", "NOTSET");
    if (pad[0] && strcmp(pad, "NOTSET") != 0 && strcmp(pad, "VALID") != 0)
        return "Conv with auto_pad SAME: its pads depend on the input size";
    int64_t v[4];
    if ((slim_node_attr(n, "strides") && slim_attr_ints(n, "strides", v, 2) != 2) ||
        (slim_node_attr(n, "dilations") && slim_attr_ints(n, "dilations", v, 2) != 2) ||
        (slim_node_attr(n, "pads") && slim_attr_ints(n, "pads", v, 4) != 4))
        return "Conv geometry attributes are not 2-D";
    int64_t group = slim_attr_int(n, "group", 1);
    if (group < 1 || m % group)
        return "Conv's group does not divide its output channels";
    /* Measured on MobileNetV2 at 90%: with its expansions sparse the model
     * ran 1.5-2x the dense time, though a 1x1 conv alone runs faster
     * sparse: fuse_conv merges a dense expansion with its depthwise conv
     * into one oneDNN node and keeps the blocked layout between them. 2:4
     * stays sparse there too: it is asked for its bytes. */
    if (!forced && !two4 && feeds_depthwise(g, n))
        return "1x1 conv feeding a depthwise conv: fused with it dense, faster than sparse";
    /* The projection after a depthwise conv: MobileNetV2 at 90% with them
     * sparse (expansions dense) ran 1.39x the dense time at batch 1: the
     * sparse conv reads and writes NCHW, so the fused expansion + depthwise
     * node before it and the next block's convs after it lose oneDNN's
     * blocked layout and pay a reorder each way, more than the sparse
     * product saves on a 1x1 of 0.2-1.6 MFLOP a pixel row (docs/prune.md,
     * 2026-11-27 h-sp4). SLIM_PRUNE_CONV_DW=sparse keeps them sparse (the
     * before, for benchmarks). */
    const char *env = getenv("SLIM_PRUNE_CONV_DW"); /* "sparse": the before, for benchmarks */
    if (!forced && !two4 && !(env && strcmp(env, "sparse") == 0) && reads_depthwise(g, n))
        return "1x1 conv reading a depthwise conv: sparse would break the dense convs' blocked "
               "layout around it, slower than dense";
    if (n->n_in > 2 && n->in[2] >= 0) {
        const slim_tensor *b = slim_pass_const_f32(g, n->in[2]);
        if (!b || slim_tensor_numel(b) != m || b->ndim != 1)
            return "Conv's bias is not a constant float32 [M]";
    }
    return NULL;
}

static int readers(const slim_graph *g, int v, int *last);

/* Whether a node writing v is a depthwise conv, or a BN / Relu / Clip whose
 * input is, up to `hops` such nodes back. Every writer is looked at: a
 * dense conv whose BN was folded already writes the BN's output while the
 * BN stays until the pass ends. */
static bool written_by_depthwise(const slim_graph *g, int v, int hops)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *d = &g->nodes[i];
        if (d->n_out < 1 || d->out[0] != v || d->domain[0])
            continue;
        int64_t m, k;
        bool dw = false;
        if (strcmp(d->op_type, "Conv") == 0 && slim__prune_conv_of(g, d, &m, &k, &dw) && dw)
            return true;
        if (hops > 0 && d->n_in > 0 && d->in[0] >= 0 && d->in[0] != v &&
            (strcmp(d->op_type, "BatchNormalization") == 0 || strcmp(d->op_type, "Relu") == 0 ||
             strcmp(d->op_type, "Clip") == 0) &&
            written_by_depthwise(g, d->in[0], hops - 1))
            return true;
    }
    return false;
}

/* Whether conv is a 1x1 (group 1) whose input comes from a depthwise conv
 * through a BN and a Relu / Clip at most (MobileNetV2's projection). */
static bool reads_depthwise(const slim_graph *g, const slim_node *n)
{
    const slim_tensor *w = slim_pass_const_f32(g, n->in[1]);
    if (!w || w->ndim != 4 || w->dims[2] != 1 || w->dims[3] != 1 ||
        slim_attr_int(n, "group", 1) != 1 || n->in[0] < 0)
        return false;
    return written_by_depthwise(g, n->in[0], 2);
}

/* Whether conv is a 1x1 whose output reaches a depthwise 3x3 conv alone,
 * through a BN and a Relu / Clip at most (MobileNetV2's expansion). */
static bool feeds_depthwise(const slim_graph *g, const slim_node *n)
{
    const slim_tensor *w = slim_pass_const_f32(g, n->in[1]);
    if (w->dims[2] != 1 || w->dims[3] != 1 || slim_attr_int(n, "group", 1) != 1)
        return false;
    int v = n->out[0];
    for (int hop = 0; hop < 3; hop++) {
        int r = -1;
        if (readers(g, v, &r) != 1 || r < 0)
            return false;
        const slim_node *d = &g->nodes[r];
        if (d->domain[0])
            return false;
        int64_t m, k;
        bool dw;
        if (strcmp(d->op_type, "Conv") == 0)
            return d->in[0] == v && slim__prune_conv_of(g, d, &m, &k, &dw) && dw;
        if ((strcmp(d->op_type, "BatchNormalization") != 0 && strcmp(d->op_type, "Relu") != 0 &&
             strcmp(d->op_type, "Clip") != 0) || d->n_out != 1 || d->in[0] != v)
            return false;
        v = d->out[0];
    }
    return false;
}

static int readers(const slim_graph *g, int v, int *last)
{
    int r = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int q = 0; q < g->nodes[i].n_in; q++)
            if (g->nodes[i].in[q] == v) {
                r++;
                *last = i;
            }
    return r + (g->values[v].is_output ? 1 : 0);
}

static bool per_channel(const slim_graph *g, int v, int64_t m)
{
    const slim_tensor *t = v >= 0 ? slim_pass_const_f32(g, v) : NULL;
    return t && slim_tensor_numel(t) == m && t->ndim <= 1;
}

int slim__prune_conv_bn(const slim_graph *g, int conv)
{
    const slim_node *c = &g->nodes[conv];
    int64_t m = g->values[c->in[1]].init.dims[0];
    int r = -1, dummy;
    if (readers(g, c->out[0], &r) != 1 || r < 0 || readers(g, c->in[1], &dummy) != 1)
        return -1; /* r < 0: the one "reader" is the graph's output */
    if (c->n_in > 2 && c->in[2] >= 0 &&
        (readers(g, c->in[2], &dummy) != 1 || !per_channel(g, c->in[2], m)))
        return -1;
    const slim_node *bn = &g->nodes[r];
    if (bn->domain[0] || strcmp(bn->op_type, "BatchNormalization") != 0 || bn->n_in != 5 ||
        bn->n_out != 1 || bn->out[0] < 0 || bn->in[0] != c->out[0] ||
        slim_attr_int(bn, "training_mode", 0) != 0)
        return -1;
    for (int q = 1; q < 5; q++)
        if (!per_channel(g, bn->in[q], m))
            return -1;
    return r;
}

void slim__prune_conv_fold(const slim_graph *g, const slim_node *conv, const slim_node *bn,
                           float *w, int64_t m, int64_t k, float *bias)
{
    const float *scale = g->values[bn->in[1]].init.data, *beta = g->values[bn->in[2]].init.data;
    const float *mean = g->values[bn->in[3]].init.data, *var = g->values[bn->in[4]].init.data;
    const float *b = conv->n_in > 2 && conv->in[2] >= 0 ? g->values[conv->in[2]].init.data
                                                        : NULL;
    double eps = slim_attr_float(bn, "epsilon", 1e-5f);
    for (int64_t c = 0; c < m; c++) {
        double s = (double)scale[c] / sqrt((double)var[c] + eps);
        for (int64_t i = 0; i < k; i++)
            w[c * k + i] = (float)((double)w[c * k + i] * s);
        double b0 = b ? b[c] : 0.0;
        bias[c] = (float)((b0 - mean[c]) * s + beta[c]);
    }
}

slim_status slim__prune_conv_rewrite(slim_graph *g, slim_node *conv, const char *enc, int64_t k,
                                     bool forced, int n_in, const int *in, int out, slim_err *err)
{
    const slim_tensor *w = &g->values[conv->in[1]].init;
    int64_t ks[2] = {w->dims[2], w->dims[3]}, s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
    int64_t group = slim_attr_int(conv, "group", 1);
    bool valid = strcmp(slim_attr_str(conv, "auto_pad", "NOTSET"), "VALID") == 0;
    if (slim_node_attr(conv, "strides"))
        slim_attr_ints(conv, "strides", s, 2);
    if (slim_node_attr(conv, "dilations"))
        slim_attr_ints(conv, "dilations", d, 2);
    if (slim_node_attr(conv, "pads") && !valid)
        slim_attr_ints(conv, "pads", p, 4);
    slim_attr *a = calloc(2, sizeof(*a));
    if (!a || !slim_rewrite_attr_str(&a[0], "encoding", enc) ||
        !slim_rewrite_attr_int(&a[1], "K", k)) {
        for (int i = 0; a && i < 2; i++)
            slim_attr_clear(&a[i]);
        free(a);
        return slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
    }
    slim_status st = slim_rewrite_node(conv, "SparseConv", n_in, in, out, a, 2, "pruning", err);
    if (!st && !(st = slim_pass_set_ints(conv, "kernel_shape", ks, 2, err)) &&
        !(st = slim_pass_set_ints(conv, "strides", s, 2, err)) &&
        !(st = slim_pass_set_ints(conv, "dilations", d, 2, err)) &&
        !(st = slim_pass_set_ints(conv, "pads", p, 4, err)) &&
        !(st = slim_pass_set_int(conv, "group", group, err)))
        st = slim_pass_set_int(conv, "activation", 0, err);
    /* Kept in the file: the load's expand pass (prune_expand.c) leaves a
     * forced layer sparse. */
    if (!st && forced)
        st = slim_pass_set_str(conv, "storage", "sparse", err);
    return st;
}

/* Initializer v once no node reads it: its memory goes back now. */
void slim__prune_release_unread(slim_graph *g, int v)
{
    if (v < 0 || g->values[v].kind != SLIM_VALUE_INITIALIZER || g->values[v].is_output)
        return;
    for (int j = 0; j < g->n_nodes; j++)
        for (int q = 0; q < g->nodes[j].n_in; q++)
            if (g->nodes[j].in[q] == v)
                return;
    slim_tensor_release(&g->values[v].init);
    memset(&g->values[v].init, 0, sizeof(g->values[v].init));
    g->values[v].kind = SLIM_VALUE_INTERMEDIATE;
}

/* A conv kept dense whose BN was folded into its pruned copy: it reads
 * that copy and the folded bias, and writes the BN's output (what
 * passes/fold_bn.c would have made, pruned). */
slim_status slim__prune_conv_dense(slim_graph *g, int node, int bn, const float *pruned,
                                   const float *fbias, slim_err *err)
{
    slim_node *conv = &g->nodes[node];
    int wv0 = conv->in[1];
    int64_t m = g->values[wv0].init.dims[0];
    slim_tensor w = {0}, b = {0};
    slim_tensor_set_shape(&w, SLIM_F32, 4, g->values[wv0].init.dims);
    slim_tensor_set_shape(&b, SLIM_F32, 1, &m);
    slim_status st;
    if ((st = slim_tensor_alloc(&w, err)) || (st = slim_tensor_alloc(&b, err))) {
        slim_tensor_release(&w);
        return st;
    }
    memcpy(w.data, pruned, slim_tensor_nbytes(&w));
    memcpy(b.data, fbias, slim_tensor_nbytes(&b));
    int wv = slim_graph_add_initializer(g, g->values[wv0].name, "_bnfold", &w, err);
    if (wv < 0) {
        slim_tensor_release(&b);
        return SLIM_ENOMEM;
    }
    int bv = slim_graph_add_initializer(g, g->values[wv0].name, "_bnbias", &b, err);
    if (bv < 0)
        return SLIM_ENOMEM;
    conv = &g->nodes[node];
    int old_b = conv->n_in > 2 ? conv->in[2] : -1;
    if (conv->n_in < 3) {
        int *in = realloc(conv->in, sizeof(int) * 3);
        if (!in)
            return slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
        conv->in = in;
        conv->n_in = 3;
    }
    conv->in[1] = wv;
    conv->in[2] = bv;
    conv->out[0] = g->nodes[bn].out[0];
    slim__prune_release_unread(g, old_b);
    return SLIM_OK;
}

void slim__prune_conv_why_sparse(char *buf, size_t cap, bool two4, int64_t nnz, int64_t m,
                                 int64_t k, double most, int64_t batch, bool forced)
{
    if (forced)
        snprintf(buf, cap, "storage \"sparse\" asked for");
    else if (two4) /* prune_expand.c */
        snprintf(buf, cap, "2:4 in the file; run dense at load (faster): %lld bytes "
                 "float32 (storage \"sparse\": run 2:4)", (long long)(m * k * 4));
    else
        snprintf(buf, cap, "density %.2f <= %.2f: csr measured faster than the dense conv "
                 "at batch %lld", (double)nnz / (double)(m * k), most,
                 (long long)(batch > 0 ? batch : 1));
}

static bool is_sconv(const slim_node *n)
{
    return strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "SparseConv") == 0;
}

static int producer(const slim_graph *g, const bool *dead, int v)
{
    for (int i = 0; v >= 0 && i < g->n_nodes; i++)
        if (!dead[i])
            for (int q = 0; q < g->nodes[i].n_out; q++)
                if (g->nodes[i].out[q] == v)
                    return i;
    return -1;
}

static bool keeps_shape(const slim_graph *g, const bool *dead, int v)
{
    static const char *const ok[] = {"Conv", "FusedConv", "SparseConv", "Relu", "Clip", "Add",
                                     "BatchNormalization", "MaxPool", NULL};
    int p = producer(g, dead, v);
    for (int i = 0; p >= 0 && ok[i]; i++)
        if (strcmp(g->nodes[p].op_type, ok[i]) == 0)
            return true;
    return false;
}

/* The residual Add that alone reads conv's output, if conv takes it. */
static slim_node *residual(const slim_rewrite *rw, slim_node *conv)
{
    slim_graph *g = rw->g;
    int out = conv->out[0];
    slim_node *add = slim_rewrite_sole_reader(rw, out, "Add");
    if (!add || add->n_in != 2 || add->n_out != 1 || add->in[0] == add->in[1])
        return NULL;
    int other = add->in[0] == out ? add->in[1] : add->in[0];
    if (add->in[1] == out) {
        int po = producer(g, rw->dead, other);
        if (po >= 0 && is_sconv(&g->nodes[po]) && g->nodes[po].n_in < 6 &&
            slim_rewrite_sole_reader(rw, other, "Add") == add)
            return NULL; /* slot 0's SparseConv takes it */
    }
    return keeps_shape(g, rw->dead, other) ? add : NULL;
}

slim_status slim__prune_conv_finish(slim_graph *g, const int *bn, int n_bn, slim_err *err)
{
    bool any = n_bn > 0;
    for (int i = 0; i < g->n_nodes && !any; i++)
        any = is_sconv(&g->nodes[i]);
    if (!any)
        return SLIM_OK;
    slim_rewrite rw;
    slim_status st = slim_rewrite_init(&rw, g, 0, "pruning", err);
    if (st)
        return st;
    slim_rewrite_begin(&rw);
    for (int i = 0; i < n_bn; i++)
        rw.dead[bn[i]] = true;
    slim_rewrite_count(&rw);
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *c = &g->nodes[i];
        if (rw.dead[i] || !is_sconv(c))
            continue;
        int out = c->out[0], res = -1;
        slim_node *add = residual(&rw, c);
        if (add) {
            res = add->in[0] == out ? add->in[1] : add->in[0];
            out = add->out[0];
            rw.dead[add - g->nodes] = true;
        }
        slim_node *relu = slim_rewrite_sole_reader(&rw, out, "Relu");
        slim_node *clip = relu ? NULL : slim_rewrite_sole_reader(&rw, out, "Clip");
        float lo, hi;
        if (relu && relu->n_out == 1 && relu->out[0] >= 0) {
            out = relu->out[0];
            rw.dead[relu - g->nodes] = true;
            st = slim_pass_set_int(c, "activation", 1, err);
        } else if (clip && clip->n_out == 1 && clip->out[0] >= 0 &&
                   slim_pass_clip_bounds(g, clip, &lo, &hi)) {
            out = clip->out[0];
            rw.dead[clip - g->nodes] = true;
            if (!(st = slim_pass_set_int(c, "activation", 2, err)) &&
                !(st = slim_pass_set_float(c, "alpha", lo, err)))
                st = slim_pass_set_float(c, "beta", hi, err);
        }
        if (!st && res >= 0) {
            int *in = realloc(c->in, sizeof(int) * 6);
            if (!in) {
                st = slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
                break;
            }
            for (int q = c->n_in; q < 5; q++)
                in[q] = -1;
            in[5] = res;
            c->in = in;
            c->n_in = 6;
        }
        c->out[0] = out;
        slim_rewrite_count(&rw);
    }
    return slim_rewrite_finish(&rw, st);
}
