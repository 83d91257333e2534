/*
 * fold_constants.c - nodes whose inputs are all constant are computed once,
 * here, by their CPU kernel, and their outputs become initializers.
 *
 * Exporters leave such nodes behind: Constant nodes (the scalars the
 * LayerNorm and GELU patterns hold), shape arithmetic (Shape -> Gather ->
 * Unsqueeze -> Concat -> Reshape) and small precomputed tables. Running
 * them at load takes them out of every request, and turns the scalars the
 * fusing passes look for into initializers they can read.
 *
 * The walk is the planner's shape inference done early (the graph is not
 * finalized yet): nodes in dependency order, each value either unknown, of
 * a known static shape, or known with data. Initializers are known with
 * data; a graph input is known by shape when it declares every dim and its
 * type, which a request must then match (the executor checks it). A node
 * with every input known gets its outputs' shapes from its kernel's infer;
 * it is folded when every input also has data (or it reads shapes only:
 * Shape, Size), so Shape of a dynamic value never folds. Infer is the
 * executor's own, so a folded shape is the one a request would see.
 *
 * Not folded: other domains, control flow and containers (If, Loop,
 * sequences), random ops and Dropout, DequantizeLinear (a model stores
 * int8 weights to keep them small), nodes producing a graph output, and
 * results that would grow the weights: a node may add at most
 * FOLD_MAX_BYTES (the inputs it alone read are freed with it, so a
 * transposed weight costs nothing) and the graph FOLD_BUDGET in all.
 * Constant nodes always fold: their tensor moves out of the attribute.
 *
 * A kernel that fails on constant inputs would fail every request the same
 * way, so its error fails the load, naming the node.
 */
#include "pass.h"

#include "kernel.h"
#include "string_tensor.h"
#include "validate.h"

#include <stdlib.h>
#include <string.h>

#define FOLD_MAX_BYTES ((int64_t)16 << 20) /* one node's outputs */
#define FOLD_BUDGET ((int64_t)4 << 20)     /* net bytes added, whole graph */
#define FOLD_MAX_IO 1024

/* Deterministic ops only; these draw random numbers (Dropout when its
 * training_mode input says so). */
static const char *const not_folded[] = {
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
    "Multinomial", "Dropout", "DequantizeLinear", NULL,
};

typedef struct fold_walk {
    slim_graph *g;
    slim_pass_walk w;
    slim_tensor *known;  /* per value; ndim -1 when unknown, data NULL when only shaped */
    int *remaining;      /* per value: reader slots of nodes not folded */
    int *order;          /* nodes, producers first */
    int n_order;
    int64_t growth;      /* net bytes folding has added */
    int folded;
} fold_walk;

static bool has_subgraph(const slim_node *n)
{
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == SLIM_ATTR_GRAPH)
            return true;
    return false;
}

static bool denied(const slim_node *n)
{
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return true;
    for (int i = 0; not_folded[i]; i++)
        if (strcmp(n->op_type, not_folded[i]) == 0)
            return true;
    return n->n_implicit > 0 || has_subgraph(n) || n->n_in > FOLD_MAX_IO || n->n_out > FOLD_MAX_IO;
}

/* Bytes of a static shape, or -1 past 2^62 or with a negative dim. */
static int64_t shape_bytes(const slim_tensor *t)
{
    int64_t bytes = (int64_t)slim_dtype_size(t->dtype), cap = (int64_t)1 << 62;
    if (t->ndim < 0 || t->ndim > SLIM_MAX_DIMS || t->kind != SLIM_KIND_TENSOR || !bytes)
        return -1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0)
            return -1;
        if (t->dims[d] && bytes > cap / t->dims[d])
            return -1;
        bytes *= t->dims[d];
    }
    return bytes;
}

/* Kahn's order over producer -> reader edges; nodes on a cycle are left
 * out (finalize reports the cycle). */
