/*
 * strings.c - the ai.onnx operators on string tensors: StringConcat,
 * StringSplit, RegexFullMatch, and Equal on strings (the numeric Equal
 * lives in elementwise.c; this one hands it every other type).
 *
 * Outputs are written element by element with slim_tensor_string_set into
 * the output's own bytes (runtime/string_tensor.h). StringSplit's output
 * shape depends on the data: infer scans the strings when they are there
 * and says SLIM_ENEEDVALUE while planning, like other data-shaped ops.
 */
#include "strings_impl.h"

#include <stdlib.h>

/* ---- shared helpers ------------------------------------------------------ */

slim_status slim_strbuf_put(slim_strbuf *b, const char *s, size_t n, slim_err *err)
{
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2)
                return slim_errf(err, SLIM_ENOMEM, "a string of more than %zu bytes", cap);
            cap *= 2;
        }
        char *p = slim_scratch_malloc(cap);
        if (!p)
            return slim_scratch_oom(err);
        if (b->len)
            memcpy(p, b->p, b->len);
        slim_scratch_free(b->p);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    return SLIM_OK;
}

void slim_strbuf_free(slim_strbuf *b)
{
    slim_scratch_free(b->p);
    *b = (slim_strbuf){0};
}

void slim_broadcast_index2(const slim_tensor *a, const slim_tensor *b, const slim_tensor *out,
                           int64_t *ia, int64_t *ib)
{
    int nd = out->ndim;
    int64_t sa[SLIM_MAX_DIMS], sb[SLIM_MAX_DIMS], idx[SLIM_MAX_DIMS] = {0};
    slim_broadcast_strides(a->ndim, a->dims, nd, out->dims, sa);
    slim_broadcast_strides(b->ndim, b->dims, nd, out->dims, sb);
    int64_t n = slim_tensor_numel(out), oa = 0, ob = 0;
    for (int64_t i = 0; i < n; i++) {
        ia[i] = oa;
        ib[i] = ob;
        /* Odometer over the output's dims, moving both offsets along. */
        for (int d = nd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < out->dims[d])
                break;
            oa -= sa[d] * out->dims[d];
            ob -= sb[d] * out->dims[d];
            idx[d] = 0;
        }
    }
}

slim_status slim_check_strings(const slim_tensor *t, const char *what, slim_err *err)
{
    if (t && t->dtype != SLIM_STRING)
        return slim_errf(err, SLIM_ETYPE, "input %s has data type %s; it must be string", what,
                         slim_dtype_name(t->dtype));
    return SLIM_OK;
}

extern const slim_op_def slim__ops_elementwise[];
extern const slim_op_def slim__ops_cast[];

const slim_op_def *slim__strings_delegate(const char *op_type, int before)
{
    const slim_op_def *tables[] = {slim__ops_elementwise, slim__ops_cast};
    const slim_op_def *best = NULL;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const slim_op_def *d = tables[t]; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && d->since < before &&
                (!best || d->since > best->since))
                best = d;
    return best;
}

/* Both inputs' broadcast into out's shape, with dtype dt. */
static slim_status broadcast_out(slim_op_ctx *ctx, slim_dtype dt)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    int64_t dims[SLIM_MAX_DIMS];
    int nd;
    slim_status st = slim_broadcast_shape(a->ndim, a->dims, b->ndim, b->dims, &nd, dims,
                                          ctx->err);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], dt, nd, dims);
    return st;
}

/* Offsets of both inputs for each output element (scratch in *holder). */
static slim_status broadcast_offsets(slim_op_ctx *ctx, slim_tensor *holder, int64_t **ia,
                                     int64_t **ib)
{
    int64_t n = slim_tensor_numel(ctx->out[0]);
    int64_t *idx = slim_scratch_alloc(holder, 2 * n, sizeof(int64_t), false, ctx->err);
    if (!idx)
        return ctx->err->status;
    *ia = idx;
    *ib = idx + n;
    slim_broadcast_index2(ctx->in[0], ctx->in[1], ctx->out[0], *ia, *ib);
    return SLIM_OK;
}

