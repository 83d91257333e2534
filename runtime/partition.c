/*
 * partition.c - placing a model on a device: which node runs where, and the
 * copies between them.
 *
 * slim_model_place(m, cuda:0) decides per node, in graph order:
 *
 *   - the node runs on the GPU when the backend has a kernel for it with
 *     these input dtypes (dtypes come from shape inference on the declared
 *     inputs, dynamic dims taken as 1; they do not depend on the batch) and
 *     the node computes on floating-point data. Integer-only nodes are the
 *     shape arithmetic of exported graphs (Shape -> Gather -> Concat ->
 *     Reshape): their results are read on the host, so they stay there, as
 *     onnxruntime keeps them, instead of bouncing to the GPU and back.
 *   - everything else runs on the CPU.
 *
 * The graph is then rebuilt with a copy node wherever a value is needed on
 * the other side: MemcpyToDevice before the first GPU reader of a host
 * value, MemcpyToHost before the first CPU reader of a GPU value and for
 * each graph output made on the GPU (the output keeps its name; the GPU
 * side is renamed "name@cuda:0"). Shape-only readers (Shape, Size) read a
 * GPU value's dims where it is, with no copy. Weights read on the GPU are
 * uploaded once, at load, as initializers of their own; a weight no CPU
 * node reads is not kept on the host at all. The copies are ordinary nodes
 * to the planner and the executor, so activations stay planned.
 */
#include "device.h"
#include "model.h"
#include "op.h"
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLIM_COPY_DOMAIN "com.slimserve"

/* ---- the copy operators ---------------------------------------------------- */

static slim_status copy_infer(slim_op_ctx *ctx)
{
    if (ctx->n_in != 1 || ctx->n_out != 1 || !ctx->in[0] || !ctx->out[0])
        return slim_errf(ctx->err, SLIM_EINTERNAL, "a copy node takes one input and one output");
    /* The kernels' slim_tensor_set_like, which runtime/ cannot call. */
    slim_tensor *o = ctx->out[0];
    const slim_tensor *i = ctx->in[0];
    o->dtype = i->dtype;
    o->ndim = i->ndim;
    for (int d = 0; d < i->ndim; d++)
        o->dims[d] = i->dims[d];
    return SLIM_OK;
}

const slim_op_def slim__ops_copy[] = {
    {"MemcpyToDevice", 1, NULL, NULL, copy_infer, NULL, SLIM_OP_COPY_H2D},
    {"MemcpyToHost", 1, NULL, NULL, copy_infer, NULL, SLIM_OP_COPY_D2H},
    {NULL, 0, NULL, NULL, NULL, NULL, 0},
};

/* ---- deciding ------------------------------------------------------------ */

enum { WHERE_HOST = 0, WHERE_DEV = 1 };

typedef struct placer {
    slim_model *m;
    slim_device *dev;
    const slim_graph *g;       /* the graph being replaced */
    slim_dtype *dtype;         /* [n_values] from shape inference */
    slim_graph *ng;            /* the new graph */
    int *home;                 /* [n_values] WHERE_* of the original value */
    char **dev_name;           /* [n_values] name of its GPU copy, or NULL */
    char **host_name;          /* [n_values] name of its host copy, or NULL */
    int n_copies;
} placer;

