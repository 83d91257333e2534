/*
 * qlinear.c - slimserve's own int8 operators (domain com.slimserve), which
 * the int8 pass (quant/int8.c) puts in place of float layers:
 *
 *   MatMulInt8(X, W, scale, colsum[, bias[, outlier_index, outlier_weight,
 *              outlier_scale]]) -> Y            attrs: K (int), activation ("" | "Relu" | "Gelu")
 *       X float32 [..., K]; W int8, N x K packed as qgemm.h lays it out;
 *       scale float32 or float16 [N] (per output channel; float16 since
 *       the int8 pass stores it so: 2 bytes of a K = 64 channel's 76); colsum int32 [N] (the sums
 *       of each channel's int8 weights); bias float32 [N] (optional, may be
 *       empty when the outliers follow); outlier_index int64 [O] (input
 *       channels taken out of W, their codes there 0), outlier_weight int8
 *       [O, N] and outlier_scale float32 [N]: their own int8 weights, times
 *       the float32 activations (qgemm.h). Y float32 [..., N].
 *       Optional inputs 8-10, residual_weight (int8, packed as W),
 *       residual_scale (float32 [N]) and residual_colsum (int32 [N]): a
 *       second int8 weight for W's rounding error, whose product is added
 *       before the activation (slim_qgemm_res; inputs 4-7 may then be
 *       empty). Optional inputs 11-12, sparse_index (int32 [T, N], each in
 *       [0, K)) and sparse_value (float32 [T, N]): T float32 entries per
 *       output channel taken out of W (their codes there 0), added before
 *       the activation (qgemm.h; inputs 4-10 may then be empty).
 *       X is quantized per row at run time (qgemm.h), so no row's result
 *       depends on another's. "Gelu" is ONNX Gelu with approximate "none"
 *       (passes/fuse_int8_epilogue.c fuses it), in the product's epilogue.
 *   ConvInt8(X, W, scale, colsum[, bias[, R]]) -> Y
 *       attrs: kernel_shape [kh, kw], strides, dilations, pads [t, l, b, r],
 *       group, auto_pad (as Conv's), activation ("" | "Relu" | "Clip", the
 *       latter with clip_min and clip_max), weight_layout ("" | "depthwise":
 *       C = M = group, W taps x C, kernels/cpu/qconv_depthwise.c), nhwc_input
 *       and nhwc_output (0 | 1: X [N, H, W, C] / Y [N, OH, OW, M], the
 *       int8 pass's pixel-major hand-off between two ConvInt8). R: a
 *       residual of Y's shape added before the activation (ResNet's Add,
 *       and the Relu after it), [N, OH, OW, M] with nhwc_residual.
 *       X float32 [N, C, H, W]; W int8 packed as qgemm.h's slim_qconv
 *       describes; scale, colsum (and bias) [M]. Y float32 [N, M, OH, OW].
 *       Codes between two ConvInt8 (kernels/qconv_codes.h): output_codes
 *       = 1 (with a finite Clip and nhwc_output) makes Y u8 codes of the
 *       Clip's range and adds output Y_bad (u8 [N], image n held a NaN);
 *       input_codes = 1 (with nhwc_input) takes X as such codes of
 *       [input_min, input_max], and input 6 X_bad as their Y_bad.
 *       Activations are quantized per output pixel (kernels/cpu/qconv.c).
 *   GatherInt8(table, scale, indices) -> Y
 *       table int8 [V, D], scale float32 or float16 [V] (per row); Y float32
 *       [indices..., D] = table[i] * scale[i], dequantized as gathered.
 *
 * The graph may come from an untrusted file, so every operand's dtype and
 * shape is checked against the others before a byte is read.
 */
#include "hgemm.h"
#include "kernel.h"
#include "qconv_codes.h"
#include "qgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t k;
    slim_qgemm_act act;
} matmul_int8_state;