/* ---- Equal on strings ---------------------------------------------------- */

static const slim_op_def *numeric_equal(void)
{
    return slim__strings_delegate("Equal", 19);
}

static slim_status eq_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_op_def *d = numeric_equal();
    return d && d->prepare ? d->prepare(node, state, err) : SLIM_OK;
}

static void eq_release(void *state)
{
    const slim_op_def *d = numeric_equal();
    if (d && d->release)
        d->release(state);
}

static bool any_string(const slim_op_ctx *ctx)
{
    return (ctx->in[0] && ctx->in[0]->dtype == SLIM_STRING) ||
           (ctx->in[1] && ctx->in[1]->dtype == SLIM_STRING);
}

static slim_status eq_infer(slim_op_ctx *ctx)
{
    if (!any_string(ctx))
        return numeric_equal()->infer(ctx);
    if (ctx->in[0]->dtype != ctx->in[1]->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "inputs have data types %s and %s; Equal "
                         "compares a string only with a string",
                         slim_dtype_name(ctx->in[0]->dtype), slim_dtype_name(ctx->in[1]->dtype));
    return broadcast_out(ctx, SLIM_BOOL);
}

static slim_status eq_exec(slim_op_ctx *ctx)
{
    if (!any_string(ctx))
        return numeric_equal()->exec(ctx);
    slim_tensor holder = {0};
    int64_t *ia = NULL, *ib = NULL;
    slim_status st = broadcast_offsets(ctx, &holder, &ia, &ib);
    uint8_t *y = ctx->out[0]->data;
    for (int64_t i = 0, n = slim_tensor_numel(ctx->out[0]); !st && i < n; i++) {
        slim_str a = slim_str_at(ctx->in[0], ia[i]), b = slim_str_at(ctx->in[1], ib[i]);
        y[i] = slim_str_eq(a, b.ptr, (size_t)b.len);
    }
    slim_tensor_release(&holder);
    return st;
}

/* ---- StringConcat -------------------------------------------------------- */

static slim_status concat_infer(slim_op_ctx *ctx)
{
    slim_status st = slim_check_strings(ctx->in[0], "X", ctx->err);
    if (!st)
        st = slim_check_strings(ctx->in[1], "Y", ctx->err);
    return st ? st : broadcast_out(ctx, SLIM_STRING);
}

static slim_status concat_exec(slim_op_ctx *ctx)
{
    slim_tensor holder = {0};
    int64_t *ia = NULL, *ib = NULL;
    slim_status st = broadcast_offsets(ctx, &holder, &ia, &ib);
    for (int64_t i = 0, n = slim_tensor_numel(ctx->out[0]); !st && i < n; i++) {
        slim_str a = slim_str_at(ctx->in[0], ia[i]), b = slim_str_at(ctx->in[1], ib[i]);
        if (a.len + b.len > SLIM_STRING_MAX_LEN) {
            st = slim_errf(ctx->err, SLIM_EINVAL, "element %lld would be %llu bytes long: at "
                           "most %llu", (long long)i, (unsigned long long)(a.len + b.len),
                           (unsigned long long)SLIM_STRING_MAX_LEN);
            break;
        }
        /* Both pieces straight into the output's bytes. */
        char *p = slim__tensor_string_make(ctx->out[0], i, (size_t)(a.len + b.len), ctx->err);
        if (!p) {
            st = ctx->err->status;
            break;
        }
        if (a.len)
            memcpy(p, a.ptr, (size_t)a.len);
        if (b.len)
            memcpy(p + a.len, b.ptr, (size_t)b.len);
    }
    slim_tensor_release(&holder);
    return st;
}

/* ---- StringSplit --------------------------------------------------------- */

