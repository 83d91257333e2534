/*
 * attention.c - Attention (opset 23, 24): scaled dot-product attention with
 * masks, causal masking, grouped-query heads, softcap and a key/value cache.
 *
 * Q is [B, Hq, Sq, D] (or [B, Sq, Hq*D] with q_num_heads), K [B, Hkv, Skv, D]
 * and V [B, Hkv, Skv, Dv]. past_key/past_value ([B, Hkv, P, D|Dv]) are
 * prepended along the sequence, giving the present_key/present_value
 * outputs and T = P + Skv keys. Query head h reads key/value head
 * h / (Hq / Hkv) (grouped-query attention repeats each KV head in place).
 *
 * For each (batch, query head): S = scale * Q K^T (Sq x T), softcap, plus
 * the bias (attn_mask, causal, padding), a softmax per row, then S V, all
 * in attention_core.c. Keys and values are read in place unless a past
 * cache or present outputs need the concatenated [B, Hkv, T, d] copy.
 *
 * FusedAttention (com.slimserve) is the same core behind the interface
 * passes/fuse_attention.c needs: see its section below.
 *
 * RotaryEmbedding (opset 23) rotates pairs of each head's first
 * rotary_embedding_dim features by per-position angles (cos/sin caches,
 * indexed by position_ids when given): the half-split pairs (i, i + d/2)
 * or, interleaved, (2i, 2i + 1).
 *
 * The order of softcap and mask follows the ONNX reference: softcap first,
 * so a -inf mask stays -inf rather than becoming -softcap. A row with every
 * key masked has no defined softmax; like the reference, it gives NaN.
 */
