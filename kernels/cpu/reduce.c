/*
 * reduce.c - reductions along axes: ReduceSum/Mean/Max/Min/Prod/L1/L2/
 * SumSquare/LogSum/LogSumExp here, and the op table of the whole family:
 * ArgMax/ArgMin and TopK (reduce_search.c), CumSum and CumProd (cumsum.c).
 *
 * Every kernel here works on one view of its input, [outer, r, inner]: r is
 * the extent being reduced (or scanned, or searched), and an element sits
 * at (o * r + k) * inner + i. Reductions over several axes first coalesce
 * dims (size-1 dims vanish, neighbours that are both reduced or both kept
 * merge), so ReduceMean over {2,3} of NCHW is [N*C, H*W, 1]. The rare case
 * of reduced axes separated by a kept one ({0,2} of [A,B,C]) is permuted
 * once into kept-then-reduced order so that the same loop serves it.
 *
 * Floats accumulate in double, so a sum of a million float32 values is
 * exact to float precision; integers accumulate in int64 so that sums,
 * products and extremes are exact. Work is split into tasks of one outer
 * row and up to CHUNK inner columns, which keeps the accumulators and the
 * row being read in L1 whichever axis is reduced.
 */
#include "reduce_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ReduceXxx ----------------------------------------------------------- */

typedef enum {
    RED_SUM, RED_MEAN, RED_PROD, RED_MAX, RED_MIN, RED_L1, RED_L2,
    RED_SUMSQUARE, RED_LOGSUM, RED_LOGSUMEXP,
} red_kind;

static const struct {
    const char *op_type;
    red_kind kind;
    int axes_input_since; /* opset where "axes" moved from attribute to input */
} reduce_ops[] = {
    {"ReduceSum", RED_SUM, 13},         {"ReduceMean", RED_MEAN, 18},
    {"ReduceProd", RED_PROD, 18},       {"ReduceMax", RED_MAX, 18},
    {"ReduceMin", RED_MIN, 18},         {"ReduceL1", RED_L1, 18},
    {"ReduceL2", RED_L2, 18},           {"ReduceSumSquare", RED_SUMSQUARE, 18},
    {"ReduceLogSum", RED_LOGSUM, 18},   {"ReduceLogSumExp", RED_LOGSUMEXP, 18},
};

typedef struct {
    red_kind kind;
    bool axes_input;   /* axes come from input 1 */
    bool keepdims;
    bool noop_empty;   /* noop_with_empty_axes: no axes means identity-like */
    int n_axes;        /* attribute axes; -1 when absent */
    int64_t axes[SLIM_MAX_DIMS];
} reduce_state;

static slim_status reduce_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    reduce_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    size_t i = 0;
    while (strcmp(reduce_ops[i].op_type, node->op_type) != 0)
        i++; /* the table lists every op type this prepare is registered for */
    st->kind = reduce_ops[i].kind;
    st->axes_input = node->opset >= reduce_ops[i].axes_input_since;
    st->keepdims = slim_attr_int(node, "keepdims", 1) != 0;
    st->noop_empty = st->axes_input && slim_attr_int(node, "noop_with_empty_axes", 0) != 0;
    st->n_axes = -1;
    if (!st->axes_input) {
        int64_t tmp[SLIM_MAX_DIMS + 1];
        st->n_axes = slim_attr_ints(node, "axes", tmp, SLIM_MAX_DIMS + 1);
        if (st->n_axes > SLIM_MAX_DIMS) {
            free(st);
            return slim_errf(err, SLIM_EINVAL, "attribute axes has more than %d entries",
                             SLIM_MAX_DIMS);
        }
        if (st->n_axes > 0)
            memcpy(st->axes, tmp, sizeof(int64_t) * st->n_axes);
    }
    *state = st;
    return SLIM_OK;
}

/* Marks the reduced dims of x; an empty set with noop_with_empty_axes
 * reduces nothing (each output is f of one element). */
