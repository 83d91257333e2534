/*
 * half.c - the half-weights pass (see half.h).
 *
 * It edits the graph before finalize the way the int8 pass does: a
 * converted node is rewritten in place (it keeps its name, which exclude
 * lists and reports use), fused Add / Relu nodes are removed, and float
 * weights nothing reads any more are released at once and stop being
 * initializers.
 */
#include "half.h"
#include "rewrite.h"

#include "hgemm.h"
#include "kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    slim_rewrite rw;       /* the graph, its readers, the fused nodes */
    slim_half_report *rep;
    const slim_half_opts *opts;
} pass;

static slim_status retype(slim_tensor *t, slim_dtype dt, slim_err *err);
static slim_status set_op(slim_node *n, const char *op_type, const char *domain, int opset,
                          const char *what, slim_err *err);

static bool excluded(const slim_half_opts *o, const slim_node *n)
{
    return o && slim_rewrite_named(o->exclude, o->n_exclude, n);
}

static slim_status add_layer(pass *p, const slim_node *n, int weight, slim_half_layer **out,
                             slim_err *err)
{
    slim_half_report *r = p->rep;
    slim_half_layer *ls = realloc(r->layers, sizeof(*ls) * (size_t)(r->n_layers + 1));
    if (!ls)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    r->layers = ls;
    slim_half_layer *l = &ls[r->n_layers++];
    memset(l, 0, sizeof(*l));
    l->name = strdup(n->name);
    l->op_type = strdup(n->op_type);
    l->bytes_before = slim_tensor_nbytes(&p->rw.g->values[weight].init);
    *out = l;
    return l->name && l->op_type ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

typedef slim_rewrite_linear linear;

static slim_status convert_linear(pass *p, int id, slim_half_layer *layer, const linear *l,
                                  slim_err *err)
{
    slim_graph *g = p->rw.g;
    slim_dtype half = p->opts->half;
    slim_tensor packed = {.dtype = half, .ndim = 2, .dims = {slim_hgemm_n16(l->n),
                                                             slim_hgemm_k2(l->k)}};
    slim_tensor bias = {0};
    slim_status st = slim_tensor_alloc(&packed, err);
    if (st)
        return st;
    const float *w = g->values[l->w].init.data;
    if (l->alpha != 1.0f) { /* alpha folded in before rounding, as float32 would scale */
        size_t nw = (size_t)(l->n * l->k);
        float *scaled = malloc(sizeof(float) * nw);
        if (!scaled) {
            slim_tensor_release(&packed);
            return slim_errf(err, SLIM_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < nw; i++)
            scaled[i] = w[i] * l->alpha;
        slim_hgemm_pack(scaled, l->n, l->k, l->w_nk ? l->k : 1, l->w_nk ? 1 : l->n, half,
                        packed.data);
        free(scaled);
    } else {
        slim_hgemm_pack(w, l->n, l->k, l->w_nk ? l->k : 1, l->w_nk ? 1 : l->n, half,
                        packed.data);
    }

    /* The bias: Gemm's beta * C, or a constant Add right after. */
    slim_node *n = &g->nodes[id];
    int out = n->out[0], add = -1;
    if ((st = slim_rewrite_linear_bias(&p->rw, n, l, &bias, &add, &layer->bytes_before, err))) {
        slim_tensor_release(&packed);
        return st;
    }
    if (add >= 0) {
        p->rw.dead[add] = true;
        out = g->nodes[add].out[0];
    }
    slim_node *r = slim_rewrite_sole_reader(&p->rw, out, "Relu");
    if (r) {
        p->rw.dead[r - g->nodes] = true;
        out = r->out[0];
    }
    layer->bytes_after = slim_tensor_nbytes(&packed) + (bias.data ? slim_tensor_nbytes(&bias) : 0);
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    const char *suffix = half == SLIM_F16 ? ".fp16_weight" : ".bf16_weight";
    int in[3] = {l->x, -1, -1};
    bool has_bias = bias.data != NULL;
    if ((in[1] = slim_graph_add_initializer(g, base, suffix, &packed, err)) < 0 ||
        (has_bias && (in[2] = slim_graph_add_initializer(g, base, ".half_bias", &bias, err)) < 0)) {
        slim_tensor_release(&packed);
        slim_tensor_release(&bias);
        return SLIM_ENOMEM;
    }
    return slim_rewrite_matmul_node(&g->nodes[id], "MatMulHalf", has_bias ? 3 : 2, in, out, l->k,
                                    l->n, r != NULL, p->rw.what, err);
}

/* A half copy, same shape, of node id's float32 input `slot`, added as the
 * initializer <node>.fp16_<kind> (or .bf16_<kind>): *v gets its value. */
static slim_status add_half_copy(pass *p, int id, int slot, const char *kind,
                                 slim_half_layer *layer, int *v, slim_err *err)
{
    slim_graph *g = p->rw.g;
    slim_dtype half = p->opts->half;
    const slim_tensor *t = &g->values[g->nodes[id].in[slot]].init;
    slim_tensor h = {.dtype = half, .ndim = t->ndim};
    memcpy(h.dims, t->dims, sizeof(h.dims));
    slim_status st = slim_tensor_alloc(&h, err);
    if (st)
        return st;
    const float *src = t->data;
    uint16_t *dst = h.data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = half == SLIM_F16 ? slim_f32_to_f16(src[i]) : slim_f32_to_bf16(src[i]);
    layer->bytes_after = slim_tensor_nbytes(&h);
    char base[300], suffix[32];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    snprintf(suffix, sizeof(suffix), ".%s_%s", half == SLIM_F16 ? "fp16" : "bf16", kind);
    if ((*v = slim_graph_add_initializer(g, base, suffix, &h, err)) < 0) {
        slim_tensor_release(&h);
        return SLIM_ENOMEM;
    }
    return SLIM_OK;
}

static slim_status convert_gather(pass *p, int id, slim_half_layer *layer, slim_err *err)
{
    slim_graph *g = p->rw.g;
    int in[2] = {-1, g->nodes[id].in[1]};
    slim_status st = add_half_copy(p, id, 0, "table", layer, &in[0], err);
    if (st)
        return st;
    return slim_rewrite_matmul_node(&g->nodes[id], "GatherHalf", 2, in, g->nodes[id].out[0], 0, 0,
                                    false, p->rw.what, err);
}

/* Conv: the weight half in Conv's own layout, the rest of the node as it
 * was (ConvHalf widens the weight per run, kernels/cpu/hconv.c). */
static slim_status convert_conv(pass *p, int id, slim_half_layer *layer, slim_err *err)
{
    int wv = -1;
    slim_status st = add_half_copy(p, id, 1, "weight", layer, &wv, err);
    if (st)
        return st;
    slim_node *nd = &p->rw.g->nodes[id];
    if ((st = set_op(nd, "ConvHalf", "com.slimserve", 1, p->rw.what, err)))
        return st;
    nd->in[1] = wv;
    return SLIM_OK;
}

/* A layer the pruning pass made sparse (quant/prune.h, run first): its
 * values become half in place; the indices stay as they are. The sparse
 * kernel reads float32, fp16 and bf16 values alike (kernels/sparse.h). */
static slim_status convert_sparse(pass *p, int id, slim_err *err)
{
    slim_node *n = &p->rw.g->nodes[id];
    int wv = n->n_in > 1 ? n->in[1] : -1;
    if (!slim_pass_const_f32(p->rw.g, wv) || p->rw.uses.readers[wv] != 1)
        return SLIM_OK;
    slim_half_layer *layer = NULL;
    slim_status st = add_layer(p, n, wv, &layer, err);
    if (st)
        return st;
    if (excluded(p->opts, n)) {
        layer->why = "excluded";
        layer->bytes_after = layer->bytes_before;
        return SLIM_OK;
    }
    slim_tensor *w = &p->rw.g->values[wv].init;
    if ((st = retype(w, p->opts->half, err)))
        return st;
    layer->bytes_after = slim_tensor_nbytes(w);
    layer->converted = true;
    p->rep->bytes_before += layer->bytes_before;
    p->rep->bytes_after += layer->bytes_after;
    return SLIM_OK;
}

static slim_status run_pass(pass *p, slim_err *err)
{
    slim_graph *g = p->rw.g;
    int n_nodes = g->n_nodes;
    slim_rewrite_begin(&p->rw);
    for (int i = 0; i < n_nodes; i++) {
        if (p->rw.dead[i])
            continue;
        slim_node *n = &g->nodes[i];
        if (strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "SparseMatMul") == 0) {
            slim_status st = convert_sparse(p, i, err);
            if (st)
                return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&g->nodes[i]));
            continue;
        }
        int wv = -1;
        slim_rewrite_kind kind = slim_rewrite_layer_kind(g, n, 3, SLIM_MAX_DIMS, &wv);
        if (kind == SLIM_REWRITE_NONE)
            continue;
        bool conv = kind == SLIM_REWRITE_CONV, gather = kind == SLIM_REWRITE_GATHER;
        slim_half_layer *layer = NULL;
        slim_status st = add_layer(p, n, wv, &layer, err);
        if (st)
            return st;
        linear l;
        if (excluded(p->opts, n))
            layer->why = "excluded";
        else if (gather) {
            layer->why = slim_rewrite_gather_why(n);
        } else if (conv) {
            /* A float32 bias that is not constant would be a graph value
             * ConvHalf reads as float32 anyway: nothing to check. */
        } else {
            layer->why = slim_rewrite_linear_of(g, n, (int64_t)1 << 31, (int64_t)1 << 31,
                                                "weight dim over 2^31", &l);
        }
        if (layer->why) {
            layer->bytes_after = layer->bytes_before;
            continue;
        }
        st = gather ? convert_gather(p, i, layer, err)
             : conv ? convert_conv(p, i, layer, err)
                    : convert_linear(p, i, layer, &l, err);
        if (st)
            return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&g->nodes[i]));
        layer->converted = true;
        p->rep->bytes_before += layer->bytes_before;
        p->rep->bytes_after += layer->bytes_after;
        /* The float weight goes now, not at the end: the peak is the float
         * model plus one layer. */
        slim_rewrite_drop_unread(&p->rw, true);
    }
    return SLIM_OK;
}

