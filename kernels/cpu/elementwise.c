/*
 * elementwise.c - arithmetic, math functions, activations, comparisons,
 * logic, Where and Clip on the CPU.
 *
 * Every op is a table of typed inner loops indexed by dtype, generated from
 * one C expression per type family (float, signed, unsigned) by the UN_* and
 * BIN_* macros. float16 and bfloat16 have no loops of their own: they run
 * the float32 loop over small blocks converted on the stack, which keeps the
 * tables short and needs no scratch memory.
 *
 * Broadcasting goes through an ew_plan: the output axes are collapsed (size-1
 * axes dropped, neighbours merged where every input walks them contiguously
 * or not at all), so same-shape and scalar operands become a single flat row
 * whose inner loop the compiler vectorizes, and the general case walks the
 * outer axes with a carry counter. Rows, and pieces of long rows, are the
 * work items handed to slim_parallel_for.
 *
 * Integer semantics follow numpy where ONNX leaves them open: arithmetic
 * wraps, Div truncates toward zero, division by zero gives 0 instead of a
 * trap, Mod without fmod takes the divisor's sign.
 */
#include "kernel.h"

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

/* Attribute values an inner loop may read; copied into a local before the
 * loop so that stores through float pointers cannot force reloads. */
typedef struct ew_params {
    float alpha, beta, gamma;
    int64_t i;          /* Mod: fmod. BitShift: 1 = left. Gelu: 1 = tanh.
                         * IsInf: 1 = detect +inf, 2 = -inf. Mean: count. */
    double lo, hi;      /* Clip bounds for float types */
    int64_t lo_i, hi_i; /* Clip bounds for integer types (uint64 as bits) */
    slim_dtype ta, tb;  /* Pow with base and exponent of different types */
} ew_params;

typedef void (*un_loop)(const void *x, void *y, int64_t n, const ew_params *prm);
/* sa, sb: element strides of a and b along the row, 0 when broadcast. */
typedef void (*bin_loop)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                         int64_t n, const ew_params *prm);

/* ---- loop generators ----------------------------------------------------- */

#define EW_SAME(T) T
#define EW_BOOL(T) uint8_t

/* EXPR sees x (or a, b), the element type t_, a wide unsigned type ut_ for
 * wrapping arithmetic and the parameters p. */
#define UN_LOOP(NAME, SFX, T, UT, OUT, EXPR)                                        \
    static void NAME##_##SFX(const void *px, void *py, int64_t n, const ew_params *prm) \
    {                                                                              \
        typedef T t_;                                                              \
        typedef UT ut_;                                                            \
        const ew_params p = *prm;                                                  \
        const t_ *X = px;                                                          \
        OUT(t_) *Y = py;                                                           \
        (void)p;                                                                   \
        (void)sizeof(ut_);                                                         \
        for (int64_t i = 0; i < n; i++) {                                          \
            t_ x = X[i];                                                           \
            Y[i] = (OUT(t_))(EXPR);                                                \
        }                                                                          \
    }

#define BIN_LOOP(NAME, SFX, T, UT, OUT, EXPR)                                       \
    static void NAME##_##SFX(const void *pa, int64_t sa, const void *pb, int64_t sb,  \
                             void *py, int64_t n, const ew_params *prm)            \
    {                                                                              \
        typedef T t_;                                                              \
        typedef UT ut_;                                                            \
        const ew_params p = *prm;                                                  \
        const t_ *A = pa, *B = pb;                                                 \
        OUT(t_) *Y = py;                                                           \
        (void)p;                                                                   \
        (void)sizeof(ut_);                                                         \
        if (sa == 1 && sb == 1) {                                                  \
            for (int64_t i = 0; i < n; i++) {                                      \
                t_ a = A[i], b = B[i];                                             \
                Y[i] = (OUT(t_))(EXPR);                                            \
            }                                                                      \
        } else if (sa == 0 && sb == 1) {                                           \
            t_ a = A[0];                                                           \
            for (int64_t i = 0; i < n; i++) {                                      \
                t_ b = B[i];                                                       \
                Y[i] = (OUT(t_))(EXPR);                                            \
            }                                                                      \
        } else if (sa == 1 && sb == 0) {                                           \
            t_ b = B[0];                                                           \
            for (int64_t i = 0; i < n; i++) {                                      \
                t_ a = A[i];                                                       \
                Y[i] = (OUT(t_))(EXPR);                                            \
            }                                                                      \
        } else {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                      \
                t_ a = A[i * sa], b = B[i * sb];                                   \
                Y[i] = (OUT(t_))(EXPR);                                            \
            }                                                                      \
        }                                                                          \
    }

