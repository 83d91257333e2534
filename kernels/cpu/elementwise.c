/*
 * elementwise.c - arithmetic, math functions, activations, comparisons,
 * logic, Where and Clip on the CPU: dtype dispatch, broadcasting and the
 * runners. The typed inner loops and each op's description are in
 * elementwise_loops.c.
 *
 * float16 and bfloat16 have no loops of their own: they run the float32
 * loop over small blocks converted on the stack, which keeps the tables
 * short and needs no scratch memory.
 *
 * Broadcasting goes through an ew_plan: the output axes are collapsed (size-1
 * axes dropped, neighbours merged where every input walks them contiguously
 * or not at all), so same-shape and scalar operands become a single flat row
 * whose inner loop the compiler vectorizes, and the general case walks the
 * outer axes with a carry counter. Rows, and pieces of long rows, are the
 * work items handed to slim_parallel_for.
 */
#include "elementwise_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

/* The inner loops are written for the vectorizer, which GCC at -O2 (the
 * RelWithDebInfo build) runs with a cost model that rejects every loop of
 * unknown length, and which refuses to turn float selects into blends
 * while it must preserve FP exception flags (nothing here reads them, nor
 * errno). Scalar code would leave those selects (Relu, Where, Clip, the
 * range checks of fast_exp) as branches that mispredict on real data. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math", "no-math-errno")
#endif

#define EW_CHUNK 16384 /* elements per parallel work item */
#define EW_BLOCK 256   /* float16/bfloat16 elements converted per step */

typedef struct ew_state {
    const ew_desc *d;
    ew_params p;
} ew_state;

