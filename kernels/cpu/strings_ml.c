/*
 * strings_ml.c - the ai.onnx.ml operators that map between strings and
 * numbers: LabelEncoder (opset 2; opset 4's tensor attributes) and
 * CategoryMapper; with them ai.onnx's StringNormalizer, whose stopwords
 * use the same table.
 *
 * LabelEncoder and CategoryMapper share one table (prepare builds it
 * from the attributes, once): keys and values as 1-D tensors, and a hash
 * of the keys, so a lookup costs one hash whatever the table's size. A
 * key given twice keeps its first value, as onnxruntime's map does.
 */
#include "strings_impl.h"
#include "strings_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the key -> value table ---------------------------------------------- */

typedef struct lookup {
    slim_tensor keys, values, dflt;  /* 1-D; dflt has one element */
    int32_t *slots;                  /* open addressing: key index or -1 */
    uint64_t mask;
} lookup;

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* A number as the table compares it: integers as int64, floats as double
 * with every NaN one NaN and -0 as 0 (onnxruntime's float keys match NaN
 * to NaN). */
typedef struct num_key {
    bool is_float;
    int64_t i;
    double f;
} num_key;

static num_key num_of(slim_dtype dt, const void *data, int64_t i)
{
    num_key k = {slim_dtype_is_float(dt), 0, 0};
    if (k.is_float) {
        k.f = slim_load_f64(dt, data, i);
        if (isnan(k.f))
            k.f = NAN;
        if (k.f == 0)
            k.f = 0;
    } else {
        k.i = slim_load_i64(dt, data, i);
    }
    return k;
}

static uint64_t hash_elem(const slim_tensor *t, int64_t i)
{
    if (t->dtype == SLIM_STRING) {
        slim_str s = slim_str_at(t, i);
        return hash_bytes(s.ptr, (size_t)s.len);
    }
    num_key k = num_of(t->dtype, t->data, i);
    return k.is_float ? hash_bytes(&k.f, sizeof(k.f)) : hash_bytes(&k.i, sizeof(k.i));
}

static bool elem_eq(const slim_tensor *a, int64_t i, const slim_tensor *b, int64_t j)
{
    if (a->dtype == SLIM_STRING) {
        slim_str s = slim_str_at(b, j);
        return slim_str_eq(slim_str_at(a, i), s.ptr, (size_t)s.len);
    }
    num_key x = num_of(a->dtype, a->data, i), y = num_of(b->dtype, b->data, j);
    if (x.is_float != y.is_float)
        return (x.is_float ? x.f : (double)x.i) == (y.is_float ? y.f : (double)y.i);
    return x.is_float ? (x.f == y.f || (isnan(x.f) && isnan(y.f))) : x.i == y.i;
}

/* Index of the key equal to element i of x, or -1. */
static int64_t lookup_find(const lookup *l, const slim_tensor *x, int64_t i)
{
    for (uint64_t h = hash_elem(x, i) & l->mask;; h = (h + 1) & l->mask) {
        int32_t k = l->slots[h];
        if (k < 0)
            return -1;
        if (elem_eq(&l->keys, k, x, i))
            return k;
    }
}

static slim_status lookup_index(lookup *l, slim_err *err)
{
    int64_t n = slim_tensor_numel(&l->keys);
    if (n != slim_tensor_numel(&l->values))
        return slim_errf(err, SLIM_EINVAL, "%lld keys but %lld values", (long long)n,
                         (long long)slim_tensor_numel(&l->values));
    if (n > INT32_MAX / 4)
        return slim_errf(err, SLIM_EINVAL, "%lld keys: at most %d", (long long)n, INT32_MAX / 4);
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    l->slots = malloc(sizeof(int32_t) * cap);
    if (!l->slots)
        return slim_errf(err, SLIM_ENOMEM, "out of memory for %lld keys", (long long)n);
    memset(l->slots, 0xff, sizeof(int32_t) * cap);
    l->mask = cap - 1;
    for (int64_t k = 0; k < n; k++) {
        uint64_t h = hash_elem(&l->keys, k) & l->mask;
        while (l->slots[h] >= 0 && !elem_eq(&l->keys, l->slots[h], &l->keys, k))
            h = (h + 1) & l->mask;
        if (l->slots[h] < 0)
            l->slots[h] = (int32_t)k; /* a repeated key keeps its first value */
    }
    return SLIM_OK;
}