static void value_dtypes(placer *p)
{
    const slim_graph *g = p->g;
    slim_tensor *sig = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(slim_tensor));
    slim_tensor *shapes = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(slim_tensor));
    for (int v = 0; v < g->n_values; v++)
        p->dtype[v] = g->values[v].kind == SLIM_VALUE_INITIALIZER ? g->values[v].init.dtype
                                                                    : g->values[v].info.dtype;
    if (!sig || !shapes)
        goto done;
    for (int i = 0; i < g->n_inputs; i++) {
        const slim_io_info *info = &g->values[g->inputs[i]].info;
        sig[i].dtype = info->dtype;
        sig[i].ndim = info->ndim;
        sig[i].kind = info->kind;
        for (int d = 0; d < info->ndim && d < SLIM_MAX_DIMS; d++)
            sig[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : 1;
    }
    slim_err err;
    /* A graph whose probe shapes do not infer keeps what the declared
     * infos say; nodes with unknown input types stay on the CPU. */
    (void)slim_model_infer_shapes(p->m, sig, shapes, &err);
    for (int v = 0; v < g->n_values; v++)
        if (shapes[v].dtype != SLIM_DTYPE_UNDEFINED)
            p->dtype[v] = shapes[v].dtype;
done:
    /* Sequences and optionals live on the host (runtime/container.h): an
     * unknown type keeps the nodes that read them on the CPU. */
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].info.kind != SLIM_KIND_TENSOR)
            p->dtype[v] = SLIM_DTYPE_UNDEFINED;
    free(sig);
    free(shapes);
}

/* The device kernel for node n, or NULL to keep it on the CPU. */
static const void *choose(placer *p, const slim_node *n, unsigned *host_inputs, bool *view)
{
    if ((n->op->flags & (SLIM_OP_SHAPE_ONLY | SLIM_OP_COPY_H2D | SLIM_OP_COPY_D2H)) ||
        n->n_in == 0 || n->n_in > 32)
        return NULL;
    slim_dtype dt[32];
    bool floating = false;
    for (int k = 0; k < n->n_in; k++) {
        dt[k] = n->in[k] >= 0 ? p->dtype[n->in[k]] : SLIM_DTYPE_UNDEFINED;
        if (n->in[k] >= 0 && dt[k] == SLIM_DTYPE_UNDEFINED)
            return NULL;
        floating |= slim_dtype_is_float(dt[k]);
    }
    /* Strings live on the host (string_tensor.h): a node that reads or
     * makes one stays on the CPU, whatever its other types. */
    for (int k = 0; k < n->n_in; k++)
        if (dt[k] == SLIM_STRING)
            return NULL;
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0) {
            if (p->dtype[n->out[k]] == SLIM_STRING)
                return NULL;
            floating |= slim_dtype_is_float(p->dtype[n->out[k]]);
        }
    if (!floating)
        return NULL;
    return p->dev->backend->lookup(p->dev, n, dt, host_inputs, view);
}

/* ---- rebuilding -------------------------------------------------------- */

static char *suffixed(const char *name, const char *suffix)
{
    size_t a = strlen(name), b = strlen(suffix);
    char *s = malloc(a + b + 2);
    if (s) {
        memcpy(s, name, a);
        s[a] = '@';
        memcpy(s + a + 1, suffix, b + 1);
    }
    return s;
}

/* Copies value v's declared info into the new graph's value nv. */
static void copy_info(placer *p, int v, int nv, bool device_side)
{
    slim_value *dst = &p->ng->values[nv];
    const slim_value *src = &p->g->values[v];
    dst->info.dtype = src->info.dtype;
    dst->info.kind = src->info.kind; /* a sequence or optional input stays one */
    dst->info.elem_kind = src->info.elem_kind;
    dst->info.ndim = src->info.ndim;
    for (int d = 0; d < src->info.ndim && d < SLIM_MAX_DIMS; d++) {
        dst->info.dims[d] = src->info.dims[d];
        dst->info.dim_names[d] = src->info.dim_names[d] ? strdup(src->info.dim_names[d]) : NULL;
    }
    (void)device_side;
}

