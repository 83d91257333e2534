/*
 * prune.c - the pruning pass (see prune.h).
 *
 * The pass never writes into a weight it was given: a .slim file's weights
 * are read-only views of its mapping. Each pruned weight is a new float32
 * copy, either encoded sparse (and dropped) or put in the weight's place.
 * The magnitude threshold (the cut) is prune_cut.c's.
 */
#include "prune.h"
#include "prune_conv.h"
#include "prune_cut.h"
#include "rewrite.h"

#include "kernel.h"
#include "npz.h"
#include "sparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- options ---------------------------------------------------------------- */

slim_status slim_prune_check_opts(const slim_prune_opts *o, slim_err *err)
{
    if (!o || !o->method || !o->method[0])
        return SLIM_OK;
    if (strcmp(o->method, "magnitude") == 0) {
        if (!(o->amount >= 0 && o->amount < 1))
            return slim_errf(err, SLIM_EINVAL, "pruning: amount %g must be in [0, 1)", o->amount);
    } else if (strcmp(o->method, "2:4") == 0) {
        if (o->global)
            return slim_errf(err, SLIM_EINVAL, "pruning: scope \"global\" applies to magnitude "
                             "pruning only");
    } else if (strcmp(o->method, "mask") == 0) {
        if (!o->masks || !o->masks[0])
            return slim_errf(err, SLIM_EINVAL, "pruning: method \"mask\" needs a masks file "
                             "(.npz)");
    } else {
        return slim_errf(err, SLIM_EINVAL, "pruning: method \"%s\" is not \"magnitude\", "
                         "\"2:4\" or \"mask\"", o->method);
    }
    if (o->storage && strcmp(o->storage, "auto") && strcmp(o->storage, "sparse") &&
        strcmp(o->storage, "dense"))
        return slim_errf(err, SLIM_EINVAL, "pruning: storage \"%s\" is not \"auto\", \"sparse\" "
                         "or \"dense\"", o->storage);
    return SLIM_OK;
}

/* ---- candidates ---------------------------------------------------------------- */

typedef struct {
    int node;
    int w;                 /* weight value id */
    int64_t n, k;
    bool w_nk;
    float alpha, beta;
    int c;                 /* Gemm's C, or -1 */
    float *pruned;         /* owned copy (shared by layers reading the same weight) */
    bool owner;            /* this layer frees pruned */
    bool conv;             /* a Conv: weight [M][C/g][kh][kw] as N = M rows of K */
    int bn;                /* a Conv's BatchNormalization folded in first, or -1 */
    float *fbias;          /* with bn: the folded bias [N] (owned) */
} cand;

typedef struct {
    slim_graph *g;
    const slim_prune_opts *o;
    slim_prune_report *rep;
    cand *c;
    int n;
    int *bns;              /* BatchNormalizations folded away: removed at the end */
    int n_bns;
} pass;

static bool is_const_f32_2d(const slim_graph *g, int v)
{
    const slim_tensor *t = slim_pass_const_f32(g, v);
    return t && t->ndim == 2;
}

static bool selected(const slim_prune_opts *o, const slim_node *n)
{
    return !o->n_ops || slim_rewrite_named(o->ops, o->n_ops, n);
}

static slim_status depthwise_layer(pass *p, const slim_node *n, int64_t m, int64_t k,
                                   slim_err *err);

