/*
 * control.c - control flow: If, Loop and Scan.
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
 * the order of the branch's inputs after its formal ones.
 *
 * Loop and Scan run their body once per iteration the same way. What an
 * iteration carries to the next (loop-carried values, Scan states) are the
 * previous call's output tensors, held until the next call has returned;
 * per-iteration scan outputs are kept and stacked at the end. Every path
 * out, a failing iteration included, releases all of them.
 */
#include "container.h"
#include "kernel.h"
#include "model.h"
#include "string_tensor.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loop-carried values, scan inputs and outputs a node may have. */
#define SLIM_MAX_NODE_ARGS 256

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

/* Wraps the subgraph of attribute `attr` of node n, which must take
 * n_formal inputs of its own (-1: any number) and give n_outputs outputs
 * (-1: any number). */
static slim_status body_make(slim_node *n, const char *attr, int n_formal, int n_outputs,
                             branch *b, slim_err *err)
{
    memset(b, 0, sizeof(*b));
    const slim_attr *a = slim_node_attr(n, attr);
    if (!a || a->type != SLIM_ATTR_GRAPH || !a->g)
        return slim_errf(err, SLIM_EINVAL, "attribute %s (a graph) is required", attr);
    slim_status st = slim__model_from_subgraph(a->g, &b->m, err);
    if (st)
        return slim_err_prefix(err, "%s: ", attr);
    const slim_graph *g = b->m->graph;
    if (g->n_inputs < n->n_implicit || (n_formal >= 0 && g->n_inputs != n->n_implicit + n_formal)) {
        st = slim_errf(err, SLIM_EPARSE, "%s declares %d input(s), expected %d", attr,
                       g->n_inputs - n->n_implicit, n_formal);
    } else if (n_outputs >= 0 && g->n_outputs != n_outputs) {
        st = slim_errf(err, SLIM_EPARSE, "%s has %d output(s), but the node has %d", attr,
                       g->n_outputs, n_outputs);
    } else if ( /* raw: load time, one name per subgraph input */
               !(b->names = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(char *)))) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
    } else {
        for (int i = 0; i < g->n_inputs; i++)
            b->names[i] = g->values[g->inputs[i]].name;
    }
    if (st)
        branch_free(b);
    return st;
}

/* One call of body b: formal[0..n_formal) then the node's implicit inputs,
 * all borrowed. On success *outs holds the body's outputs (owned). */
static slim_status body_call(const branch *b, slim_op_ctx *ctx, const slim_tensor *formal,
                             int n_formal, slim_tensor **outs, int *n_outs)
{
    const int first = ctx->n_in - ctx->node->n_implicit;
    const int n = b->m->graph->n_inputs;
    /* raw: one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *args = calloc((size_t)(n ? n : 1), sizeof(slim_tensor));
    if (!args)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        args[i] = i < n_formal ? formal[i] : *ctx->in[first + i - n_formal];
        args[i].buf = NULL; /* borrowed for the call */
    }
    *outs = NULL;
    *n_outs = 0;
    slim_status st = slim_model_run(b->m, n, b->names, args, outs, n_outs, ctx->err);
    free(args);
    return st;
}

/* Runs b with the node's implicit inputs and moves its outputs into the
 * node's. */
