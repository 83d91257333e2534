/*
 * blocked_layout.c - FusedConv chains keep their activations in nChw16c.
 *
 * A FusedConv reads and writes NCHW and reorders to oneDNN's blocked
 * nChw16c on each side (kernels/cpu/conv_dnnl.c). Between two FusedConvs
 * those two reorders undo each other: a full pass over the activation each.
 * This pass marks a FusedConv's output blocked when every reader of it is a
 * FusedConv that can take it so (as the input of a conv that reads blocked
 * input, or as the residual) and it is no graph output; the producer then
 * writes nChw16c and the readers skip their reorders.
 *
 * A MaxPool between such convs (ResNet's stem) goes blocked too, as
 * MaxPoolBlocked (kernels/cpu/pool_blocked.c), when its readers take it.
 *
 * The value keeps its logical [N, C, H, W] shape and, when C is a multiple
 * of 16, its byte size, so the planner and the executor treat it as
 * before; only FusedConv (and MaxPoolBlocked) ever sees its data. Other
 * counts (MobileNetV2's 24 channels) pad their last block with zeros; such
 * a value's shape says the padded count (FusedConv's infer), and only
 * convs with group 1 may read it, whose packed W has zeros for the padded
 * input channels, so the padding adds nothing.
 */
#include "pass.h"

#ifdef SLIM_HAVE_DNNL
#include "conv_dnnl.h"

#include <stdlib.h>
#include <string.h>

static bool is_fconv(const slim_node *n)
{
    return strcmp(n->domain, "com.slimserve") == 0 && strcmp(n->op_type, "FusedConv") == 0;
}

/* A MaxPool that MaxPoolBlocked (kernels/cpu/pool_blocked.c) can run: 2-D,
 * one output, explicit padding, floor mode, row-major indices unused. */
static bool pool_can_block(const slim_graph *g, const slim_node *n)
{
    if (n->domain[0] || strcmp(n->op_type, "MaxPool") != 0 || n->n_in != 1 ||
        (n->n_out > 1 && n->out[1] >= 0) || n->out[0] < 0 || g->values[n->out[0]].is_output)
        return false;
    const char *pad = slim_attr_str(n, "auto_pad", "NOTSET");
    int64_t k[2], v[4];
    if ((pad[0] && strcmp(pad, "NOTSET") != 0) || slim_attr_int(n, "ceil_mode", 0) != 0 ||
        slim_attr_int(n, "storage_order", 0) != 0 || slim_attr_ints(n, "kernel_shape", k, 2) != 2)
        return false;
    return (!slim_node_attr(n, "strides") || slim_attr_ints(n, "strides", v, 2) == 2) &&
           (!slim_node_attr(n, "dilations") || slim_attr_ints(n, "dilations", v, 2) == 2) &&
           (!slim_node_attr(n, "pads") || slim_attr_ints(n, "pads", v, 4) == 4);
}

/* Whether every reader of v can read it blocked: a FusedConv as its input
 * (unless it reads NCHW itself) or residual, or a MaxPool that can run
 * blocked and whose own readers can (depth bounds that search). A padded
 * v (channels not a multiple of 16) goes only to convs with group 1, whose
 * packed W pads its input channels the same way. */
static bool readers_take_blocked(const slim_graph *g, int v, bool padded, int depth)
{
    int readers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] != v)
                continue;
            readers++;
            if (depth < 4 && pool_can_block(g, n) &&
                readers_take_blocked(g, n->out[0], padded, depth + 1))
                continue;
            if (!is_fconv(n) || (k != 0 && k != 3))
                return false;
            int wfmt = (int)slim_attr_int(n, "weights_format", -1);
            if (k == 0 && (wfmt == SLIM_FCONV_W_PLAIN_SRC ||
                           (padded && (wfmt != SLIM_FCONV_W_BLOCKED ||
                                       slim_attr_int(n, "group", 1) != 1))))
                return false;
        }
    }
    return readers > 0;
}