static slim_status collect(pass *p, slim_err *err)
{
    slim_graph *g = p->g;
    p->c = calloc((size_t)g->n_nodes + 1, sizeof(cand));
    p->bns = calloc((size_t)g->n_nodes + 1, sizeof(int));
    if (!p->c || !p->bns)
        return slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        int64_t cm, ck;
        bool dw;
        if (slim__prune_conv_of(g, n, &cm, &ck, &dw) && selected(p->o, n)) {
            slim_status st = dw ? depthwise_layer(p, n, cm, ck, err) : SLIM_OK;
            if (st)
                return st;
            if (dw)
                continue;
            cand *c = &p->c[p->n++];
            *c = (cand){.node = i, .w = n->in[1], .n = cm, .k = ck, .w_nk = true,
                        .alpha = 1.0f, .beta = 1.0f, .c = -1, .conv = true,
                        .bn = slim__prune_conv_bn(g, i)};
            continue;
        }
        bool gemm = strcmp(n->op_type, "Gemm") == 0;
        if (n->domain[0] || (!gemm && strcmp(n->op_type, "MatMul") != 0) || n->n_in < 2 ||
            n->n_out < 1 || !is_const_f32_2d(g, n->in[1]) || !selected(p->o, n))
            continue;
        if (gemm && slim_attr_int(n, "transA", 0) != 0)
            continue;
        cand *c = &p->c[p->n++];
        c->node = i;
        c->bn = -1;
        c->w = n->in[1];
        c->w_nk = gemm && slim_attr_int(n, "transB", 0) != 0;
        const slim_tensor *w = &g->values[c->w].init;
        c->k = w->dims[c->w_nk ? 1 : 0];
        c->n = w->dims[c->w_nk ? 0 : 1];
        c->alpha = gemm ? slim_attr_float(n, "alpha", 1.0f) : 1.0f;
        c->beta = gemm ? slim_attr_float(n, "beta", 1.0f) : 1.0f;
        c->c = gemm && n->n_in > 2 ? n->in[2] : -1;
    }
    /* An ops entry that selects nothing is most likely a typo. */
    for (int i = 0; i < p->o->n_ops; i++) {
        bool hit = false;
        for (int j = 0; j < p->n && !hit; j++) {
            const slim_node *n = &g->nodes[p->c[j].node];
            hit = slim_rewrite_named(&p->o->ops[i], 1, n);
        }
        for (int j = 0; j < p->rep->n_layers && !hit; j++) /* depthwise convs */
            hit = strcmp(p->o->ops[i], p->rep->layers[j].name) == 0 ||
                  strcmp(p->o->ops[i], p->rep->layers[j].op_type) == 0;
        if (!hit)
            return slim_errf(err, SLIM_EINVAL, "pruning: \"ops\" entry \"%s\" names no MatMul "
                             "or Gemm with a constant 2-D float32 weight, nor a Conv with a "
                             "constant 4-D one", p->o->ops[i]);
    }
    return SLIM_OK;
}

/* The pruned copy of candidate i's weight (shared with earlier candidates
 * reading the same weight). */
static slim_status copy_weight(pass *p, int i, slim_err *err)
{
    cand *c = &p->c[i];
    if (c->owner)
        return SLIM_OK; /* made (and folded) before the global cut */
    for (int j = 0; j < i; j++)
        if (p->c[j].w == c->w) {
            c->pruned = p->c[j].pruned;
            return SLIM_OK;
        }
    size_t bytes = sizeof(float) * (size_t)(c->n * c->k);
    c->pruned = malloc(bytes ? bytes : 1);
    if (c->pruned && c->bn >= 0)
        c->fbias = malloc(sizeof(float) * (size_t)c->n);
    if (!c->pruned || (c->bn >= 0 && !c->fbias))
        return slim_errf(err, SLIM_ENOMEM, "out of memory pruning \"%s\"",
                         p->g->values[c->w].name);
    memcpy(c->pruned, p->g->values[c->w].init.data, bytes);
    c->owner = true;
    /* Pruned as the model computes with it: after its BN's scale. */
    if (c->bn >= 0)
        slim__prune_conv_fold(p->g, &p->g->nodes[c->node], &p->g->nodes[c->bn], c->pruned,
                              c->n, c->k, c->fbias);
    return SLIM_OK;
}

static slim_status add_layer(pass *p, const char *name, const char *op, const char *weight,
                             slim_prune_layer **out, slim_err *err);

/* A depthwise conv (group = C = M) is listed, not pruned: 9 weights a
 * channel are too few for csr or 2:4 to pay (docs/prune.md). */
