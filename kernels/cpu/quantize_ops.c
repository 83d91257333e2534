/*
 * quantize_ops.c - ONNX's quantization operators, for models that arrive
 * already quantized (onnxruntime.quantization's quantize_dynamic and
 * quantize_static, QDQ or QOperator format):
 *
 *   QuantizeLinear, DequantizeLinear   per tensor, per axis, or blocked
 *   DynamicQuantizeLinear              u8 with a zero point, per tensor
 *   QLinearMatMul                      8-bit in, 8-bit out
 *   com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul
 *                                      onnxruntime's fused forms, float out
 *
 * (MatMulInteger is in linalg.c; ConvInteger and QLinearConv in qconv.c.)
 *
 * Arithmetic follows the ONNX reference implementation step by step, since
 * a quantized output is an integer and one rounding done in another order
 * moves it by a whole level: x / scale is a float32 division (float16 when
 * both operands are float16, as numpy does), rounding is half to even, and
 * products of 8-bit operands accumulate exactly in int32.
 *
 * DynamicQuantizeLinear (and DynamicQuantizeMatMul) pick one scale for the
 * whole tensor, so by their definition a request's result depends on what
 * else shares its batch; slimserve's own int8 pass (quant/int8.c) quantizes
 * per row to avoid exactly that.
 */
#include "kernel.h"
#include "quantize_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters: scale and zero point ----------------------------------- */

slim_status slim_qaxis_make(const slim_tensor *x, const slim_tensor *scale,
                            const slim_tensor *zp, int64_t axis, int64_t block, slim_qaxis *q,
                            slim_err *err)
{
    memset(q, 0, sizeof(*q));
    int64_t ns = slim_tensor_numel(scale);
    q->outer = 1;
    q->A = 1;
    q->inner = slim_tensor_numel(x);
    /* One value: [] and [1] alike (onnxruntime writes a [1] scale beside a
     * [] zero point). */
    bool zp_one = !zp || (slim_tensor_numel(zp) == 1 && zp->ndim <= 1);
    if (ns == 1 && scale->ndim <= 1 && zp_one) {
        q->mode = SLIM_QAXIS_TENSOR;
        return SLIM_OK;
    }
    if (zp && (zp->ndim != scale->ndim ||
               memcmp(zp->dims, scale->dims, sizeof(int64_t) * (size_t)zp->ndim) != 0))
        return slim_errf(err, SLIM_ESHAPE, "zero point and scale must have one shape");
    if (block < 0)
        return slim_errf(err, SLIM_EINVAL, "block_size = %lld, must be >= 0", (long long)block);
    int ax;
    slim_status st = slim_norm_axis(axis, x->ndim, &ax, err);
    if (st)
        return st;
    q->A = x->dims[ax];
    q->outer = slim_shape_numel(ax, x->dims);
    q->inner = slim_shape_numel(x->ndim - ax - 1, x->dims + ax + 1);
    if (block == 0) {
        if (scale->ndim != 1 || scale->dims[0] != q->A)
            return slim_errf(err, SLIM_ESHAPE, "per-axis scale must be 1-D with %lld values "
                             "(input dim %d)", (long long)q->A, ax);
        q->mode = SLIM_QAXIS_AXIS;
        return SLIM_OK;
    }
    q->bs = block;
    q->nb = q->A / block + (q->A % block != 0); /* no A + block - 1: block may be huge */
    if (scale->ndim != x->ndim)
        return slim_errf(err, SLIM_ESHAPE, "blocked scale must have the input's rank %d",
                         x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (scale->dims[d] != (d == ax ? q->nb : x->dims[d]))
            return slim_errf(err, SLIM_ESHAPE, "blocked scale dim %d is %lld, expected %lld", d,
                             (long long)scale->dims[d], (long long)(d == ax ? q->nb : x->dims[d]));
    q->mode = SLIM_QAXIS_BLOCK;
    return SLIM_OK;
}

float *slim_q_load_f32(const slim_tensor *t)
{
    int64_t n = slim_tensor_numel(t);
    float *v = slim_scratch_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; v && i < n; i++)
        v[i] = (float)slim_load_f64(t->dtype, t->data, i);
    return v;
}

int32_t *slim_q_load_i32(const slim_tensor *t, int64_t n)
{
    int32_t *v = slim_scratch_calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t));
    for (int64_t i = 0; v && t && i < n; i++)
        v[i] = (int32_t)slim_load_i64(t->dtype, t->data, i);
    return v;
}

