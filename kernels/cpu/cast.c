/*
 * cast.c - Cast and CastLike between every dtype in slim.h; BitCast.
 *
 * The ten C-native types (float, double, 8 to 64-bit integers) convert with
 * one generated loop per (source, destination) pair. bool reads as uint8 and
 * writes as x != 0. float16 and bfloat16 go through float32, which holds
 * them exactly: as a source they widen block by block into a stack buffer;
 * as a destination they narrow from float32 with a single rounding to
 * nearest even. From double (and wide integers) a direct narrowing would
 * round twice, which is wrong at ties, so the double is first rounded to
 * float "to odd" (truncate, then set the last bit if anything was lost); a
 * 24-bit round-to-odd value keeps enough information for the final
 * rounding to 11 or 8 bits to be correct.
 *
 * Float to integer conversions truncate toward zero, as C and numpy do;
 * NaN gives 0 and values beyond int64 saturate, where C would be undefined.
 * Narrower integer targets then wrap like numpy's (-1.0 to uint8 is 255).
 *
 * Strings, float8, 4-bit and 2-bit types have no slim dtype: Cast to them
 * is rejected as unsupported when the node is prepared.
 */
#include "kernel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAST_CHUNK 16384 /* elements per parallel work item */
#define CAST_BLOCK 512   /* elements widened to float per step */

/* ONNX TensorProto type names, indexed by code; Cast-1 names `to` this way. */
static const char *const onnx_type_names[] = {
    "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
    "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
    "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
};
#define N_ONNX_TYPES (int)(sizeof(onnx_type_names) / sizeof(onnx_type_names[0]))

