/* cases_conv.c - cross-device cases for kernels/cuda/conv.cu and, with
 * SLIM_CUDNN=1 where cuDNN loads, conv_cudnn.cu (asymmetric pads always
 * take im2col). */
#include "cuda_cases.h"

static const char *const XWB[] = {"x", "w", "b"};

static void conv(cc_builder *b, slim_dtype dt, int64_t c, int64_t m, int64_t k, int64_t stride,
                 int64_t pad, int64_t group, int64_t dil, bool bias)
{
    cc_op(b, "Conv", 11, bias ? 3 : 2, XWB, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){k, k});
    cc_attr_ints(b, "strides", 2, (int64_t[]){stride, stride});
    cc_attr_ints(b, "pads", 4, (int64_t[]){pad, pad, pad, pad});
    cc_attr_ints(b, "dilations", 2, (int64_t[]){dil, dil});
    cc_attr_i(b, "group", group);
    cc_randn(b, 0, dt, 4, (int64_t[]){2, c, 13, 11});
    cc_randn(b, 1, dt, 4, (int64_t[]){m, c / group, k, k});
    cc_weight(b, 1);
    if (bias) {
        cc_randn(b, 2, dt, 1, (int64_t[]){m});
        cc_weight(b, 2);
    }
}

static void conv3x3(cc_builder *b) { conv(b, SLIM_F32, 8, 16, 3, 1, 1, 1, 1, true); }
static void conv3x3_s2(cc_builder *b) { conv(b, SLIM_F32, 5, 7, 3, 2, 1, 1, 1, false); }
static void conv1x1(cc_builder *b) { conv(b, SLIM_F32, 16, 24, 1, 1, 0, 1, 1, true); }
static void conv_dw(cc_builder *b) { conv(b, SLIM_F32, 8, 8, 3, 1, 1, 8, 1, true); }
static void conv_group_dil(cc_builder *b) { conv(b, SLIM_F32, 6, 9, 3, 1, 2, 3, 2, true); }
static void conv_f16(cc_builder *b) { conv(b, SLIM_F16, 8, 16, 3, 1, 1, 1, 1, true); }

static void conv_bf16(cc_builder *b) { conv(b, SLIM_BF16, 8, 16, 3, 1, 1, 1, 1, true); }
static void conv_dw_f16_s2(cc_builder *b) { conv(b, SLIM_F16, 16, 16, 3, 2, 1, 16, 1, true); }

static void conv_asym_pads(cc_builder *b)
{
    cc_op(b, "Conv", 11, 2, XWB, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 0, 0, 1});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 4, 9, 10});
    cc_randn(b, 1, SLIM_F32, 4, (int64_t[]){6, 4, 3, 3});
    cc_weight(b, 1);
}

/* Row invariance: five images, the first alone (cuda_cases.h). */
void cc_build_conv_rows(cc_builder *b)
{
    cc_op(b, "Conv", 11, 3, XWB, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    cc_randn(b, 0, SLIM_F16, 4, (int64_t[]){5, 16, 14, 14});
    cc_randn(b, 1, SLIM_F16, 4, (int64_t[]){32, 16, 3, 3});
    cc_randn(b, 2, SLIM_F16, 1, (int64_t[]){32});
    cc_weight(b, 1);
    cc_weight(b, 2);
}

/* TF32 by default (cuda_cases.h): K = 16 x 3 x 3 = 144. */
void cc_build_conv_tf32(cc_builder *b)
{
    cc_op(b, "Conv", 11, 2, XWB, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){4, 16, 32, 32});
    cc_randn(b, 1, SLIM_F32, 4, (int64_t[]){32, 16, 3, 3});
    cc_weight(b, 1);
}

/* Without kernel_shape the GPU cannot see the rank at placement: the node
 * stays on the CPU (cpu_ok) and still answers. */
static void conv_no_kernel_shape(cc_builder *b)
{
    cc_op(b, "Conv", 11, 2, XWB, 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){2, 4, 9});
    cc_randn(b, 1, SLIM_F32, 3, (int64_t[]){5, 4, 3});
    cc_weight(b, 1);
}

const cc_case cc_cases_conv[] = {
    {"Conv 3x3 pad 1 bias", conv3x3, 1e-4, false},
    {"Conv 3x3 stride 2", conv3x3_s2, 1e-4, false},
    {"Conv 1x1 (no unfolding)", conv1x1, 1e-4, false},
    {"Conv depthwise", conv_dw, 1e-4, false},
    {"Conv groups 3, dilation 2", conv_group_dil, 1e-4, false},
    {"Conv f16", conv_f16, 2e-2, false},
    {"Conv bf16", conv_bf16, 5e-2, false},
    {"Conv f16 depthwise stride 2", conv_dw_f16_s2, 2e-2, false},
    {"Conv asymmetric pads (im2col)", conv_asym_pads, 1e-4, false},
    {"Conv 1-D without kernel_shape (stays on the CPU)", conv_no_kernel_shape, 1e-4, true},
    {0},
};
