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

static void transpose_of(cc_builder *b, slim_dtype dt, int nd, const int64_t *dims,
                         const int64_t *perm)
{
    cc_op(b, "Transpose", 13, 1, X, 1);
    cc_attr_ints(b, "perm", nd, perm);
    cc_randn(b, 0, dt, nd, dims);
}

/* The paths of transpose_plan.h: 16-byte moves (heads of 64 fp16), tiles
 * (K^T, with edges that are not multiples of 32 and batch axes; 8-byte
 * elements), a plain copy (only size-1 axes move), the general gather.
 * Float types only: integer-only nodes stay on the CPU. */
static void transpose_heads_f16(cc_builder *b) { transpose_of(b, SLIM_F16, 4, (int64_t[]){3, 9, 4, 64}, (int64_t[]){0, 2, 1, 3}); }
static void transpose_keys_f16(cc_builder *b) { transpose_of(b, SLIM_F16, 4, (int64_t[]){3, 37, 4, 16}, (int64_t[]){0, 2, 3, 1}); }
static void transpose_keys_f32(cc_builder *b) { transpose_of(b, SLIM_F32, 4, (int64_t[]){2, 70, 3, 33}, (int64_t[]){0, 2, 3, 1}); }
static void transpose_2d_f64(cc_builder *b) { transpose_of(b, SLIM_F64, 2, (int64_t[]){65, 97}, (int64_t[]){1, 0}); }
static void transpose_ones(cc_builder *b) { transpose_of(b, SLIM_F32, 4, (int64_t[]){1, 6, 1, 7}, (int64_t[]){2, 1, 0, 3}); }
static void transpose_5d_f16(cc_builder *b) { transpose_of(b, SLIM_F16, 5, (int64_t[]){2, 3, 4, 5, 6}, (int64_t[]){4, 2, 0, 3, 1}); }

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
    {"Transpose f16 heads of 64 (16-byte moves)", transpose_heads_f16, 0, false},
    {"Transpose f16 [3,37,4,16] to K^T (tiles)", transpose_keys_f16, 0, false},
    {"Transpose [2,70,3,33] to K^T (tile edges)", transpose_keys_f32, 0, false},
    {"Transpose f64 [65,97] (tiles)", transpose_2d_f64, 0, false},
    {"Transpose moving only size-1 axes (a copy)", transpose_ones, 0, false},
    {"Transpose f16 5-D (general gather)", transpose_5d_f16, 0, false},
    {"Gather embedding rows, negative index", gather_embed, 0, false},
    {"Gather axis 1 int32 indices f16", gather_axis1, 0, false},
    {"Concat axis 1", concat_axis1, 0, false},
    {"Reshape (a view) [0,-1]", reshape_then_view, 0, false},
    {"Flatten axis 2", flatten, 0, false},
    {0},
};
