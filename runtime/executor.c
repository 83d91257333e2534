/*
 * executor.c - runs a finalized graph in inference mode.
 *
 * One run owns an array with a tensor per value. Nodes run in topological
 * order: infer the output shapes from the actual inputs, allocate, execute.
 *
 * Activations live in one arena per run, laid out by the model's plan for
 * these input shapes (plan.h): a planned value's data is arena + offset and
 * its buffer is the arena, so releasing it only drops a reference and the
 * memory goes back in one piece when the run ends. Values the plan leaves
 * out (graph outputs, data-dependent shapes) are allocated on their own and
 * dropped after their last reader. Initializers and caller inputs are
 * borrowed, never copied. Every byte is charged to the model's memory
 * account. Nothing in the model is written during a run (plans are shared
 * read-only), so any number of threads may run one model at once.
 */
#include "cancel.h"
#include "container.h"
#include "device.h"
#include "model.h"
#include "op.h"
#include "plan.h"
#include "profile.h"
#include "string_tensor.h"

#include <time.h>

#include <stdlib.h>
#include <string.h>

/* Nodes with subgraphs take every outer-scope value their bodies read as
 * an input, so this is generous. */
#define SLIM_MAX_NODE_IO 1024

/* The running model's modes, handed to every node in its op context
 * (op.h) and kept per thread so that a nested run (a subgraph, run from
 * inside its parent's node) keeps its parent's. */
typedef struct run_mode_t {
    bool row_invariant;
    bool fp32_strict;
} run_mode_t;
static _Thread_local run_mode_t run_mode;

typedef struct run_state {
    const slim_graph *g;
    slim_tensor *vals;
    int *remaining;
    const slim_plan *plan;  /* NULL: every value allocated on its own */
    bool plan_owned;        /* past the cache's capacity: ours to free */
    slim_buffer *arena;     /* plan->arena_bytes, one reference held by the run */
    slim_device *dev;       /* the model's device (the CPU when unplaced) */
    /* GPU buffers the run let go of: kernels queued on the run's stream
     * may still read them, so they go back to the cache only after the
     * stream has synchronized (end of run). */
    slim_buffer **deferred;
    int n_deferred, cap_deferred;
} run_state;

static void release_value(run_state *rs, slim_tensor *t)
{
    if (t->device && t->buf) {
        if (rs->n_deferred == rs->cap_deferred) {
            int cap = rs->cap_deferred ? rs->cap_deferred * 2 : 32;
            slim_buffer **d = realloc(rs->deferred, sizeof(*d) * (size_t)cap);
            if (!d) {
                /* No room to defer: keep the tensor (freed at the end). */
                return;
            }
            rs->deferred = d;
            rs->cap_deferred = cap;
        }
        rs->deferred[rs->n_deferred++] = t->buf;
        t->buf = NULL;
    }
    slim_tensor_release(t);
}

/* Waits for the run's GPU work, then returns what it freed to the cache. */
static slim_status run_sync(run_state *rs, slim_err *err)
{
    slim_status st = rs->dev->backend->sync(rs->dev, err);
    for (int i = 0; i < rs->n_deferred; i++)
        slim_buffer_unref(rs->deferred[i]);
    rs->n_deferred = 0;
    return st;
}

static void run_state_free(run_state *rs)
{
    slim_err ignored;
    (void)run_sync(rs, &ignored);
    free(rs->deferred);
    if (rs->vals)
        for (int v = 0; v < rs->g->n_values; v++)
            slim_tensor_release(&rs->vals[v]);
    free(rs->vals);
    free(rs->remaining);
    slim_buffer_unref(rs->arena);
    if (rs->plan_owned)
        slim_plan_free((slim_plan *)rs->plan);
}

/* Gives value v its storage: its planned place in the arena when the plan
 * has one of this byte size, its own buffer otherwise. */
