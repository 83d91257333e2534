/* test_elementwise.c - elementwise ops (kernels/cpu/elementwise.c) and Cast
 * (kernels/cpu/cast.c): values from the operator definitions, computed by
 * hand, plus the error paths. */
#include "testutil.h"
#include "slim_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs a one-node graph and returns its single output; asserts success. */
static slim_tensor run_ok(slim_graph *g, slim_tensor *in, int n_in)
{
    slim_tensor *out;
    int n_out;
    slim_err err;
    slim_status st = tu_run(g, in, n_in, &out, &n_out, &err);
    if (st != SLIM_OK)
        ck_abort_msg("run failed: %s", err.msg);
    ck_assert_int_eq(n_out, 1);
    slim_tensor y = out[0];
    free(out); /* keep out[0]'s buffer; the caller releases it */
    tu_free_inputs(in, n_in);
    return y;
}

static slim_status run_err(slim_graph *g, slim_tensor *in, int n_in, slim_err *err)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_status st = tu_run(g, in, n_in, &out, &n_out, err);
    if (st == SLIM_OK)
        slim_tensors_free(out, n_out);
    tu_free_inputs(in, n_in);
    return st;
}

static const char *const AB[] = {"a", "b"};
static const char *const ABC[] = {"a", "b", "c"};
static const char *const X[] = {"x"};

/* ---- arithmetic and broadcasting ----------------------------------------- */

START_TEST(test_add_broadcast_row)
{
    slim_graph *g = tu_graph("Add", 14, 2, AB, 1);
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6}),
                         tu_f32(1, (int64_t[]){3}, (float[]){10, 20, 30})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_shape(&y, 2, (int64_t[]){2, 3});
    tu_assert_close_f32(&y, (float[]){11, 22, 33, 14, 25, 36}, 6, 0);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_sub_broadcast_both_sides)
{
    /* [2,1,3] - [4,1] -> [2,4,3]: y[i,j,k] = a[i,k] - b[j]. */
    slim_graph *g = tu_graph("Sub", 14, 2, AB, 1);
    slim_tensor in[2] = {tu_f32(3, (int64_t[]){2, 1, 3}, (float[]){1, 2, 3, 4, 5, 6}),
                         tu_f32(2, (int64_t[]){4, 1}, (float[]){0, 10, 20, 30})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_shape(&y, 3, (int64_t[]){2, 4, 3});
    float want[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                want[(i * 4 + j) * 3 + k] = (float)(i * 3 + k + 1) - 10.0f * j;
    tu_assert_close_f32(&y, want, 24, 0);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_add_legacy_axis_broadcast)
{
    /* Opset 6: broadcast=1, axis=1 aligns B [3] with A's axis 1 of [2,3,2]. */
    slim_graph *g = tu_graph("Add", 6, 2, AB, 1);
    tu_attr_i(tu_node0(g), "broadcast", 1);
    tu_attr_i(tu_node0(g), "axis", 1);
    slim_tensor in[2] = {tu_f32(3, (int64_t[]){2, 3, 2}, (float[]){0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}),
                         tu_f32(1, (int64_t[]){3}, (float[]){10, 20, 30})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_shape(&y, 3, (int64_t[]){2, 3, 2});
    tu_assert_close_f32(&y, (float[]){10, 10, 20, 20, 30, 30, 11, 11, 21, 21, 31, 31}, 12, 0);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_mul_large_parallel)
{
    /* Long enough to be split across threads, with a scalar operand. */
    const int64_t n = 300001;
    float *a = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(i % 1000);
    slim_graph *g = tu_graph("Mul", 14, 2, AB, 1);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){n}, a), tu_f32(0, NULL, (float[]){0.5f})};
    slim_tensor y = run_ok(g, in, 2);
    const float *v = y.data;
    for (int64_t i = 0; i < n; i++)
        if (v[i] != a[i] * 0.5f)
            ck_abort_msg("element %lld: %g", (long long)i, v[i]);
    slim_tensor_release(&y);
    free(a);
}
END_TEST

