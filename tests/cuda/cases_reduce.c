/* cases_reduce.c - cross-device cases for kernels/cuda/reduce.cu. */
#include "cuda_cases.h"

static const char *const X[] = {"x"};
static const char *const XA[] = {"x", "axes"};

static void mean_attr(cc_builder *b)
{
    cc_op(b, "ReduceMean", 13, 1, X, 1);
    cc_attr_ints(b, "axes", 1, (int64_t[]){-1});
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){3, 5, 77});
}

static void mean_input18_f16(cc_builder *b)
{
    cc_op(b, "ReduceMean", 18, 2, XA, 1);
    cc_attr_i(b, "keepdims", 0);
    cc_randn(b, 0, SLIM_F16, 4, (int64_t[]){2, 3, 5, 7});
    cc_ints(b, 1, SLIM_I64, 1, (int64_t[]){2}, (int64_t[]){1, 3});
    cc_weight(b, 1);
}

static void sum13_all(cc_builder *b)
{
    cc_op(b, "ReduceSum", 13, 1, X, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){9, 13});
}

static void max_axis0(cc_builder *b)
{
    cc_op(b, "ReduceMax", 13, 1, X, 1);
    cc_attr_ints(b, "axes", 1, (int64_t[]){0});
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){4, 3, 5});
}

static void min_18(cc_builder *b)
{
    cc_op(b, "ReduceMin", 18, 2, XA, 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){4, 3, 5});
    cc_ints(b, 1, SLIM_I64, 1, (int64_t[]){1}, (int64_t[]){-2});
    cc_weight(b, 1);
}

const cc_case cc_cases_reduce[] = {
    {"ReduceMean last axis (attr)", mean_attr, 1e-5, false},
    {"ReduceMean f16 axes input, keepdims 0", mean_input18_f16, 1e-2, false},
    {"ReduceSum all axes", sum13_all, 1e-4, false},
    {"ReduceMax axis 0", max_axis0, 0, false},
    {"ReduceMin axes input", min_18, 0, false},
    {0},
};