static slim_status depthwise_layer(pass *p, const slim_node *n, int64_t m, int64_t k,
                                   slim_err *err)
{
    slim_prune_layer *l;
    slim_status st = add_layer(p, n->name, n->op_type, p->g->values[n->in[1]].name, &l, err);
    if (st)
        return st;
    l->k = k;
    l->n = m;
    l->bytes_before = l->bytes_after = sizeof(float) * (size_t)(m * k);
    snprintf(l->why, sizeof(l->why), "depthwise conv (group = C = M, %lld weights a channel): "
             "not pruned", (long long)k);
    return SLIM_OK;
}

/* ---- masks ----------------------------------------------------------------- */

static slim_status apply_mask(const char *file, const char *name, const slim_tensor *mask,
                              float *w, const slim_tensor *weight, slim_err *err)
{
    static const slim_dtype ok[] = {SLIM_BOOL, SLIM_U8, SLIM_I8, SLIM_U16, SLIM_I16, SLIM_U32,
                                    SLIM_I32, SLIM_U64, SLIM_I64, SLIM_F16, SLIM_F32, SLIM_F64};
    bool dtype_ok = false;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        dtype_ok |= mask->dtype == ok[i];
    if (!dtype_ok)
        return slim_errf(err, SLIM_ETYPE, "mask file %s: \"%s\": dtype %s is not bool, integer "
                         "or float", file, name, slim_dtype_name(mask->dtype));
    bool same = mask->ndim == weight->ndim;
    for (int d = 0; same && d < mask->ndim; d++)
        same = mask->dims[d] == weight->dims[d];
    if (!same) {
        char a[128], b[128];
        return slim_errf(err, SLIM_ESHAPE, "mask file %s: \"%s\": shape %s does not match the "
                         "weight's %s", file, name, slim_shape_str(mask->ndim, mask->dims, a,
                         sizeof(a)), slim_shape_str(weight->ndim, weight->dims, b, sizeof(b)));
    }
    int64_t n = slim_tensor_numel(mask);
    for (int64_t i = 0; i < n; i++) {
        double v = slim_load_f64(mask->dtype, mask->data, i);
        if (v != 0.0 && v != 1.0)
            return slim_errf(err, SLIM_EINVAL, "mask file %s: \"%s\": element %lld is %g; a "
                             "mask holds only 0 and 1", file, name, (long long)i, v);
        if (v == 0.0)
            w[i] = 0.0f;
    }
    return SLIM_OK;
}