static slim_status reduce_axes(const slim_op_ctx *ctx, const reduce_state *st, bool *reduced)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axes[SLIM_MAX_DIMS];
    int n = st->n_axes;
    if (st->axes_input) {
        n = -1;
        if (ctx->n_in > 1 && ctx->in[1]) {
            slim_status s = slim_read_ints(ctx->in[1], "axes", axes, SLIM_MAX_DIMS, &n,
                                           ctx->err);
            if (s)
                return s;
        }
    } else if (n > 0) {
        memcpy(axes, st->axes, sizeof(int64_t) * n);
    }
    bool all = n <= 0 && !st->noop_empty;
    for (int i = 0; i < x->ndim; i++)
        reduced[i] = all;
    for (int k = 0; k < n; k++) {
        int a;
        slim_status s = slim_norm_axis(axes[k], x->ndim, &a, ctx->err);
        if (s)
            return s;
        if (x->ndim == 0)
            continue;
        if (reduced[a])
            return slim_errf(ctx->err, SLIM_EINVAL, "axis %lld is listed twice",
                             (long long)axes[k]);
        reduced[a] = true;
    }
    return SLIM_OK;
}

static slim_status reduce_infer(slim_op_ctx *ctx)
{
    const reduce_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_status s = (st->kind == RED_MAX || st->kind == RED_MIN)
        ? slim_check_dtype(x, "input data", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                           SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64, SLIM_I8, SLIM_U8,
                           SLIM_BOOL, SLIM_DTYPE_UNDEFINED)
        : slim_check_dtype(x, "input data", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                           SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64, SLIM_I8, SLIM_U8,
                           SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    bool reduced[SLIM_MAX_DIMS];
    if ((s = reduce_axes(ctx, st, reduced)))
        return s;
    int64_t dims[SLIM_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!reduced[i])
            dims[nd++] = x->dims[i];
        else if (st->keepdims)
            dims[nd++] = 1;
    }
    slim_tensor_set_shape(ctx->out[0], x->dtype, nd, dims);
    return SLIM_OK;
}

typedef struct {
    red_kind kind;
    slim_dtype dt;
    const void *x;
    void *y;
    int64_t outer, r, inner, n_blocks;
    bool ints;
} reduce_job;

/* Reduction steps, instantiated for the double and int64 accumulators.
 * combine folds one row of n values into n accumulators; LogSumExp runs a
 * max pass first and then sums exp(x - max), with `top` the max of each
 * accumulator (top_step 1) or of all of them (top_step 0). */
