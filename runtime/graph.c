/*
 * graph.c - building, sorting and freeing the graph IR.
 *
 * Value names are looked up through an open-addressing hash table so that
 * loading a graph with tens of thousands of values stays linear.
 */
#include "op_registry.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

slim_graph *slim_graph_new(void)
{
    slim_graph *g = calloc(1, sizeof(*g));
    if (g)
        g->opset = 1;
    return g;
}

void slim_attr_clear(slim_attr *a)
{
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    for (int i = 0; a->strings && i < a->n; i++)
        free(a->strings[i]);
    free(a->strings);
    if (a->t) {
        slim_tensor_release(a->t);
        free(a->t);
    }
    slim_graph_free(a->g);
    memset(a, 0, sizeof(*a));
}

void slim_node_clear(slim_node *n)
{
    for (int a = 0; a < n->n_attrs; a++)
        slim_attr_clear(&n->attrs[a]);
    free(n->attrs);
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->in);
    free(n->out);
}

void slim_graph_remove_nodes(slim_graph *g, const bool *dead)
{
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (dead[i])
            slim_node_clear(&g->nodes[i]);
        else
            g->nodes[w++] = g->nodes[i];
    }
    g->n_nodes = w;
}

void slim_graph_free(slim_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (n->op && n->op->release && n->op_state)
            n->op->release(n->op_state);
        slim_node_clear(n);
    }
    for (int i = 0; i < g->n_values; i++) {
        slim_value *v = &g->values[i];
        free(v->name);
        for (int d = 0; d < SLIM_MAX_DIMS; d++)
            free((char *)v->info.dim_names[d]);
        slim_tensor_release(&v->init);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name_index);
    free(g->name);
    free(g->producer_name);
    free(g);
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool index_grow(slim_graph *g)
{
    int cap = g->name_index_cap ? g->name_index_cap * 2 : 256;
    int *idx = malloc(sizeof(int) * cap);
    if (!idx)
        return false;
    for (int i = 0; i < cap; i++)
        idx[i] = -1;
    for (int v = 0; v < g->n_values; v++) {
        size_t h = hash_name(g->values[v].name) & (cap - 1);
        while (idx[h] >= 0)
            h = (h + 1) & (cap - 1);
        idx[h] = v;
    }
    free(g->name_index);
    g->name_index = idx;
    g->name_index_cap = cap;
    return true;
}

int slim_graph_find_value(const slim_graph *g, const char *name)
{
    if (!g->name_index_cap)
        return -1;
    size_t h = hash_name(name) & (g->name_index_cap - 1);
    while (g->name_index[h] >= 0) {
        if (strcmp(g->values[g->name_index[h]].name, name) == 0)
            return g->name_index[h];
        h = (h + 1) & (g->name_index_cap - 1);
    }
    return -1;
}

int slim_graph_value(slim_graph *g, const char *name)
{
    int id = slim_graph_find_value(g, name);
    if (id >= 0)
        return id;
    if ((g->n_values + 1) * 2 > g->name_index_cap && !index_grow(g))
        return -1;
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? g->cap_values * 2 : 64;
        slim_value *vs = realloc(g->values, sizeof(*vs) * cap);
        if (!vs)
            return -1;
        g->values = vs;
        g->cap_values = cap;
    }
    slim_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof(*v));
    v->name = strdup(name);
    if (!v->name)
        return -1;
    v->producer = -1;
    v->info.name = v->name;
    v->info.ndim = -1;
    id = g->n_values++;
    size_t h = hash_name(name) & (g->name_index_cap - 1);
    while (g->name_index[h] >= 0)
        h = (h + 1) & (g->name_index_cap - 1);
    g->name_index[h] = id;
    return id;
}