/* The new graph's value holding original value v's weights, host side. */
static slim_status host_weight(placer *p, int v, slim_err *err)
{
    const slim_value *src = &p->g->values[v];
    int nv = slim_graph_value(p->ng, src->name);
    if (nv < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    slim_value *dst = &p->ng->values[nv];
    if (dst->kind == SLIM_VALUE_INITIALIZER)
        return SLIM_OK;
    dst->kind = SLIM_VALUE_INITIALIZER;
    dst->init = src->init;
    if (src->init.buf) {
        slim_buffer_ref(src->init.buf);
    } else if (slim_tensor_nbytes(&src->init)) {
        dst->init.data = NULL;
        slim_status st = slim_tensor_alloc(&dst->init, err);
        if (st)
            return st;
        memcpy(dst->init.data, src->init.data, slim_tensor_nbytes(&src->init));
    }
    copy_info(p, v, nv, false);
    return SLIM_OK;
}

/* Uploads original weight v once: a new initializer "name@cuda:N". */
static slim_status device_weight(placer *p, int v, slim_err *err)
{
    const slim_value *src = &p->g->values[v];
    char *name = suffixed(src->name, p->dev->name);
    int nv = name ? slim_graph_value(p->ng, name) : -1;
    if (nv < 0) {
        free(name);
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    }
    p->dev_name[v] = name;
    slim_value *dst = &p->ng->values[nv];
    dst->kind = SLIM_VALUE_INITIALIZER;
    dst->init = src->init;
    dst->init.data = NULL;
    dst->init.buf = NULL;
    size_t n = slim_tensor_nbytes(&src->init);
    slim_status st = slim_tensor_alloc_on(&dst->init, p->dev, err);
    if (!st && n)
        st = p->dev->backend->copy(p->dev, dst->init.data, src->init.data, n, SLIM_COPY_H2D, err);
    if (st) {
        slim_err_prefix(err, "uploading weight \"%s\" (%zu bytes) to %s: ", src->name, n,
                        p->dev->name);
        return st;
    }
    copy_info(p, v, nv, true);
    return SLIM_OK;
}

static slim_status add_copy(placer *p, int v, int where, slim_err *err)
{
    const char *from = where == WHERE_DEV ? p->host_name[v] : p->dev_name[v];
    /* A graph output made on the GPU comes back under its own name (the
     * GPU side was renamed when its node was added). */
    const slim_value *val = &p->g->values[v];
    char *to = where == WHERE_HOST && val->is_output ? strdup(val->name)
             : suffixed(val->name, where == WHERE_DEV ? p->dev->name : "cpu");
    if (!to)
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    char node_name[256];
    snprintf(node_name, sizeof(node_name), "copy_%d_%s", p->n_copies++,
             where == WHERE_DEV ? "to_device" : "to_host");
    int id = slim_graph_add_node(p->ng, node_name,
                                 where == WHERE_DEV ? "MemcpyToDevice" : "MemcpyToHost",
                                 SLIM_COPY_DOMAIN, 1, (const char *const[]){from}, 1,
                                 (const char *const[]){to});
    if (id < 0) {
        free(to);
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    }
    p->ng->nodes[id].opset = 1;
    p->ng->nodes[id].device = p->dev;
    copy_info(p, v, p->ng->nodes[id].out[0], where == WHERE_DEV);
    if (where == WHERE_DEV)
        p->dev_name[v] = to;
    else
        p->host_name[v] = to;
    return SLIM_OK;
}

/* The name under which node input value v is read on `where`. */
static slim_status need(placer *p, int v, int where, const char **name, slim_err *err)
{
    const slim_value *val = &p->g->values[v];
    slim_status st = SLIM_OK;
    if (where == WHERE_HOST && !p->host_name[v]) {
        if (val->kind == SLIM_VALUE_INITIALIZER) {
            st = host_weight(p, v, err);
            p->host_name[v] = strdup(val->name);
        } else {
            st = add_copy(p, v, WHERE_HOST, err);
        }
    } else if (where == WHERE_DEV && !p->dev_name[v]) {
        st = val->kind == SLIM_VALUE_INITIALIZER ? device_weight(p, v, err)
                                                  : add_copy(p, v, WHERE_DEV, err);
    }
    if (st)
        return st;
    *name = where == WHERE_DEV ? p->dev_name[v] : p->host_name[v];
    if (!*name)
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    return SLIM_OK;
}

static slim_status add_node(placer *p, slim_node *n, slim_err *err)
{
    unsigned host_inputs = 0;
    bool view = false;
    const void *kernel = choose(p, n, &host_inputs, &view);
    int where = kernel ? WHERE_DEV : WHERE_HOST;
    bool shape_only = (n->op->flags & SLIM_OP_SHAPE_ONLY) != 0;
    const char *ins[64], *outs[64];
    if (n->n_in > 64 || n->n_out > 64)
        return slim_errf(err, SLIM_EUNSUPPORTED, SLIM_NODE_FMT ": more than 64 inputs or outputs",
                         SLIM_NODE_ARGS(n));
    slim_status st;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        ins[k] = "";
        if (v < 0)
            continue;
        int want = where == WHERE_DEV && !(host_inputs & (1u << k)) ? WHERE_DEV : WHERE_HOST;
        /* Shape and Size read dims only: wherever the value is will do. */
        if (shape_only && p->g->values[v].kind != SLIM_VALUE_INITIALIZER)
            want = p->home[v];
        if ((st = need(p, v, want, &ins[k], err)))
            return st;
    }
    for (int k = 0; k < n->n_out; k++) {
        int v = n->out[k];
        outs[k] = "";
        if (v < 0)
            continue;
        p->home[v] = where;
        const char *name = p->g->values[v].name;
        char *own = where == WHERE_DEV && p->g->values[v].is_output ? suffixed(name, p->dev->name)
                                                                     : strdup(name);
        if (!own)
            return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
        if (where == WHERE_DEV)
            p->dev_name[v] = own;
        else
            p->host_name[v] = own;
        outs[k] = own;
    }
    int id = slim_graph_add_node(p->ng, n->name, n->op_type, n->domain, n->n_in, ins, n->n_out,
                                 outs);
    if (id < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    slim_node *nn = &p->ng->nodes[id];
    nn->opset = n->opset;
    /* Control flow: the last inputs are what its subgraphs capture, passed
     * by position, so the (possibly renamed) host copies serve as well. */
    nn->n_implicit = n->n_implicit;
    nn->attrs = n->attrs; /* moved: the old graph is freed after */
    nn->n_attrs = n->n_attrs;
    n->attrs = NULL;
    n->n_attrs = 0;
    if (where == WHERE_DEV) {
        nn->device = p->dev;
        nn->dev_kernel = kernel;
        nn->host_inputs = host_inputs;
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0)
            copy_info(p, n->out[k], nn->out[k], where == WHERE_DEV);
    return SLIM_OK;
}

static slim_status rebuild(placer *p, slim_err *err)
{
    const slim_graph *g = p->g;
    slim_graph *ng = p->ng;
    ng->opset = g->opset;
    ng->ir_version = g->ir_version;
    ng->name = g->name ? strdup(g->name) : NULL;
    ng->producer_name = g->producer_name ? strdup(g->producer_name) : NULL;
    slim_status st;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        int nv = slim_graph_value(ng, g->values[v].name);
        if (nv < 0 || (st = slim_graph_add_input(ng, nv)))
            return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
        copy_info(p, v, nv, false);
        p->host_name[v] = strdup(g->values[v].name);
        p->home[v] = WHERE_HOST;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if ((st = add_node(p, &g->nodes[i], err)))
            return st;
    for (int k = 0; k < g->n_outputs; k++) {
        int v = g->outputs[k];
        const char *name;
        if ((st = need(p, v, WHERE_HOST, &name, err)))
            return st;
        int nv = slim_graph_find_value(ng, name);
        if (nv < 0)
            return slim_errf(err, SLIM_EINTERNAL, "placing the model lost output \"%s\"",
                             g->values[v].name);
        if ((st = slim_graph_add_output(ng, nv)))
            return slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
    }
    return SLIM_OK;
}

slim_status slim_model_place(slim_model *m, slim_device *dev, slim_err *err)
{
    /* Every model starts out whole on the CPU: placing it there changes
     * nothing. */
    if (!slim_device_tag(dev))
        return SLIM_OK;
    if (m->device)
        return slim_errf(err, SLIM_EINVAL, "the model is already placed on %s", m->device->name);
    const slim_graph *g = m->graph;
    int n_values = g->n_values; /* g is freed before the cleanup below */
    placer p = {.m = m, .dev = dev, .g = g};
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    p.dtype = calloc(nv, sizeof(*p.dtype));
    p.home = calloc(nv, sizeof(int));
    p.dev_name = calloc(nv, sizeof(char *));
    p.host_name = calloc(nv, sizeof(char *));
    p.ng = slim_graph_new();
    slim_status st;
    if (!p.dtype || !p.home || !p.dev_name || !p.host_name || !p.ng) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory placing the model");
        goto done;
    }
    value_dtypes(&p);
    /* Uploaded weights are charged to the model, like loaded ones. */
    slim_mem_account *prev = slim_mem_account_enter(m->account);
    st = rebuild(&p, err);
    if (!st) {
        st = dev->backend->sync(dev, err);
    } else {
        /* Uploads already queued may still be writing into weights that
         * freeing p.ng gives back to the shared cache: wait for them. */
        slim_err ignored = {0};
        dev->backend->sync(dev, &ignored);
    }
    slim_mem_account_enter(prev);
    if (st)
        goto done;
    if ((st = slim_graph_finalize(p.ng, err)))
        goto done;
    /* Swap the graph in; everything that pointed into the old one is
     * remade from the new one. */
    slim_graph *old = m->graph;
    m->graph = p.ng;
    p.ng = NULL;
    m->device = dev;
    if ((st = slim__model_refresh(m, err)))
        goto done_old;
    slim_graph_free(old);
    goto done;
done_old:
    slim_graph_free(old);
done:
    for (int v = 0; v < n_values && p.dev_name; v++) {
        free(p.dev_name[v]);
        if (p.host_name)
            free(p.host_name[v]);
    }
    slim_graph_free(p.ng);
    free(p.dtype);
    free(p.home);
    free(p.dev_name);
    free(p.host_name);
    return st;
}

