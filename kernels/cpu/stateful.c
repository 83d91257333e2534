/*
 * stateful.c - layers that carry a state from one call to the next, as
 * recurrent-style language models (Mamba-like, gated delta networks) do
 * token by token: LinearAttention and CausalConvWithState (opset 27).
 *
 * LinearAttention keeps per key/value head a d_k x d_v state S. Each step
 * t optionally decays it (S *= exp(g_t), per head or per key dim: "gated"),
 * optionally corrects the value by what S already recalls for the key
 * (v_t <- beta_t (v_t - S^T k_t): "delta"), writes S += k_t v_t^T and
 * reads o_t = scale * S^T q_t for each query head of the group. The state
 * is kept in double over the sequence: a long prompt is thousands of
 * rank-one updates.
 *
 * CausalConvWithState is a depthwise causal 1-D convolution whose left
 * context is the previous call's last k - 1 inputs (past_state); it
 * returns the new last k - 1 as present_state.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static slim_status check_float(const slim_tensor *t, const char *what, slim_err *err)
{
    return slim_check_dtype(t, what, err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                            SLIM_DTYPE_UNDEFINED);
}

/* ---- LinearAttention ----------------------------------------------------- */

typedef struct {
    int64_t hq, hkv;
    bool gating, delta, has_scale;
    double scale;
} la_state;

static slim_status la_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *rule = slim_attr_str(node, "update_rule", "gated_delta");
    la_state st = {0};
    if (strcmp(rule, "linear") == 0)
        ;
    else if (strcmp(rule, "gated") == 0)
        st.gating = true;
    else if (strcmp(rule, "delta") == 0)
        st.delta = true;
    else if (strcmp(rule, "gated_delta") == 0)
        st.gating = st.delta = true;
    else
        return slim_errf(err, SLIM_EINVAL, "update_rule \"%s\" is not linear, gated, delta or "
                         "gated_delta", rule);
    st.hq = slim_attr_int(node, "q_num_heads", 0);
    st.hkv = slim_attr_int(node, "kv_num_heads", 0);
    if (st.hq <= 0 || st.hkv <= 0 || st.hq > (1 << 20) || st.hq % st.hkv)
        return slim_errf(err, SLIM_EINVAL, "q_num_heads = %lld must be a positive multiple of "
                         "kv_num_heads = %lld", (long long)st.hq, (long long)st.hkv);
    float sc = slim_attr_float(node, "scale", 0.0f);
    st.has_scale = sc != 0.0f;
    st.scale = sc;
    /* raw: fixed-size load-time state, freed with the model */
    la_state *p = malloc(sizeof(*p));
    if (!p)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    *p = st;
    *state = p;
    return SLIM_OK;
}

typedef struct {
    int64_t B, T, dk, dv, decay_w, beta_w; /* decay_w/beta_w: last dims, 0 when absent */
} la_dims;

static slim_status la_dims_get(const slim_op_ctx *ctx, la_dims *d)
{
    const la_state *st = ctx->state;
    const slim_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const slim_tensor *ps = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *dec = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *beta = ctx->n_in > 5 ? ctx->in[5] : NULL;
    char a[128], b[128], c[128];
    slim_status s;
    memset(d, 0, sizeof(*d));
    if ((s = check_float(q, "query", ctx->err)) || (s = check_float(k, "key", ctx->err)) ||
        (s = check_float(v, "value", ctx->err)))
        return s;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->dims[0] != q->dims[0] ||
        v->dims[0] != q->dims[0] || k->dims[1] != q->dims[1] || v->dims[1] != q->dims[1] ||
        q->dims[2] % st->hq || k->dims[2] % st->hkv || v->dims[2] % st->hkv ||
        q->dims[2] / st->hq != k->dims[2] / st->hkv)
        return slim_errf(ctx->err, SLIM_ESHAPE, "query %s, key %s and value %s must be [B, T, "
                         "heads * d] with %lld query and %lld key/value heads and one d_k",
                         slim_shape_str(q->ndim, q->dims, a, sizeof(a)),
                         slim_shape_str(k->ndim, k->dims, b, sizeof(b)),
                         slim_shape_str(v->ndim, v->dims, c, sizeof(c)), (long long)st->hq,
                         (long long)st->hkv);
    d->B = q->dims[0];
    d->T = q->dims[1];
    d->dk = q->dims[2] / st->hq;
    d->dv = v->dims[2] / st->hkv;
    if (st->gating != (dec != NULL) || st->delta != (beta != NULL))
        return slim_errf(ctx->err, SLIM_EINVAL, "this update_rule %s decay and %s beta",
                         st->gating ? "needs" : "takes no", st->delta ? "needs" : "takes no");
    if (dec) {
        if ((s = check_float(dec, "decay", ctx->err)))
            return s;
        d->decay_w = dec->ndim == 3 ? dec->dims[2] : -1;
        if (dec->ndim != 3 || dec->dims[0] != d->B || dec->dims[1] != d->T ||
            (d->decay_w != st->hkv && d->decay_w != st->hkv * d->dk))
            return slim_errf(ctx->err, SLIM_ESHAPE, "decay %s must be [%lld, %lld, %lld or %lld]",
                             slim_shape_str(dec->ndim, dec->dims, a, sizeof(a)), (long long)d->B,
                             (long long)d->T, (long long)st->hkv, (long long)(st->hkv * d->dk));
    }
    if (beta) {
        if ((s = check_float(beta, "beta", ctx->err)))
            return s;
        d->beta_w = beta->ndim == 3 ? beta->dims[2] : -1;
        if (beta->ndim != 3 || beta->dims[0] != d->B || beta->dims[1] != d->T ||
            (d->beta_w != st->hkv && d->beta_w != 1))
            return slim_errf(ctx->err, SLIM_ESHAPE, "beta %s must be [%lld, %lld, %lld or 1]",
                             slim_shape_str(beta->ndim, beta->dims, a, sizeof(a)), (long long)d->B,
                             (long long)d->T, (long long)st->hkv);
    }
    if (ps) {
        if ((s = check_float(ps, "past_state", ctx->err)))
            return s;
        if (ps->ndim != 4 || ps->dims[0] != d->B || ps->dims[1] != st->hkv ||
            ps->dims[2] != d->dk || ps->dims[3] != d->dv)
            return slim_errf(ctx->err, SLIM_ESHAPE, "past_state %s must be [%lld, %lld, %lld, %lld]",
                             slim_shape_str(ps->ndim, ps->dims, a, sizeof(a)), (long long)d->B,
                             (long long)st->hkv, (long long)d->dk, (long long)d->dv);
    }
    return SLIM_OK;
}

