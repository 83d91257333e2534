/*
 * sequence.c - sequence and optional operators.
 *
 * SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
 * SequenceAt, SequenceLength, ConcatFromSequence, SplitToSequence,
 * SequenceMap, Optional, OptionalHasElement, OptionalGetElement.
 *
 * Their values are containers (runtime/container.h), known only at run
 * time, so every op here gives its outputs storage itself
 * (SLIM_OP_OWN_OUTPUTS) and nothing downstream of a sequence is planned in
 * the arena. Containers never change once built: SequenceInsert and
 * SequenceErase make a new one whose slots share the old elements' buffers,
 * and SequenceAt's output is the element's buffer by reference. Every
 * input's kind, dtype and index is checked here, because a graph may wire
 * anything to anything: a wrong one is an error naming it.
 */
#include "container.h"
#include "kernel.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

static slim_status need_value(slim_op_ctx *ctx)
{
    return slim_errf(ctx->err, SLIM_ENEEDVALUE, "sequences are known only at run time");
}

/* Input k must be a sequence (or, with allow_tensor, anything). */
static slim_status get_seq(slim_op_ctx *ctx, int k, const char *what,
                           const slim_container **out)
{
    const slim_tensor *t = k < ctx->n_in ? ctx->in[k] : NULL;
    if (!t)
        return slim_errf(ctx->err, SLIM_EINVAL, "%s is required", what);
    if (t->kind != SLIM_KIND_SEQUENCE || !(*out = slim_container_get(t)))
        return slim_errf(ctx->err, SLIM_ETYPE, "%s must be a sequence, it is a %s", what,
                         slim_kind_name(t->kind));
    return SLIM_OK;
}

/* Input k, a tensor (not a container), or NULL when absent. */
static slim_status get_tensor(slim_op_ctx *ctx, int k, const char *what, bool required,
                              const slim_tensor **out)
{
    *out = k < ctx->n_in ? ctx->in[k] : NULL;
    if (!*out)
        return required ? slim_errf(ctx->err, SLIM_EINVAL, "%s is required", what) : SLIM_OK;
    if (slim_is_container(*out))
        return slim_errf(ctx->err, SLIM_ETYPE, "%s must be a tensor, it is a %s", what,
                         slim_kind_name((*out)->kind));
    return SLIM_OK;
}

/* A position input: one int32/int64 value in [-n, n - 1], or [-n, n] when
 * end_ok (an insertion point), made non-negative. */
static slim_status read_position(slim_op_ctx *ctx, const slim_tensor *t, int n, bool end_ok,
                                 int *pos)
{
    if (t->dtype != SLIM_I32 && t->dtype != SLIM_I64)
        return slim_errf(ctx->err, SLIM_ETYPE, "position must be int32 or int64, it is %s",
                         slim_dtype_name(t->dtype));
    if (slim_tensor_numel(t) != 1 || t->ndim > 1)
        return slim_errf(ctx->err, SLIM_ESHAPE, "position must be a scalar");
    int64_t p = slim_load_i64(t->dtype, t->data, 0);
    int64_t hi = end_ok ? n : n - 1;
    if (p < -(int64_t)n || p > hi)
        return slim_errf(ctx->err, SLIM_EINVAL, "position %lld is out of range for a sequence "
                         "of %d tensor(s) (valid: %lld to %lld)", (long long)p, n,
                         (long long)-n, (long long)hi);
    *pos = (int)(p < 0 ? p + n : p);
    return SLIM_OK;
}

/* A new int64 or bool scalar output. */
static slim_status scalar_out(slim_op_ctx *ctx, slim_dtype dt, int64_t v)
{
    slim_tensor *o = ctx->out[0];
    if (!o)
        return SLIM_OK;
    memset(o, 0, sizeof(*o));
    o->dtype = dt;
    slim_status st = slim_tensor_alloc(o, ctx->err);
    if (!st)
        slim_store_i64(dt, o->data, 0, v);
    return st;
}

/* ---- SequenceEmpty, SequenceConstruct ------------------------------------ */

