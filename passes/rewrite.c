/* rewrite.c - the rewrite kit's first layer (rewrite.h): uses, walks,
 * sweeps, constants and attributes. */
#include "rewrite.h"
#include "device.h"
#include "slim_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

slim_status slim_pass_uses_init(slim_pass_uses *u, const slim_graph *g, slim_err *err)
{
    size_t n = (size_t)g->n_values + 1;
    u->n_values = g->n_values;
    u->producer = malloc(n * sizeof(int));
    u->readers = calloc(n, sizeof(int));
    u->reader = malloc(n * sizeof(int));
    if (!u->producer || !u->readers || !u->reader) {
        slim_pass_uses_free(u);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    for (int v = 0; v < g->n_values; v++)
        u->producer[v] = u->reader[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_out; k++)
            if (nd->out[k] >= 0)
                u->producer[nd->out[k]] = i;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0) {
                u->readers[nd->in[k]]++;
                u->reader[nd->in[k]] = i;
            }
    }
    return SLIM_OK;
}

void slim_pass_uses_free(slim_pass_uses *u)
{
    free(u->producer);
    free(u->readers);
    free(u->reader);
    memset(u, 0, sizeof(*u));
}

slim_status slim_pass_walk_init(slim_pass_walk *w, const slim_graph *g, slim_err *err)
{
    slim_status st = slim_pass_uses_init(&w->uses, g, err);
    if (st)
        return st;
    if (!(w->dead = calloc((size_t)g->n_nodes + 1, sizeof(bool)))) {
        slim_pass_uses_free(&w->uses);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    return SLIM_OK;
}

slim_status slim_pass_walk_finish(slim_pass_walk *w, slim_graph *g, slim_status st)
{
    if (!st)
        slim_pass_sweep(g, w->dead);
    free(w->dead);
    w->dead = NULL;
    slim_pass_uses_free(&w->uses);
    return st;
}

const slim_tensor *slim_pass_const_f32(const slim_graph *g, int v)
{
    if (v < 0 || v >= g->n_values || g->values[v].kind != SLIM_VALUE_INITIALIZER)
        return NULL;
    /* No data with elements: released by slim_pass_drop_replaced. */
    const slim_tensor *t = &g->values[v].init;
    return t->dtype == SLIM_F32 && !t->device && (t->data || slim_tensor_numel(t) == 0) ? t
                                                                                      : NULL;
}

slim_node *slim_pass_sole_reader(slim_graph *g, const slim_pass_uses *u, int v,
                                 const char *op_type)
{
    if (v < 0 || v >= u->n_values || u->readers[v] != 1 || g->values[v].is_output)
        return NULL;
    slim_node *r = &g->nodes[u->reader[v]];
    return !r->domain[0] && strcmp(r->op_type, op_type) == 0 ? r : NULL;
}

void slim_pass_drop_replaced(slim_graph *g, int v, const slim_node *reader)
{
    slim_value *val = &g->values[v];
    if (val->kind != SLIM_VALUE_INITIALIZER || val->is_output || !val->init.data)
        return;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (n == reader)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v)
                return;
    }
    int fd;
    int64_t off;
    size_t nbytes = slim_tensor_nbytes(&val->init);
    if (slim_file_map_lookup(val->init.data, nbytes, &fd, &off)) {
        /* Only whole pages inside the tensor: its neighbours stay mapped. */
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = ((uintptr_t)val->init.data + page - 1) & ~(page - 1);
        uintptr_t hi = ((uintptr_t)val->init.data + nbytes) & ~(page - 1);
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
        /* The packed copy is charged now; the mapping stops counting it. */
        slim_format_uncharge(val->init.buf, nbytes);
    }
    slim_tensor_release(&val->init);
}

void slim_pass_sweep(slim_graph *g, bool *dead)
{
    slim_graph_remove_nodes(g, dead);
    bool *read = calloc((size_t)g->n_values + 1, sizeof(bool));
    if (!read)
        return; /* keeping unread weights is only a waste */
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0)
                read[g->nodes[i].in[k]] = true;
    for (int v = 0; v < g->n_values; v++) {
        slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || read[v] || val->is_output)
            continue;
        slim_tensor_release(&val->init);
        memset(&val->init, 0, sizeof(val->init));
        val->kind = SLIM_VALUE_INTERMEDIATE;
    }
    free(read);
}

/* The attribute called name on n, added (undefined) if absent. */
static slim_attr *attr_slot(slim_node *n, const char *name, slim_err *err)
{
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, name) == 0) {
            char *keep = n->attrs[a].name;
            n->attrs[a].name = NULL;
            slim_attr_clear(&n->attrs[a]);
            memset(&n->attrs[a], 0, sizeof(slim_attr));
            n->attrs[a].name = keep;
            return &n->attrs[a];
        }
    slim_attr *as = realloc(n->attrs, sizeof(*as) * (size_t)(n->n_attrs + 1));
    char *nm = strdup(name);
    if (!as || !nm) {
        if (as)
            n->attrs = as;
        free(nm);
        slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
        return NULL;
    }
    n->attrs = as;
    slim_attr *a = &as[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = nm;
    return a;
}

slim_status slim_pass_set_int(slim_node *n, const char *name, int64_t v, slim_err *err)
{
    slim_attr *a = attr_slot(n, name, err);
    if (!a)
        return SLIM_ENOMEM;
    a->type = SLIM_ATTR_INT;
    a->i = v;
    return SLIM_OK;
}

slim_status slim_pass_set_float(slim_node *n, const char *name, float v, slim_err *err)
{
    slim_attr *a = attr_slot(n, name, err);
    if (!a)
        return SLIM_ENOMEM;
    a->type = SLIM_ATTR_FLOAT;
    a->f = v;
    return SLIM_OK;
}

slim_status slim_pass_set_str(slim_node *n, const char *name, const char *v, slim_err *err)
{
    char *copy = strdup(v);
    if (!copy)
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    slim_attr *a = attr_slot(n, name, err);
    if (!a) {
        free(copy);
        return SLIM_ENOMEM;
    }
    a->type = SLIM_ATTR_STRING;
    a->s = copy;
    return SLIM_OK;
}

slim_status slim_pass_set_ints(slim_node *n, const char *name, const int64_t *v, int count,
                               slim_err *err)
{
    slim_attr *a = attr_slot(n, name, err);
    if (!a)
        return SLIM_ENOMEM;
    a->ints = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!a->ints)
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)count);
    a->n = count;
    a->type = SLIM_ATTR_INTS;
    return SLIM_OK;
}

bool slim_pass_clip_bounds(const slim_graph *g, const slim_node *c, float *lo, float *hi)
{
    *lo = -3.402823466e38f;
    *hi = 3.402823466e38f;
    if (c->opset < 11) {
        *lo = slim_attr_float(c, "min", *lo);
        *hi = slim_attr_float(c, "max", *hi);
        return true;
    }
    for (int k = 1; k < 3 && k < c->n_in; k++) {
        if (c->in[k] < 0)
            continue;
        const slim_tensor *t = slim_pass_const_f32(g, c->in[k]);
        if (!t || slim_tensor_numel(t) != 1)
            return false;
        *(k == 1 ? lo : hi) = *(const float *)t->data;
    }
    return true;
}
