/*
 * fuse_conv.c - Conv [+ residual Add] [+ Relu | Clip] becomes one FusedConv
 * (kernels/cpu/conv_dnnl.c) with its weights packed once, here, into the
 * layout the kernel reads.
 *
 * The packed copy replaces the original weight, which is released when
 * nothing else reads it, so weight memory does not grow. Fusing the Add
 * and the activation into the conv's output stage saves a read and a write
 * of the activation per fused node.
 *
 * A residual Add is fused only when its other operand comes from a node
 * that keeps the shape of a conv output (another conv, an activation, an
 * Add, a pool): Add broadcasts, FusedConv's residual does not, and shapes
 * are not known before the first run. The Add must be the conv output's
 * only reader, and the Relu / Clip the Add's (or the conv's).
 *
 * A 1x1 conv feeding only a depthwise 3x3 (MobileNetV2) then takes it in
 * as well (merge_depthwise; SLIM_CONV_MERGE_DW, dw_merge_wanted).
 *
 * Only 2-D convs with float32 weights, explicit padding and channel counts
 * the packed layouts take (slim_fconv_weights_format) are rewritten; the
 * rest keep the im2col kernel. Without oneDNN the pass does nothing.
 */
#include "pass.h"

#ifdef SLIM_HAVE_DNNL
#include "conv_dnnl.h"

#include <stdlib.h>
#include <string.h>

static bool keeps_shape(const slim_graph *g, const slim_pass_uses *u, int v)
{
    static const char *const ok[] = {"Conv", "FusedConv", "Relu", "Clip", "Add",
                                     "BatchNormalization", "MaxPool", NULL};
    if (v < 0 || v >= u->n_values || u->producer[v] < 0)
        return false;
    const slim_node *p = &g->nodes[u->producer[v]];
    for (int i = 0; ok[i]; i++)
        if (strcmp(p->op_type, ok[i]) == 0)
            return true;
    return false;
}

/* The conv's geometry, all explicit; false when FusedConv cannot take it. */
static bool geometry(const slim_node *conv, int64_t *k, int64_t *s, int64_t *d, int64_t *p)
{
    const char *pad = slim_attr_str(conv, "auto_pad", "NOTSET");
    if (pad[0] && strcmp(pad, "NOTSET") != 0 && strcmp(pad, "VALID") != 0)
        return false;
    s[0] = s[1] = d[0] = d[1] = 1;
    p[0] = p[1] = p[2] = p[3] = 0;
    if (slim_node_attr(conv, "strides") && slim_attr_ints(conv, "strides", s, 2) != 2)
        return false;
    if (slim_node_attr(conv, "dilations") && slim_attr_ints(conv, "dilations", d, 2) != 2)
        return false;
    if (slim_node_attr(conv, "pads") && strcmp(pad, "VALID") != 0 &&
        slim_attr_ints(conv, "pads", p, 4) != 4)
        return false;
    if (slim_node_attr(conv, "kernel_shape") && slim_attr_ints(conv, "kernel_shape", k, 2) != 2)
        return false;
    for (int i = 0; i < 2; i++)
        if (s[i] < 1 || d[i] < 1 || p[i] < 0 || p[i + 2] < 0)
            return false;
    return true;
}

/* Whether FusedConv can take this Conv: its packed layout and geometry
 * (each out pointer may be NULL). */
static bool eligible(const slim_graph *g, const slim_node *conv, int *wfmt_out, int64_t *k,
                     int64_t *s, int64_t *d, int64_t *p)
{
    if (conv->domain[0] || strcmp(conv->op_type, "Conv") != 0 || conv->n_in < 2 ||
        conv->n_out != 1 || conv->out[0] < 0)
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, conv->in[1]);
    if (!w || w->ndim != 4)
        return false;
    int64_t group = slim_attr_int(conv, "group", 1);
    int wfmt = slim_fconv_weights_format(w->dims[1] * group, w->dims[0], group);
    if (wfmt < 0)
        return false;
    if (conv->n_in > 2 && conv->in[2] >= 0) {
        const slim_tensor *b = slim_pass_const_f32(g, conv->in[2]);
        if (!b || b->ndim != 1 || b->dims[0] != w->dims[0])
            return false;
    }
    int64_t k2[2], s2[2], d2[2], p2[4];
    if (!geometry(conv, k ? k : k2, s ? s : s2, d ? d : d2, p ? p : p2))
        return false;
    if (wfmt_out)
        *wfmt_out = wfmt;
    return true;
}

