/*
 * rewrite_layer.c - the rewrite kit's layer rewriting (rewrite.h), which
 * the compression passes (quant/: int8, half, prune) share.
 */
#include "rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

slim_status slim_rewrite_init(slim_rewrite *r, slim_graph *g, int new_per_node, const char *what,
                              slim_err *err)
{
    memset(r, 0, sizeof(*r));
    r->g = g;
    r->what = what;
    r->first_new_value = g->n_values;
    /* New values are added as layers are rewritten: the per-value arrays
     * have room for them up front. */
    size_t nv = (size_t)g->n_values + (size_t)new_per_node * (size_t)g->n_nodes + 1;
    r->uses.readers = calloc(nv, sizeof(int));
    r->uses.reader = calloc(nv, sizeof(int));
    r->readers_before = calloc(nv, sizeof(int));
    r->dead = calloc((size_t)g->n_nodes + 1, sizeof(bool));
    if (!r->uses.readers || !r->uses.reader || !r->readers_before || !r->dead)
        return slim_rewrite_finish(r, slim_errf(err, SLIM_ENOMEM, "out of memory %s", what));
    return SLIM_OK;
}

void slim_rewrite_count(slim_rewrite *r)
{
    slim_graph *g = r->g;
    r->uses.n_values = g->n_values;
    memset(r->uses.readers, 0, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0 && !r->dead[i]) {
                r->uses.readers[g->nodes[i].in[k]]++;
                r->uses.reader[g->nodes[i].in[k]] = i;
            }
}

void slim_rewrite_begin(slim_rewrite *r)
{
    slim_rewrite_count(r);
    memcpy(r->readers_before, r->uses.readers, sizeof(int) * (size_t)r->g->n_values);
}

void slim_rewrite_drop_unread(slim_rewrite *r, bool recount)
{
    slim_graph *g = r->g;
    if (recount)
        slim_rewrite_count(r);
    for (int v = 0; v < r->first_new_value; v++) {
        slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || r->uses.readers[v] || val->is_output ||
            !r->readers_before[v])
            continue;
        slim_tensor_release(&val->init);
        memset(&val->init, 0, sizeof(val->init));
        val->kind = SLIM_VALUE_INTERMEDIATE;
    }
}

slim_status slim_rewrite_finish(slim_rewrite *r, slim_status st)
{
    if (!st) {
        slim_rewrite_drop_unread(r, true);
        slim_graph_remove_nodes(r->g, r->dead);
    }
    free(r->uses.readers);
    free(r->uses.reader);
    free(r->readers_before);
    free(r->dead);
    memset(r, 0, sizeof(*r));
    return st;
}

bool slim_rewrite_named(const char *const *names, int n, const slim_node *node)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], node->name) == 0 || strcmp(names[i], node->op_type) == 0)
            return true;
    return false;
}

slim_node *slim_rewrite_sole_reader(const slim_rewrite *r, int v, const char *op_type)
{
    slim_node *n = slim_pass_sole_reader(r->g, &r->uses, v, op_type);
    return n && !r->dead[n - r->g->nodes] ? n : NULL;
}

slim_rewrite_kind slim_rewrite_layer_kind(const slim_graph *g, const slim_node *n,
                                          int conv_min_ndim, int conv_max_ndim, int *weight)
{
    bool mm = strcmp(n->op_type, "MatMul") == 0, gemm = strcmp(n->op_type, "Gemm") == 0;
    bool gather = strcmp(n->op_type, "Gather") == 0, conv = strcmp(n->op_type, "Conv") == 0;
    if (n->domain[0] || !(mm || gemm || gather || conv) || n->n_in < 2 || n->n_out < 1)
        return SLIM_REWRITE_NONE;
    *weight = gather ? n->in[0] : n->in[1];
    const slim_tensor *w = slim_pass_const_f32(g, *weight);
    if (!w || (conv ? w->ndim < conv_min_ndim || w->ndim > conv_max_ndim : w->ndim != 2))
        return SLIM_REWRITE_NONE;
    return conv ? SLIM_REWRITE_CONV : gather ? SLIM_REWRITE_GATHER : SLIM_REWRITE_LINEAR;
}

const char *slim_rewrite_gather_why(const slim_node *n)
{
    int64_t axis = slim_attr_int(n, "axis", 0);
    return axis != 0 && axis != -2 ? "gathers along axis 1" : NULL;
}

slim_status slim_rewrite_alloc_tensor(slim_tensor *t, slim_dtype dt, int ndim, int64_t d0,
                                      int64_t d1, slim_err *err)
{
    memset(t, 0, sizeof(*t));
    t->dtype = dt;
    t->ndim = ndim;
    t->dims[0] = d0;
    t->dims[1] = d1;
    return slim_tensor_alloc(t, err);
}

bool slim_rewrite_attr_int(slim_attr *a, const char *name, int64_t v)
{
    a->name = strdup(name);
    a->type = SLIM_ATTR_INT;
    a->i = v;
    return a->name != NULL;
}

bool slim_rewrite_attr_str(slim_attr *a, const char *name, const char *s)
{
    a->name = strdup(name);
    a->s = strdup(s);
    a->type = SLIM_ATTR_STRING;
    return a->name && a->s;
}