slim_status slim_model_set_device(slim_model *m, const char *name, slim_err *err)
{
    slim_device *dev;
    slim_status st = slim_device_get(name, &dev, err);
    if (st)
        return st;
    return slim_model_place(m, dev, err);
}

void slim_model_placement(const slim_model *m, int *on_device, int *on_cpu, int *copies)
{
    *on_device = *on_cpu = *copies = 0;
    const slim_graph *g = m->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (n->op->flags & (SLIM_OP_COPY_H2D | SLIM_OP_COPY_D2H))
            (*copies)++;
        else if (n->device)
            (*on_device)++;
        else
            (*on_cpu)++;
    }
}

void slim_model_print_placement(const slim_model *m, FILE *f)
{
    const slim_graph *g = m->graph;
    int dev_n, cpu_n, copies;
    slim_model_placement(m, &dev_n, &cpu_n, &copies);
    const char *dname = m->device ? m->device->name : "cpu";
    fprintf(f, "placement: %d nodes on %s, %d on cpu, %d copies\n", dev_n, dname, cpu_n, copies);
    if (!m->device)
        return;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        bool copy = (n->op->flags & (SLIM_OP_COPY_H2D | SLIM_OP_COPY_D2H)) != 0;
        const char *where = copy ? "copy" : n->device ? dname : "cpu";
        fprintf(f, "  %-8s %-24s %s", where, n->op_type, n->name);
        if (copy)
            fprintf(f, "  (%s -> %s)", g->values[n->in[0]].name, g->values[n->out[0]].name);
        fputc('\n', f);
    }
}