static slim_status alloc_value(run_state *rs, int v, slim_device *dev, slim_tensor *t,
                               slim_err *err)
{
    const slim_plan *p = rs->plan;
    int b = p && rs->arena ? p->buffer_of_value[v] : -1;
    if (b < 0 || slim_tensor_nbytes(t) != p->value_bytes[v])
        return slim_tensor_alloc_on(t, dev, err);
    t->data = (char *)rs->arena->ptr + p->buffers[b].offset;
    t->device = slim_device_tag(rs->dev);
    t->buf = rs->arena;
    slim_buffer_ref(rs->arena);
    return SLIM_OK;
}

/* A copy to the host lands in the backend's pinned memory when it has
 * some: the DMA then writes the output itself at the link's full speed,
 * where a pageable destination goes through the driver's own staging into
 * freshly mapped pages (BERT-base fp16 at batch 32, whose 12 MiB float32
 * output copy was 9% of its time on an H100: 3.83 ms pageable, 3.16 ms
 * pinned on an H200, bench/results/gpu_h200_2026-11-27_ab.txt). The block is host memory, charged to the running model like
 * the pageable one it replaces, and goes back to the pinned cache when
 * the caller releases the output. Pinned memory is an optimization: when
 * none can be had the copy goes to pageable memory as before. */
static slim_status alloc_copy_out(run_state *rs, const slim_node *n, slim_device *out_dev,
                                  slim_tensor *t, slim_err *err)
{
    slim_device *pinned = slim_node_device(n)->backend->pinned_host;
    int v = n->out[0];
    const slim_plan *p = rs->plan;
    if (pinned && !(p && rs->arena && p->buffer_of_value[v] >= 0)) {
        slim_buffer *b;
        slim_err ignored = {0};
        if (slim_buffer_new(pinned, slim_tensor_nbytes(t), &b, &ignored) == SLIM_OK) {
            t->buf = b;
            t->data = b->ptr;
            t->device = NULL; /* host memory to every reader */
            return SLIM_OK;
        }
    }
    return alloc_value(rs, v, out_dev, t, err);
}

static slim_status check_input(const slim_value *val, const slim_tensor *t, slim_err *err)
{
    const slim_io_info *info = &val->info;
    /* A value declared with no type at all (some subgraph inputs) takes
     * anything; otherwise tensor, sequence and optional must match. */
    bool untyped = info->kind == SLIM_KIND_TENSOR && info->dtype == SLIM_DTYPE_UNDEFINED &&
                   info->ndim < 0;
    /* A present value stands for an optional holding it (a Loop body's
     * optional input fed by a sequence the previous iteration made). */
    bool as_optional = info->kind == SLIM_KIND_OPTIONAL && t->kind == info->elem_kind;
    if (!untyped && !as_optional && t->kind != info->kind)
        return slim_errf(err, SLIM_ETYPE, "input \"%s\" is a %s, the model expects %s %s",
                         val->name, slim_kind_name(t->kind),
                         info->kind == SLIM_KIND_OPTIONAL ? "an" : "a",
                         slim_kind_name(info->kind));
    if (slim_is_container(t)) {
        const slim_container *c = slim_container_get(t);
        if (!c)
            return slim_errf(err, SLIM_EINVAL, "input \"%s\" has no data", val->name);
        if (info->dtype != SLIM_DTYPE_UNDEFINED && c->dtype != SLIM_DTYPE_UNDEFINED &&
            c->dtype != info->dtype)
            return slim_errf(err, SLIM_ETYPE, "input \"%s\" holds %s tensors, the model "
                             "expects %s", val->name, slim_dtype_name(c->dtype),
                             slim_dtype_name(info->dtype));
        return SLIM_OK;
    }
    if (info->dtype != SLIM_DTYPE_UNDEFINED && t->dtype != info->dtype)
        return slim_errf(err, SLIM_ETYPE, "input \"%s\" has data type %s, the model expects %s",
                         val->name, slim_dtype_name(t->dtype), slim_dtype_name(info->dtype));
    if (t->ndim < 0 || t->ndim > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_ESHAPE, "input \"%s\" has %d dims, at most %d supported",
                         val->name, t->ndim, SLIM_MAX_DIMS);
    if (info->ndim >= 0 && t->ndim != info->ndim) {
        char s[160];
        return slim_errf(err, SLIM_ESHAPE, "input \"%s\" has %d dims, the model expects %d (%s)",
                         val->name, t->ndim, info->ndim,
                         slim_shape_str(info->ndim, info->dims, s, sizeof(s)));
    }
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0)
            return slim_errf(err, SLIM_ESHAPE, "input \"%s\" has negative dimension %d",
                             val->name, d);
        if (info->ndim >= 0 && info->dims[d] >= 0 && info->dims[d] != t->dims[d]) {
            char a[160], b[160];
            return slim_errf(err, SLIM_ESHAPE, "input \"%s\" has shape %s, the model expects %s",
                             val->name, slim_shape_str(t->ndim, t->dims, a, sizeof(a)),
                             slim_shape_str(info->ndim, info->dims, b, sizeof(b)));
        }
    }
    if (slim_tensor_numel(t) > 0 && !t->data)
        return slim_errf(err, SLIM_EINVAL, "input \"%s\" has no data", val->name);
    if (t->dtype == SLIM_STRING)
        return slim__tensor_string_check(t, val->name, err);
    return SLIM_OK;
}