static slim_status matmul_int8_prepare(slim_node *node, void **state, slim_err *err)
{
    int64_t k = slim_attr_int(node, "K", 0);
    if (k < 1 || k > SLIM_QGEMM_MAX_K)
        return slim_errf(err, SLIM_EINVAL, "attribute K = %lld, must be from 1 to %d",
                         (long long)k, SLIM_QGEMM_MAX_K);
    const char *act = slim_attr_str(node, "activation", "");
    slim_qgemm_act a;
    if (!act[0])
        a = SLIM_QGEMM_ACT_NONE;
    else if (strcmp(act, "Relu") == 0)
        a = SLIM_QGEMM_ACT_RELU;
    else if (strcmp(act, "Gelu") == 0)
        a = SLIM_QGEMM_ACT_GELU;
    else
        return slim_errf(err, SLIM_EINVAL, "activation \"%s\" is not one of \"\", \"Relu\", "
                         "\"Gelu\"", act);
    /* raw: fixed-size load-time state, freed with the model */
    matmul_int8_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->k = k;
    st->act = a;
    *state = st;
    return SLIM_OK;
}

static slim_status check_vector(const slim_tensor *t, const char *what, slim_dtype dt, int64_t n,
                                slim_err *err)
{
    slim_status st = slim_check_dtype(t, what, err, dt, SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (t->ndim != 1 || t->dims[0] != n)
        return slim_errf(err, SLIM_ESHAPE, "%s must be 1-D with %lld elements", what,
                         (long long)n);
    return SLIM_OK;
}

static slim_status matmul_int8_infer(slim_op_ctx *ctx)
{
    const matmul_int8_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *scale = ctx->in[2], *cs = ctx->in[3];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    slim_status st = slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(w, "weight W", ctx->err, SLIM_I8, SLIM_DTYPE_UNDEFINED)))
        return st;
    if (x->ndim < 1 || x->dims[x->ndim - 1] != s->k)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X's last dim must be K = %lld",
                         (long long)s->k);
    if (scale->ndim != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "scale must be 1-D");
    int64_t n = scale->dims[0];
    if (n < 1 || n > (1LL << 31))
        return slim_errf(ctx->err, SLIM_ESHAPE, "scale has %lld channels", (long long)n);
    if ((st = check_vector(scale, "scale", scale->dtype == SLIM_F16 ? SLIM_F16 : SLIM_F32, n,
                           ctx->err)) ||
        (st = check_vector(cs, "colsum", SLIM_I32, n, ctx->err)) ||
        (bias && (st = check_vector(bias, "bias", SLIM_F32, n, ctx->err))))
        return st;
    const slim_tensor *oi = ctx->n_in > 5 ? ctx->in[5] : NULL;
    const slim_tensor *ow = ctx->n_in > 6 ? ctx->in[6] : NULL;
    const slim_tensor *os = ctx->n_in > 7 ? ctx->in[7] : NULL;
    if (!oi != !ow || !oi != !os)
        return slim_errf(ctx->err, SLIM_EINVAL, "outlier_index, outlier_weight and "
                         "outlier_scale come together");
    if (oi) {
        if ((st = slim_check_dtype(oi, "outlier_index", ctx->err, SLIM_I64,
                                   SLIM_DTYPE_UNDEFINED)) ||
            (st = slim_check_dtype(ow, "outlier_weight", ctx->err, SLIM_I8,
                                   SLIM_DTYPE_UNDEFINED)) ||
            (st = check_vector(os, "outlier_scale", SLIM_F32, n, ctx->err)))
            return st;
        if (oi->ndim != 1 || oi->dims[0] > s->k || ow->ndim != 2 || ow->dims[0] != oi->dims[0] ||
            ow->dims[1] != n)
            return slim_errf(ctx->err, SLIM_ESHAPE, "outlier_index must be [O] with O <= K and "
                             "outlier_weight [O, %lld]", (long long)n);
    }
    const slim_tensor *rw = ctx->n_in > 8 ? ctx->in[8] : NULL;
    const slim_tensor *rs = ctx->n_in > 9 ? ctx->in[9] : NULL;
    const slim_tensor *rc = ctx->n_in > 10 ? ctx->in[10] : NULL;
    if (!rw != !rs || !rw != !rc)
        return slim_errf(ctx->err, SLIM_EINVAL, "residual_weight, residual_scale and "
                         "residual_colsum come together");
    if (rw && ((st = slim_check_dtype(rw, "residual_weight", ctx->err, SLIM_I8,
                                      SLIM_DTYPE_UNDEFINED)) ||
               (st = check_vector(rs, "residual_scale", SLIM_F32, n, ctx->err)) ||
               (st = check_vector(rc, "residual_colsum", SLIM_I32, n, ctx->err))))
        return st;
    if (rw && slim_tensor_nbytes(rw) != slim_qgemm_packed_bytes(n, s->k))
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed residual_weight has %zu bytes, %zu "
                         "expected", slim_tensor_nbytes(rw), slim_qgemm_packed_bytes(n, s->k));
    const slim_tensor *si = ctx->n_in > 11 ? ctx->in[11] : NULL;
    const slim_tensor *sv = ctx->n_in > 12 ? ctx->in[12] : NULL;
    if (!si != !sv)
        return slim_errf(ctx->err, SLIM_EINVAL, "sparse_index and sparse_value come together");
    if (si && ((st = slim_check_dtype(si, "sparse_index", ctx->err, SLIM_I32,
                                      SLIM_DTYPE_UNDEFINED)) ||
               (st = slim_check_dtype(sv, "sparse_value", ctx->err, SLIM_F32,
                                      SLIM_DTYPE_UNDEFINED))))
        return st;
    if (si && (si->ndim != 2 || si->dims[1] != n || sv->ndim != 2 || sv->dims[0] != si->dims[0] ||
               sv->dims[1] != n || si->dims[0] > s->k))
        return slim_errf(ctx->err, SLIM_ESHAPE, "sparse_index and sparse_value must be [T, %lld] "
                         "with T <= K", (long long)n);
    if (slim_tensor_nbytes(w) != slim_qgemm_packed_bytes(n, s->k))
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed weight W has %zu bytes, %zu expected for "
                         "%lld channels of K = %lld", slim_tensor_nbytes(w),
                         slim_qgemm_packed_bytes(n, s->k), (long long)n, (long long)s->k);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(dims));
    dims[x->ndim - 1] = n;
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, x->ndim, dims);
    return SLIM_OK;
}

