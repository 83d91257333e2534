/*
 * test_resize_rnn.c - Resize/Upsample and the recurrent layers (RNN, GRU,
 * LSTM) on one-node graphs.
 *
 * Resize cases are small enough to check by hand. The recurrent cases are
 * bigger (bidirectional, ragged sequence_lens, peepholes, clip); their
 * expected values were produced once by onnxruntime 1.31 from the inputs
 * below (layout 1 by transposing its layout-0 results, which it lacks).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "slim_init.h"

/* ---- Resize / Upsample ---------------------------------------------------- */

/* Runs g, frees the inputs and returns the outputs; a failure ends the test. */
static slim_tensor *run1(slim_graph *g, slim_tensor *in, int n_in)
{
    slim_tensor *out;
    int n_out;
    slim_err err;
    slim_status s = tu_run(g, in, n_in, &out, &n_out, &err);
    if (s)
        ck_abort_msg("run failed: %s", err.msg);
    tu_free_inputs(in, n_in);
    return out;
}

START_TEST(test_nearest_upsample_scales)
{
    slim_graph *g = tu_graph("Resize", 19, 3, (const char *[]){"x", "", "scales"}, 1);
    tu_attr_s(tu_node0(g), "mode", "nearest");
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4}),
                         tu_f32(1, (int64_t[]){4}, (float[]){1, 1, 2, 3})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 4, 6});
    tu_assert_close_f32(&out[0], (float[]){1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                           3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 24, 0);
    slim_tensors_free(out, 1);
}
END_TEST

/* half_pixel: output 0 maps to source -0.25 (clamped to 1), 1 to 0.25, ... */
START_TEST(test_bilinear_half_pixel)
{
    slim_graph *g = tu_graph("Resize", 19, 3, (const char *[]){"x", "", "scales"}, 1);
    tu_attr_s(tu_node0(g), "mode", "linear");
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4}),
                         tu_f32(1, (int64_t[]){4}, (float[]){1, 1, 2, 2})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_shape(&out[0], 4, (int64_t[]){1, 1, 4, 4});
    tu_assert_close_f32(&out[0], (float[]){1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f,
                                           2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4},
                        16, 1e-6);
    slim_tensors_free(out, 1);
}
END_TEST

/* align_corners with sizes: 4 -> 7 samples at 0, 0.5, 1, ... 3. */
START_TEST(test_linear_align_corners_sizes_axes)
{
    slim_graph *g = tu_graph("Resize", 19, 4, (const char *[]){"x", "", "", "sizes"}, 1);
    tu_attr_s(tu_node0(g), "mode", "linear");
    tu_attr_s(tu_node0(g), "coordinate_transformation_mode", "align_corners");
    tu_attr_ints(tu_node0(g), "axes", 1, (int64_t[]){-1});
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){2, 4}, (float[]){1, 2, 3, 4, 0, 10, 20, 30}),
                         tu_i64(1, (int64_t[]){1}, (int64_t[]){7})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_shape(&out[0], 2, (int64_t[]){2, 7});
    tu_assert_close_f32(&out[0], (float[]){1, 1.5f, 2, 2.5f, 3, 3.5f, 4,
                                           0, 5, 10, 15, 20, 25, 30}, 14, 1e-6);
    slim_tensors_free(out, 1);
}
END_TEST

/* roi [0, 1.5] along the last axis: samples at 0, 1.5, 3, 4.5; the last one
 * lies outside the input and takes extrapolation_value. */
