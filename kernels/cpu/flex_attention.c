/*
 * flex_attention.c - FlexAttention (ai.onnx.preview, opset 1).
 *
 * softmax(score_mod(Q K^T * scale)) then prob_mod, times V, over rank-4
 * [batch, heads, seq, dim] inputs, with grouped query heads (K and V heads
 * shared by Hq / Hkv query heads each). score_mod and prob_mod are
 * subgraphs of one input and one output that see the whole score (or
 * probability) tensor at once, [B, Hq, L, S]; they run as nested models
 * like an If branch (kernels/cpu/control.c), charged to the same account.
 *
 * The scores and probabilities are held in the softmax precision (float32,
 * or float64 for float64 inputs or softmax_precision = DOUBLE) in scratch
 * tensors from the allocator; the products accumulate in double. Half
 * precision inputs are scaled and multiplied in half first (Q and K each
 * times sqrt(scale), the product rounded to half), as onnx's reference
 * does, so the result rounds the same way.
 */
#include "kernel.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    slim_model *mod[2];     /* score_mod, prob_mod; NULL when absent */
    const char *name[2];    /* each one's input */
    bool has_scale;
    double scale;
    slim_dtype precision;   /* UNDEFINED: from the inputs */
} flex_state;

static void flex_release(void *p)
{
    flex_state *s = p;
    if (!s)
        return;
    for (int i = 0; i < 2; i++)
        slim_model_free(s->mod[i]);
    free(s);
}