int slim_graph_add_initializer(slim_graph *g, const char *base, const char *suffix,
                               slim_tensor *t, slim_err *err)
{
    char name[512];
    snprintf(name, sizeof(name), "%s%s", base, suffix);
    for (int i = 1; slim_graph_find_value(g, name) >= 0; i++)
        snprintf(name, sizeof(name), "%s%s_%d", base, suffix, i);
    int v = slim_graph_value(g, name);
    if (v < 0) {
        slim_tensor_release(t);
        slim_errf(err, SLIM_ENOMEM, "out of memory adding weight \"%s\"", name);
        return -1;
    }
    slim_value *val = &g->values[v];
    val->kind = SLIM_VALUE_INITIALIZER;
    val->init = *t;
    val->info.dtype = t->dtype;
    val->info.ndim = t->ndim;
    memcpy(val->info.dims, t->dims, sizeof(val->info.dims));
    memset(t, 0, sizeof(*t));
    return v;
}

int slim_graph_add_node(slim_graph *g, const char *name, const char *op_type,
                        const char *domain, int n_in, const char *const *in,
                        int n_out, const char *const *out)
{
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        slim_node *ns = realloc(g->nodes, sizeof(*ns) * cap);
        if (!ns)
            return -1;
        g->nodes = ns;
        g->cap_nodes = cap;
    }
    int id = g->n_nodes;
    slim_node *n = &g->nodes[id];
    memset(n, 0, sizeof(*n));
    char synth[64];
    if (!name || !name[0]) {
        snprintf(synth, sizeof(synth), "%s_%d", op_type, id);
        name = synth;
    }
    n->name = strdup(name);
    n->op_type = strdup(op_type);
    n->domain = strdup(domain ? domain : "");
    n->opset = g->opset;
    n->in = malloc(sizeof(int) * (n_in ? n_in : 1));
    n->out = malloc(sizeof(int) * (n_out ? n_out : 1));
    g->n_nodes++; /* counted now so that slim_graph_free releases it */
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out)
        return -1;
    n->n_in = n_in;
    n->n_out = n_out;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = (in[i] && in[i][0]) ? slim_graph_value(g, in[i]) : -1;
        if (in[i] && in[i][0] && n->in[i] < 0)
            return -1;
    }
    for (int i = 0; i < n_out; i++) {
        n->out[i] = (out[i] && out[i][0]) ? slim_graph_value(g, out[i]) : -1;
        if (out[i] && out[i][0] && n->out[i] < 0)
            return -1;
    }
    /* Trailing absent inputs are dropped so kernels see the real count. */
    while (n->n_in > 0 && n->in[n->n_in - 1] < 0)
        n->n_in--;
    return id;
}

static slim_status append_id(int **arr, int *n, int id)
{
    int *a = realloc(*arr, sizeof(int) * (*n + 1));
    if (!a)
        return SLIM_ENOMEM;
    a[(*n)++] = id;
    *arr = a;
    return SLIM_OK;
}

slim_status slim_graph_add_input(slim_graph *g, int value_id)
{
    g->values[value_id].kind = SLIM_VALUE_INPUT;
    return append_id(&g->inputs, &g->n_inputs, value_id);
}

slim_status slim_graph_add_output(slim_graph *g, int value_id)
{
    g->values[value_id].is_output = true;
    return append_id(&g->outputs, &g->n_outputs, value_id);
}

/* Kahn's algorithm over node dependencies; ONNX requires sorted graphs, but
 * many exporters get it wrong, and sorting costs little. */
