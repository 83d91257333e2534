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
 * The value keeps its logical [N, C, H, W] shape and, as C must be a
 * multiple of 16 for this (other counts pad their last block), its byte size, so the planner and the
 * executor treat it as before; only FusedConv ever sees its data.
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

/* Whether every reader of v is a FusedConv that can read it blocked. */
static bool readers_take_blocked(const slim_graph *g, int v)
{
    int readers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] != v)
                continue;
            readers++;
            if (!is_fconv(n) || (k != 0 && k != 3))
                return false;
            if (k == 0 && slim_attr_int(n, "weights_format", -1) == SLIM_FCONV_W_PLAIN_SRC)
                return false;
        }
    }
    return readers > 0;
}

static slim_status blocked_layout_run(slim_graph *g, int *changed, slim_err *err)
{
    for (int i = 0; i < g->n_nodes; i++) {
        slim_node *n = &g->nodes[i];
        int v = n->n_out == 1 ? n->out[0] : -1;
        /* nChw16c has NCHW's size only when C is a multiple of 16; other
         * counts are padded, which the planner does not know. */
        if (!is_fconv(n) || v < 0 || g->values[v].is_output ||
            slim_attr_int(n, "out_channels", 0) % 16 || !readers_take_blocked(g, v))
            continue;
        slim_status st = slim_pass_set_int(n, "out_blocked", 1, err);
        for (int r = 0; r < g->n_nodes && !st; r++) {
            slim_node *m = &g->nodes[r];
            if (!is_fconv(m))
                continue;
            if (m->in[0] == v)
                st = slim_pass_set_int(m, "in_blocked", 1, err);
            if (!st && m->n_in > 3 && m->in[3] == v)
                st = slim_pass_set_int(m, "res_blocked", 1, err);
        }
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