bool slim_q_range(slim_dtype t, int32_t *lo, int32_t *hi)
{
    switch (t) {
    case SLIM_U8: *lo = 0; *hi = 255; return true;
    case SLIM_I8: *lo = -128; *hi = 127; return true;
    case SLIM_U16: *lo = 0; *hi = 65535; return true;
    case SLIM_I16: *lo = -32768; *hi = 32767; return true;
    default: return false;
    }
}

/* round-half-even(v) + zp, clipped to [lo, hi]; NaN counts as 0. */
int32_t slim_q_round(double v, int32_t zp, int32_t lo, int32_t hi)
{
    double r = nearbyint(v) + zp;
    if (!(r >= lo))
        return r != r ? (zp < lo ? lo : zp > hi ? hi : zp) : lo;
    return r > hi ? hi : (int32_t)r;
}

void slim_q_store(slim_dtype t, void *data, int64_t i, int32_t v)
{
    switch (t) {
    case SLIM_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case SLIM_I8: ((int8_t *)data)[i] = (int8_t)v; break;
    case SLIM_U16: ((uint16_t *)data)[i] = (uint16_t)v; break;
    case SLIM_I16: ((int16_t *)data)[i] = (int16_t)v; break;
    default: break;
    }
}

/* Rounds a float to the 16-bit float type t (no-op for others): numpy
 * computes float16 / float16 in float16. */
static float round_to(slim_dtype t, float v)
{
    if (t == SLIM_F16)
        return slim_f16_to_f32(slim_f32_to_f16(v));
    if (t == SLIM_BF16)
        return slim_bf16_to_f32(slim_f32_to_bf16(v));
    return v;
}

/* ---- QuantizeLinear ----------------------------------------------------- */

static slim_status check_scale_dtype(const slim_tensor *s, const char *what, slim_err *err)
{
    return slim_check_dtype(s, what, err, SLIM_F32, SLIM_F16, SLIM_BF16, SLIM_DTYPE_UNDEFINED);
}

static slim_status ql_out_dtype(const slim_op_ctx *ctx, slim_dtype *out)
{
    const slim_tensor *zp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t od = slim_attr_int(ctx->node, "output_dtype", 0);
    slim_dtype t = od ? slim_dtype_from_onnx((int)od) : SLIM_U8;
    if (od && zp && zp->dtype != t)
        return slim_errf(ctx->err, SLIM_ETYPE, "output_dtype %lld and the zero point's %s differ",
                         (long long)od, slim_dtype_name(zp->dtype));
    if (zp)
        t = zp->dtype;
    int32_t lo = 0, hi = 0;
    if (!slim_q_range(t, &lo, &hi))
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "quantizing to %s is not supported "
                         "(uint8, int8, uint16, int16 are)",
                         t ? slim_dtype_name(t) : "that data type");
    *out = t;
    return SLIM_OK;
}

static slim_status ql_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *s = ctx->in[1], *zp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_status st = slim_check_dtype(x, "input x", ctx->err, SLIM_F32, SLIM_F16, SLIM_BF16,
                                      SLIM_I32, SLIM_DTYPE_UNDEFINED);
    slim_dtype t = SLIM_U8;
    slim_qaxis q;
    if (st || (st = check_scale_dtype(s, "y_scale", ctx->err)) || (st = ql_out_dtype(ctx, &t)) ||
        (st = slim_qaxis_make(x, s, zp, slim_attr_int(ctx->node, "axis", 1),
                              slim_attr_int(ctx->node, "block_size", 0), &q, ctx->err)))
        return st;
    slim_tensor_set_shape(ctx->out[0], t, x->ndim, x->dims);
    return SLIM_OK;
}