static slim_status sort_nodes(slim_graph *g, slim_err *err)
{
    int n = g->n_nodes;
    int *pending = calloc(n ? n : 1, sizeof(int));
    int *order = malloc(sizeof(int) * (n ? n : 1));
    int *queue = malloc(sizeof(int) * (n ? n : 1));
    /* users[] lists, per value, the nodes reading it (CSR layout). */
    int *start = calloc(g->n_values + 1, sizeof(int));
    int total = 0;
    for (int i = 0; i < n; i++)
        total += g->nodes[i].n_in;
    int *users = malloc(sizeof(int) * (total ? total : 1));
    int *fill = calloc(g->n_values + 1, sizeof(int));
    slim_node *sorted = malloc(sizeof(slim_node) * (n ? n : 1));
    slim_status st = SLIM_OK;
    if (!pending || !order || !queue || !start || !users || !fill || !sorted) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory sorting the graph");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0)
                start[g->nodes[i].in[k] + 1]++;
    for (int v = 0; v < g->n_values; v++)
        start[v + 1] += start[v];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v < 0)
                continue;
            users[start[v] + fill[v]++] = i;
            if (g->values[v].producer >= 0)
                pending[i]++;
        }
    int head = 0, tail = 0, done_count = 0;
    for (int i = 0; i < n; i++)
        if (pending[i] == 0)
            queue[tail++] = i;
    while (head < tail) {
        int i = queue[head++];
        order[done_count++] = i;
        for (int k = 0; k < g->nodes[i].n_out; k++) {
            int v = g->nodes[i].out[k];
            if (v < 0)
                continue;
            for (int u = start[v]; u < start[v + 1]; u++)
                if (--pending[users[u]] == 0)
                    queue[tail++] = users[u];
        }
    }
    if (done_count != n) {
        for (int i = 0; i < n; i++)
            if (pending[i] > 0) {
                st = slim_errf(err, SLIM_EPARSE, SLIM_NODE_FMT ": the graph has a cycle through this node",
                               SLIM_NODE_ARGS(&g->nodes[i]));
                goto done;
            }
    }
    for (int i = 0; i < n; i++)
        sorted[i] = g->nodes[order[i]];
    if (n > 0) /* an empty graph has no node array at all */
        memcpy(g->nodes, sorted, sizeof(slim_node) * n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0)
                g->values[g->nodes[i].out[k]].producer = i;
done:
    free(pending);
    free(order);
    free(queue);
    free(start);
    free(users);
    free(fill);
    free(sorted);
    return st;
}

/* A declared graph input or output shape that no tensor could have: a
 * dimension below -1 (unknown), or fixed dimensions whose bytes pass 2^62.
 * Refused here, so nothing that sizes buffers from declared shapes (the
 * server's config, memory estimates) multiplies its way past int64. */
static slim_status check_declared_shape(const slim_value *v, const char *what, slim_err *err)
{
    const slim_io_info *io = &v->info;
    if (io->ndim < 0)
        return SLIM_OK;
    size_t es = io->dtype == SLIM_DTYPE_UNDEFINED ? 1 : slim_dtype_size(io->dtype);
    int64_t bytes = (int64_t)(es ? es : 1), cap = (int64_t)1 << 62;
    for (int d = 0; d < io->ndim; d++) {
        int64_t n = io->dims[d];
        if (n < -1)
            return slim_errf(err, SLIM_EPARSE, "%s \"%s\": dimension %d is %lld", what, v->name, d,
                             (long long)n);
        if (n > 0 && bytes > cap / n)
            return slim_errf(err, SLIM_EPARSE, "%s \"%s\": its declared shape holds more than "
                             "2^62 bytes, so no tensor could match it", what, v->name);
        if (n > 0)
            bytes *= n;
    }
    return SLIM_OK;
}