#define UN_FLOAT(N, OUT, E) UN_LOOP(N, f32, float, float, OUT, E) UN_LOOP(N, f64, double, double, OUT, E)
#define UN_SINT(N, OUT, E)                                                          \
    UN_LOOP(N, i8, int8_t, uint32_t, OUT, E) UN_LOOP(N, i16, int16_t, uint32_t, OUT, E) \
    UN_LOOP(N, i32, int32_t, uint32_t, OUT, E) UN_LOOP(N, i64, int64_t, uint64_t, OUT, E)
#define UN_UINT(N, OUT, E)                                                          \
    UN_LOOP(N, u8, uint8_t, uint32_t, OUT, E) UN_LOOP(N, u16, uint16_t, uint32_t, OUT, E) \
    UN_LOOP(N, u32, uint32_t, uint32_t, OUT, E) UN_LOOP(N, u64, uint64_t, uint64_t, OUT, E)
#define BIN_FLOAT(N, OUT, E) BIN_LOOP(N, f32, float, float, OUT, E) BIN_LOOP(N, f64, double, double, OUT, E)
#define BIN_SINT(N, OUT, E)                                                         \
    BIN_LOOP(N, i8, int8_t, uint32_t, OUT, E) BIN_LOOP(N, i16, int16_t, uint32_t, OUT, E) \
    BIN_LOOP(N, i32, int32_t, uint32_t, OUT, E) BIN_LOOP(N, i64, int64_t, uint64_t, OUT, E)
#define BIN_UINT(N, OUT, E)                                                         \
    BIN_LOOP(N, u8, uint8_t, uint32_t, OUT, E) BIN_LOOP(N, u16, uint16_t, uint32_t, OUT, E) \
    BIN_LOOP(N, u32, uint32_t, uint32_t, OUT, E) BIN_LOOP(N, u64, uint64_t, uint64_t, OUT, E)

#define TAB_FLOAT(N) [SLIM_F32] = N##_f32, [SLIM_F64] = N##_f64
#define TAB_SINT(N) [SLIM_I8] = N##_i8, [SLIM_I16] = N##_i16, [SLIM_I32] = N##_i32, [SLIM_I64] = N##_i64
#define TAB_UINT(N) [SLIM_U8] = N##_u8, [SLIM_U16] = N##_u16, [SLIM_U32] = N##_u32, [SLIM_U64] = N##_u64
#define TAB_INT(N) TAB_SINT(N), TAB_UINT(N)
#define TAB_NUM(N) TAB_FLOAT(N), TAB_INT(N)

/* ---- scalar helpers ------------------------------------------------------ */

static inline float clamp01_f(float v) { return v < 0 ? 0 : v > 1 ? 1 : v; }
static inline double clamp01_d(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }
#define EW_CLAMP01(v) _Generic((v), float: clamp01_f, default: clamp01_d)(v)