/* Whether a shape's bytes stay under 2^62 (zero dims aside: slim_shape_numel
 * multiplies them in order, so its partial products must fit too). A
 * hostile model can make shape inference multiply dims past int64; that
 * node fails here, before anything sizes a buffer from the shape. */
static bool shape_fits(const slim_tensor *t)
{
    size_t es = slim_dtype_size(t->dtype);
    int64_t bytes = es ? (int64_t)es : 1, cap = (int64_t)1 << 62;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n = t->dims[d];
        if (n <= 0)
            continue;
        if (bytes > cap / n)
            return false;
        bytes *= n;
    }
    return true;
}

/* An inferred output shape a buffer can be sized from: no negative dim
 * (a hostile graph's; its byte count would overflow) and at most 2^62
 * bytes. Runs and planning (slim_model_infer_shapes) both check it. */
static slim_status check_shape_fits(const slim_tensor *t, int k, slim_err *err)
{
    char s[160];
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] < 0)
            return slim_errf(err, SLIM_ESHAPE, "output %d would have negative shape %s", k,
                             slim_shape_str(t->ndim, t->dims, s, sizeof(s)));
    if (shape_fits(t))
        return SLIM_OK;
    return slim_errf(err, SLIM_ESHAPE, "output %d would have shape %s: more than 2^62 bytes", k,
                     slim_shape_str(t->ndim, t->dims, s, sizeof(s)));
}

/* Drops one reader of value v; frees it after its last reader. */
static void release_reader(run_state *rs, int v)
{
    if (v < 0)
        return;
    if (--rs->remaining[v] > 0 || rs->g->values[v].is_output)
        return;
    release_value(rs, &rs->vals[v]);
}

/* A string output after its kernel ran: bytes of its own (string_tensor.h), so
 * that it outlives the inputs its slots may have been copied from. One
 * not made by the allocator (control flow passing a weight through) is
 * replaced by a copy. */