/* Rewrites conv into FusedConv(X, packed W, B[, R]) writing out. */
static slim_status rewrite(slim_graph *g, slim_node *conv, int wfmt, int res, int out, int act,
                           float lo, float hi, const int64_t *k, const int64_t *s,
                           const int64_t *d, const int64_t *p, slim_err *err)
{
    const slim_tensor *w = slim_pass_const_f32(g, conv->in[1]);
    int64_t group = slim_attr_int(conv, "group", 1), m = w->dims[0];
    slim_tensor packed, bias = {0};
    slim_status st = slim_fconv_pack(w, group, wfmt, &packed, err);
    if (st)
        return st;
    int wv = slim_graph_add_initializer(g, g->values[conv->in[1]].name, "_packed", &packed, err);
    if (wv < 0)
        return SLIM_ENOMEM;
    slim_pass_drop_replaced(g, conv->in[1], conv);
    int bv = conv->n_in > 2 ? conv->in[2] : -1;
    if (bv < 0) {
        slim_tensor_set_shape(&bias, SLIM_F32, 1, &m);
        if ((st = slim_tensor_alloc(&bias, err)))
            return st;
        memset(bias.data, 0, sizeof(float) * (size_t)m);
        if ((bv = slim_graph_add_initializer(g, g->values[conv->in[1]].name, "_zero_bias", &bias,
                                            err)) < 0)
            return SLIM_ENOMEM;
    }
    int n_in = res >= 0 ? 4 : 3;
    int *in = malloc(sizeof(int) * 4);
    char *ot = strdup("FusedConv"), *dom = strdup("com.slimserve");
    if (!in || !ot || !dom) {
        free(in);
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    in[0] = conv->in[0];
    in[1] = wv;
    in[2] = bv;
    in[3] = res;
    free(conv->in);
    free(conv->op_type);
    free(conv->domain);
    conv->in = in;
    conv->n_in = n_in;
    conv->op_type = ot;
    conv->domain = dom;
    conv->opset = 1;
    conv->out[0] = out;
    int64_t kernel[2] = {w->dims[2], w->dims[3]};
    (void)k;
    if ((st = slim_pass_set_ints(conv, "kernel_shape", kernel, 2, err)) ||
        (st = slim_pass_set_ints(conv, "strides", s, 2, err)) ||
        (st = slim_pass_set_ints(conv, "dilations", d, 2, err)) ||
        (st = slim_pass_set_ints(conv, "pads", p, 4, err)) ||
        (st = slim_pass_set_int(conv, "group", group, err)) ||
        (st = slim_pass_set_int(conv, "activation", act, err)) ||
        (st = slim_pass_set_float(conv, "alpha", lo, err)) ||
        (st = slim_pass_set_float(conv, "beta", hi, err)) ||
        (st = slim_pass_set_int(conv, "weights_format", wfmt, err)) ||
        (st = slim_pass_set_int(conv, "out_channels", m, err)))
        return st;
    /* auto_pad VALID means no padding, which pads now says. */
    for (int a = 0; a < conv->n_attrs; a++)
        if (strcmp(conv->attrs[a].name, "auto_pad") == 0) {
            slim_attr_clear(&conv->attrs[a]);
            conv->attrs[a] = conv->attrs[--conv->n_attrs];
            break;
        }
    return SLIM_OK;
}

static bool is_fconv(const slim_node *n)
{
    return strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "FusedConv") == 0;
}