static slim_status branch_run(const branch *b, slim_op_ctx *ctx, const char *what)
{
    slim_tensor *outs;
    int n_outs;
    if (body_call(b, ctx, NULL, 0, &outs, &n_outs))
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
    /* raw: fixed-size load-time state, freed with the model */
    if_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = body_make(node, "then_branch", 0, node->n_out, &st->then_b, err);
    if (!s && (s = body_make(node, "else_branch", 0, node->n_out, &st->else_b, err)))
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
    if (slim_is_container(c))
        return slim_errf(ctx->err, SLIM_ETYPE, "cond is a %s, expected a bool tensor",
                         slim_kind_name(c->kind));
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

/* ---- shared by Loop and Scan -------------------------------------------- */

/* Per-iteration outputs kept for stacking: iters[t] for t < n. */
typedef struct {
    slim_tensor *iters;
    int64_t n, cap;
} stack_list;

static void stack_list_free(stack_list *l)
{
    for (int64_t t = 0; t < l->n; t++)
        slim_tensor_release(&l->iters[t]);
    free(l->iters);
    memset(l, 0, sizeof(*l));
}

/* Takes ownership of *t (cleared) into the list. */
static slim_status stack_list_push(stack_list *l, slim_tensor *t, slim_err *err)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 16;
        /* raw: one tensor header per kept iteration (its data is accounted), capped by SLIM_LOOP_MAX_ITERATIONS */
        slim_tensor *grown = realloc(l->iters, sizeof(*grown) * (size_t)cap);
        if (!grown)
            return slim_errf(err, SLIM_ENOMEM, "out of memory keeping scan outputs");
        l->iters = grown;
        l->cap = cap;
    }
    l->iters[l->n++] = *t;
    memset(t, 0, sizeof(*t));
    return SLIM_OK;
}

/* Stacks the list along a new axis `axis` of dst (rank of each + 1), item t
 * at position t, or n - 1 - t when reverse. Every item must have the shape
 * and type of the first. With no items, dst takes the body output's
 * declared type and shape (`decl`) with a 0 inserted, as onnxruntime does,
 * or is a float32 [0] when the body does not declare them. */
static slim_status stack_into(const stack_list *l, int64_t axis, bool reverse,
                              const slim_io_info *decl, slim_tensor *dst, const char *what,
                              slim_err *err)
{
    memset(dst, 0, sizeof(*dst));
    if (l->n == 0) {
        slim_dtype dt = decl->dtype ? decl->dtype : SLIM_F32;
        bool known = decl->ndim >= 0 && decl->ndim < SLIM_MAX_DIMS;
        for (int d = 0; known && d < decl->ndim; d++)
            known = decl->dims[d] >= 0;
        int ax = 0;
        if (known && slim_norm_axis(axis, decl->ndim + 1, &ax, NULL) != SLIM_OK)
            known = false;
        if (!known) {
            slim_tensor_set_shape(dst, dt, 1, (int64_t[]){0});
        } else {
            int64_t dims[SLIM_MAX_DIMS];
            for (int d = 0, k = 0; d <= decl->ndim; d++)
                dims[d] = d == ax ? 0 : decl->dims[k++];
            slim_tensor_set_shape(dst, dt, decl->ndim + 1, dims);
        }
        return slim_tensor_alloc(dst, err);
    }
    const slim_tensor *f = &l->iters[0];
    char a[128], b[128];
    if (f->ndim + 1 > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%s: stacking rank %d outputs passes %d dims",
                         what, f->ndim, SLIM_MAX_DIMS);
    int ax;
    slim_status st = slim_norm_axis(axis, f->ndim + 1, &ax, err);
    if (st)
        return slim_err_prefix(err, "%s: ", what);
    for (int64_t t = 1; t < l->n; t++) {
        const slim_tensor *x = &l->iters[t];
        if (x->dtype != f->dtype || x->ndim != f->ndim ||
            memcmp(x->dims, f->dims, sizeof(int64_t) * (size_t)f->ndim) != 0)
            return slim_errf(err, SLIM_ESHAPE, "%s is %s %s at iteration %lld but %s %s at "
                             "iteration 0; iterations must agree to be stacked", what,
                             slim_dtype_name(x->dtype), slim_shape_str(x->ndim, x->dims, a, sizeof(a)),
                             (long long)t, slim_dtype_name(f->dtype),
                             slim_shape_str(f->ndim, f->dims, b, sizeof(b)));
    }
    int64_t dims[SLIM_MAX_DIMS], outer = 1, inner = 1;
    for (int d = 0, k = 0; d <= f->ndim; d++)
        dims[d] = d == ax ? l->n : f->dims[k++];
    for (int d = 0; d < ax; d++)
        outer *= f->dims[d];
    for (int d = ax; d < f->ndim; d++)
        inner *= f->dims[d];
    slim_tensor_set_shape(dst, f->dtype, f->ndim + 1, dims);
    if ((st = slim_tensor_alloc(dst, err)))
        return st;
    const size_t row = slim_dtype_size(f->dtype) * (size_t)inner;
    for (int64_t t = 0; t < l->n; t++) {
        int64_t pos = reverse ? l->n - 1 - t : t;
        for (int64_t o = 0; o < outer; o++)
            memcpy((uint8_t *)dst->data + (size_t)(o * l->n + pos) * row,
                   (const uint8_t *)l->iters[t].data + (size_t)o * row, row);
    }
    /* Stacked strings point at the iterations' bytes, which go before the
     * executor sees the output: they become the output's own now. */
    return dst->dtype == SLIM_STRING ? slim__tensor_string_own(dst, err) : SLIM_OK;
}

