/*
 * int8_sparse.c - the int8 pass (int8.c) on layers the pruning pass
 * (prune.c, run before it) made com.slimserve SparseConv: their kept
 * values become int8 codes, symmetric per output channel, with one float32
 * scale per channel as the node's input 6 (kernels/cpu/sparse_conv_op.c).
 * SparseMatMul gets the same, its scales as input 5
 * (kernels/cpu/sparse_op.c). The indices and row pointers stay as they
 * are, so a 90% layer in csr falls from 6 to 3 bytes per kept weight
 * (value + u16 index).
 *
 * The scale of a channel comes from its kept values alone (the pruned
 * zeros take no code), max |v| / 127 as for the dense int8 layers; the
 * kernel runs its chain of fused multiply-adds over the codes as floats
 * and applies the scale once at the end, so results stay row-invariant.
 */
#include "int8_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef slim__int8_pass pass;

/* Channel j's entries in the values: [*b, *e). */
static void channel_span(const slim_graph *g, const slim_node *n, bool two4, int64_t j,
                         int64_t per_row, int64_t *b, int64_t *e)
{
    if (two4) {
        *b = j * per_row;
        *e = *b + per_row;
        return;
    }
    const int32_t *rp = g->values[n->in[3]].init.data;
    *b = rp[j];
    *e = rp[j + 1];
}

/* Where the node takes its scales: SparseConv input 6, SparseMatMul 5. */
static int scale_input(const slim_node *n)
{
    return strcmp(n->op_type, "SparseConv") == 0 ? 6 : 5;
}

/* Why the values of sparse node n (values in v) stay float, or NULL. */
static const char *sparse_why(const pass *p, const slim_node *n, int v, bool *two4, int64_t *m)
{
    const slim_graph *g = p->rw.g;
    const char *enc = slim_attr_str(n, "encoding", "");
    *two4 = strcmp(enc, "2:4") == 0;
    if (!*two4 && strcmp(enc, "csr") != 0)
        return "unknown sparse encoding";
    int si = scale_input(n);
    if (n->n_in > si && n->in[si] >= 0)
        return "already int8";
    if (p->rw.uses.readers[v] != 1)
        return "its values are read by other nodes too";
    const slim_tensor *t = &g->values[v].init;
    if (*two4) {
        if (t->ndim != 2)
            return "2:4 values not 2-D";
        *m = t->dims[0];
        return NULL;
    }
    int rv = n->n_in > 3 ? n->in[3] : -1;
    if (rv < 0 || g->values[rv].kind != SLIM_VALUE_INITIALIZER ||
        g->values[rv].init.dtype != SLIM_I32 || g->values[rv].init.ndim != 1 ||
        g->values[rv].init.dims[0] < 2)
        return "csr row pointers not a constant int32 vector";
    *m = g->values[rv].init.dims[0] - 1;
    const int32_t *rp = g->values[rv].init.data;
    int64_t nnz = slim_tensor_numel(t);
    for (int64_t j = 0; j < *m; j++) /* checked here since the codes are cut by them */
        if (rp[j] < 0 || rp[j] > rp[j + 1] || rp[j + 1] > nnz)
            return "csr row pointers out of order";
    return NULL;
}

/* Quantizes sparse node id's values (already added to the report as
 * layer): int8 codes in the values' shape and scales [M], both new
 * initializers; the float values go once nothing reads them. */
static slim_status quantize(pass *p, int id, int v, bool two4, int64_t m, slim_int8_layer *layer,
                            slim_err *err)
{
    slim_graph *g = p->rw.g;
    const slim_tensor *t = &g->values[v].init;
    int64_t per_row = two4 ? t->dims[1] : 0;
    slim_tensor codes = {0}, scale = {0};
    slim_status st = slim_rewrite_alloc_tensor(&codes, SLIM_I8, t->ndim, t->dims[0],
                                               t->ndim > 1 ? t->dims[1] : 0, err);
    if (!st)
        st = slim_rewrite_alloc_tensor(&scale, SLIM_F32, 1, m, 0, err);
    if (st) {
        slim_tensor_release(&codes);
        return st;
    }
    const float *w = t->data;
    int8_t *q = codes.data;
    float *sc = scale.data;
    double e2 = 0, w2 = 0;
    for (int64_t j = 0; j < m; j++) {
        int64_t b, e;
        channel_span(g, &g->nodes[id], two4, j, per_row, &b, &e);
        sc[j] = slim__int8_quantize_channel(w + b, e - b, 1, NULL, q + b, &e2, &w2);
    }
    layer->weight_error = w2 > 0 ? sqrt(e2 / w2) : 0.0;
    layer->bytes_after = slim_tensor_nbytes(&codes) + slim_tensor_nbytes(&scale);
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int cv = slim_graph_add_initializer(g, base, ".int8_values", &codes, err);
    int sv = cv < 0 ? -1 : slim_graph_add_initializer(g, base, ".int8_scale", &scale, err);
    if (cv < 0 || sv < 0) {
        slim_tensor_release(&codes);
        slim_tensor_release(&scale);
        return err->status ? err->status : SLIM_ENOMEM;
    }
    slim_node *n = &g->nodes[id];
    int si = scale_input(n);
    if (n->n_in < si + 1) {
        int *in = realloc(n->in, sizeof(int) * (size_t)(si + 1));
        if (!in)
            return slim_errf(err, SLIM_ENOMEM, "out of memory %s", p->rw.what);
        for (int i = n->n_in; i < si + 1; i++)
            in[i] = -1;
        n->in = in;
        n->n_in = si + 1;
    }
    n->in[1] = cv;
    n->in[si] = sv;
    return SLIM_OK;
}

slim_status slim__int8_quantize_sparse(slim__int8_pass *p, int id, slim_err *err)
{
    slim_graph *g = p->rw.g;
    slim_node *n = &g->nodes[id];
    int v = n->n_in > 1 ? n->in[1] : -1;
    if (!slim_pass_const_f32(g, v))
        return SLIM_OK; /* half or int8 values already: nothing to do */
    slim_int8_layer *layer = NULL;
    slim_status st = slim__int8_add_layer(p, n, v, &layer, err);
    if (st)
        return st;
    bool two4 = false;
    int64_t m = 0;
    const slim_int8_opts *o = p->opts;
    if (o && slim_rewrite_named(o->exclude, o->n_exclude, n))
        layer->why = "excluded";
    else
        layer->why = sparse_why(p, n, v, &two4, &m);
    if (layer->why) {
        layer->bytes_after = layer->bytes_before;
        return SLIM_OK;
    }
    if ((st = quantize(p, id, v, two4, m, layer, err)))
        return st;
    layer->quantized = true;
    p->rep->bytes_before += layer->bytes_before;
    p->rep->bytes_after += layer->bytes_after;
    return SLIM_OK;
}
