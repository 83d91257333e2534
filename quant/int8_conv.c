/*
 * int8_conv.c - the int8 pass's Conv layers (see int8.h): a 2-D Conv with a
 * constant float32 weight becomes com.slimserve ConvInt8
 * (kernels/cpu/qlinear.c, kernels/cpu/qconv.c).
 *
 * Weights are symmetric int8 per output channel like MatMulInt8's, each
 * channel's C/group x kh x kw taps reordered (ky, kx, channel) -- the order
 * of an im2col row over a pixel-major image, where a receptive field is kh x
 * kw contiguous runs -- and packed per group for slim_qgemm. The Conv's bias
 * and a Relu that alone reads its output are fused. The node's geometry
 * (strides, dilations, pads or auto_pad, group) is written out explicitly.
 *
 * Depthwise convs (C = M = group) get their own weight layout, taps x C
 * (kernels/cpu/qconv_depthwise.c): the 64-channel qgemm panels would pad each
 * one-channel group 16-fold. A Clip with constant bounds (MobileNet's ReLU6)
 * that alone reads a conv's output is fused like a Relu, so a MobileNetV2
 * block -- expansion 1x1, depthwise 3x3, projection 1x1 -- is three
 * ConvInt8 handing their activations over pixel-major (SLIM_INT8_CONV_DW=int8
 * at convert time; by default depthwise convs and their neighbours stay
 * float32, where oneDNN runs the 1x1 fused with the depthwise conv: see
 * dw_mode). Depthwise convs with a channel multiplier (M > C) stay float32.
 */
#include "int8_impl.h"

#include "kernel.h"
#include "qgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t m, cg, kh, kw, groups;
    int64_t strides[2], dilations[2], pads[4];
    const char *auto_pad;
    int bias;              /* value id, or -1 */
    bool dw;               /* depthwise, in the depthwise weight layout */
} conv_layer;

/* SLIM_INT8_CONV_DW at convert time: "float" keeps depthwise convs and the
 * convs next to them float32, "neighbours" only the depthwise convs, "int8"
 * quantizes them all (the depthwise ones in their own layout). */
typedef enum { DW_FLOAT, DW_NEIGHBOURS, DW_ALL } dw_mode;
#define DW_DEFAULT DW_FLOAT

static dw_mode dw_mode_now(void)
{
    const char *e = getenv("SLIM_INT8_CONV_DW");
    if (!e || !e[0])
        return DW_DEFAULT;
    return !strcmp(e, "int8") ? DW_ALL : !strcmp(e, "neighbours") ? DW_NEIGHBOURS : DW_FLOAT;
}