#define REDUCE_IMPL(T, load, store, NEG_INIT, POS_INIT)                                \
    static T init_##T(const reduce_job *j, red_kind kind)                               \
    {                                                                                   \
        int64_t lo, hi;                                                                 \
        int_range(j->dt, &lo, &hi);                                                     \
        (void)lo, (void)hi;                                                             \
        switch (kind) {                                                                 \
        case RED_PROD: return 1;                                                        \
        case RED_MAX: return NEG_INIT;                                                  \
        case RED_MIN: return POS_INIT;                                                  \
        default: return 0;                                                              \
        }                                                                               \
    }                                                                                   \
                                                                                        \
    static void combine_##T(red_kind kind, T *acc, const T *row, int64_t n, const T *top, \
                            int top_step)                                               \
    {                                                                                   \
        switch (kind) {                                                                 \
        case RED_SUM: case RED_MEAN: case RED_LOGSUM:                                   \
            for (int64_t i = 0; i < n; i++) acc[i] += row[i];                           \
            break;                                                                      \
        case RED_PROD:                                                                  \
            for (int64_t i = 0; i < n; i++) acc[i] *= row[i];                           \
            break;                                                                      \
        case RED_MAX: /* row[i] != row[i]: a NaN wins, as in numpy */                   \
            for (int64_t i = 0; i < n; i++)                                             \
                acc[i] = row[i] > acc[i] || row[i] != row[i] ? row[i] : acc[i];         \
            break;                                                                      \
        case RED_MIN:                                                                   \
            for (int64_t i = 0; i < n; i++)                                             \
                acc[i] = row[i] < acc[i] || row[i] != row[i] ? row[i] : acc[i];         \
            break;                                                                      \
        case RED_L1:                                                                    \
            for (int64_t i = 0; i < n; i++) acc[i] += row[i] < 0 ? -row[i] : row[i];    \
            break;                                                                      \
        case RED_L2: case RED_SUMSQUARE:                                                \
            for (int64_t i = 0; i < n; i++) acc[i] += row[i] * row[i];                  \
            break;                                                                      \
        case RED_LOGSUMEXP:                                                             \
            for (int64_t i = 0; i < n; i++)                                             \
                acc[i] += (T)exp((double)row[i] - (double)top[i * top_step]);           \
            break;                                                                      \
        }                                                                               \
    }                                                                                   \
                                                                                        \
    /* Folds n >= 1 lane accumulators into one; lanes holding sums (of x,   \
     * |x|, x^2 or exp) merge by addition. */                                   \
    static T merge_##T(red_kind kind, const T *acc, int64_t n)                          \
    {                                                                                   \
        red_kind m = kind == RED_PROD || kind == RED_MAX || kind == RED_MIN ? kind : RED_SUM; \
        T v = acc[0];                                                                   \
        for (int64_t i = 1; i < n; i++)                                                 \
            combine_##T(m, &v, &acc[i], 1, NULL, 0);                                    \
        return v;                                                                       \
    }                                                                                   \
                                                                                        \
    /* One task: outer row o, inner columns [i0, i0 + n). A contiguous row       \
     * (inner 1) is read in chunks into CHUNK lane accumulators, merged at the   \
     * end, so that both layouts run the same vectorizable combine loops. */     \
    static void reduce_unit_##T(const reduce_job *j, int64_t o, int64_t i0, int64_t n)  \
    {                                                                                   \
        T acc[CHUNK], row[CHUNK], top[CHUNK];                                           \
        bool lanes = j->inner == 1;                                                     \
        int64_t width = lanes ? (j->r < CHUNK ? j->r : CHUNK) : n;                      \
        int passes = j->kind == RED_LOGSUMEXP ? 2 : 1;                                  \
        for (int pass = 0; pass < passes; pass++) {                                     \
            red_kind kind = passes == 2 && pass == 0 ? RED_MAX : j->kind;               \
            for (int64_t i = 0; i < width; i++)                                         \
                acc[i] = init_##T(j, kind);                                             \
            if (lanes) {                                                                \
                for (int64_t k0 = 0; k0 < j->r; k0 += CHUNK) {                          \
                    int64_t m = j->r - k0 < CHUNK ? j->r - k0 : CHUNK;                  \
                    load(j->dt, j->x, o * j->r + k0, m, row);                           \
                    combine_##T(kind, acc, row, m, top, 0);                             \
                }                                                                       \
                acc[0] = width ? merge_##T(kind, acc, width) : init_##T(j, kind);       \
            } else {                                                                    \
                for (int64_t k = 0; k < j->r; k++) {                                    \
                    load(j->dt, j->x, (o * j->r + k) * j->inner + i0, n, row);          \
                    combine_##T(kind, acc, row, n, top, 1);                             \
                }                                                                       \
            }                                                                           \
            if (passes == 2 && pass == 0)                                               \
                memcpy(top, acc, sizeof(T) * (lanes ? 1 : n));                          \
        }                                                                               \
        int64_t n_out = lanes ? 1 : n;                                                  \
        for (int64_t i = 0; i < n_out; i++) {                                           \
            double v = (double)acc[i];                                                  \
            switch (j->kind) {                                                          \
            case RED_MEAN: acc[i] = (T)(v / (double)j->r); break;                       \
            case RED_L2: acc[i] = (T)sqrt(v); break;                                    \
            case RED_LOGSUM: acc[i] = (T)log(v); break;                                 \
            case RED_LOGSUMEXP: /* all -inf or empty: -inf; a +inf: +inf */             \
                acc[i] = isinf((double)top[i]) ? top[i] : (T)((double)top[i] + log(v)); \
                break;                                                                  \
            default: break;                                                             \
            }                                                                           \
        }                                                                               \
        store(j->dt, j->y, o * j->inner + i0, n_out, acc);                              \
    }

REDUCE_IMPL(double, load_f64, store_f64, -INFINITY, INFINITY)
REDUCE_IMPL(int64_t, load_i64, store_i64, lo, hi)

static void reduce_task(int64_t begin, int64_t end, void *user)
{
    const reduce_job *j = user;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_blocks, i0 = (u % j->n_blocks) * CHUNK;
        int64_t n = j->inner - i0 < CHUNK ? j->inner - i0 : CHUNK;
        if (j->ints)
            reduce_unit_int64_t(j, o, i0, n);
        else
            reduce_unit_double(j, o, i0, n);
    }
}

/* Copies x into `dst` with its dims reordered by perm (dst dim k = x dim
 * perm[k]); element-size agnostic. */