static slim_status ql_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *s = ctx->in[1], *zpt = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *y = ctx->out[0];
    slim_qaxis q;
    slim_status st = slim_qaxis_make(x, s, zpt, slim_attr_int(ctx->node, "axis", 1),
                                     slim_attr_int(ctx->node, "block_size", 0), &q, ctx->err);
    if (st || slim_tensor_numel(x) == 0)
        return st;
    /* The quotient's precision: the `precision` attribute, else numpy's
     * promotion of x and scale (float16 only when both are). */
    int64_t prec = slim_attr_int(ctx->node, "precision", 0);
    slim_dtype qt = prec ? slim_dtype_from_onnx((int)prec)
                         : (x->dtype == s->dtype ? x->dtype : SLIM_F32);
    int32_t lo = 0, hi = 0;
    slim_q_range(y->dtype, &lo, &hi);
    float *sc = slim_q_load_f32(s);
    int32_t *zp = slim_q_load_i32(zpt, slim_tensor_numel(s));
    if (!sc || !zp) {
        slim_scratch_free(sc);
        slim_scratch_free(zp);
        return slim_scratch_oom(ctx->err);
    }
    const float *xf = x->dtype == SLIM_F32 ? x->data : NULL;
    int64_t e = 0;
    for (int64_t o = 0; o < q.outer; o++)
        for (int64_t a = 0; a < q.A; a++)
            for (int64_t i = 0; i < q.inner; i++, e++) {
                int64_t p = slim_qaxis_index(&q, o, a, i);
                double v;
                if (x->dtype == SLIM_I32)
                    v = (double)((const int32_t *)x->data)[e] / sc[p];
                else
                    v = round_to(qt, (xf ? xf[e] : (float)slim_load_f64(x->dtype, x->data, e)) /
                                         sc[p]);
                slim_q_store(y->dtype, y->data, e, slim_q_round(v, zp[p], lo, hi));
            }
    slim_scratch_free(sc);
    slim_scratch_free(zp);
    return SLIM_OK;
}

/* ---- DequantizeLinear --------------------------------------------------- */

static slim_status dql_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *s = ctx->in[1], *zp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_status st = slim_check_dtype(x, "input x", ctx->err, SLIM_U8, SLIM_I8, SLIM_U16,
                                      SLIM_I16, SLIM_I32, SLIM_DTYPE_UNDEFINED);
    if (st || (st = check_scale_dtype(s, "x_scale", ctx->err)))
        return st;
    if (zp && zp->dtype != x->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "zero point is %s but x is %s",
                         slim_dtype_name(zp->dtype), slim_dtype_name(x->dtype));
    int64_t od = slim_attr_int(ctx->node, "output_dtype", 0);
    slim_dtype t = od ? slim_dtype_from_onnx((int)od) : s->dtype;
    if (t != SLIM_F32 && t != SLIM_F16 && t != SLIM_BF16)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "output_dtype %lld is not float32, "
                         "float16 or bfloat16", (long long)od);
    slim_qaxis q;
    if ((st = slim_qaxis_make(x, s, zp, slim_attr_int(ctx->node, "axis", 1),
                              slim_attr_int(ctx->node, "block_size", 0), &q, ctx->err)))
        return st;
    slim_tensor_set_shape(ctx->out[0], t, x->ndim, x->dims);
    return SLIM_OK;
}

static slim_status dql_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *s = ctx->in[1], *zpt = ctx->n_in > 2 ? ctx->in[2] : NULL;
    slim_tensor *y = ctx->out[0];
    slim_qaxis q;
    slim_status st = slim_qaxis_make(x, s, zpt, slim_attr_int(ctx->node, "axis", 1),
                                     slim_attr_int(ctx->node, "block_size", 0), &q, ctx->err);
    if (st || slim_tensor_numel(x) == 0)
        return st;
    float *sc = slim_q_load_f32(s);
    int32_t *zp = slim_q_load_i32(zpt, slim_tensor_numel(s));
    if (!sc || !zp) {
        slim_scratch_free(sc);
        slim_scratch_free(zp);
        return slim_scratch_oom(ctx->err);
    }
    int64_t e = 0;
    for (int64_t o = 0; o < q.outer; o++)
        for (int64_t a = 0; a < q.A; a++)
            for (int64_t i = 0; i < q.inner; i++, e++) {
                int64_t p = slim_qaxis_index(&q, o, a, i);
                /* float32 throughout, as the reference: (x - zp) * scale. */
                float d = (float)slim_load_i64(x->dtype, x->data, e) - (float)zp[p];
                float v = d * sc[p];
                if (y->dtype == SLIM_F32)
                    ((float *)y->data)[e] = v;
                else
                    slim_store_f64(y->dtype, y->data, e, v);
            }
    slim_scratch_free(sc);
    slim_scratch_free(zp);
    return SLIM_OK;
}

/* ---- DynamicQuantizeLinear ---------------------------------------------- */

