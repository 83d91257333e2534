/*
 * reduce.c - reductions along axes: ReduceSum/Mean/Max/Min/Prod/L1/L2/
 * SumSquare/LogSum/LogSumExp, ArgMax/ArgMin, TopK, CumSum and CumProd.
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
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 256

/* ---- element access ------------------------------------------------------ */

/* Widen n contiguous elements starting at element off. */
static void load_f64(slim_dtype dt, const void *base, int64_t off, int64_t n, double *dst)
{
    if (dt == SLIM_F32) {
        const float *p = (const float *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i];
    } else if (dt == SLIM_F64) {
        memcpy(dst, (const double *)base + off, (size_t)n * sizeof(double));
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = slim_load_f64(dt, base, off + i);
    }
}

static void load_i64(slim_dtype dt, const void *base, int64_t off, int64_t n, int64_t *dst)
{
    if (dt == SLIM_I64) {
        memcpy(dst, (const int64_t *)base + off, (size_t)n * sizeof(int64_t));
    } else if (dt == SLIM_I32) {
        const int32_t *p = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++)
            dst[i] = p[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = slim_load_i64(dt, base, off + i);
    }
}

static void store_f64(slim_dtype dt, void *base, int64_t off, int64_t n, const double *src)
{
    if (dt == SLIM_F32) {
        float *p = (float *)base + off;
        for (int64_t i = 0; i < n; i++)
            p[i] = (float)src[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            slim_store_f64(dt, base, off + i, src[i]);
    }
}

static void store_i64(slim_dtype dt, void *base, int64_t off, int64_t n, const int64_t *src)
{
    for (int64_t i = 0; i < n; i++)
        slim_store_i64(dt, base, off + i, src[i]);
}

/* Integer types (and bool) are compared and summed exactly in int64. */
static bool is_intlike(slim_dtype dt)
{
    return slim_dtype_is_int(dt) || dt == SLIM_BOOL;
}

static void int_range(slim_dtype dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case SLIM_BOOL: *lo = 0; *hi = 1; break;
    case SLIM_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case SLIM_U8: *lo = 0; *hi = UINT8_MAX; break;
    case SLIM_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case SLIM_U16: *lo = 0; *hi = UINT16_MAX; break;
    case SLIM_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case SLIM_U32: *lo = 0; *hi = UINT32_MAX; break;
    case SLIM_U64: *lo = 0; *hi = INT64_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* Splits x's dims around one axis into [outer, r, inner]. */
static void split_at_axis(const slim_tensor *x, int axis, int64_t *outer, int64_t *r,
                          int64_t *inner)
{
    *outer = slim_shape_numel(axis, x->dims);
    *r = x->ndim ? x->dims[axis] : 1;
    *inner = x->ndim ? slim_shape_numel(x->ndim - axis - 1, x->dims + axis + 1) : 1;
}

/* Task grain so that one task touches at least ~32K elements. */
static int64_t grain_for(int64_t elems_per_unit)
{
    int64_t g = 32768 / (elems_per_unit > 0 ? elems_per_unit : 1);
    return g > 0 ? g : 1;
}

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

/* ---- ArgMax / ArgMin ----------------------------------------------------- */

typedef struct {
    bool is_max, keepdims, last; /* select_last_index */
    int64_t axis;
} arg_state;

static slim_status arg_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    arg_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->is_max = strcmp(node->op_type, "ArgMax") == 0;
    st->keepdims = slim_attr_int(node, "keepdims", 1) != 0;
    st->last = slim_attr_int(node, "select_last_index", 0) != 0;
    st->axis = slim_attr_int(node, "axis", 0);
    *state = st;
    return SLIM_OK;
}

static slim_status arg_infer(slim_op_ctx *ctx)
{
    const arg_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input data", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_I8, SLIM_U8, SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input data is a scalar; needs rank >= 1");
    int axis;
    if ((s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err)))
        return s;
    if (x->dims[axis] == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "axis %d has size 0: no element to select",
                         axis);
    int64_t dims[SLIM_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != axis)
            dims[nd++] = x->dims[i];
        else if (st->keepdims)
            dims[nd++] = 1;
    slim_tensor_set_shape(ctx->out[0], SLIM_I64, nd, dims);
    return SLIM_OK;
}