START_TEST(test_tf_crop_and_resize_extrapolation)
{
    slim_graph *g = tu_graph("Resize", 19, 4, (const char *[]){"x", "roi", "", "sizes"}, 1);
    tu_attr_s(tu_node0(g), "mode", "linear");
    tu_attr_s(tu_node0(g), "coordinate_transformation_mode", "tf_crop_and_resize");
    tu_attr_f(tu_node0(g), "extrapolation_value", 7);
    tu_attr_ints(tu_node0(g), "axes", 1, (int64_t[]){1});
    slim_tensor in[3] = {tu_f32(2, (int64_t[]){1, 4}, (float[]){0, 10, 20, 30}),
                         tu_f32(1, (int64_t[]){2}, (float[]){0, 1.5f}),
                         tu_i64(1, (int64_t[]){1}, (int64_t[]){4})};
    slim_tensor *out = run1(g, in, 3);
    tu_assert_close_f32(&out[0], (float[]){0, 15, 30, 7}, 4, 1e-6);
    slim_tensors_free(out, 1);
}
END_TEST

/* Keys' cubic with A = -0.5 reproduces linear data exactly away from the
 * borders; asymmetric x2 puts output 5 at source 2.5 (taps 1..4). */
START_TEST(test_cubic_reproduces_linear)
{
    slim_graph *g = tu_graph("Resize", 19, 3, (const char *[]){"x", "", "scales"}, 1);
    tu_attr_s(tu_node0(g), "mode", "cubic");
    tu_attr_f(tu_node0(g), "cubic_coeff_a", -0.5f);
    tu_attr_s(tu_node0(g), "coordinate_transformation_mode", "asymmetric");
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    slim_tensor in[2] = {tu_f32(1, (int64_t[]){8}, x),
                         tu_f32(1, (int64_t[]){1}, (float[]){2})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_shape(&out[0], 1, (int64_t[]){16});
    const float *y = out[0].data;
    for (int o = 2; o <= 11; o++)
        ck_assert_float_eq_tol(y[o], o / 2.0f, 1e-5);
    slim_tensors_free(out, 1);
}
END_TEST

/* From the ONNX spec's own example (test_resize_downsample_sizes_linear_antialias). */
START_TEST(test_linear_antialias_downsample)
{
    slim_graph *g = tu_graph("Resize", 18, 4, (const char *[]){"x", "", "", "sizes"}, 1);
    tu_attr_s(tu_node0(g), "mode", "linear");
    tu_attr_i(tu_node0(g), "antialias", 1);
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    slim_tensor in[2] = {tu_f32(4, (int64_t[]){1, 1, 4, 4}, x),
                         tu_i64(1, (int64_t[]){4}, (int64_t[]){1, 1, 3, 3})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_close_f32(&out[0], (float[]){2.3636363f, 3.5909090f, 4.8181820f, 7.2727275f,
                                           8.5f, 9.7272730f, 12.181818f, 13.409091f,
                                           14.636364f}, 9, 1e-5);
    slim_tensors_free(out, 1);
}
END_TEST

/* keep_aspect_ratio_policy not_larger: 2x4 into a 7x8 box scales by 2. */
START_TEST(test_nearest_not_larger_uint8)
{
    slim_graph *g = tu_graph("Resize", 19, 4, (const char *[]){"x", "", "", "sizes"}, 1);
    tu_attr_ints(tu_node0(g), "axes", 2, (int64_t[]){0, 1});
    tu_attr_s(tu_node0(g), "keep_aspect_ratio_policy", "not_larger");
    tu_attr_s(tu_node0(g), "coordinate_transformation_mode", "asymmetric");
    tu_attr_s(tu_node0(g), "nearest_mode", "floor");
    uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    slim_tensor in[2] = {tu_tensor(SLIM_U8, 2, (int64_t[]){2, 4}, x),
                         tu_i64(1, (int64_t[]){2}, (int64_t[]){7, 8})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_shape(&out[0], 2, (int64_t[]){4, 8});
    ck_assert_int_eq(out[0].dtype, SLIM_U8);
    const uint8_t *y = out[0].data;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 8; c++)
            ck_assert_int_eq(y[r * 8 + c], x[(r / 2) * 4 + c / 2]);
    slim_tensors_free(out, 1);
}
END_TEST

/* Opset 10 has no coordinate modes: asymmetric, and nearest rounds up when
 * shrinking (onnxruntime's behaviour): 10 -> 6 reads 0, 2, 4, 5, 7, 9. */
START_TEST(test_resize10_and_upsample)
{
    slim_graph *g = tu_graph("Resize", 10, 2, (const char *[]){"x", "scales"}, 1);
    float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){1, 10}, x),
                         tu_f32(1, (int64_t[]){2}, (float[]){1, 0.6f})};
    slim_tensor *out = run1(g, in, 2);
    tu_assert_close_f32(&out[0], (float[]){1, 3, 5, 6, 8, 10}, 6, 0);
    slim_tensors_free(out, 1);

    g = tu_graph("Upsample", 7, 1, (const char *[]){"x"}, 1);
    tu_attr_floats(tu_node0(g), "scales", 2, (float[]){1, 2});
    tu_attr_s(tu_node0(g), "mode", "linear");
    slim_tensor in2[1] = {tu_f32(2, (int64_t[]){1, 3}, (float[]){0, 2, 4})};
    out = run1(g, in2, 1);
    tu_assert_close_f32(&out[0], (float[]){0, 1, 2, 3, 4, 4}, 6, 1e-6);
    slim_tensors_free(out, 1);

    g = tu_graph("Upsample", 9, 2, (const char *[]){"x", "scales"}, 1);
    slim_tensor in3[2] = {tu_f32(2, (int64_t[]){1, 2}, (float[]){5, 6}),
                          tu_f32(1, (int64_t[]){2}, (float[]){2, 2})};
    out = run1(g, in3, 2);
    tu_assert_close_f32(&out[0], (float[]){5, 5, 6, 6, 5, 5, 6, 6}, 8, 0);
    slim_tensors_free(out, 1);
}
END_TEST