static slim_status ew_prepare(slim_node *node, void **state, slim_err *err)
{
    const ew_desc *d = slim__ew_find(node->op_type);
    if (!d)
        return slim_errf(err, SLIM_EINTERNAL, "no elementwise description for %s", node->op_type);
    /* raw: fixed-size load-time state, freed with the model */
    ew_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->d = d;
    float *f[3] = {&s->p.alpha, &s->p.beta, &s->p.gamma};
    for (int k = 0; k < 3; k++)
        *f[k] = d->attr[k] ? slim_attr_float(node, d->attr[k], d->dflt[k]) : d->dflt[k];
    slim_status st = d->parse ? d->parse(node, &s->p, err) : SLIM_OK;
    if (st != SLIM_OK) {
        free(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

/* ---- dtype dispatch ------------------------------------------------------ */

static bool is_half(slim_dtype t)
{
    return t == SLIM_F16 || t == SLIM_BF16;
}

/* The loop for dtype t; for float16/bfloat16 the float32 loop, with *half
 * set to t so that the caller converts blocks around it. NULL if none. */
static un_loop un_pick(const un_loop *tab, slim_dtype t, slim_dtype *half)
{
    *half = SLIM_DTYPE_UNDEFINED;
    if ((unsigned)t >= SLIM_DTYPE_COUNT || !tab)
        return NULL;
    if (!tab[t] && is_half(t) && tab[SLIM_F32]) {
        *half = t;
        return tab[SLIM_F32];
    }
    return tab[t];
}

static bin_loop bin_pick(const bin_loop *tab, slim_dtype t, slim_dtype *half)
{
    *half = SLIM_DTYPE_UNDEFINED;
    if ((unsigned)t >= SLIM_DTYPE_COUNT || !tab)
        return NULL;
    if (!tab[t] && is_half(t) && tab[SLIM_F32]) {
        *half = t;
        return tab[SLIM_F32];
    }
    return tab[t];
}

static slim_status type_error(const ew_desc *d, slim_dtype t, slim_err *err)
{
    char list[256] = "";
    size_t used = 0;
    slim_dtype h;
    for (int k = 1; k < SLIM_DTYPE_COUNT; k++)
        if (d->un ? un_pick(d->un, k, &h) != NULL : bin_pick(d->bin, k, &h) != NULL)
            used += snprintf(list + used, used < sizeof(list) ? sizeof(list) - used : 0, "%s%s",
                             used ? ", " : "", slim_dtype_name(k));
    return slim_errf(err, SLIM_EUNSUPPORTED, "input has data type %s; %s supports %s",
                     slim_dtype_name(t), d->op, list);
}

static void half_load(slim_dtype t, const uint16_t *src, int64_t stride, float *dst, int64_t m)
{
    if (t == SLIM_F16)
        for (int64_t i = 0; i < m; i++)
            dst[i] = slim_f16_to_f32(src[i * stride]);
    else
        for (int64_t i = 0; i < m; i++)
            dst[i] = slim_bf16_to_f32(src[i * stride]);
}

static void half_store(slim_dtype t, const float *src, uint16_t *dst, int64_t m)
{
    if (t == SLIM_F16)
        for (int64_t i = 0; i < m; i++)
            dst[i] = slim_f32_to_f16(src[i]);
    else
        for (int64_t i = 0; i < m; i++)
            dst[i] = slim_f32_to_bf16(src[i]);
}

/* ---- unary runner -------------------------------------------------------- */

typedef struct un_job {
    un_loop fn;
    const ew_params *prm;
    const char *x;
    char *y;
    size_t ex, ey;    /* element sizes */
    slim_dtype half;  /* F16/BF16 when fn is the float32 loop */
} un_job;

static void un_range(int64_t begin, int64_t end, void *arg)
{
    const un_job *j = arg;
    const char *x = j->x + begin * j->ex;
    char *y = j->y + begin * j->ey;
    int64_t n = end - begin;
    if (!j->half) {
        j->fn(x, y, n, j->prm);
        return;
    }
    float fx[EW_BLOCK], fy[EW_BLOCK];
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
        half_load(j->half, (const uint16_t *)x + i, 1, fx, m);
        if (j->ey == 1) { /* bool output (IsNaN, IsInf) */
            j->fn(fx, y + i, m, j->prm);
        } else {
            j->fn(fx, fy, m, j->prm);
            half_store(j->half, fy, (uint16_t *)y + i, m);
        }
    }
}

/* y may be x (Mean divides in place). */
static slim_status run_unary(const un_loop *tab, const ew_params *prm, const slim_tensor *x,
                             slim_tensor *y, slim_err *err)
{
    un_job j = {.prm = prm, .x = x->data, .y = y->data, .ex = slim_dtype_size(x->dtype),
                .ey = slim_dtype_size(y->dtype)};
    j.fn = un_pick(tab, x->dtype, &j.half);
    if (!j.fn)
        return slim_errf(err, SLIM_EINTERNAL, "no loop for %s", slim_dtype_name(x->dtype));
    slim_parallel_for(slim_tensor_numel(y), EW_CHUNK, un_range, &j);
    return SLIM_OK;
}

/* ---- broadcasting plan --------------------------------------------------- */

/* Called per piece of a row: off[k] is input k's element offset, yoff the
 * output's, inner[k] input k's stride along the row (0 or 1). */
typedef void (*ew_row_fn)(void *job, const int64_t *off, int64_t yoff, int64_t n,
                          const int64_t *inner);

typedef struct ew_plan {
    int nin, ndim; /* ndim >= 1 after collapsing */
    int64_t dims[SLIM_MAX_DIMS];
    int64_t st[3][SLIM_MAX_DIMS]; /* element strides per input, 0 = broadcast */
    int64_t cols, col_chunk, n_chunks;
    ew_row_fn fn;
    void *job;
} ew_plan;

static void plan_init(ew_plan *p, int ondim, const int64_t *odims, int nin, const int *nd,
                      const int64_t *const *dims)
{
    int64_t st[3][SLIM_MAX_DIMS];
    for (int k = 0; k < nin; k++)
        slim_broadcast_strides(nd[k], dims[k], ondim, odims, st[k]);
    p->nin = nin;
    p->ndim = 0;
    for (int d = 0; d < ondim; d++) {
        if (odims[d] == 1)
            continue;
        int m = p->ndim;
        bool merge = m > 0;
        for (int k = 0; k < nin && merge; k++)
            merge = p->st[k][m - 1] == st[k][d] * odims[d];
        if (merge) {
            p->dims[m - 1] *= odims[d];
        } else {
            p->dims[m] = odims[d];
            p->ndim++;
        }
        for (int k = 0; k < nin; k++)
            p->st[k][p->ndim - 1] = st[k][d];
    }
    if (p->ndim == 0) {
        p->ndim = 1;
        p->dims[0] = 1;
        for (int k = 0; k < nin; k++)
            p->st[k][0] = 0;
    }
}

/* Work items [begin, end) are (row, piece of row) pairs in row-major order. */
static void plan_items(int64_t begin, int64_t end, void *arg)
{
    const ew_plan *p = arg;
    int last = p->ndim - 1, nin = p->nin;
    int64_t row = begin / p->n_chunks, chunk = begin % p->n_chunks;
    int64_t idx[SLIM_MAX_DIMS], base[3] = {0, 0, 0}, inner[3] = {0, 0, 0}, rem = row;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = rem % p->dims[d];
        rem /= p->dims[d];
        for (int k = 0; k < nin; k++)
            base[k] += idx[d] * p->st[k][d];
    }
    for (int k = 0; k < nin; k++)
        inner[k] = p->st[k][last];
    for (int64_t it = begin; it < end; it++) {
        int64_t c0 = chunk * p->col_chunk;
        int64_t m = p->cols - c0 < p->col_chunk ? p->cols - c0 : p->col_chunk;
        int64_t off[3];
        for (int k = 0; k < nin; k++)
            off[k] = base[k] + c0 * inner[k];
        p->fn(p->job, off, row * p->cols + c0, m, inner);
        if (++chunk < p->n_chunks)
            continue;
        chunk = 0;
        row++;
        for (int d = last - 1; d >= 0; d--) { /* advance the outer index */
            for (int k = 0; k < nin; k++)
                base[k] += p->st[k][d];
            if (++idx[d] < p->dims[d])
                break;
            for (int k = 0; k < nin; k++)
                base[k] -= p->st[k][d] * p->dims[d];
            idx[d] = 0;
        }
    }
}

static void plan_run(ew_plan *p, ew_row_fn fn, void *job)
{
    p->fn = fn;
    p->job = job;
    p->cols = p->dims[p->ndim - 1];
    p->col_chunk = p->cols < EW_CHUNK ? p->cols : EW_CHUNK;
    p->n_chunks = (p->cols + p->col_chunk - 1) / p->col_chunk;
    int64_t items = slim_shape_numel(p->ndim - 1, p->dims) * p->n_chunks;
    slim_parallel_for(items, EW_CHUNK / p->col_chunk, plan_items, p);
}

/* ---- binary runner ------------------------------------------------------- */

typedef struct bin_job {
    bin_loop fn;
    const ew_params *prm;
    const char *a, *b;
    char *y;
    size_t ea, eb, ey;
    slim_dtype half;
} bin_job;

static void bin_row(void *arg, const int64_t *off, int64_t yoff, int64_t n, const int64_t *inner)
{
    const bin_job *j = arg;
    const char *a = j->a + off[0] * j->ea, *b = j->b + off[1] * j->eb;
    char *y = j->y + yoff * j->ey;
    if (!j->half) {
        j->fn(a, inner[0], b, inner[1], y, n, j->prm);
        return;
    }
    float fa[EW_BLOCK], fb[EW_BLOCK], fy[EW_BLOCK];
    for (int64_t i = 0; i < n; i += EW_BLOCK) {
        int64_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
        half_load(j->half, (const uint16_t *)a + i * inner[0], inner[0], fa, inner[0] ? m : 1);
        half_load(j->half, (const uint16_t *)b + i * inner[1], inner[1], fb, inner[1] ? m : 1);
        if (j->ey == 1) { /* comparisons */
            j->fn(fa, inner[0] != 0, fb, inner[1] != 0, y + i, m, j->prm);
        } else {
            j->fn(fa, inner[0] != 0, fb, inner[1] != 0, fy, m, j->prm);
            half_store(j->half, fy, (uint16_t *)y + i, m);
        }
    }
}

/* y = a op b with b's dims given separately (legacy broadcast); y may be a. */
static void run_binary(bin_loop fn, slim_dtype half, const ew_params *prm, const slim_tensor *a,
                       const slim_tensor *b, int nb, const int64_t *bdims, slim_tensor *y)
{
    ew_plan p;
    int nd[2] = {a->ndim, nb};
    const int64_t *dims[2] = {a->dims, bdims};
    plan_init(&p, y->ndim, y->dims, 2, nd, dims);
    bin_job j = {fn, prm, a->data, b->data, y->data, slim_dtype_size(a->dtype),
                 slim_dtype_size(b->dtype), slim_dtype_size(y->dtype), half};
    plan_run(&p, bin_row, &j);
}

/* Before opset 7, Add & co. took broadcast=1 with an axis at which B's dims
 * align with A's, instead of at the end: pad B with trailing ones. */
static void b_shape(const slim_op_ctx *ctx, int *nb, int64_t *bd)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    const slim_node *n = ctx->node;
    *nb = b->ndim;
    memcpy(bd, b->dims, sizeof(int64_t) * b->ndim);
    if (n->opset < 7 && slim_attr_int(n, "broadcast", 0) && slim_node_attr(n, "axis")) {
        int64_t axis = slim_attr_int(n, "axis", 0);
        if (axis < 0)
            axis += a->ndim;
        while (*nb < SLIM_MAX_DIMS && axis + *nb < a->ndim)
            bd[(*nb)++] = 1;
    }
}