static slim_status empty_exec(slim_op_ctx *ctx)
{
    int64_t code = slim_attr_int(ctx->node, "dtype", 1);
    slim_dtype dt = code >= 0 && code < 64 ? slim_dtype_from_onnx((int)code)
                                           : SLIM_DTYPE_UNDEFINED;
    if (dt == SLIM_DTYPE_UNDEFINED)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "dtype %lld is not a supported tensor type",
                         (long long)code);
    if (!ctx->out[0])
        return SLIM_OK;
    return slim_container_new(SLIM_KIND_SEQUENCE, dt, 0, ctx->out[0], ctx->err);
}

static slim_status construct_exec(slim_op_ctx *ctx)
{
    slim_tensor seq;
    slim_status st = slim_container_new(SLIM_KIND_SEQUENCE, SLIM_DTYPE_UNDEFINED, ctx->n_in,
                                        &seq, ctx->err);
    for (int k = 0; !st && k < ctx->n_in; k++) {
        const slim_tensor *t;
        char what[32];
        snprintf(what, sizeof(what), "input %d", k);
        if (!(st = get_tensor(ctx, k, what, true, &t)) &&
            (st = slim_container_add_copy(&seq, t, ctx->err)))
            slim_err_prefix(ctx->err, "input %d: ", k);
    }
    if (st || !ctx->out[0]) {
        slim_tensor_release(&seq);
        return st;
    }
    *ctx->out[0] = seq;
    return SLIM_OK;
}

/* ---- SequenceInsert, SequenceErase, SequenceAt, SequenceLength ----------- */

/* A new sequence of c's elements, leaving out index skip (-1: none) and
 * with room for `extra` more; elements are shared, not copied. */
static slim_status seq_copy(slim_op_ctx *ctx, const slim_container *c, int skip, int extra,
                            int upto, slim_tensor *out)
{
    slim_status st = slim_container_new(SLIM_KIND_SEQUENCE, c->dtype,
                                        c->n - (skip >= 0) + extra, out, ctx->err);
    for (int i = 0; !st && i < upto; i++)
        if (i != skip)
            st = slim_container_add_shared(out, &c->elems[i], ctx->err);
    return st;
}

static slim_status insert_exec(slim_op_ctx *ctx)
{
    const slim_container *c;
    const slim_tensor *t, *p;
    slim_status st;
    if ((st = get_seq(ctx, 0, "input_sequence", &c)) ||
        (st = get_tensor(ctx, 1, "tensor", true, &t)) ||
        (st = get_tensor(ctx, 2, "position", false, &p)))
        return st;
    if (c->n >= SLIM_CONTAINER_MAX)
        return slim_errf(ctx->err, SLIM_EINVAL, "the sequence already holds %d tensors, the "
                         "most supported", c->n);
    int pos = c->n;
    if (p && (st = read_position(ctx, p, c->n, true, &pos)))
        return st;
    slim_tensor seq;
    if (!(st = seq_copy(ctx, c, -1, 1, pos, &seq)) &&
        !(st = slim_container_add_copy(&seq, t, ctx->err)))
        for (int i = pos; !st && i < c->n; i++)
            st = slim_container_add_shared(&seq, &c->elems[i], ctx->err);
    if (st || !ctx->out[0]) {
        slim_tensor_release(&seq);
        return st;
    }
    *ctx->out[0] = seq;
    return SLIM_OK;
}

static slim_status erase_exec(slim_op_ctx *ctx)
{
    const slim_container *c;
    const slim_tensor *p;
    slim_status st;
    if ((st = get_seq(ctx, 0, "input_sequence", &c)) ||
        (st = get_tensor(ctx, 1, "position", false, &p)))
        return st;
    if (c->n == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "cannot erase from an empty sequence");
    int pos = c->n - 1;
    if (p && (st = read_position(ctx, p, c->n, false, &pos)))
        return st;
    slim_tensor seq;
    if ((st = seq_copy(ctx, c, pos, 0, c->n, &seq)) || !ctx->out[0]) {
        slim_tensor_release(&seq);
        return st;
    }
    *ctx->out[0] = seq;
    return SLIM_OK;
}