static const char *conv_of(const slim__int8_pass *p, const slim_node *n, conv_layer *c)
{
    const slim_graph *g = p->rw.g;
    const slim_tensor *w = &g->values[n->in[1]].init;
    memset(c, 0, sizeof(*c));
    c->m = w->dims[0];
    c->cg = w->dims[1];
    c->kh = w->dims[2];
    c->kw = w->dims[3];
    c->groups = slim_attr_int(n, "group", 1);
    c->bias = n->n_in > 2 ? n->in[2] : -1;
    c->auto_pad = slim_attr_str(n, "auto_pad", "NOTSET");
    if (!c->auto_pad[0])
        c->auto_pad = "NOTSET";
    if (c->m < 1 || c->cg < 1 || c->kh < 1 || c->kw < 1)
        return "empty weight";
    if (c->groups < 1 || c->m % c->groups)
        return "output channels are not divisible by group";
    if (c->cg == 1 && c->groups > 1) {
        if (dw_mode_now() != DW_ALL)
            return "depthwise";
        if (c->groups != c->m)
            return "depthwise with a channel multiplier";
        if (c->kh * c->kw > SLIM_QCONV_DW_TAPS)
            return "depthwise kernel over 256 taps";
        c->dw = true;
    }
    if (c->cg * c->kh * c->kw > SLIM_QGEMM_MAX_K)
        return "C / group x kernel is over 32768";
    int64_t k[2];
    int nk = slim_attr_ints(n, "kernel_shape", k, 2);
    if (nk >= 0 && (nk != 2 || k[0] != c->kh || k[1] != c->kw))
        return "kernel_shape does not match the weight";
    int ns = slim_attr_ints(n, "strides", c->strides, 2);
    int nd = slim_attr_ints(n, "dilations", c->dilations, 2);
    int np = slim_attr_ints(n, "pads", c->pads, 4);
    if ((ns >= 0 && ns != 2) || (nd >= 0 && nd != 2) || (np >= 0 && np != 4))
        return "strides, dilations or pads do not have 2, 2 and 4 values";
    for (int i = 0; i < 2; i++) {
        c->strides[i] = ns < 0 ? 1 : c->strides[i];
        c->dilations[i] = nd < 0 ? 1 : c->dilations[i];
        if (c->strides[i] < 1 || c->dilations[i] < 1 || c->strides[i] > (1 << 30) ||
            c->dilations[i] > (1 << 30))
            return "strides or dilations out of range";
    }
    for (int i = 0; i < 4; i++) {
        c->pads[i] = np < 0 ? 0 : c->pads[i];
        if (c->pads[i] < 0 || c->pads[i] > (1 << 30))
            return "pads out of range";
    }
    if (strcmp(c->auto_pad, "NOTSET") && strcmp(c->auto_pad, "SAME_UPPER") &&
        strcmp(c->auto_pad, "SAME_LOWER") && strcmp(c->auto_pad, "VALID"))
        return "unknown auto_pad";
    if (c->bias >= 0) {
        const slim_tensor *b = slim_pass_const_f32(g, c->bias);
        if (!b || b->ndim != 1 || b->dims[0] != c->m)
            return "B is not a constant [M] bias";
    }
    return NULL;
}

/* n is a float32 depthwise Conv: one input channel per group, more than
 * one group (the convs conv_of leaves float32). */
static bool is_depthwise(const slim_graph *g, const slim_node *n)
{
    if (n->domain[0] || strcmp(n->op_type, "Conv") || n->n_in < 2 || n->in[1] < 0)
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, n->in[1]);
    return w && w->ndim == 4 && w->dims[1] == 1 && slim_attr_int(n, "group", 1) > 1;
}

static bool is_act(const slim_node *n)
{
    return !n->domain[0] && (!strcmp(n->op_type, "Relu") || !strcmp(n->op_type, "Clip"));
}

/* The live node producing v, or NULL (a graph input or initializer). */
static const slim_node *producer_of(const slim__int8_pass *p, int v)
{
    const slim_graph *g = p->rw.g;
    for (int i = 0; i < g->n_nodes; i++)
        if (!p->rw.dead[i])
            for (int o = 0; o < g->nodes[i].n_out; o++)
                if (g->nodes[i].out[o] == v)
                    return &g->nodes[i];
    return NULL;
}

/* Why a Conv next to a depthwise one stays float32: the float Conv beside
 * a depthwise conv (MobileNet's expansion 1x1 -> Relu6 -> depthwise 3x3 ->
 * projection 1x1) runs fused by oneDNN (kernels/cpu/conv_dnnl.c), the
 * depthwise as the 1x1's post-op, without the expanded activation going to
 * memory; a ConvInt8 there breaks that fusion and pays its own NCHW <->
 * pixel-major float moves and per-pixel quantization on the widest tensors
 * of the net, which measured 3-4x slower than float32 on MobileNetV2
 * (docs/int8.md). Walks through one Relu or Clip (ReLU6) each way. Not
 * under SLIM_INT8_CONV_DW=neighbours or int8 (the latter quantizes the
 * depthwise conv too, and the block stays pixel-major). */