/* ---- Where --------------------------------------------------------------- */

typedef struct where_job {
    const uint8_t *c;
    const char *x, *y;
    char *out;
    size_t es;
} where_job;

#define WHERE_ROW(T)                                                              \
    do {                                                                          \
        const T *X = (const T *)j->x + off[1], *Yv = (const T *)j->y + off[2];    \
        T *O = (T *)j->out + yoff;                                                \
        for (int64_t i = 0; i < n; i++)                                           \
            O[i] = C[i * inner[0]] ? X[i * inner[1]] : Yv[i * inner[2]];          \
    } while (0)

/* A string element (slim_str), which Where moves whole like any other;
 * the executor then gives the output bytes of its own (string_tensor.h). */
typedef struct where16 {
    uint64_t lo, hi;
} where16;

/* Where only moves elements, so it dispatches on their size, not type. */
static void where_row(void *arg, const int64_t *off, int64_t yoff, int64_t n, const int64_t *inner)
{
    const where_job *j = arg;
    const uint8_t *C = j->c + off[0];
    switch (j->es) {
    case 1: WHERE_ROW(uint8_t); break;
    case 2: WHERE_ROW(uint16_t); break;
    case 4: WHERE_ROW(uint32_t); break;
    case 16: WHERE_ROW(where16); break;
    default: WHERE_ROW(uint64_t); break;
    }
}