START_TEST(test_div_int_truncates)
{
    /* C truncation toward zero; x/0 gives 0 and INT32_MIN/-1 wraps, no trap. */
    slim_graph *g = tu_graph("Div", 14, 2, AB, 1);
    slim_tensor in[2] = {tu_tensor(SLIM_I32, 1, (int64_t[]){5}, (int32_t[]){7, -7, 7, 5, INT32_MIN}),
                         tu_tensor(SLIM_I32, 1, (int64_t[]){5}, (int32_t[]){2, 2, -2, 0, -1})};
    slim_tensor y = run_ok(g, in, 2);
    const int32_t *v = y.data;
    ck_assert_int_eq(v[0], 3);
    ck_assert_int_eq(v[1], -3);
    ck_assert_int_eq(v[2], -3);
    ck_assert_int_eq(v[3], 0);
    ck_assert_int_eq(v[4], INT32_MIN);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_mod_sign_rules)
{
    /* fmod=0: sign of the divisor (Python); fmod=1: sign of the dividend. */
    for (int fm = 0; fm <= 1; fm++) {
        slim_graph *g = tu_graph("Mod", 13, 2, AB, 1);
        tu_attr_i(tu_node0(g), "fmod", fm);
        slim_tensor in[2] = {tu_i64(1, (int64_t[]){4}, (int64_t[]){-4, 7, 5, -5}),
                             tu_i64(1, (int64_t[]){4}, (int64_t[]){3, -3, 3, -3})};
        slim_tensor y = run_ok(g, in, 2);
        const int64_t *v = y.data;
        const int64_t want[2][4] = {{2, -2, 2, -2}, {-1, 1, 2, -2}};
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq(v[i], want[fm][i]);
        slim_tensor_release(&y);
    }
    slim_graph *g = tu_graph("Mod", 13, 2, AB, 1);
    tu_attr_i(tu_node0(g), "fmod", 1);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){2}, (float[]){-4.5f, 7.5f}),
                         tu_f32(1, (int64_t[]){2}, (float[]){2, -2})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_close_f32(&y, (float[]){-0.5f, 1.5f}, 2, 0);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_pow_mixed_types)
{
    /* float base, int64 exponent: output float. */
    slim_graph *g = tu_graph("Pow", 15, 2, AB, 1);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){3}, (float[]){2, 3, 4}),
                         tu_i64(1, (int64_t[]){3}, (int64_t[]){3, 2, -1})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_close_f32(&y, (float[]){8, 9, 0.25f}, 3, 1e-7);
    slim_tensor_release(&y);

    /* int32 base and exponent: exact. */
    g = tu_graph("Pow", 15, 2, AB, 1);
    slim_tensor in2[2] = {tu_tensor(SLIM_I32, 1, (int64_t[]){3}, (int32_t[]){3, -2, 7}),
                          tu_tensor(SLIM_I32, 0, NULL, (int32_t[]){5})};
    y = run_ok(g, in2, 2);
    const int32_t *v = y.data;
    ck_assert_int_eq(v[0], 243);
    ck_assert_int_eq(v[1], -32);
    ck_assert_int_eq(v[2], 16807);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_variadic_sum_mean_max)
{
    /* Three inputs broadcast to [2,2]: {1,2,3,4} as [2,2], {10,20} as [2],
     * and a one-element c. */
    const char *ops[3] = {"Sum", "Mean", "Max"};
    const float c[3] = {100, 0, 15};
    const float want[3][4] = {{111, 122, 113, 124},
                              {11.0f / 3, 22.0f / 3, 13.0f / 3, 24.0f / 3},
                              {15, 20, 15, 20}};
    for (int o = 0; o < 3; o++) {
        slim_graph *g = tu_graph(ops[o], 13, 3, ABC, 1);
        slim_tensor in[3] = {tu_f32(2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4}),
                             tu_f32(1, (int64_t[]){2}, (float[]){10, 20}),
                             tu_f32(1, (int64_t[]){1}, &c[o])};
        slim_tensor y = run_ok(g, in, 3);
        tu_assert_shape(&y, 2, (int64_t[]){2, 2});
        tu_assert_close_f32(&y, want[o], 4, 1e-6);
        slim_tensor_release(&y);
    }
}
END_TEST

START_TEST(test_bitshift)
{
    slim_graph *g = tu_graph("BitShift", 11, 2, AB, 1);
    tu_attr_s(tu_node0(g), "direction", "LEFT");
    slim_tensor in[2] = {tu_tensor(SLIM_U8, 1, (int64_t[]){3}, (uint8_t[]){1, 3, 255}),
                         tu_tensor(SLIM_U8, 1, (int64_t[]){3}, (uint8_t[]){3, 1, 9})};
    slim_tensor y = run_ok(g, in, 2);
    const uint8_t *v = y.data;
    ck_assert_int_eq(v[0], 8);
    ck_assert_int_eq(v[1], 6);
    ck_assert_int_eq(v[2], 0); /* shift past the width */
    slim_tensor_release(&y);
}
END_TEST