static slim_status topo_order(fold_walk *f, slim_err *err)
{
    const slim_graph *g = f->g;
    const slim_pass_uses *u = &f->w.uses;
    int *pending = calloc((size_t)g->n_nodes + 1, sizeof(int));
    int *start = calloc((size_t)g->n_values + 1, sizeof(int));
    int *fill = NULL, *readers = NULL;
    f->order = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
    int64_t slots = 0;
    for (int v = 0; v < g->n_values; v++)
        slots += u->readers[v];
    if (pending && start) {
        fill = malloc(sizeof(int) * ((size_t)g->n_values + 1));
        readers = malloc(sizeof(int) * ((size_t)slots + 1));
    }
    if (!pending || !start || !fill || !readers || !f->order) {
        free(pending);
        free(start);
        free(fill);
        free(readers);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    /* readers[start[v] .. start[v + 1]) are the nodes reading v, a node
     * once per slot. */
    for (int v = 0; v < g->n_values; v++)
        start[v + 1] = start[v] + u->readers[v];
    memcpy(fill, start, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0)
                continue;
            readers[fill[v]++] = i;
            if (u->producer[v] >= 0)
                pending[i]++;
        }
    }
    int head = 0;
    f->n_order = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!pending[i])
            f->order[f->n_order++] = i;
    while (head < f->n_order) {
        const slim_node *n = &g->nodes[f->order[head++]];
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0 || u->producer[v] != f->order[head - 1])
                continue;
            for (int r = start[v]; r < start[v + 1]; r++)
                if (--pending[readers[r]] == 0)
                    f->order[f->n_order++] = readers[r];
        }
    }
    free(pending);
    free(start);
    free(fill);
    free(readers);
    return SLIM_OK;
}

/* Drops node n's reads; an initializer nothing else reads is freed now, so
 * a chain of folds holds one link at a time. */
static void drop_reads(fold_walk *f, const slim_node *n)
{
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0 || --f->remaining[v] > 0)
            continue;
        slim_value *val = &f->g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || val->is_output)
            continue;
        slim_tensor_release(&val->init);
        memset(&val->init, 0, sizeof(val->init));
        val->kind = SLIM_VALUE_INTERMEDIATE;
        f->known[v].ndim = -1;
        f->known[v].data = NULL;
    }
}

/* Bytes the graph would gain by folding n into outputs of out_bytes: the
 * initializers only n reads are freed with it. */
static int64_t growth_of(const fold_walk *f, const slim_node *n, int64_t out_bytes)
{
    if (strcmp(n->op_type, "Constant") == 0)
        return 0; /* the tensor leaves the attribute, freed with the node */
    int64_t freed = 0;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k], slots = 0;
        if (v < 0 || f->g->values[v].kind != SLIM_VALUE_INITIALIZER || f->g->values[v].is_output)
            continue;
        bool seen = false;
        for (int j = 0; j < n->n_in; j++) {
            slots += n->in[j] == v;
            seen = seen || (j < k && n->in[j] == v);
        }
        if (!seen && slots == f->remaining[v])
            freed += (int64_t)slim_tensor_nbytes(&f->g->values[v].init);
    }
    return out_bytes - freed;
}

/* Computes n's outputs into out[] (allocated here) and makes them
 * initializers. */
static slim_status fold_node(fold_walk *f, slim_node *n, slim_op_ctx *ctx, slim_tensor **out)
{
    slim_status st = SLIM_OK;
    for (int k = 0; k < n->n_out && !st; k++)
        if (out[k])
            st = slim_tensor_alloc(out[k], ctx->err);
    if (!st && (ctx->node->op->flags & SLIM_OP_ALIAS0)) {
        /* Reshape and kin never run exec: output 0 is input 0's bytes. */
        if (slim_tensor_nbytes(out[0]) != slim_tensor_nbytes(ctx->in[0]))
            st = slim_errf(ctx->err, SLIM_ESHAPE, "output holds %zu bytes, input %zu",
                           slim_tensor_nbytes(out[0]), slim_tensor_nbytes(ctx->in[0]));
        else if (slim_tensor_nbytes(out[0]))
            memcpy(out[0]->data, ctx->in[0]->data, slim_tensor_nbytes(out[0]));
    } else if (!st) {
        st = ctx->node->op->exec(ctx);
    }
    /* A string output's slots may point at its inputs' bytes (a copied
     * Constant attribute, a Gather): it gets bytes of its own, as in a
     * run (runtime/string_tensor.h). */
    for (int k = 0; k < n->n_out && !st; k++)
        if (out[k] && out[k]->dtype == SLIM_STRING)
            st = slim__tensor_string_own(out[k], ctx->err);
    if (st) {
        for (int k = 0; k < n->n_out; k++)
            if (out[k])
                slim_tensor_release(out[k]);
        return st;
    }
    for (int k = 0; k < n->n_out; k++) {
        if (!out[k])
            continue;
        slim_value *val = &f->g->values[n->out[k]];
        val->kind = SLIM_VALUE_INITIALIZER;
        val->init = *out[k];
        val->info.dtype = out[k]->dtype;
        val->info.ndim = out[k]->ndim;
        memcpy(val->info.dims, out[k]->dims, sizeof(val->info.dims));
        f->known[n->out[k]] = val->init;
        memset(out[k], 0, sizeof(*out[k]));
    }
    f->w.dead[n - f->g->nodes] = true;
    drop_reads(f, n);
    if (strcmp(n->op_type, "Constant") == 0) {
        for (int a = 0; a < n->n_attrs; a++)
            slim_attr_clear(&n->attrs[a]);
        n->n_attrs = 0;
    }
    f->folded++;
    return SLIM_OK;
}