static slim_status run_status(slim_graph *g, slim_tensor *in, int n_in, slim_err *err)
{
    slim_tensor *out = NULL;
    int n_out = 0;
    slim_status s = tu_run(g, in, n_in, &out, &n_out, err);
    if (!s)
        slim_tensors_free(out, n_out);
    tu_free_inputs(in, n_in);
    return s;
}

START_TEST(test_resize_bad_input)
{
    slim_err err;
    /* sizes for 3 axes on a 2-D input */
    slim_graph *g = tu_graph("Resize", 19, 4, (const char *[]){"x", "", "", "sizes"}, 1);
    slim_tensor in[2] = {tu_f32(2, (int64_t[]){1, 2}, (float[]){1, 2}),
                         tu_i64(1, (int64_t[]){3}, (int64_t[]){1, 2, 3})};
    ck_assert_int_eq(run_status(g, in, 2, &err), SLIM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "sizes"));

    /* both scales and sizes */
    g = tu_graph("Resize", 19, 4, (const char *[]){"x", "", "scales", "sizes"}, 1);
    slim_tensor in2[3] = {tu_f32(1, (int64_t[]){2}, (float[]){1, 2}),
                          tu_f32(1, (int64_t[]){1}, (float[]){2}),
                          tu_i64(1, (int64_t[]){1}, (int64_t[]){4})};
    ck_assert_int_eq(run_status(g, in2, 3, &err), SLIM_EINVAL);

    /* a negative scale */
    g = tu_graph("Resize", 19, 3, (const char *[]){"x", "", "scales"}, 1);
    slim_tensor in3[2] = {tu_f32(1, (int64_t[]){2}, (float[]){1, 2}),
                          tu_f32(1, (int64_t[]){1}, (float[]){-2})};
    ck_assert_int_eq(run_status(g, in3, 2, &err), SLIM_EINVAL);

    /* an unknown mode fails at load */
    g = tu_graph("Resize", 19, 3, (const char *[]){"x", "", "scales"}, 1);
    tu_attr_s(tu_node0(g), "mode", "lanczos");
    slim_tensor in4[2] = {tu_f32(1, (int64_t[]){2}, (float[]){1, 2}),
                          tu_f32(1, (int64_t[]){1}, (float[]){2})};
    ck_assert_int_ne(run_status(g, in4, 2, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "lanczos"));
}
END_TEST