/* fmod = 1: C fmod, sign of the dividend; 0: Python %, sign of the divisor. */
static inline double mod_f64(double a, double b, int64_t fmod_)
{
    double r = fmod(a, b);
    if (!fmod_ && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

static inline int64_t mod_i64(int64_t a, int64_t b, int64_t fmod_)
{
    if (b == 0 || b == -1) /* x % -1 is 0, and INT64_MIN % -1 traps */
        return 0;
    int64_t r = a % b;
    if (!fmod_ && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* Exact integer power with wrapping, as numpy computes it. */
static inline int64_t ipow(int64_t base, int64_t e)
{
    if (e < 0)
        return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)base;
    for (; e; e >>= 1) {
        if (e & 1)
            r *= x;
        x *= x;
    }
    return (int64_t)r;
}

/* Stores a double into an integer type without undefined conversions. */
static void store_sat(slim_dtype t, void *data, int64_t i, double v)
{
    if (!slim_dtype_is_int(t)) {
        slim_store_f64(t, data, i, v);
        return;
    }
    int64_t iv = v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX
               : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
    slim_store_i64(t, data, i, iv);
}

/* float32 exp, tanh and erf as branch-free polynomials: Cephes' kernels for
 * exp and tanh, and for erf a least-squares fit of our own (x * P(x^2) below
 * 0.92, 1 - e^-x^2 * Q(x) above). All stay within 3 ulp of the exact values,
 * call no libm function and vectorize; the libm calls they replace cost
 * 10-20 ns per element, which made Sigmoid, Tanh and Gelu cost as much as
 * the matrix products around them. float64 keeps libm. */
static inline float fast_exp(float x)
{
    /* Clamped so that 2^n stays a normal float; callers only need the
     * clamped range (results near 0 or 1 are then exact in float). */
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc; /* NaN passes and poisons q */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;
    /* 2^n: the low mantissa bits of 2^23 + 127 + n hold n + 127, the biased
     * exponent; no float-to-int conversion, which NaN would make undefined. */
    float t = n + 8388735.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof(bits));
    bits = (bits - 0x4B000000u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return q * scale;
}

static inline float fast_tanh(float x)
{
    float a = fabsf(x), z = a * a;
    float s = -5.70498872745e-3f;
    s = s * z + 2.06390887954e-2f;
    s = s * z - 5.37397155531e-2f;
    s = s * z + 1.33314422036e-1f;
    s = s * z - 3.33332819422e-1f;
    s = s * z * a + a;
    float b = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
    return copysignf(a < 0.625f ? s : b, x);
}

static inline float fast_erf(float x)
{
    float a = fabsf(x), z = a * a;
    float s = 8.36500622e-05f;
    s = s * z - 0.000814139203f;
    s = s * z + 0.00520090526f;
    s = s * z - 0.0268593412f;
    s = s * z + 0.112836942f;
    s = s * z - 0.376126349f;
    s = (s * z + 1.12837923f) * a;
    float b = 1.87023306e-06f;
    b = b * a - 5.31483784e-05f;
    b = b * a + 0.000683296297f;
    b = b * a - 0.00526775047f;
    b = b * a + 0.0272385683f;
    b = b * a - 0.10024523f;
    b = b * a + 0.272415906f;
    b = b * a - 0.560680807f;
    b = b * a + 0.889092207f;
    b = b * a - 1.08935606f;
    b = b * a + 0.993754804f;
    b = 1.0f - fast_exp(-z) * b;
    return copysignf(a < 0.921875f ? s : a >= 3.925f ? 1.0f : b, x); /* NaN takes b */
}

/* ---- unary loops --------------------------------------------------------- */

/* The polynomial activations are ~40 flops an element: at the baseline
 * x86-64 ISA (4 floats a vector) Erf cost 3.7 ns an element, 14% of an int8
 * BERT run. These loops are also compiled for AVX2 and AVX-512, picked at
 * load by CPUID (an ifunc); each element is still computed on its own, so
 * a row's result does not depend on its batch. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EW_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EW_WIDE
#endif

UN_FLOAT(u_sqrt, EW_SAME, sqrt(x))
UN_FLOAT(u_exp, EW_SAME, exp(x))
UN_FLOAT(u_log, EW_SAME, log(x))
UN_FLOAT(u_recip, EW_SAME, (t_)1 / x)
EW_WIDE UN_LOOP(u_erf, f32, float, float, EW_SAME, fast_erf(x))
UN_LOOP(u_erf, f64, double, double, EW_SAME, erf(x))
UN_FLOAT(u_floor, EW_SAME, floor(x))
UN_FLOAT(u_ceil, EW_SAME, ceil(x))
UN_FLOAT(u_round, EW_SAME, rint(x)) /* default rounding mode: halves to even */
UN_FLOAT(u_sin, EW_SAME, sin(x))
UN_FLOAT(u_cos, EW_SAME, cos(x))
UN_FLOAT(u_tan, EW_SAME, tan(x))
UN_FLOAT(u_asin, EW_SAME, asin(x))
UN_FLOAT(u_acos, EW_SAME, acos(x))
UN_FLOAT(u_atan, EW_SAME, atan(x))
UN_FLOAT(u_sinh, EW_SAME, sinh(x))
UN_FLOAT(u_cosh, EW_SAME, cosh(x))
UN_FLOAT(u_asinh, EW_SAME, asinh(x))
UN_FLOAT(u_acosh, EW_SAME, acosh(x))
UN_FLOAT(u_atanh, EW_SAME, atanh(x))
EW_WIDE UN_LOOP(u_tanh, f32, float, float, EW_SAME, fast_tanh(x))
UN_LOOP(u_tanh, f64, double, double, EW_SAME, tanh(x))
UN_FLOAT(u_neg, EW_SAME, -x)
UN_SINT(u_neg, EW_SAME, (t_)(0 - (ut_)x))
UN_FLOAT(u_abs, EW_SAME, fabs(x))
UN_SINT(u_abs, EW_SAME, x < 0 ? (t_)(0 - (ut_)x) : x)
UN_UINT(u_abs, EW_SAME, x)
UN_FLOAT(u_sign, EW_SAME, x > 0 ? (t_)1 : x < 0 ? (t_)-1 : x) /* keeps 0 and NaN */
UN_SINT(u_sign, EW_SAME, (x > 0) - (x < 0))
UN_UINT(u_sign, EW_SAME, x > 0)
UN_FLOAT(u_relu, EW_SAME, x < 0 ? (t_)0 : x) /* NaN stays NaN */
UN_SINT(u_relu, EW_SAME, x < 0 ? 0 : x)
UN_FLOAT(u_isnan, EW_BOOL, isnan(x))
UN_FLOAT(u_isinf, EW_BOOL, isinf(x) && (x > 0 ? (p.i & 1) : (p.i & 2)))
UN_LOOP(u_not, b8, uint8_t, uint8_t, EW_SAME, !x)
UN_SINT(u_bitnot, EW_SAME, (t_)~x)
UN_UINT(u_bitnot, EW_SAME, (t_)~x)
EW_WIDE UN_LOOP(u_sigmoid, f32, float, float, EW_SAME, 1.0f / (1.0f + fast_exp(-x)))
EW_WIDE UN_LOOP(u_swish, f32, float, float, EW_SAME, x / (1.0f + fast_exp(-p.alpha * x)))
UN_LOOP(u_swish, f64, double, double, EW_SAME, x / (1 + exp(-p.alpha * x)))
UN_LOOP(u_sigmoid, f64, double, double, EW_SAME, x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)))
UN_FLOAT(u_leakyrelu, EW_SAME, x < 0 ? (t_)p.alpha * x : x)
UN_FLOAT(u_hardsigmoid, EW_SAME, EW_CLAMP01((t_)p.alpha * x + (t_)p.beta))
UN_FLOAT(u_hardswish, EW_SAME, x * EW_CLAMP01((t_)p.alpha * x + (t_)p.beta))
UN_FLOAT(u_elu, EW_SAME, x < 0 ? (t_)p.alpha * expm1(x) : x)
UN_FLOAT(u_selu, EW_SAME, x > 0 ? (t_)p.gamma * x : (t_)p.gamma * (t_)p.alpha * expm1(x))
UN_FLOAT(u_celu, EW_SAME, x > 0 ? x : (t_)p.alpha * expm1(x / (t_)p.alpha))
UN_FLOAT(u_softplus, EW_SAME, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
UN_FLOAT(u_softsign, EW_SAME, x / ((t_)1 + fabs(x)))
UN_FLOAT(u_thresholdedrelu, EW_SAME, x > (t_)p.alpha ? x : (t_)0)
UN_FLOAT(u_mish, EW_SAME, x * tanh(x > 0 ? x + log1p(exp(-x)) : log1p(exp(x))))
UN_FLOAT(u_shrink, EW_SAME, x < -(t_)p.alpha ? x + (t_)p.beta : x > (t_)p.alpha ? x - (t_)p.beta : (t_)0)
/* Gelu has a loop per form: one loop selecting between them per element
 * computed both polynomials once vectorized, and cost twice an Erf. */
EW_WIDE UN_LOOP(u_gelu_erf, f32, float, float, EW_SAME,
                0.5f * x * (1.0f + fast_erf(x * 0.7071067811865476f)))
EW_WIDE UN_LOOP(u_gelu_tanh, f32, float, float, EW_SAME,
                0.5f * x * (1.0f + fast_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))))