static slim_status own_strings(slim_tensor *t, slim_err *err)
{
    if (t && slim_is_container(t) && slim_container_get(t)) {
        /* A sequence's new tensors (SplitToSequence's) may point at the
         * input too; those made by the allocator get bytes of their own. */
        for (int i = 0, n = slim_container_len(t); i < n; i++) {
            slim_tensor *e = (slim_tensor *)slim_container_at(t, i);
            if (e->dtype == SLIM_STRING && slim__tensor_string_is_owned(e)) {
                slim_status st = slim__tensor_string_own(e, err);
                if (st)
                    return st;
            }
        }
        return SLIM_OK;
    }
    if (!t || t->dtype != SLIM_STRING || t->kind != SLIM_KIND_TENSOR)
        return SLIM_OK;
    if (slim__tensor_string_is_owned(t))
        return slim__tensor_string_own(t, err);
    slim_tensor copy;
    slim_status st = slim_tensor_string_copy(&copy, t, err);
    if (st)
        return st;
    slim_tensor_release(t);
    *t = copy;
    return SLIM_OK;
}

/* Strings reach only the ops that handle them (string_tensor.h), so no
 * kernel reads a slot as numbers: the first string among ts that op does
 * not take is refused, naming it. */
static slim_status check_strings(const slim_node *n, int count, const slim_tensor *const *ts,
                                 const char *side, slim_err *err)
{
    for (int k = 0; k < count; k++)
        if (ts[k] && ts[k]->dtype == SLIM_STRING && !slim__op_takes_strings(n->op))
            return slim_errf(err, SLIM_EUNSUPPORTED, "%s %d is a string tensor; %s does not "
                             "take strings", side, k, n->op->op_type);
    return SLIM_OK;
}