/* ---- infer and exec ------------------------------------------------------ */

static slim_status ew_infer(slim_op_ctx *ctx)
{
    const ew_desc *d = ((const ew_state *)ctx->state)->d;
    slim_err *err = ctx->err;
    bool variadic = d->kind == EW_VARIADIC || d->kind == EW_MEAN;
    int need = d->kind == EW_WHERE ? 3 : d->kind == EW_BINARY || d->kind == EW_POW ? 2 : 1;
    if (ctx->n_in < need)
        return slim_errf(err, SLIM_EINVAL, "expects %d inputs, got %d", need, ctx->n_in);
    int have = variadic || d->kind == EW_CLIP ? ctx->n_in : need;
    for (int i = 0; i < have; i++)
        if (!ctx->in[i] && (d->kind != EW_CLIP || i == 0))
            return slim_errf(err, SLIM_EINVAL, "input %d is missing", i);

    const slim_tensor *x = ctx->in[0];
    slim_dtype yt = x->dtype, h;
    int nd = x->ndim, nd2;
    int64_t dims[SLIM_MAX_DIMS], dims2[SLIM_MAX_DIMS], bd[SLIM_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(int64_t) * nd);
    slim_status st = SLIM_OK;

    switch (d->kind) {
    case EW_CLIP:
        for (int i = 1; i < have; i++)
            if (ctx->in[i] && slim_tensor_numel(ctx->in[i]) > 1)
                return slim_errf(err, SLIM_EINVAL, "%s must be a scalar", i == 1 ? "min" : "max");
        if (ctx->node->opset < 11 && !slim_dtype_is_float(x->dtype))
            return slim_errf(err, SLIM_ETYPE, "Clip before opset 11 takes float types, got %s",
                             slim_dtype_name(x->dtype));
        /* fallthrough */
    case EW_UNARY:
        if (!un_pick(d->un, x->dtype, &h))
            return type_error(d, x->dtype, err);
        break;
    case EW_POW:
        for (int i = 0; i < 2; i++)
            if (!slim_dtype_is_float(ctx->in[i]->dtype) && !slim_dtype_is_int(ctx->in[i]->dtype))
                return slim_errf(err, SLIM_EUNSUPPORTED, "Pow does not take %s input %d",
                                 slim_dtype_name(ctx->in[i]->dtype), i);
        goto broadcast_b;
    case EW_BINARY:
        if (ctx->in[1]->dtype != x->dtype)
            return slim_errf(err, SLIM_ETYPE, "inputs have different data types %s and %s",
                             slim_dtype_name(x->dtype), slim_dtype_name(ctx->in[1]->dtype));
        if (!bin_pick(d->bin, x->dtype, &h))
            return type_error(d, x->dtype, err);
    broadcast_b:
        b_shape(ctx, &nd2, bd);
        st = slim_broadcast_shape(x->ndim, x->dims, nd2, bd, &nd, dims, err);
        break;
    case EW_VARIADIC:
    case EW_MEAN:
    case EW_WHERE:
        if (d->kind == EW_WHERE) {
            if (x->dtype != SLIM_BOOL)
                return slim_errf(err, SLIM_ETYPE, "condition must be bool, got %s",
                                 slim_dtype_name(x->dtype));
            yt = ctx->in[1]->dtype;
            size_t es = slim_dtype_size(yt);
            if (es != 1 && es != 2 && es != 4 && es != 8 && es != 16)
                return slim_errf(err, SLIM_EUNSUPPORTED, "Where does not take %s",
                                 slim_dtype_name(yt));
        } else if (!bin_pick(d->bin, x->dtype, &h)) {
            return type_error(d, x->dtype, err);
        }
        for (int i = 1; i < have && st == SLIM_OK; i++) {
            const slim_tensor *t = ctx->in[i];
            if (d->kind == EW_WHERE ? i == 2 && t->dtype != yt : t->dtype != yt)
                return slim_errf(err, SLIM_ETYPE, "input %d has data type %s, expected %s", i,
                                 slim_dtype_name(t->dtype), slim_dtype_name(yt));
            memcpy(dims2, dims, sizeof(int64_t) * nd);
            st = slim_broadcast_shape(nd, dims2, t->ndim, t->dims, &nd, dims, err);
        }
        break;
    }
    if (st != SLIM_OK)
        return st;
    if (d->to_bool)
        yt = SLIM_BOOL;
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], yt, nd, dims);
    return SLIM_OK;
}