/* Python's str.split, as onnxruntime has it: with a delimiter, every
 * occurrence splits (maxsplit times at most) and empty pieces count; with
 * none (absent or ""), runs of spaces split and leading and trailing
 * spaces make no piece. An empty string has no pieces either way
 * (onnxruntime's count 0, where Python's "".split(",") has one). */
typedef struct split_attrs {
    const char *delim;
    size_t delim_len;
    int64_t maxsplit; /* < 0: no limit */
} split_attrs;

/* onnxruntime splits on the space character alone (a tab stays in its
 * piece); so does this. */
static bool is_space(char c)
{
    return c == ' ';
}

/* The first d in [p, end), or NULL. */
static const char *find(const char *p, const char *end, const char *d, size_t dn)
{
    for (; (size_t)(end - p) >= dn; p++) {
        p = memchr(p, d[0], (size_t)(end - p) - dn + 1);
        if (!p)
            return NULL;
        if (memcmp(p, d, dn) == 0)
            return p;
    }
    return NULL;
}

/* Calls emit for each piece of s; returns how many. emit may be NULL. */
typedef slim_status (*split_emit)(void *user, const char *p, size_t n);

static int64_t split_one(const split_attrs *a, slim_str s, split_emit emit, void *user,
                         slim_status *st)
{
    const char *p = s.ptr ? s.ptr : "", *end = p + s.len;
    int64_t count = 0;
    if (a->delim_len == 0) {
        while (p < end) {
            while (p < end && is_space(*p))
                p++;
            if (p == end)
                break;
            const char *q = p;
            if (a->maxsplit >= 0 && count == a->maxsplit) {
                /* The rest, trailing whitespace trimmed, as Python does. */
                q = end;
                while (q > p && is_space(q[-1]))
                    q--;
            } else {
                while (q < end && !is_space(*q))
                    q++;
            }
            if (emit && (*st = emit(user, p, (size_t)(q - p))))
                return count;
            count++;
            p = q;
        }
        return count;
    }
    if (s.len == 0)
        return 0;
    for (;;) {
        const char *q = NULL;
        if (a->maxsplit < 0 || count < a->maxsplit)
            q = find(p, end, a->delim, a->delim_len);
        const char *stop = q ? q : end;
        if (emit && (*st = emit(user, p, (size_t)(stop - p))))
            return count;
        count++;
        if (!q)
            return count;
        p = q + a->delim_len;
    }
}

static slim_status split_prepare(slim_node *node, void **state, slim_err *err)
{
    split_attrs *a = calloc(1, sizeof(*a));
    if (!a)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    const slim_attr *d = slim_node_attr(node, "delimiter");
    a->delim = d && d->s ? d->s : "";
    a->delim_len = strlen(a->delim);
    a->maxsplit = slim_attr_int(node, "maxsplit", -1);
    if (a->maxsplit < 0 && slim_node_attr(node, "maxsplit")) {
        free(a);
        return slim_errf(err, SLIM_EINVAL, "maxsplit must be positive, not %lld",
                         (long long)slim_attr_int(node, "maxsplit", -1));
    }
    *state = a;
    return SLIM_OK;
}

/* The widest split, which sizes the last axis. */
static slim_status split_width(slim_op_ctx *ctx, int64_t *width)
{
    const slim_tensor *x = ctx->in[0];
    int64_t n = slim_tensor_numel(x), w = 0;
    slim_status st = SLIM_OK;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = split_one(ctx->state, slim_str_at(x, i), NULL, NULL, &st);
        if (c > w)
            w = c;
    }
    if (n && w > SLIM_STRINGS_MAX_ELEMS / n)
        return slim_errf(ctx->err, SLIM_EINVAL, "%lld strings split into up to %lld pieces "
                         "each: more than %lld strings out", (long long)n, (long long)w,
                         (long long)SLIM_STRINGS_MAX_ELEMS);
    *width = w;
    return SLIM_OK;
}

