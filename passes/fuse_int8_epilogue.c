/*
 * fuse_int8_epilogue.c - a Gelu (ONNX opset 20, approximate "none") or a
 * Relu that is the only reader of a MatMulInt8's or a MatMulHalf's output
 * becomes that node's activation, computed in the product's epilogue
 * (kernels/cpu/qgemm.c, hgemm.c) while the outputs are still in registers: a
 * BERT-base encoder's ffn_in output is 128 x 3072 floats per sequence,
 * which the separate Gelu read and wrote back once more.
 *
 * The int8 pass (quant/int8.c) already fuses a Relu that directly follows
 * the product (or its bias Add); this pass sees the graph after the other
 * graph passes, where fuse_gelu has turned an exported GELU (x * 0.5 *
 * (1 + erf(x / sqrt 2))) into one Gelu node. So it must stay after
 * fuse_gelu in slim_passes. The epilogue's Gelu is kernels/cpu/gelu_poly.h's,
 * a table of polynomials (within 1e-7 x max(|y|, 1) of the exact Gelu): the float
 * Gelu op's result to within its own rounding, not bitwise.
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

/* The activation a sole reader of v can become, and that reader; NULL when
 * none. */
static slim_node *fusable_reader(slim_graph *g, const slim_pass_uses *u, const bool *dead, int v,
                                 const char **act)
{
    slim_node *r = slim_pass_sole_reader(g, u, v, "Gelu");
    if (r && strcmp(slim_attr_str(r, "approximate", "none"), "none") == 0)
        *act = "Gelu";
    else if ((r = slim_pass_sole_reader(g, u, v, "Relu")))
        *act = "Relu";
    if (!r || dead[r - g->nodes] || r->n_in < 1 || r->in[0] != v || r->n_out != 1 ||
        r->out[0] < 0)
        return NULL;
    return r;
}

static slim_status fuse_int8_epilogue_run(slim_graph *g, int *changed, slim_err *err)
{
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *mm = &g->nodes[i];
        if (w.dead[i] || strcmp(mm->domain, "com.slimserve") != 0 ||
            (strcmp(mm->op_type, "MatMulInt8") != 0 && strcmp(mm->op_type, "MatMulHalf") != 0) ||
            mm->n_out != 1 || mm->out[0] < 0 ||
            slim_attr_str(mm, "activation", "")[0])
            continue;
        const char *act = NULL;
        slim_node *r = fusable_reader(g, &w.uses, w.dead, mm->out[0], &act);
        if (!r)
            continue;
        if ((st = slim_pass_set_str(mm, "activation", act, err)))
            break;
        mm->out[0] = r->out[0];
        w.dead[r - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_fuse_int8_epilogue = {"fuse_int8_epilogue",
                                                  fuse_int8_epilogue_run};