/* Reads Clip's optional min/max inputs (opset 11+) into p; makes lo <= hi. */
static slim_status clip_bounds(const slim_op_ctx *ctx, ew_params *p)
{
    slim_dtype t = ctx->in[0]->dtype;
    bool is_float = slim_dtype_is_float(t);
    p->lo_i = t == SLIM_U64 ? 0 : INT64_MIN;
    p->hi_i = t == SLIM_U64 ? -1 : INT64_MAX; /* bits of UINT64_MAX */
    for (int k = 1; k <= 2 && ctx->node->opset >= 11; k++) {
        const slim_tensor *b = k < ctx->n_in ? ctx->in[k] : NULL;
        if (!b || slim_tensor_numel(b) == 0)
            continue;
        const char *what = k == 1 ? "min" : "max";
        slim_status st = is_float ? slim_read_scalar_f64(b, what, k == 1 ? &p->lo : &p->hi, ctx->err)
                                  : slim_read_scalar_i64(b, what, k == 1 ? &p->lo_i : &p->hi_i, ctx->err);
        if (st != SLIM_OK)
            return st;
    }
    if (p->lo > p->hi)
        p->lo = p->hi;
    if (t == SLIM_U64 ? (uint64_t)p->lo_i > (uint64_t)p->hi_i : p->lo_i > p->hi_i)
        p->lo_i = p->hi_i;
    return SLIM_OK;
}