static const char *depthwise_neighbour(const slim__int8_pass *p, const slim_node *n)
{
    if (dw_mode_now() != DW_FLOAT)
        return NULL;
    const slim_graph *g = p->rw.g;
    int out = n->out[0];
    const slim_node *r = slim_rewrite_sole_reader(&p->rw, out, "Relu");
    r = r ? r : slim_rewrite_sole_reader(&p->rw, out, "Clip");
    r = r ? slim_rewrite_sole_reader(&p->rw, r->out[0], "Conv")
          : slim_rewrite_sole_reader(&p->rw, out, "Conv");
    if (r && is_depthwise(g, r))
        return "feeds a depthwise conv (fused in float32)";
    const slim_node *s = producer_of(p, n->in[0]);
    if (s && is_act(s) && s->n_in > 0)
        s = producer_of(p, s->in[0]);
    if (s && is_depthwise(g, s))
        return "reads a depthwise conv (fused in float32)";
    return NULL;
}

const char *slim__int8_conv_why(const slim__int8_pass *p, const slim_node *n)
{
    conv_layer c;
    const char *why = conv_of(p, n, &c);
    return why ? why : depthwise_neighbour(p, n);
}

static slim_qconv_pad pad_mode(const char *s)
{
    return !strcmp(s, "SAME_UPPER")   ? SLIM_QCONV_SAME_UPPER
           : !strcmp(s, "SAME_LOWER") ? SLIM_QCONV_SAME_LOWER
           : !strcmp(s, "VALID")      ? SLIM_QCONV_VALID
                                      : SLIM_QCONV_NOTSET;
}

/* The layer's relative output error on its sample input: the float32
 * weights (in packed order) and the int8 ones, on the same im2col rows. -1
 * without a usable sample. */
static double measure_conv(const slim__int8_pass *p, const slim_node *n, const conv_layer *c,
                           const float *wr, const slim_qconv_weights *w8)
{
    const slim_tensor *x = slim_int8_sample(p->opts ? p->opts->samples : NULL,
                                            p->rw.g->values[n->in[0]].name);
    if (!x || x->dtype != SLIM_F32 || x->ndim != 4 || x->dims[1] != c->cg * c->groups)
        return -1;
    slim_qconv q = {
        .c = x->dims[1], .h = x->dims[2], .w = x->dims[3], .m = c->m, .groups = c->groups,
        .kh = c->kh, .kw = c->kw, .sh = c->strides[0], .sw = c->strides[1],
        .dh = c->dilations[0], .dw = c->dilations[1],
        .pt = c->pads[0], .pl = c->pads[1], .pb = c->pads[2], .pr = c->pads[3],
        .dw_layout = c->dw,
    };
    if (slim_qconv_shape(&q, pad_mode(c->auto_pad)))
        return -1;
    int64_t ny = x->dims[0] * c->m * q.oh * q.ow;
    float *y32 = malloc(sizeof(float) * (size_t)(ny ? ny : 1));
    float *y8 = malloc(sizeof(float) * (size_t)(ny ? ny : 1));
    slim_qconv_weights wf = *w8;
    wf.wf = wr;
    slim_err e = {0};
    double err = -1;
    if (y32 && y8 && !slim_qconv_run(&q, x->dims[0], x->data, &wf, y32, &e) &&
        !slim_qconv_run(&q, x->dims[0], x->data, w8, y8, &e))
        err = slim_int8_rel_error(y32, y8, ny);
    free(y32);
    free(y8);
    return err;
}