static slim_status flex_prepare(slim_node *node, void **state, slim_err *err)
{
    static const char *const attrs[2] = {"score_mod", "prob_mod"};
    /* raw: fixed-size load-time state, freed with the model */
    flex_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    for (int i = 0; i < 2 && !st; i++) {
        const slim_attr *a = slim_node_attr(node, attrs[i]);
        if (!a)
            continue;
        if (a->type != SLIM_ATTR_GRAPH || !a->g) {
            st = slim_errf(err, SLIM_EINVAL, "attribute %s must be a graph", attrs[i]);
            break;
        }
        if ((st = slim__model_from_subgraph(a->g, &s->mod[i], err))) {
            slim_err_prefix(err, "%s: ", attrs[i]);
            break;
        }
        const slim_graph *g = s->mod[i]->graph;
        if (g->n_inputs != 1 + node->n_implicit || g->n_outputs != 1)
            st = slim_errf(err, SLIM_EPARSE, "%s must take 1 input and give 1 output, it takes "
                           "%d and gives %d", attrs[i], g->n_inputs - node->n_implicit,
                           g->n_outputs);
        else
            s->name[i] = g->values[g->inputs[0]].name;
    }
    const slim_attr *sc = slim_node_attr(node, "scale");
    if (!st && sc) {
        s->has_scale = true;
        s->scale = sc->f;
    }
    int64_t p = slim_attr_int(node, "softmax_precision", 0);
    if (!st && p) {
        s->precision = p > 0 && p < 64 ? slim_dtype_from_onnx((int)p) : SLIM_DTYPE_UNDEFINED;
        if (!slim_dtype_is_float(s->precision))
            st = slim_errf(err, SLIM_EINVAL, "softmax_precision %lld is not a float type",
                           (long long)p);
    }
    if (st) {
        flex_release(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

static slim_status flex_infer(slim_op_ctx *ctx)
{
    const slim_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    static const char *const names[3] = {"Q", "K", "V"};
    for (int i = 0; i < 3; i++) {
        slim_status st = slim_check_dtype(ctx->in[i], names[i], ctx->err, SLIM_F32, SLIM_F64,
                                          SLIM_F16, SLIM_BF16, SLIM_DTYPE_UNDEFINED);
        if (st)
            return st;
        if (ctx->in[i]->ndim != 4)
            return slim_errf(ctx->err, SLIM_ESHAPE, "%s must have rank 4, it has %d", names[i],
                             ctx->in[i]->ndim);
        if (ctx->in[i]->dtype != q->dtype)
            return slim_errf(ctx->err, SLIM_ETYPE, "Q, K and V must share a data type");
    }
    if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0] || k->dims[1] != v->dims[1] ||
        k->dims[2] != v->dims[2] || k->dims[3] != q->dims[3])
        return slim_errf(ctx->err, SLIM_ESHAPE, "Q, K and V disagree on batch, heads, sequence "
                         "or head size");
    if (k->dims[1] == 0 || q->dims[1] % k->dims[1] != 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "%lld query heads are not a multiple of %lld "
                         "key/value heads", (long long)q->dims[1], (long long)k->dims[1]);
    slim_tensor_set_shape(ctx->out[0], v->dtype, 4,
                          (int64_t[]){q->dims[0], q->dims[1], q->dims[2], v->dims[3]});
    return SLIM_OK;
}

/* Runs mod i on *t (the scores or the probabilities) and replaces *t with
 * its output, which must keep the shape; converted to t's dtype. */
static slim_status run_mod(slim_op_ctx *ctx, int i, slim_tensor *t)
{
    const flex_state *s = ctx->state;
    const int n = s->mod[i]->graph->n_inputs, implicit0 = ctx->n_in - ctx->node->n_implicit;
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *args = calloc((size_t)n, sizeof(slim_tensor));
    const char **names = calloc((size_t)n, sizeof(char *));
    if (!args || !names) {
        free(args);
        free(names);
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    }
    const slim_graph *g = s->mod[i]->graph;
    for (int k = 0; k < n; k++) {
        args[k] = k == 0 ? *t : *ctx->in[implicit0 + k - 1];
        args[k].buf = NULL; /* borrowed for the call */
        names[k] = g->values[g->inputs[k]].name;
    }
    slim_tensor *outs = NULL;
    int n_outs = 0;
    slim_status st = slim_model_run(s->mod[i], n, names, args, &outs, &n_outs, ctx->err);
    free(args);
    free(names);
    const char *what = i ? "prob_mod" : "score_mod";
    if (st)
        return slim_err_prefix(ctx->err, "%s: ", what);
    const slim_tensor *o = &outs[0];
    if (slim_tensor_numel(o) != slim_tensor_numel(t) || o->ndim > 4 ||
        slim_dtype_size(o->dtype) == 0) {
        st = slim_errf(ctx->err, SLIM_ESHAPE, "%s gave %lld values, expected %lld", what,
                       (long long)slim_tensor_numel(o), (long long)slim_tensor_numel(t));
    } else {
        int64_t cnt = slim_tensor_numel(t);
        for (int64_t j = 0; j < cnt; j++)
            slim_store_f64(t->dtype, t->data, j, slim_load_f64(o->dtype, o->data, j));
    }
    slim_tensors_free(outs, n_outs);
    return st;
}

static double rnd(slim_dtype dt, double v)
{
    return dt == SLIM_F16 ? slim_f16_to_f32(slim_f32_to_f16((float)v))
           : dt == SLIM_BF16 ? slim_bf16_to_f32(slim_f32_to_bf16((float)v))
                             : v;
}

static slim_status flex_exec(slim_op_ctx *ctx)
{
    const flex_state *s = ctx->state;
    const slim_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const int64_t B = q->dims[0], Hq = q->dims[1], L = q->dims[2], E = q->dims[3];
    const int64_t Hkv = k->dims[1], S = k->dims[2], Ev = v->dims[3], rep = Hq / Hkv;
    const slim_dtype dt = q->dtype;
    const bool half = dt == SLIM_F16 || dt == SLIM_BF16;
    slim_dtype cd = s->precision ? s->precision : dt == SLIM_F64 ? SLIM_F64 : SLIM_F32;
    if (cd != SLIM_F64)
        cd = SLIM_F32; /* half precisions compute in float32, as the reference does */
    double scale = s->has_scale ? s->scale : 1.0 / sqrt((double)E);
    /* sqrt(scale) in float32, then in the inputs' type (the reference's). */
    double ss = rnd(dt, (float)sqrt((float)scale));
    slim_tensor sc = {0};
    slim_tensor_set_shape(&sc, cd, 4, (int64_t[]){B, Hq, L, S});
    slim_status st = slim_tensor_alloc(&sc, ctx->err);
    if (st)
        return st;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t hk = h / rep;
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) {
                    double acc = 0;
                    const int64_t qo = ((b * Hq + h) * L + i) * E, ko = ((b * Hkv + hk) * S + j) * E;
                    for (int64_t e = 0; e < E; e++)
                        acc += rnd(dt, slim_load_f64(dt, q->data, qo + e) * ss) *
                               rnd(dt, slim_load_f64(dt, k->data, ko + e) * ss);
                    slim_store_f64(cd, sc.data, ((b * Hq + h) * L + i) * S + j,
                                   half ? rnd(dt, acc) : acc);
                }
        }
    if (s->mod[0] && (st = run_mod(ctx, 0, &sc)))
        goto done;
    /* softmax over the last axis, in place */
    for (int64_t r = 0; r < B * Hq * L; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
            double x = slim_load_f64(cd, sc.data, r * S + j);
            mx = x > mx ? x : mx;
        }
        for (int64_t j = 0; j < S; j++) {
            double e = exp(slim_load_f64(cd, sc.data, r * S + j) - mx);
            slim_store_f64(cd, sc.data, r * S + j, e);
            sum += e;
        }
        for (int64_t j = 0; j < S; j++)
            slim_store_f64(cd, sc.data, r * S + j, slim_load_f64(cd, sc.data, r * S + j) / sum);
    }
    if (s->mod[1] && (st = run_mod(ctx, 1, &sc)))
        goto done;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t hk = h / rep;
            for (int64_t i = 0; i < L; i++) {
                const int64_t po = ((b * Hq + h) * L + i) * S;
                for (int64_t e = 0; e < Ev; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < S; j++)
                        acc += slim_load_f64(cd, sc.data, po + j) *
                               slim_load_f64(dt, v->data, ((b * Hkv + hk) * S + j) * Ev + e);
                    slim_store_f64(v->dtype, ctx->out[0]->data,
                                   ((b * Hq + h) * L + i) * Ev + e, acc);
                }
            }
        }
done:
    slim_tensor_release(&sc);
    return st;
}

const slim_op_def slim__ops_preview[] = {
    {"FlexAttention", 1, flex_prepare, flex_release, flex_infer, flex_exec, 0},
    {NULL, 0, NULL, NULL, NULL, NULL, 0},
};