static void lookup_free(lookup *l)
{
    if (!l)
        return;
    slim_tensor_release(&l->keys);
    slim_tensor_release(&l->values);
    slim_tensor_release(&l->dflt);
    free(l->slots);
}

/* A 1-D tensor from a list attribute (strings, ints or floats). */
static slim_status tensor_of_attr(const slim_attr *a, slim_tensor *t, slim_err *err)
{
    memset(t, 0, sizeof(*t));
    if (a->type == SLIM_ATTR_TENSOR) {
        if (!a->t || a->t->kind != SLIM_KIND_TENSOR)
            return slim_errf(err, SLIM_EINVAL, "attribute %s holds no tensor", a->name);
        t->dtype = a->t->dtype;
        t->ndim = 1;
        t->dims[0] = slim_tensor_numel(a->t);
        if (t->dtype == SLIM_STRING) {
            slim_status st = slim_tensor_string_copy(t, a->t, err);
            /* Same elements, viewed 1-D. */
            t->ndim = 1;
            t->dims[0] = slim_tensor_numel(a->t);
            return st;
        }
        slim_status st = slim_tensor_alloc(t, err);
        if (!st && slim_tensor_nbytes(t))
            memcpy(t->data, a->t->data, slim_tensor_nbytes(t));
        return st;
    }
    t->ndim = 1;
    t->dims[0] = a->n;
    t->dtype = a->type == SLIM_ATTR_STRINGS ? SLIM_STRING
             : a->type == SLIM_ATTR_INTS ? SLIM_I64
             : a->type == SLIM_ATTR_FLOATS ? SLIM_F32 : SLIM_DTYPE_UNDEFINED;
    if (t->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "attribute %s is not a list", a->name);
    slim_status st = slim_tensor_alloc(t, err);
    for (int i = 0; !st && i < a->n; i++) {
        if (t->dtype == SLIM_STRING)
            st = slim_tensor_string_set(t, i, a->strings[i], strlen(a->strings[i]), err);
        else if (t->dtype == SLIM_I64)
            ((int64_t *)t->data)[i] = a->ints[i];
        else
            ((float *)t->data)[i] = a->floats[i];
    }
    return st;
}

/* One element of dtype dt holding a default attribute's value. */
static slim_status default_of(const slim_node *node, slim_dtype dt, const char *s, int64_t i,
                              float f, slim_tensor *t, slim_err *err)
{
    *t = (slim_tensor){.dtype = dt, .ndim = 1, .dims = {1}};
    slim_status st = slim_tensor_alloc(t, err);
    if (st)
        return st;
    if (dt == SLIM_STRING)
        return slim_tensor_string_set(t, 0, s, strlen(s), err);
    if (slim_dtype_is_float(dt))
        slim_store_f64(dt, t->data, 0, f);
    else
        slim_store_i64(dt, t->data, 0, i);
    (void)node;
    return SLIM_OK;
}

/* The one attribute of a family present (keys_strings, keys_int64s, ...). */
static const slim_attr *one_of(const slim_node *node, const char *prefix, slim_err *err,
                               slim_status *st)
{
    static const char *const kinds[] = {"strings", "int64s", "floats", "tensor"};
    /* opset 1's classes_strings is a different contract, not run here. */
    const slim_attr *found = NULL;
    char name[64];
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        snprintf(name, sizeof(name), "%s_%s", prefix, kinds[k]);
        const slim_attr *a = slim_node_attr(node, name);
        if (!a)
            continue;
        if (found) {
            *st = slim_errf(err, SLIM_EINVAL, "attributes %s and %s both given; one %s_* is "
                            "allowed", found->name, a->name, prefix);
            return NULL;
        }
        found = a;
    }
    if (!found)
        *st = slim_errf(err, SLIM_EINVAL, "one of %s_strings, %s_int64s, %s_floats or "
                        "%s_tensor is required", prefix, prefix, prefix, prefix);
    return found;
}