typedef struct {
    const arg_state *st;
    const slim_tensor *x;
    int64_t *y;
    int64_t r, inner;
} arg_job;

/* long double holds every int64, uint64 and double exactly on the
 * platforms we build for (x87 extended or binary128), so one comparison
 * path serves every dtype. */
static long double load_key(slim_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case SLIM_I64: return ((const int64_t *)data)[i];
    case SLIM_U64: return ((const uint64_t *)data)[i];
    default: return slim_load_f64(dt, data, i);
    }
}

static void arg_task(int64_t begin, int64_t end, void *user)
{
    const arg_job *j = user;
    bool is_max = j->st->is_max, last = j->st->last;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->inner, i = u % j->inner, base = o * j->r * j->inner + i;
        int64_t best = 0;
        if (j->x->dtype == SLIM_F32) {
            const float *p = (const float *)j->x->data + base;
            float bv = p[0];
            for (int64_t k = 1; k < j->r; k++) {
                float v = p[k * j->inner];
                bool better = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                if (better) {
                    bv = v;
                    best = k;
                }
            }
        } else {
            long double bv = load_key(j->x->dtype, j->x->data, base);
            for (int64_t k = 1; k < j->r; k++) {
                long double v = load_key(j->x->dtype, j->x->data, base + k * j->inner);
                bool better = is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                if (better) {
                    bv = v;
                    best = k;
                }
            }
        }
        j->y[u] = best;
    }
}

static slim_status arg_exec(slim_op_ctx *ctx)
{
    const arg_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    slim_status s = slim_norm_axis(st->axis, x->ndim, &axis, ctx->err);
    if (s)
        return s;
    arg_job j = {.st = st, .x = x, .y = ctx->out[0]->data};
    int64_t outer;
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    slim_parallel_for(outer * j.inner, grain_for(j.r), arg_task, &j);
    return SLIM_OK;
}

/* ---- TopK ---------------------------------------------------------------- */

typedef struct {
    int64_t axis, k; /* k: attribute of opset 1, else -1 */
    bool largest, sorted;
} topk_state;

static slim_status topk_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    topk_state *st = calloc(1, sizeof(*st));
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->axis = slim_attr_int(node, "axis", -1);
    st->k = node->opset < 10 ? slim_attr_int(node, "k", -1) : -1;
    st->largest = slim_attr_int(node, "largest", 1) != 0;
    st->sorted = slim_attr_int(node, "sorted", 1) != 0;
    if (node->opset < 10 && st->k < 0) {
        free(st);
        return slim_errf(err, SLIM_EINVAL, "attribute k is missing or negative");
    }
    *state = st;
    return SLIM_OK;
}

static slim_status topk_params(const slim_op_ctx *ctx, int *axis, int64_t *k)
{
    const topk_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input X is a scalar; needs rank >= 1");
    slim_status s = slim_norm_axis(st->axis, x->ndim, axis, ctx->err);
    if (s)
        return s;
    *k = st->k;
    if (st->k < 0) {
        if (ctx->n_in < 2 || !ctx->in[1])
            return slim_errf(ctx->err, SLIM_EINVAL, "input K is missing");
        int n;
        if ((s = slim_read_ints(ctx->in[1], "input K", k, 1, &n, ctx->err)))
            return s;
        if (n != 1)
            return slim_errf(ctx->err, SLIM_EINVAL, "input K must hold one value");
    }
    if (*k < 0 || *k > x->dims[*axis])
        return slim_errf(ctx->err, SLIM_EINVAL, "k = %lld is outside [0, %lld] (axis %d)",
                         (long long)*k, (long long)x->dims[*axis], *axis);
    return SLIM_OK;
}

static slim_status topk_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input X", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_I8, SLIM_U8, SLIM_I16, SLIM_U16,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    int axis;
    int64_t k;
    if ((s = topk_params(ctx, &axis, &k)))
        return s;
    int64_t dims[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(int64_t) * x->ndim);
    dims[axis] = k;
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], x->dtype, x->ndim, dims);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_I64, x->ndim, dims);
    return SLIM_OK;
}

typedef struct {
    long double key;
    int64_t idx;
} topk_item;