#include "kernel.h"
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static slim_status attn_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    slim__attn_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->causal = slim_attr_int(node, "is_causal", 0) != 0;
    st->q_heads = slim_attr_int(node, "q_num_heads", 0);
    st->kv_heads = slim_attr_int(node, "kv_num_heads", 0);
    st->qk_mode = slim_attr_int(node, "qk_matmul_output_mode", 0);
    st->has_scale = slim_node_attr(node, "scale") != NULL;
    st->scale = slim_attr_float(node, "scale", 1.0f);
    st->softcap = slim_attr_float(node, "softcap", 0.0f);
    slim_status s = SLIM_OK;
    if (st->q_heads < 0 || st->kv_heads < 0 || st->q_heads > (1 << 20) || st->kv_heads > (1 << 20))
        s = slim_errf(err, SLIM_EINVAL, "q_num_heads = %lld and kv_num_heads = %lld must be in "
                      "[1, 1048576]", (long long)st->q_heads, (long long)st->kv_heads);
    else if (st->qk_mode < 0 || st->qk_mode > 3)
        s = slim_errf(err, SLIM_EINVAL, "qk_matmul_output_mode = %lld, must be 0, 1, 2 or 3",
                      (long long)st->qk_mode);
    else if (!isfinite(st->scale) || !isfinite(st->softcap) || st->softcap < 0)
        s = slim_errf(err, SLIM_EINVAL, "scale = %g and softcap = %g must be finite, softcap >= 0",
                      st->scale, st->softcap);
    if (s) {
        free(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}


static slim_status attn_dims_get(const slim_op_ctx *ctx, slim__attn_dims *a)
{
    const slim__attn_state *st = ctx->state;
    const slim_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2];
    slim_err *err = ctx->err;
    char sq[128], sk[128], sv[128];
    memset(a, 0, sizeof(*a));
    slim_status s;
    for (int i = 0; i < 3; i++)
        if ((s = slim_check_dtype(ctx->in[i], i == 0 ? "Q" : i == 1 ? "K" : "V", err, SLIM_F32,
                                  SLIM_F16, SLIM_BF16, SLIM_F64, SLIM_DTYPE_UNDEFINED)))
            return s;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return slim_errf(err, SLIM_ETYPE, "Q, K and V must share a type, got %s, %s and %s",
                         slim_dtype_name(q->dtype), slim_dtype_name(k->dtype),
                         slim_dtype_name(v->dtype));
    if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim)
        return slim_errf(err, SLIM_ESHAPE, "Q %s, K %s and V %s must all be 3D or all 4D",
                         slim_shape_str(q->ndim, q->dims, sq, sizeof(sq)),
                         slim_shape_str(k->ndim, k->dims, sk, sizeof(sk)),
                         slim_shape_str(v->ndim, v->dims, sv, sizeof(sv)));
    a->B = q->dims[0];
    if (q->ndim == 3) {
        if (!st->q_heads || !st->kv_heads)
            return slim_errf(err, SLIM_EINVAL,
                             "3D inputs need the q_num_heads and kv_num_heads attributes");
        if (q->dims[2] % st->q_heads || k->dims[2] % st->kv_heads || v->dims[2] % st->kv_heads)
            return slim_errf(err, SLIM_ESHAPE, "hidden sizes of Q %s, K %s, V %s are not "
                             "multiples of q_num_heads = %lld / kv_num_heads = %lld",
                             slim_shape_str(q->ndim, q->dims, sq, sizeof(sq)),
                             slim_shape_str(k->ndim, k->dims, sk, sizeof(sk)),
                             slim_shape_str(v->ndim, v->dims, sv, sizeof(sv)),
                             (long long)st->q_heads, (long long)st->kv_heads);
        a->three_d = true;
        a->Hq = st->q_heads;
        a->Hkv = st->kv_heads;
        a->Sq = q->dims[1];
        a->Skv = k->dims[1];
        a->D = q->dims[2] / a->Hq;
        a->Dv = v->dims[2] / a->Hkv;
        if (k->dims[2] / a->Hkv != a->D || k->dims[0] != a->B || v->dims[0] != a->B ||
            v->dims[1] != a->Skv)
            goto bad;
    } else {
        a->Hq = q->dims[1];
        a->Hkv = k->dims[1];
        a->Sq = q->dims[2];
        a->Skv = k->dims[2];
        a->D = q->dims[3];
        a->Dv = v->dims[3];
        if (k->dims[0] != a->B || v->dims[0] != a->B || v->dims[1] != a->Hkv ||
            v->dims[2] != a->Skv || k->dims[3] != a->D)
            goto bad;
        if ((st->q_heads && st->q_heads != a->Hq) || (st->kv_heads && st->kv_heads != a->Hkv))
            return slim_errf(err, SLIM_ESHAPE, "Q has %lld heads and K %lld, but q_num_heads = "
                             "%lld and kv_num_heads = %lld", (long long)a->Hq, (long long)a->Hkv,
                             (long long)st->q_heads, (long long)st->kv_heads);
    }
    if (a->Hkv == 0 || a->Hq % a->Hkv)
        return slim_errf(err, SLIM_ESHAPE, "%lld query heads are not a multiple of %lld key/value "
                         "heads", (long long)a->Hq, (long long)a->Hkv);
    const slim_tensor *pk = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *pv = ctx->n_in > 5 ? ctx->in[5] : NULL;
    if (!pk != !pv)
        return slim_errf(err, SLIM_EINVAL, "past_key and past_value must be given together");
    if (pk) {
        if (pk->dtype != q->dtype || pv->dtype != q->dtype)
            return slim_errf(err, SLIM_ETYPE, "past_key and past_value must have Q's type %s",
                             slim_dtype_name(q->dtype));
        if (pk->ndim != 4 || pv->ndim != 4 || pk->dims[0] != a->B || pk->dims[1] != a->Hkv ||
            pk->dims[3] != a->D || pv->dims[0] != a->B || pv->dims[1] != a->Hkv ||
            pv->dims[2] != pk->dims[2] || pv->dims[3] != a->Dv)
            return slim_errf(err, SLIM_ESHAPE, "past_key %s and past_value %s must be "
                             "[%lld,%lld,past,%lld] and [%lld,%lld,past,%lld]",
                             slim_shape_str(pk->ndim, pk->dims, sk, sizeof(sk)),
                             slim_shape_str(pv->ndim, pv->dims, sv, sizeof(sv)), (long long)a->B,
                             (long long)a->Hkv, (long long)a->D, (long long)a->B,
                             (long long)a->Hkv, (long long)a->Dv);
        a->P = pk->dims[2];
    }
    a->T = a->P + a->Skv;
    const slim_tensor *m = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if (m) {
        if (m->dtype != SLIM_BOOL && m->dtype != q->dtype)
            return slim_errf(err, SLIM_ETYPE, "attn_mask is %s, expected bool or Q's type %s",
                             slim_dtype_name(m->dtype), slim_dtype_name(q->dtype));
        const int64_t full[4] = {a->B, a->Hq, a->Sq, a->T};
        bool ok = m->ndim >= 2 && m->ndim <= 4 && m->dims[m->ndim - 1] <= a->T;
        for (int i = 0; ok && i < m->ndim - 1; i++) {
            int64_t want = full[4 - m->ndim + i];
            ok = m->dims[i] == want || m->dims[i] == 1;
        }
        if (!ok)
            return slim_errf(err, SLIM_ESHAPE, "attn_mask %s does not broadcast to %s (its last "
                             "dim may be shorter: the rest is masked)",
                             slim_shape_str(m->ndim, m->dims, sk, sizeof(sk)),
                             slim_shape_str(4, full, sv, sizeof(sv)));
    }
    const slim_tensor *np = ctx->n_in > 6 ? ctx->in[6] : NULL;
    if (np && (np->dtype != SLIM_I64 || np->ndim != 1 || np->dims[0] != a->B))
        return slim_errf(err, SLIM_ESHAPE, "nonpad_kv_seqlen must be int64 [%lld], got %s %s",
                         (long long)a->B, slim_dtype_name(np->dtype),
                         slim_shape_str(np->ndim, np->dims, sk, sizeof(sk)));
    return SLIM_OK;