/* The FusedConv's geometry attribute, all of whose count entries equal v. */
static bool ints_all(const slim_node *n, const char *name, int count, int64_t v)
{
    int64_t a[4];
    if (slim_attr_ints(n, name, a, count) != count)
        return false;
    for (int i = 0; i < count; i++)
        if (a[i] != v)
            return false;
    return true;
}

/* Whether to merge a 1x1 c->m with its depthwise conv of this stride.
 * Without a jit kernel for the pair (slim_fconv_dw_post_op_is_jit: none
 * with oneDNN 2.6 on AVX-512), oneDNN runs its reference fusion, which
 * on 2 threads scaled only 1.15x on MobileNetV2's first expand (16 -> 96
 * channels at 112x112, the largest plane) and well on the others, where
 * the merged node beat two FusedConvs (one wake of the pool; each part's
 * expanded slice stays in its scratchpad instead of a whole image, or a
 * whole batch, going out to memory). SLIM_CONV_MERGE_DW (read when the
 * pass runs): 1 or unset merges every pair; 0 none; 2 keeps apart the
 * 1x1s of 16 input channels (the packed W's, rounded up to a block) that
 * have no jit kernel. On a machine at load 5-9 (docs/benchmarks.md,
 * cpu_models_2026-11-28_mbv3) 0 lost 5-7% at batch 1, and 2 against 1
 * read 0.97-1.01 at batch 1, 0.91-1.09 at batch 8: no sure win, so the
 * default stays every pair until a quiet machine says otherwise. */
static bool dw_merge_wanted(const slim_graph *g, const slim_node *a, int64_t stride)
{
    const char *env = getenv("SLIM_CONV_MERGE_DW"); /* merge_depthwise checked it */
    if (!env || !env[0] || strcmp(env, "1") == 0)
        return true;
    if (strcmp(env, "2") != 0)
        return false;
    const slim_tensor *w = slim_pass_const_f32(g, a->in[1]);
    int64_t m = slim_attr_int(a, "out_channels", 0);
    if (!w || w->ndim != 4 || m <= 0)
        return true;
    return w->dims[1] > 16 || slim_fconv_dw_post_op_is_jit(w->dims[1], m, (int)stride);
}

/* A 1x1 FusedConv whose only reader is a depthwise 3x3 FusedConv (pad 1,
 * stride 1 or 2: MobileNetV2's expand and depthwise pair) takes the
 * depthwise conv in, as oneDNN's depthwise post-op: one node, so one wake
 * of the pool instead of two and no round trip of the expanded activation
 * (the model's largest) through memory. The 1x1 gains inputs 4 and 5 (the
 * depthwise W, packed, and B) and dw_stride, dw_activation, dw_alpha,
 * dw_beta; neither conv may have a residual. */