void slim_q_dynamic_params(const float *x, int64_t n, float *scale, uint8_t *zp)
{
    float mx = 0, mn = 0; /* the range always holds 0 */
    for (int64_t i = 0; i < n; i++) {
        mx = x[i] > mx ? x[i] : mx;
        mn = x[i] < mn ? x[i] : mn;
    }
    float s = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    float z = 0.0f - mn / s;
    z = z > 0 ? (z < 255 ? z : 255) : 0; /* NaN (an infinite range) too */
    *scale = s;
    *zp = (uint8_t)nearbyintf(z);
}

void slim_q_dynamic_apply(const float *x, int64_t n, float scale, uint8_t zp, uint8_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint8_t)slim_q_round(x[i] / scale, zp, 0, 255);
}

static slim_status dyn_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_dtype(x, "input x", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    slim_tensor_set_shape(ctx->out[0], SLIM_U8, x->ndim, x->dims);
    if (ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_F32, 0, NULL);
    if (ctx->out[2])
        slim_tensor_set_shape(ctx->out[2], SLIM_U8, 0, NULL);
    return SLIM_OK;
}

static slim_status dyn_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t n = slim_tensor_numel(x);
    float scale;
    uint8_t zp;
    slim_q_dynamic_params(x->data, n, &scale, &zp);
    slim_q_dynamic_apply(x->data, n, scale, zp, ctx->out[0]->data);
    if (ctx->out[1])
        *(float *)ctx->out[1]->data = scale;
    if (ctx->out[2])
        *(uint8_t *)ctx->out[2]->data = zp;
    return SLIM_OK;
}

/* ---- QLinearMatMul ------------------------------------------------------ */

/* A scale or zero point that is a scalar or a vector of `want`. */
static slim_status check_param(const slim_tensor *t, const char *what, int64_t want,
                               slim_err *err)
{
    int64_t n = slim_tensor_numel(t);
    if (!(n == 1 && t->ndim <= 1) && !(t->ndim == 1 && n == want))
        return slim_errf(err, SLIM_EUNSUPPORTED, "%s must be a scalar or hold %lld values", what,
                         (long long)want);
    return SLIM_OK;
}

static slim_status qlmm_infer(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[3], *yzp = ctx->in[7];
    slim_status st = slim_check_dtype(a, "input a", ctx->err, SLIM_U8, SLIM_I8,
                                      SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(b, "input b", ctx->err, SLIM_U8, SLIM_I8,
                                     SLIM_DTYPE_UNDEFINED)) ||
        (st = slim_check_dtype(yzp, "y_zero_point", ctx->err, SLIM_U8, SLIM_I8,
                               SLIM_DTYPE_UNDEFINED)))
        return st;
    if (ctx->in[2]->dtype != a->dtype || ctx->in[5]->dtype != b->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "each zero point must have its input's type");
    static const int scales[] = {1, 4, 6};
    for (int i = 0; i < 3; i++)
        if ((st = check_scale_dtype(ctx->in[scales[i]], "a scale", ctx->err)))
            return st;
    slim_qmm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    if ((st = slim_qmm_shapes(a, b, &sh, &nd, dims, ctx->err)) ||
        (st = check_param(ctx->in[1], "a_scale", sh.m, ctx->err)) ||
        (st = check_param(ctx->in[2], "a_zero_point", sh.m, ctx->err)) ||
        (st = check_param(ctx->in[4], "b_scale", sh.n, ctx->err)) ||
        (st = check_param(ctx->in[5], "b_zero_point", sh.n, ctx->err)) ||
        (st = check_param(ctx->in[6], "y_scale", 1, ctx->err)) ||
        (st = check_param(yzp, "y_zero_point", 1, ctx->err)))
        return st;
    slim_tensor_set_shape(ctx->out[0], yzp->dtype, nd, dims);
    return SLIM_OK;
}