static slim_status la_infer(slim_op_ctx *ctx)
{
    const la_state *st = ctx->state;
    la_dims d;
    slim_status s = la_dims_get(ctx, &d);
    if (s)
        return s;
    const slim_tensor *ps = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, 3,
                          (int64_t[]){d.B, d.T, st->hq * d.dv});
    if (ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], ps ? ps->dtype : ctx->in[0]->dtype, 4,
                              (int64_t[]){d.B, st->hkv, d.dk, d.dv});
    return SLIM_OK;
}

static slim_status la_exec(slim_op_ctx *ctx)
{
    const la_state *st = ctx->state;
    la_dims d;
    slim_status s = la_dims_get(ctx, &d);
    if (s)
        return s;
    const slim_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    const slim_tensor *ps = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const slim_tensor *dec = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *beta = ctx->n_in > 5 ? ctx->in[5] : NULL;
    slim_tensor *y = ctx->out[0], *pres = ctx->out[1];
    const int64_t dk = d.dk, dv = d.dv, group = st->hq / st->hkv;
    const double scale = st->has_scale ? st->scale : 1.0 / sqrt((double)(dk > 0 ? dk : 1));
    double *S = slim_scratch_malloc(sizeof(double) * (size_t)(dk * dv > 0 ? dk * dv : 1));
    double *vt = slim_scratch_malloc(sizeof(double) * (size_t)(dv > 0 ? dv : 1));
    if (!S || !vt) {
        slim_scratch_free(S);
        slim_scratch_free(vt);
        return slim_scratch_oom(ctx->err);
    }
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < st->hkv; h++) {
            const int64_t s_off = (b * st->hkv + h) * dk * dv;
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] = ps ? slim_load_f64(ps->dtype, ps->data, s_off + i) : 0.0;
            for (int64_t t = 0; t < d.T; t++) {
                const int64_t bt = b * d.T + t;
                const int64_t k_off = (bt * st->hkv + h) * dk, v_off = (bt * st->hkv + h) * dv;
                if (dec)
                    for (int64_t r = 0; r < dk; r++) {
                        int64_t at = d.decay_w == st->hkv ? bt * st->hkv + h
                                                          : (bt * st->hkv + h) * dk + r;
                        double g = exp(slim_load_f64(dec->dtype, dec->data, at));
                        for (int64_t m = 0; m < dv; m++)
                            S[r * dv + m] *= g;
                    }
                for (int64_t m = 0; m < dv; m++)
                    vt[m] = slim_load_f64(v->dtype, v->data, v_off + m);
                if (beta) {
                    double bv = slim_load_f64(beta->dtype, beta->data,
                                              d.beta_w == 1 ? bt : bt * st->hkv + h);
                    for (int64_t m = 0; m < dv; m++) {
                        double got = 0;
                        for (int64_t r = 0; r < dk; r++)
                            got += S[r * dv + m] * slim_load_f64(k->dtype, k->data, k_off + r);
                        vt[m] = bv * (vt[m] - got);
                    }
                }
                for (int64_t r = 0; r < dk; r++) {
                    double kr = slim_load_f64(k->dtype, k->data, k_off + r);
                    for (int64_t m = 0; m < dv; m++)
                        S[r * dv + m] += kr * vt[m];
                }
                for (int64_t g = 0; g < group; g++) {
                    const int64_t hq = h * group + g;
                    const int64_t q_off = (bt * st->hq + hq) * dk, y_off = (bt * st->hq + hq) * dv;
                    for (int64_t m = 0; m < dv; m++) {
                        double acc = 0;
                        for (int64_t r = 0; r < dk; r++)
                            acc += slim_load_f64(q->dtype, q->data, q_off + r) * S[r * dv + m];
                        slim_store_f64(y->dtype, y->data, y_off + m, scale * acc);
                    }
                }
            }
            if (pres)
                for (int64_t i = 0; i < dk * dv; i++)
                    slim_store_f64(pres->dtype, pres->data, s_off + i, S[i]);
        }
    slim_scratch_free(S);
    slim_scratch_free(vt);
    return SLIM_OK;
}