static slim_status matmul_int8_exec(slim_op_ctx *ctx)
{
    const matmul_int8_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *oi = ctx->n_in > 7 ? ctx->in[5] : NULL;
    int64_t n = ctx->in[2]->dims[0], m = slim_tensor_numel(x) / s->k;
    int64_t no = oi ? oi->dims[0] : 0;
    for (int64_t o = 0; o < no; o++) {
        int64_t c = ((const int64_t *)oi->data)[o];
        if (c < 0 || c >= s->k)
            return slim_errf(ctx->err, SLIM_EINVAL, "outlier_index %lld is not in [0, K = %lld)",
                             (long long)c, (long long)s->k);
    }
    const slim_tensor *si = ctx->n_in > 12 ? ctx->in[11] : NULL;
    int64_t nsp = si ? si->dims[0] : 0;
    for (int64_t e = 0; e < nsp * n; e++) {
        int32_t c = ((const int32_t *)si->data)[e];
        if (c < 0 || c >= s->k)
            return slim_errf(ctx->err, SLIM_EINVAL, "sparse_index %d is not in [0, K = %lld)",
                             (int)c, (long long)s->k);
    }
    if (m == 0)
        return SLIM_OK;
    /* float16 scales are widened behind the quantized rows (n floats, no
     * more than the output's one row). */
    const slim_tensor *sc = ctx->in[2];
    const slim_tensor *rw = ctx->n_in > 10 ? ctx->in[8] : NULL;
    size_t qbytes = ((rw ? slim_qgemm_res_scratch_bytes(m, n, s->k)
                         : slim_qgemm_scratch_bytes(m, s->k)) + 63) / 64 * 64;
    /* From the allocator (64-byte aligned), so the device's limit and
     * accounts see it and a refusal is SLIM_EOOM, which the batcher halves. */
    slim_tensor st_scratch = {.dtype = SLIM_U8, .ndim = 1,
                              .dims = {(int64_t)(qbytes + (sc->dtype == SLIM_F16
                                                                ? sizeof(float) * (size_t)n
                                                                : 0))}};
    slim_status st = slim_tensor_alloc(&st_scratch, ctx->err);
    if (st)
        return st;
    void *scratch = st_scratch.data;
    const float *w_scale = sc->data;
    if (sc->dtype == SLIM_F16) {
        float *ws = (float *)((char *)scratch + qbytes);
        slim_half_widen(sc->data, SLIM_F16, ws, n);
        w_scale = ws;
    }
    slim_qgemm_args a = {
        .m = m, .n = n, .k = s->k, .x = x->data, .ldx = s->k, .packed = ctx->in[1]->data,
        .colsum = ctx->in[3]->data, .w_scale = w_scale,
        .bias = bias ? bias->data : NULL, .act = s->act, .y = ctx->out[0]->data, .ldy = n,
        .n_outl = no, .outl_idx = oi ? oi->data : NULL, .outl_q = oi ? ctx->in[6]->data : NULL,
        .outl_scale = oi ? ctx->in[7]->data : NULL,
        .n_sp = nsp, .sp_idx = si ? si->data : NULL, .sp_val = si ? ctx->in[12]->data : NULL,
    };
    if (rw)
        slim_qgemm_res(&a, rw->data, ctx->in[10]->data, ctx->in[9]->data, scratch);
    else
        slim_qgemm(&a, scratch);
    slim_tensor_release(&st_scratch);
    return SLIM_OK;
}

