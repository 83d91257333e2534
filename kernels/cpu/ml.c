/*
 * ml.c - operators of the ai.onnx.ml domain that work on numbers:
 * Binarizer, ArrayFeatureExtractor and TreeEnsemble (opset 5).
 *
 * TreeEnsemble's trees arrive as flat attribute arrays (a node's feature,
 * mode, split and its true/false children, each either another node or a
 * leaf). prepare checks every index against its array once, so a hostile
 * model is refused at load; a walk that runs longer than there are nodes
 * (a cycle) is refused at run time. Values are compared and summed in
 * double whatever the input type. The string-keyed ops (LabelEncoder with
 * strings, and the rest) are not here: slimserve has no string tensors.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Binarizer ----------------------------------------------------------- */

static slim_status binarizer_infer(slim_op_ctx *ctx)
{
    slim_status st = slim_check_dtype(ctx->in[0], "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_I64,
                                      SLIM_I32, SLIM_DTYPE_UNDEFINED);
    if (!st)
        slim_tensor_set_like(ctx->out[0], ctx->in[0]);
    return st;
}

static slim_status binarizer_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    double th = slim_attr_float(ctx->node, "threshold", 0.0f);
    int64_t n = slim_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        /* NaN is not above the threshold: 0, as onnx's reference says. */
        double v = slim_load_f64(x->dtype, x->data, i);
        slim_store_f64(x->dtype, ctx->out[0]->data, i, v > th ? 1.0 : 0.0);
    }
    return SLIM_OK;
}

/* ---- ArrayFeatureExtractor ----------------------------------------------- */

/* Z = X[..., Y] with Y's indices flattened; a 1-D X gives [1, |Y|]. */
static slim_status afe_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *y = ctx->in[1];
    slim_status st = slim_check_dtype(y, "Y", ctx->err, SLIM_I64, SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (x->ndim == 0 || slim_dtype_size(x->dtype) == 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X must be a tensor of rank 1 or more");
    int64_t dims[SLIM_MAX_DIMS];
    int nd = x->ndim == 1 ? 2 : x->ndim;
    if (x->ndim == 1)
        dims[0] = 1;
    else
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)(x->ndim - 1));
    dims[nd - 1] = slim_tensor_numel(y);
    slim_tensor_set_shape(ctx->out[0], x->dtype, nd, dims);
    return SLIM_OK;
}

static slim_status afe_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *y = ctx->in[1];
    const int64_t last = x->dims[x->ndim - 1], k = slim_tensor_numel(y);
    const int64_t rows = last ? slim_tensor_numel(x) / last : 0;
    const int64_t *idx = y->data;
    const size_t es = slim_dtype_size(x->dtype);
    for (int64_t j = 0; j < k; j++)
        if (idx[j] < 0 || idx[j] >= last)
            return slim_errf(ctx->err, SLIM_EINVAL, "index %lld in Y is out of range for the "
                             "last axis of X (%lld)", (long long)idx[j], (long long)last);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++)
            memcpy((uint8_t *)ctx->out[0]->data + (size_t)(r * k + j) * es,
                   (const uint8_t *)x->data + (size_t)(r * last + idx[j]) * es, es);
    return SLIM_OK;
}

/* ---- TreeEnsemble -------------------------------------------------------- */

enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };
enum { POST_NONE, POST_SOFTMAX, POST_LOGISTIC, POST_SOFTMAX_ZERO, POST_PROBIT };
enum { MODE_LEQ, MODE_LT, MODE_GTE, MODE_GT, MODE_EQ, MODE_NEQ, MODE_MEMBER };

typedef struct {
    int n_nodes, n_leaves, n_trees, n_targets, agg, post;
    int64_t *feature, *true_id, *false_id, *roots, *target;
    uint8_t *mode, *true_leaf, *false_leaf, *missing_true;
    double *split, *weight;
    /* MEMBER node i tests members[set_begin[i] .. set_end[i]) */
    double *members;
    int64_t *set_begin, *set_end;
} tree_state;

static void tree_release(void *p)
{
    tree_state *s = p;
    if (!s)
        return;
    free(s->feature);
    free(s->true_id);
    free(s->false_id);
    free(s->roots);
    free(s->target);
    free(s->mode);
    free(s->true_leaf);
    free(s->false_leaf);
    free(s->missing_true);
    free(s->split);
    free(s->weight);
    free(s->members);
    free(s->set_begin);
    free(s->set_end);
    free(s);
}