/* ---- CausalConvWithState ------------------------------------------------- */

static slim_status ccs_check(const slim_op_ctx *ctx, int64_t *K)
{
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *ps = ctx->n_in > 3 ? ctx->in[3] : NULL;
    char a[128], b[128];
    slim_status s = check_float(x, "input", ctx->err);
    if (s)
        return s;
    const char *act = slim_attr_str(ctx->node, "activation", "none");
    if (strcmp(act, "none") != 0 && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "activation \"%s\" is not none, silu or swish", act);
    if (x->ndim != 3 || w->ndim != 3 || w->dtype != x->dtype || w->dims[0] != x->dims[1] ||
        w->dims[1] != 1 || w->dims[2] < 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input %s must be [B, C, L] and weight %s [C, 1, "
                         "k] of one type", slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                         slim_shape_str(w->ndim, w->dims, b, sizeof(b)));
    *K = w->dims[2];
    if (bias && (bias->dtype != x->dtype || bias->ndim != 1 || bias->dims[0] != x->dims[1]))
        return slim_errf(ctx->err, SLIM_ESHAPE, "bias must be [%lld]", (long long)x->dims[1]);
    if (ps && (ps->dtype != x->dtype || ps->ndim != 3 || ps->dims[0] != x->dims[0] ||
               ps->dims[1] != x->dims[1] || ps->dims[2] != *K - 1))
        return slim_errf(ctx->err, SLIM_ESHAPE, "past_state %s must be [%lld, %lld, %lld]",
                         slim_shape_str(ps->ndim, ps->dims, a, sizeof(a)), (long long)x->dims[0],
                         (long long)x->dims[1], (long long)(*K - 1));
    return SLIM_OK;
}

static slim_status ccs_infer(slim_op_ctx *ctx)
{
    int64_t K = 1;
    slim_status s = ccs_check(ctx, &K);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0];
    slim_tensor_set_like(ctx->out[0], x);
    if (ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], x->dtype, 3, (int64_t[]){x->dims[0], x->dims[1], K - 1});
    return SLIM_OK;
}

static slim_status ccs_exec(slim_op_ctx *ctx)
{
    int64_t K = 1;
    slim_status s = ccs_check(ctx, &K);
    if (s)
        return s;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *ps = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor *y = ctx->out[0], *pres = ctx->out[1];
    const bool silu = strcmp(slim_attr_str(ctx->node, "activation", "none"), "none") != 0;
    const int64_t B = x->dims[0], C = x->dims[1], L = x->dims[2], P = K - 1;
    double *pad = slim_scratch_malloc(sizeof(double) * (size_t)(L + P > 0 ? L + P : 1));
    if (!pad)
        return slim_scratch_oom(ctx->err);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            const int64_t bc = b * C + c;
            for (int64_t j = 0; j < P; j++)
                pad[j] = ps ? slim_load_f64(ps->dtype, ps->data, bc * P + j) : 0.0;
            for (int64_t l = 0; l < L; l++)
                pad[P + l] = slim_load_f64(x->dtype, x->data, bc * L + l);
            const double b0 = bias ? slim_load_f64(bias->dtype, bias->data, c) : 0.0;
            for (int64_t l = 0; l < L; l++) {
                double acc = b0;
                for (int64_t j = 0; j < K; j++)
                    acc += slim_load_f64(w->dtype, w->data, c * K + j) * pad[l + j];
                if (silu)
                    acc = acc / (1.0 + exp(-acc));
                slim_store_f64(y->dtype, y->data, bc * L + l, acc);
            }
            if (pres)
                for (int64_t j = 0; j < P; j++)
                    slim_store_f64(pres->dtype, pres->data, bc * P + j, pad[L + j]);
        }
    slim_scratch_free(pad);
    return SLIM_OK;
}

const slim_op_def slim__ops_stateful[] = {
    {"LinearAttention", 27, la_prepare, free, la_infer, la_exec, 0},
    {"CausalConvWithState", 27, NULL, NULL, ccs_infer, ccs_exec, 0},
    {0},
};