/* ---- recurrent layers ----------------------------------------------------- */

/* T = 3 steps, B = 2 batch rows, I = 2 inputs, H = 2 hidden units. */
/* GRU bidirectional, linear_before_reset=1, sequence_lens {3,2}, initial_h */
static const float gru_x[12] = {
    0.25, 0.79, 0.55, -0.55, -0.4, 0.75,
    -0.99, 0.64, 0.59, -0.06, -0.39, -0.44};
static const float gru_w[24] = {
    -0.49, -0.11, 0.01, 0.11, 0.99, 0.59,
    0.24, 0.98, -0.57, -0.68, 0.23, -0.91,
    -0.93, 0.03, -0.07, 0.83, 0.26, 0.03,
    -0.01, -0.5, -0.98, -0.62, 0.38, -0.6};
static const float gru_r[24] = {
    -0.26, -0.99, 0.66, -0.69, -0.46, 0.76,
    0.02, 0.69, 0.28, 0.48, -0.82, 0.08,
    0.02, 0.74, -0.28, 0.2, -0.88, -0.22,
    -0.35, -0.7, 0.63, -0.24, 0.96, 0.18};
static const float gru_b[24] = {
    0.21, 0.28, 0.35, -0.7, -0.12, -0.52,
    -0.2, -0.81, 0.94, -0.57, 0.34, -0.4,
    0.75, 0.32, -0.74, 0.69, 0.89, 0.81,
    0.14, -0.71, -0.62, 0.86, 0.1, -0.64};
static const int32_t gru_lens[2] = {
    3, 2};
static const float gru_h0[8] = {
    0.77, 0.28, 0.14, -0.25, -0.18, -0.52,
    -0.92, 0.75};
static const float gru_y[24] = {
    0.1270348, -0.360763, 0.140634, -0.08539864, 0.2193721, -0.01295923,
    -0.2961003, 0.1952789, -0.01941889, -0.6441985, 0.1713454, -0.5574102,
    0.2280169, -0.1060393, -0.7676448, 0.2243604, -0.1650512, -0.5059605,
    0, 0, 0.09816105, -0.02484193, 0, 0};
static const float gru_yh[8] = {
    -0.1650512, -0.5059605, 0.1713454, -0.5574102, 0.2193721, -0.01295923,
    -0.2961003, 0.1952789};
static const float gru0_y[12] = {
    -0.3265054, -0.2767086, 0.03335897, 0.2856344, -0.3497297, -0.4218513,
    0.1197366, -0.2182516, -0.3796524, -0.05567582, 0.2538963, 0.00381314};
static const float gru0_yh[4] = {
    -0.3796524, -0.05567582, 0.2538963, 0.00381314};
/* LSTM reverse, layout=1, peepholes, clip 0.9, sequence_lens {3,2} */
static const float lstm_x[12] = {
    0.25, 0.79, -0.4, 0.75, 0.59, -0.06,
    0.55, -0.55, -0.99, 0.64, -0.39, -0.44};
static const float lstm_w[16] = {
    -0.06, 0.1, -0.36, 0.5, -0.95, -0.26,
    -0.94, -0.75, 0.93, 0.32, -0.14, 0.05,
    0.75, -0.31, 0.18, 0.37};
static const float lstm_r[16] = {
    -0.29, 0.04, 0.53, 0.82, -0.7, 0.87,
    -0.99, 0.51, 0.62, -0.73, -0.16, 0.63,
    -0.97, 0.26, 0.59, 0.03};
static const float lstm_b[16] = {
    0.45, -0.55, -0.6, -0.27, -0.64, -0.31,
    0.9, 0.15, -0.32, -0.46, 0.9, -0.11,
    0.96, 0.03, 0.04, 0.79};
static const float lstm_p[6] = {
    0.49, 0.16, -0.15, 0.76, -0.18, 0.85};