/* ---- ConvInt8 ------------------------------------------------------------ */

typedef struct {
    slim_qconv geom;           /* kernel, strides, dilations, pads, group */
    slim_qconv_pad auto_pad;
    slim_qgemm_act act;
    bool clip;                 /* activation "Clip": then Clip(clip_min, clip_max) */
    float clip_lo, clip_hi;
    bool in_codes, out_codes;  /* X / Y as u8 codes (qconv_codes.h) */
    float in_lo, in_hi;
} conv_int8_state;

/* attrs[name] as n values of at least lo, or def when absent. */
static slim_status conv_ints(const slim_node *node, const char *name, int n, int64_t lo,
                             int64_t def, int64_t *out, slim_err *err)
{
    int64_t v[8];
    int got = slim_attr_ints(node, name, v, 8);
    if (got < 0) {
        for (int i = 0; i < n; i++)
            out[i] = def;
        return SLIM_OK;
    }
    if (got != n)
        return slim_errf(err, SLIM_EINVAL, "attribute %s has %d values, expected %d", name, got,
                         n);
    for (int i = 0; i < n; i++) {
        if (v[i] < lo || v[i] > (1LL << 30))
            return slim_errf(err, SLIM_EINVAL, "attribute %s[%d] = %lld is out of range", name,
                             i, (long long)v[i]);
        out[i] = v[i];
    }
    return SLIM_OK;
}

