/*
 * fuse_matmul_bias.c - MatMul by a constant weight, + a constant bias
 * [+ Relu], becomes one MatMulBias (kernels/cpu/matmul_bias.c) in models
 * placed on a GPU. There cuBLASLt adds the bias and applies the Relu in the
 * product's epilogue (kernels/cuda/matmul_lt.cu), while the tile is still
 * in registers: the Add was a separate kernel reading and writing the whole
 * activation. BERT-base has 72 such Adds (Q, K, V, the attention output and
 * the two feed-forward products of 12 layers): on an H100 at fp16 batch 32
 * the Adds were 16% of the time (docs/benchmarks.md, gpu_h100_2026-11-26_profile).
 *
 * Matched: a default-domain MatMul whose B is a float32 initializer
 * [K, N], read only by an Add whose other operand is a float32 initializer
 * [N]; a Relu that alone reads the sum is taken too. The sum may be a
 * graph output. Runs last, for GPU placements only (pass.c): on the host
 * fuse_matmul takes these into oneDNN's FusedMatMul, and the passes before
 * this one (fold_attention_scale) match the MatMul and Add as ONNX writes
 * them. SLIM_FUSE_BIAS=0 turns it off (comparisons).
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

static bool is_op(const slim_node *n, const char *op)
{
    return n && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

/* The Add's slot holding a float32 [n] initializer, or -1. */
static int bias_slot(const slim_graph *g, const slim_node *add, int sum_in, int64_t n)
{
    for (int k = 0; k < 2; k++) {
        if (add->in[1 - k] != sum_in)
            continue;
        const slim_tensor *b = slim_pass_const_f32(g, add->in[k]);
        if (b && b->ndim == 1 && b->dims[0] == n)
            return k;
    }
    return -1;
}

static slim_status fuse_bias_run(slim_graph *g, int *changed, slim_err *err)
{
    const char *env = getenv("SLIM_FUSE_BIAS");
    if (env && strcmp(env, "0") == 0)
        return SLIM_OK;
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *mm = &g->nodes[i];
        /* Passes run before validation: a hostile node may lack inputs. */
        if (w.dead[i] || !is_op(mm, "MatMul") || mm->n_in != 2 || mm->n_out != 1 ||
            mm->in[0] < 0 || mm->out[0] < 0)
            continue;
        const slim_tensor *wt = slim_pass_const_f32(g, mm->in[1]);
        if (!wt || wt->ndim != 2)
            continue;
        slim_node *add = slim_pass_sole_reader(g, u, mm->out[0], "Add");
        if (!add || add->n_in != 2 || add->n_out != 1 || add->out[0] < 0)
            continue;
        int bk = bias_slot(g, add, mm->out[0], wt->dims[1]);
        if (bk < 0)
            continue;
        slim_node *relu = slim_pass_sole_reader(g, u, add->out[0], "Relu");
        if (relu && (relu->n_in != 1 || relu->n_out != 1 || relu->out[0] < 0))
            relu = NULL;
        int *in = realloc(mm->in, sizeof(int) * 3);
        char *ot = strdup("MatMulBias"), *dom = strdup("com.slimserve");
        if (!in || !ot || !dom) {
            if (in)
                mm->in = in;
            free(ot);
            free(dom);
            st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
            break;
        }
        mm->in = in;
        in[2] = add->in[bk];
        mm->n_in = 3;
        mm->out[0] = relu ? relu->out[0] : add->out[0];
        free(mm->op_type);
        free(mm->domain);
        mm->op_type = ot;
        mm->domain = dom;
        mm->opset = 1;
        if (relu && (st = slim_pass_set_str(mm, "activation", "Relu", err)))
            break;
        w.dead[add - g->nodes] = true;
        if (relu)
            w.dead[relu - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_fuse_matmul_bias = {"fuse_matmul_bias", fuse_bias_run};