static const float lstm_h0[4] = {
    -0.86, -0.14, 0.04, 0.9};
static const float lstm_c0[4] = {
    -0.5, 0.61, 0.35, 0.43};
static const float lstm_y[12] = {
    0.2362641, 0.1878467, 0.1686676, 0.2670207, 0.03420272, 0.247224,
    0.2498791, 0.307685, 0.1527892, 0.4486379, 0, 0};
static const float lstm_yh[4] = {
    0.2362641, 0.1878467, 0.2498791, 0.307685};
static const float lstm_yc[4] = {
    0.5496989, 0.6619744, 0.5099077, 0.6705594};
/* RNN bidirectional, activations Relu / LeakyRelu(0.1) */
static const float rnn_w[8] = {
    0.26, 0.94, -0.33, -0.2, -0.59, -0.9,
    -0.57, 0.83};
static const float rnn_r[8] = {
    0.68, -0.78, 0.21, -0.04, 0.19, 0.32,
    -0.39, 0.92};
static const float rnn_b[8] = {
    -0.07, 0.26, 0.27, -0.63, -0.88, -0.18,
    0.53, 0.63};
static const float rnn_y[24] = {
    1.0076, 0, 0, 0, -0.07803246, 2.267306,
    0.3673808, 1.27018, 1.486168, 0, 0.5442, 0,
    -0.07807899, 1.384408, -0.0191169, 1.720353, 1.307594, 0,
    0.05505604, 0, -0.06441, 0.06389999, 0.2760999, 0.3071};
static const float rnn_yh[8] = {
    1.307594, 0, 0.05505604, 0, -0.07803246, 2.267306,
    0.3673808, 1.27018};

static slim_tensor *run_rnn(slim_graph *g, slim_tensor *in, int n_in, int n_out)
{
    slim_tensor *out;
    int got;
    slim_err err;
    slim_status s = tu_run(g, in, n_in, &out, &got, &err);
    if (s)
        ck_abort_msg("run failed: %s", err.msg);
    ck_assert_int_eq(got, n_out);
    tu_free_inputs(in, n_in);
    return out;
}

START_TEST(test_gru_bidirectional_ragged)
{
    slim_graph *g = tu_graph("GRU", 14, 6, (const char *[]){"x", "w", "r", "b", "lens", "h0"}, 2);
    tu_attr_i(tu_node0(g), "hidden_size", 2);
    tu_attr_s(tu_node0(g), "direction", "bidirectional");
    tu_attr_i(tu_node0(g), "linear_before_reset", 1);
    slim_tensor in[6] = {
        tu_f32(3, (int64_t[]){3, 2, 2}, gru_x), tu_f32(3, (int64_t[]){2, 6, 2}, gru_w),
        tu_f32(3, (int64_t[]){2, 6, 2}, gru_r), tu_f32(2, (int64_t[]){2, 12}, gru_b),
        tu_tensor(SLIM_I32, 1, (int64_t[]){2}, gru_lens),
        tu_f32(3, (int64_t[]){2, 2, 2}, gru_h0)};
    slim_tensor *out = run_rnn(g, in, 6, 2);
    tu_assert_shape(&out[0], 4, (int64_t[]){3, 2, 2, 2});
    tu_assert_close_f32(&out[0], gru_y, 24, 1e-5);
    tu_assert_close_f32(&out[1], gru_yh, 8, 1e-5);
    slim_tensors_free(out, 2);
}
END_TEST

START_TEST(test_gru_defaults)
{
    slim_graph *g = tu_graph("GRU", 14, 3, (const char *[]){"x", "w", "r"}, 2);
    tu_attr_i(tu_node0(g), "hidden_size", 2);
    slim_tensor in[3] = {tu_f32(3, (int64_t[]){3, 2, 2}, gru_x),
                         tu_f32(3, (int64_t[]){1, 6, 2}, gru_w),
                         tu_f32(3, (int64_t[]){1, 6, 2}, gru_r)};
    slim_tensor *out = run_rnn(g, in, 3, 2);
    tu_assert_close_f32(&out[0], gru0_y, 12, 1e-5);
    tu_assert_close_f32(&out[1], gru0_yh, 4, 1e-5);
    slim_tensors_free(out, 2);
}
END_TEST