/* The order TopK emits: larger key first, the lower index on ties. NaN
 * counts as larger than everything so that the order stays total (qsort
 * must never see an inconsistent comparison). */
static bool topk_before(const topk_item *a, const topk_item *b)
{
    bool an = isnan(a->key), bn = isnan(b->key);
    if (an != bn)
        return an;
    if (!an && a->key != b->key)
        return a->key > b->key;
    return a->idx < b->idx;
}

static int topk_cmp(const void *pa, const void *pb)
{
    return topk_before(pa, pb) ? -1 : topk_before(pb, pa) ? 1 : 0;
}

/* Min-heap under topk_before: the root is the worst of the kept k. */
static void heap_sift_down(topk_item *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && topk_before(&h[w], &h[l]))
            w = l;
        if (r < n && topk_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        topk_item t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

typedef struct {
    const slim_tensor *x;
    slim_tensor *vals, *idxs;
    int64_t r, inner, k;
    bool largest;
    bool failed;
} topk_job;

static void topk_task(int64_t begin, int64_t end, void *user)
{
    topk_job *j = user;
    /* A heap of k beats sorting all r only when k is small against r. */
    bool use_heap = j->k * 4 < j->r;
    /* raw: per chunk on a kernel thread, which has no account to charge (parallel.c carries only the cancel token); one row of the input */
    topk_item *items = malloc(sizeof(topk_item) * (size_t)(use_heap ? j->k : j->r));
    if (!items) {
        j->failed = true;
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->inner, i = u % j->inner, base = o * j->r * j->inner + i;
        int64_t n = 0;
        for (int64_t e = 0; e < j->r; e++) {
            long double v = load_key(j->x->dtype, j->x->data, base + e * j->inner);
            topk_item it = {j->largest ? v : -v, e};
            if (!use_heap) {
                items[n++] = it;
            } else if (n < j->k) {
                items[n++] = it;
                if (n == j->k)
                    for (int64_t h = n / 2 - 1; h >= 0; h--)
                        heap_sift_down(items, n, h);
            } else if (topk_before(&it, &items[0])) {
                items[0] = it;
                heap_sift_down(items, n, 0);
            }
        }
        qsort(items, (size_t)n, sizeof(topk_item), topk_cmp);
        int64_t out_base = o * j->k * j->inner + i;
        for (int64_t e = 0; e < j->k; e++) {
            int64_t at = out_base + e * j->inner, src = base + items[e].idx * j->inner;
            if (j->vals) {
                size_t es = slim_dtype_size(j->x->dtype);
                memcpy((char *)j->vals->data + at * es, (const char *)j->x->data + src * es, es);
            }
            if (j->idxs)
                ((int64_t *)j->idxs->data)[at] = items[e].idx;
        }
    }
    free(items);
}

static slim_status topk_exec(slim_op_ctx *ctx)
{
    const topk_state *st = ctx->state;
    const slim_tensor *x = ctx->in[0];
    int axis;
    int64_t k, outer;
    slim_status s = topk_params(ctx, &axis, &k);
    if (s)
        return s;
    topk_job j = {.x = x, .vals = ctx->out[0], .idxs = ctx->n_out > 1 ? ctx->out[1] : NULL,
                  .k = k, .largest = st->largest};
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    if (k == 0 || outer * j.inner == 0)
        return SLIM_OK;
    slim_parallel_for(outer * j.inner, grain_for(j.r * 8), topk_task, &j);
    if (j.failed)
        return slim_errf(ctx->err, SLIM_ENOMEM, "out of memory sorting %lld elements",
                         (long long)j.r);
    return SLIM_OK;
}

/* ---- CumSum, CumProd: one scan, + or * ------------------------------------ */

static slim_status cumsum_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status s = slim_check_dtype(x, "input x", ctx->err, SLIM_F32, SLIM_F64, SLIM_F16,
                                     SLIM_BF16, SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (ctx->n_in < 2 || !ctx->in[1])
        return slim_errf(ctx->err, SLIM_EINVAL, "input axis is missing");
    if ((s = slim_check_dtype(ctx->in[1], "input axis", ctx->err, SLIM_I32, SLIM_I64,
                              SLIM_DTYPE_UNDEFINED)))
        return s;
    if (x->ndim == 0)
        return slim_errf(ctx->err, SLIM_EINVAL, "input x is a scalar; needs rank >= 1");
    slim_tensor_set_like(ctx->out[0], x);
    return SLIM_OK;
}

typedef struct {
    slim_dtype dt;
    const void *x;
    void *y;
    int64_t r, inner, n_blocks;
    bool exclusive, reverse, prod;
} cumsum_job;

/* Integer products wrap (as ONNX Runtime's do) instead of overflowing,
 * which would be undefined behaviour in signed C arithmetic. */
static inline int64_t scan_mul_i64(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
static inline double scan_mul_f64(double a, double b)
{
    return a * b;
}
#define SCAN_MUL(a, b) _Generic((a), int64_t: scan_mul_i64, default: scan_mul_f64)(a, b)

#define CUMSUM_UNIT(T, load, store)                                                   \
    static void cumsum_unit_##T(const cumsum_job *j, int64_t o, int64_t i0, int64_t n) \
    {                                                                                 \
        T acc[CHUNK], row[CHUNK];                                                     \
        for (int64_t i = 0; i < n; i++)                                               \
            acc[i] = j->prod ? 1 : 0;                                                 \
        for (int64_t step = 0; step < j->r; step++) {                                 \
            int64_t k = j->reverse ? j->r - 1 - step : step;                          \
            int64_t off = (o * j->r + k) * j->inner + i0;                             \
            load(j->dt, j->x, off, n, row);                                           \
            if (j->exclusive) {                                                       \
                store(j->dt, j->y, off, n, acc);                                      \
                for (int64_t i = 0; i < n; i++)                                       \
                    acc[i] = j->prod ? SCAN_MUL(acc[i], row[i]) : acc[i] + row[i];     \
            } else {                                                                  \
                for (int64_t i = 0; i < n; i++)                                       \
                    acc[i] = j->prod ? SCAN_MUL(acc[i], row[i]) : acc[i] + row[i];     \
                store(j->dt, j->y, off, n, acc);                                      \
            }                                                                         \
        }                                                                             \
    }

CUMSUM_UNIT(double, load_f64, store_f64)
CUMSUM_UNIT(int64_t, load_i64, store_i64)

static void cumsum_task(int64_t begin, int64_t end, void *user)
{
    const cumsum_job *j = user;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_blocks, i0 = (u % j->n_blocks) * CHUNK;
        int64_t n = j->inner - i0 < CHUNK ? j->inner - i0 : CHUNK;
        if (is_intlike(j->dt))
            cumsum_unit_int64_t(j, o, i0, n);
        else
            cumsum_unit_double(j, o, i0, n);
    }
}

static slim_status cumsum_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    int64_t axis_v, outer;
    int axis;
    slim_status s = slim_read_scalar_i64(ctx->in[1], "input axis", &axis_v, ctx->err);
    if (s || (s = slim_norm_axis(axis_v, x->ndim, &axis, ctx->err)))
        return s;
    if (slim_tensor_numel(x) == 0)
        return SLIM_OK;
    cumsum_job j = {.dt = x->dtype, .x = x->data, .y = ctx->out[0]->data,
                    .exclusive = slim_attr_int(ctx->node, "exclusive", 0) != 0,
                    .reverse = slim_attr_int(ctx->node, "reverse", 0) != 0,
                    .prod = strcmp(ctx->node->op_type, "CumProd") == 0};
    split_at_axis(x, axis, &outer, &j.r, &j.inner);
    j.n_blocks = (j.inner + CHUNK - 1) / CHUNK;
    int64_t per_unit = j.r * (j.inner < CHUNK ? j.inner : CHUNK);
    slim_parallel_for(outer * j.n_blocks, grain_for(per_unit), cumsum_task, &j);
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
    {"ArgMax", 1, arg_prepare, free, arg_infer, arg_exec, 0},
    {"ArgMin", 1, arg_prepare, free, arg_infer, arg_exec, 0},
    {"TopK", 1, topk_prepare, free, topk_infer, topk_exec, 0},
    {"CumSum", 11, NULL, NULL, cumsum_infer, cumsum_exec, 0},
    {"CumProd", 26, NULL, NULL, cumsum_infer, cumsum_exec, 0},
    {0},
};
