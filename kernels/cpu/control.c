/*
 * control.c - control flow: If.
 *
 * A branch is a subgraph (a GRAPH attribute) wrapped in a nested model
 * (model.h, slim__model_from_subgraph) when the node is prepared. Running
 * a branch is an ordinary slim_model_run of that model: its activations
 * come from an arena planned for the branch and its input shapes, taken
 * for the call and dropped at its end, and a failing branch leaves nothing
 * allocated. The branch's outputs are new tensors that become the node's
 * outputs as they are (SLIM_OP_OWN_OUTPUTS): their shapes may differ from
 * one branch to the other, so nothing about them is known before the run.
 *
 * Outer-scope values a branch reads arrive as the node's implicit inputs
 * (graph.h), in the order slim_graph_capture_outer gave them, which is also
 * the order of the branch's inputs.
 */
#include "kernel.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* The names of a branch's inputs, and room for the tensors of one call. */
typedef struct {
    slim_model *m;
    const char **names;
} branch;

static void branch_free(branch *b)
{
    slim_model_free(b->m);
    free(b->names);
}

/* Wraps the subgraph of attribute `attr` of node n. */
static slim_status branch_make(slim_node *n, const char *attr, branch *b, slim_err *err)
{
    memset(b, 0, sizeof(*b));
    const slim_attr *a = slim_node_attr(n, attr);
    if (!a || a->type != SLIM_ATTR_GRAPH || !a->g)
        return slim_errf(err, SLIM_EINVAL, "attribute %s (a graph) is required", attr);
    slim_status st = slim__model_from_subgraph(a->g, &b->m, err);
    if (st)
        return slim_err_prefix(err, "%s: ", attr);
    const slim_graph *g = b->m->graph;
    if (g->n_inputs != n->n_implicit) {
        st = slim_errf(err, SLIM_EPARSE, "%s declares %d input(s); an If branch takes none",
                       attr, g->n_inputs - n->n_implicit);
    } else if (g->n_outputs != n->n_out) {
        st = slim_errf(err, SLIM_EPARSE, "%s has %d output(s), but the node has %d", attr,
                       g->n_outputs, n->n_out);
    } else if (!(b->names = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(char *)))) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
    } else {
        for (int i = 0; i < g->n_inputs; i++)
            b->names[i] = g->values[g->inputs[i]].name;
    }
    if (st)
        branch_free(b);
    return st;
}

/* Runs b with the node's implicit inputs and moves its outputs into the
 * node's. */
static slim_status branch_run(const branch *b, slim_op_ctx *ctx, const char *what)
{
    const int first = ctx->n_in - ctx->node->n_implicit;
    const int n = b->m->graph->n_inputs;
    slim_tensor *args = calloc((size_t)(n ? n : 1), sizeof(slim_tensor));
    if (!args)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        args[i] = *ctx->in[first + i];
        args[i].buf = NULL; /* borrowed for the call */
    }
    slim_tensor *outs = NULL;
    int n_outs = 0;
    slim_status st = slim_model_run(b->m, n, b->names, args, &outs, &n_outs, ctx->err);
    free(args);
    if (st)
        return slim_err_prefix(ctx->err, "%s: ", what);
    for (int k = 0; k < n_outs && k < ctx->n_out; k++)
        if (ctx->out[k]) {
            *ctx->out[k] = outs[k];
            memset(&outs[k], 0, sizeof(outs[k]));
        }
    slim_tensors_free(outs, n_outs);
    return SLIM_OK;
}

/* ---- If ------------------------------------------------------------------ */

typedef struct {
    branch then_b, else_b;
} if_state;

static void if_release(void *p)
{
    if_state *st = p;
    if (!st)
        return;
    branch_free(&st->then_b);
    branch_free(&st->else_b);
    free(st);
}

static slim_status if_prepare(slim_node *node, void **state, slim_err *err)
{
    if_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = branch_make(node, "then_branch", &st->then_b, err);
    if (!s && (s = branch_make(node, "else_branch", &st->else_b, err)))
        branch_free(&st->then_b);
    if (s) {
        free(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}

static slim_status if_infer(slim_op_ctx *ctx)
{
    return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the outputs come from running a branch");
}

static slim_status if_exec(slim_op_ctx *ctx)
{
    const if_state *st = ctx->state;
    const slim_tensor *c = ctx->in[0];
    if (slim_tensor_numel(c) != 1 || !c->data)
        return slim_errf(ctx->err, SLIM_ESHAPE, "cond must hold exactly one value, it has %lld",
                         (long long)slim_tensor_numel(c));
    if (c->dtype != SLIM_BOOL)
        return slim_errf(ctx->err, SLIM_ETYPE, "cond is %s, expected bool",
                         slim_dtype_name(c->dtype));
    bool take = *(const uint8_t *)c->data != 0;
    return take ? branch_run(&st->then_b, ctx, "then_branch")
                : branch_run(&st->else_b, ctx, "else_branch");
}

const slim_op_def slim__ops_control[] = {
    {"If", 1, if_prepare, if_release, if_infer, if_exec, SLIM_OP_OWN_OUTPUTS},
    {0},
};