/* ---- unary and activations ----------------------------------------------- */

static slim_tensor run_unary_f32(const char *op, int opset, const float *x, int64_t n)
{
    slim_graph *g = tu_graph(op, opset, 1, X, 1);
    slim_tensor in[1] = {tu_f32(1, (int64_t[]){n}, x)};
    return run_ok(g, in, 1);
}

START_TEST(test_unary_math)
{
    const float x[5] = {-2.5f, -0.5f, 0, 0.5f, 2.5f};
    struct { const char *op; float want[5]; } cases[] = {
        {"Abs", {2.5f, 0.5f, 0, 0.5f, 2.5f}},
        {"Neg", {2.5f, 0.5f, 0, -0.5f, -2.5f}},
        {"Floor", {-3, -1, 0, 0, 2}},
        {"Ceil", {-2, 0, 0, 1, 3}},
        {"Round", {-2, 0, 0, 0, 2}}, /* halves to even */
        {"Sign", {-1, -1, 0, 1, 1}},
        {"Relu", {0, 0, 0, 0.5f, 2.5f}},
        {"Softsign", {-2.5f / 3.5f, -0.5f / 1.5f, 0, 0.5f / 1.5f, 2.5f / 3.5f}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        slim_tensor y = run_unary_f32(cases[c].op, 13, x, 5);
        tu_assert_close_f32(&y, cases[c].want, 5, 1e-6);
        slim_tensor_release(&y);
    }
}
END_TEST

START_TEST(test_activations_from_definitions)
{
    const float x[4] = {-3, -0.5f, 0.25f, 4};
    float sig[4], gelu_erf[4], gelu_tanh[4], softplus[4], elu[4];
    for (int i = 0; i < 4; i++) {
        double v = x[i];
        sig[i] = (float)(1 / (1 + exp(-v)));
        gelu_erf[i] = (float)(0.5 * v * (1 + erf(v / sqrt(2.0))));
        gelu_tanh[i] = (float)(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
        softplus[i] = (float)log(exp(v) + 1);
        elu[i] = (float)(v < 0 ? 2.0 * (exp(v) - 1) : v);
    }
    slim_tensor y = run_unary_f32("Sigmoid", 13, x, 4);
    tu_assert_close_f32(&y, sig, 4, 1e-6);
    slim_tensor_release(&y);
    y = run_unary_f32("Gelu", 20, x, 4);
    tu_assert_close_f32(&y, gelu_erf, 4, 1e-6);
    slim_tensor_release(&y);
    y = run_unary_f32("Softplus", 1, x, 4);
    tu_assert_close_f32(&y, softplus, 4, 1e-6);
    slim_tensor_release(&y);

    slim_graph *g = tu_graph("Gelu", 20, 1, X, 1);
    tu_attr_s(tu_node0(g), "approximate", "tanh");
    slim_tensor in[1] = {tu_f32(1, (int64_t[]){4}, x)};
    y = run_ok(g, in, 1);
    tu_assert_close_f32(&y, gelu_tanh, 4, 1e-6);
    slim_tensor_release(&y);

    g = tu_graph("Elu", 6, 1, X, 1);
    tu_attr_f(tu_node0(g), "alpha", 2.0f);
    slim_tensor in2[1] = {tu_f32(1, (int64_t[]){4}, x)};
    y = run_ok(g, in2, 1);
    tu_assert_close_f32(&y, elu, 4, 1e-6);
    slim_tensor_release(&y);

    g = tu_graph("LeakyRelu", 16, 1, X, 1); /* default alpha 0.01 */
    slim_tensor in3[1] = {tu_f32(1, (int64_t[]){4}, x)};
    y = run_ok(g, in3, 1);
    tu_assert_close_f32(&y, (float[]){-0.03f, -0.005f, 0.25f, 4}, 4, 1e-6);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_clip_inputs_and_attrs)
{
    /* Opset 13: bounds as inputs; max absent. */
    slim_graph *g = tu_graph("Clip", 13, 3, (const char *[]){"x", "lo", ""}, 1);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){4}, (float[]){-3, -1, 1, 3}),
                         tu_f32(0, NULL, (float[]){-2})};
    slim_tensor y = run_ok(g, in, 2);
    tu_assert_close_f32(&y, (float[]){-2, -1, 1, 3}, 4, 0);
    slim_tensor_release(&y);

    /* Opset 6: bounds as attributes. */
    g = tu_graph("Clip", 6, 1, X, 1);
    tu_attr_f(tu_node0(g), "min", -0.5f);
    tu_attr_f(tu_node0(g), "max", 0.5f);
    slim_tensor in2[1] = {tu_f32(1, (int64_t[]){4}, (float[]){-3, -0.25f, 0.25f, 3})};
    y = run_ok(g, in2, 1);
    tu_assert_close_f32(&y, (float[]){-0.5f, -0.25f, 0.25f, 0.5f}, 4, 0);
    slim_tensor_release(&y);

    /* int8 with only max. */
    g = tu_graph("Clip", 13, 3, (const char *[]){"x", "", "hi"}, 1);
    slim_tensor in3[2] = {tu_tensor(SLIM_I8, 1, (int64_t[]){3}, (int8_t[]){-128, 5, 127}),
                          tu_tensor(SLIM_I8, 0, NULL, (int8_t[]){6})};
    y = run_ok(g, in3, 2);
    const int8_t *v = y.data;
    ck_assert_int_eq(v[0], -128);
    ck_assert_int_eq(v[1], 5);
    ck_assert_int_eq(v[2], 6);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_float16_unary_and_compare)
{
    uint16_t h[3] = {slim_f32_to_f16(-1.0f), slim_f32_to_f16(0.0f), slim_f32_to_f16(2.0f)};
    slim_graph *g = tu_graph("Exp", 13, 1, X, 1);
    slim_tensor in[1] = {tu_tensor(SLIM_F16, 1, (int64_t[]){3}, h)};
    slim_tensor y = run_ok(g, in, 1);
    ck_assert_int_eq(y.dtype, SLIM_F16);
    const uint16_t *v = y.data;
    ck_assert_uint_eq(v[0], slim_f32_to_f16(expf(-1.0f)));
    ck_assert_uint_eq(v[1], slim_f32_to_f16(1.0f));
    ck_assert_uint_eq(v[2], slim_f32_to_f16(expf(2.0f)));
    slim_tensor_release(&y);

    g = tu_graph("Less", 13, 2, AB, 1);
    slim_tensor in2[2] = {tu_tensor(SLIM_F16, 1, (int64_t[]){3}, h),
                          tu_tensor(SLIM_F16, 0, NULL, (uint16_t[]){slim_f32_to_f16(0.0f)})};
    y = run_ok(g, in2, 2);
    ck_assert_int_eq(y.dtype, SLIM_BOOL);
    const uint8_t *b = y.data;
    ck_assert_int_eq(b[0], 1);
    ck_assert_int_eq(b[1], 0);
    ck_assert_int_eq(b[2], 0);
    slim_tensor_release(&y);
}
END_TEST