static slim_status int_attr(slim_attr *a, const char *name, int n, const int64_t *v,
                            slim_err *err)
{
    a->name = strdup(name);
    if (n < 0) {
        a->type = SLIM_ATTR_INT;
        a->i = v[0];
        return a->name ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    a->type = SLIM_ATTR_INTS;
    a->n = n;
    a->ints = malloc(sizeof(int64_t) * (size_t)n);
    if (!a->name || !a->ints)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
    return SLIM_OK;
}

static slim_status float_attr(slim_attr *a, const char *name, float v, slim_err *err)
{
    a->name = strdup(name);
    a->type = SLIM_ATTR_FLOAT;
    a->f = v;
    return a->name ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

static slim_status str_attr(slim_attr *a, const char *name, const char *v, slim_err *err)
{
    a->name = strdup(name);
    a->type = SLIM_ATTR_STRING;
    a->s = strdup(v);
    return a->name && a->s ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

/* The fused activation: none, Relu, or Clip(lo, hi). */
typedef struct {
    bool relu, clip;
    float lo, hi;
} conv_act;

/* ConvInt8's attributes: the geometry made explicit, the activation and
 * the depthwise weight layout. */
static slim_status conv_attrs(const conv_layer *c, const conv_act *act, slim_attr **out, int *na,
                              slim_err *err)
{
    bool relu = act->relu;
    *na = 6 + relu + 3 * act->clip + c->dw;
    slim_attr *a = calloc((size_t)*na, sizeof(*a));
    if (!a)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    int64_t k[2] = {c->kh, c->kw};
    slim_status st;
    if ((st = int_attr(&a[0], "kernel_shape", 2, k, err)) ||
        (st = int_attr(&a[1], "strides", 2, c->strides, err)) ||
        (st = int_attr(&a[2], "dilations", 2, c->dilations, err)) ||
        (st = int_attr(&a[3], "pads", 4, c->pads, err)) ||
        (st = int_attr(&a[4], "group", -1, &c->groups, err)) ||
        (st = str_attr(&a[5], "auto_pad", c->auto_pad, err)) ||
        (relu && (st = str_attr(&a[6], "activation", "Relu", err))) ||
        (act->clip && ((st = str_attr(&a[6], "activation", "Clip", err)) ||
                       (st = float_attr(&a[7], "clip_min", act->lo, err)) ||
                       (st = float_attr(&a[8], "clip_max", act->hi, err)))) ||
        (c->dw && (st = str_attr(&a[*na - 1], "weight_layout", "depthwise", err)))) {
        for (int i = 0; i < *na; i++)
            slim_attr_clear(&a[i]);
        free(a);
        return st;
    }
    *out = a;
    return SLIM_OK;
}

static bool is_conv_int8(const slim_node *n)
{
    return !strcmp(n->domain, "com.slimserve") && !strcmp(n->op_type, "ConvInt8");
}

/* Appends value ids to a node's inputs (-1 up to slot `at`) or outputs. */
static slim_status slots_grow(int **slots, int *n, int want, slim_err *err)
{
    if (*n >= want)
        return SLIM_OK;
    int *grown = realloc(*slots, sizeof(int) * (size_t)want);
    if (!grown)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    for (int i = *n; i < want; i++)
        grown[i] = -1;
    *slots = grown;
    *n = want;
    return SLIM_OK;
}

/* Value v (pixel-major already) goes as u8 codes when its producer ends in
 * a Clip with finite bounds -- MobileNet's ReLU6 expansions and depthwise
 * convs -- and every reader takes it as its image X: the producer writes
 * the codes of the Clip's range in its epilogue, and the readers skip the
 * image's range and codes passes (kernels/qconv_codes.h). Codes of
 * [0, 6] are bitwise the per-image codes of every image whose output
 * reaches 0 and 6 somewhere; an image that does not gets a coarser step
 * than its own range would give it. A second output, Y_bad (u8 [N]), tells
 * the readers which images held a NaN. SLIM_INT8_CONV_CODES=off at convert
 * time keeps float32 (the before). */
static slim_status hand_over_codes(slim__int8_pass *p, slim_node *src, int v, slim_err *err)
{
    const char *env = getenv("SLIM_INT8_CONV_CODES");
    float lo = slim_attr_float(src, "clip_min", NAN), hi = slim_attr_float(src, "clip_max", NAN);
    if ((env && !strcmp(env, "off")) || strcmp(slim_attr_str(src, "activation", ""), "Clip") ||
        !isfinite(lo) || !isfinite(hi) || slim_attr_int(src, "output_codes", 0))
        return SLIM_OK;
    slim_graph *g = p->rw.g;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in && !p->rw.dead[i]; k++)
            if (g->nodes[i].in[k] == v && k != 0)
                return SLIM_OK; /* a residual R stays float32 */
    char name[400];
    snprintf(name, sizeof(name), "%s.bad", g->values[v].name);
    for (int i = 1; slim_graph_find_value(g, name) >= 0; i++) /* a new value, not a namesake */
        snprintf(name, sizeof(name), "%s.bad_%d", g->values[v].name, i);
    int bad = slim_graph_value(g, name);
    if (bad < 0)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    g->values[bad].info.ndim = -1;
    g->values[v].info.dtype = SLIM_U8;
    slim_status st = slots_grow(&src->out, &src->n_out, 2, err);
    if (!st) {
        src->out[1] = bad;
        st = slim_pass_set_int(src, "output_codes", 1, err);
    }
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        if (p->rw.dead[i] || n->in[0] != v)
            continue;
        if ((st = slots_grow(&n->in, &n->n_in, 7, err)) ||
            (st = slim_pass_set_int(n, "input_codes", 1, err)) ||
            (st = slim_pass_set_float(n, "input_min", lo, err)) ||
            (st = slim_pass_set_float(n, "input_max", hi, err)))
            break;
        n->in[6] = bad;
    }
    return st;
}

/* Value v, made by a ConvInt8 and read only by ConvInt8s (as their image X
 * or their residual R), goes pixel-major (NHWC): the producer writes its
 * product straight into it and the readers take it as is, so the value
 * pays no NCHW round trip (two transposes of the tensor). Called as each
 * ConvInt8 is made, for its inputs, so the last reader to be made settles
 * it. The values are the same floats, only laid out otherwise, so results
 * are bitwise those of the round trip. SLIM_INT8_CONV_NHWC=off keeps NCHW
 * (the before, for benchmarks and tests). */
static slim_status hand_over_nhwc(slim__int8_pass *p, int v, slim_err *err)
{
    const char *env = getenv("SLIM_INT8_CONV_NHWC");
    if ((env && !strcmp(env, "off")) || v < 0)
        return SLIM_OK;
    slim_graph *g = p->rw.g;
    slim_node *src = (slim_node *)producer_of(p, v);
    if (!src || !is_conv_int8(src) || src->n_out != 1 || g->values[v].is_output)
        return SLIM_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        if (p->rw.dead[i])
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v && (!is_conv_int8(n) || (k != 0 && k != 5)))
                return SLIM_OK;
    }
    slim_status st = slim_pass_set_int(src, "nhwc_output", 1, err);
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *n = &g->nodes[i];
        if (p->rw.dead[i])
            continue;
        for (int k = 0; k < n->n_in && !st; k++)
            if (n->in[k] == v)
                st = slim_pass_set_int(n, k == 0 ? "nhwc_input" : "nhwc_residual", 1, err);
    }
    g->values[v].info.ndim = -1; /* its declared NCHW shape no longer holds */
    return st ? st : hand_over_codes(p, src, v, err);
}