/* ---- LabelEncoder -------------------------------------------------------- */

static slim_status le_default(const slim_node *node, lookup *l, slim_err *err)
{
    slim_dtype vt = l->values.dtype;
    const slim_attr *dt = slim_node_attr(node, "default_tensor");
    if (dt) {
        if (!dt->t || dt->t->dtype != vt || slim_tensor_numel(dt->t) != 1)
            return slim_errf(err, SLIM_EINVAL, "default_tensor must hold one %s",
                             slim_dtype_name(vt));
        return tensor_of_attr(dt, &l->dflt, err);
    }
    return default_of(node, vt, slim_attr_str(node, "default_string", "_Unused"),
                      slim_attr_int(node, "default_int64", -1),
                      slim_attr_float(node, "default_float", -0.0f), &l->dflt, err);
}

static void le_release(void *state)
{
    lookup_free(state);
    free(state);
}

static slim_status le_prepare(slim_node *node, void **state, slim_err *err)
{
    lookup *l = calloc(1, sizeof(*l));
    if (!l)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = SLIM_OK;
    const slim_attr *ka = one_of(node, "keys", err, &st);
    const slim_attr *va = ka ? one_of(node, "values", err, &st) : NULL;
    if (va)
        st = tensor_of_attr(ka, &l->keys, err);
    if (!st && va)
        st = tensor_of_attr(va, &l->values, err);
    if (!st && va)
        st = le_default(node, l, err);
    if (!st && va)
        st = lookup_index(l, err);
    if (st) {
        le_release(l);
        return st;
    }
    *state = l;
    return SLIM_OK;
}

/* Y[i] = the value of X[i]'s key, or the default. */
static slim_status map_exec(const lookup *l, const slim_tensor *x, slim_tensor *y,
                            slim_err *err)
{
    int64_t n = slim_tensor_numel(x);
    size_t es = slim_dtype_size(y->dtype);
    slim_status st = SLIM_OK;
    for (int64_t i = 0; !st && i < n; i++) {
        int64_t k = lookup_find(l, x, i);
        const slim_tensor *src = k >= 0 ? &l->values : &l->dflt;
        int64_t at = k >= 0 ? k : 0;
        if (y->dtype == SLIM_STRING) {
            slim_str s = slim_str_at(src, at);
            st = slim_tensor_string_set(y, i, s.ptr, (size_t)s.len, err);
        } else {
            memcpy((char *)y->data + (size_t)i * es, (const char *)src->data + (size_t)at * es,
                   es);
        }
    }
    return st;
}

static slim_status le_infer(slim_op_ctx *ctx)
{
    const lookup *l = ctx->state;
    const slim_tensor *x = ctx->in[0];
    bool x_num = x->dtype != SLIM_STRING && slim_dtype_size(x->dtype);
    bool k_num = l->keys.dtype != SLIM_STRING;
    if (x->dtype != l->keys.dtype && !(x_num && k_num))
        return slim_errf(ctx->err, SLIM_ETYPE, "X has data type %s, the keys are %s",
                         slim_dtype_name(x->dtype), slim_dtype_name(l->keys.dtype));
    slim_tensor_set_shape(ctx->out[0], l->values.dtype, x->ndim, x->dims);
    return SLIM_OK;
}

static slim_status le_exec(slim_op_ctx *ctx)
{
    return map_exec(ctx->state, ctx->in[0], ctx->out[0], ctx->err);
}

/* ---- CategoryMapper ------------------------------------------------------ */

/* Both directions: strings to int64 and int64 to strings. */
typedef struct catmap {
    lookup to_int, to_str;
} catmap;

static void cm_release(void *state)
{
    catmap *c = state;
    if (!c)
        return;
    lookup_free(&c->to_int);
    lookup_free(&c->to_str);
    free(c);
}