static slim_status at_exec(slim_op_ctx *ctx)
{
    const slim_container *c;
    const slim_tensor *p;
    slim_status st;
    int pos;
    if ((st = get_seq(ctx, 0, "input_sequence", &c)) ||
        (st = get_tensor(ctx, 1, "position", true, &p)) ||
        (st = read_position(ctx, p, c->n, false, &pos)))
        return st;
    if (ctx->out[0])
        slim_value_share(&c->elems[pos], ctx->out[0]);
    return SLIM_OK;
}

static slim_status length_exec(slim_op_ctx *ctx)
{
    const slim_container *c;
    slim_status st = get_seq(ctx, 0, "input_sequence", &c);
    return st ? st : scalar_out(ctx, SLIM_I64, c->n);
}

/* ---- ConcatFromSequence -------------------------------------------------- */

static slim_status concat_exec(slim_op_ctx *ctx)
{
    const slim_container *c;
    slim_status st = get_seq(ctx, 0, "input_sequence", &c);
    if (st)
        return st;
    if (c->n == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "cannot concatenate an empty sequence");
    const bool new_axis = slim_attr_int(ctx->node, "new_axis", 0) != 0;
    const slim_tensor *f = &c->elems[0];
    const int r = f->ndim, out_rank = r + new_axis;
    if (out_rank > SLIM_MAX_DIMS || (!new_axis && r == 0))
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot concatenate rank %d tensors%s", r,
                         new_axis ? " along a new axis" : "");
    const slim_attr *aa = slim_node_attr(ctx->node, "axis");
    if (!aa || aa->type != SLIM_ATTR_INT)
        return slim_errf(ctx->err, SLIM_EINVAL, "attribute axis (an int) is required");
    int ax;
    if ((st = slim_norm_axis(aa->i, out_rank, &ax, ctx->err)))
        return st;
    /* Every element has the first one's dtype and dims, but for the axis
     * when it is an existing one. */
    int64_t total = 0;
    for (int i = 0; i < c->n; i++) {
        const slim_tensor *e = &c->elems[i];
        bool ok = e->dtype == f->dtype && e->ndim == r;
        for (int d = 0; ok && d < r; d++)
            ok = e->dims[d] == f->dims[d] || (!new_axis && d == ax);
        if (!ok) {
            char a[160], b[160];
            return slim_errf(ctx->err, SLIM_ESHAPE, "tensor %d is %s %s, tensor 0 is %s %s: "
                             "they differ outside axis %d", i, slim_dtype_name(e->dtype),
                             slim_shape_str(e->ndim, e->dims, a, sizeof(a)),
                             slim_dtype_name(f->dtype),
                             slim_shape_str(f->ndim, f->dims, b, sizeof(b)), ax);
        }
        total += new_axis ? 1 : e->dims[ax];
    }
    slim_tensor *o = ctx->out[0];
    if (!o)
        return SLIM_OK;
    int64_t dims[SLIM_MAX_DIMS], outer = 1;
    /* A new axis is one the elements do not have; an existing one stands
     * in their dims too, so it is stepped over there (axis 0 of [1,2]
     * pieces gives [n,2], not [n,1]). */
    for (int d = 0, k = 0; d < out_rank; d++) {
        dims[d] = d == ax ? total : f->dims[k];
        k += d != ax || !new_axis;
    }
    for (int d = 0; d < ax; d++)
        outer *= dims[d];
    memset(o, 0, sizeof(*o));
    slim_tensor_set_shape(o, f->dtype, out_rank, dims);
    int64_t bytes = 1;
    for (int d = 0; d < out_rank; d++)
        if (dims[d] > 0 && __builtin_mul_overflow(bytes, dims[d], &bytes))
            return slim_errf(ctx->err, SLIM_ESHAPE, "the result would be too large");
    if ((st = slim_tensor_alloc(o, ctx->err)))
        return st;
    /* Per outer index, each element's slab follows the previous one's. */
    size_t row_out = slim_tensor_nbytes(o) / (size_t)(outer ? outer : 1), at = 0;
    for (int i = 0; i < c->n && outer; i++) {
        if (slim_cancel_poll()) {
            slim_tensor_release(o);
            return slim_cancel_status(ctx->err);
        }
        const slim_tensor *e = &c->elems[i];
        size_t slab = slim_tensor_nbytes(e) / (size_t)outer;
        for (int64_t q = 0; q < outer && slab; q++)
            memcpy((uint8_t *)o->data + (size_t)q * row_out + at,
                   (const uint8_t *)e->data + (size_t)q * slab, slab);
        at += slab;
    }
    return SLIM_OK;
}