static slim_status split_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_strings(x, "X", ctx->err);
    if (st)
        return st;
    if (x->ndim >= SLIM_MAX_DIMS)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "X has %d dims; at most %d", x->ndim,
                         SLIM_MAX_DIMS - 1);
    if (ctx->n_out > 1 && ctx->out[1])
        slim_tensor_set_shape(ctx->out[1], SLIM_I64, x->ndim, x->dims);
    if (!ctx->out[0])
        return SLIM_OK;
    if (!x->data && slim_tensor_numel(x) > 0)
        return SLIM_ENEEDVALUE;
    int64_t w = 0, dims[SLIM_MAX_DIMS];
    if ((st = split_width(ctx, &w)))
        return st;
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->ndim);
    dims[x->ndim] = w;
    slim_tensor_set_shape(ctx->out[0], SLIM_STRING, x->ndim + 1, dims);
    return SLIM_OK;
}

typedef struct split_sink {
    slim_tensor *y;
    int64_t at;
    slim_err *err;
} split_sink;

static slim_status split_put(void *user, const char *p, size_t n)
{
    split_sink *s = user;
    return slim_tensor_string_set(s->y, s->at++, p, n, s->err);
}

static slim_status split_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0], *z = ctx->n_out > 1 ? ctx->out[1] : NULL;
    int64_t n = slim_tensor_numel(x);
    int64_t w = y ? y->dims[y->ndim - 1] : 0;
    slim_status st = SLIM_OK;
    if (y && (st = slim_tensor_string_reserve(y, slim_tensor_string_total(x), ctx->err)))
        return st;
    for (int64_t i = 0; !st && i < n; i++) {
        split_sink sink = {y, i * w, ctx->err};
        int64_t c = split_one(ctx->state, slim_str_at(x, i), y ? split_put : NULL, &sink, &st);
        if (z)
            ((int64_t *)z->data)[i] = c;
        /* The rest of the row stays "", as the output was made. */
    }
    return st;
}

/* ---- RegexFullMatch ------------------------------------------------------ */

static slim_status regex_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "pattern");
    if (!a || a->type != SLIM_ATTR_STRING || !a->s)
        return slim_errf(err, SLIM_EINVAL, "attribute pattern (a string) is required");
    char msg[512];
    slim_regex *re = slim_regex_compile(a->s, strlen(a->s), msg, sizeof(msg));
    if (!re)
        return slim_errf(err, SLIM_EINVAL, "pattern \"%.200s\": %s", a->s, msg);
    *state = re;
    return SLIM_OK;
}

static void regex_release(void *state)
{
    slim_regex_free(state);
}

static slim_status regex_infer(slim_op_ctx *ctx)
{
    slim_status st = slim_check_strings(ctx->in[0], "X", ctx->err);
    if (!st)
        slim_tensor_set_shape(ctx->out[0], SLIM_BOOL, ctx->in[0]->ndim, ctx->in[0]->dims);
    return st;
}

static slim_status regex_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    uint8_t *y = ctx->out[0]->data;
    for (int64_t i = 0, n = slim_tensor_numel(x); i < n; i++) {
        slim_str s = slim_str_at(x, i);
        y[i] = slim_regex_full_match(ctx->state, s.ptr ? s.ptr : "", (size_t)s.len);
        if ((i & 1023) == 1023 && slim_cancel_check())
            return slim_cancel_status(ctx->err);
    }
    return SLIM_OK;
}

const slim_op_def slim__ops_strings[] = {
    /* Equal takes strings from opset 19 on; before, the numeric one. */
    {"Equal", 19, eq_prepare, eq_release, eq_infer, eq_exec,
     SLIM_OP_STRINGS | SLIM_OP_INPLACE0},
    {"StringConcat", 20, NULL, NULL, concat_infer, concat_exec, SLIM_OP_STRINGS},
    {"StringSplit", 20, split_prepare, free, split_infer, split_exec, SLIM_OP_STRINGS},
    {"RegexFullMatch", 20, regex_prepare, regex_release, regex_infer, regex_exec,
     SLIM_OP_STRINGS},
    {0},
};