static slim_status conv_int8_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    conv_int8_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_qconv *q = &s->geom;
    int64_t k[2], st2[2], d[2], p[4];
    slim_status st;
    if (slim_attr_ints(node, "kernel_shape", k, 2) != 2) {
        st = slim_errf(err, SLIM_EINVAL, "attribute kernel_shape must have 2 values");
        goto fail;
    }
    if ((st = conv_ints(node, "kernel_shape", 2, 1, 1, k, err)) ||
        (st = conv_ints(node, "strides", 2, 1, 1, st2, err)) ||
        (st = conv_ints(node, "dilations", 2, 1, 1, d, err)) ||
        (st = conv_ints(node, "pads", 4, 0, 0, p, err)))
        goto fail;
    q->kh = k[0], q->kw = k[1], q->sh = st2[0], q->sw = st2[1], q->dh = d[0], q->dw = d[1];
    q->pt = p[0], q->pl = p[1], q->pb = p[2], q->pr = p[3];
    q->groups = slim_attr_int(node, "group", 1);
    int64_t nin = slim_attr_int(node, "nhwc_input", 0), nout = slim_attr_int(node, "nhwc_output", 0);
    int64_t nres = slim_attr_int(node, "nhwc_residual", 0);
    if ((nin != 0 && nin != 1) || (nout != 0 && nout != 1) || (nres != 0 && nres != 1)) {
        st = slim_errf(err, SLIM_EINVAL, "nhwc_input, nhwc_output and nhwc_residual must be 0 or 1");
        goto fail;
    }
    q->nhwc_in = nin, q->nhwc_out = nout, q->nhwc_res = nres;
    if (q->groups < 1 || q->groups > (1LL << 30)) {
        st = slim_errf(err, SLIM_EINVAL, "group = %lld, must be >= 1", (long long)q->groups);
        goto fail;
    }
    const char *pad = slim_attr_str(node, "auto_pad", "NOTSET");
    static const char *const pads[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
    s->auto_pad = (slim_qconv_pad)-1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(pad, pads[i]) || (!pad[0] && i == 0))
            s->auto_pad = (slim_qconv_pad)i;
    if ((int)s->auto_pad < 0) {
        st = slim_errf(err, SLIM_EINVAL, "auto_pad \"%s\" is not NOTSET, SAME_UPPER, SAME_LOWER "
                       "or VALID", pad);
        goto fail;
    }
    const char *act = slim_attr_str(node, "activation", "");
    if (!act[0])
        s->act = SLIM_QGEMM_ACT_NONE;
    else if (!strcmp(act, "Relu"))
        s->act = SLIM_QGEMM_ACT_RELU;
    else if (!strcmp(act, "Clip")) {
        s->clip = true;
        s->clip_lo = slim_attr_float(node, "clip_min", -INFINITY);
        s->clip_hi = slim_attr_float(node, "clip_max", INFINITY);
        if (!(s->clip_lo <= s->clip_hi)) {
            st = slim_errf(err, SLIM_EINVAL, "activation Clip needs clip_min <= clip_max, got "
                           "%g and %g", s->clip_lo, s->clip_hi);
            goto fail;
        }
    } else {
        st = slim_errf(err, SLIM_EINVAL, "activation \"%s\" is not one of \"\", \"Relu\", "
                       "\"Clip\"", act);
        goto fail;
    }
    int64_t ic = slim_attr_int(node, "input_codes", 0), oc = slim_attr_int(node, "output_codes", 0);
    s->in_lo = slim_attr_float(node, "input_min", NAN);
    s->in_hi = slim_attr_float(node, "input_max", NAN);
    if ((ic != 0 && ic != 1) || (oc != 0 && oc != 1)) {
        st = slim_errf(err, SLIM_EINVAL, "input_codes and output_codes must be 0 or 1");
        goto fail;
    }
    s->in_codes = ic, s->out_codes = oc;
    if (ic && (!nin || !isfinite(s->in_lo) || !isfinite(s->in_hi) || !(s->in_lo <= s->in_hi))) {
        st = slim_errf(err, SLIM_EINVAL, "input_codes needs nhwc_input and finite input_min <= "
                       "input_max");
        goto fail;
    }
    if (oc && (!nout || !s->clip || !isfinite(s->clip_lo) || !isfinite(s->clip_hi))) {
        st = slim_errf(err, SLIM_EINVAL, "output_codes needs nhwc_output and activation Clip "
                       "with finite clip_min and clip_max");
        goto fail;
    }
    if (oc && node->n_out != 2) {
        st = slim_errf(err, SLIM_EINVAL, "output_codes needs the second output Y_bad");
        goto fail;
    }
    const char *layout = slim_attr_str(node, "weight_layout", "");
    if (!strcmp(layout, "depthwise"))
        q->dw_layout = true;
    else if (layout[0]) {
        st = slim_errf(err, SLIM_EINVAL, "weight_layout \"%s\" is not \"\" or \"depthwise\"",
                       layout);
        goto fail;
    }
    *state = s;
    return SLIM_OK;
fail:
    free(s);
    return st;
}

