/* rewrite_pattern.c - the rewrite kit's pattern matching (rewrite.h), for
 * the passes that recognize spelled-out functions. */
#include "rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

slim_status slim__pattern_init(slim__pattern *p, slim_graph *g, slim_err *err)
{
    memset(p, 0, sizeof(*p));
    p->g = g;
    slim_status st = slim_pass_walk_init(&p->w, g, err);
    if (st)
        return st;
    int64_t slots = 0;
    for (int v = 0; v < g->n_values; v++)
        slots += p->w.uses.readers[v];
    p->start = calloc((size_t)g->n_values + 1, sizeof(int));
    p->readers = malloc(sizeof(int) * ((size_t)slots + 1));
    int *fill = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!p->start || !p->readers || !fill) {
        free(fill);
        return slim__pattern_finish(p, slim_errf(err, SLIM_ENOMEM,
                                                 "out of memory optimizing the graph"));
    }
    for (int v = 0; v < g->n_values; v++)
        p->start[v + 1] = p->start[v] + p->w.uses.readers[v];
    memcpy(fill, p->start, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0)
                p->readers[fill[g->nodes[i].in[k]]++] = i;
    free(fill);
    return SLIM_OK;
}

slim_status slim__pattern_finish(slim__pattern *p, slim_status st)
{
    free(p->start);
    free(p->readers);
    p->start = p->readers = NULL;
    return p->g && p->w.dead ? slim_pass_walk_finish(&p->w, p->g, st) : st;
}

bool slim__pattern_is(const slim_node *n, const char *op)
{
    return n && (!n->domain[0] || strcmp(n->domain, "ai.onnx") == 0) &&
           strcmp(n->op_type, op) == 0;
}

slim_node *slim__pattern_producer(const slim__pattern *p, int v, const char *op)
{
    if (v < 0 || v >= p->w.uses.n_values || p->w.uses.producer[v] < 0)
        return NULL;
    int i = p->w.uses.producer[v];
    slim_node *n = &p->g->nodes[i];
    return !p->w.dead[i] && n->n_out == 1 && n->out[0] == v && slim__pattern_is(n, op) ? n
                                                                                       : NULL;
}

slim_node *slim__pattern_sole(const slim__pattern *p, int v, const char *op)
{
    if (v < 0 || v >= p->w.uses.n_values || p->w.uses.readers[v] != 1 ||
        p->g->values[v].is_output)
        return NULL;
    int i = p->readers[p->start[v]];
    slim_node *n = &p->g->nodes[i];
    return !p->w.dead[i] && n->n_out == 1 && n->out[0] >= 0 && !n->n_implicit &&
                   slim__pattern_is(n, op)
               ? n
               : NULL;
}

int slim__pattern_other(const slim_node *n, int x)
{
    if (n->n_in != 2 || n->n_out != 1 || x < 0)
        return -1;
    return n->in[0] == x ? n->in[1] : n->in[1] == x ? n->in[0] : -1;
}

bool slim__pattern_scalar(const slim_graph *g, int v, int max_ndim, double *c)
{
    if (v < 0 || v >= g->n_values || g->values[v].kind != SLIM_VALUE_INITIALIZER)
        return false;
    const slim_tensor *t = &g->values[v].init;
    if (t->device || !t->data || t->ndim > max_ndim || slim_tensor_numel(t) != 1)
        return false;
    switch (t->dtype) {
    case SLIM_F32:
    case SLIM_F64:
    case SLIM_I32:
    case SLIM_I64:
        *c = slim_load_f64(t->dtype, t->data, 0);
        return true;
    default:
        return false;
    }
}

bool slim__pattern_near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b);
}

slim_status slim__pattern_become(slim_node *n, const char *op_type, int opset, int n_in,
                                 const int *in, slim_err *err)
{
    int *ins = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
    char *ot = strdup(op_type), *dom = strdup("");
    if (!ins || !ot || !dom) {
        free(ins);
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    memcpy(ins, in, sizeof(int) * (size_t)n_in);
    for (int a = 0; a < n->n_attrs; a++)
        slim_attr_clear(&n->attrs[a]);
    free(n->attrs);
    n->attrs = NULL;
    n->n_attrs = 0;
    free(n->in);
    free(n->op_type);
    free(n->domain);
    n->in = ins;
    n->n_in = n_in;
    n->n_implicit = 0;
    n->op_type = ot;
    n->domain = dom;
    n->opset = opset;
    return SLIM_OK;
}
