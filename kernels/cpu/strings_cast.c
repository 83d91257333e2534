/*
 * strings_cast.c - Cast to and from strings (opset 9 on), as onnxruntime
 * does it; every other Cast goes to cast.c's, unchanged.
 *
 * To a string: integers in decimal, bool as "1"/"0", floating point with
 * "%.8g" (all widths: onnxruntime's choice), NaN as "NaN" and infinities
 * as "INF"/"-INF". From a string: the C library's strtod for floating
 * point (leading space, trailing text, "nan", "inf" and hex accepted, as
 * std::stod), strtoll / strtoull in base 10 for integers (narrower types
 * truncate as a C cast), bool as an unsigned integer != 0. A string that
 * holds no number, or one out of range, is an error naming the element.
 */
#include "strings_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* cast.c's Cast, or its CastLike for a CastLike node. */
static const slim_op_def *numeric_def(const slim_node *node)
{
    bool like = strcmp(node->op_type, "CastLike") == 0;
    return slim__strings_delegate(like ? "CastLike" : "Cast", like ? 19 : 9);
}

#define numeric_cast() numeric_def(ctx->node)

static slim_status sc_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_op_def *d = numeric_def(node);
    return d->prepare ? d->prepare(node, state, err) : SLIM_OK;
}

/* Cast's state is its parsed "to" (cast.c frees it); CastLike has none. */
static void sc_release(void *state)
{
    free(state);
}

/* The target type: the attribute (prepare checked it), or CastLike's
 * second input's. */
static slim_dtype cast_to(const slim_op_ctx *ctx)
{
    if (strcmp(ctx->node->op_type, "CastLike") == 0)
        return ctx->n_in > 1 && ctx->in[1] ? ctx->in[1]->dtype : SLIM_DTYPE_UNDEFINED;
    return slim_dtype_from_onnx((int)slim_attr_int(ctx->node, "to", 0));
}

static slim_status sc_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_dtype to = cast_to(ctx);
    if (x->dtype != SLIM_STRING && to != SLIM_STRING)
        return numeric_cast()->infer(ctx);
    if (!slim_dtype_size(x->dtype) || !slim_dtype_size(to))
        return slim_errf(ctx->err, SLIM_ETYPE, "cannot cast %s to %s",
                         slim_dtype_name(x->dtype), slim_dtype_name(to));
    slim_tensor_set_shape(ctx->out[0], to, x->ndim, x->dims);
    return SLIM_OK;
}

/* Element i of x as onnxruntime writes it, into buf. */
static int format_elem(const slim_tensor *x, int64_t i, char *buf, size_t cap)
{
    slim_dtype dt = x->dtype;
    if (dt == SLIM_BOOL)
        return snprintf(buf, cap, "%d", ((const uint8_t *)x->data)[i] != 0);
    if (slim_dtype_is_float(dt)) {
        double v = slim_load_f64(dt, x->data, i);
        if (isnan(v))
            return snprintf(buf, cap, "NaN");
        if (isinf(v))
            return snprintf(buf, cap, v < 0 ? "-INF" : "INF");
        return snprintf(buf, cap, "%.8g", v);
    }
    if (dt == SLIM_U64)
        return snprintf(buf, cap, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
    return snprintf(buf, cap, "%lld", (long long)slim_load_i64(dt, x->data, i));
}

static slim_status to_strings(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    char buf[64];
    slim_status st = SLIM_OK;
    for (int64_t i = 0, n = slim_tensor_numel(x); !st && i < n; i++) {
        int len = format_elem(x, i, buf, sizeof(buf));
        st = slim_tensor_string_set(ctx->out[0], i, buf, (size_t)len, ctx->err);
    }
    return st;
}

/* Element i of x parsed as dtype `to` into y. */
static slim_status parse_elem(const slim_tensor *x, int64_t i, slim_tensor *y, slim_err *err)
{
    slim_str s = slim_str_at(x, i);
    /* strto* want a NUL: numbers are short, longer text is not one. */
    char buf[128];
    size_t n = s.len < sizeof(buf) - 1 ? (size_t)s.len : sizeof(buf) - 1;
    if (n)
        memcpy(buf, s.ptr, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    slim_dtype to = y->dtype;
    if (slim_dtype_is_float(to)) {
        double v = strtod(buf, &end);
        if (end != buf && errno != ERANGE) {
            slim_store_f64(to, y->data, i, v);
            return SLIM_OK;
        }
    } else if (to == SLIM_BOOL || to == SLIM_U8 || to == SLIM_U16 || to == SLIM_U32 ||
               to == SLIM_U64) {
        unsigned long long v = strtoull(buf, &end, 10);
        if (end != buf && errno != ERANGE) {
            if (to == SLIM_BOOL)
                ((uint8_t *)y->data)[i] = v != 0;
            else if (to == SLIM_U64)
                ((uint64_t *)y->data)[i] = v;
            else
                slim_store_i64(to, y->data, i, (int64_t)(uint64_t)v);
            return SLIM_OK;
        }
    } else {
        long long v = strtoll(buf, &end, 10);
        if (end != buf && errno != ERANGE) {
            slim_store_i64(to, y->data, i, v);
            return SLIM_OK;
        }
    }
    return slim_errf(err, SLIM_EINVAL, "element %lld, \"%.60s\", is not %s %s", (long long)i,
                     buf, errno == ERANGE ? "in range for" : "a number of type",
                     slim_dtype_name(to));
}

static slim_status sc_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (x->dtype != SLIM_STRING && y->dtype != SLIM_STRING)
        return numeric_cast()->exec(ctx);
    if (y->dtype == SLIM_STRING && x->dtype == SLIM_STRING) {
        slim_status st = SLIM_OK;
        for (int64_t i = 0, n = slim_tensor_numel(x); !st && i < n; i++) {
            slim_str s = slim_str_at(x, i);
            st = slim_tensor_string_set(y, i, s.ptr, (size_t)s.len, ctx->err);
        }
        return st;
    }
    if (y->dtype == SLIM_STRING)
        return to_strings(ctx);
    slim_status st = SLIM_OK;
    for (int64_t i = 0, n = slim_tensor_numel(x); !st && i < n; i++)
        st = parse_elem(x, i, y, ctx->err);
    return st;
}

const slim_op_def slim__ops_strings_cast[] = {
    /* Strings cast from opset 9; before, the numeric Cast alone. */
    {"Cast", 9, sc_prepare, sc_release, sc_infer, sc_exec, SLIM_OP_STRINGS},
    /* CastLike takes strings from 15; cast.c's CastLike-15 wins the tie
     * there, so strings from CastLike-19 on. */
    {"CastLike", 19, sc_prepare, sc_release, sc_infer, sc_exec, SLIM_OP_STRINGS},
    {0},
};