/* ---- SplitToSequence ----------------------------------------------------- */

static slim_status split_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x, *sp;
    slim_status st;
    if ((st = get_tensor(ctx, 0, "input", true, &x)) ||
        (st = get_tensor(ctx, 1, "split", false, &sp)))
        return st;
    int ax;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "cannot split a scalar");
    if ((st = slim_norm_axis(slim_attr_int(ctx->node, "axis", 0), x->ndim, &ax, ctx->err)))
        return st;
    const int64_t len = x->dims[ax];
    bool keep = slim_attr_int(ctx->node, "keepdims", 1) != 0;
    /* The chunk lengths along the axis. */
    int64_t n = 0, chunk = 1;
    int64_t *lens = NULL;
    if (sp) {
        if (sp->dtype != SLIM_I32 && sp->dtype != SLIM_I64)
            return slim_errf(ctx->err, SLIM_ETYPE, "split must be int32 or int64");
        if (sp->ndim > 1)
            return slim_errf(ctx->err, SLIM_ESHAPE, "split must be a scalar or 1-D");
        keep = true; /* keepdims applies only without split */
        if (sp->ndim == 0) {
            chunk = slim_load_i64(sp->dtype, sp->data, 0);
            if (chunk <= 0)
                return slim_errf(ctx->err, SLIM_EINVAL, "split %lld must be positive",
                                 (long long)chunk);
            n = len / chunk + (len % chunk != 0);
        } else {
            n = sp->dims[0];
        }
    } else {
        n = len;
    }
    if (n > SLIM_CONTAINER_MAX)
        return slim_errf(ctx->err, SLIM_EINVAL, "%lld pieces: at most %d supported", (long long)n,
                         SLIM_CONTAINER_MAX);
    /* raw: at most SLIM_CONTAINER_MAX lengths */
    if (!(lens = malloc(sizeof(int64_t) * (size_t)(n ? n : 1))))
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        lens[i] = sp && sp->ndim == 1 ? slim_load_i64(sp->dtype, sp->data, i)
                  : sp ? (i == n - 1 && len % chunk ? len % chunk : chunk) : 1;
        if (lens[i] < 0 || lens[i] > len - sum) {
            free(lens);
            return slim_errf(ctx->err, SLIM_EINVAL, "split lengths do not fit the axis of "
                             "length %lld", (long long)len);
        }
        sum += lens[i];
    }
    if (sum != len) {
        free(lens);
        return slim_errf(ctx->err, SLIM_EINVAL, "split lengths sum to %lld, the axis has %lld",
                         (long long)sum, (long long)len);
    }
    int64_t outer = 1, inner = slim_dtype_size(x->dtype);
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    for (int d = ax + 1; d < x->ndim; d++)
        inner *= x->dims[d];
    slim_tensor seq;
    st = slim_container_new(SLIM_KIND_SEQUENCE, x->dtype, (int)n, &seq, ctx->err);
    for (int64_t i = 0, off = 0; !st && i < n; off += lens[i], i++) {
        if (slim_cancel_poll() && (st = slim_cancel_status(ctx->err)))
            break;
        slim_tensor e = {0};
        int64_t dims[SLIM_MAX_DIMS];
        int nd = 0;
        for (int d = 0; d < x->ndim; d++) {
            if (d == ax && !keep)
                continue;
            dims[nd++] = d == ax ? lens[i] : x->dims[d];
        }
        slim_tensor_set_shape(&e, x->dtype, nd, dims);
        if ((st = slim_tensor_alloc(&e, ctx->err)))
            break;
        size_t slab = (size_t)(lens[i] * inner);
        for (int64_t q = 0; q < outer && slab; q++)
            memcpy((uint8_t *)e.data + (size_t)q * slab,
                   (const uint8_t *)x->data + (size_t)(q * len + off) * (size_t)inner, slab);
        st = slim_container_take(&seq, &e, ctx->err);
    }
    free(lens);
    if (st || !ctx->out[0]) {
        slim_tensor_release(&seq);
        return st;
    }
    *ctx->out[0] = seq;
    return SLIM_OK;
}