slim_status slim_rewrite_node(slim_node *n, const char *op_type, int n_in, const int *in, int out,
                              slim_attr *attrs, int na, const char *what, slim_err *err)
{
    char *ot = strdup(op_type), *dom = strdup("com.slimserve");
    int *ins = malloc(sizeof(int) * (size_t)n_in);
    if (!ot || !dom || !ins) {
        for (int a = 0; a < na; a++)
            slim_attr_clear(&attrs[a]);
        free(attrs);
        free(ins);
        free(dom);
        free(ot);
        return slim_errf(err, SLIM_ENOMEM, "out of memory %s", what);
    }
    memcpy(ins, in, sizeof(int) * (size_t)n_in);
    for (int a = 0; a < n->n_attrs; a++)
        slim_attr_clear(&n->attrs[a]);
    free(n->attrs);
    free(n->op_type);
    free(n->domain);
    free(n->in);
    n->attrs = attrs;
    n->n_attrs = na;
    n->op_type = ot;
    n->domain = dom;
    n->opset = 1;
    n->in = ins;
    n->n_in = n_in;
    n->out[0] = out;
    n->n_out = 1;
    return SLIM_OK;
}

slim_status slim_rewrite_matmul_node(slim_node *n, const char *op_type, int n_in, const int *in,
                                     int out, int64_t k, int64_t nn, bool relu, const char *what,
                                     slim_err *err)
{
    int na = k > 0 ? 1 + (nn > 0) + relu : 0;
    slim_attr *attrs = na ? calloc((size_t)na, sizeof(*attrs)) : NULL;
    bool ok = !na || attrs;
    if (ok && k > 0) {
        int a = 0;
        ok = slim_rewrite_attr_int(&attrs[a++], "K", k);
        if (ok && nn > 0)
            ok = slim_rewrite_attr_int(&attrs[a++], "N", nn);
        if (ok && relu)
            ok = slim_rewrite_attr_str(&attrs[a], "activation", "Relu");
    }
    if (!ok) {
        for (int a = 0; a < na; a++)
            slim_attr_clear(&attrs[a]);
        free(attrs);
        return slim_errf(err, SLIM_ENOMEM, "out of memory %s", what);
    }
    return slim_rewrite_node(n, op_type, n_in, in, out, attrs, na, what, err);
}

void slim_rewrite_linear_geometry(const slim_graph *g, const slim_node *n, slim_rewrite_linear *l)
{
    bool gemm = strcmp(n->op_type, "Gemm") == 0;
    memset(l, 0, sizeof(*l));
    l->x = n->in[0];
    l->w = n->in[1];
    l->c = gemm && n->n_in > 2 ? n->in[2] : -1;
    l->alpha = gemm ? slim_attr_float(n, "alpha", 1.0f) : 1.0f;
    l->beta = gemm ? slim_attr_float(n, "beta", 1.0f) : 1.0f;
    l->w_nk = gemm && slim_attr_int(n, "transB", 0) != 0;
    const slim_tensor *w = &g->values[l->w].init;
    l->k = w->dims[l->w_nk ? 1 : 0];
    l->n = w->dims[l->w_nk ? 0 : 1];
}

const char *slim_rewrite_linear_of(const slim_graph *g, const slim_node *n, int64_t max_k,
                                   int64_t max_n, const char *too_big, slim_rewrite_linear *l)
{
    slim_rewrite_linear_geometry(g, n, l);
    if (strcmp(n->op_type, "Gemm") == 0 && slim_attr_int(n, "transA", 0) != 0)
        return "transA is set";
    if (l->k < 1 || l->n < 1)
        return "empty weight";
    if (l->k > max_k || l->n > max_n)
        return too_big;
    if (l->c >= 0) {
        const slim_tensor *c = slim_pass_const_f32(g, l->c);
        int64_t cn = c ? slim_tensor_numel(c) : 0;
        if (!c || (cn != l->n && cn != 1) || (c->ndim == 2 && c->dims[0] != 1))
            return "C is not a constant per-channel bias";
    }
    if (!isfinite(l->alpha) || !isfinite(l->beta))
        return "alpha or beta is not finite";
    return NULL;
}

slim_status slim_rewrite_linear_bias(const slim_rewrite *r, const slim_node *n,
                                     const slim_rewrite_linear *l, slim_tensor *bias, int *add,
                                     size_t *bytes_before, slim_err *err)
{
    slim_graph *g = r->g;
    int out = n->out[0], src = l->c;
    float mul = l->beta;
    memset(bias, 0, sizeof(*bias));
    *add = -1;
    if (src < 0) {
        slim_node *a = slim_rewrite_sole_reader(r, out, "Add");
        if (a && a->n_in == 2) {
            int other = a->in[0] == out ? a->in[1] : a->in[0];
            const slim_tensor *b = slim_pass_const_f32(g, other);
            if (b && a->in[0] != a->in[1] && b->ndim <= 1 && slim_tensor_numel(b) == l->n) {
                src = other;
                mul = 1.0f;
                *add = (int)(a - g->nodes);
            }
        }
    }
    if (src < 0)
        return SLIM_OK;
    slim_status st = slim_rewrite_alloc_tensor(bias, SLIM_F32, 1, l->n, 0, err);
    if (st)
        return st;
    const slim_tensor *c = &g->values[src].init;
    int64_t cn = slim_tensor_numel(c);
    for (int64_t j = 0; j < l->n; j++)
        ((float *)bias->data)[j] = mul * ((const float *)c->data)[cn == 1 ? 0 : j];
    *bytes_before += slim_tensor_nbytes(c);
    return SLIM_OK;
}