/* Infers node n's output shapes from what is known of its inputs, and
 * folds it when it can. */
static slim_status visit(fold_walk *f, slim_node *n, slim_err *err)
{
    slim_graph *g = f->g;
    if (denied(n))
        return SLIM_OK;
    const slim_op_def *op = slim_op_lookup(n->domain, n->op_type, n->opset);
    if (!op || !op->infer || (op->flags & (SLIM_OP_OWN_OUTPUTS | SLIM_OP_CONTAINERS)))
        return SLIM_OK;
    /* Each output a value this node alone produces (finalize refuses the
     * rest; folding must not hide that). */
    for (int k = 0; k < n->n_out; k++) {
        int v = n->out[k];
        if (v < 0)
            continue;
        if (g->values[v].kind != SLIM_VALUE_INTERMEDIATE ||
            f->w.uses.producer[v] != (int)(n - g->nodes))
            return SLIM_OK;
        for (int j = 0; j < k; j++)
            if (n->out[j] == v)
                return SLIM_OK;
    }
    bool all_data = true;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0)
            continue;
        if (f->known[v].ndim < 0)
            return SLIM_OK;
        if (!f->known[v].data && slim_tensor_numel(&f->known[v]) > 0)
            all_data = false;
    }
    /* Finalize reports a node its schema refuses, or that prepare refuses:
     * such a node is only left alone here. */
    slim_err quiet = {0};
    if (slim_node_validate(g, n, &quiet))
        return SLIM_OK;
    void *state = NULL;
    if (op->prepare && op->prepare(n, &state, &quiet))
        return SLIM_OK;
    const slim_tensor **in = calloc((size_t)n->n_in + 1, sizeof(*in));
    slim_tensor *outs = calloc((size_t)n->n_out + 1, sizeof(*outs));
    slim_tensor **out = calloc((size_t)n->n_out + 1, sizeof(*out));
    slim_status st = SLIM_OK;
    if (!in || !outs || !out) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
        goto done;
    }
    for (int k = 0; k < n->n_in; k++)
        in[k] = n->in[k] >= 0 ? &f->known[n->in[k]] : NULL;
    for (int k = 0; k < n->n_out; k++) {
        outs[k].ndim = -1;
        out[k] = n->out[k] >= 0 ? &outs[k] : NULL;
    }
    /* A view of the node with its operator set, as kernels expect; the
     * graph's node keeps op NULL for finalize. */
    slim_node view = *n;
    view.op = op;
    view.op_state = state;
    slim_op_ctx ctx = {.node = &view, .state = state, .n_in = n->n_in, .in = in,
                       .n_out = n->n_out, .out = out, .err = err};
    /* Strings given to an op that does not take them: left to the
     * executor, which says so (the same below for outputs). */
    for (int k = 0; k < n->n_in; k++)
        if (in[k] && in[k]->dtype == SLIM_STRING && !slim__op_takes_strings(op))
            goto done;
    st = op->infer(&ctx);
    if (st == SLIM_ENEEDVALUE) {
        st = SLIM_OK;
        goto done;
    }
    if (st)
        goto done;
    int64_t out_bytes = 0;
    bool is_output = false;
    for (int k = 0; k < n->n_out; k++) {
        if (!out[k])
            continue;
        if (out[k]->kind != SLIM_KIND_TENSOR || out[k]->ndim < 0 || out[k]->ndim > SLIM_MAX_DIMS ||
            !slim_dtype_size(out[k]->dtype))
            goto done; /* left to the executor */
        int64_t b = shape_bytes(out[k]);
        if (b < 0) {
            /* As the executor's planner says it. */
            char s[160];
            st = slim_errf(err, SLIM_ESHAPE, "output %d would have shape %s: more than 2^62 "
                           "bytes, or a negative dimension", k,
                           slim_shape_str(out[k]->ndim, out[k]->dims, s, sizeof(s)));
            goto done;
        }
        out_bytes += b;
        is_output = is_output || g->values[n->out[k]].is_output;
    }
    /* A node the executor would refuse strings to is left to it, to say so. */
    bool strings = false;
    for (int k = 0; k < n->n_out; k++)
        strings = strings || (out[k] && out[k]->dtype == SLIM_STRING);
    if (strings && !slim__op_takes_strings(op))
        goto done;
    for (int k = 0; k < n->n_out; k++)
        if (out[k]) {
            f->known[n->out[k]] = *out[k];
            f->known[n->out[k]].data = NULL;
        }
    bool constant = all_data || (op->flags & SLIM_OP_SHAPE_ONLY);
    bool is_const_node = strcmp(n->op_type, "Constant") == 0;
    int64_t grow = growth_of(f, n, out_bytes);
    if (!constant || is_output || (!op->exec && !(op->flags & SLIM_OP_ALIAS0)) ||
        (!is_const_node && (out_bytes > FOLD_MAX_BYTES || f->growth + grow > FOLD_BUDGET)))
        goto done;
    if ((op->flags & SLIM_OP_ALIAS0) && (n->n_in < 1 || !in[0] || n->n_out < 1 || !out[0]))
        goto done;
    if (!(st = fold_node(f, n, &ctx, out)))
        f->growth += grow;