/* ---- logic and Where ----------------------------------------------------- */

START_TEST(test_where_broadcast)
{
    /* cond [2,1], x [1,3], y scalar -> [2,3]. */
    slim_graph *g = tu_graph("Where", 16, 3, ABC, 1);
    slim_tensor in[3] = {tu_tensor(SLIM_BOOL, 2, (int64_t[]){2, 1}, (uint8_t[]){1, 0}),
                         tu_i64(2, (int64_t[]){1, 3}, (int64_t[]){1, 2, 3}),
                         tu_i64(0, NULL, (int64_t[]){-7})};
    slim_tensor y = run_ok(g, in, 3);
    tu_assert_shape(&y, 2, (int64_t[]){2, 3});
    const int64_t want[6] = {1, 2, 3, -7, -7, -7};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(((int64_t *)y.data)[i], want[i]);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_logic_xor_broadcast)
{
    slim_graph *g = tu_graph("Xor", 7, 2, AB, 1);
    slim_tensor in[2] = {tu_tensor(SLIM_BOOL, 2, (int64_t[]){2, 2}, (uint8_t[]){0, 1, 0, 1}),
                         tu_tensor(SLIM_BOOL, 2, (int64_t[]){2, 1}, (uint8_t[]){0, 1})};
    slim_tensor y = run_ok(g, in, 2);
    const uint8_t want[4] = {0, 1, 1, 0};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(((uint8_t *)y.data)[i], want[i]);
    slim_tensor_release(&y);
}
END_TEST