static slim_status merge_depthwise(slim_graph *g, int *changed, slim_err *err)
{
    const char *mode = getenv("SLIM_CONV_MERGE_DW");
    if (mode && mode[0] && strcmp(mode, "0") && strcmp(mode, "1") && strcmp(mode, "2"))
        return slim_errf(err, SLIM_EINVAL, "SLIM_CONV_MERGE_DW=%s: want 0, 1 or 2", mode);
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *a = &g->nodes[i];
        if (w.dead[i] || !is_fconv(a) || a->n_in != 3 || a->n_out != 1 ||
            slim_attr_int(a, "weights_format", -1) != SLIM_FCONV_W_BLOCKED ||
            slim_attr_int(a, "group", 1) != 1 || !ints_all(a, "kernel_shape", 2, 1) ||
            !ints_all(a, "strides", 2, 1) || !ints_all(a, "pads", 4, 0) ||
            !ints_all(a, "dilations", 2, 1))
            continue;
        int v = a->out[0];
        if (v < 0 || u->readers[v] != 1 || g->values[v].is_output)
            continue;
        slim_node *b = &g->nodes[u->reader[v]];
        int64_t stride[2];
        if (w.dead[b - g->nodes] || !is_fconv(b) || b->n_in != 3 || b->in[0] != v ||
            slim_attr_int(b, "weights_format", -1) != SLIM_FCONV_W_DEPTHWISE ||
            !ints_all(b, "kernel_shape", 2, 3) || !ints_all(b, "pads", 4, 1) ||
            !ints_all(b, "dilations", 2, 1) || slim_attr_ints(b, "strides", stride, 2) != 2 ||
            stride[0] != stride[1] || (stride[0] != 1 && stride[0] != 2) ||
            !dw_merge_wanted(g, a, stride[0]))
            continue;
        int *in = realloc(a->in, sizeof(int) * 6);
        if (!in) {
            st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
            break;
        }
        a->in = in;
        in[3] = -1;
        in[4] = b->in[1];
        in[5] = b->in[2];
        a->n_in = 6;
        a->out[0] = b->out[0];
        if ((st = slim_pass_set_int(a, "dw_stride", stride[0], err)) ||
            (st = slim_pass_set_int(a, "dw_activation", slim_attr_int(b, "activation", 0),
                                    err)) ||
            (st = slim_pass_set_float(a, "dw_alpha", slim_attr_float(b, "alpha", 0), err)) ||
            (st = slim_pass_set_float(a, "dw_beta", slim_attr_float(b, "beta", 0), err)))
            break;
        w.dead[b - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

static slim_status fuse_conv_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    bool *dead = w.dead;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *conv = &g->nodes[i];
        if (dead[i])
            continue;
        int wfmt;
        int64_t k[2], s[2], d[2], p[4];
        if (!eligible(g, conv, &wfmt, k, s, d, p))
            continue;
        int out = conv->out[0], res = -1, act = 0;
        float lo = 0, hi = 0;
        slim_node *add = slim_pass_sole_reader(g, u, out, "Add");
        if (add && !dead[add - g->nodes] && add->n_in == 2 && add->n_out == 1) {
            int other = add->in[0] == out ? add->in[1] : add->in[0];
            /* When both operands are eligible convs, the one in slot 0
             * takes the Add, whatever order the nodes come in: a .slim
             * file stores them sorted, and the answer must not change. */
            int po = other >= 0 && other < u->n_values ? u->producer[other] : -1;
            bool other_takes = add->in[1] == out && po >= 0 && !dead[po] &&
                               !g->nodes[po].domain[0] &&
                               strcmp(g->nodes[po].op_type, "Conv") == 0 &&
                               u->readers[other] == 1 && eligible(g, &g->nodes[po], NULL, NULL,
                                                                 NULL, NULL, NULL);
            if (other != out && !other_takes && keeps_shape(g, u, other)) {
                res = other;
                out = add->out[0];
                dead[add - g->nodes] = true;
            }
        }
        slim_node *relu = slim_pass_sole_reader(g, u, out, "Relu");
        slim_node *clip = relu ? NULL : slim_pass_sole_reader(g, u, out, "Clip");
        if (relu && relu->n_out == 1) {
            act = 1;
            out = relu->out[0];
            dead[relu - g->nodes] = true;
        } else if (clip && clip->n_out == 1 && slim_pass_clip_bounds(g, clip, &lo, &hi)) {
            act = 2;
            out = clip->out[0];
            dead[clip - g->nodes] = true;
        }
        if ((st = rewrite(g, conv, wfmt, res, out, act, lo, hi, k, s, d, p, err)))
            break;
        (*changed)++;
    }
    st = slim_pass_walk_finish(&w, g, st);
    return st ? st : merge_depthwise(g, changed, err);
}

#else

static slim_status fuse_conv_run(slim_graph *g, int *changed, slim_err *err)
{
    (void)g;
    (void)changed;
    (void)err;
    return SLIM_OK;
}

#endif

const slim_pass slim__pass_fuse_conv = {"fuse_conv", fuse_conv_run};