done:
    if (st && st != SLIM_ENOMEM)
        slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(n));
    if (op->release && state)
        op->release(state);
    free(in);
    free(outs);
    free(out);
    return st;
}

static slim_status fold_constants_run(slim_graph *g, int *changed, slim_err *err)
{
    fold_walk f = {.g = g};
    slim_status st = slim_pass_walk_init(&f.w, g, err);
    if (st)
        return st;
    f.known = calloc((size_t)g->n_values + 1, sizeof(slim_tensor));
    f.remaining = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!f.known || !f.remaining)
        st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    if (!st)
        st = topo_order(&f, err);
    for (int v = 0; !st && v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        f.remaining[v] = f.w.uses.readers[v];
        f.known[v].ndim = -1;
        if (val->kind == SLIM_VALUE_INITIALIZER && !val->init.device &&
            (val->init.data || slim_tensor_numel(&val->init) == 0))
            f.known[v] = val->init;
    }
    /* A graph input is known by shape when it declares all of it. */
    for (int k = 0; !st && k < g->n_inputs; k++) {
        int v = g->inputs[k];
        const slim_io_info *info = &g->values[v].info;
        if (g->values[v].kind != SLIM_VALUE_INPUT || info->kind != SLIM_KIND_TENSOR ||
            info->dtype == SLIM_DTYPE_UNDEFINED || info->ndim < 0 || info->ndim > SLIM_MAX_DIMS)
            continue;
        slim_tensor t = {.dtype = info->dtype, .ndim = info->ndim};
        bool full = true;
        for (int d = 0; d < info->ndim; d++) {
            t.dims[d] = info->dims[d];
            full = full && info->dims[d] >= 0;
        }
        if (full && shape_bytes(&t) >= 0)
            f.known[v] = t;
    }
    for (int i = 0; !st && i < f.n_order; i++)
        st = visit(&f, &g->nodes[f.order[i]], err);
    *changed += f.folded;
    free(f.known);
    free(f.remaining);
    free(f.order);
    return slim_pass_walk_finish(&f.w, g, st);
}

const slim_pass slim__pass_fold_constants = {"fold_constants", fold_constants_run};
