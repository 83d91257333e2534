/* pass.c - the pass list and the graph-editing helpers passes share. */
#include "pass.h"
#include "cancel.h"
#include "device.h"
#include "slim_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern const slim_pass slim__pass_fold_bn;
extern const slim_pass slim__pass_fuse_conv;
extern const slim_pass slim__pass_blocked_layout;
extern const slim_pass slim__pass_fuse_matmul;
extern const slim_pass slim__pass_fold_constants;
extern const slim_pass slim__pass_simplify_shapes;
extern const slim_pass slim__pass_fuse_layernorm;
extern const slim_pass slim__pass_fuse_add_layernorm; /* after fuse_layernorm */
extern const slim_pass slim__pass_fuse_gelu;
extern const slim_pass slim__pass_fold_attention_scale; /* GPU only */
extern const slim_pass slim__pass_fuse_attention;
extern const slim_pass slim__pass_attention_qkv; /* after fuse_attention */
extern const slim_pass slim__pass_fuse_int8_epilogue; /* after fuse_gelu */
extern const slim_pass slim__pass_fuse_matmul_bias; /* GPU only; last */

/* Folding BatchNormalization first gives fuse_conv a Conv whose only
 * reader is the activation or the residual Add; blocked_layout then links
 * the FusedConvs fuse_conv made. */
const slim_pass *const slim_passes[] = {
    &slim__pass_fold_bn,
    &slim__pass_fuse_conv,
    &slim__pass_blocked_layout,
    &slim__pass_fuse_matmul,
    /* After fuse_matmul, which takes the GELUs it can fuse into a product;
     * fuse_layernorm, fuse_gelu and fuse_attention read the scalars (and
     * the Reshape shapes) fold_constants made initializers. */
    &slim__pass_fold_constants,
    &slim__pass_simplify_shapes,
    &slim__pass_fuse_layernorm,
    &slim__pass_fuse_add_layernorm,
    &slim__pass_fuse_gelu,
    &slim__pass_fold_attention_scale,
    &slim__pass_fuse_attention,
    &slim__pass_attention_qkv,
    &slim__pass_fuse_int8_epilogue,
    &slim__pass_fuse_matmul_bias,
    NULL,
};

slim_status slim_passes_run(slim_graph *g, slim_err *err)
{
    return slim_passes_run_for(g, true, err);
}

static slim_status passes_run(slim_graph *g, bool host, bool gpu_half, slim_err *err);

slim_status slim_passes_run_for(slim_graph *g, bool host, slim_err *err)
{
    return passes_run(g, host, false, err);
}

/* FusedAttention has a GPU kernel for half operands only (kernels/cuda/
 * attention.cu): a float32 graph about to be made half takes the pass when
 * SLIM_CUDA_FUSED_ATTENTION=1. Off by default: on an H200 (2026-11-27,
 * fp16 BERT-base) it was faster at batch 1 and slower at batch 32
 * (docs/cuda.md). */
slim_status slim_passes_run_gpu(slim_graph *g, bool half, slim_err *err)
{
    const char *env = getenv("SLIM_CUDA_FUSED_ATTENTION");
    return passes_run(g, false, half && env && env[0] == '1', err);
}

static slim_status passes_run(slim_graph *g, bool host, bool gpu_half, slim_err *err)
{
    const char *env = getenv("SLIM_PASSES");
    if (env && strcmp(env, "0") == 0)
        return SLIM_OK;
    for (int i = 0; slim_passes[i]; i++) {
        int changed = 0;
        slim_status st = slim_cancel_status(err); /* a load's time bound */
        if (st)
            return st;
        /* On the host FusedAttention applies the scale in its kernel. */
        if (host && slim_passes[i] == &slim__pass_fold_attention_scale)
            continue;
        /* On the host FusedMatMul (fuse_matmul) takes the bias. */
        if (host && slim_passes[i] == &slim__pass_fuse_matmul_bias)
            continue;
        /* On a GPU: no passes whose operators only the CPU runs
         * (FusedConv, the blocked layout, FusedAttention in float32); they would pull
         * those nodes, and the copies around them, back to the host.
         * AddLayerNorm has a CUDA kernel (kernels/cuda/norm.cu). */
        if (!host && ((slim_passes[i] == &slim__pass_fuse_attention && !gpu_half) ||
                      slim_passes[i] == &slim__pass_fuse_conv ||
                      slim_passes[i] == &slim__pass_blocked_layout))
            continue;
        if (!host && slim_passes[i] == &slim__pass_fuse_matmul)
            st = slim_pass_defuse_matmul(g, err); /* a file's */
        else if (!host && slim_passes[i] == &slim__pass_attention_qkv)
            st = slim_pass_unmerge_qkv(g, err); /* a file's merged projections */
        else
            st = slim_passes[i]->run(g, &changed, err);
        if (st)
            return slim_err_prefix(err, "pass %s: ", slim_passes[i]->name);
    }
    return SLIM_OK;
}

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
    const slim_tensor *t = &g->values[v].init;
    return t->dtype == SLIM_F32 && !t->device && t->data ? t : NULL;
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