static slim_status qlmm_exec(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[3];
    slim_tensor *y = ctx->out[0];
    slim_qmm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    slim_status st = slim_qmm_shapes(a, b, &sh, &nd, dims, ctx->err);
    int64_t ny = slim_tensor_numel(y);
    if (st || ny == 0)
        return st;
    int32_t *acc = slim_scratch_malloc(sizeof(int32_t) * (size_t)ny);
    float *as = slim_q_load_f32(ctx->in[1]), *bs = slim_q_load_f32(ctx->in[4]);
    float *ys = slim_q_load_f32(ctx->in[6]);
    if (!acc || !as || !bs || !ys ||
        (st = slim_qmm_int32(&sh, a, ctx->in[2], b, ctx->in[5], acc, ctx->err))) {
        st = st ? st : slim_scratch_oom(ctx->err);
        goto done;
    }
    int32_t lo = 0, hi = 0, yzp = (int32_t)slim_load_i64(ctx->in[7]->dtype, ctx->in[7]->data, 0);
    slim_q_range(y->dtype, &lo, &hi);
    /* The reference's multiplier is computed in the scales' own type. */
    slim_dtype st_ = ctx->in[1]->dtype;
    bool a_row = slim_tensor_numel(ctx->in[1]) > 1, b_col = slim_tensor_numel(ctx->in[4]) > 1;
    for (int64_t e = 0; e < ny; e++) {
        int64_t j = e % sh.n, i = (e / sh.n) % sh.m;
        float mult = round_to(st_, round_to(st_, as[a_row ? i : 0] * bs[b_col ? j : 0]) / ys[0]);
        slim_q_store(y->dtype, y->data, e, slim_q_round((double)acc[e] * mult, yzp, lo, hi));
    }
done:
    slim_scratch_free(acc);
    slim_scratch_free(as);
    slim_scratch_free(bs);
    slim_scratch_free(ys);
    return st;
}

/* ---- com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul ---------- */

/* Y = acc * a_scale * b_scale[j] + bias[j], as onnxruntime: one float
 * multiplier per column, then the bias. */
static void to_float(const slim_qmm_shape *sh, const int32_t *acc, float as, const float *bs,
                     bool b_col, const slim_tensor *bias, float *y, int64_t ny)
{
    const float *bv = bias ? bias->data : NULL;
    for (int64_t e = 0; e < ny; e++) {
        int64_t j = e % sh->n;
        float v = (float)acc[e] * (as * bs[b_col ? j : 0]);
        y[e] = bv ? v + bv[j] : v;
    }
}

static slim_status ms_check(slim_op_ctx *ctx, const slim_tensor *a, int ib, int ibs, int ibzp,
                            int ibias, slim_qmm_shape *sh)
{
    const slim_tensor *b = ctx->in[ib];
    const slim_tensor *bzp = ibzp < ctx->n_in ? ctx->in[ibzp] : NULL;
    const slim_tensor *bias = ibias < ctx->n_in ? ctx->in[ibias] : NULL;
    slim_status st = slim_check_dtype(b, "input B", ctx->err, SLIM_U8, SLIM_I8,
                                      SLIM_DTYPE_UNDEFINED);
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    if (st || (st = slim_check_dtype(ctx->in[ibs], "b_scale", ctx->err, SLIM_F32,
                                     SLIM_DTYPE_UNDEFINED)) ||
        (st = slim_qmm_shapes(a, b, sh, &nd, dims, ctx->err)) ||
        (st = check_param(ctx->in[ibs], "b_scale", sh->n, ctx->err)))
        return st;
    if (bzp && (bzp->dtype != b->dtype || (st = check_param(bzp, "b_zero_point", sh->n,
                                                            ctx->err))))
        return st ? st : slim_errf(ctx->err, SLIM_ETYPE, "b_zero_point must have B's type");
    if (bias && (bias->dtype != SLIM_F32 || bias->ndim != 1 || bias->dims[0] != sh->n))
        return slim_errf(ctx->err, SLIM_ESHAPE, "bias must be float32 [%lld]", (long long)sh->n);
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, nd, dims);
    return SLIM_OK;
}

static slim_status mmitf_infer(slim_op_ctx *ctx)
{
    slim_qmm_shape sh;
    const slim_tensor *a = ctx->in[0], *azp = ctx->n_in > 4 ? ctx->in[4] : NULL;
    slim_status st = slim_check_dtype(a, "input A", ctx->err, SLIM_U8, SLIM_I8,
                                      SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(ctx->in[2], "a_scale", ctx->err, SLIM_F32,
                                     SLIM_DTYPE_UNDEFINED)) ||
        (st = check_param(ctx->in[2], "a_scale", 1, ctx->err)) ||
        (azp && (st = check_param(azp, "a_zero_point", 1, ctx->err))))
        return st;
    if (azp && azp->dtype != a->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "a_zero_point must have A's type");
    return ms_check(ctx, a, 1, 3, 5, 6, &sh);
}