/* MaxPool n becomes MaxPoolBlocked with its geometry explicit. */
static slim_status block_pool(slim_node *n, slim_err *err)
{
    int64_t k[2], s[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
    slim_attr_ints(n, "kernel_shape", k, 2);
    if (slim_node_attr(n, "strides"))
        slim_attr_ints(n, "strides", s, 2);
    if (slim_node_attr(n, "dilations"))
        slim_attr_ints(n, "dilations", d, 2);
    if (slim_node_attr(n, "pads"))
        slim_attr_ints(n, "pads", p, 4);
    char *ot = strdup("MaxPoolBlocked"), *dom = strdup("com.slimserve");
    if (!ot || !dom) {
        free(ot);
        free(dom);
        return slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
    }
    free(n->op_type);
    free(n->domain);
    n->op_type = ot;
    n->domain = dom;
    n->opset = 1;
    if (n->n_out > 1)
        n->n_out = 1; /* the absent Indices */
    /* auto_pad, ceil_mode, storage_order: their defaults, said by the rest */
    for (int a = 0; a < n->n_attrs;) {
        const char *nm = n->attrs[a].name;
        if (strcmp(nm, "auto_pad") == 0 || strcmp(nm, "ceil_mode") == 0 ||
            strcmp(nm, "storage_order") == 0) {
            slim_attr_clear(&n->attrs[a]);
            n->attrs[a] = n->attrs[--n->n_attrs];
        } else {
            a++;
        }
    }
    slim_status st;
    if ((st = slim_pass_set_ints(n, "kernel_shape", k, 2, err)) ||
        (st = slim_pass_set_ints(n, "strides", s, 2, err)) ||
        (st = slim_pass_set_ints(n, "dilations", d, 2, err)) ||
        (st = slim_pass_set_ints(n, "pads", p, 4, err)))
        return st;
    return SLIM_OK;
}

/* The readers of v (which readers_take_blocked accepted) read it blocked. */
static slim_status mark_readers(slim_graph *g, int v, slim_err *err)
{
    slim_status st = SLIM_OK;
    for (int r = 0; r < g->n_nodes && !st; r++) {
        slim_node *m = &g->nodes[r];
        if (m->n_in < 1)
            continue;
        if (pool_can_block(g, m) && m->in[0] == v) {
            if (!(st = block_pool(m, err)))
                st = mark_readers(g, m->out[0], err);
            continue;
        }
        if (!is_fconv(m))
            continue;
        if (m->in[0] == v)
            st = slim_pass_set_int(m, "in_blocked", 1, err);
        if (!st && m->n_in > 3 && m->in[3] == v)
            st = slim_pass_set_int(m, "res_blocked", 1, err);
    }
    return st;
}

static slim_status blocked_layout_run(slim_graph *g, int *changed, slim_err *err)
{
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        int v = n->n_out == 1 ? n->out[0] : -1;
        /* Other channel counts than multiples of 16 are padded in nChw16c
         * (MobileNetV2's 24): the value's shape then says the padded count
         * (conv_dnnl.c), so the planner sizes it right. */
        if (!is_fconv(n) || v < 0 || g->values[v].is_output ||
            slim_attr_int(n, "out_blocked", 0) ||
            !readers_take_blocked(g, v, slim_attr_int(n, "out_channels", 0) % 16 != 0, 0))
            continue;
        slim_status st = slim_pass_set_int(n, "out_blocked", 1, err);
        if (!st)
            st = mark_readers(g, v, err);
        if (st)
            return st;
        (*changed)++;
    }
    return SLIM_OK;
}

#else

static slim_status blocked_layout_run(slim_graph *g, int *changed, slim_err *err)
{
    (void)g;
    (void)changed;
    (void)err;
    return SLIM_OK;
}

#endif

const slim_pass slim__pass_blocked_layout = {"blocked_layout", blocked_layout_run};