static slim_status ew_exec(slim_op_ctx *ctx)
{
    const ew_state *s = ctx->state;
    const ew_desc *d = s->d;
    slim_tensor *y = ctx->out[0];
    if (!y || slim_tensor_numel(y) == 0)
        return SLIM_OK;
    ew_params prm = s->p;
    slim_dtype half;
    int nb;
    int64_t bd[SLIM_MAX_DIMS];

    switch (d->kind) {
    case EW_CLIP: {
        slim_status st = clip_bounds(ctx, &prm);
        if (st != SLIM_OK)
            return st;
    }
        /* fallthrough */
    case EW_UNARY:
        return run_unary(d->un, &prm, ctx->in[0], y, ctx->err);
    case EW_BINARY:
    case EW_POW: {
        const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
        bin_loop fn = a->dtype == b->dtype ? bin_pick(d->bin, a->dtype, &half) : NULL;
        if (!fn && d->kind == EW_POW) {
            fn = slim__ew_pow_any;
            half = SLIM_DTYPE_UNDEFINED;
            prm.ta = a->dtype;
            prm.tb = b->dtype;
        }
        if (!fn)
            return slim_errf(ctx->err, SLIM_EINTERNAL, "no loop for %s", slim_dtype_name(a->dtype));
        b_shape(ctx, &nb, bd);
        run_binary(fn, half, &prm, a, b, nb, bd, y);
        return SLIM_OK;
    }
    case EW_VARIADIC:
    case EW_MEAN: {
        bin_loop fn = bin_pick(d->bin, y->dtype, &half);
        if (!fn)
            return slim_errf(ctx->err, SLIM_EINTERNAL, "no loop for %s", slim_dtype_name(y->dtype));
        if (ctx->n_in == 1) { /* the output has the input's shape */
            memcpy(y->data, ctx->in[0]->data, slim_tensor_nbytes(y));
            return SLIM_OK;
        }
        /* Fold into y: y = in[first] op in[k], then y = y op in[k]. If the
         * executor gave y an input's buffer, that input must be read first,
         * before y is written; the ops are commutative, so start there. */
        int first = 0;
        for (int k = 1; k < ctx->n_in; k++)
            if (ctx->in[k]->data == y->data)
                first = k;
        const slim_tensor *a = ctx->in[first];
        for (int k = 0; k < ctx->n_in; k++) {
            if (k == first)
                continue;
            run_binary(fn, half, &prm, a, ctx->in[k], ctx->in[k]->ndim, ctx->in[k]->dims, y);
            a = y;
        }
        if (d->kind == EW_MEAN) {
            prm.i = ctx->n_in;
            return run_unary(slim__ew_mean_div, &prm, y, y, ctx->err);
        }
        return SLIM_OK;
    }
    case EW_WHERE: {
        const slim_tensor *c = ctx->in[0], *a = ctx->in[1], *b = ctx->in[2];
        ew_plan p;
        int nd[3] = {c->ndim, a->ndim, b->ndim};
        const int64_t *dims[3] = {c->dims, a->dims, b->dims};
        plan_init(&p, y->ndim, y->dims, 3, nd, dims);
        where_job j = {c->data, a->data, b->data, y->data, slim_dtype_size(y->dtype)};
        plan_run(&p, where_row, &j);
        return SLIM_OK;
    }
    }
    return SLIM_EINTERNAL;
}