static slim_status add_layer(pass *p, const char *name, const char *op, const char *weight,
                             slim_prune_layer **out, slim_err *err)
{
    slim_prune_report *r = p->rep;
    slim_prune_layer *ls = realloc(r->layers, sizeof(*ls) * (size_t)(r->n_layers + 1));
    if (!ls)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    r->layers = ls;
    slim_prune_layer *l = &ls[r->n_layers++];
    memset(l, 0, sizeof(*l));
    l->name = strdup(name);
    l->op_type = strdup(op);
    l->weight = strdup(weight);
    l->storage = "dense";
    *out = l;
    return l->name && l->op_type && l->weight ? SLIM_OK
                                              : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

/* A mask on an initializer no candidate reads: zeroed in place of the
 * original (a new tensor), stored dense. */
static slim_status mask_other(pass *p, const char *file, int v, const slim_tensor *mask,
                              slim_err *err)
{
    slim_graph *g = p->g;
    slim_value *val = &g->values[v];
    if (val->init.dtype != SLIM_F32 || val->init.device)
        return slim_errf(err, SLIM_ETYPE, "mask file %s: \"%s\": the initializer is %s; only "
                         "float32 weights are pruned", file, val->name,
                         slim_dtype_name(val->init.dtype));
    slim_tensor t = {.dtype = SLIM_F32, .ndim = val->init.ndim};
    memcpy(t.dims, val->init.dims, sizeof(t.dims));
    slim_status st = slim_tensor_alloc(&t, err);
    if (st)
        return st;
    if (slim_tensor_nbytes(&t))
        memcpy(t.data, val->init.data, slim_tensor_nbytes(&t));
    if ((st = apply_mask(file, val->name, mask, t.data, &val->init, err))) {
        slim_tensor_release(&t);
        return st;
    }
    slim_prune_layer *l;
    if ((st = add_layer(p, val->name, "", val->name, &l, err))) {
        slim_tensor_release(&t);
        return st;
    }
    int64_t n = slim_tensor_numel(&t), z = 0;
    for (int64_t i = 0; i < n; i++)
        z += ((float *)t.data)[i] == 0.0f;
    l->k = n;
    l->n = 1;
    l->sparsity = n ? (double)z / (double)n : 0;
    l->bytes_before = l->bytes_after = slim_tensor_nbytes(&t);
    snprintf(l->why, sizeof(l->why), "not a pruned MatMul/Gemm/Conv weight (a bias, a "
             "depthwise conv): zeros stored dense");
    p->rep->zeros += z;
    p->rep->elements += n;
    slim_tensor_release(&val->init);
    val->init = t;
    return SLIM_OK;
}

/* Every name in the mask file must be an initializer; masks on
 * initializers no candidate reads are applied now (dense). The candidates'
 * masks are read one at a time as their layers are pruned. */
static slim_status check_masks(pass *p, slim_npz *z, slim_err *err)
{
    const char *file = p->o->masks;
    slim_status st = SLIM_OK;
    for (int i = 0; i < slim_npz_count(z) && !st; i++) {
        const char *name = slim_npz_name(z, i);
        int v = slim_graph_find_value(p->g, name);
        if (v < 0 || p->g->values[v].kind != SLIM_VALUE_INITIALIZER)
            return slim_errf(err, SLIM_ENOTFOUND, "mask file %s: \"%s\" names no initializer "
                             "of the model", file, name);
        bool cand = false;
        for (int j = 0; j < p->n && !cand; j++)
            cand = p->c[j].w == v;
        if (cand)
            continue;
        slim_tensor mask;
        if ((st = slim_npz_load(z, i, slim_tensor_numel(&p->g->values[v].init) * 8 + 65536 + 128,
                                &mask, err)))
            break;
        st = mask_other(p, file, v, &mask, err);
        slim_tensor_release(&mask);
    }
    return st;
}

/* Candidate i's mask applied to its copy; *found false when the file has
 * none for its weight (the layer is left as it is). */
static slim_status mask_layer(pass *p, slim_npz *z, int i, bool *found, slim_err *err)
{
    cand *c = &p->c[i];
    const char *name = p->g->values[c->w].name;
    *found = false;
    for (int e = 0; e < slim_npz_count(z); e++) {
        if (strcmp(slim_npz_name(z, e), name) != 0)
            continue;
        slim_tensor mask;
        slim_status st = slim_npz_load(z, e, (size_t)(c->n * c->k) * 8 + 65536 + 128, &mask, err);
        if (!st && !(st = copy_weight(p, i, err)))
            st = apply_mask(p->o->masks, name, &mask, c->pruned, &p->g->values[c->w].init, err);
        slim_tensor_release(&mask);
        *found = true;
        return st;
    }
    return SLIM_OK;
}

/* ---- storage ------------------------------------------------------------------ */

static slim_status rewrite_node(slim_node *n, const char *enc, int64_t k, int n_in, const int *in,
                                slim_err *err)
{
    slim_attr *a = calloc(2, sizeof(*a));
    if (!a || !slim_rewrite_attr_str(&a[0], "encoding", enc) ||
        !slim_rewrite_attr_int(&a[1], "K", k)) {
        for (int i = 0; a && i < 2; i++)
            slim_attr_clear(&a[i]);
        free(a);
        return slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
    }
    return slim_rewrite_node(n, "SparseMatMul", n_in, in, n->out[0], a, 2, "pruning", err);
}

static bool storage_is(const pass *p, const char *s)
{
    return p->o->storage && strcmp(p->o->storage, s) == 0;
}

/* Why layer c stays dense, or NULL when sparse pays; *bytes gets the sparse
 * size. */
static const char *dense_reason(const pass *p, const cand *c, bool two4, int64_t nnz,
                                size_t *bytes, char *buf, size_t cap)
{
    const slim_graph *g = p->g;
    size_t dense = sizeof(float) * (size_t)(c->n * c->k);
    double density = (double)nnz / (double)(c->n * c->k);
    *bytes = two4 ? slim_sparse_24_bytes(c->n, c->k, 4) : slim_sparse_csr_bytes(c->n, c->k, nnz, 4);
    if (c->c >= 0) {
        const slim_value *cv = &g->values[c->c];
        int64_t cn = cv->kind == SLIM_VALUE_INITIALIZER ? slim_tensor_numel(&cv->init) : 0;
        if (cv->kind != SLIM_VALUE_INITIALIZER || cv->init.dtype != SLIM_F32 ||
            (cn != c->n && cn != 1) || (cv->init.ndim == 2 && cv->init.dims[0] != 1))
            return "Gemm's C is not a constant per-channel bias";
    }
    if (!isfinite(c->alpha) || !isfinite(c->beta))
        return "Gemm's alpha or beta is not finite";
    bool forced = storage_is(p, "sparse");
    const char *conv_why =
        c->conv ? slim__prune_conv_why(g, &g->nodes[c->node], c->n, forced, two4) : NULL;
    if (conv_why)
        return conv_why;
    if (nnz >= (1LL << 31))
        return "over 2^31 nonzeros";
    if (storage_is(p, "dense"))
        return "storage \"dense\" asked for";
    if (forced)
        return NULL;
    if (*bytes >= dense) {
        snprintf(buf, cap, "%s would take %.2fx the dense bytes at %.0f%% sparsity",
                 two4 ? "2:4" : "csr", (double)*bytes / (double)dense, 100 * (1 - density));
        return buf;
    }
    double most = slim_prune_max_density(g, &g->nodes[c->node], c->conv, c->n, p->o->batch);
    if (!two4 && density > most) {
        int64_t rows = c->conv ? -1 : slim_prune_rows(g, &g->nodes[c->node], p->o->batch);
        long long b = p->o->batch > 0 ? p->o->batch : 1;
        snprintf(buf, cap, "%.0f%% sparse: csr is slower than dense above %.0f%% density "
                 "(measured break-even for %s at batch %lld%s)", 100 * (1 - density),
                 100 * most, c->conv ? "Conv" : "MatMul", b,
                 rows < 0 && !c->conv ? ", rows unknown" : "");
        return buf;
    }
    return NULL;
}

/* A conv kept dense whose BN was folded into its pruned copy. */
static slim_status dense_folded(pass *p, cand *c, slim_err *err)
{
    slim_status st = slim__prune_conv_dense(p->g, c->node, c->bn, c->pruned, c->fbias, err);
    if (!st)
        p->bns[p->n_bns++] = c->bn;
    return st;
}

static slim_status store_layer(pass *p, cand *c, slim_prune_layer *l, slim_err *err)
{
    slim_graph *g = p->g;
    bool two4 = strcmp(p->o->method, "2:4") == 0;
    int64_t nnz = slim_sparse_count_nnz(c->pruned, c->n, c->k, c->w_nk), total = c->n * c->k;
    l->k = c->k;
    l->n = c->n;
    l->sparsity = total ? 1.0 - (double)nnz / (double)total : 0;
    l->bytes_before = sizeof(float) * (size_t)total;
    if (c->c >= 0 && g->values[c->c].kind == SLIM_VALUE_INITIALIZER)
        l->bytes_before += slim_tensor_nbytes(&g->values[c->c].init);
    const slim_node *node = &g->nodes[c->node];
    bool conv_bias = c->conv && node->n_in > 2 && node->in[2] >= 0;
    if (conv_bias)
        l->bytes_before += slim_tensor_nbytes(&g->values[node->in[2]].init);
    size_t sparse_bytes = 0;
    const char *why = dense_reason(p, c, two4, nnz, &sparse_bytes, l->why, sizeof(l->why));
    if (why) {
        if (why != l->why)
            snprintf(l->why, sizeof(l->why), "%s", why);
        l->bytes_after = l->bytes_before;
        return c->bn >= 0 ? dense_folded(p, c, err) : SLIM_OK;
    }
    slim_tensor vals = {0}, idx = {0}, rp = {0}, bias = {0};
    slim_status st;
    if (two4) {
        int64_t gr = slim_sparse_24_groups(c->k);
        st = slim_rewrite_alloc_tensor(&vals, SLIM_F32, 2, c->n, 2 * gr, err);
        if (!st)
            st = slim_rewrite_alloc_tensor(&idx, SLIM_U8, 2, c->n, slim_sparse_24_idx_bytes(c->k),
                                           err);
        if (!st && !slim_sparse_24_encode(c->pruned, c->n, c->k, c->w_nk, c->alpha, vals.data,
                                          idx.data))
            st = slim_errf(err, SLIM_EINTERNAL, "weight \"%s\" is not 2:4 after pruning",
                           g->values[c->w].name);
    } else {
        st = slim_rewrite_alloc_tensor(&vals, SLIM_F32, 1, nnz, 0, err);
        if (!st)
            st = slim_rewrite_alloc_tensor(&idx, slim_sparse_csr_idtype(c->k), 1, nnz, 0,
                                           err);
        if (!st)
            st = slim_rewrite_alloc_tensor(&rp, SLIM_I32, 1, c->n + 1, 0, err);
        if (!st)
            slim_sparse_csr_encode(c->pruned, c->n, c->k, c->w_nk, c->alpha, vals.data,
                                   idx.data, rp.data);
    }
    if (!st && (c->fbias || conv_bias)) {
        const float *src = c->fbias ? c->fbias : g->values[node->in[2]].init.data;
        if (!(st = slim_rewrite_alloc_tensor(&bias, SLIM_F32, 1, c->n, 0, err)))
            memcpy(bias.data, src, sizeof(float) * (size_t)c->n);
    } else if (!st && c->c >= 0) {
        const slim_tensor *ct = &g->values[c->c].init;
        int64_t cn = slim_tensor_numel(ct);
        if (!(st = slim_rewrite_alloc_tensor(&bias, SLIM_F32, 1, c->n, 0, err)))
            for (int64_t j = 0; j < c->n; j++)
                ((float *)bias.data)[j] = c->beta * ((const float *)ct->data)[cn == 1 ? 0 : j];
    }
    int in[5] = {g->nodes[c->node].in[0], -1, -1, -1, -1};
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[c->node].name);
    if (!st && ((in[1] = slim_graph_add_initializer(g, base, ".sparse_values", &vals, err)) < 0 ||
                (in[2] = slim_graph_add_initializer(g, base, ".sparse_indices", &idx, err)) < 0 ||
                (rp.data && (in[3] = slim_graph_add_initializer(g, base, ".sparse_rowptr", &rp,
                                                                 err)) < 0) ||
                (bias.data && (in[4] = slim_graph_add_initializer(g, base, ".sparse_bias",
                                                                   &bias, err)) < 0)))
        st = SLIM_ENOMEM;
    if (st) {
        slim_tensor_release(&vals);
        slim_tensor_release(&idx);
        slim_tensor_release(&rp);
        slim_tensor_release(&bias);
        return st;
    }
    l->storage = two4 ? "2:4" : "csr";
    if (c->conv) /* inspect says why a conv is sparse too */
        slim__prune_conv_why_sparse(l->why, sizeof(l->why), two4, nnz, c->n, c->k,
                                    slim_prune_max_density(g, node, true, c->n, p->o->batch),
                                    p->o->batch, storage_is(p, "sparse"));
    l->bytes_after = sparse_bytes + (bias.data ? sizeof(float) * (size_t)c->n : 0);
    int n_in = in[4] >= 0 ? 5 : in[3] >= 0 ? 4 : 3;
    if (!c->conv) { /* a forced 2:4 layer says so: the load's expand pass leaves it 2:4 */
        slim_status rs = rewrite_node(&g->nodes[c->node], l->storage, c->k, n_in, in, err);
        return rs || !two4 || !storage_is(p, "sparse")
                   ? rs : slim_pass_set_str(&g->nodes[c->node], "storage", "sparse", err);
    }
    int old_b = conv_bias ? node->in[2] : -1, out = node->out[0];
    if (c->bn >= 0) {
        out = g->nodes[c->bn].out[0];
        p->bns[p->n_bns++] = c->bn;
    }
    if ((st = slim__prune_conv_rewrite(g, &g->nodes[c->node], l->storage, c->k,
                                       storage_is(p, "sparse"), n_in, in, out, err)))
        return st;
    slim__prune_release_unread(g, old_b);
    return SLIM_OK;
}