static slim_status run_node(run_state *rs, const slim_node *n, slim_err *err)
{
    const slim_tensor *in[SLIM_MAX_NODE_IO];
    slim_tensor *out[SLIM_MAX_NODE_IO];
    if (n->n_in > SLIM_MAX_NODE_IO || n->n_out > SLIM_MAX_NODE_IO)
        return slim_errf(err, SLIM_EUNSUPPORTED, "more than %d inputs or outputs",
                         SLIM_MAX_NODE_IO);
    for (int k = 0; k < n->n_in; k++)
        in[k] = n->in[k] >= 0 ? &rs->vals[n->in[k]] : NULL;
    for (int k = 0; k < n->n_out; k++) {
        out[k] = n->out[k] >= 0 ? &rs->vals[n->out[k]] : NULL;
        if (out[k]) {
            release_value(rs, out[k]);
            memset(out[k], 0, sizeof(*out[k]));
        }
    }
    slim_device *dev = slim_node_device(n);
    slim_op_ctx ctx = {
        .node = n, .state = n->op_state, .n_in = n->n_in, .in = in,
        .n_out = n->n_out, .out = out, .err = err,
        .row_invariant = run_mode.row_invariant, .fp32_strict = run_mode.fp32_strict,
    };
    /* Sequences and optionals reach only the ops written for them; a
     * graph that feeds one to any other op is refused here, so no tensor
     * kernel ever reads a container header as tensor data. */
    for (int k = 0; k < n->n_in; k++) {
        if (!slim_is_container(in[k]))
            continue;
        if (!slim_container_get(in[k]))
            return slim_errf(err, SLIM_EINTERNAL, "input %d (a %s) has no data", k,
                             slim_kind_name(in[k]->kind));
        if (!(n->op->flags & SLIM_OP_CONTAINERS))
            return slim_errf(err, SLIM_ETYPE, "input %d is a %s; the operator takes tensors", k,
                             slim_kind_name(in[k]->kind));
        if ((n->op->flags & SLIM_OP_ALIAS0) && k == 0) {
            if (n->n_out != 1 || n->n_in != 1)
                return slim_errf(err, SLIM_EINTERNAL, "a view of a %s takes one input",
                                 slim_kind_name(in[k]->kind));
            if (out[0])
                slim_container_ref(in[0], out[0]);
            return SLIM_OK;
        }
    }
    slim_status sst = check_strings(n, n->n_in, in, "input", err);
    if (sst)
        return sst;
    if (n->op->flags & SLIM_OP_OWN_OUTPUTS) {
        /* Control flow: exec gives each output its shape and storage. */
        slim_status st = dev->backend->exec(dev, slim_node_kernel(n), &ctx);
        for (int k = 0; !st && k < n->n_out; k++)
            st = own_strings(out[k], err);
        for (int k = 0; !st && k < n->n_out; k++) {
            if (!out[k])
                continue;
            if (slim_is_container(out[k]) ? !slim_container_get(out[k])
                                          : (out[k]->dtype == SLIM_DTYPE_UNDEFINED ||
                                             out[k]->ndim < 0 || out[k]->ndim > SLIM_MAX_DIMS ||
                                             (slim_tensor_numel(out[k]) > 0 && !out[k]->data)))
                st = slim_errf(err, SLIM_EINTERNAL, "output %d was left undefined", k);
        }
        return st;
    }
    slim_status st = n->op->infer(&ctx);
    if (st)
        return st;
    for (int k = 0; k < n->n_out; k++) {
        slim_tensor *t = out[k];
        if (!t)
            continue;
        if (t->dtype == SLIM_DTYPE_UNDEFINED || t->ndim < 0 || t->ndim > SLIM_MAX_DIMS)
            return slim_errf(err, SLIM_EINTERNAL, "shape inference left output %d undefined", k);
        if ((st = check_shape_fits(t, k, err)))
            return st;
    }
    if ((st = check_strings(n, n->n_out, (const slim_tensor *const *)out, "output", err)))
        return st;
    bool alias = (n->op->flags & SLIM_OP_ALIAS0) && n->n_in > 0 && in[0] && out[0];
    if (alias) {
        if (slim_tensor_nbytes(out[0]) != slim_tensor_nbytes(in[0]))
            return slim_errf(err, SLIM_EINTERNAL, "view output has a different byte size");
        out[0]->data = in[0]->data;
        out[0]->buf = in[0]->buf;
        out[0]->device = in[0]->device;
        slim_buffer_ref(out[0]->buf);
    }
    slim_device *out_dev = slim_node_out_device(n);
    bool d2h = (n->op->flags & SLIM_OP_COPY_D2H) && !alias && n->n_out == 1 && out[0];
    if (d2h && (st = alloc_copy_out(rs, n, out_dev, out[0], err)))
        return st;
    for (int k = alias ? 1 : 0; !d2h && k < n->n_out; k++)
        if (out[k] && (st = alloc_value(rs, n->out[k], out_dev, out[k], err)))
            return st;
    if (n->op->flags & (SLIM_OP_COPY_H2D | SLIM_OP_COPY_D2H))
        return dev->backend->copy(dev, out[0]->data, in[0]->data, slim_tensor_nbytes(out[0]),
                                  (n->op->flags & SLIM_OP_COPY_H2D) ? SLIM_COPY_H2D
                                                                    : SLIM_COPY_D2H, err);
    if (alias && n->n_out == 1)
        return SLIM_OK;
    st = dev->backend->exec(dev, slim_node_kernel(n), &ctx);
    for (int k = alias ? 1 : 0; !st && k < n->n_out; k++)
        st = own_strings(out[k], err);
    return st;
}

/* Hands a graph output to the caller: moved when the run owns it, copied
 * when it is borrowed (a caller input or a weight passed straight through).
 * The planner never puts an output in the arena; were one there, it is
 * copied too, so the arena never outlives the run. */