/* Unary, Clip and two-input loops write y[i] only after reading a[i] (and
 * b[i]), also per block in the float16 path and per range across threads,
 * so output 0 may be input 0's buffer. Sum/Mean/Min/Max fold in several
 * passes (and copy one input with memcpy) and Where is rarely worth it:
 * those keep their own output. */
#define EW_OP(name, since) {name, since, ew_prepare, free, ew_infer, ew_exec, SLIM_OP_INPLACE0}
#define EW_OP_OWN(name, since) {name, since, ew_prepare, free, ew_infer, ew_exec, 0}

const slim_op_def slim__ops_elementwise[] = {
    EW_OP("Add", 1), EW_OP("Sub", 1), EW_OP("Mul", 1), EW_OP("Div", 1),
    EW_OP("Mod", 10), EW_OP("Pow", 1), EW_OP("PRelu", 1), EW_OP("BitShift", 11),
    EW_OP_OWN("Sum", 1), EW_OP_OWN("Mean", 1), EW_OP_OWN("Min", 1), EW_OP_OWN("Max", 1),
    EW_OP("Equal", 1), EW_OP("Less", 1), EW_OP("Greater", 1),
    EW_OP("LessOrEqual", 12), EW_OP("GreaterOrEqual", 12),
    EW_OP("And", 1), EW_OP("Or", 1), EW_OP("Xor", 1), EW_OP("Not", 1),
    EW_OP("BitwiseAnd", 18), EW_OP("BitwiseOr", 18), EW_OP("BitwiseXor", 18),
    EW_OP("BitwiseNot", 18),
    EW_OP_OWN("Where", 9), EW_OP("Clip", 1),
    EW_OP("Sqrt", 1), EW_OP("Exp", 1), EW_OP("Log", 1), EW_OP("Reciprocal", 1),
    EW_OP("Erf", 9), EW_OP("Floor", 1), EW_OP("Ceil", 1), EW_OP("Round", 11),
    EW_OP("Sin", 7), EW_OP("Cos", 7), EW_OP("Tan", 7), EW_OP("Asin", 7), EW_OP("Acos", 7),
    EW_OP("Atan", 7), EW_OP("Sinh", 9), EW_OP("Cosh", 9), EW_OP("Asinh", 9),
    EW_OP("Acosh", 9), EW_OP("Atanh", 9), EW_OP("Tanh", 1), EW_OP("Sigmoid", 1),
    EW_OP("Softplus", 1), EW_OP("Softsign", 1), EW_OP("Mish", 18),
    EW_OP("Neg", 1), EW_OP("Abs", 1), EW_OP("Sign", 9), EW_OP("Relu", 1),
    EW_OP("IsNaN", 9), EW_OP("IsInf", 10), EW_OP("LeakyRelu", 1), EW_OP("HardSigmoid", 1),
    EW_OP("HardSwish", 14), EW_OP("Elu", 1), EW_OP("Selu", 1), EW_OP("Celu", 12),
    EW_OP("ThresholdedRelu", 10), EW_OP("Shrink", 9), EW_OP("Gelu", 20),
    EW_OP("Swish", 24),
    {0},
};