/* Candidate i's weight once its last reader is done: released when no node
 * reads it any more, else given its pruned copy (dense layers, other
 * readers). The copy is freed either way, so the load holds the model plus
 * one pruned layer at most. */
static slim_status finish_weight(pass *p, int i, slim_err *err)
{
    slim_graph *g = p->g;
    cand *c = &p->c[i];
    slim_value *val = &g->values[c->w];
    bool read = val->is_output;
    for (int j = 0; j < g->n_nodes && !read; j++)
        for (int q = 0; q < g->nodes[j].n_in && !read; q++)
            read = g->nodes[j].in[q] == c->w;
    slim_status st = SLIM_OK;
    if (!read) {
        slim_tensor_release(&val->init);
        memset(&val->init, 0, sizeof(val->init));
        val->kind = SLIM_VALUE_INTERMEDIATE;
    } else {
        slim_tensor t = {.dtype = SLIM_F32, .ndim = val->init.ndim}; /* 2-D, or a Conv's 4 */
        memcpy(t.dims, val->init.dims, sizeof(t.dims));
        if (!(st = slim_tensor_alloc(&t, err))) {
            memcpy(t.data, c->pruned, slim_tensor_nbytes(&t));
            slim_tensor_release(&val->init);
            val->init = t;
        }
    }
    for (int j = 0; j < p->n; j++)
        if (j != i && p->c[j].pruned == c->pruned)
            p->c[j].pruned = NULL;
    free(c->pruned);
    free(c->fbias);
    c->pruned = NULL;
    c->fbias = NULL;
    c->owner = false;
    return st;
}