slim_status slim_quant_half_weights(slim_graph *g, const slim_half_opts *opts,
                                    slim_half_report *rep, slim_err *err)
{
    if (!opts || (opts->half != SLIM_F16 && opts->half != SLIM_BF16))
        return slim_errf(err, SLIM_EINVAL, "half weights: the type must be fp16 or bf16");
    slim_half_report local = {0};
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof(*rep));
    /* New values are added as layers are converted: room for 2 per node. */
    pass p = {.rep = rep, .opts = opts};
    slim_status st = slim_rewrite_init(&p.rw, g, 2, "converting to half precision", err);
    if (!st)
        st = slim_rewrite_finish(&p.rw, run_pass(&p, err));
    if (rep == &local)
        slim_half_report_free(&local);
    return st;
}

/* ---- convolutions around the optimization passes ---------------------- */

/* How many node inputs read each value (NULL when out of memory). */
static int *count_all_readers(const slim_graph *g)
{
    int *c = calloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; c && i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0)
                c[g->nodes[i].in[k]]++;
    return c;
}

/* t converted in place to dt (float32 <-> half; widening is exact). */
static slim_status retype(slim_tensor *t, slim_dtype dt, slim_err *err)
{
    slim_tensor r = {.dtype = dt, .ndim = t->ndim};
    memcpy(r.dims, t->dims, sizeof(r.dims));
    slim_status st = slim_tensor_alloc(&r, err);
    if (st)
        return st;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float f = t->dtype == SLIM_F32 ? ((const float *)t->data)[i]
                  : t->dtype == SLIM_F16 ? slim_f16_to_f32(((const uint16_t *)t->data)[i])
                                         : slim_bf16_to_f32(((const uint16_t *)t->data)[i]);
        if (dt == SLIM_F32)
            ((float *)r.data)[i] = f;
        else
            ((uint16_t *)r.data)[i] = dt == SLIM_F16 ? slim_f32_to_f16(f) : slim_f32_to_bf16(f);
    }
    slim_tensor_release(t);
    *t = r;
    return SLIM_OK;
}