static void u_gelu_f32(const void *x, void *y, int64_t n, const ew_params *p)
{
    (p->i ? u_gelu_tanh_f32 : u_gelu_erf_f32)(x, y, n, p);
}
UN_LOOP(u_gelu, f64, double, double, EW_SAME,
        p.i ? 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
            : 0.5 * x * (1 + erf(x * 0.7071067811865476)))
UN_FLOAT(u_divcount, EW_SAME, x / (t_)p.i) /* Mean's final step */
/* Clip: exec has already made lo <= hi, so the two tests are the numpy
 * minimum(maximum(x, lo), hi). Integers compare in int64 (uint64 in its
 * own type), where both the bounds and the default "no bound" fit. */
UN_FLOAT(u_clip, EW_SAME, x < (t_)p.lo ? (t_)p.lo : x > (t_)p.hi ? (t_)p.hi : x)
UN_SINT(u_clip, EW_SAME, x < p.lo_i ? (t_)p.lo_i : x > p.hi_i ? (t_)p.hi_i : x)
UN_LOOP(u_clip, u8, uint8_t, uint32_t, EW_SAME, x < p.lo_i ? (t_)p.lo_i : x > p.hi_i ? (t_)p.hi_i : x)
UN_LOOP(u_clip, u16, uint16_t, uint32_t, EW_SAME, x < p.lo_i ? (t_)p.lo_i : x > p.hi_i ? (t_)p.hi_i : x)
UN_LOOP(u_clip, u32, uint32_t, uint32_t, EW_SAME,
        (int64_t)x < p.lo_i ? (t_)p.lo_i : (int64_t)x > p.hi_i ? (t_)p.hi_i : x)