/* An INTS attribute of exactly n values (n < 0: any count, set in *n). */
static slim_status get_ints(const slim_node *node, const char *name, int *n, bool required,
                            int64_t **out, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, name);
    *out = NULL;
    if (!a)
        return required ? slim_errf(err, SLIM_EINVAL, "attribute %s is required", name)
                        : SLIM_OK;
    if (a->type != SLIM_ATTR_INTS || (*n >= 0 && a->n != *n))
        return slim_errf(err, SLIM_EINVAL, "attribute %s must be %d ints", name, *n);
    *n = a->n;
    /* raw: load time: sized by the node's attributes, freed with the model */
    if (!(*out = malloc(sizeof(int64_t) * (size_t)(a->n ? a->n : 1))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (a->n)
        memcpy(*out, a->ints, sizeof(int64_t) * (size_t)a->n);
    return SLIM_OK;
}

/* A TENSOR attribute as n doubles (n < 0: any count, set in *n). */
static slim_status get_doubles(const slim_node *node, const char *name, int *n, bool required,
                               double **out, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, name);
    *out = NULL;
    if (!a)
        return required ? slim_errf(err, SLIM_EINVAL, "attribute %s is required", name)
                        : SLIM_OK;
    int64_t cnt = a->type == SLIM_ATTR_TENSOR && a->t ? slim_tensor_numel(a->t) : -1;
    if (cnt < 0 || cnt > INT32_MAX || (*n >= 0 && cnt != *n) ||
        (cnt && !a->t->data) || !slim_dtype_size(a->t->dtype))
        return slim_errf(err, SLIM_EINVAL, "attribute %s must be a tensor of %d values", name,
                         *n);
    *n = (int)cnt;
    /* raw: load time: sized by the node's attributes */
    if (!(*out = malloc(sizeof(double) * (size_t)(cnt ? cnt : 1))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    for (int64_t i = 0; i < cnt; i++)
        (*out)[i] = slim_load_f64(a->t->dtype, a->t->data, i);
    return SLIM_OK;
}

static slim_status to_u8(const int64_t *v, int n, uint8_t **out, slim_err *err)
{
    /* raw: load time: sized by the node's attributes */
    if (!(*out = calloc((size_t)(n ? n : 1), 1)))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    for (int i = 0; v && i < n; i++)
        (*out)[i] = v[i] != 0;
    return SLIM_OK;
}

static slim_status tree_check(const tree_state *s, slim_err *err)
{
    for (int i = 0; i < s->n_nodes; i++) {
        if (s->mode[i] > MODE_MEMBER)
            return slim_errf(err, SLIM_EINVAL, "node %d has mode %d", i, s->mode[i]);
        if (s->feature[i] < 0)
            return slim_errf(err, SLIM_EINVAL, "node %d reads feature %lld", i,
                             (long long)s->feature[i]);
        int64_t t = s->true_id[i], f = s->false_id[i];
        if (t < 0 || t >= (s->true_leaf[i] ? s->n_leaves : s->n_nodes) || f < 0 ||
            f >= (s->false_leaf[i] ? s->n_leaves : s->n_nodes))
            return slim_errf(err, SLIM_EINVAL, "node %d has a child out of range", i);
    }
    for (int i = 0; i < s->n_leaves; i++)
        if (s->target[i] < 0 || s->target[i] >= s->n_targets)
            return slim_errf(err, SLIM_EINVAL, "leaf %d has target %lld, n_targets is %d", i,
                             (long long)s->target[i], s->n_targets);
    for (int i = 0; i < s->n_trees; i++)
        if (s->roots[i] < 0 || s->roots[i] >= s->n_nodes)
            return slim_errf(err, SLIM_EINVAL, "tree %d has root %lld out of range", i,
                             (long long)s->roots[i]);
    return SLIM_OK;
}

static slim_status tree_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    tree_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    int nn = -1, nl = -1, nt = -1, nm = -1, nsp, nw;
    int64_t *tl = NULL, *fl = NULL, *miss = NULL;
    double *modes = NULL;
    slim_status st;
    s->agg = (int)slim_attr_int(node, "aggregate_function", AGG_SUM);
    s->post = (int)slim_attr_int(node, "post_transform", POST_NONE);
    int64_t targets = slim_attr_int(node, "n_targets", -1);
    if ((st = get_ints(node, "nodes_featureids", &nn, true, &s->feature, err)))
        goto done;
    s->n_nodes = nn;
    nsp = nn;
    int n1 = nn, n2 = nn, n3 = nn, n4 = nn, n5 = nn;
    if ((st = get_ints(node, "nodes_truenodeids", &n1, true, &s->true_id, err)) ||
        (st = get_ints(node, "nodes_falsenodeids", &n2, true, &s->false_id, err)) ||
        (st = get_ints(node, "nodes_trueleafs", &n3, true, &tl, err)) ||
        (st = get_ints(node, "nodes_falseleafs", &n4, true, &fl, err)) ||
        (st = get_ints(node, "nodes_missing_value_tracks_true", &n5, false, &miss, err)) ||
        (st = get_doubles(node, "nodes_modes", &nm, true, &modes, err)) ||
        (st = get_doubles(node, "nodes_splits", &nsp, true, &s->split, err)) ||
        (st = get_ints(node, "leaf_targetids", &nl, true, &s->target, err)) ||
        (st = get_ints(node, "tree_roots", &nt, true, &s->roots, err)))
        goto done;
    s->n_leaves = nl;
    s->n_trees = nt;
    nw = nl;
    if ((st = get_doubles(node, "leaf_weights", &nw, true, &s->weight, err)))
        goto done;
    if (nm != nn) {
        st = slim_errf(err, SLIM_EINVAL, "nodes_modes has %d values, there are %d nodes", nm, nn);
        goto done;
    }
    if ((st = to_u8(tl, nn, &s->true_leaf, err)) || (st = to_u8(fl, nn, &s->false_leaf, err)) ||
        (st = to_u8(miss, nn, &s->missing_true, err)) ||
        (st = to_u8(NULL, nn, &s->mode, err)))
        goto done;
    for (int i = 0; i < nn; i++)
        s->mode[i] = modes[i] >= 0 && modes[i] <= MODE_MEMBER ? (uint8_t)modes[i] : 255;
    if (targets < 1 || targets > (1 << 24)) {
        st = slim_errf(err, SLIM_EINVAL, "n_targets %lld must be in [1, 2^24]", (long long)targets);
        goto done;
    }
    s->n_targets = (int)targets;
    if (s->agg < AGG_AVERAGE || s->agg > AGG_MAX) {
        st = slim_errf(err, SLIM_EINVAL, "aggregate_function %d is not defined", s->agg);
        goto done;
    }
    if (s->post == POST_PROBIT || s->post < POST_NONE || s->post > POST_PROBIT) {
        st = slim_errf(err, SLIM_EUNSUPPORTED, "post_transform %d is not supported (NONE, "
                       "SOFTMAX, LOGISTIC and SOFTMAX_ZERO are)", s->post);
        goto done;
    }
    /* Member sets, NaN-separated, in node order. */
    /* raw: load time: one per tree node, freed with the model */
    if (!(s->set_begin = calloc((size_t)nn + 1, sizeof(int64_t))) ||
        !(s->set_end = calloc((size_t)nn + 1, sizeof(int64_t)))) {
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto done;
    }
    int nmem = -1;
    if ((st = get_doubles(node, "membership_values", &nmem, false, &s->members, err)))
        goto done;
    int pos = 0;
    for (int i = 0; i < nn; i++) {
        if (s->mode[i] != MODE_MEMBER)
            continue;
        if (!s->members || pos >= nmem) {
            st = slim_errf(err, SLIM_EINVAL, "node %d tests membership, but membership_values "
                           "has no set left for it", i);
            goto done;
        }
        s->set_begin[i] = pos;
        while (pos < nmem && !isnan(s->members[pos]))
            pos++;
        s->set_end[i] = pos++; /* past the NaN that ends it */
    }
    st = tree_check(s, err);
done:
    free(tl);
    free(fl);
    free(miss);
    free(modes);
    if (st) {
        tree_release(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

static slim_status tree_infer(slim_op_ctx *ctx)
{
    const tree_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_dtype(x, "X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                      SLIM_DTYPE_UNDEFINED);
    if (st)
        return st;
    if (x->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "X must be [N, features], it has %d dims",
                         x->ndim);
    for (int i = 0; i < s->n_nodes; i++)
        if (s->feature[i] >= x->dims[1])
            return slim_errf(ctx->err, SLIM_ESHAPE, "node %d reads feature %lld, X has %lld", i,
                             (long long)s->feature[i], (long long)x->dims[1]);
    slim_tensor_set_shape(ctx->out[0], x->dtype, 2, (int64_t[]){x->dims[0], s->n_targets});
    return SLIM_OK;
}

static bool goes_true(const tree_state *s, int i, double v)
{
    if (isnan(v) && s->missing_true[i])
        return true;
    double t = s->split[i];
    switch (s->mode[i]) {
    case MODE_LEQ: return v <= t;
    case MODE_LT: return v < t;
    case MODE_GTE: return v >= t;
    case MODE_GT: return v > t;
    case MODE_EQ: return v == t;
    case MODE_NEQ: return v != t;
    default:
        for (int64_t k = s->set_begin[i]; k < s->set_end[i]; k++)
            if (s->members[k] == v)
                return true;
        return false;
    }
}

/* The leaf a tree sends row x to, or -1 after a cycle. */
static int64_t tree_walk(const tree_state *s, int64_t root, const slim_tensor *X, int64_t row)
{
    const int64_t F = X->dims[1];
    /* A root that is itself a leaf (both children the same leaf). */
    if (s->true_leaf[root] && s->false_leaf[root] && s->true_id[root] == s->false_id[root])
        return root < s->n_leaves ? root : -1;
    int64_t i = root;
    for (int steps = 0; steps <= s->n_nodes; steps++) {
        bool t = goes_true(s, (int)i, slim_load_f64(X->dtype, X->data, row * F + s->feature[i]));
        int64_t next = t ? s->true_id[i] : s->false_id[i];
        if (t ? s->true_leaf[i] : s->false_leaf[i])
            return next;
        i = next;
    }
    return -1;
}

static slim_status tree_exec(slim_op_ctx *ctx)
{
    const tree_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_tensor *o = ctx->out[0];
    const int64_t N = x->dims[0], T = s->n_targets;
    double *acc = slim_scratch_malloc(sizeof(double) * (size_t)(T ? T : 1));
    if (!acc)
        return slim_scratch_oom(ctx->err);
    for (int64_t r = 0; r < N; r++) {
        double init = s->agg == AGG_MIN ? INFINITY : s->agg == AGG_MAX ? -INFINITY : 0.0;
        for (int64_t t = 0; t < T; t++)
            acc[t] = init;
        for (int k = 0; k < s->n_trees; k++) {
            int64_t leaf = tree_walk(s, s->roots[k], x, r);
            if (leaf < 0) {
                slim_scratch_free(acc);
                return slim_errf(ctx->err, SLIM_EINVAL, "tree %d does not reach a leaf (its "
                                 "nodes form a cycle)", k);
            }
            double w = s->weight[leaf];
            double *a = &acc[s->target[leaf]];
            switch (s->agg) {
            case AGG_AVERAGE: *a += w / s->n_trees; break;
            case AGG_SUM: *a += w; break;
            case AGG_MIN: *a = w < *a ? w : *a; break;
            default: *a = w > *a ? w : *a; break;
            }
        }
        /* Targets no leaf reached under MIN/MAX keep the type's extreme. */
        double lim = x->dtype == SLIM_F64 ? 1.7976931348623157e308
                     : x->dtype == SLIM_F16 ? 65504.0 : 3.4028234663852886e38;
        for (int64_t t = 0; t < T; t++)
            if (isinf(acc[t]) && (s->agg == AGG_MIN || s->agg == AGG_MAX))
                acc[t] = acc[t] > 0 ? lim : -lim;
        if (s->post == POST_LOGISTIC) {
            for (int64_t t = 0; t < T; t++)
                acc[t] = 1.0 / (1.0 + exp(-acc[t]));
        } else if (s->post == POST_SOFTMAX || s->post == POST_SOFTMAX_ZERO) {
            double mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t < T; t++)
                mx = acc[t] > mx ? acc[t] : mx;
            for (int64_t t = 0; t < T; t++) {
                bool zero = s->post == POST_SOFTMAX_ZERO && acc[t] == 0.0;
                acc[t] = zero ? 0.0 : exp(acc[t] - mx);
                sum += acc[t];
            }
            for (int64_t t = 0; t < T && sum > 0; t++)
                acc[t] /= sum;
        }
        for (int64_t t = 0; t < T; t++)
            slim_store_f64(o->dtype, o->data, r * T + t, acc[t]);
    }
    slim_scratch_free(acc);
    return SLIM_OK;
}

const slim_op_def slim__ops_ml[] = {
    {"Binarizer", 1, NULL, NULL, binarizer_infer, binarizer_exec, SLIM_OP_INPLACE0},
    {"ArrayFeatureExtractor", 1, NULL, NULL, afe_infer, afe_exec, 0},
    {"TreeEnsemble", 5, tree_prepare, tree_release, tree_infer, tree_exec, 0},
    {NULL, 0, NULL, NULL, NULL, NULL, 0},
};