static slim_status prune_layer(pass *p, int i, slim_npz *z, slim__prune_cut *global,
                               slim_err *err)
{
    cand *c = &p->c[i];
    const slim_prune_opts *o = p->o;
    bool shared = false;
    for (int j = 0; j < i && !shared; j++)
        shared = p->c[j].w == c->w;
    slim_status st = SLIM_OK;
    if (shared) { /* pruned with the first layer reading it */
        for (int j = 0; j < i; j++)
            if (p->c[j].w == c->w && p->c[j].pruned)
                c->pruned = p->c[j].pruned;
        if (!c->pruned)
            return SLIM_OK; /* no mask for it */
    } else if (z) {
        bool found;
        if ((st = mask_layer(p, z, i, &found, err)) || !found)
            return st;
    } else {
        if ((st = copy_weight(p, i, err)))
            return st;
        int64_t len = c->n * c->k;
        if (strcmp(o->method, "2:4") == 0) {
            slim_prune_24(c->pruned, c->n, c->k, c->w_nk);
        } else if (global) {
            slim__prune_apply_cut(c->pruned, len, global);
        } else {
            slim__prune_cut lc;
            const float *src = c->pruned;
            if ((st = slim__prune_find_cut(&src, &len, 1,
                                           (int64_t)nearbyint(o->amount * (double)len), &lc, err)))
                return st;
            slim__prune_apply_cut(c->pruned, len, &lc);
        }
    }
    slim_prune_layer *l;
    const slim_node *n = &p->g->nodes[c->node];
    if ((st = add_layer(p, n->name, n->op_type, p->g->values[c->w].name, &l, err)))
        return st;
    if ((st = store_layer(p, c, l, err)))
        return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&p->g->nodes[c->node]));
    int64_t total = c->n * c->k;
    p->rep->zeros += (int64_t)llround(l->sparsity * (double)total);
    p->rep->elements += total;
    p->rep->bytes_before += l->bytes_before;
    p->rep->bytes_after += l->bytes_after;
    return SLIM_OK;
}