static slim_status take_output(run_state *rs, int v, bool last_use, slim_tensor *dst, slim_err *err)
{
    slim_tensor *src = &rs->vals[v];
    *dst = *src;
    if (slim_is_container(src)) {
        /* Never in the arena; a borrowed one (an input passed straight
         * through) gets a reference of its own. */
        if (!slim_container_get(src))
            return slim_errf(err, SLIM_EINTERNAL, "output \"%s\" has no data",
                             rs->g->values[v].name);
        if (last_use && src->buf) {
            src->buf = NULL;
            src->data = NULL;
        } else {
            slim_container_ref(src, dst);
        }
        return SLIM_OK;
    }
    if (src->buf && src->buf != rs->arena) {
        if (last_use) {
            src->buf = NULL;
            src->data = NULL;
        } else {
            slim_buffer_ref(src->buf);
        }
        return SLIM_OK;
    }
    dst->buf = NULL;
    dst->data = NULL;
    if (src->dtype == SLIM_STRING)
        return slim_tensor_string_copy(dst, src, err);
    slim_status st = slim_tensor_alloc(dst, err);
    if (st)
        return st;
    if (slim_tensor_nbytes(dst))
        memcpy(dst->data, src->data, slim_tensor_nbytes(dst));
    return SLIM_OK;
}

/* Looks up the plan for the actual input shapes and takes the run's arena.
 * A plan that cannot be made for a reason other than memory (shape
 * inference rejecting the inputs) leaves the run unplanned: the failing
 * node then reports the same problem with the run's own context. */
static slim_status use_plan(const slim_model *m, run_state *rs, slim_err *err)
{
    const slim_graph *g = rs->g;
    slim_tensor *sig = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(slim_tensor));
    if (!sig)
        return slim_errf(err, SLIM_ENOMEM, "out of memory starting a run");
    for (int i = 0; i < g->n_inputs; i++) {
        sig[i] = rs->vals[g->inputs[i]];
        sig[i].data = NULL;
        sig[i].buf = NULL;
    }
    slim_err plan_err = {0};
    slim_status st = slim_model_plan(m, sig, &rs->plan, &rs->plan_owned, &plan_err);
    free(sig);
    if (st == SLIM_ENOMEM || st == SLIM_EOOM) {
        if (err)
            *err = plan_err;
        return st;
    }
    if (st || !rs->plan || rs->plan->arena_bytes == 0)
        return SLIM_OK;
    st = slim_buffer_new(rs->dev, rs->plan->arena_bytes, &rs->arena, err);
    if (st) {
        rs->arena = NULL;
        slim_err_prefix(err, "activation arena of %zu bytes: ", rs->plan->arena_bytes);
    }
    return st;
}