static slim_status cm_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *s = slim_node_attr(node, "cats_strings");
    const slim_attr *i = slim_node_attr(node, "cats_int64s");
    if (!s || !i || s->type != SLIM_ATTR_STRINGS || i->type != SLIM_ATTR_INTS)
        return slim_errf(err, SLIM_EINVAL, "attributes cats_strings and cats_int64s are "
                         "required");
    catmap *c = calloc(1, sizeof(*c));
    if (!c)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status st = tensor_of_attr(s, &c->to_int.keys, err);
    if (!st)
        st = tensor_of_attr(i, &c->to_int.values, err);
    if (!st)
        st = tensor_of_attr(i, &c->to_str.keys, err);
    if (!st)
        st = tensor_of_attr(s, &c->to_str.values, err);
    if (!st)
        st = default_of(node, SLIM_I64, "", slim_attr_int(node, "default_int64", -1), 0,
                        &c->to_int.dflt, err);
    if (!st)
        st = default_of(node, SLIM_STRING, slim_attr_str(node, "default_string", "_Unused"), 0,
                        0, &c->to_str.dflt, err);
    if (!st)
        st = lookup_index(&c->to_int, err);
    if (!st)
        st = lookup_index(&c->to_str, err);
    if (st) {
        cm_release(c);
        return st;
    }
    *state = c;
    return SLIM_OK;
}

static slim_status cm_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    if (x->dtype != SLIM_STRING && x->dtype != SLIM_I64)
        return slim_errf(ctx->err, SLIM_ETYPE, "X has data type %s; CategoryMapper takes "
                         "string or int64", slim_dtype_name(x->dtype));
    slim_tensor_set_shape(ctx->out[0], x->dtype == SLIM_STRING ? SLIM_I64 : SLIM_STRING,
                          x->ndim, x->dims);
    return SLIM_OK;
}

static slim_status cm_exec(slim_op_ctx *ctx)
{
    const catmap *c = ctx->state;
    const slim_tensor *x = ctx->in[0];
    return map_exec(x->dtype == SLIM_STRING ? &c->to_int : &c->to_str, x, ctx->out[0],
                    ctx->err);
}

/* ---- StringNormalizer ---------------------------------------------------- */

typedef struct normalizer {
    slim_case change;
    bool case_sensitive;
    slim_tensor stop;   /* stopwords; lowercased when not case sensitive */
    lookup stops;       /* over stop, values unused */
} normalizer;

static void sn_release(void *state)
{
    normalizer *s = state;
    if (!s)
        return;
    slim_tensor_release(&s->stop);
    s->stops.keys = (slim_tensor){0}; /* stop's, released above */
    lookup_free(&s->stops);
    free(s);
}

static slim_status sn_stopwords(const slim_node *node, normalizer *s, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "stopwords");
    int n = a && a->type == SLIM_ATTR_STRINGS ? a->n : 0;
    s->stop = (slim_tensor){.dtype = SLIM_STRING, .ndim = 1, .dims = {n}};
    slim_status st = slim_tensor_alloc(&s->stop, err);
    slim_strbuf b = {0};
    for (int i = 0; !st && i < n; i++) {
        st = slim_utf8_case(a->strings[i], strlen(a->strings[i]),
                            s->case_sensitive ? SLIM_CASE_NONE : SLIM_CASE_LOWER, &b, err);
        if (st)
            slim_err_prefix(err, "stopword %d: ", i);
        else
            st = slim_tensor_string_set(&s->stop, i, b.p, b.len, err);
    }
    slim_strbuf_free(&b);
    if (st)
        return st;
    s->stops.keys = s->stop;
    s->stops.values = s->stop;
    st = lookup_index(&s->stops, err);
    s->stops.values = (slim_tensor){0};
    return st;
}

static slim_status sn_prepare(slim_node *node, void **state, slim_err *err)
{
    const char *cc = slim_attr_str(node, "case_change_action", "NONE");
    slim_case change = strcmp(cc, "LOWER") == 0 ? SLIM_CASE_LOWER
                     : strcmp(cc, "UPPER") == 0 ? SLIM_CASE_UPPER : SLIM_CASE_NONE;
    if (change == SLIM_CASE_NONE && strcmp(cc, "NONE") != 0)
        return slim_errf(err, SLIM_EINVAL, "case_change_action \"%s\": LOWER, UPPER or NONE",
                         cc);
    normalizer *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->change = change;
    s->case_sensitive = slim_attr_int(node, "is_case_sensitive", 0) != 0;
    slim_status st = sn_stopwords(node, s, err);
    if (st) {
        sn_release(s);
        return st;
    }
    *state = s;
    return SLIM_OK;
}

