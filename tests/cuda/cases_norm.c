/* cases_norm.c - cross-device cases for kernels/cuda/norm.cu. */
#include "cuda_cases.h"

#include <stdlib.h>
#include <string.h>

static const char *const X[] = {"x"};
static const char *const XSB[] = {"x", "s", "b"};

static void ln(cc_builder *b, slim_dtype dt, int64_t rows, int64_t cols, bool bias)
{
    cc_op(b, "LayerNormalization", 17, bias ? 3 : 2, XSB, 1);
    cc_attr_f(b, "epsilon", 1e-5f);
    cc_randn(b, 0, dt, 3, (int64_t[]){2, rows, cols});
    cc_uniform(b, 1, dt, 1, (int64_t[]){cols}, 0.5, 1.5);
    cc_weight(b, 1);
    if (bias) {
        cc_randn(b, 2, dt, 1, (int64_t[]){cols});
        cc_weight(b, 2);
    }
}

static void ln_768_f32(cc_builder *b) { ln(b, SLIM_F32, 7, 768, true); }
static void ln_384_f16(cc_builder *b) { ln(b, SLIM_F16, 5, 384, true); }
static void ln_odd_nobias(cc_builder *b) { ln(b, SLIM_F32, 3, 37, false); }

static void ln_axis1(cc_builder *b)
{
    cc_op(b, "LayerNormalization", 17, 3, XSB, 1);
    cc_attr_i(b, "axis", 1);
    cc_randn(b, 0, SLIM_F32, 3, (int64_t[]){3, 4, 5});
    cc_randn(b, 1, SLIM_F32, 2, (int64_t[]){4, 5});
    cc_randn(b, 2, SLIM_F32, 2, (int64_t[]){4, 5});
}

static void sm(cc_builder *b, const char *op, int opset, slim_dtype dt, int axis, int64_t len)
{
    cc_op(b, op, opset, 1, X, 1);
    cc_attr_i(b, "axis", axis);
    cc_uniform(b, 0, dt, 4, (int64_t[]){2, 3, 5, len}, -6, 6);
}

static void sm_last_f32(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F32, -1, 128); }
static void sm_last_f16(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F16, -1, 77); }
static void sm_axis1(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F32, 1, 9); }
static void sm_opset11(cc_builder *b) { sm(b, "Softmax", 11, SLIM_F32, 2, 9); }
static void logsm(cc_builder *b) { sm(b, "LogSoftmax", 13, SLIM_F32, -1, 1000); }
/* Row lengths around the warp kernel's register tiers and past its limit. */
static void sm_f16_33(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F16, -1, 33); }
static void sm_300(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F32, -1, 300); }
static void sm_1024(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F32, -1, 1024); }
static void sm_1025(cc_builder *b) { sm(b, "Softmax", 13, SLIM_F32, -1, 1025); }
static void logsm_f16_7(cc_builder *b) { sm(b, "LogSoftmax", 13, SLIM_F16, -1, 7); }

static void bn(cc_builder *b, slim_dtype dt)
{
    cc_op(b, "BatchNormalization", 15, 5, (const char *[]){"x", "s", "b", "m", "v"}, 1);
    cc_randn(b, 0, dt, 4, (int64_t[]){2, 6, 5, 7});
    cc_randn(b, 1, dt, 1, (int64_t[]){6});
    cc_randn(b, 2, dt, 1, (int64_t[]){6});
    cc_randn(b, 3, dt, 1, (int64_t[]){6});
    cc_uniform(b, 4, dt, 1, (int64_t[]){6}, 0.5, 2);
    for (int k = 1; k < 5; k++)
        cc_weight(b, k);
}

static void bn_f32(cc_builder *b) { bn(b, SLIM_F32); }
static void bn_f16(cc_builder *b) { bn(b, SLIM_F16); }