bad:
    return slim_errf(err, SLIM_ESHAPE, "Q %s, K %s and V %s disagree on batch, sequence or head "
                     "size", slim_shape_str(q->ndim, q->dims, sq, sizeof(sq)),
                     slim_shape_str(k->ndim, k->dims, sk, sizeof(sk)),
                     slim_shape_str(v->ndim, v->dims, sv, sizeof(sv)));
}

static slim_status attn_infer(slim_op_ctx *ctx)
{
    slim__attn_dims a;
    slim_status s = attn_dims_get(ctx, &a);
    if (s)
        return s;
    slim_dtype dt = ctx->in[0]->dtype;
    if (a.three_d)
        slim_tensor_set_shape(ctx->out[0], dt, 3, (int64_t[]){a.B, a.Sq, a.Hq * a.Dv});
    else
        slim_tensor_set_shape(ctx->out[0], dt, 4, (int64_t[]){a.B, a.Hq, a.Sq, a.Dv});
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], dt, 4, (int64_t[]){a.B, a.Hkv, a.T, a.D});
    if (ctx->n_out > 2 && ctx->out[2])
        slim_tensor_set_shape(ctx->out[2], dt, 4, (int64_t[]){a.B, a.Hkv, a.T, a.Dv});
    if (ctx->n_out > 3 && ctx->out[3])
        slim_tensor_set_shape(ctx->out[3], dt, 4, (int64_t[]){a.B, a.Hq, a.Sq, a.T});
    return SLIM_OK;
}

/* dst[b, h, p0 + t, :] = src[b, t, h, :] (3D) or src[b, h, t, :] (4D), for
 * t in [0, S): builds the present cache from past and new keys. */
static void cache_put(float *dst, int64_t T, int64_t p0, const float *src, bool three_d,
                      int64_t B, int64_t H, int64_t S, int64_t D)
{
    if (D <= 0 || S <= 0) /* nothing to copy, and empty tensors may have no data */
        return;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < S; t++) {
                const float *from = three_d ? src + ((b * S + t) * H + h) * D
                                            : src + ((b * H + h) * S + t) * D;
                memcpy(dst + ((b * H + h) * T + p0 + t) * D, from, sizeof(float) * (size_t)D);
            }
}

/* Writes the float32 cache into the present_* output, when wanted. */
static void cache_out(slim_tensor *out, const slim_tensor *cache)
{
    if (!out || !out->data)
        return;
    int64_t n = slim_tensor_numel(out);
    if (out->dtype == SLIM_F32)
        memcpy(out->data, cache->data, sizeof(float) * (size_t)n);
    else
        for (int64_t i = 0; i < n; i++)
            slim_store_f64(out->dtype, out->data, i, ((const float *)cache->data)[i]);
}