UN_LOOP(u_clip, u64, uint64_t, uint64_t, EW_SAME,
        x < (t_)p.lo_i ? (t_)p.lo_i : x > (t_)p.hi_i ? (t_)p.hi_i : x)

/* ---- binary loops -------------------------------------------------------- */

BIN_FLOAT(b_add, EW_SAME, a + b)
BIN_SINT(b_add, EW_SAME, (t_)((ut_)a + (ut_)b))
BIN_UINT(b_add, EW_SAME, (t_)((ut_)a + (ut_)b))
BIN_FLOAT(b_sub, EW_SAME, a - b)
BIN_SINT(b_sub, EW_SAME, (t_)((ut_)a - (ut_)b))
BIN_UINT(b_sub, EW_SAME, (t_)((ut_)a - (ut_)b))
BIN_FLOAT(b_mul, EW_SAME, a * b)
BIN_SINT(b_mul, EW_SAME, (t_)((ut_)a * (ut_)b))
BIN_UINT(b_mul, EW_SAME, (t_)((ut_)a * (ut_)b))
BIN_FLOAT(b_div, EW_SAME, a / b)
BIN_SINT(b_div, EW_SAME, b == 0 ? (t_)0 : b == -1 ? (t_)(0 - (ut_)a) : (t_)(a / b))
BIN_UINT(b_div, EW_SAME, b == 0 ? (t_)0 : (t_)(a / b))
BIN_FLOAT(b_mod, EW_SAME, (t_)mod_f64(a, b, p.i))
BIN_SINT(b_mod, EW_SAME, (t_)mod_i64(a, b, p.i))
BIN_UINT(b_mod, EW_SAME, b == 0 ? (t_)0 : (t_)(a % b))
BIN_FLOAT(b_min, EW_SAME, isnan(a) || a < b ? a : b) /* NaN propagates */
BIN_SINT(b_min, EW_SAME, a < b ? a : b)
BIN_UINT(b_min, EW_SAME, a < b ? a : b)
BIN_FLOAT(b_max, EW_SAME, isnan(a) || a > b ? a : b)
BIN_SINT(b_max, EW_SAME, a > b ? a : b)
BIN_UINT(b_max, EW_SAME, a > b ? a : b)
BIN_FLOAT(b_prelu, EW_SAME, a < 0 ? a * b : a)
BIN_SINT(b_prelu, EW_SAME, a < 0 ? (t_)((ut_)a * (ut_)b) : a)
BIN_FLOAT(b_eq, EW_BOOL, a == b)
BIN_SINT(b_eq, EW_BOOL, a == b)
BIN_UINT(b_eq, EW_BOOL, a == b)
BIN_LOOP(b_eq, b8, uint8_t, uint8_t, EW_BOOL, !a == !b)
BIN_FLOAT(b_lt, EW_BOOL, a < b)
BIN_SINT(b_lt, EW_BOOL, a < b)
BIN_UINT(b_lt, EW_BOOL, a < b)
BIN_FLOAT(b_gt, EW_BOOL, a > b)
BIN_SINT(b_gt, EW_BOOL, a > b)
BIN_UINT(b_gt, EW_BOOL, a > b)
BIN_FLOAT(b_le, EW_BOOL, a <= b)
BIN_SINT(b_le, EW_BOOL, a <= b)
BIN_UINT(b_le, EW_BOOL, a <= b)
BIN_FLOAT(b_ge, EW_BOOL, a >= b)
BIN_SINT(b_ge, EW_BOOL, a >= b)
BIN_UINT(b_ge, EW_BOOL, a >= b)
BIN_SINT(b_bitand, EW_SAME, (t_)(a & b))
BIN_UINT(b_bitand, EW_SAME, (t_)(a & b))
BIN_SINT(b_bitor, EW_SAME, (t_)(a | b))
BIN_UINT(b_bitor, EW_SAME, (t_)(a | b))
BIN_SINT(b_bitxor, EW_SAME, (t_)(a ^ b))
BIN_UINT(b_bitxor, EW_SAME, (t_)(a ^ b))
BIN_LOOP(b_and, b8, uint8_t, uint8_t, EW_BOOL, a && b)
BIN_LOOP(b_or, b8, uint8_t, uint8_t, EW_BOOL, a || b)
BIN_LOOP(b_xor, b8, uint8_t, uint8_t, EW_BOOL, !a != !b)
/* Shifting by the width or more is undefined in C; numpy gives 0. */
BIN_UINT(b_shift, EW_SAME,
         (uint64_t)b >= 8 * sizeof(t_) ? (t_)0 : p.i ? (t_)(a << b) : (t_)(a >> b))