/* ---- Cast ---------------------------------------------------------------- */

START_TEST(test_cast_float_to_int_and_half)
{
    slim_graph *g = tu_graph("Cast", 13, 1, X, 1);
    tu_attr_i(tu_node0(g), "to", 6); /* INT32 */
    slim_tensor in[1] = {tu_f32(1, (int64_t[]){5}, (float[]){2.9f, -2.9f, NAN, 1e20f, -0.5f})};
    slim_tensor y = run_ok(g, in, 1);
    const int32_t *v = y.data;
    ck_assert_int_eq(v[0], 2);
    ck_assert_int_eq(v[1], -2);
    ck_assert_int_eq(v[2], 0);
    ck_assert_int_eq(v[4], 0);
    slim_tensor_release(&y);

    /* 1 + 2^-11 is halfway between two halves: ties to even gives 1.0;
     * 1 + 2^-11 + 2^-30 is just above, so it must round up, which a
     * double -> float -> half chain would get wrong (the float step drops
     * the 2^-30 and leaves an exact tie). */
    g = tu_graph("Cast", 13, 1, X, 1);
    tu_attr_i(tu_node0(g), "to", 10); /* FLOAT16 */
    double d[3] = {1 + 0x1p-11, 1 + 0x1p-11 + 0x1p-30, 70000};
    slim_tensor in2[1] = {tu_tensor(SLIM_F64, 1, (int64_t[]){3}, d)};
    y = run_ok(g, in2, 1);
    const uint16_t *h = y.data;
    ck_assert_uint_eq(h[0], 0x3c00);
    ck_assert_uint_eq(h[1], 0x3c01);
    ck_assert_uint_eq(h[2], 0x7c00); /* beyond 65504: infinity */
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_cast_string_to_and_castlike)
{
    /* Cast-1 names the type as a string. */
    slim_graph *g = tu_graph("Cast", 1, 1, X, 1);
    tu_attr_s(tu_node0(g), "to", "BOOL");
    slim_tensor in[1] = {tu_f32(1, (int64_t[]){3}, (float[]){0, -0.1f, NAN})};
    slim_tensor y = run_ok(g, in, 1);
    ck_assert_int_eq(y.dtype, SLIM_BOOL);
    const uint8_t *b = y.data;
    ck_assert_int_eq(b[0], 0);
    ck_assert_int_eq(b[1], 1);
    ck_assert_int_eq(b[2], 1);
    slim_tensor_release(&y);

    g = tu_graph("CastLike", 15, 2, AB, 1);
    slim_tensor in2[2] = {tu_i64(1, (int64_t[]){2}, (int64_t[]){-3, 300}),
                          tu_tensor(SLIM_U8, 0, NULL, (uint8_t[]){0})};
    y = run_ok(g, in2, 2);
    ck_assert_int_eq(y.dtype, SLIM_U8);
    ck_assert_int_eq(((uint8_t *)y.data)[0], 253); /* wraps like numpy */
    ck_assert_int_eq(((uint8_t *)y.data)[1], 44);
    slim_tensor_release(&y);
}
END_TEST

START_TEST(test_bitwise_and_bitcast)
{
    slim_graph *g = tu_graph("BitwiseAnd", 18, 2, AB, 1);
    slim_tensor in[2] = {tu_tensor(SLIM_I32, 1, (int64_t[]){2}, (int32_t[]){0x0ff0, -1}),
                         tu_tensor(SLIM_I32, 0, NULL, (int32_t[]){0x00ff})};
    slim_tensor y = run_ok(g, in, 2);
    ck_assert_int_eq(((int32_t *)y.data)[0], 0x00f0);
    ck_assert_int_eq(((int32_t *)y.data)[1], 0x00ff);
    slim_tensor_release(&y);

    g = tu_graph("BitCast", 26, 1, X, 1);
    tu_attr_i(tu_node0(g), "to", 6); /* INT32 */
    slim_tensor in2[1] = {tu_f32(1, (int64_t[]){2}, (float[]){1.0f, -2.0f})};
    y = run_ok(g, in2, 1);
    ck_assert_int_eq(y.dtype, SLIM_I32);
    ck_assert_int_eq(((int32_t *)y.data)[0], 0x3f800000);
    ck_assert_int_eq((uint32_t)((int32_t *)y.data)[1], 0xc0000000u);
    slim_tensor_release(&y);

    slim_err err;
    g = tu_graph("BitCast", 26, 1, X, 1);
    tu_attr_i(tu_node0(g), "to", 7); /* INT64: 8 bytes from 4 */
    slim_tensor in3[1] = {tu_f32(1, (int64_t[]){1}, (float[]){1})};
    ck_assert_int_eq(run_err(g, in3, 1, &err), SLIM_ETYPE);
}
END_TEST