slim_status slim_model_run(const slim_model *m, int n_inputs,
                           const char *const *names, const slim_tensor *inputs,
                           slim_tensor **outputs, int *n_outputs, slim_err *err)
{
    const slim_graph *g = m->graph;
    *outputs = NULL;
    *n_outputs = 0;
    run_state rs = {.g = g, .dev = slim_device_or_cpu(m->device)};
    slim_tensor *result = NULL;
    /* A subgraph's run charges its parent's account and keeps its mode. */
    slim_mem_account *prev_account = m->nested ? slim_mem_account_current()
                                               : slim_mem_account_enter(m->account);
    run_mode_t prev_mode = run_mode;
    if (!m->nested)
        run_mode = (run_mode_t){.row_invariant = m->batch_invariant,
                                .fp32_strict = m->fp32_strict};
    rs.vals = calloc(g->n_values ? g->n_values : 1, sizeof(slim_tensor));
    rs.remaining = calloc(g->n_values ? g->n_values : 1, sizeof(int));
    slim_status st;
    if (!rs.vals || !rs.remaining) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory starting a run");
        goto fail;
    }
    for (int v = 0; v < g->n_values; v++) {
        rs.remaining[v] = g->values[v].n_consumers;
        if (g->values[v].kind == SLIM_VALUE_INITIALIZER) {
            rs.vals[v] = g->values[v].init;
            rs.vals[v].buf = NULL; /* borrowed: weights are shared, read-only */
        }
    }
    bool *given = calloc(g->n_values ? g->n_values : 1, sizeof(bool));
    if (!given) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory starting a run");
        goto fail;
    }
    for (int i = 0; i < n_inputs; i++) {
        int v = slim_graph_find_value(g, names[i]);
        if (v < 0 || g->values[v].kind != SLIM_VALUE_INPUT) {
            free(given);
            st = slim_errf(err, SLIM_ENOTFOUND, "the model has no input named \"%s\"", names[i]);
            goto fail;
        }
        if ((st = check_input(&g->values[v], &inputs[i], err))) {
            free(given);
            goto fail;
        }
        rs.vals[v] = inputs[i];
        rs.vals[v].buf = NULL; /* borrowed from the caller */
        given[v] = true;
    }
    for (int i = 0; i < g->n_inputs; i++)
        if (!given[g->inputs[i]]) {
            st = slim_errf(err, SLIM_EINVAL, "input \"%s\" is missing",
                           g->values[g->inputs[i]].name);
            free(given);
            goto fail;
        }
    free(given);
    if ((st = use_plan(m, &rs, err)) || (st = slim_cancel_status(err)))
        goto fail;

    bool profile = slim_profile_enabled();
    for (int i = 0; i < g->n_nodes; i++) {
        const slim_node *n = &g->nodes[i];
        struct timespec t0, t1;
        if (profile)
            clock_gettime(CLOCK_MONOTONIC, &t0);
        st = run_node(&rs, n, err);
        if (profile && !st) {
            slim_device *dev = slim_node_device(n);
            st = dev->backend->sync(dev, err);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            size_t bytes = 0;
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] >= 0)
                    bytes += slim_tensor_nbytes(&rs.vals[n->out[k]]);
            slim_profile_add_node(n->name, n->op_type, dev->name,
                                  (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                                      (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
                                  bytes);
        }
        /* A cancelled node may have stopped early: its outputs are not
         * trusted, so the check comes before anything reads them. */
        if (!st && (st = slim_cancel_status(err)))
            goto fail;
        if (st) {
            slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(n));
            goto fail;
        }
        for (int k = 0; k < n->n_in; k++)
            release_reader(&rs, n->in[k]);
        /* Outputs nobody reads (an unused Indices, say) go at once. */
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v >= 0 && g->values[v].n_consumers == 0 && !g->values[v].is_output)
                release_value(&rs, &rs.vals[v]);
        }
    }
    /* Faults inside GPU kernels surface here, before outputs are taken. */
    if ((st = run_sync(&rs, err)))
        goto fail;

    result = calloc(g->n_outputs ? g->n_outputs : 1, sizeof(slim_tensor));
    if (!result) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory collecting outputs");
        goto fail;
    }
    for (int k = 0; k < g->n_outputs; k++) {
        int v = g->outputs[k];
        bool last = true;
        for (int j = k + 1; j < g->n_outputs; j++)
            if (g->outputs[j] == v)
                last = false;
        if ((st = take_output(&rs, v, last, &result[k], err))) {
            slim_tensors_free(result, k);
            result = NULL;
            goto fail;
        }
    }
    run_state_free(&rs);
    slim_mem_account_enter(prev_account);
    run_mode = prev_mode;
    *outputs = result;
    *n_outputs = g->n_outputs;
    return SLIM_OK;
fail:
    run_state_free(&rs);
    slim_mem_account_enter(prev_account);
    run_mode = prev_mode;
    return st;
}

/* ---- planning: shapes without running -------------------------------- */

/* Small constant subgraphs (shape arithmetic) are evaluated while planning
 * so that Reshape targets and friends are known; anything larger waits. */
#define SLIM_PLAN_FOLD_BYTES 4096