/* The Add that alone reads the conv's output out, when its other operand
 * is a whole activation (made by a conv, a pool or an op that keeps its
 * input's shape): ResNet's residual, fused into ConvInt8 (input R, the
 * Relu after it as the activation). Its shape is checked again when the
 * node runs. SLIM_INT8_CONV_RESIDUAL=off leaves the Add alone. */
static slim_node *residual_add(const slim__int8_pass *p, int out, int *skip)
{
    const char *env = getenv("SLIM_INT8_CONV_RESIDUAL");
    if (env && !strcmp(env, "off"))
        return NULL;
    slim_node *a = slim_rewrite_sole_reader(&p->rw, out, "Add");
    if (!a || a->n_in != 2 || a->n_out != 1)
        return NULL;
    int s = a->in[0] == out ? a->in[1] : a->in[0];
    if (s < 0 || s == out)
        return NULL;
    const slim_node *src = producer_of(p, s);
    static const char *const whole[] = {"Conv", "ConvInt8", "Relu", "MaxPool", "Add", "Clip",
                                        "BatchNormalization"};
    for (size_t i = 0; src && i < sizeof(whole) / sizeof(whole[0]); i++)
        if (!strcmp(src->op_type, whole[i]) && src->n_out == 1) {
            *skip = s;
            return a;
        }
    return NULL;
}

