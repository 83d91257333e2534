/* cases_movement.c - cross-device cases for kernels/cuda/movement.cu. */
#include "cuda_cases.h"

static const char *const X[] = {"x"};

static void transpose_heads(cc_builder *b)
{
    cc_op(b, "Transpose", 13, 1, X, 1);
    cc_attr_ints(b, "perm", 4, (int64_t[]){0, 2, 1, 3});
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 7, 3, 5});
}

static void transpose_default_f16(cc_builder *b)
{
    cc_op(b, "Transpose", 13, 1, X, 1);
    cc_randn(b, 0, SLIM_F16, 3, (int64_t[]){3, 4, 5});
}

static void gather_embed(cc_builder *b)
{
    cc_op(b, "Gather", 13, 2, (const char *[]){"table", "ids"}, 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){50, 33});
    cc_weight(b, 0);
    cc_ints(b, 1, SLIM_I64, 2, (int64_t[]){2, 3}, (int64_t[]){0, 49, -1, 7, 7, 20});
}

static void gather_axis1(cc_builder *b)
{
    cc_op(b, "Gather", 13, 2, (const char *[]){"x", "i"}, 1);
    cc_attr_i(b, "axis", 1);
    cc_randn(b, 0, SLIM_F16, 3, (int64_t[]){3, 6, 4});
    cc_ints(b, 1, SLIM_I32, 1, (int64_t[]){3}, (int64_t[]){5, 0, -2});
}

static void concat_axis1(cc_builder *b)
{
    cc_op(b, "Concat", 13, 3, (const char *[]){"a", "b", "c"}, 1);
    cc_attr_i(b, "axis", 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){2, 3, 5});
    cc_randn(b, 1, SLIM_F32, 3, (int64_t[]){2, 1, 5});
    cc_randn(b, 2, SLIM_F32, 3, (int64_t[]){2, 4, 5});
}

static void reshape_then_view(cc_builder *b)
{
    cc_op(b, "Reshape", 14, 2, (const char *[]){"x", "shape"}, 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){2, 3, 4});
    cc_ints(b, 1, SLIM_I64, 1, (int64_t[]){2}, (int64_t[]){0, -1});
    cc_weight(b, 1);
}

static void flatten(cc_builder *b)
{
    cc_op(b, "Flatten", 13, 1, X, 1);
    cc_attr_i(b, "axis", 2);
    cc_randn(b, 0, SLIM_F32, 4, (int64_t[]){2, 3, 4, 5});
}

const cc_case cc_cases_movement[] = {
    {"Transpose [0,2,1,3]", transpose_heads, 0, false},
    {"Transpose default perm f16", transpose_default_f16, 0, false},
    {"Gather embedding rows, negative index", gather_embed, 0, false},
    {"Gather axis 1 int32 indices f16", gather_axis1, 0, false},
    {"Concat axis 1", concat_axis1, 0, false},
    {"Reshape (a view) [0,-1]", reshape_then_view, 0, false},
    {"Flatten axis 2", flatten, 0, false},
    {0},
};