/* ---- Optional, OptionalHasElement, OptionalGetElement ------------------- */

static slim_status optional_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    if (x && x->kind == SLIM_KIND_OPTIONAL)
        return slim_errf(ctx->err, SLIM_ETYPE, "an optional cannot hold an optional");
    slim_tensor opt;
    slim_status st = slim_container_new(SLIM_KIND_OPTIONAL, x ? x->dtype : SLIM_DTYPE_UNDEFINED,
                                        1, &opt, ctx->err);
    if (!st && x)
        st = slim_container_add_copy(&opt, x, ctx->err);
    if (st || !ctx->out[0]) {
        slim_tensor_release(&opt);
        return st;
    }
    *ctx->out[0] = opt;
    return SLIM_OK;
}

static slim_status has_element_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    /* An absent input is an empty optional; a tensor or a sequence is one
     * that holds it (opset 18). */
    bool has = x && (x->kind != SLIM_KIND_OPTIONAL || slim_container_len(x) > 0);
    return scalar_out(ctx, SLIM_BOOL, has);
}

static slim_status get_element_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    if (!x)
        return slim_errf(ctx->err, SLIM_EINVAL, "input is required");
    slim_tensor *o = ctx->out[0];
    if (x->kind != SLIM_KIND_OPTIONAL) {
        /* A tensor or a sequence is its own element (opset 18). */
        if (!o)
            return SLIM_OK;
        if (slim_is_container(x)) {
            slim_container_ref(x, o);
            return SLIM_OK;
        }
        slim_tensor_set_like(o, x);
        slim_status st = slim_tensor_alloc(o, ctx->err);
        if (!st && slim_tensor_nbytes(o))
            memcpy(o->data, x->data, slim_tensor_nbytes(o));
        return st;
    }
    const slim_tensor *e = slim_container_at(x, 0);
    if (!e)
        return slim_errf(ctx->err, SLIM_EINVAL, "the optional is empty: it has no element to get");
    if (o)
        slim_value_share(e, o);
    return SLIM_OK;
}

/* ---- SequenceMap ------------------------------------------------------- */

/* body(x_1..x_M) -> (y_1..y_K): call i reads element i of each sequence
 * input and the whole of each tensor input; output k collects y_k. */
typedef struct {
    slim_model *m;
    const char **names;
} map_state;

static void map_release(void *p)
{
    map_state *st = p;
    if (!st)
        return;
    slim_model_free(st->m);
    free(st->names);
    free(st);
}

static slim_status map_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "body");
    if (!a || a->type != SLIM_ATTR_GRAPH || !a->g)
        return slim_errf(err, SLIM_EINVAL, "attribute body (a graph) is required");
    /* raw: fixed-size load-time state, freed with the model */
    map_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = slim__model_from_subgraph(a->g, &st->m, err);
    if (s) {
        free(st);
        return slim_err_prefix(err, "body: ");
    }
    const slim_graph *g = st->m->graph;
    if (g->n_inputs != node->n_in || g->n_outputs != node->n_out) {
        s = slim_errf(err, SLIM_EPARSE, "body takes %d input(s) and gives %d output(s), the node "
                      "has %d and %d", g->n_inputs - node->n_implicit, g->n_outputs,
                      node->n_in - node->n_implicit, node->n_out);
    } else if ( /* raw: load time, one name per subgraph input */
               !(st->names = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(char *)))) {
        s = slim_errf(err, SLIM_ENOMEM, "out of memory");
    } else {
        for (int i = 0; i < g->n_inputs; i++)
            st->names[i] = g->values[g->inputs[i]].name;
    }
    if (s) {
        map_release(st);
        return s;
    }
    *state = st;
    return SLIM_OK;
}