/* ---- bad input ----------------------------------------------------------- */

START_TEST(test_errors)
{
    slim_err err;
    slim_graph *g = tu_graph("Add", 14, 2, AB, 1);
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){3}, (float[]){1, 2, 3}),
                         tu_f32(1, (int64_t[]){2}, (float[]){1, 2})};
    ck_assert_int_eq(run_err(g, in, 2, &err), SLIM_ESHAPE);

    g = tu_graph("Add", 14, 2, AB, 1);
    slim_tensor in2[2] = {tu_f32(1, (int64_t[]){1}, (float[]){1}), tu_i64(1, (int64_t[]){1}, (int64_t[]){1})};
    ck_assert_int_eq(run_err(g, in2, 2, &err), SLIM_ETYPE);

    g = tu_graph("Sqrt", 13, 1, X, 1);
    slim_tensor in3[1] = {tu_i64(1, (int64_t[]){1}, (int64_t[]){4})};
    ck_assert_int_eq(run_err(g, in3, 1, &err), SLIM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "int64"));

    g = tu_graph("BitShift", 11, 2, AB, 1);
    tu_attr_s(tu_node0(g), "direction", "UP");
    slim_tensor in4[2] = {tu_tensor(SLIM_U8, 1, (int64_t[]){1}, (uint8_t[]){1}),
                          tu_tensor(SLIM_U8, 1, (int64_t[]){1}, (uint8_t[]){1})};
    ck_assert_int_eq(run_err(g, in4, 2, &err), SLIM_EINVAL);

    g = tu_graph("Cast", 13, 1, X, 1);
    tu_attr_i(tu_node0(g), "to", 23); /* FLOAT4E2M1 (STRING casts since string tensors) */
    slim_tensor in5[1] = {tu_f32(1, (int64_t[]){1}, (float[]){1})};
    ck_assert_int_eq(run_err(g, in5, 1, &err), SLIM_EUNSUPPORTED);

    g = tu_graph("Where", 16, 3, ABC, 1);
    slim_tensor in6[3] = {tu_f32(1, (int64_t[]){1}, (float[]){1}), tu_f32(1, (int64_t[]){1}, (float[]){1}),
                          tu_f32(1, (int64_t[]){1}, (float[]){2})};
    ck_assert_int_eq(run_err(g, in6, 3, &err), SLIM_ETYPE);

    g = tu_graph("Clip", 13, 3, (const char *[]){"x", "lo", ""}, 1);
    slim_tensor in7[2] = {tu_f32(1, (int64_t[]){2}, (float[]){1, 2}),
                          tu_f32(1, (int64_t[]){2}, (float[]){0, 1})};
    ck_assert_int_eq(run_err(g, in7, 2, &err), SLIM_EINVAL);
}
END_TEST

int main(void)
{
    slim_init();
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_add_broadcast_row);
    tcase_add_test(tc, test_sub_broadcast_both_sides);
    tcase_add_test(tc, test_add_legacy_axis_broadcast);
    tcase_add_test(tc, test_mul_large_parallel);
    tcase_add_test(tc, test_div_int_truncates);
    tcase_add_test(tc, test_mod_sign_rules);
    tcase_add_test(tc, test_pow_mixed_types);
    tcase_add_test(tc, test_variadic_sum_mean_max);
    tcase_add_test(tc, test_bitshift);
    tcase_add_test(tc, test_unary_math);
    tcase_add_test(tc, test_activations_from_definitions);
    tcase_add_test(tc, test_clip_inputs_and_attrs);
    tcase_add_test(tc, test_float16_unary_and_compare);
    tcase_add_test(tc, test_where_broadcast);
    tcase_add_test(tc, test_logic_xor_broadcast);
    tcase_add_test(tc, test_cast_float_to_int_and_half);
    tcase_add_test(tc, test_cast_string_to_and_castlike);
    tcase_add_test(tc, test_bitwise_and_bitcast);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