slim_status slim_graph_finalize(slim_graph *g, slim_err *err)
{
    slim_status st;
    for (int k = 0; k < g->n_inputs; k++)
        if ((st = check_declared_shape(&g->values[g->inputs[k]], "graph input", err)))
            return st;
    for (int k = 0; k < g->n_outputs; k++)
        if ((st = check_declared_shape(&g->values[g->outputs[k]], "graph output", err)))
            return st;
    /* Producers first: each value has at most one. */
    for (int v = 0; v < g->n_values; v++) {
        g->values[v].producer = -1;
        g->values[v].n_consumers = 0;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0)
                continue;
            if (g->values[v].producer >= 0 || g->values[v].kind != SLIM_VALUE_INTERMEDIATE)
                return slim_errf(err, SLIM_EPARSE,
                                 SLIM_NODE_FMT ": output \"%s\" is already produced elsewhere "
                                 "(by another node, or as a graph input or initializer)",
                                 SLIM_NODE_ARGS(n), g->values[v].name);
            g->values[v].producer = i;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0)
                continue;
            if (g->values[v].producer < 0 && g->values[v].kind == SLIM_VALUE_INTERMEDIATE)
                return slim_errf(err, SLIM_EPARSE,
                                 SLIM_NODE_FMT ": input \"%s\" is not a graph input, an "
                                 "initializer or the output of any node",
                                 SLIM_NODE_ARGS(n), g->values[v].name);
            g->values[v].n_consumers++;
        }
    }
    for (int k = 0; k < g->n_outputs; k++) {
        slim_value *v = &g->values[g->outputs[k]];
        if (v->producer < 0 && v->kind == SLIM_VALUE_INTERMEDIATE)
            return slim_errf(err, SLIM_EPARSE, "graph output \"%s\" is not produced by any node",
                             v->name);
    }
    if ((st = sort_nodes(g, err)))
        return st;
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (n->op)
            continue;
        n->op = slim_op_registry_find(n->domain, n->op_type, n->opset);
        if (!n->op && slim_op_registry_empty())
            return slim_errf(err, SLIM_EINTERNAL, SLIM_NODE_FMT ": no operators are registered "
                             "(the program must call slim_init first)", SLIM_NODE_ARGS(n));
        if (!n->op) {
            if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
                return slim_errf(err, SLIM_EUNSUPPORTED,
                                 SLIM_NODE_FMT ": operator %s from domain \"%s\" is not implemented",
                                 SLIM_NODE_ARGS(n), n->op_type, n->domain);
            return slim_errf(err, SLIM_EUNSUPPORTED,
                             SLIM_NODE_FMT ": operator %s (opset %d) is not implemented",
                             SLIM_NODE_ARGS(n), n->op_type, n->opset);
        }
        for (int a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].type == SLIM_ATTR_GRAPH && !n->attrs[a].g)
                return slim_errf(err, SLIM_EUNSUPPORTED,
                                 SLIM_NODE_FMT ": attribute \"%s\" holds a list of subgraphs, "
                                 "which is not supported", SLIM_NODE_ARGS(n), n->attrs[a].name);
        /* The schema check comes before prepare: prepare and every kernel
         * may then index the slots and attributes the operator declares. */
        if ((st = slim_node_validate(g, n, err))) {
            n->op = NULL;
            return st;
        }
        if (n->op->prepare) {
            st = n->op->prepare(n, &n->op_state, err);
            if (st) {
                n->op = NULL; /* nothing to release */
                return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(n));
            }
        }
    }
    return SLIM_OK;
}

/* ---- subgraphs: outer-scope values --------------------------------------- */

/* Whether value v of g is read but defined nowhere in g. */
static bool value_is_free(const slim_graph *g, int v, const bool *produced)
{
    return g->values[v].kind == SLIM_VALUE_INTERMEDIATE && !produced[v];
}

static bool *produced_values(const slim_graph *g)
{
    bool *p = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(bool));
    if (!p)
        return NULL;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0)
                p[g->nodes[i].out[k]] = true;
    return p;
}