static slim_status map_exec(slim_op_ctx *ctx)
{
    const map_state *ms = ctx->state;
    const int n_in = ctx->n_in, n_out = ctx->n_out;
    const int formal = n_in - ctx->node->n_implicit;
    slim_status st;
    const slim_container *c0;
    if ((st = get_seq(ctx, 0, "input_sequence", &c0)))
        return st;
    const int n = c0->n;
    for (int k = 1; k < formal; k++) {
        const slim_tensor *t = ctx->in[k];
        if (!t)
            return slim_errf(ctx->err, SLIM_EINVAL, "input %d is missing", k);
        if (t->kind == SLIM_KIND_OPTIONAL)
            return slim_errf(ctx->err, SLIM_ETYPE, "input %d is an optional; SequenceMap "
                             "takes sequences and tensors", k);
        if (t->kind == SLIM_KIND_SEQUENCE && slim_container_len(t) != n)
            return slim_errf(ctx->err, SLIM_ESHAPE, "input %d holds %d tensor(s), "
                             "input_sequence %d", k, slim_container_len(t), n);
    }
    /* raw (these): one entry per node or subgraph input/output: sized by the graph, not the tensors */
    slim_tensor *args = calloc((size_t)(n_in ? n_in : 1), sizeof(slim_tensor));
    slim_tensor *seqs = calloc((size_t)(n_out ? n_out : 1), sizeof(slim_tensor));
    if (!args || !seqs) {
        free(args);
        free(seqs);
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory");
    }
    st = SLIM_OK;
    for (int k = 0; !st && k < n_out; k++)
        st = slim_container_new(SLIM_KIND_SEQUENCE, SLIM_DTYPE_UNDEFINED, n, &seqs[k], ctx->err);
    for (int i = 0; !st && i < n; i++) {
        if ((st = slim_cancel_status(ctx->err)))
            break; /* a run per element: check before each */
        for (int k = 0; k < n_in; k++) {
            const slim_tensor *t = ctx->in[k];
            args[k] = k < formal && t->kind == SLIM_KIND_SEQUENCE ? *slim_container_at(t, i) : *t;
            args[k].buf = NULL; /* borrowed for the call */
        }
        slim_tensor *outs = NULL;
        int n_outs = 0;
        if ((st = slim_model_run(ms->m, n_in, ms->names, args, &outs, &n_outs, ctx->err))) {
            slim_err_prefix(ctx->err, "body, element %d: ", i);
            break;
        }
        for (int k = 0; !st && k < n_out && k < n_outs; k++)
            if ((st = slim_container_take(&seqs[k], &outs[k], ctx->err)))
                slim_err_prefix(ctx->err, "body output %d, element %d: ", k, i);
        slim_tensors_free(outs, n_outs);
    }
    for (int k = 0; k < n_out; k++) {
        if (!st && ctx->out[k]) {
            *ctx->out[k] = seqs[k];
            memset(&seqs[k], 0, sizeof(seqs[k]));
        }
        slim_tensor_release(&seqs[k]);
    }
    free(args);
    free(seqs);
    return st;
}

#define OWN (SLIM_OP_OWN_OUTPUTS | SLIM_OP_CONTAINERS)

const slim_op_def slim__ops_sequence[] = {
    {"SequenceEmpty", 11, NULL, NULL, need_value, empty_exec, OWN},
    {"SequenceConstruct", 11, NULL, NULL, need_value, construct_exec, OWN},
    {"SequenceInsert", 11, NULL, NULL, need_value, insert_exec, OWN},
    {"SequenceErase", 11, NULL, NULL, need_value, erase_exec, OWN},
    {"SequenceAt", 11, NULL, NULL, need_value, at_exec, OWN},
    {"SequenceLength", 11, NULL, NULL, need_value, length_exec, OWN},
    {"ConcatFromSequence", 11, NULL, NULL, need_value, concat_exec, OWN},
    {"SplitToSequence", 11, NULL, NULL, need_value, split_exec, OWN},
    {"SequenceMap", 17, map_prepare, map_release, need_value, map_exec, OWN},
    {"Optional", 15, NULL, NULL, need_value, optional_exec, OWN},
    {"OptionalHasElement", 15, NULL, NULL, need_value, has_element_exec, OWN},
    {"OptionalGetElement", 15, NULL, NULL, need_value, get_element_exec, OWN},
    {NULL, 0, NULL, NULL, NULL, NULL, 0},
};