/* The Clip that alone reads out, when its bounds are constants (inputs
 * min and max from opset 11, attributes before): MobileNet's ReLU6, fused
 * into the conv like a Relu. */
static slim_node *clip_reader(const slim__int8_pass *p, int out, conv_act *act)
{
    slim_node *n = slim_rewrite_sole_reader(&p->rw, out, "Clip");
    if (!n || n->n_out != 1)
        return NULL;
    float b[2] = {slim_attr_float(n, "min", -INFINITY), slim_attr_float(n, "max", INFINITY)};
    for (int i = 0; i < 2; i++) {
        if (n->n_in <= i + 1 || n->in[i + 1] < 0)
            continue;
        const slim_tensor *t = slim_pass_const_f32(p->rw.g, n->in[i + 1]);
        if (!t || slim_tensor_numel(t) != 1)
            return NULL;
        b[i] = ((const float *)t->data)[0];
    }
    if (!(b[0] <= b[1])) /* Clip's own message is the better one */
        return NULL;
    act->clip = true;
    act->lo = b[0];
    act->hi = b[1];
    return n;
}

/* The depthwise layout: taps x C, tap-major (wq is [C][taps]), and each
 * channel's sum as colsum. */
static void pack_depthwise(const int8_t *wq, int64_t m, int64_t taps, int8_t *packed,
                           int32_t *colsum)
{
    for (int64_t j = 0; j < m; j++) {
        int32_t sum = 0;
        for (int64_t t = 0; t < taps; t++) {
            packed[t * m + j] = wq[j * taps + t];
            sum += wq[j * taps + t];
        }
        colsum[j] = sum;
    }
}