static void permute_copy(const slim_tensor *x, const int *perm, void *dst)
{
    size_t es = slim_dtype_size(x->dtype);
    int nd = x->ndim;
    int64_t src_strides[SLIM_MAX_DIMS], stride[SLIM_MAX_DIMS], dims[SLIM_MAX_DIMS];
    int64_t idx[SLIM_MAX_DIMS] = {0};
    slim_contiguous_strides(nd, x->dims, src_strides);
    for (int k = 0; k < nd; k++) {
        dims[k] = x->dims[perm[k]];
        stride[k] = src_strides[perm[k]];
    }
    int64_t total = slim_tensor_numel(x), off = 0;
    const char *src = x->data;
    for (int64_t e = 0; e < total; e++) {
        memcpy((char *)dst + e * es, src + off * es, es);
        for (int k = nd - 1; k >= 0; k--) {
            off += stride[k];
            if (++idx[k] < dims[k])
                break;
            off -= stride[k] * dims[k];
            idx[k] = 0;
        }
    }
}

static slim_status reduce_exec(slim_op_ctx *ctx)
{
    const reduce_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (slim_tensor_numel(y) == 0)
        return SLIM_OK;
    bool reduced[SLIM_MAX_DIMS];
    slim_status s = reduce_axes(ctx, st, reduced);
    if (s)
        return s;

    /* Coalesce into groups of reduced / kept dims, dropping size-1 dims. */
    int n_groups = 0, n_red_groups = 0;
    int64_t outer = 1, r = 1, inner = 1;
    bool last = false, seen_red = false;
    for (int i = 0; i < x->ndim; i++) {
        if (x->dims[i] == 1)
            continue;
        if (n_groups == 0 || reduced[i] != last) {
            n_groups++;
            n_red_groups += reduced[i];
            last = reduced[i];
        }
        if (reduced[i]) {
            r *= x->dims[i];
            seen_red = true;
        } else if (seen_red) {
            inner *= x->dims[i];
        } else {
            outer *= x->dims[i];
        }
    }
    reduce_job j = {.kind = st->kind, .dt = x->dtype, .x = x->data, .y = y->data,
                    .ints = is_intlike(x->dtype) && st->kind != RED_L2 &&
                            st->kind != RED_LOGSUM && st->kind != RED_LOGSUMEXP};
    void *tmp = NULL;
    if (n_red_groups > 1 && r > 0) {
        /* Kept dims first, reduced last: then it is [kept, r, 1]. */
        int perm[SLIM_MAX_DIMS], np = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < x->ndim; i++)
                if (reduced[i] == (pass == 1))
                    perm[np++] = i;
        tmp = slim_scratch_malloc(slim_tensor_nbytes(x));
        if (!tmp)
            return slim_scratch_oom(ctx->err);
        permute_copy(x, perm, tmp);
        j.x = tmp;
        outer *= inner;
        inner = 1;
    }
    j.outer = outer;
    j.r = r;
    j.inner = inner;
    j.n_blocks = (inner + CHUNK - 1) / CHUNK;
    int64_t per_unit = r * (inner < CHUNK ? inner : CHUNK);
    slim_parallel_for(outer * j.n_blocks, grain_for(per_unit), reduce_task, &j);
    slim_scratch_free(tmp);
    return SLIM_OK;
}

/* ---- table --------------------------------------------------------------- */

#define REDUCE_DEFS(name)                                                        \
    {name, 1, reduce_prepare, free, reduce_infer, reduce_exec, 0},

const slim_op_def slim__ops_reduce[] = {
    REDUCE_DEFS("ReduceSum") REDUCE_DEFS("ReduceMean") REDUCE_DEFS("ReduceProd")
    REDUCE_DEFS("ReduceMax") REDUCE_DEFS("ReduceMin") REDUCE_DEFS("ReduceL1")
    REDUCE_DEFS("ReduceL2") REDUCE_DEFS("ReduceSumSquare") REDUCE_DEFS("ReduceLogSum")
    REDUCE_DEFS("ReduceLogSumExp")
    {"ArgMax", 1, slim__arg_prepare, free, slim__arg_infer, slim__arg_exec, 0},
    {"ArgMin", 1, slim__arg_prepare, free, slim__arg_infer, slim__arg_exec, 0},
    {"TopK", 1, slim__topk_prepare, free, slim__topk_infer, slim__topk_exec, 0},
    {"CumSum", 11, NULL, NULL, slim__cumsum_infer, slim__cumsum_exec, 0},
    {"CumProd", 26, NULL, NULL, slim__cumsum_infer, slim__cumsum_exec, 0},
    {0},
};
