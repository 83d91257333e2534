/*
 * fuse_add_layernorm.c - Add(A, B) -> LayerNormalization over the last
 * axis becomes one AddLayerNorm (kernels/cpu/add_layernorm.c): the
 * residual connection and the norm after it in every encoder layer (25 in
 * BERT-base), the sum written once instead of written by Add and read back.
 *
 * Matched: a default-domain LayerNormalization with axis -1, no Mean or
 * InvStdDev output, float32 stash, a constant float32 Scale [D] and Bias
 * [D] (or none), reading the one output of a two-input Add. When anything
 * else reads the sum (a pre-norm block's residual) or it is a graph
 * output, AddLayerNorm gives it as a second output. Runs after
 * fuse_layernorm, so the LayerNorms it builds from the spelled-out ops are
 * taken too. GPU models get it as well (kernels/cuda/norm.cu): there the
 * graph goes half after the passes, and AddLayerNorm takes half operands.
 * SLIM_FUSE_ADDLN=0 turns it off (comparisons).
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

static bool is_op(const slim_node *n, const char *op)
{
    return !n->domain[0] && strcmp(n->op_type, op) == 0;
}

static bool const_vector(const slim_graph *g, int v, int64_t *d)
{
    const slim_tensor *t = slim_pass_const_f32(g, v);
    if (!t || t->ndim != 1 || t->dims[0] < 1 || (*d >= 0 && t->dims[0] != *d))
        return false;
    *d = t->dims[0];
    return true;
}

static slim_status fuse_add_layernorm_run(slim_graph *g, int *changed, slim_err *err)
{
    const char *env = getenv("SLIM_FUSE_ADDLN");
    if (env && strcmp(env, "0") == 0)
        return SLIM_OK;
    slim_pass_walk w;
    slim_status st = slim_pass_walk_init(&w, g, err);
    if (st)
        return st;
    const slim_pass_uses *u = &w.uses;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        slim_node *ln = &g->nodes[i];
        if (w.dead[i] || !is_op(ln, "LayerNormalization") || ln->n_in < 2 || ln->n_out != 1 ||
            ln->out[0] < 0 || slim_attr_int(ln, "axis", -1) != -1 ||
            slim_attr_int(ln, "stash_type", 1) != 1)
            continue;
        int64_t d = -1;
        bool has_bias = ln->n_in > 2 && ln->in[2] >= 0;
        if (!const_vector(g, ln->in[1], &d) || (has_bias && !const_vector(g, ln->in[2], &d)))
            continue;
        int x = ln->in[0];
        if (x < 0 || x >= u->n_values || u->producer[x] < 0)
            continue;
        slim_node *add = &g->nodes[u->producer[x]];
        if (w.dead[add - g->nodes] || !is_op(add, "Add") || add->n_in != 2 || add->n_out != 1 ||
            add->in[0] < 0 || add->in[1] < 0)
            continue;
        /* The sum stays a value when more than the LayerNorm reads it. */
        bool keep_sum = u->readers[x] > 1 || g->values[x].is_output;
        int *in = malloc(sizeof(int) * 4), *out = malloc(sizeof(int) * 2);
        char *ot = strdup("AddLayerNorm"), *dom = strdup("com.slimserve");
        if (!in || !out || !ot || !dom) {
            free(in);
            free(out);
            free(ot);
            free(dom);
            st = slim_errf(err, SLIM_ENOMEM, "out of memory optimizing the graph");
            break;
        }
        float eps = slim_attr_float(ln, "epsilon", 1e-5f);
        in[0] = add->in[0];
        in[1] = add->in[1];
        in[2] = ln->in[1];
        in[3] = has_bias ? ln->in[2] : -1;
        out[0] = ln->out[0];
        out[1] = x;
        free(ln->in);
        free(ln->out);
        free(ln->op_type);
        free(ln->domain);
        ln->in = in;
        ln->n_in = has_bias ? 4 : 3;
        ln->out = out;
        ln->n_out = keep_sum ? 2 : 1;
        ln->op_type = ot;
        ln->domain = dom;
        ln->opset = 1;
        /* LayerNormalization's attributes go: AddLayerNorm has epsilon. */
        for (int a = 0; a < ln->n_attrs; a++)
            if (strcmp(ln->attrs[a].name, "epsilon") != 0) {
                slim_attr_clear(&ln->attrs[a]);
                ln->attrs[a--] = ln->attrs[--ln->n_attrs];
            }
        if ((st = slim_pass_set_float(ln, "epsilon", eps, err)))
            break;
        w.dead[add - g->nodes] = true;
        (*changed)++;
    }
    return slim_pass_walk_finish(&w, g, st);
}

const slim_pass slim__pass_fuse_add_layernorm = {"fuse_add_layernorm", fuse_add_layernorm_run};
