/* cases_elementwise.c - cross-device cases for kernels/cuda/elementwise.cu. */
#include "cuda_cases.h"

static const char *const AB[] = {"a", "b"};
static const char *const X[] = {"x"};

static void add_same_f32(cc_builder *b)
{
    cc_op(b, "Add", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){3, 5, 7});
    cc_randn(b, 1, SLIM_F32, 3, (int64_t[]){3, 5, 7});
}

static void add_bias_f16(cc_builder *b)
{
    cc_op(b, "Add", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F16, 3, (int64_t[]){2, 9, 33});
    cc_randn(b, 1, SLIM_F16, 1, (int64_t[]){33});
    cc_weight(b, 1);
}

static void sub_both_sides(cc_builder *b)
{
    cc_op(b, "Sub", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){2, 1, 7});
    cc_randn(b, 1, SLIM_F32, 2, (int64_t[]){5, 1});
}

static void mul_scalar_f16(cc_builder *b)
{
    cc_op(b, "Mul", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F16, 4, (int64_t[]){2, 3, 5, 7});
    cc_randn(b, 1, SLIM_F16, 0, (int64_t[]){0});
    cc_weight(b, 1);
}

static void div_f32(cc_builder *b)
{
    cc_op(b, "Div", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){17, 31});
    cc_uniform(b, 1, SLIM_F32, 2, (int64_t[]){17, 1}, 0.5, 2.0);
}

static void pow_f32(cc_builder *b)
{
    cc_op(b, "Pow", 15, 2, AB, 1);
    cc_uniform(b, 0, SLIM_F32, 2, (int64_t[]){4, 9}, 0.1, 3.0);
    cc_uniform(b, 1, SLIM_F32, 1, (int64_t[]){9}, -2.0, 2.0);
}

static void max3(cc_builder *b)
{
    cc_op(b, "Max", 13, 3, (const char *[]){"a", "b", "c"}, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){3, 8});
    cc_randn(b, 1, SLIM_F32, 1, (int64_t[]){8});
    cc_randn(b, 2, SLIM_F32, 2, (int64_t[]){3, 1});
}

static void empty_add(cc_builder *b)
{
    cc_op(b, "Add", 14, 2, AB, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){0, 5});
    cc_randn(b, 1, SLIM_F32, 1, (int64_t[]){5});
}

#define UNARY_CASE(fn, op, opset, dt, lo, hi)                   \
    static void fn(cc_builder *b)                               \
    {                                                           \
        cc_op(b, op, opset, 1, X, 1);                           \
        cc_uniform(b, 0, dt, 3, (int64_t[]){3, 7, 11}, lo, hi); \
    }
UNARY_CASE(relu_f32, "Relu", 14, SLIM_F32, -3, 3)
UNARY_CASE(relu_f16, "Relu", 14, SLIM_F16, -3, 3)
UNARY_CASE(sigmoid_f32, "Sigmoid", 13, SLIM_F32, -8, 8)
UNARY_CASE(tanh_f16, "Tanh", 13, SLIM_F16, -4, 4)
UNARY_CASE(erf_f32, "Erf", 13, SLIM_F32, -3, 3)
UNARY_CASE(exp_f32, "Exp", 13, SLIM_F32, -5, 5)
UNARY_CASE(log_f32, "Log", 13, SLIM_F32, 0.01, 10)
UNARY_CASE(sqrt_f16, "Sqrt", 13, SLIM_F16, 0, 10)
UNARY_CASE(neg_f32, "Neg", 13, SLIM_F32, -3, 3)
UNARY_CASE(abs_f32, "Abs", 13, SLIM_F32, -3, 3)
UNARY_CASE(recip_f32, "Reciprocal", 13, SLIM_F32, 0.5, 3)
UNARY_CASE(hswish_f32, "HardSwish", 14, SLIM_F32, -5, 5)
UNARY_CASE(softplus_f32, "Softplus", 1, SLIM_F32, -5, 25)

static void leaky(cc_builder *b)
{
    cc_op(b, "LeakyRelu", 16, 1, X, 1);
    cc_attr_f(b, "alpha", 0.2f);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){5, 13});
}

static void gelu_tanh(cc_builder *b)
{
    cc_op(b, "Gelu", 20, 1, X, 1);
    cc_attr_s(b, "approximate", "tanh");
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){5, 13});
}

static void clip11(cc_builder *b)
{
    cc_op(b, "Clip", 13, 3, (const char *[]){"x", "lo", "hi"}, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){6, 7});
    cc_uniform(b, 1, SLIM_F32, 0, (int64_t[]){0}, -0.5, -0.4);
    cc_uniform(b, 2, SLIM_F32, 0, (int64_t[]){0}, 0.6, 0.7);
    cc_weight(b, 1);
    cc_weight(b, 2);
}

static void cast_to_f16(cc_builder *b)
{
    cc_op(b, "Cast", 19, 1, X, 1);
    cc_attr_i(b, "to", 10);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){9, 1001});
}

static void cast_to_f32(cc_builder *b)
{
    cc_op(b, "Cast", 19, 1, X, 1);
    cc_attr_i(b, "to", 1);
    cc_randn(b, 0, SLIM_F16, 1, (int64_t[]){1001});
}

const cc_case cc_cases_elementwise[] = {
    {"Add f32 same shape", add_same_f32, 1e-6, false},
    {"Add f16 row bias [2,9,33]+[33]", add_bias_f16, 2e-3, false},
    {"Sub f32 [2,1,7]-[5,1]", sub_both_sides, 1e-6, false},
    {"Mul f16 by scalar", mul_scalar_f16, 2e-3, false},
    {"Div f32 [17,31]/[17,1]", div_f32, 1e-6, false},
    {"Pow f32", pow_f32, 1e-5, false},
    {"Max of three, broadcast", max3, 0, false},
    {"Add empty", empty_add, 0, false},
    {"Relu f32", relu_f32, 0, false},
    {"Relu f16", relu_f16, 0, false},
    {"Sigmoid f32", sigmoid_f32, 1e-6, false},
    {"Tanh f16", tanh_f16, 2e-3, false},
    {"Erf f32", erf_f32, 1e-6, false},
    {"Exp f32", exp_f32, 1e-6, false},
    {"Log f32", log_f32, 1e-6, false},
    {"Sqrt f16", sqrt_f16, 2e-3, false},
    {"Neg f32", neg_f32, 0, false},
    {"Abs f32", abs_f32, 0, false},
    {"Reciprocal f32", recip_f32, 1e-6, false},
    {"HardSwish f32", hswish_f32, 1e-6, false},
    {"Softplus f32", softplus_f32, 1e-6, false},
    {"LeakyRelu alpha 0.2", leaky, 1e-6, false},
    {"Gelu tanh", gelu_tanh, 1e-5, false},
    {"Clip with min/max inputs", clip11, 0, false},
    {"Cast f32 -> f16", cast_to_f16, 0, false},
    {"Cast f16 -> f32", cast_to_f32, 0, false},
    {0},
};