/* ---- Loop ---------------------------------------------------------------- */

#define LOOP_MAX_ITERATIONS_DEFAULT 1000000

/* SLIM_LOOP_MAX_ITERATIONS, read once: the iterations a Loop may run. */
static int64_t loop_iteration_cap(void)
{
    static _Atomic int64_t cap;
    int64_t c = atomic_load(&cap);
    if (!c) {
        const char *e = getenv("SLIM_LOOP_MAX_ITERATIONS");
        char *end;
        long long v = e ? strtoll(e, &end, 10) : 0;
        c = e && *e && !*end && v > 0 ? (int64_t)v : LOOP_MAX_ITERATIONS_DEFAULT;
        atomic_store(&cap, c);
    }
    return c;
}

/* body(iteration_num, cond, v_1..v_N) -> (cond, v_1..v_N, scan_1..scan_K);
 * the node's outputs are the final v's, then each scan output stacked
 * over the iterations along a new axis 0. */
typedef struct {
    branch body;
    int n_carried, n_scan;
} loop_state;

static void loop_release(void *p)
{
    loop_state *st = p;
    if (!st)
        return;
    branch_free(&st->body);
    free(st);
}

static slim_status loop_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    loop_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = body_make(node, "body", -1, -1, &st->body, err);
    if (s) {
        free(st);
        return s;
    }
    const slim_graph *g = st->body.m->graph;
    const int declared = node->n_in - node->n_implicit;
    st->n_carried = g->n_inputs - node->n_implicit - 2;
    st->n_scan = g->n_outputs - 1 - st->n_carried;
    /* M and cond may be left off only when nothing is carried: the
     * carried values' initial inputs follow them by position. */
    if (st->n_carried < 0 || st->n_scan < 0 ||
        ((declared > 2 || st->n_carried > 0) && declared != 2 + st->n_carried) ||
        node->n_out > st->n_carried + st->n_scan) {
        s = slim_errf(err, SLIM_EPARSE, "body takes %d inputs and gives %d outputs, which does "
                      "not match the node's %d loop-carried inputs and %d outputs",
                      g->n_inputs - node->n_implicit, g->n_outputs,
                      declared > 2 ? declared - 2 : 0, node->n_out);
        loop_release(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}

static slim_status loop_infer(slim_op_ctx *ctx)
{
    return slim_errf(ctx->err, SLIM_ENEEDVALUE, "the outputs come from running the body");
}

static slim_status loop_exec(slim_op_ctx *ctx)
{
    const loop_state *st = ctx->state;
    const int N = st->n_carried, K = st->n_scan;
    const int declared = ctx->n_in - ctx->node->n_implicit;
    const slim_tensor *m_t = declared > 0 ? ctx->in[0] : NULL;
    const slim_tensor *c_t = declared > 1 ? ctx->in[1] : NULL;
    int64_t trip = INT64_MAX;
    bool cond = true;
    slim_status s;
    if (slim_is_container(m_t) || slim_is_container(c_t))
        return slim_errf(ctx->err, SLIM_ETYPE, "M and cond must be tensors, not sequences or "
                         "optionals");
    if (m_t && (slim_tensor_numel(m_t) != 1 || m_t->dtype != SLIM_I64))
        return slim_errf(ctx->err, SLIM_ESHAPE, "M must be one int64");
    if (c_t && (slim_tensor_numel(c_t) != 1 || c_t->dtype != SLIM_BOOL))
        return slim_errf(ctx->err, SLIM_ESHAPE, "cond must be one bool");
    if (m_t)
        trip = *(const int64_t *)m_t->data;
    if (c_t)
        cond = *(const uint8_t *)c_t->data != 0;
    /* With no trip count and a cond that stays true (or a trip count of
     * 2^63) a model would hold its worker forever, and the request behind
     * it would never be answered: past the cap the Loop fails instead. */
    const int64_t cap = loop_iteration_cap();
    /* formal = [iteration_num, cond, v...]; carried[] owns the v's after
     * the first iteration. */
    int64_t iter_v = 0;
    uint8_t cond_v = cond;
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *formal = calloc((size_t)(2 + N), sizeof(slim_tensor));
    slim_tensor *carried = calloc((size_t)(N ? N : 1), sizeof(slim_tensor));
    stack_list *scans = calloc((size_t)(K ? K : 1), sizeof(stack_list));
    slim_tensor *outs = NULL;
    int n_outs = 0;
    if (!formal || !carried || !scans) {
        s = slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
        goto done;
    }
    formal[0] = (slim_tensor){.dtype = SLIM_I64, .ndim = 0, .data = &iter_v};
    formal[1] = (slim_tensor){.dtype = SLIM_BOOL, .ndim = 0, .data = &cond_v};
    for (int i = 0; i < N; i++) {
        formal[2 + i] = *ctx->in[2 + i];
        formal[2 + i].buf = NULL;
    }
    bool ran = false;
    for (int64_t it = 0; it < trip && cond_v; it++, ran = true) {
        if (it >= cap) {
            s = slim_errf(ctx->err, SLIM_EINVAL, "Loop ran %lld iterations without ending: "
                          "over the limit (SLIM_LOOP_MAX_ITERATIONS, default %d)",
                          (long long)it, LOOP_MAX_ITERATIONS_DEFAULT);
            goto done;
        }
        /* A body of no nodes never reaches the executor's checks; a
         * billion such iterations must still stop on time. */
        if ((s = slim_cancel_status(ctx->err)))
            goto done;
        iter_v = it;
        if ((s = body_call(&st->body, ctx, formal, 2 + N, &outs, &n_outs))) {
            slim_err_prefix(ctx->err, "body, iteration %lld: ", (long long)it);
            goto done;
        }
        const slim_tensor *co = &outs[0];
        if (co->dtype != SLIM_BOOL || slim_tensor_numel(co) != 1 || slim_is_container(co)) {
            s = slim_errf(ctx->err, SLIM_ETYPE, "body's cond output must be one bool, got %s",
                          slim_dtype_name(co->dtype));
            goto done;
        }
        cond_v = *(const uint8_t *)co->data != 0;
        /* The new carried values replace the old, which the call has
         * finished reading. */
        for (int i = 0; i < N; i++) {
            slim_tensor_release(&carried[i]);
            carried[i] = outs[1 + i];
            memset(&outs[1 + i], 0, sizeof(outs[1 + i]));
            formal[2 + i] = carried[i];
            formal[2 + i].buf = NULL;
        }
        for (int k = 0; k < K; k++) {
            if (slim_is_container(&outs[1 + N + k])) {
                s = slim_errf(ctx->err, SLIM_EUNSUPPORTED, "scan output %d is a %s; only "
                              "tensors are stacked", k, slim_kind_name(outs[1 + N + k].kind));
                goto done;
            }
            if ((s = stack_list_push(&scans[k], &outs[1 + N + k], ctx->err)))
                goto done;
        }
        slim_tensors_free(outs, n_outs);
        outs = NULL;
        n_outs = 0;
    }
    /* Final values: the last carried tensors, or copies of the inputs when
     * the body never ran. */
    for (int i = 0; i < N && i < ctx->n_out; i++) {
        slim_tensor *o = ctx->out[i];
        if (!o)
            continue;
        if (ran) {
            *o = carried[i];
            memset(&carried[i], 0, sizeof(carried[i]));
            continue;
        }
        if (slim_is_container(&formal[2 + i])) {
            slim_container_ref(&formal[2 + i], o);
            continue;
        }
        slim_tensor_set_like(o, &formal[2 + i]);
        if ((s = slim_tensor_alloc(o, ctx->err)))
            goto done;
        if (slim_tensor_nbytes(o))
            memcpy(o->data, formal[2 + i].data, slim_tensor_nbytes(o));
    }
    for (int k = 0; k < K && N + k < ctx->n_out; k++) {
        slim_tensor *o = ctx->out[N + k];
        if (!o)
            continue;
        char what[48];
        snprintf(what, sizeof(what), "scan output %d", k);
        if ((s = stack_into(&scans[k], 0, false, &st->body.m->outputs[1 + N + k], o, what,
                            ctx->err)))
            goto done;
    }
    s = SLIM_OK;
done:
    if (s)
        for (int k = 0; k < ctx->n_out; k++)
            if (ctx->out[k])
                slim_tensor_release(ctx->out[k]);
    slim_tensors_free(outs, n_outs);
    for (int i = 0; carried && i < N; i++)
        slim_tensor_release(&carried[i]);
    for (int k = 0; scans && k < K; k++)
        stack_list_free(&scans[k]);
    free(formal);
    free(carried);
    free(scans);
    return s;
}

/* ---- Scan ---------------------------------------------------------------- */

/* body(state_1..state_N, x_1..x_M) -> (state_1..state_N, y_1..y_K): each
 * iteration reads slice t of every scan input along its axis (from the end
 * when its direction is 1) and the y's are stacked along their axes. */
typedef struct {
    branch body;
    int n_state, n_in_scan, n_out_scan;
    int64_t in_axes[SLIM_MAX_NODE_ARGS], in_rev[SLIM_MAX_NODE_ARGS];
    int64_t out_axes[SLIM_MAX_NODE_ARGS], out_rev[SLIM_MAX_NODE_ARGS];
} scan_state;

static void scan_release(void *p)
{
    scan_state *st = p;
    if (!st)
        return;
    branch_free(&st->body);
    free(st);
}

/* Reads an optional INTS attribute of `count` values (default 0) into out;
 * directions must be 0 or 1. */
static slim_status scan_ints(const slim_node *n, const char *name, int count, bool direction,
                             int64_t *out, slim_err *err)
{
    memset(out, 0, sizeof(int64_t) * (size_t)count);
    if (!slim_node_attr(n, name))
        return SLIM_OK;
    int got = slim_attr_ints(n, name, out, SLIM_MAX_NODE_ARGS);
    if (got != count)
        return slim_errf(err, SLIM_EINVAL, "%s has %d values, expected %d", name, got, count);
    for (int i = 0; direction && i < count; i++)
        if (out[i] != 0 && out[i] != 1)
            return slim_errf(err, SLIM_EINVAL, "%s[%d] = %lld, must be 0 or 1", name, i,
                             (long long)out[i]);
    return SLIM_OK;
}

static slim_status scan_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    scan_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    /* Opset 8 puts the optional sequence_lens first. */
    const bool v8 = node->opset < 9;
    const int declared = node->n_in - node->n_implicit - (v8 ? 1 : 0);
    const int64_t m = slim_attr_int(node, "num_scan_inputs", -1);
    slim_status s;
    if (m < 1 || m > declared || declared > SLIM_MAX_NODE_ARGS || node->n_out > SLIM_MAX_NODE_ARGS) {
        free(st);
        return slim_errf(err, SLIM_EINVAL, "num_scan_inputs = %lld must be in [1, %d] (and at "
                         "most %d inputs and outputs)", (long long)m, declared, SLIM_MAX_NODE_ARGS);
    }
    st->n_in_scan = (int)m;
    st->n_state = declared - st->n_in_scan;
    st->n_out_scan = node->n_out - st->n_state;
    if ((s = body_make(node, "body", declared, node->n_out, &st->body, err))) {
        free(st);
        return s;
    }
    if (st->n_out_scan < 0)
        s = slim_errf(err, SLIM_EPARSE, "%d outputs cannot hold %d states", node->n_out,
                      st->n_state);
    if (!s && !v8)
        s = scan_ints(node, "scan_input_axes", st->n_in_scan, false, st->in_axes, err);
    if (!s)
        s = scan_ints(node, v8 ? "directions" : "scan_input_directions", st->n_in_scan, true,
                      st->in_rev, err);
    if (!s)
        s = scan_ints(node, "scan_output_axes", st->n_out_scan, false, st->out_axes, err);
    if (!s)
        s = scan_ints(node, "scan_output_directions", st->n_out_scan, true, st->out_rev, err);
    if (s) {
        scan_release(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}

/* Slice t of x along axis (a new tensor without that axis). */
static slim_status scan_slice(const slim_tensor *x, int axis, int64_t t, slim_tensor *dst,
                              slim_err *err)
{
    int64_t dims[SLIM_MAX_DIMS], outer = 1, inner = 1;
    for (int d = 0, k = 0; d < x->ndim; d++)
        if (d != axis)
            dims[k++] = x->dims[d];
    for (int d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int d = axis + 1; d < x->ndim; d++)
        inner *= x->dims[d];
    memset(dst, 0, sizeof(*dst));
    slim_tensor_set_shape(dst, x->dtype, x->ndim - 1, dims);
    slim_status s = slim_tensor_alloc(dst, err);
    if (s)
        return s;
    const int64_t L = x->dims[axis];
    const size_t row = slim_dtype_size(x->dtype) * (size_t)inner;
    for (int64_t o = 0; o < outer; o++)
        memcpy((uint8_t *)dst->data + (size_t)o * row,
               (const uint8_t *)x->data + (size_t)(o * L + t) * row, row);
    return SLIM_OK;
}

/* One scan over ins (N states, then M scan inputs) into outs (N final
 * states, then K stacked scan outputs; NULL where unused). */
static slim_status scan_run(slim_op_ctx *ctx, const slim_tensor *const *ins,
                            slim_tensor *const *outs)
{
    const scan_state *st = ctx->state;
    const int N = st->n_state, M = st->n_in_scan, K = st->n_out_scan;
    int axes[SLIM_MAX_NODE_ARGS];
    int64_t L = -1;
    slim_status s;
    for (int j = 0; j < M; j++) {
        const slim_tensor *x = ins[N + j];
        if ((s = slim_norm_axis(st->in_axes[j], x->ndim, &axes[j], ctx->err)))
            return slim_err_prefix(ctx->err, "scan input %d: ", j);
        if (L >= 0 && x->dims[axes[j]] != L)
            return slim_errf(ctx->err, SLIM_ESHAPE, "scan input %d has %lld steps along its "
                             "axis, another has %lld", j, (long long)x->dims[axes[j]],
                             (long long)L);
        L = x->dims[axes[j]];
    }
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *formal = calloc((size_t)(N + M), sizeof(slim_tensor));
    slim_tensor *states = calloc((size_t)(N ? N : 1), sizeof(slim_tensor));
    slim_tensor *slices = calloc((size_t)M, sizeof(slim_tensor));
    stack_list *ys = calloc((size_t)(K ? K : 1), sizeof(stack_list));
    slim_tensor *bouts = NULL;
    int n_outs = 0;
    if (!formal || !states || !slices || !ys) {
        s = slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < N; i++) {
        formal[i] = *ins[i];
        formal[i].buf = NULL;
    }
    for (int64_t t = 0; t < L; t++) {
        if ((s = slim_cancel_status(ctx->err)))
            goto done; /* as in Loop: the body may have no nodes */
        for (int j = 0; j < M; j++) {
            slim_tensor_release(&slices[j]);
            if ((s = scan_slice(ins[N + j], axes[j], st->in_rev[j] ? L - 1 - t : t,
                                &slices[j], ctx->err)))
                goto done;
            formal[N + j] = slices[j];
            formal[N + j].buf = NULL;
        }
        if ((s = body_call(&st->body, ctx, formal, N + M, &bouts, &n_outs))) {
            slim_err_prefix(ctx->err, "body, iteration %lld: ", (long long)t);
            goto done;
        }
        for (int i = 0; i < N; i++) {
            slim_tensor_release(&states[i]);
            states[i] = bouts[i];
            memset(&bouts[i], 0, sizeof(bouts[i]));
            formal[i] = states[i];
            formal[i].buf = NULL;
        }
        for (int k = 0; k < K; k++)
            if ((s = stack_list_push(&ys[k], &bouts[N + k], ctx->err)))
                goto done;
        slim_tensors_free(bouts, n_outs);
        bouts = NULL;
        n_outs = 0;
    }
    for (int i = 0; i < N; i++) {
        slim_tensor *o = outs[i];
        if (!o)
            continue;
        if (L > 0) {
            *o = states[i];
            memset(&states[i], 0, sizeof(states[i]));
            continue;
        }
        slim_tensor_set_like(o, &formal[i]); /* no steps: the initial state */
        if ((s = slim_tensor_alloc(o, ctx->err)))
            goto done;
        if (slim_tensor_nbytes(o))
            memcpy(o->data, formal[i].data, slim_tensor_nbytes(o));
    }
    for (int k = 0; k < K; k++) {
        slim_tensor *o = outs[N + k];
        if (!o)
            continue;
        char what[48];
        snprintf(what, sizeof(what), "scan output %d", k);
        if ((s = stack_into(&ys[k], st->out_axes[k], st->out_rev[k] != 0,
                            &st->body.m->outputs[N + k], o, what, ctx->err)))
            goto done;
    }
    s = SLIM_OK;
done:
    if (s)
        for (int k = 0; k < N + K; k++)
            if (outs[k])
                slim_tensor_release(outs[k]);
    slim_tensors_free(bouts, n_outs);
    for (int i = 0; states && i < N; i++)
        slim_tensor_release(&states[i]);
    for (int j = 0; slices && j < M; j++)
        slim_tensor_release(&slices[j]);
    for (int k = 0; ys && k < K; k++)
        stack_list_free(&ys[k]);
    free(formal);
    free(states);
    free(slices);
    free(ys);
    return s;
}

/* Opset 9 and up: the node's inputs and outputs as they are. */
static slim_status scan_exec(slim_op_ctx *ctx)
{
    return scan_run(ctx, ctx->in, ctx->out);
}

/* Opset 8: every input and output has a batch axis first, and the scan axis
 * (1) is axis 0 of one batch item; each item is scanned on its own and the
 * results stacked. sequence_lens shorter than the sequence would leave the
 * tail undefined, so only full lengths are taken. */
static slim_status scan8_exec(slim_op_ctx *ctx)
{
    const scan_state *st = ctx->state;
    const int N = st->n_state, M = st->n_in_scan, K = st->n_out_scan;
    const slim_tensor *lens = ctx->in[0];
    const slim_tensor *const *ins = ctx->in + 1;
    const int64_t B = ins[0]->ndim > 0 ? ins[0]->dims[0] : -1;
    for (int i = 0; i < N + M; i++)
        if (ins[i]->ndim < (i < N ? 1 : 2) || ins[i]->dims[0] != B)
            return slim_errf(ctx->err, SLIM_ESHAPE, "input %d must have the batch axis first (%lld)%s",
                             i + 1, (long long)B, i < N ? "" : " and a sequence axis");
    if (lens) {
        const int64_t L = ins[N]->dims[1];
        if (lens->ndim != 1 || lens->dims[0] != B || !slim_dtype_is_int(lens->dtype))
            return slim_errf(ctx->err, SLIM_ESHAPE, "sequence_lens must be [%lld] integers",
                             (long long)B);
        for (int64_t b = 0; b < B; b++)
            if (slim_load_i64(lens->dtype, lens->data, b) != L)
                return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "sequence_lens[%lld] = %lld is "
                                 "not the full length %lld", (long long)b,
                                 (long long)slim_load_i64(lens->dtype, lens->data, b), (long long)L);
    }
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *items = calloc((size_t)(N + M), sizeof(slim_tensor));
    slim_tensor *res = calloc((size_t)(N + K), sizeof(slim_tensor));
    stack_list *acc = calloc((size_t)(N + K), sizeof(stack_list));
    const slim_tensor **in_ptr = calloc((size_t)(N + M), sizeof(*in_ptr));
    slim_tensor **out_ptr = calloc((size_t)(N + K), sizeof(*out_ptr));
    slim_status s = SLIM_OK;
    if (!items || !res || !acc || !in_ptr || !out_ptr) {
        s = slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < N + K; k++)
        out_ptr[k] = &res[k];
    for (int64_t b = 0; b < B && !s; b++) {
        for (int i = 0; i < N + M && !s; i++) {
            slim_tensor_release(&items[i]);
            s = scan_slice(ins[i], 0, b, &items[i], ctx->err);
            in_ptr[i] = &items[i];
        }
        if (!s && !(s = scan_run(ctx, in_ptr, out_ptr)))
            for (int k = 0; k < N + K && !s; k++)
                s = stack_list_push(&acc[k], &res[k], ctx->err);
        if (s)
            slim_err_prefix(ctx->err, "batch item %lld: ", (long long)b);
    }
    for (int k = 0; k < N + K && !s; k++) {
        slim_tensor *o = k < ctx->n_out ? ctx->out[k] : NULL;
        if (!o)
            continue;
        const slim_io_info none = {.ndim = -1};
        s = stack_into(&acc[k], 0, false, &none, o, "scan output", ctx->err);
    }
done:
    if (s)
        for (int k = 0; k < ctx->n_out; k++)
            if (ctx->out[k])
                slim_tensor_release(ctx->out[k]);
    for (int i = 0; items && i < N + M; i++)
        slim_tensor_release(&items[i]);
    for (int k = 0; res && k < N + K; k++)
        slim_tensor_release(&res[k]);
    for (int k = 0; acc && k < N + K; k++)
        stack_list_free(&acc[k]);
    free(items);
    free(res);
    free(acc);
    free(in_ptr);
    free(out_ptr);
    return s;
}

static slim_status scan_dispatch(slim_op_ctx *ctx)
{
    return ctx->node->opset < 9 ? scan8_exec(ctx) : scan_exec(ctx);
}

const slim_op_def slim__ops_control[] = {
    {"If", 1, if_prepare, if_release, if_infer, if_exec, SLIM_OP_OWN_OUTPUTS | SLIM_OP_CONTAINERS},
    {"Loop", 1, loop_prepare, loop_release, loop_infer, loop_exec,
     SLIM_OP_OWN_OUTPUTS | SLIM_OP_CONTAINERS},
    {"Scan", 8, scan_prepare, scan_release, loop_infer, scan_dispatch, SLIM_OP_OWN_OUTPUTS},
    {0},
};
