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

#include "hgemm.h"
#include "kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    slim_graph *g;
    int *consumers;        /* per value: node input slots reading it */
    int *reader;           /* per value: the last node reading it */
    int *readers_before;   /* per value: consumers before the pass */
    bool *dead;            /* per node: fused away */
    slim_half_report *rep;
    const slim_half_opts *opts;
} pass;

static slim_status retype(slim_tensor *t, slim_dtype dt, slim_err *err);

static const slim_value *const_f32(const slim_graph *g, int v)
{
    if (v < 0 || g->values[v].kind != SLIM_VALUE_INITIALIZER)
        return NULL;
    const slim_value *val = &g->values[v];
    return val->init.dtype == SLIM_F32 && val->init.device == NULL ? val : NULL;
}

static bool excluded(const slim_half_opts *o, const slim_node *n)
{
    for (int i = 0; o && i < o->n_exclude; i++)
        if (strcmp(o->exclude[i], n->name) == 0 || strcmp(o->exclude[i], n->op_type) == 0)
            return true;
    return false;
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
    l->bytes_before = slim_tensor_nbytes(&p->g->values[weight].init);
    *out = l;
    return l->name && l->op_type ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

/* The single node reading v when exactly one does and v is no graph output. */
static slim_node *sole_reader(pass *p, int v, const char *op_type)
{
    if (v < 0 || p->consumers[v] != 1 || p->g->values[v].is_output)
        return NULL;
    slim_node *r = &p->g->nodes[p->reader[v]];
    return strcmp(r->op_type, op_type) == 0 && !r->domain[0] && !p->dead[p->reader[v]] ? r : NULL;
}

static slim_status set_int_attr(slim_attr *a, const char *name, int64_t v)
{
    a->name = strdup(name);
    a->type = SLIM_ATTR_INT;
    a->i = v;
    return a->name ? SLIM_OK : SLIM_ENOMEM;
}

/* Replaces node n's operator, inputs and attributes (K, N, activation for
 * MatMulHalf; none for GatherHalf). */
static slim_status rewrite_node(slim_node *n, const char *op_type, int n_in, const int *in,
                                int out, int64_t k, int64_t nn, bool relu, slim_err *err)
{
    char *ot = strdup(op_type), *dom = strdup("com.slimserve");
    int *ins = malloc(sizeof(int) * (size_t)n_in);
    int na = k > 0 ? 2 + relu : 0;
    slim_attr *attrs = na ? calloc((size_t)na, sizeof(*attrs)) : NULL;
    bool ok = ot && dom && ins && (!na || attrs);
    if (ok && k > 0) {
        ok = !set_int_attr(&attrs[0], "K", k) && !set_int_attr(&attrs[1], "N", nn);
        if (ok && relu) {
            attrs[2].name = strdup("activation");
            attrs[2].s = strdup("Relu");
            attrs[2].type = SLIM_ATTR_STRING;
            ok = attrs[2].name && attrs[2].s;
        }
    }
    if (!ok) {
        for (int a = 0; a < na; a++)
            slim_attr_clear(&attrs[a]);
        free(attrs);
        free(ins);
        free(dom);
        free(ot);
        return slim_errf(err, SLIM_ENOMEM, "out of memory converting to half precision");
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

typedef struct {
    int x, w;
    int64_t n, k;
    bool w_nk;             /* weight stored [N, K] (Gemm transB) */
    float alpha, beta;
    int c;                 /* Gemm's C, or -1 */
} linear;

/* Why a MatMul or Gemm with a constant weight cannot be converted, or NULL;
 * fills the layer's geometry. */
static const char *linear_of(const pass *p, const slim_node *n, linear *l)
{
    const slim_graph *g = p->g;
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
    if (gemm && slim_attr_int(n, "transA", 0) != 0)
        return "transA is set";
    if (l->k < 1 || l->n < 1)
        return "empty weight";
    if (l->k > ((int64_t)1 << 31) || l->n > ((int64_t)1 << 31))
        return "weight dim over 2^31";
    if (l->c >= 0) {
        const slim_value *c = const_f32(g, l->c);
        int64_t cn = c ? slim_tensor_numel(&c->init) : 0;
        if (!c || (cn != l->n && cn != 1) || (c->init.ndim == 2 && c->init.dims[0] != 1))
            return "C is not a constant per-channel bias";
    }
    if (!isfinite(l->alpha) || !isfinite(l->beta))
        return "alpha or beta is not finite";
    return NULL;
}

static slim_status convert_linear(pass *p, int id, slim_half_layer *layer, const linear *l,
                                  slim_err *err)
{
    slim_graph *g = p->g;
    slim_dtype half = p->opts->half;
    slim_tensor packed = {.dtype = half, .ndim = 2, .dims = {slim_hgemm_n16(l->n),
                                                             slim_hgemm_k2(l->k)}};
    slim_tensor bias = {.dtype = SLIM_F32, .ndim = 1, .dims = {l->n}};
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
    int out = n->out[0], add = -1, bias_src = l->c;
    float bias_mul = l->beta;
    if (bias_src < 0) {
        slim_node *a = sole_reader(p, out, "Add");
        if (a && a->n_in == 2) {
            int other = a->in[0] == out ? a->in[1] : a->in[0];
            const slim_value *b = const_f32(g, other);
            if (b && a->in[0] != a->in[1] && b->init.ndim <= 1 &&
                slim_tensor_numel(&b->init) == l->n) {
                bias_src = other;
                bias_mul = 1.0f;
                add = (int)(a - g->nodes);
            }
        }
    }
    if (bias_src >= 0) {
        if ((st = slim_tensor_alloc(&bias, err))) {
            slim_tensor_release(&packed);
            return st;
        }
        const slim_tensor *c = &g->values[bias_src].init;
        int64_t cn = slim_tensor_numel(c);
        for (int64_t j = 0; j < l->n; j++)
            ((float *)bias.data)[j] = bias_mul * ((const float *)c->data)[cn == 1 ? 0 : j];
        layer->bytes_before += slim_tensor_nbytes(c);
    }
    if (add >= 0) {
        p->dead[add] = true;
        out = g->nodes[add].out[0];
    }
    slim_node *r = sole_reader(p, out, "Relu");
    if (r) {
        p->dead[r - g->nodes] = true;
        out = r->out[0];
    }
    layer->bytes_after = slim_tensor_nbytes(&packed) + slim_tensor_nbytes(&bias);
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
    return rewrite_node(&g->nodes[id], "MatMulHalf", has_bias ? 3 : 2, in, out, l->k, l->n,
                        r != NULL, err);
}

static slim_status convert_gather(pass *p, int id, slim_half_layer *layer, slim_err *err)
{
    slim_graph *g = p->g;
    slim_dtype half = p->opts->half;
    const slim_tensor *t = &g->values[g->nodes[id].in[0]].init;
    slim_tensor h = {.dtype = half, .ndim = 2, .dims = {t->dims[0], t->dims[1]}};
    slim_status st = slim_tensor_alloc(&h, err);
    if (st)
        return st;
    const float *src = t->data;
    uint16_t *dst = h.data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = half == SLIM_F16 ? slim_f32_to_f16(src[i]) : slim_f32_to_bf16(src[i]);
    layer->bytes_after = slim_tensor_nbytes(&h);
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int in[2] = {-1, g->nodes[id].in[1]};
    if ((in[0] = slim_graph_add_initializer(g, base, half == SLIM_F16 ? ".fp16_table"
                                                                      : ".bf16_table",
                                            &h, err)) < 0) {
        slim_tensor_release(&h);
        return SLIM_ENOMEM;
    }
    return rewrite_node(&g->nodes[id], "GatherHalf", 2, in, g->nodes[id].out[0], 0, 0, false,
                        err);
}

/* Conv: the weight half in Conv's own layout, the rest of the node as it
 * was (ConvHalf widens the weight per run, kernels/cpu/hconv.c). */
static slim_status convert_conv(pass *p, int id, slim_half_layer *layer, slim_err *err)
{
    slim_graph *g = p->g;
    slim_dtype half = p->opts->half;
    const slim_tensor *t = &g->values[g->nodes[id].in[1]].init;
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
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int wv = slim_graph_add_initializer(g, base, half == SLIM_F16 ? ".fp16_weight"
                                                                  : ".bf16_weight", &h, err);
    if (wv < 0) {
        slim_tensor_release(&h);
        return SLIM_ENOMEM;
    }
    slim_node *nd = &g->nodes[id];
    char *ot = strdup("ConvHalf"), *dom = strdup("com.slimserve");
    if (!ot || !dom) {
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory converting to half precision");
    }
    free(nd->op_type);
    free(nd->domain);
    nd->op_type = ot;
    nd->domain = dom;
    nd->opset = 1;
    nd->in[1] = wv;
    return SLIM_OK;
}

static void count_readers(pass *p)
{
    slim_graph *g = p->g;
    memset(p->consumers, 0, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0 && !p->dead[i]) {
                p->consumers[g->nodes[i].in[k]]++;
                p->reader[g->nodes[i].in[k]] = i;
            }
}

/* Float weights and biases that only converted layers read stop being
 * initializers: their memory goes back to the allocator. */
static void drop_unread(pass *p, int first_new_value)
{
    slim_graph *g = p->g;
    count_readers(p);
    for (int v = 0; v < first_new_value; v++) {
        slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER || p->consumers[v] || val->is_output ||
            !p->readers_before[v])
            continue;
        slim_tensor_release(&val->init);
        memset(&val->init, 0, sizeof(val->init));
        val->kind = SLIM_VALUE_INTERMEDIATE;
    }
}

static void remove_dead(pass *p)
{
    slim_graph *g = p->g;
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        if (!p->dead[i]) {
            g->nodes[w++] = *n;
            continue;
        }
        for (int a = 0; a < n->n_attrs; a++)
            slim_attr_clear(&n->attrs[a]);
        free(n->attrs);
        free(n->name);
        free(n->op_type);
        free(n->domain);
        free(n->in);
        free(n->out);
    }
    g->n_nodes = w;
}

/* A layer the pruning pass made sparse (quant/prune.h, run first): its
 * values become half in place; the indices stay as they are. The sparse
 * kernel reads float32, fp16 and bf16 values alike (kernels/sparse.h). */
static slim_status convert_sparse(pass *p, int id, slim_err *err)
{
    slim_node *n = &p->g->nodes[id];
    int wv = n->n_in > 1 ? n->in[1] : -1;
    if (!const_f32(p->g, wv) || p->consumers[wv] != 1)
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
    slim_tensor *w = &p->g->values[wv].init;
    if ((st = retype(w, p->opts->half, err)))
        return st;
    layer->bytes_after = slim_tensor_nbytes(w);
    layer->converted = true;
    p->rep->bytes_before += layer->bytes_before;
    p->rep->bytes_after += layer->bytes_after;
    return SLIM_OK;
}

static slim_status run_pass(pass *p, int first_new_value, slim_err *err)
{
    slim_graph *g = p->g;
    int n_nodes = g->n_nodes;
    count_readers(p);
    memcpy(p->readers_before, p->consumers, sizeof(int) * (size_t)g->n_values);
    for (int i = 0; i < n_nodes; i++) {
        if (p->dead[i])
            continue;
        slim_node *n = &g->nodes[i];
        if (strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "SparseMatMul") == 0) {
            slim_status st = convert_sparse(p, i, err);
            if (st)
                return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&g->nodes[i]));
            continue;
        }
        bool mm = strcmp(n->op_type, "MatMul") == 0, gemm = strcmp(n->op_type, "Gemm") == 0;
        bool gather = strcmp(n->op_type, "Gather") == 0, conv = strcmp(n->op_type, "Conv") == 0;
        if (n->domain[0] || !(mm || gemm || gather || conv) || n->n_in < 2 || n->n_out < 1)
            continue;
        int wv = gather ? n->in[0] : n->in[1];
        const slim_value *w = const_f32(g, wv);
        if (!w || (conv ? w->init.ndim < 3 : w->init.ndim != 2))
            continue;
        slim_half_layer *layer = NULL;
        slim_status st = add_layer(p, n, wv, &layer, err);
        if (st)
            return st;
        linear l;
        if (excluded(p->opts, n))
            layer->why = "excluded";
        else if (gather) {
            int64_t axis = slim_attr_int(n, "axis", 0);
            if (axis != 0 && axis != -2)
                layer->why = "gathers along axis 1";
        } else if (conv) {
            /* A float32 bias that is not constant would be a graph value
             * ConvHalf reads as float32 anyway: nothing to check. */
        } else {
            layer->why = linear_of(p, n, &l);
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
        drop_unread(p, first_new_value);
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
    int first_new = g->n_values;
    /* New values are added as layers are converted: room for 2 per node. */
    size_t nv = (size_t)g->n_values + 2 * (size_t)g->n_nodes + 1;
    pass p = {g, calloc(nv, sizeof(int)), calloc(nv, sizeof(int)), calloc(nv, sizeof(int)),
              calloc((size_t)g->n_nodes + 1, sizeof(bool)), rep, opts};
    slim_status st = SLIM_OK;
    if (!p.consumers || !p.reader || !p.readers_before || !p.dead)
        st = slim_errf(err, SLIM_ENOMEM, "out of memory converting to half precision");
    if (!st)
        st = run_pass(&p, first_new, err);
    if (!st) {
        drop_unread(&p, first_new);
        remove_dead(&p);
    }
    free(p.consumers);
    free(p.reader);
    free(p.readers_before);
    free(p.dead);
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

static slim_status set_op(slim_node *n, const char *op_type, const char *domain, int opset,
                          slim_err *err)
{
    char *ot = strdup(op_type), *dom = strdup(domain);
    if (!ot || !dom) {
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
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
            st = set_op(n, "Conv", "", g->opset, err);
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
            st = set_op(n, "ConvHalf", "com.slimserve", 1, err);
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