static inline int64_t f2i64(double v)
{
    return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

static inline uint64_t f2u64(double v)
{
    if (v >= 0x1p63)
        return v >= 0x1p64 ? UINT64_MAX : (uint64_t)(v - 0x1p63) + (UINT64_C(1) << 63);
    return (uint64_t)f2i64(v);
}

#define IS_FLOATING(v) _Generic((v), float: 1, double: 1, default: 0)
/* Element conversion; the branch not taken for a type pair is dead code. */
#define CAST_ELEM(DT, v)                                                           \
    (IS_FLOATING(v) && !IS_FLOATING((DT)0)                                         \
         ? _Generic((DT)0, uint64_t: (DT)f2u64(v), default: (DT)f2i64(v))          \
         : (DT)(v))

/* Two copies of the type list: a macro does not expand inside itself. */
#define CAST_SRC_TYPES(X)                                                          \
    X(SLIM_F32, float) X(SLIM_F64, double) X(SLIM_I8, int8_t) X(SLIM_I16, int16_t)  \
    X(SLIM_I32, int32_t) X(SLIM_I64, int64_t) X(SLIM_U8, uint8_t)                   \
    X(SLIM_U16, uint16_t) X(SLIM_U32, uint32_t) X(SLIM_U64, uint64_t)
#define CAST_DST_TYPES(X)                                                          \
    X(SLIM_F32, float) X(SLIM_F64, double) X(SLIM_I8, int8_t) X(SLIM_I16, int16_t)  \
    X(SLIM_I32, int32_t) X(SLIM_I64, int64_t) X(SLIM_U8, uint8_t)                   \
    X(SLIM_U16, uint16_t) X(SLIM_U32, uint32_t) X(SLIM_U64, uint64_t)

#define CAST_DST_CASE(DE, DT)                                                      \
    case DE:                                                                       \
        for (int64_t i = 0; i < n; i++)                                            \
            ((DT *)dst)[i] = CAST_ELEM(DT, x[i]);                                  \
        return;

#define CAST_FROM_FN(SE, ST)                                                       \
    static void cast_from_##ST(const void *src, slim_dtype dt, void *dst, int64_t n) \
    {                                                                              \
        const ST *x = src;                                                         \
        switch (dt) {                                                              \
            CAST_DST_TYPES(CAST_DST_CASE)                                          \
        case SLIM_BOOL:                                                            \
            for (int64_t i = 0; i < n; i++)                                        \
                ((uint8_t *)dst)[i] = x[i] != 0;                                   \
            return;                                                                \
        default: /* half types are handled by convert() */                        \
            return;                                                                \
        }                                                                          \
    }

CAST_SRC_TYPES(CAST_FROM_FN)

/* Between C-native types and bool. */
static void cast_native(slim_dtype st, const void *src, slim_dtype dt, void *dst, int64_t n)
{
    switch (st) {
#define CAST_SRC_CASE(SE, ST) \
    case SE: cast_from_##ST(src, dt, dst, n); return;
        CAST_SRC_TYPES(CAST_SRC_CASE)
#undef CAST_SRC_CASE
    case SLIM_BOOL: cast_from_uint8_t(src, dt, dst, n); return;
    default: return;
    }
}

static bool is_half(slim_dtype t)
{
    return t == SLIM_F16 || t == SLIM_BF16;
}

/* Rounds to float toward zero and sets the last bit when inexact. */
static float f64_to_f32_odd(double d)
{
    float f = (float)d;
    if ((double)f == d || f != f || isinf(f))
        return f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if (fabs((double)f) > fabs(d))
        bits--; /* rounded away from zero: step back toward it */
    bits |= 1;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* Covers every pair of slim dtypes. */
static void convert(slim_dtype st, const void *src, slim_dtype dt, void *dst, int64_t n)
{
    if (st == dt) {
        memcpy(dst, src, (size_t)n * slim_dtype_size(st));
        return;
    }
    if (is_half(st)) {
        const uint16_t *x = src;
        float buf[CAST_BLOCK];
        size_t dsize = slim_dtype_size(dt);
        for (int64_t i = 0; i < n; i += CAST_BLOCK) {
            int64_t m = n - i < CAST_BLOCK ? n - i : CAST_BLOCK;
            for (int64_t k = 0; k < m; k++)
                buf[k] = st == SLIM_F16 ? slim_f16_to_f32(x[i + k]) : slim_bf16_to_f32(x[i + k]);
            convert(SLIM_F32, buf, dt, (char *)dst + i * dsize, m);
        }
        return;
    }
    if (is_half(dt)) {
        uint16_t *y = dst;
        if (st == SLIM_F32) {
            const float *x = src;
            for (int64_t i = 0; i < n; i++)
                y[i] = dt == SLIM_F16 ? slim_f32_to_f16(x[i]) : slim_f32_to_bf16(x[i]);
            return;
        }
        double buf[CAST_BLOCK];
        size_t ssize = slim_dtype_size(st);
        for (int64_t i = 0; i < n; i += CAST_BLOCK) {
            int64_t m = n - i < CAST_BLOCK ? n - i : CAST_BLOCK;
            cast_native(st, (const char *)src + i * ssize, SLIM_F64, buf, m);
            for (int64_t k = 0; k < m; k++) {
                float f = f64_to_f32_odd(buf[k]);
                y[i + k] = dt == SLIM_F16 ? slim_f32_to_f16(f) : slim_f32_to_bf16(f);
            }
        }
        return;
    }
    cast_native(st, src, dt, dst, n);
}

/* ---- ops ----------------------------------------------------------------- */

typedef struct cast_state {
    slim_dtype to;
} cast_state;

static slim_status cast_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "to");
    if (!a)
        return slim_errf(err, SLIM_EINVAL, "attribute to is required");
    int code = -1;
    if (a->type == SLIM_ATTR_STRING) { /* Cast-1: "FLOAT", "INT64", ... */
        for (int i = 0; i < N_ONNX_TYPES && code < 0; i++)
            if (a->s && strcmp(a->s, onnx_type_names[i]) == 0)
                code = i;
        if (code < 0)
            return slim_errf(err, SLIM_EINVAL, "attribute to names unknown type \"%s\"",
                             a->s ? a->s : "");
    } else {
        code = a->i < 0 || a->i > 1000 ? -1 : (int)a->i;
    }
    slim_dtype to = code > 0 ? slim_dtype_from_onnx(code) : SLIM_DTYPE_UNDEFINED;
    if (to == SLIM_DTYPE_UNDEFINED) {
        if (code > 0 && code < N_ONNX_TYPES)
            return slim_errf(err, SLIM_EUNSUPPORTED, "cast to %s is not supported",
                             onnx_type_names[code]);
        return slim_errf(err, SLIM_EINVAL, "attribute to has unknown type code %lld",
                         (long long)a->i);
    }
    /* raw: fixed-size load-time state, freed with the model */
    cast_state *s = malloc(sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    s->to = to;
    *state = s;
    return SLIM_OK;
}

static slim_status cast_infer(slim_op_ctx *ctx)
{
    bool like = ctx->state == NULL;
    if (ctx->n_in < (like ? 2 : 1) || !ctx->in[0] || (like && !ctx->in[1]))
        return slim_errf(ctx->err, SLIM_EINVAL, "expects %d inputs", like ? 2 : 1);
    const slim_tensor *x = ctx->in[0];
    slim_dtype to = like ? ctx->in[1]->dtype : ((const cast_state *)ctx->state)->to;
    if (x->dtype <= SLIM_DTYPE_UNDEFINED || x->dtype >= SLIM_DTYPE_COUNT ||
        to <= SLIM_DTYPE_UNDEFINED || to >= SLIM_DTYPE_COUNT)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "cast from %s to %s is not supported",
                         slim_dtype_name(x->dtype), slim_dtype_name(to));
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], to, x->ndim, x->dims);
    return SLIM_OK;
}