slim_status slim_model_infer_shapes(const slim_model *m, const slim_tensor *input_shapes,
                                    slim_tensor *shapes, slim_err *err)
{
    const slim_graph *g = m->graph;
    slim_tensor *vals = calloc(g->n_values ? g->n_values : 1, sizeof(slim_tensor));
    if (!vals)
        return slim_errf(err, SLIM_ENOMEM, "out of memory planning shapes");
    for (int v = 0; v < g->n_values; v++) {
        vals[v].ndim = -1;
        if (g->values[v].kind == SLIM_VALUE_INITIALIZER) {
            vals[v] = g->values[v].init;
            vals[v].buf = NULL;
            if (vals[v].device) { /* GPU weights: no host data to fold with */
                vals[v].data = NULL;
                vals[v].device = NULL;
            }
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        vals[g->inputs[i]] = input_shapes[i];
        vals[g->inputs[i]].data = NULL;
        vals[g->inputs[i]].buf = NULL;
    }
    slim_status st = SLIM_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) {
        const slim_node *n = &g->nodes[i];
        const slim_tensor *in[SLIM_MAX_NODE_IO];
        slim_tensor *out[SLIM_MAX_NODE_IO];
        bool known = n->n_in <= SLIM_MAX_NODE_IO && n->n_out <= SLIM_MAX_NODE_IO;
        bool all_data = true;
        for (int k = 0; known && k < n->n_in; k++) {
            in[k] = n->in[k] >= 0 ? &vals[n->in[k]] : NULL;
            if (in[k] && in[k]->ndim < 0)
                known = false;
            /* Containers are known only at run time. */
            if (slim_is_container(in[k]))
                known = false;
            if (in[k] && !in[k]->data && slim_tensor_numel(in[k]) > 0)
                all_data = false;
        }
        for (int k = 0; k < n->n_out && k < SLIM_MAX_NODE_IO; k++) {
            out[k] = n->out[k] >= 0 ? &vals[n->out[k]] : NULL;
            if (out[k]) {
                memset(out[k], 0, sizeof(*out[k]));
                out[k]->ndim = -1;
            }
        }
        if (!known)
            continue;
        slim_op_ctx ctx = {.node = n, .state = n->op_state, .n_in = n->n_in, .in = in,
                           .n_out = n->n_out, .out = out, .err = err,
                           .row_invariant = run_mode.row_invariant,
                           .fp32_strict = run_mode.fp32_strict};
        st = n->op->infer(&ctx);
        if (st == SLIM_ENEEDVALUE) {
            st = SLIM_OK;
            for (int k = 0; k < n->n_out; k++)
                if (out[k])
                    out[k]->ndim = -1;
            continue;
        }
        for (int k = 0; !st && k < n->n_out; k++)
            if (out[k] && out[k]->ndim >= 0 && out[k]->ndim <= SLIM_MAX_DIMS)
                st = check_shape_fits(out[k], k, err);
        if (st) {
            slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(n));
            break;
        }
        if ((n->op->flags & SLIM_OP_ALIAS0) && in[0] && out[0] && in[0]->data) {
            out[0]->data = in[0]->data; /* a view; the source stays alive */
            continue;
        }
        bool fold = (n->op->flags & SLIM_OP_SHAPE_ONLY) || all_data;
        size_t bytes = 0;
        for (int k = 0; k < n->n_out; k++)
            if (out[k])
                bytes += slim_tensor_nbytes(out[k]);
        if (!fold || bytes > SLIM_PLAN_FOLD_BYTES || !n->op->exec ||
            (n->op->flags & SLIM_OP_ALIAS0))
            continue;
        for (int k = 0; k < n->n_out && !st; k++)
            if (out[k])
                st = slim_tensor_alloc(out[k], err);
        /* Folded on the host whatever the node's device: the values only
         * feed shapes here. */
        slim_device *cpu = slim_device_cpu();
        if (!st && cpu->backend->exec(cpu, n->op, &ctx) != SLIM_OK)
            for (int k = 0; k < n->n_out; k++)
                if (out[k])
                    slim_tensor_release(out[k]);
        st = SLIM_OK;
    }
    for (int v = 0; v < g->n_values; v++) {
        shapes[v] = vals[v];
        shapes[v].data = NULL;
        shapes[v].buf = NULL;
        slim_tensor_release(&vals[v]);
    }
    free(vals);
    return st;
}