slim_status slim__int8_quantize_conv(slim__int8_pass *p, int id, slim_int8_layer *layer,
                                     slim_err *err)
{
    slim_graph *g = p->rw.g;
    conv_layer c;
    if ((layer->why = conv_of(p, &g->nodes[id], &c)))
        return SLIM_OK;
    int64_t kg = c.cg * c.kh * c.kw, mg = c.m / c.groups, taps = c.kh * c.kw;
    size_t packed_g = slim_qgemm_packed_bytes(mg, kg);
    slim_tensor packed = {0}, scale = {0}, colsum = {0}, bias = {0};
    float *wr = malloc(sizeof(float) * (size_t)(c.m * kg));
    int8_t *wq = malloc((size_t)(c.m * kg));
    slim_status st = SLIM_OK;
    if (!wr || !wq)
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (!st && c.dw)
        st = slim_rewrite_alloc_tensor(&packed, SLIM_I8, 2, taps, c.m, err);
    else if (!st)
        st = slim_rewrite_alloc_tensor(&packed, SLIM_I8, 2, c.groups * slim_qgemm_n16(mg),
                                       slim_qgemm_k4(kg), err);
    if (!st)
        st = slim_rewrite_alloc_tensor(&scale, SLIM_F32, 1, c.m, 0, err);
    if (!st)
        st = slim_rewrite_alloc_tensor(&colsum, SLIM_I32, 1, c.m, 0, err);
    if (!st && c.bias >= 0 &&
        !(st = slim_rewrite_alloc_tensor(&bias, SLIM_F32, 1, c.m, 0, err))) {
        memcpy(bias.data, g->values[c.bias].init.data, sizeof(float) * (size_t)c.m);
        layer->bytes_before += slim_tensor_nbytes(&g->values[c.bias].init);
    }
    if (st)
        goto done;
    const float *w = g->values[g->nodes[id].in[1]].init.data;
    for (int64_t j = 0; j < c.m; j++)
        for (int64_t ci = 0; ci < c.cg; ci++)
            for (int64_t t = 0; t < taps; t++)
                wr[j * kg + t * c.cg + ci] = w[(j * c.cg + ci) * taps + t];
    double e2 = 0, w2 = 0;
    for (int64_t j = 0; j < c.m; j++)
        ((float *)scale.data)[j] =
            slim__int8_quantize_channel(wr + j * kg, kg, 1, NULL, wq + j * kg, &e2, &w2);
    layer->weight_error = w2 > 0 ? sqrt(e2 / w2) : 0;
    if (c.dw)
        pack_depthwise(wq, c.m, taps, packed.data, colsum.data);
    for (int64_t gi = 0; gi < c.groups && !c.dw; gi++)
        slim_qgemm_pack(wq + gi * mg * kg, mg, kg, (int8_t *)packed.data + gi * packed_g,
                        (int32_t *)colsum.data + gi * mg);

    int out = g->nodes[id].out[0], skip = -1;
    conv_act act = {0};
    slim_node *r = slim_rewrite_sole_reader(&p->rw, out, "Relu");
    r = r ? r : clip_reader(p, out, &act);
    slim_node *add = r ? NULL : residual_add(p, out, &skip);
    if (add)
        r = slim_rewrite_sole_reader(&p->rw, add->out[0], "Relu");
    act.relu = r && !act.clip;
    if (add && !bias.data) { /* R is input 5: a zero bias holds slot 4 */
        if ((st = slim_rewrite_alloc_tensor(&bias, SLIM_F32, 1, c.m, 0, err)))
            goto done;
        memset(bias.data, 0, sizeof(float) * (size_t)c.m);
    }
    /* The error is the conv's own: a Relu after a residual is not its. */
    slim_qconv_weights w8 = {packed.data, colsum.data, scale.data, bias.data,
                             act.relu && !add ? SLIM_QGEMM_ACT_RELU : SLIM_QGEMM_ACT_NONE, NULL,
                             NULL, act.clip, act.lo, act.hi};
    layer->error = measure_conv(p, &g->nodes[id], &c, wr, &w8);
    if (slim__int8_over_budget(p, layer->error)) {
        layer->why = "over max_error";
        goto done; /* st is SLIM_OK: the layer stays float32 */
    }
    slim_attr *attrs = NULL;
    int na = 0;
    if ((st = conv_attrs(&c, &act, &attrs, &na, err)))
        goto done;
    layer->bytes_after = slim_tensor_nbytes(&packed) + slim_tensor_nbytes(&scale) +
                         slim_tensor_nbytes(&colsum) + slim_tensor_nbytes(&bias);
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int in[6] = {g->nodes[id].in[0], -1, -1, -1, -1, skip};
    bool has_bias = bias.data != NULL;
    if ((in[1] = slim_graph_add_initializer(g, base, ".int8_weight", &packed, err)) < 0 ||
        (in[2] = slim_graph_add_initializer(g, base, ".int8_scale", &scale, err)) < 0 ||
        (in[3] = slim_graph_add_initializer(g, base, ".int8_colsum", &colsum, err)) < 0 ||
        (has_bias && (in[4] = slim_graph_add_initializer(g, base, ".int8_bias", &bias, err)) < 0)) {
        for (int i = 0; i < na; i++)
            slim_attr_clear(&attrs[i]);
        free(attrs);
        st = SLIM_ENOMEM;
        goto done;
    }
    if (add) {
        p->rw.dead[add - g->nodes] = true;
        out = add->out[0];
    }
    if (r) {
        p->rw.dead[r - g->nodes] = true;
        out = r->out[0];
    }
    st = slim_rewrite_node(&g->nodes[id], "ConvInt8", add ? 6 : has_bias ? 5 : 4, in, out, attrs,
                           na, p->rw.what, err);
    if (!st)
        st = hand_over_nhwc(p, in[0], err);
    if (!st && add)
        st = hand_over_nhwc(p, skip, err);
    if (!st) /* its readers may all be ConvInt8 already */
        st = hand_over_nhwc(p, out, err);
done:
    free(wr);
    free(wq);
    slim_tensor_release(&packed);
    slim_tensor_release(&scale);
    slim_tensor_release(&colsum);
    slim_tensor_release(&bias);
    return st;
}