/* Whether element i of x is a stopword; b is scratch. */
static slim_status sn_is_stop(const normalizer *s, const slim_tensor *x, int64_t i,
                              slim_strbuf *b, bool *stop, slim_err *err)
{
    *stop = false;
    if (!slim_tensor_numel(&s->stop))
        return SLIM_OK;
    if (s->case_sensitive) {
        *stop = lookup_find(&s->stops, x, i) >= 0;
        return SLIM_OK;
    }
    slim_str e = slim_str_at(x, i);
    slim_status st = slim_utf8_case(e.ptr, (size_t)e.len, SLIM_CASE_LOWER, b, err);
    if (st)
        return st;
    slim_str lowered = {b->p, b->len};
    slim_tensor one = {.dtype = SLIM_STRING, .ndim = 0, .data = &lowered};
    *stop = lookup_find(&s->stops, &one, 0) >= 0;
    return SLIM_OK;
}

/* How many elements survive the stopwords (with data). */
static slim_status sn_count(slim_op_ctx *ctx, int64_t *kept)
{
    const slim_tensor *x = ctx->in[0];
    slim_strbuf b = {0};
    slim_status st = SLIM_OK;
    *kept = 0;
    for (int64_t i = 0, n = slim_tensor_numel(x); !st && i < n; i++) {
        bool stop;
        st = sn_is_stop(ctx->state, x, i, &b, &stop, ctx->err);
        *kept += !st && !stop;
    }
    slim_strbuf_free(&b);
    return st;
}

static slim_status sn_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_status st = slim_check_strings(x, "X", ctx->err);
    if (st)
        return st;
    if (!(x->ndim == 1 || (x->ndim == 2 && x->dims[0] == 1)))
        return slim_errf(ctx->err, SLIM_ESHAPE, "X must have shape [C] or [1, C], not %s",
                         slim_shape_str(x->ndim, x->dims, (char[160]){0}, 160));
    if (!x->data && slim_tensor_numel(x) > 0)
        return SLIM_ENEEDVALUE;
    int64_t kept;
    if ((st = sn_count(ctx, &kept)))
        return st;
    /* Everything filtered out leaves one "" (onnxruntime's [1] / [1, 1]). */
    int64_t dims[2] = {1, kept ? kept : 1};
    slim_tensor_set_shape(ctx->out[0], SLIM_STRING, x->ndim, x->ndim == 1 ? dims + 1 : dims);
    return SLIM_OK;
}

static slim_status sn_exec(slim_op_ctx *ctx)
{
    const normalizer *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    slim_strbuf b = {0}, c = {0};
    slim_status st = SLIM_OK;
    int64_t o = 0;
    for (int64_t i = 0, n = slim_tensor_numel(x); !st && i < n; i++) {
        bool stop;
        st = sn_is_stop(s, x, i, &b, &stop, ctx->err);
        if (st || stop)
            continue;
        slim_str e = slim_str_at(x, i);
        if (s->change == SLIM_CASE_NONE)
            st = slim_tensor_string_set(ctx->out[0], o++, e.ptr, (size_t)e.len, ctx->err);
        else if (!(st = slim_utf8_case(e.ptr, (size_t)e.len, s->change, &c, ctx->err)))
            st = slim_tensor_string_set(ctx->out[0], o++, c.p, c.len, ctx->err);
    }
    slim_strbuf_free(&b);
    slim_strbuf_free(&c);
    return st;
}

const slim_op_def slim__ops_strings_ml[] = {
    {"LabelEncoder", 2, le_prepare, le_release, le_infer, le_exec, SLIM_OP_STRINGS},
    {"CategoryMapper", 1, cm_prepare, cm_release, cm_infer, cm_exec, SLIM_OP_STRINGS},
    {0},
};

/* StringNormalizer is an ai.onnx operator, despite its company here. */
const slim_op_def slim__ops_strings_text[] = {
    {"StringNormalizer", 10, sn_prepare, sn_release, sn_infer, sn_exec, SLIM_OP_STRINGS},
    {0},
};