BIN_LOOP(b_pow, f64, double, double, EW_SAME, pow(a, b))
BIN_LOOP(b_pow, i32, int32_t, uint32_t, EW_SAME, (t_)ipow(a, b))
BIN_LOOP(b_pow, i64, int64_t, uint64_t, EW_SAME, (t_)ipow(a, b))

/* x^2 (LayerNorm written out, variance terms) is common enough to skip powf. */
static void b_pow_f32(const void *pa, int64_t sa, const void *pb, int64_t sb, void *py,
                      int64_t n, const ew_params *prm)
{
    const float *A = pa, *B = pb;
    float *Y = py;
    if (sb == 0 && B[0] == 2.0f) {
        for (int64_t i = 0; i < n; i++)
            Y[i] = A[i * sa] * A[i * sa];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        Y[i] = pow(A[i * sa], B[i * sb]);
}

/* Pow with base and exponent of different types: through double, or exact
 * integer powers when both are integers. The output has the base's type. */
static void b_pow_any(const void *pa, int64_t sa, const void *pb, int64_t sb, void *py,
                      int64_t n, const ew_params *prm)
{
    bool ints = slim_dtype_is_int(prm->ta) && slim_dtype_is_int(prm->tb);
    for (int64_t i = 0; i < n; i++) {
        if (ints)
            slim_store_i64(prm->ta, py, i,
                           ipow(slim_load_i64(prm->ta, pa, i * sa), slim_load_i64(prm->tb, pb, i * sb)));
        else
            store_sat(prm->ta, py, i,
                      pow(slim_load_f64(prm->ta, pa, i * sa), slim_load_f64(prm->tb, pb, i * sb)));
    }
}

/* ---- op descriptions ----------------------------------------------------- */

typedef enum { EW_UNARY, EW_CLIP, EW_BINARY, EW_POW, EW_VARIADIC, EW_MEAN, EW_WHERE } ew_kind;

typedef struct ew_desc {
    const char *op;
    ew_kind kind;
    const un_loop *un;   /* [SLIM_DTYPE_COUNT], UNARY and CLIP */
    const bin_loop *bin; /* [SLIM_DTYPE_COUNT], BINARY, POW, VARIADIC, MEAN */
    bool to_bool;        /* output is bool whatever the input type */
    /* Float attributes read into alpha, beta, gamma; a NULL name fixes the
     * parameter at its default. */
    const char *attr[3];
    float dflt[3];
    slim_status (*parse)(const slim_node *n, ew_params *p, slim_err *err);
} ew_desc;

typedef struct ew_state {
    const ew_desc *d;
    ew_params p;
} ew_state;

static slim_status parse_mod(const slim_node *n, ew_params *p, slim_err *err)
{
    p->i = slim_attr_int(n, "fmod", 0);
    if (p->i != 0 && p->i != 1)
        return slim_errf(err, SLIM_EINVAL, "attribute fmod must be 0 or 1, got %lld", (long long)p->i);
    return SLIM_OK;
}

static slim_status parse_bitshift(const slim_node *n, ew_params *p, slim_err *err)
{
    const char *dir = slim_attr_str(n, "direction", "");
    if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
        return slim_errf(err, SLIM_EINVAL, "attribute direction must be LEFT or RIGHT, got \"%s\"", dir);
    p->i = strcmp(dir, "LEFT") == 0;
    return SLIM_OK;
}

static slim_status parse_gelu(const slim_node *n, ew_params *p, slim_err *err)
{
    const char *approx = slim_attr_str(n, "approximate", "none");
    if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
        return slim_errf(err, SLIM_EINVAL, "attribute approximate must be none or tanh, got \"%s\"", approx);
    p->i = strcmp(approx, "tanh") == 0;
    return SLIM_OK;
}

static slim_status parse_isinf(const slim_node *n, ew_params *p, slim_err *err)
{
    p->i = (slim_attr_int(n, "detect_positive", 1) ? 1 : 0) |
           (slim_attr_int(n, "detect_negative", 1) ? 2 : 0);
    return SLIM_OK;
}

/* Celu divides by alpha (read already, with the other float attributes). */
static slim_status parse_celu(const slim_node *n, ew_params *p, slim_err *err)
{
    if (p->alpha == 0)
        return slim_errf(err, SLIM_EINVAL, "attribute alpha must not be 0");
    return SLIM_OK;
}

/* Clip took its bounds as attributes before opset 11, as inputs since. */
static slim_status parse_clip(const slim_node *n, ew_params *p, slim_err *err)
{
    p->lo = n->opset < 11 ? slim_attr_float(n, "min", -INFINITY) : -INFINITY;
    p->hi = n->opset < 11 ? slim_attr_float(n, "max", INFINITY) : INFINITY;
    return SLIM_OK;
}

#define UN(...) (const un_loop[SLIM_DTYPE_COUNT]){__VA_ARGS__}
#define BIN(...) (const bin_loop[SLIM_DTYPE_COUNT]){__VA_ARGS__}
#define FLOAT_UN(op, name) {op, EW_UNARY, .un = UN(TAB_FLOAT(name))}
#define NUM_CMP(op, name) {op, EW_BINARY, .bin = BIN(TAB_NUM(name)), .to_bool = true}

static const ew_desc descs[] = {
    {"Add", EW_BINARY, .bin = BIN(TAB_NUM(b_add))},
    {"Sub", EW_BINARY, .bin = BIN(TAB_NUM(b_sub))},
    {"Mul", EW_BINARY, .bin = BIN(TAB_NUM(b_mul))},
    {"Div", EW_BINARY, .bin = BIN(TAB_NUM(b_div))},
    {"Mod", EW_BINARY, .bin = BIN(TAB_NUM(b_mod)), .parse = parse_mod},
    {"Pow", EW_POW, .bin = BIN([SLIM_F32] = b_pow_f32, [SLIM_F64] = b_pow_f64,
                               [SLIM_I32] = b_pow_i32, [SLIM_I64] = b_pow_i64)},
    {"PRelu", EW_BINARY, .bin = BIN(TAB_FLOAT(b_prelu), TAB_SINT(b_prelu))},
    {"BitShift", EW_BINARY, .bin = BIN(TAB_UINT(b_shift)), .parse = parse_bitshift},
    {"Sum", EW_VARIADIC, .bin = BIN(TAB_NUM(b_add))},
    {"Mean", EW_MEAN, .bin = BIN(TAB_FLOAT(b_add))},
    {"Min", EW_VARIADIC, .bin = BIN(TAB_NUM(b_min))},
    {"Max", EW_VARIADIC, .bin = BIN(TAB_NUM(b_max))},
    {"Equal", EW_BINARY, .bin = BIN(TAB_NUM(b_eq), [SLIM_BOOL] = b_eq_b8), .to_bool = true},
    NUM_CMP("Less", b_lt),
    NUM_CMP("Greater", b_gt),
    NUM_CMP("LessOrEqual", b_le),
    NUM_CMP("GreaterOrEqual", b_ge),
    {"And", EW_BINARY, .bin = BIN([SLIM_BOOL] = b_and_b8), .to_bool = true},
    {"Or", EW_BINARY, .bin = BIN([SLIM_BOOL] = b_or_b8), .to_bool = true},
    {"Xor", EW_BINARY, .bin = BIN([SLIM_BOOL] = b_xor_b8), .to_bool = true},
    {"Not", EW_UNARY, .un = UN([SLIM_BOOL] = u_not_b8)},
    {"BitwiseAnd", EW_BINARY, .bin = BIN(TAB_INT(b_bitand))},
    {"BitwiseOr", EW_BINARY, .bin = BIN(TAB_INT(b_bitor))},
    {"BitwiseXor", EW_BINARY, .bin = BIN(TAB_INT(b_bitxor))},
    {"BitwiseNot", EW_UNARY, .un = UN(TAB_INT(u_bitnot))},
    {"Where", EW_WHERE, .un = NULL},
    {"Clip", EW_CLIP, .un = UN(TAB_NUM(u_clip)), .parse = parse_clip},
    FLOAT_UN("Sqrt", u_sqrt),
    FLOAT_UN("Exp", u_exp),
    FLOAT_UN("Log", u_log),
    FLOAT_UN("Reciprocal", u_recip),
    FLOAT_UN("Erf", u_erf),
    FLOAT_UN("Floor", u_floor),
    FLOAT_UN("Ceil", u_ceil),
    FLOAT_UN("Round", u_round),
    FLOAT_UN("Sin", u_sin),
    FLOAT_UN("Cos", u_cos),
    FLOAT_UN("Tan", u_tan),
    FLOAT_UN("Asin", u_asin),
    FLOAT_UN("Acos", u_acos),
    FLOAT_UN("Atan", u_atan),
    FLOAT_UN("Sinh", u_sinh),
    FLOAT_UN("Cosh", u_cosh),
    FLOAT_UN("Asinh", u_asinh),
    FLOAT_UN("Acosh", u_acosh),
    FLOAT_UN("Atanh", u_atanh),
    FLOAT_UN("Tanh", u_tanh),
    FLOAT_UN("Sigmoid", u_sigmoid),
    FLOAT_UN("Softplus", u_softplus),
    FLOAT_UN("Softsign", u_softsign),
    FLOAT_UN("Mish", u_mish),
    {"Neg", EW_UNARY, .un = UN(TAB_FLOAT(u_neg), TAB_SINT(u_neg))},
    {"Abs", EW_UNARY, .un = UN(TAB_NUM(u_abs))},
    {"Sign", EW_UNARY, .un = UN(TAB_NUM(u_sign))},
    {"Relu", EW_UNARY, .un = UN(TAB_FLOAT(u_relu), TAB_SINT(u_relu))},
    {"IsNaN", EW_UNARY, .un = UN(TAB_FLOAT(u_isnan)), .to_bool = true},
    {"IsInf", EW_UNARY, .un = UN(TAB_FLOAT(u_isinf)), .to_bool = true, .parse = parse_isinf},
    {"LeakyRelu", EW_UNARY, .un = UN(TAB_FLOAT(u_leakyrelu)), .attr = {"alpha"}, .dflt = {0.01f}},
    {"HardSigmoid", EW_UNARY, .un = UN(TAB_FLOAT(u_hardsigmoid)), .attr = {"alpha", "beta"},
     .dflt = {0.2f, 0.5f}},
    {"HardSwish", EW_UNARY, .un = UN(TAB_FLOAT(u_hardswish)), .dflt = {1.0f / 6, 0.5f}},
    {"Elu", EW_UNARY, .un = UN(TAB_FLOAT(u_elu)), .attr = {"alpha"}, .dflt = {1.0f}},
    {"Selu", EW_UNARY, .un = UN(TAB_FLOAT(u_selu)), .attr = {"alpha", NULL, "gamma"},
     .dflt = {1.67326319217681884765625f, 0, 1.05070102214813232421875f}},
    {"Celu", EW_UNARY, .un = UN(TAB_FLOAT(u_celu)), .attr = {"alpha"}, .dflt = {1.0f},
     .parse = parse_celu},
    {"ThresholdedRelu", EW_UNARY, .un = UN(TAB_FLOAT(u_thresholdedrelu)), .attr = {"alpha"},
     .dflt = {1.0f}},
    {"Shrink", EW_UNARY, .un = UN(TAB_FLOAT(u_shrink)), .attr = {"lambd", "bias"}, .dflt = {0.5f, 0}},
    {"Swish", EW_UNARY, .un = UN(TAB_FLOAT(u_swish)), .attr = {"alpha"}, .dflt = {1.0f}},
    {"Gelu", EW_UNARY, .un = UN(TAB_FLOAT(u_gelu)), .parse = parse_gelu},
};

static const un_loop mean_div[SLIM_DTYPE_COUNT] = {TAB_FLOAT(u_divcount)};

static slim_status ew_prepare(slim_node *node, void **state, slim_err *err)
{
    const ew_desc *d = NULL;
    for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]) && !d; i++)
        if (strcmp(descs[i].op, node->op_type) == 0)
            d = &descs[i];
    if (!d)
        return slim_errf(err, SLIM_EINTERNAL, "no elementwise description for %s", node->op_type);
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

/* Where only moves elements, so it dispatches on their size, not type. */
static void where_row(void *arg, const int64_t *off, int64_t yoff, int64_t n, const int64_t *inner)
{
    const where_job *j = arg;
    const uint8_t *C = j->c + off[0];
    switch (j->es) {
    case 1: WHERE_ROW(uint8_t); break;
    case 2: WHERE_ROW(uint16_t); break;
    case 4: WHERE_ROW(uint32_t); break;
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
            if (es != 1 && es != 2 && es != 4 && es != 8)
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
            fn = b_pow_any;
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
            return run_unary(mean_div, &prm, y, y, ctx->err);
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