/* AddLayerNorm (com.slimserve, fuse_add_layernorm's): A [2, rows, cols] +
 * B of shape db, LayerNorm of the sum; with `sum` the sum as output 2. */
static void aln(cc_builder *b, slim_dtype dt, int64_t rows, int64_t cols, int nb,
                const int64_t *db, bool bias, bool sum)
{
    static const char *const ABSB[] = {"a", "b", "s", "bias"};
    cc_op(b, "AddLayerNorm", 1, bias ? 4 : 3, ABSB, sum ? 2 : 1);
    slim_node *nd = cc_node(b);
    free(nd->domain);
    nd->domain = strdup("com.slimserve");
    nd->opset = 1;
    cc_attr_f(b, "epsilon", 1e-5f);
    cc_randn(b, 0, dt, 3, (int64_t[]){2, rows, cols});
    cc_randn(b, 1, dt, nb, db);
    cc_uniform(b, 2, dt, 1, (int64_t[]){cols}, 0.5, 1.5);
    cc_weight(b, 2);
    if (bias) {
        cc_randn(b, 3, dt, 1, (int64_t[]){cols});
        cc_weight(b, 3);
    }
}

static void aln_768_f16(cc_builder *b) { aln(b, SLIM_F16, 9, 768, 3, (int64_t[]){2, 9, 768}, true, false); }
static void aln_sum_f32(cc_builder *b) { aln(b, SLIM_F32, 5, 100, 3, (int64_t[]){2, 5, 100}, true, true); }
static void aln_odd_bf16(cc_builder *b) { aln(b, SLIM_BF16, 3, 7, 3, (int64_t[]){2, 3, 7}, false, true); }
static void aln_row_f16(cc_builder *b) { aln(b, SLIM_F16, 4, 64, 2, (int64_t[]){4, 64}, true, true); }
static void aln_long_f32(cc_builder *b) { aln(b, SLIM_F32, 2, 3001, 3, (int64_t[]){2, 2, 3001}, true, false); }

const cc_case cc_cases_norm[] = {
    {"AddLayerNorm f16 [2,9,768] (registers)", aln_768_f16, 1e-2, false},
    {"AddLayerNorm f32 with Sum, 100 cols", aln_sum_f32, 1e-4, false},
    {"AddLayerNorm bf16 7 cols, Sum, no bias", aln_odd_bf16, 5e-2, false},
    {"AddLayerNorm f16 B [4,64] broadcast, Sum", aln_row_f16, 1e-2, false},
    {"AddLayerNorm f32 3001 cols (through memory)", aln_long_f32, 1e-4, false},
    {"LayerNorm f32 [2,7,768]", ln_768_f32, 1e-4, false},
    {"LayerNorm f16 [2,5,384]", ln_384_f16, 1e-2, false},
    {"LayerNorm f32 odd cols, no bias", ln_odd_nobias, 1e-4, false},
    {"LayerNorm axis 1", ln_axis1, 1e-4, false},
    {"Softmax f32 last axis 128", sm_last_f32, 1e-5, false},
    {"Softmax f16 last axis 77", sm_last_f16, 1e-2, false},
    {"Softmax f32 axis 1", sm_axis1, 1e-5, false},
    {"Softmax opset 11 (2-D coercion)", sm_opset11, 1e-5, false},
    {"LogSoftmax f32 1000", logsm, 1e-4, false},
    {"Softmax f16 last axis 33", sm_f16_33, 1e-2, false},
    {"Softmax f32 last axis 300", sm_300, 1e-5, false},
    {"Softmax f32 last axis 1024", sm_1024, 1e-5, false},
    {"Softmax f32 last axis 1025 (a block per row)", sm_1025, 1e-5, false},
    {"LogSoftmax f16 last axis 7", logsm_f16_7, 1e-2, false},
    {"BatchNormalization f32", bn_f32, 1e-5, false},
    {"BatchNormalization f16", bn_f16, 1e-2, false},
    {0},
};
