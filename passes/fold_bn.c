/*
 * fold_bn.c - Conv followed by BatchNormalization becomes one Conv.
 *
 * In inference BatchNormalization is a per-channel affine map,
 *   y = (x - mean) * s + beta,  s = scale / sqrt(var + eps),
 * so it folds into the conv before it: W'[m] = W[m] * s[m] and
 * B'[m] = (B[m] - mean[m]) * s[m] + beta[m]. That removes a full pass over
 * the activation per conv, and leaves the Conv's only reader free for
 * fuse_conv to fold further. The products are computed in double and
 * rounded once, so the folded weights are as close to the exact map as
 * float32 allows (outputs still differ from the unfolded graph by
 * rounding: the BN used to round separately).
 *
 * Applies when the Conv's output is read only by the BN, every parameter
 * is a float32 initializer of [M] elements, and the BN runs in inference
 * mode (training_mode absent or 0, one output).
 */
#include "pass.h"

#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool per_channel(const slim_tensor *t, int64_t m)
{
    return t && slim_tensor_numel(t) == m && (t->ndim == 1 || t->ndim == 0);
}

static slim_status fold_one(slim_graph *g, slim_node *conv, slim_node *bn, slim_err *err)
{
    const slim_tensor *w = slim_pass_const_f32(g, conv->in[1]);
    int64_t m = w->dims[0], per = slim_tensor_numel(w) / (m ? m : 1);
    const slim_tensor *b = conv->n_in > 2 ? slim_pass_const_f32(g, conv->in[2]) : NULL;
    const float *scale = g->values[bn->in[1]].init.data, *beta = g->values[bn->in[2]].init.data;
    const float *mean = g->values[bn->in[3]].init.data, *var = g->values[bn->in[4]].init.data;
    double eps = slim_attr_float(bn, "epsilon", 1e-5f);
    slim_tensor nw = {0}, nb = {0};
    slim_tensor_set_like(&nw, w);
    slim_tensor_set_shape(&nb, SLIM_F32, 1, &m);
    slim_status st;
    if ((st = slim_tensor_alloc(&nw, err)) || (st = slim_tensor_alloc(&nb, err))) {
        slim_tensor_release(&nw);
        return st;
    }
    const float *wd = w->data;
    float *ow = nw.data, *ob = nb.data;
    for (int64_t c = 0; c < m; c++) {
        double s = (double)scale[c] / sqrt((double)var[c] + eps);
        for (int64_t i = 0; i < per; i++)
            ow[c * per + i] = (float)((double)wd[c * per + i] * s);
        double bias = b ? ((const float *)b->data)[c] : 0.0;
        ob[c] = (float)((bias - mean[c]) * s + beta[c]);
    }
    int wv = slim_graph_add_initializer(g, g->values[conv->in[1]].name, "_bnfold", &nw, err);
    if (wv < 0) {
        slim_tensor_release(&nb);
        return SLIM_ENOMEM;
    }
    int bv = slim_graph_add_initializer(g, g->values[conv->in[1]].name, "_bnbias", &nb, err);
    if (bv < 0)
        return SLIM_ENOMEM;
    int old_w = conv->in[1], old_b = conv->n_in > 2 ? conv->in[2] : -1;
    if (conv->n_in < 3) {
        int *in = realloc(conv->in, sizeof(int) * 3);
        if (!in)
            return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
        conv->in = in;
        conv->n_in = 3;
    }
    conv->in[1] = wv;
    conv->in[2] = bv;
    conv->out[0] = bn->out[0];
    /* Release the unfolded weights now rather than at the sweep: a model
     * being folded would otherwise hold every conv's weights twice (a
     * ResNet-18 peaked at 1.8x its weights under --memory-limit). */
    slim_pass_drop_replaced(g, old_w, conv);
    if (old_b >= 0)
        slim_pass_drop_replaced(g, old_b, conv);
    return SLIM_OK;
}

static slim_status fold_bn_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    bool *dead = w.dead;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *conv = &g->nodes[i];
        if (conv->domain[0] || strcmp(conv->op_type, "Conv") != 0 || conv->n_in < 2 ||
            conv->n_out != 1 || conv->out[0] < 0)
            continue;
        const slim_tensor *w = slim_pass_const_f32(g, conv->in[1]);
        if (!w || w->ndim < 3)
            continue;
        int64_t m = w->dims[0];
        if (conv->n_in > 2 && conv->in[2] >= 0 && !per_channel(slim_pass_const_f32(g, conv->in[2]), m))
            continue;
        slim_node *bn = slim_pass_sole_reader(g, u, conv->out[0], "BatchNormalization");
        if (!bn || bn->n_in != 5 || bn->n_out != 1 || bn->in[0] != conv->out[0] ||
            slim_attr_int(bn, "training_mode", 0) != 0)
            continue;
        bool params = true;
        for (int k = 1; k < 5; k++)
            params = params && per_channel(slim_pass_const_f32(g, bn->in[k]), m);
        if (!params)
            continue;
        if (conv->n_in > 2 && conv->in[2] < 0)
            conv->n_in = 2;
        if ((st = fold_one(g, conv, bn, err)))
            break;
        dead[bn - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_fold_bn = {"fold_bn", fold_bn_run};