/* The state's geometry applied to the operands' shapes. */
static slim_status conv_int8_geom(slim_op_ctx *ctx, slim_qconv *q)
{
    const conv_int8_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *scale = ctx->in[2], *cs = ctx->in[3];
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    const slim_tensor *res = ctx->n_in > 5 ? ctx->in[5] : NULL;
    const slim_tensor *xbad = ctx->n_in > 6 ? ctx->in[6] : NULL;
    slim_status st = slim_check_dtype(x, "input X", ctx->err, s->in_codes ? SLIM_U8 : SLIM_F32,
                                      SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(w, "weight W", ctx->err, SLIM_I8, SLIM_DTYPE_UNDEFINED)))
        return st;
    if (x->ndim != 4)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input X has %d dims, expected %s", x->ndim,
                         s->geom.nhwc_in ? "[N, H, W, C]" : "[N, C, H, W]");
    if (scale->ndim != 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "scale must be 1-D");
    *q = s->geom;
    if (q->nhwc_in)
        q->c = x->dims[3], q->h = x->dims[1], q->w = x->dims[2];
    else
        q->c = x->dims[1], q->h = x->dims[2], q->w = x->dims[3];
    q->m = scale->dims[0];
    if (q->m > (1LL << 30) || q->c > (1LL << 30))
        return slim_errf(ctx->err, SLIM_ESHAPE, "%lld channels is too many", (long long)q->m);
    const char *why = slim_qconv_shape(q, s->auto_pad);
    if (why)
        return slim_errf(ctx->err, SLIM_ESHAPE, "%s (X [%lld, %lld, %lld, %lld], %lld output "
                         "channels)", why, (long long)x->dims[0], (long long)q->c,
                         (long long)q->h, (long long)q->w, (long long)q->m);
    if ((st = check_vector(scale, "scale", SLIM_F32, q->m, ctx->err)) ||
        (st = check_vector(cs, "colsum", SLIM_I32, q->m, ctx->err)) ||
        (bias && (st = check_vector(bias, "bias", SLIM_F32, q->m, ctx->err))))
        return st;
    if (res) {
        int64_t d[4] = {x->dims[0], q->m, q->oh, q->ow};
        if (q->nhwc_res)
            d[1] = q->oh, d[2] = q->ow, d[3] = q->m;
        if ((st = slim_check_dtype(res, "residual R", ctx->err, SLIM_F32,
                                   SLIM_DTYPE_UNDEFINED)))
            return st;
        if (res->ndim != 4 || memcmp(res->dims, d, sizeof(d)))
            return slim_errf(ctx->err, SLIM_ESHAPE, "residual R must have the output's shape "
                             "[%lld, %lld, %lld, %lld]", (long long)d[0], (long long)d[1],
                             (long long)d[2], (long long)d[3]);
    }
    if (xbad && (!s->in_codes || xbad->dtype != SLIM_U8 || xbad->ndim != 1 ||
                 xbad->dims[0] != x->dims[0]))
        return slim_errf(ctx->err, SLIM_ESHAPE, "X_bad must be u8 [N] beside input codes");
    if (slim_tensor_nbytes(w) != slim_qconv_packed_bytes(q))
        return slim_errf(ctx->err, SLIM_ESHAPE, "packed weight W has %zu bytes, %zu expected for "
                         "%lld channels of %lld in %lld groups", slim_tensor_nbytes(w),
                         slim_qconv_packed_bytes(q), (long long)q->m, (long long)slim_qconv_kg(q),
                         (long long)q->groups);
    return SLIM_OK;
}

static slim_status conv_int8_infer(slim_op_ctx *ctx)
{
    slim_qconv q;
    slim_status st = conv_int8_geom(ctx, &q);
    if (st)
        return st;
    int64_t dims[4] = {ctx->in[0]->dims[0], q.m, q.oh, q.ow};
    if (q.nhwc_out)
        dims[1] = q.oh, dims[2] = q.ow, dims[3] = q.m;
    const conv_int8_state *s = ctx->state;
    slim_tensor_set_shape(ctx->out[0], s->out_codes ? SLIM_U8 : SLIM_F32, 4, dims);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_U8, 1, dims);
    return SLIM_OK;
}

static slim_status conv_int8_exec(slim_op_ctx *ctx)
{
    const conv_int8_state *s = ctx->state;
    slim_qconv q;
    slim_status st = conv_int8_geom(ctx, &q);
    if (st)
        return st;
    const slim_tensor *bias = ctx->n_in > 4 ? ctx->in[4] : NULL;
    slim_qconv_weights w = {ctx->in[1]->data, ctx->in[3]->data, ctx->in[2]->data,
                            bias ? bias->data : NULL, s->act, NULL,
                            ctx->n_in > 5 && ctx->in[5] ? ctx->in[5]->data : NULL, s->clip,
                            s->clip_lo, s->clip_hi};
    slim_qconv_codes io = {
        .in = s->in_codes, .in_lo = s->in_lo, .in_hi = s->in_hi,
        .x_bad = ctx->n_in > 6 && ctx->in[6] ? ctx->in[6]->data : NULL,
        .out = s->out_codes, .out_lo = s->clip_lo, .out_hi = s->clip_hi,
        .y_bad = s->out_codes ? ctx->out[1]->data : NULL,
    };
    if (io.y_bad) /* set per image where a NaN turns up */
        memset(io.y_bad, 0, (size_t)ctx->in[0]->dims[0]);
    return slim_qconv_run_codes(&q, &io, ctx->in[0]->dims[0], ctx->in[0]->data, &w,
                                ctx->out[0]->data, ctx->err);
}