typedef struct cast_job {
    slim_dtype st, dt;
    const char *src;
    char *dst;
} cast_job;

static void cast_range(int64_t begin, int64_t end, void *arg)
{
    const cast_job *j = arg;
    convert(j->st, j->src + begin * slim_dtype_size(j->st), j->dt,
            j->dst + begin * slim_dtype_size(j->dt), end - begin);
}

static slim_status cast_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    int64_t n = slim_tensor_numel(x);
    if (!y || n == 0)
        return SLIM_OK;
    cast_job j = {x->dtype, y->dtype, x->data, y->data};
    slim_parallel_for(n, CAST_CHUNK, cast_range, &j);
    return SLIM_OK;
}

/* BitCast reinterprets the bytes; the element sizes must match. */
static slim_status bitcast_prepare(slim_node *node, void **state, slim_err *err)
{
    const slim_attr *a = slim_node_attr(node, "to");
    if (!a || a->type != SLIM_ATTR_INT)
        return slim_errf(err, SLIM_EINVAL, "attribute to is required");
    return cast_prepare(node, state, err);
}

static slim_status bitcast_infer(slim_op_ctx *ctx)
{
    slim_status st = cast_infer(ctx);
    if (st != SLIM_OK)
        return st;
    slim_dtype from = ctx->in[0]->dtype, to = ((const cast_state *)ctx->state)->to;
    if (slim_dtype_size(from) != slim_dtype_size(to))
        return slim_errf(ctx->err, SLIM_ETYPE, "cannot reinterpret %s (%zu bytes) as %s (%zu bytes)",
                         slim_dtype_name(from), slim_dtype_size(from), slim_dtype_name(to),
                         slim_dtype_size(to));
    return SLIM_OK;
}

static slim_status bitcast_exec(slim_op_ctx *ctx)
{
    slim_tensor *y = ctx->out[0];
    if (y && slim_tensor_nbytes(y) > 0 && y->data != ctx->in[0]->data)
        memcpy(y->data, ctx->in[0]->data, slim_tensor_nbytes(y));
    return SLIM_OK;
}

const slim_op_def slim__ops_cast[] = {
    {"Cast", 1, cast_prepare, free, cast_infer, cast_exec, 0},
    /* No state: infer and exec take the target type from input 1. */
    {"CastLike", 15, NULL, NULL, cast_infer, cast_exec, 0},
    {"BitCast", 26, bitcast_prepare, free, bitcast_infer, bitcast_exec, 0},
    {0},
};