static slim_status attn_exec(slim_op_ctx *ctx)
{
    const slim__attn_state *st = ctx->state;
    slim__attn_job j;
    memset(&j, 0, sizeof(j));
    slim_status s = attn_dims_get(ctx, &j.a);
    if (s)
        return s;
    const slim__attn_dims *a = &j.a;
    slim_tensor tq = {0}, tk = {0}, tv = {0}, tpk = {0}, tpv = {0}, ty = {0}, tqk = {0};
    slim_tensor tm = {0}, pk = {0}, pv = {0};
    const float *q, *k, *v, *pastk = NULL, *pastv = NULL;
    float *y, *qk = NULL;
    const slim_tensor *in_pk = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *in_pv = ctx->n_in > 5 ? ctx->in[5] : NULL;
    slim_tensor *out_k = ctx->n_out > 1 ? ctx->out[1] : NULL;
    slim_tensor *out_v = ctx->n_out > 2 ? ctx->out[2] : NULL;
    slim_tensor *out_qk = ctx->n_out > 3 ? ctx->out[3] : NULL;
    const slim_tensor *mask = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if ((s = slim_f32_in(ctx->in[0], &tq, &q, ctx->err)) ||
        (s = slim_f32_in(ctx->in[1], &tk, &k, ctx->err)) ||
        (s = slim_f32_in(ctx->in[2], &tv, &v, ctx->err)) ||
        (s = slim_f32_in(in_pk, &tpk, &pastk, ctx->err)) ||
        (s = slim_f32_in(in_pv, &tpv, &pastv, ctx->err)) ||
        (s = slim_f32_out(ctx->out[0], &ty, &y, ctx->err)))
        goto done;
    slim__attn_strides(j.qs, a->three_d, a->Hq, a->Sq, a->D);
    slim__attn_strides(j.ys, a->three_d, a->Hq, a->Sq, a->Dv);
    if (a->P > 0 || out_k || out_v) {
        /* The present cache in float32, [B, Hkv, T, D|Dv]: the keys are
         * read from it. Without a past and without present outputs they
         * are read in place instead. */
        slim_tensor_set_shape(&pk, SLIM_F32, 4, (int64_t[]){a->B, a->Hkv, a->T, a->D});
        slim_tensor_set_shape(&pv, SLIM_F32, 4, (int64_t[]){a->B, a->Hkv, a->T, a->Dv});
        if ((s = slim_tensor_alloc(&pk, ctx->err)) || (s = slim_tensor_alloc(&pv, ctx->err)))
            goto done;
        if (a->P > 0) {
            cache_put(pk.data, a->T, 0, pastk, false, a->B, a->Hkv, a->P, a->D);
            cache_put(pv.data, a->T, 0, pastv, false, a->B, a->Hkv, a->P, a->Dv);
        }
        cache_put(pk.data, a->T, a->P, k, a->three_d, a->B, a->Hkv, a->Skv, a->D);
        cache_put(pv.data, a->T, a->P, v, a->three_d, a->B, a->Hkv, a->Skv, a->Dv);
        j.k = pk.data;
        j.v = pv.data;
        slim__attn_strides(j.ks, false, a->Hkv, a->T, a->D);
        slim__attn_strides(j.vs, false, a->Hkv, a->T, a->Dv);
    } else {
        j.k = k;
        j.v = v;
        slim__attn_strides(j.ks, a->three_d, a->Hkv, a->T, a->D);
        slim__attn_strides(j.vs, a->three_d, a->Hkv, a->T, a->Dv);
    }
    if (out_qk && (s = slim_f32_out(out_qk, &tqk, &qk, ctx->err)))
        goto done;
    j.st = st;
    j.q = q;
    j.y = y;
    j.qk = qk;
    j.scale = st->has_scale ? st->scale : (float)(1.0 / sqrt((double)(a->D > 0 ? a->D : 1)));
    if (mask && mask->dtype != SLIM_BOOL) {
        if ((s = slim_f32_in(mask, &tm, &j.mf, ctx->err)))
            goto done;
        slim__attn_mask_strides(&j, mask);
        j.ms[3] = 1; /* a last dim of 1 is one column here, the rest masked */
        j.mcols = mask->dims[mask->ndim - 1];
    } else if (mask) {
        /* Strides over (B, Hq, Sq) of the mask, right-aligned, 0 where it
         * broadcasts; rows are its own last dim apart. */
        j.mask = mask;
        int64_t stride = mask->dims[mask->ndim - 1];
        for (int i = 2; i >= 0; i--) {
            int mi = i - (4 - mask->ndim);
            j.mstride[i] = (mi < 0 || mask->dims[mi] == 1) ? 0 : stride;
            if (mi >= 0)
                stride *= mask->dims[mi];
        }
    }
    j.nonpad = ctx->n_in > 6 && ctx->in[6] ? ctx->in[6]->data : NULL;
    if ((s = slim__attn_run(&j, ctx->err)))
        goto done;
    slim_f32_out_finish(ctx->out[0], &ty);
    if (out_qk)
        slim_f32_out_finish(out_qk, &tqk);
    cache_out(out_k, &pk);
    cache_out(out_v, &pv);
done:
    slim_tensor_release(&tq);
    slim_tensor_release(&tk);
    slim_tensor_release(&tv);
    slim_tensor_release(&tpk);
    slim_tensor_release(&tpv);
    slim_tensor_release(&ty);
    slim_tensor_release(&tqk);
    slim_tensor_release(&tm);
    slim_tensor_release(&pk);
    slim_tensor_release(&pv);
    return s;
}

/* ---- FusedAttention (com.slimserve) -------------------------------------- */

/*
 * What passes/fuse_attention.c makes of an exported attention block. Q, K
 * and V are the projections as the block read them, before its Reshapes
 * to [B, S, H, d]; each Reshape's first two target entries are kept
 * (q_shape, k_shape, v_shape) and applied here with Reshape's own rules,
 * so the fused node accepts and refuses exactly the shapes the block did.
 * The data is contiguous, so the reshaped [B, S, H, d] is the same bytes
 * as [B, S, H*d]: the 3D layout, read per head with a stride. The optional
 * mask is what the block added to the scaled scores [B, H, Sq, T], with
 * numpy broadcasting; a mask that would have broadcast the scores to a
 * larger shape is refused (the block's output would have grown with it).
 * The result, [B, Sq, H, dv] in memory, takes the shape of the block's
 * final Reshape (out_shape).
 */

typedef struct {
    int64_t heads, dk, dv;
    float scale;
    int64_t qr[2], kr[2], vr[2];
    int n_out;
    int64_t out[SLIM_MAX_DIMS];
    bool packed;            /* qkv_sizes: Q, K, V side by side in input 0 */
    int64_t qkv[3];
} fattn_state;