/* n's operator set to op_type in domain; what (or NULL) names the pass in
 * the out-of-memory error. */
static slim_status set_op(slim_node *n, const char *op_type, const char *domain, int opset,
                          const char *what, slim_err *err)
{
    char *ot = strdup(op_type), *dom = strdup(domain);
    if (!ot || !dom) {
        free(ot);
        free(dom);
        return what ? slim_errf(err, SLIM_ENOMEM, "out of memory %s", what)
                    : slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    free(n->op_type);
    free(n->domain);
    n->op_type = ot;
    n->domain = dom;
    n->opset = opset;
    return SLIM_OK;
}

slim_status slim_half_conv_widen(slim_graph *g, slim_dtype *half, slim_err *err)
{
    *half = SLIM_DTYPE_UNDEFINED;
    int *readers = count_all_readers(g);
    if (!readers)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        if (strcmp(n->domain, "com.slimserve") != 0 || strcmp(n->op_type, "ConvHalf") != 0 ||
            n->n_in < 2 || n->in[1] < 0)
            continue;
        slim_value *w = &g->values[n->in[1]];
        if (w->kind != SLIM_VALUE_INITIALIZER || readers[n->in[1]] != 1 || w->init.device ||
            (w->init.dtype != SLIM_F16 && w->init.dtype != SLIM_BF16))
            continue;
        /* One type per model; a second one (hand-made graph) stays ConvHalf. */
        if (*half != SLIM_DTYPE_UNDEFINED && *half != w->init.dtype)
            continue;
        *half = w->init.dtype;
        if (!(st = retype(&w->init, SLIM_F32, err)))
            st = set_op(n, "Conv", "", g->opset, NULL, err);
    }
    free(readers);
    return st;
}