/* ---- GatherInt8 ---------------------------------------------------------- */

static slim_status gather_int8_infer(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *scale = ctx->in[1], *ind = ctx->in[2];
    slim_status st = slim_check_dtype(t, "table", ctx->err, SLIM_I8, SLIM_DTYPE_UNDEFINED);
    if (st || (st = slim_check_dtype(ind, "indices", ctx->err, SLIM_I64, SLIM_I32,
                                     SLIM_DTYPE_UNDEFINED)))
        return st;
    if (t->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "table must be 2-D, not %d-D", t->ndim);
    if ((st = check_vector(scale, "scale", scale->dtype == SLIM_F16 ? SLIM_F16 : SLIM_F32,
                           t->dims[0], ctx->err)))
        return st;
    if (ind->ndim + 1 > SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_ESHAPE, "indices rank %d is not supported", ind->ndim);
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, ind->dims, sizeof(int64_t) * (size_t)ind->ndim);
    dims[ind->ndim] = t->dims[1];
    slim_tensor_set_shape(ctx->out[0], SLIM_F32, ind->ndim + 1, dims);
    return SLIM_OK;
}

typedef struct {
    const int8_t *table;
    const float *scale;        /* float32 scales, or */
    const uint16_t *scale16;   /* float16 ones */
    const int64_t *idx;
    float *y;
    int64_t d;
} gather_int8_job;

static void gather_int8_part(int64_t begin, int64_t end, void *user)
{
    const gather_int8_job *j = user;
    for (int64_t i = begin; i < end; i++) {
        const int8_t *row = j->table + j->idx[i] * j->d;
        float s = j->scale16 ? slim_f16_to_f32(j->scale16[j->idx[i]]) : j->scale[j->idx[i]];
        float *y = j->y + i * j->d;
        for (int64_t c = 0; c < j->d; c++)
            y[c] = (float)row[c] * s;
    }
}

static slim_status gather_int8_exec(slim_op_ctx *ctx)
{
    const slim_tensor *t = ctx->in[0], *ind = ctx->in[2];
    int64_t n = slim_tensor_numel(ind), v = t->dims[0], d = t->dims[1];
    if (n == 0 || d == 0)
        return SLIM_OK;
    int64_t *idx = slim_scratch_malloc(sizeof(int64_t) * (size_t)n);
    if (!idx)
        return slim_scratch_oom(ctx->err);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = slim_load_i64(ind->dtype, ind->data, i);
        if (k < -v || k >= v) {
            slim_scratch_free(idx);
            return slim_errf(ctx->err, SLIM_EINVAL, "index %lld is out of range for %lld rows",
                             (long long)k, (long long)v);
        }
        idx[i] = k < 0 ? k + v : k;
    }
    bool h = ctx->in[1]->dtype == SLIM_F16;
    gather_int8_job j = {t->data, h ? NULL : ctx->in[1]->data, h ? ctx->in[1]->data : NULL, idx,
                         ctx->out[0]->data, d};
    slim_parallel_for(n, 1 + 16384 / d, gather_int8_part, &j);
    slim_scratch_free(idx);
    return SLIM_OK;
}

const slim_op_def slim__ops_int8[] = {
    {"MatMulInt8", 1, matmul_int8_prepare, free, matmul_int8_infer, matmul_int8_exec, 0},
    {"GatherInt8", 1, NULL, NULL, gather_int8_infer, gather_int8_exec, 0},
    {"ConvInt8", 1, conv_int8_prepare, free, conv_int8_infer, conv_int8_exec, 0},
    {0},
};