START_TEST(test_lstm_reverse_batchwise_peepholes)
{
    slim_graph *g = tu_graph("LSTM", 14, 8,
                             (const char *[]){"x", "w", "r", "b", "lens", "h0", "c0", "p"}, 3);
    tu_attr_i(tu_node0(g), "hidden_size", 2);
    tu_attr_s(tu_node0(g), "direction", "reverse");
    tu_attr_i(tu_node0(g), "layout", 1);
    tu_attr_f(tu_node0(g), "clip", 0.9f);
    slim_tensor in[8] = {
        tu_f32(3, (int64_t[]){2, 3, 2}, lstm_x), tu_f32(3, (int64_t[]){1, 8, 2}, lstm_w),
        tu_f32(3, (int64_t[]){1, 8, 2}, lstm_r), tu_f32(2, (int64_t[]){1, 16}, lstm_b),
        tu_tensor(SLIM_I32, 1, (int64_t[]){2}, gru_lens),
        tu_f32(3, (int64_t[]){2, 1, 2}, lstm_h0), tu_f32(3, (int64_t[]){2, 1, 2}, lstm_c0),
        tu_f32(2, (int64_t[]){1, 6}, lstm_p)};
    slim_tensor *out = run_rnn(g, in, 8, 3);
    tu_assert_shape(&out[0], 4, (int64_t[]){2, 3, 1, 2});
    tu_assert_close_f32(&out[0], lstm_y, 12, 1e-5);
    tu_assert_shape(&out[1], 3, (int64_t[]){2, 1, 2});
    tu_assert_close_f32(&out[1], lstm_yh, 4, 1e-5);
    tu_assert_close_f32(&out[2], lstm_yc, 4, 1e-5);
    slim_tensors_free(out, 3);
}
END_TEST

START_TEST(test_rnn_bidirectional_activations)
{
    slim_graph *g = tu_graph("RNN", 14, 4, (const char *[]){"x", "w", "r", "b"}, 2);
    slim_node *n = tu_node0(g);
    tu_attr_i(n, "hidden_size", 2);
    tu_attr_s(n, "direction", "bidirectional");
    /* two strings: build the attribute by hand, testutil has no helper */
    n->attrs = realloc(n->attrs, sizeof(*n->attrs) * (n->n_attrs + 1));
    slim_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = strdup("activations");
    a->type = SLIM_ATTR_STRINGS;
    a->n = 2;
    a->strings = malloc(sizeof(char *) * 2);
    a->strings[0] = strdup("Relu");
    a->strings[1] = strdup("LeakyRelu");
    tu_attr_floats(n, "activation_alpha", 1, (float[]){0.1f});
    slim_tensor in[4] = {tu_f32(3, (int64_t[]){3, 2, 2}, gru_x),
                         tu_f32(3, (int64_t[]){2, 2, 2}, rnn_w),
                         tu_f32(3, (int64_t[]){2, 2, 2}, rnn_r),
                         tu_f32(2, (int64_t[]){2, 4}, rnn_b)};
    slim_tensor *out = run_rnn(g, in, 4, 2);
    tu_assert_close_f32(&out[0], rnn_y, 24, 1e-5);
    tu_assert_close_f32(&out[1], rnn_yh, 8, 1e-5);
    slim_tensors_free(out, 2);
}
END_TEST