slim_status slim_half_conv_narrow(slim_graph *g, slim_dtype half, const slim_half_opts *opts,
                                  slim_err *err)
{
    if (half != SLIM_F16 && half != SLIM_BF16)
        return SLIM_OK;
    int *readers = count_all_readers(g);
    if (!readers)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        bool fused = strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "FusedConv") == 0;
        bool conv = !n->domain[0] && strcmp(n->op_type, "Conv") == 0;
        if (!(fused || conv) || n->n_in < 2 || n->in[1] < 0)
            continue;
        if (excluded(opts, n) || (fused && opts && excluded(opts, &(slim_node){
                                                          .name = n->name, .op_type = "Conv"})))
            continue;
        slim_value *w = &g->values[n->in[1]];
        if (w->kind != SLIM_VALUE_INITIALIZER || readers[n->in[1]] != 1 || w->init.device ||
            w->init.dtype != SLIM_F32 || w->init.ndim < 3)
            continue;
        if (!(st = retype(&w->init, half, err)) && conv)
            st = set_op(n, "ConvHalf", "com.slimserve", 1, NULL, err);
    }
    free(readers);
    return st;
}

void slim_half_report_free(slim_half_report *rep)
{
    if (!rep)
        return;
    for (int i = 0; i < rep->n_layers; i++) {
        free(rep->layers[i].name);
        free(rep->layers[i].op_type);
    }
    free(rep->layers);
    memset(rep, 0, sizeof(*rep));
}