slim_status slim_graph_capture_outer(slim_graph *g, int node_id, slim_err *err)
{
    slim_node *n = &g->nodes[node_id];
    const char **names = NULL;
    int n_names = 0, cap = 0;
    slim_status st = SLIM_OK;
    /* The union of the subgraphs' free names, in a stable order. */
    for (int a = 0; a < n->n_attrs && !st; a++) {
        const slim_graph *sub = n->attrs[a].type == SLIM_ATTR_GRAPH ? n->attrs[a].g : NULL;
        if (!sub)
            continue;
        bool *prod = produced_values(sub);
        if (!prod) {
            st = slim_errf(err, SLIM_ENOMEM, "out of memory");
            break;
        }
        for (int v = 0; v < sub->n_values; v++) {
            if (!value_is_free(sub, v, prod))
                continue;
            bool seen = false;
            for (int j = 0; j < n_names && !seen; j++)
                seen = strcmp(names[j], sub->values[v].name) == 0;
            if (seen)
                continue;
            if (n_names == cap) {
                cap = cap ? cap * 2 : 8;
                const char **grown = realloc(names, sizeof(*names) * (size_t)cap);
                if (!grown) {
                    st = slim_errf(err, SLIM_ENOMEM, "out of memory");
                    break;
                }
                names = grown;
            }
            names[n_names++] = sub->values[v].name;
        }
        free(prod);
    }
    if (st || n_names == 0)
        goto done;
    int *in = realloc(n->in, sizeof(int) * (size_t)(n->n_in + n_names));
    if (!in) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto done;
    }
    n->in = in;
    for (int a = 0; a < n->n_attrs && !st; a++) {
        slim_graph *sub = n->attrs[a].type == SLIM_ATTR_GRAPH ? n->attrs[a].g : NULL;
        if (!sub)
            continue;
        bool *prod = produced_values(sub);
        const int known = sub->n_values; /* prod covers these; newer ones are free */
        if (!prod) {
            st = slim_errf(err, SLIM_ENOMEM, "out of memory");
            break;
        }
        for (int j = 0; j < n_names && !st; j++) {
            int v = slim_graph_value(sub, names[j]);
            if (v < 0) {
                st = slim_errf(err, SLIM_ENOMEM, "out of memory");
            } else if (v < known && !value_is_free(sub, v, prod)) {
                st = slim_errf(err, SLIM_EPARSE, SLIM_NODE_FMT ": subgraph \"%s\" defines \"%s\", "
                               "which another of its subgraphs reads from the outer scope",
                               SLIM_NODE_ARGS(n), n->attrs[a].name, names[j]);
            } else {
                sub->values[v].info.ndim = -1; /* known only when the node runs */
                st = slim_graph_add_input(sub, v);
            }
        }
        free(prod);
    }
    /* Parent value ids last: slim_graph_value may grow g->values, which
     * `names` does not point into (they are the subgraphs' strings). */
    for (int j = 0; j < n_names && !st; j++) {
        int v = slim_graph_value(g, names[j]);
        if (v < 0)
            st = slim_errf(err, SLIM_ENOMEM, "out of memory");
        else
            g->nodes[node_id].in[g->nodes[node_id].n_in++] = v;
    }
    if (!st)
        g->nodes[node_id].n_implicit = n_names;
done:
    free(names);
    return st;
}

const slim_attr *slim_node_attr(const slim_node *n, const char *name)
{
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t slim_attr_int(const slim_node *n, const char *name, int64_t dflt)
{
    const slim_attr *a = slim_node_attr(n, name);
    if (!a)
        return dflt;
    if (a->type == SLIM_ATTR_FLOAT)
        return (int64_t)a->f;
    return a->type == SLIM_ATTR_INT ? a->i : dflt;
}

float slim_attr_float(const slim_node *n, const char *name, float dflt)
{
    const slim_attr *a = slim_node_attr(n, name);
    if (!a)
        return dflt;
    if (a->type == SLIM_ATTR_INT)
        return (float)a->i;
    return a->type == SLIM_ATTR_FLOAT ? a->f : dflt;
}

const char *slim_attr_str(const slim_node *n, const char *name, const char *dflt)
{
    const slim_attr *a = slim_node_attr(n, name);
    return (a && a->type == SLIM_ATTR_STRING && a->s) ? a->s : dflt;
}

int slim_attr_ints(const slim_node *n, const char *name, int64_t *out, int cap)
{
    const slim_attr *a = slim_node_attr(n, name);
    if (!a)
        return -1;
    if (a->type == SLIM_ATTR_INT) {
        if (cap > 0)
            out[0] = a->i;
        return 1;
    }
    if (a->type != SLIM_ATTR_INTS)
        return -1;
    for (int i = 0; i < a->n && i < cap; i++)
        out[i] = a->ints[i];
    return a->n;
}