static slim_status mmitf_exec(slim_op_ctx *ctx)
{
    slim_qmm_shape sh;
    const slim_tensor *a = ctx->in[0];
    slim_status st = ms_check(ctx, a, 1, 3, 5, 6, &sh);
    int64_t ny = slim_tensor_numel(ctx->out[0]);
    if (st || ny == 0)
        return st;
    int32_t *acc = slim_scratch_malloc(sizeof(int32_t) * (size_t)ny);
    float *bs = slim_q_load_f32(ctx->in[3]);
    if (!acc || !bs ||
        (st = slim_qmm_int32(&sh, a, ctx->n_in > 4 ? ctx->in[4] : NULL, ctx->in[1],
                             ctx->n_in > 5 ? ctx->in[5] : NULL, acc, ctx->err))) {
        st = st ? st : slim_scratch_oom(ctx->err);
    } else {
        to_float(&sh, acc, *(const float *)ctx->in[2]->data, bs,
                 slim_tensor_numel(ctx->in[3]) > 1, ctx->n_in > 6 ? ctx->in[6] : NULL,
                 ctx->out[0]->data, ny);
    }
    slim_scratch_free(acc);
    slim_scratch_free(bs);
    return st;
}

static slim_status dqmm_infer(slim_op_ctx *ctx)
{
    slim_qmm_shape sh;
    slim_status st = slim_check_dtype(ctx->in[0], "input A", ctx->err, SLIM_F32,
                                      SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    /* The shapes of the quantized A are A's. */
    slim_tensor qa = *ctx->in[0];
    qa.dtype = SLIM_U8;
    return ms_check(ctx, &qa, 1, 2, 3, 4, &sh);
}

static slim_status dqmm_exec(slim_op_ctx *ctx)
{
    slim_qmm_shape sh;
    const slim_tensor *a = ctx->in[0];
    slim_tensor qa = *a;
    qa.dtype = SLIM_U8;
    qa.buf = NULL;
    qa.data = NULL;
    slim_status st = ms_check(ctx, &qa, 1, 2, 3, 4, &sh);
    int64_t ny = slim_tensor_numel(ctx->out[0]), na = slim_tensor_numel(a);
    if (st || ny == 0)
        return st;
    float as;
    uint8_t azp;
    slim_q_dynamic_params(a->data, na, &as, &azp);
    uint8_t *q = slim_scratch_malloc((size_t)(na > 0 ? na : 1));
    int32_t *acc = slim_scratch_malloc(sizeof(int32_t) * (size_t)ny);
    float *bs = slim_q_load_f32(ctx->in[2]);
    if (!q || !acc || !bs) {
        st = slim_scratch_oom(ctx->err);
        goto done;
    }
    slim_q_dynamic_apply(a->data, na, as, azp, q);
    qa.data = q;
    slim_tensor zpt = {.dtype = SLIM_U8, .ndim = 0, .data = &azp};
    if ((st = slim_qmm_int32(&sh, &qa, &zpt, ctx->in[1], ctx->n_in > 3 ? ctx->in[3] : NULL, acc,
                             ctx->err)))
        goto done;
    to_float(&sh, acc, as, bs, slim_tensor_numel(ctx->in[2]) > 1,
             ctx->n_in > 4 ? ctx->in[4] : NULL, ctx->out[0]->data, ny);
done:
    slim_scratch_free(q);
    slim_scratch_free(acc);
    slim_scratch_free(bs);
    return st;
}

const slim_op_def slim__ops_quantize[] = {
    {"QuantizeLinear", 10, NULL, NULL, ql_infer, ql_exec, 0},
    {"DequantizeLinear", 10, NULL, NULL, dql_infer, dql_exec, 0},
    {"DynamicQuantizeLinear", 11, NULL, NULL, dyn_infer, dyn_exec, 0},
    {"QLinearMatMul", 10, NULL, NULL, qlmm_infer, qlmm_exec, 0},
    {0},
};

const slim_op_def slim__ops_microsoft[] = {
    {"MatMulIntegerToFloat", 1, NULL, NULL, mmitf_infer, mmitf_exec, 0},
    {"DynamicQuantizeMatMul", 1, NULL, NULL, dqmm_infer, dqmm_exec, 0},
    {0},
};