/* Hand-checkable: H = 1, weights 1, no bias: h1 = tanh(1), h2 = tanh(2 + h1). */
START_TEST(test_rnn_by_hand)
{
    slim_graph *g = tu_graph("RNN", 7, 3, (const char *[]){"x", "w", "r"}, 2);
    tu_attr_i(tu_node0(g), "hidden_size", 1);
    slim_tensor in[3] = {tu_f32(3, (int64_t[]){2, 1, 1}, (float[]){1, 2}),
                         tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1}),
                         tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1})};
    slim_tensor *out = run_rnn(g, in, 3, 2);
    float h1 = tanhf(1), h2 = tanhf(2 + h1);
    tu_assert_close_f32(&out[0], (float[]){h1, h2}, 2, 1e-6);
    tu_assert_close_f32(&out[1], (float[]){h2}, 1, 1e-6);
    slim_tensors_free(out, 2);
}
END_TEST

START_TEST(test_rnn_bad_input)
{
    slim_err err;
    /* W has 3 gates' rows for an LSTM (needs 4) */
    slim_graph *g = tu_graph("LSTM", 14, 3, (const char *[]){"x", "w", "r"}, 1);
    tu_attr_i(tu_node0(g), "hidden_size", 2);
    slim_tensor in[3] = {tu_f32(3, (int64_t[]){1, 1, 2}, (float[]){1, 2}),
                         tu_f32(3, (int64_t[]){1, 6, 2}, NULL),
                         tu_f32(3, (int64_t[]){1, 8, 2}, NULL)};
    ck_assert_int_eq(run_status(g, in, 3, &err), SLIM_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "W"));

    /* sequence_lens longer than the sequence */
    g = tu_graph("RNN", 14, 5, (const char *[]){"x", "w", "r", "", "lens"}, 1);
    tu_attr_i(tu_node0(g), "hidden_size", 1);
    slim_tensor in2[4] = {tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1}),
                          tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1}),
                          tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1}),
                          tu_tensor(SLIM_I32, 1, (int64_t[]){1}, (int32_t[]){5})};
    ck_assert_int_eq(run_status(g, in2, 4, &err), SLIM_EINVAL);

    /* an unknown activation */
    g = tu_graph("GRU", 14, 3, (const char *[]){"x", "w", "r"}, 1);
    tu_attr_i(tu_node0(g), "hidden_size", 1);
    tu_attr_s(tu_node0(g), "direction", "sideways");
    slim_tensor in3[3] = {tu_f32(3, (int64_t[]){1, 1, 1}, (float[]){1}),
                          tu_f32(3, (int64_t[]){1, 3, 1}, NULL),
                          tu_f32(3, (int64_t[]){1, 3, 1}, NULL)};
    ck_assert_int_ne(run_status(g, in3, 3, &err), SLIM_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "sideways"));
}
END_TEST

static Suite *resize_rnn_suite(void)
{
    Suite *s = suite_create("resize_rnn");
    TCase *rz = tcase_create("resize");
    tcase_add_test(rz, test_nearest_upsample_scales);
    tcase_add_test(rz, test_bilinear_half_pixel);
    tcase_add_test(rz, test_linear_align_corners_sizes_axes);
    tcase_add_test(rz, test_tf_crop_and_resize_extrapolation);
    tcase_add_test(rz, test_cubic_reproduces_linear);
    tcase_add_test(rz, test_linear_antialias_downsample);
    tcase_add_test(rz, test_nearest_not_larger_uint8);
    tcase_add_test(rz, test_resize10_and_upsample);
    tcase_add_test(rz, test_resize_bad_input);
    suite_add_tcase(s, rz);

    TCase *rn = tcase_create("recurrent");
    tcase_add_test(rn, test_gru_bidirectional_ragged);
    tcase_add_test(rn, test_gru_defaults);
    tcase_add_test(rn, test_lstm_reverse_batchwise_peepholes);
    tcase_add_test(rn, test_rnn_bidirectional_activations);
    tcase_add_test(rn, test_rnn_by_hand);
    tcase_add_test(rn, test_rnn_bad_input);
    suite_add_tcase(s, rn);
    return s;
}

int main(void)
{
    slim_init();
    SRunner *sr = srunner_create(resize_rnn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