static slim_status run_pass(pass *p, slim_err *err)
{
    const slim_prune_opts *o = p->o;
    slim_status st = collect(p, err);
    if (st)
        return st;
    slim_npz *z = NULL;
    slim__prune_cut global, *gp = NULL;
    if (strcmp(o->method, "mask") == 0) {
        if ((st = slim_npz_open(o->masks, &z, err)))
            return slim_err_prefix(err, "pruning: ");
        st = check_masks(p, z, err);
    } else if (strcmp(o->method, "magnitude") == 0 && o->global) {
        /* The cut over all selected weights, read in place. */
        const float **ws = malloc(sizeof(float *) * (size_t)(p->n + 1));
        int64_t *len = malloc(sizeof(int64_t) * (size_t)(p->n + 1)), total = 0;
        int na = 0;
        if (!ws || !len)
            st = slim_errf(err, SLIM_ENOMEM, "out of memory pruning");
        for (int i = 0; i < p->n && !st; i++) {
            bool seen = false;
            for (int j = 0; j < i && !seen; j++)
                seen = p->c[j].w == p->c[i].w;
            if (seen)
                continue;
            /* A conv with a BN is ranked by its folded weights, so those
             * copies are made now (the rest are read in place). */
            if (p->c[i].bn >= 0 && (st = copy_weight(p, i, err)))
                break;
            ws[na] = p->c[i].bn >= 0 ? p->c[i].pruned : p->g->values[p->c[i].w].init.data;
            len[na] = p->c[i].n * p->c[i].k;
            total += len[na++];
        }
        if (!st)
            st = slim__prune_find_cut(ws, len, na, (int64_t)nearbyint(o->amount * (double)total),
                                      &global, err);
        gp = &global;
        free(ws);
        free(len);
    }
    for (int i = 0; i < p->n && !st; i++) {
        st = prune_layer(p, i, z, gp, err);
        bool last = true;
        for (int j = i + 1; j < p->n && last; j++)
            last = p->c[j].w != p->c[i].w;
        if (!st && last && p->c[i].pruned) {
            int owner = i;
            for (int j = 0; j < i; j++)
                if (p->c[j].w == p->c[i].w) {
                    owner = j;
                    break;
                }
            st = finish_weight(p, owner, err);
        }
    }
    slim_npz_close(z);
    return st ? st : slim__prune_conv_finish(p->g, p->bns, p->n_bns, err);
}

slim_status slim_prune(slim_graph *g, const slim_prune_opts *o, slim_prune_report *rep,
                       slim_err *err)
{
    slim_prune_report local = {0};
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof(*rep));
    if (!o || !o->method || !o->method[0])
        return SLIM_OK;
    slim_status st = slim_prune_check_opts(o, err);
    if (st)
        return st;
    rep->method = strcmp(o->method, "2:4") == 0 ? "2:4"
                  : strcmp(o->method, "mask") == 0 ? "mask" : "magnitude";
    pass p = {g, o, rep, NULL, 0, NULL, 0};
    st = run_pass(&p, err);
    for (int i = 0; p.c && i < p.n; i++) {
        if (p.c[i].owner)
            free(p.c[i].pruned);
        free(p.c[i].fbias);
    }
    free(p.c);
    free(p.bns);
    if (rep == &local || st)
        slim_prune_report_free(rep);
    return st;
}

void slim_prune_report_free(slim_prune_report *rep)
{
    if (!rep)
        return;
    for (int i = 0; i < rep->n_layers; i++) {
        free(rep->layers[i].name);
        free(rep->layers[i].op_type);
        free(rep->layers[i].weight);
    }
    free(rep->layers);
    memset(rep, 0, sizeof(*rep));
}
