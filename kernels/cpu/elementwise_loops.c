/*
 * elementwise_loops.c - the typed inner loops of the elementwise ops and
 * each op's description (elementwise_impl.h); elementwise.c dispatches and
 * runs them.
 *
 * Every op is a table of typed inner loops indexed by dtype, generated from
 * one C expression per type family (float, signed, unsigned) by the UN_* and
 * BIN_* macros. float16 and bfloat16 have no loops of their own: they run
 * the float32 loop over small blocks converted on the stack (elementwise.c).
 *
 * Integer semantics follow numpy where ONNX leaves them open: arithmetic
 * wraps, Div truncates toward zero, division by zero gives 0 instead of a
 * trap, Mod without fmod takes the divisor's sign.
 */
#include "elementwise_impl.h"

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

/* The output has the base's type. */
void slim__ew_pow_any(const void *pa, int64_t sa, const void *pb, int64_t sb, void *py,
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

const un_loop slim__ew_mean_div[SLIM_DTYPE_COUNT] = {TAB_FLOAT(u_divcount)};

const ew_desc *slim__ew_find(const char *op)
{
    for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++)
        if (strcmp(descs[i].op, op) == 0)
            return &descs[i];
    return NULL;
}