static slim_status fattn_pair(const slim_node *node, const char *name, int64_t *r,
                              slim_err *err)
{
    if (slim_attr_ints(node, name, r, 2) != 2 || r[0] < -1 || r[1] < -1 ||
        (r[0] == -1 && r[1] == -1))
        return slim_errf(err, SLIM_EINVAL, "%s must be two Reshape entries (0, -1 or a size; "
                         "at most one -1)", name);
    return SLIM_OK;
}

static slim_status fattn_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    fattn_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->heads = slim_attr_int(node, "num_heads", 0);
    st->dk = slim_attr_int(node, "head_size", 0);
    st->dv = slim_attr_int(node, "v_head_size", 0);
    st->scale = slim_attr_float(node, "scale", 1.0f);
    st->n_out = slim_attr_ints(node, "out_shape", st->out, SLIM_MAX_DIMS);
    slim_status s = SLIM_OK;
    const int64_t cap = (int64_t)1 << 24;
    if (st->heads < 1 || st->dk < 1 || st->dv < 1 || st->heads > cap || st->dk > cap ||
        st->dv > cap)
        s = slim_errf(err, SLIM_EINVAL, "num_heads = %lld, head_size = %lld and v_head_size = "
                      "%lld must be in [1, %lld]", (long long)st->heads, (long long)st->dk,
                      (long long)st->dv, (long long)cap);
    else if (!isfinite(st->scale))
        s = slim_errf(err, SLIM_EINVAL, "scale = %g must be finite", st->scale);
    else if (st->n_out < 1 || st->n_out > SLIM_MAX_DIMS)
        s = slim_errf(err, SLIM_EINVAL, "out_shape must have 1 to %d entries", SLIM_MAX_DIMS);
    else if (!(s = fattn_pair(node, "q_shape", st->qr, err)) &&
             !(s = fattn_pair(node, "k_shape", st->kr, err)))
        s = fattn_pair(node, "v_shape", st->vr, err);
    for (int i = 0; !s && i < st->n_out; i++)
        if (st->out[i] < -1)
            s = slim_errf(err, SLIM_EINVAL, "out_shape holds %lld", (long long)st->out[i]);
    /* passes/merge_qkv.c: the three parts of one row, H*dk, H*dk, H*dv. */
    if (!s && slim_node_attr(node, "qkv_sizes")) {
        st->packed = true;
        if (slim_attr_ints(node, "qkv_sizes", st->qkv, 3) != 3 ||
            st->qkv[0] != st->heads * st->dk || st->qkv[1] != st->heads * st->dk ||
            st->qkv[2] != st->heads * st->dv)
            s = slim_errf(err, SLIM_EINVAL, "qkv_sizes must be num_heads x head_size twice, "
                          "then num_heads x v_head_size (%lld, %lld, %lld)",
                          (long long)(st->heads * st->dk), (long long)(st->heads * st->dk),
                          (long long)(st->heads * st->dv));
    }
    if (s) {
        free(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}

/* Reshape (allowzero 0) of dims[0..nd) to target[0..nt): 0 copies the
 * input's dim, one -1 takes the rest. */
static slim_status fattn_reshape(int nd, const int64_t *dims, int nt, const int64_t *target,
                                 int64_t *out, const char *what, slim_err *err)
{
    int64_t total = 1, known = 1;
    int infer = -1;
    char a[128], b[128];
    for (int i = 0; i < nd; i++)
        total *= dims[i];
    for (int i = 0; i < nt; i++) {
        if (target[i] == -1) {
            infer = i;
            continue;
        }
        if (target[i] == 0 && i >= nd)
            goto bad;
        out[i] = target[i] == 0 ? dims[i] : target[i];
        if (out[i] && known > INT64_MAX / out[i])
            goto bad;
        known *= out[i];
    }
    if (infer >= 0) {
        if (known == 0 || total % known)
            goto bad;
        out[infer] = total / known;
    } else if (known != total) {
        goto bad;
    }
    return SLIM_OK;
bad:
    return slim_errf(err, SLIM_ESHAPE, "%s %s cannot be reshaped to %s", what,
                     slim_shape_str(nd, dims, a, sizeof(a)), slim_shape_str(nt, target, b, sizeof(b)));
}

/* [B, S] of x viewed as [B, S, heads, d] through the block's Reshape. */
static slim_status fattn_view(const fattn_state *st, const slim_tensor *x, const int64_t *r,
                              int64_t d, const char *what, int64_t *bs, slim_err *err)
{
    int64_t out[4];
    slim_status s = fattn_reshape(x->ndim, x->dims, 4, (int64_t[]){r[0], r[1], st->heads, d},
                                  out, what, err);
    if (!s) {
        bs[0] = out[0];
        bs[1] = out[1];
    }
    return s;
}

/* Q, K and V for their shapes and types: the inputs, or with qkv_sizes
 * headers (no data) of input 0 with its last dim cut to each part. */
static slim_status fattn_operands(slim_op_ctx *ctx, slim_tensor *view, const slim_tensor **t)
{
    const fattn_state *st = ctx->state;
    const char *names[3] = {"Q", "K", "V"};
    if (!st->packed) {
        for (int i = 0; i < 3; i++)
            if (!(t[i] = ctx->n_in > i ? ctx->in[i] : NULL))
                return slim_errf(ctx->err, SLIM_EINVAL, "input %s is missing", names[i]);
        return SLIM_OK;
    }
    const slim_tensor *x = ctx->in[0];
    char sx[128];
    if (!x || x->ndim < 1 || x->dims[x->ndim - 1] != st->qkv[0] + st->qkv[1] + st->qkv[2])
        return slim_errf(ctx->err, SLIM_ESHAPE, "the packed Q|K|V input %s must end in "
                         "%lld + %lld + %lld (qkv_sizes)",
                         x ? slim_shape_str(x->ndim, x->dims, sx, sizeof(sx)) : "(missing)",
                         (long long)st->qkv[0], (long long)st->qkv[1], (long long)st->qkv[2]);
    for (int i = 0; i < 3; i++) {
        memset(&view[i], 0, sizeof(view[i]));
        view[i].dtype = x->dtype;
        view[i].ndim = x->ndim;
        memcpy(view[i].dims, x->dims, sizeof(x->dims[0]) * (size_t)x->ndim);
        view[i].dims[x->ndim - 1] = st->qkv[i];
        t[i] = &view[i];
    }
    return SLIM_OK;
}

static slim_status fattn_dims(slim_op_ctx *ctx, slim__attn_dims *a, int64_t *out)
{
    const fattn_state *st = ctx->state;
    const slim_tensor *qkv[3];
    slim_tensor view[3];
    slim_status s = fattn_operands(ctx, view, qkv);
    if (s)
        return s;
    const slim_tensor *q = qkv[0], *k = qkv[1], *v = qkv[2];
    const slim_tensor *m = ctx->n_in > 3 ? ctx->in[3] : NULL;
    char sa[128], sb[128];
    for (int i = 0; i < 3; i++)
        if ((s = slim_check_dtype(qkv[i], i == 0 ? "Q" : i == 1 ? "K" : "V", ctx->err,
                                  SLIM_F32, SLIM_F16, SLIM_BF16, SLIM_DTYPE_UNDEFINED)))
            return s;
    if (k->dtype != q->dtype || v->dtype != q->dtype || (m && m->dtype != q->dtype))
        return slim_errf(ctx->err, SLIM_ETYPE, "Q, K, V and the mask must share a type");
    int64_t qb[2], kb[2], vb[2];
    if ((s = fattn_view(st, q, st->qr, st->dk, "Q", qb, ctx->err)) ||
        (s = fattn_view(st, k, st->kr, st->dk, "K", kb, ctx->err)) ||
        (s = fattn_view(st, v, st->vr, st->dv, "V", vb, ctx->err)))
        return s;
    /* The block's MatMuls would broadcast a batch of 1 against a larger
     * one; attention over one shared key set is not what it computes for
     * requests, so that is refused rather than copied. */
    if (qb[0] != kb[0] || vb[0] != kb[0] || vb[1] != kb[1] || (st->packed && qb[1] != kb[1]))
        return slim_errf(ctx->err, SLIM_ESHAPE, "Q [%lld,%lld], K [%lld,%lld] and V [%lld,%lld] "
                         "(batch, sequence) disagree", (long long)qb[0], (long long)qb[1],
                         (long long)kb[0], (long long)kb[1], (long long)vb[0], (long long)vb[1]);
    memset(a, 0, sizeof(*a));
    a->three_d = true;
    a->B = qb[0];
    a->Hq = a->Hkv = st->heads;
    a->Sq = qb[1];
    a->Skv = a->T = kb[1];
    a->D = st->dk;
    a->Dv = st->dv;
    if (m) {
        const int64_t full[4] = {a->B, a->Hq, a->Sq, a->T};
        bool ok = m->ndim <= 4;
        for (int i = 0; ok && i < m->ndim; i++) {
            int64_t want = full[4 - m->ndim + i];
            ok = m->dims[i] == want || m->dims[i] == 1;
        }
        if (!ok)
            return slim_errf(ctx->err, SLIM_ESHAPE, "the mask %s does not broadcast to the "
                             "scores %s without changing their shape",
                             slim_shape_str(m->ndim, m->dims, sa, sizeof(sa)),
                             slim_shape_str(4, full, sb, sizeof(sb)));
    }
    return fattn_reshape(4, (int64_t[]){a->B, a->Sq, a->Hq, a->Dv}, st->n_out, st->out, out,
                         "the attention output", ctx->err);
}

static slim_status fattn_infer(slim_op_ctx *ctx)
{
    const fattn_state *st = ctx->state;
    slim__attn_dims a;
    int64_t out[SLIM_MAX_DIMS];
    slim_status s = fattn_dims(ctx, &a, out);
    if (!s)
        slim_tensor_set_shape(ctx->out[0], ctx->in[0]->dtype, st->n_out, out);
    return s;
}

static slim_status fattn_exec(slim_op_ctx *ctx)
{
    static const slim__attn_state plain = {0};
    const fattn_state *st = ctx->state;
    slim__attn_job j;
    memset(&j, 0, sizeof(j));
    int64_t out[SLIM_MAX_DIMS];
    slim_status s = fattn_dims(ctx, &j.a, out);
    if (s)
        return s;
    const slim__attn_dims *a = &j.a;
    const slim_tensor *m = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor tq = {0}, tk = {0}, tv = {0}, tm = {0}, ty = {0};
    float *y;
    if ((s = slim_f32_in(ctx->in[0], &tq, &j.q, ctx->err)) ||
        (!st->packed && (s = slim_f32_in(ctx->in[1], &tk, &j.k, ctx->err))) ||
        (!st->packed && (s = slim_f32_in(ctx->in[2], &tv, &j.v, ctx->err))) ||
        (s = slim_f32_in(m, &tm, &j.mf, ctx->err)) ||
        (s = slim_f32_out(ctx->out[0], &ty, &y, ctx->err)))
        goto done;
    j.st = &plain;
    j.y = y;
    j.scale = st->scale;
    slim__attn_strides(j.qs, true, a->Hq, a->Sq, a->D);
    slim__attn_strides(j.ks, true, a->Hkv, a->T, a->D);
    slim__attn_strides(j.vs, true, a->Hkv, a->T, a->Dv);
    if (st->packed) {
        /* Each position's row holds its query, key and value parts: the
         * same per-head reads at the packed row's stride. */
        int64_t row = st->qkv[0] + st->qkv[1] + st->qkv[2];
        j.k = j.q + st->qkv[0];
        j.v = j.k + st->qkv[1];
        int64_t *sv[3] = {j.qs, j.ks, j.vs};
        for (int i = 0; i < 3; i++) {
            sv[i][0] = a->Sq * row;
            sv[i][2] = row;
        }
    }
    slim__attn_strides(j.ys, true, a->Hq, a->Sq, a->Dv);
    if (m) {
        slim__attn_mask_strides(&j, m); /* a last dim of 1 broadcasts, as in Add */
        j.mcols = a->T;
    }
    if ((s = slim__attn_run(&j, ctx->err)))
        goto done;
    slim_f32_out_finish(ctx->out[0], &ty);
done:
    slim_tensor_release(&tq);
    slim_tensor_release(&tk);
    slim_tensor_release(&tv);
    slim_tensor_release(&tm);
    slim_tensor_release(&ty);
    return s;
}

/* ---- RotaryEmbedding ----------------------------------------------------- */

typedef struct {
    int64_t B, S, H, D, rd; /* rd: the rotated features of each head */
    bool three_d;
} rope_dims;

static slim_status rope_dims_get(const slim_op_ctx *ctx, rope_dims *r)
{
    const slim_tensor *x = ctx->in[0], *cs = ctx->in[1], *sn = ctx->in[2];
    const slim_tensor *pos = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const int64_t heads = slim_attr_int(ctx->node, "num_heads", 0);
    const int64_t rd = slim_attr_int(ctx->node, "rotary_embedding_dim", 0);
    char a[128], b[128];
    slim_status s = slim_check_dtype(x, "input", ctx->err, SLIM_F32, SLIM_F16, SLIM_BF16, SLIM_F64,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (cs->dtype != x->dtype || sn->dtype != x->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "cos_cache (%s) and sin_cache (%s) must have the "
                         "input's type %s", slim_dtype_name(cs->dtype), slim_dtype_name(sn->dtype),
                         slim_dtype_name(x->dtype));
    memset(r, 0, sizeof(*r));
    if (x->ndim == 4) {
        r->B = x->dims[0];
        r->H = x->dims[1];
        r->S = x->dims[2];
        r->D = x->dims[3];
    } else if (x->ndim == 3) {
        if (heads <= 0 || x->dims[2] % heads)
            return slim_errf(ctx->err, SLIM_EINVAL, "a 3D input needs num_heads (got %lld) "
                             "dividing its hidden size %lld", (long long)heads,
                             (long long)x->dims[2]);
        r->three_d = true;
        r->B = x->dims[0];
        r->S = x->dims[1];
        r->H = heads;
        r->D = x->dims[2] / heads;
    } else {
        return slim_errf(ctx->err, SLIM_ESHAPE, "input has %d dims, expected 3 or 4", x->ndim);
    }
    r->rd = rd ? rd : r->D;
    if (r->rd < 0 || r->rd > r->D || r->rd % 2)
        return slim_errf(ctx->err, SLIM_EINVAL, "rotary_embedding_dim = %lld must be even and at "
                         "most the head size %lld", (long long)r->rd, (long long)r->D);
    /* With position_ids [B, S] the caches are tables [positions, rd/2];
     * without, they are [B, S, rd/2] already. */
    bool ok = cs->ndim == sn->ndim && memcmp(cs->dims, sn->dims, sizeof(int64_t) * (size_t)cs->ndim) == 0;
    if (pos) {
        if ((s = slim_check_dtype(pos, "position_ids", ctx->err, SLIM_I64, SLIM_DTYPE_UNDEFINED)))
            return s;
        if (pos->ndim != 2 || pos->dims[0] != r->B || pos->dims[1] != r->S)
            return slim_errf(ctx->err, SLIM_ESHAPE, "position_ids %s must be [%lld,%lld]",
                             slim_shape_str(pos->ndim, pos->dims, a, sizeof(a)), (long long)r->B,
                             (long long)r->S);
        ok = ok && cs->ndim == 2 && cs->dims[1] == r->rd / 2;
    } else {
        ok = ok && cs->ndim == 3 && cs->dims[0] == r->B && cs->dims[1] == r->S &&
             cs->dims[2] == r->rd / 2;
    }
    if (!ok)
        return slim_errf(ctx->err, SLIM_ESHAPE, "cos_cache %s and sin_cache %s must both be %s "
                         "with last dim rotary_embedding_dim / 2 = %lld",
                         slim_shape_str(cs->ndim, cs->dims, a, sizeof(a)),
                         slim_shape_str(sn->ndim, sn->dims, b, sizeof(b)),
                         pos ? "[max_position, d/2]" : "[batch, sequence, d/2]",
                         (long long)(r->rd / 2));
    return SLIM_OK;
}

static slim_status rope_infer(slim_op_ctx *ctx)
{
    rope_dims r;
    slim_status s = rope_dims_get(ctx, &r);
    if (!s)
        slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return s;
}

static slim_status rope_exec(slim_op_ctx *ctx)
{
    rope_dims r;
    slim_status s = rope_dims_get(ctx, &r);
    if (s)
        return s;
    const slim_tensor *pos = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const bool inter = slim_attr_int(ctx->node, "interleaved", 0) != 0;
    const int64_t half = r.rd / 2;
    if (pos)
        for (int64_t i = 0; i < r.B * r.S; i++) {
            int64_t p = ((const int64_t *)pos->data)[i];
            if (p < 0 || p >= ctx->in[1]->dims[0])
                return slim_errf(ctx->err, SLIM_EINVAL, "position_ids holds %lld, outside the "
                                 "caches' [0, %lld)", (long long)p, (long long)ctx->in[1]->dims[0]);
        }
    slim_tensor tx = {0}, tc = {0}, ts = {0}, ty = {0};
    const float *x, *cs, *sn;
    float *y;
    if ((s = slim_f32_in(ctx->in[0], &tx, &x, ctx->err)) ||
        (s = slim_f32_in(ctx->in[1], &tc, &cs, ctx->err)) ||
        (s = slim_f32_in(ctx->in[2], &ts, &sn, ctx->err)) ||
        (s = slim_f32_out(ctx->out[0], &ty, &y, ctx->err)))
        goto done;
    for (int64_t b = 0; b < r.B; b++)
        for (int64_t t = 0; t < r.S; t++) {
            int64_t row = pos ? ((const int64_t *)pos->data)[b * r.S + t] : b * r.S + t;
            const float *c = cs + row * half, *si = sn + row * half;
            for (int64_t h = 0; h < r.H; h++) {
                int64_t off = r.three_d ? ((b * r.S + t) * r.H + h) * r.D
                                        : ((b * r.H + h) * r.S + t) * r.D;
                const float *xi = x + off;
                float *yo = y + off;
                for (int64_t i = 0; i < half; i++) {
                    int64_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;
                    float x1 = xi[i1], x2 = xi[i2];
                    yo[i1] = c[i] * x1 - si[i] * x2;
                    yo[i2] = si[i] * x1 + c[i] * x2;
                }
                for (int64_t i = r.rd; i < r.D; i++)
                    yo[i] = xi[i];
            }
        }
    slim_f32_out_finish(ctx->out[0], &ty);
done:
    slim_tensor_release(&tx);
    slim_tensor_release(&tc);
    slim_tensor_release(&ts);
    slim_tensor_release(&ty);
    return s;
}

const slim_op_def slim__ops_attention[] = {
    {"Attention", 23, attn_prepare, free, attn_infer, attn_exec, 0},
    {"RotaryEmbedding", 23, NULL, NULL, rope_infer, rope_exec, 0},
    {0},
};

/* slimserve's own (kernels/registry.c looks it up under com.slimserve). */
const slim_op_def slim__ops_fused_attention[] = {
    {"FusedAttention", 1, fattn_prepare, free, fattn_infer, fattn_exec, 0},
    {0},
};
