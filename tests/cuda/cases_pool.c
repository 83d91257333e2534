/* cases_pool.c - cross-device cases for kernels/cuda/pool.cu. */
#include "cuda_cases.h"

static const char *const X[] = {"x"};

static void maxpool_pad(cc_builder *b)
{
    cc_op(b, "MaxPool", 12, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 3, 11, 9});
}

static void maxpool_ceil_f16(cc_builder *b)
{
    cc_op(b, "MaxPool", 12, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    cc_attr_i(b, "ceil_mode", 1);
    cc_randn(b, 0, SLIM_F16, 4, (int64_t[]){1, 2, 7, 7});
}

static void avgpool(cc_builder *b)
{
    cc_op(b, "AveragePool", 19, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 3, 8, 6});
}

static void avgpool_incl(cc_builder *b)
{
    cc_op(b, "AveragePool", 19, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 1, 1, 1});
    cc_attr_i(b, "count_include_pad", 1);
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 3, 8, 6});
}

/* Pads after the input differ from those before: the divisor counts the
 * end pads (the last window here has one real tap and three pad ones). */
static void avgpool_incl_asym(cc_builder *b)
{
    cc_op(b, "AveragePool", 19, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "pads", 4, (int64_t[]){0, 0, 1, 1});
    cc_attr_i(b, "count_include_pad", 1);
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){1, 2, 5, 5});
}

static void avgpool_incl_ceil(cc_builder *b)
{
    cc_op(b, "AveragePool", 19, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){3, 3});
    cc_attr_ints(b, "strides", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "pads", 4, (int64_t[]){1, 0, 0, 1});
    cc_attr_i(b, "count_include_pad", 1);
    cc_attr_i(b, "ceil_mode", 1);
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 1, 8, 7});
}

/* End pads wider than the window: the last windows read padding alone. */
static void maxpool_pad_only(cc_builder *b)
{
    cc_op(b, "MaxPool", 12, 1, X, 1);
    cc_attr_ints(b, "kernel_shape", 2, (int64_t[]){2, 2});
    cc_attr_ints(b, "pads", 4, (int64_t[]){0, 0, 3, 3});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){1, 2, 3, 3});
}

static void gap(cc_builder *b)
{
    cc_op(b, "GlobalAveragePool", 1, 1, X, 1);
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){3, 5, 13, 11});
}

static void gmp_f16(cc_builder *b)
{
    cc_op(b, "GlobalMaxPool", 1, 1, X, 1);
    cc_randn(b, 0, SLIM_F16, 4, (int64_t[]){2, 4, 7, 9});
}

const cc_case cc_cases_pool[] = {
    {"MaxPool 3x3 s2 pad 1", maxpool_pad, 0, false},
    {"MaxPool ceil_mode f16", maxpool_ceil_f16, 0, false},
    {"AveragePool 3x3 pad 1", avgpool, 1e-5, false},
    {"AveragePool count_include_pad", avgpool_incl, 1e-5, false},
    {"AveragePool count_include_pad, end pads only", avgpool_incl_asym, 1e-5, false},
    {"AveragePool count_include_pad, ceil_mode, mixed pads", avgpool_incl_ceil, 1e-5, false},
    {"MaxPool windows over padding alone", maxpool_pad_only, 0, false},
    {"GlobalAveragePool", gap, 1e-5, false},
    {"GlobalMaxPool f16", gmp_f16, 0, false},
    {0},
};
