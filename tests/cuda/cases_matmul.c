/* cases_matmul.c - cross-device cases for kernels/cuda/matmul.cu. */
#include "cuda_cases.h"

#include <stdlib.h>
#include <string.h>

static const char *const AB[] = {"a", "b"};
static const char *const ABC[] = {"a", "b", "c"};

static void mm(cc_builder *b, slim_dtype dt, int na, const int64_t *da, int nb,
               const int64_t *db, bool weight)
{
    cc_op(b, "MatMul", 13, 2, AB, 1);
    cc_randn(b, 0, dt, na, da);
    cc_randn(b, 1, dt, nb, db);
    if (weight)
        cc_weight(b, 1);
}

static void mm_2d(cc_builder *b) { mm(b, SLIM_F32, 2, (int64_t[]){33, 65}, 2, (int64_t[]){65, 17}, true); }
static void mm_3d_weight(cc_builder *b) { mm(b, SLIM_F32, 3, (int64_t[]){3, 7, 64}, 2, (int64_t[]){64, 96}, true); }
static void mm_f16(cc_builder *b) { mm(b, SLIM_F16, 3, (int64_t[]){2, 9, 128}, 2, (int64_t[]){128, 40}, true); }
static void mm_batched(cc_builder *b) { mm(b, SLIM_F32, 4, (int64_t[]){2, 3, 5, 16}, 4, (int64_t[]){2, 3, 16, 5}, false); }
static void mm_bcast(cc_builder *b) { mm(b, SLIM_F32, 4, (int64_t[]){2, 1, 5, 8}, 3, (int64_t[]){3, 8, 6}, false); }
static void mm_vec(cc_builder *b) { mm(b, SLIM_F32, 1, (int64_t[]){19}, 2, (int64_t[]){19, 4}, false); }
static void mm_k0(cc_builder *b) { mm(b, SLIM_F32, 3, (int64_t[]){2, 5, 0}, 2, (int64_t[]){0, 7}, false); }
static void mm_vec_r(cc_builder *b) { mm(b, SLIM_F32, 3, (int64_t[]){2, 3, 19}, 1, (int64_t[]){19}, false); }

static void gemm(cc_builder *b, int ta, int tb, float alpha, float beta, int nc, slim_dtype dt)
{
    cc_op(b, "Gemm", 13, nc ? 3 : 2, ABC, 1);
    cc_attr_i(b, "transA", ta);
    cc_attr_i(b, "transB", tb);
    cc_attr_f(b, "alpha", alpha);
    cc_attr_f(b, "beta", beta);
    int64_t m = 13, n = 21, k = 34;
    cc_randn(b, 0, dt, 2, ta ? (int64_t[]){k, m} : (int64_t[]){m, k});
    cc_randn(b, 1, dt, 2, tb ? (int64_t[]){n, k} : (int64_t[]){k, n});
    cc_weight(b, 1);
    if (nc == 1)
        cc_randn(b, 2, dt, 1, (int64_t[]){n});
    else if (nc == 2)
        cc_randn(b, 2, dt, 2, (int64_t[]){m, n});
    else if (nc == 3)
        cc_randn(b, 2, dt, 2, (int64_t[]){m, 1});
    if (nc)
        cc_weight(b, 2);
}

static void gemm_fc(cc_builder *b) { gemm(b, 0, 1, 1.0f, 1.0f, 1, SLIM_F32); }
static void gemm_ta(cc_builder *b) { gemm(b, 1, 0, 0.5f, 2.0f, 2, SLIM_F32); }
static void gemm_col_bias(cc_builder *b) { gemm(b, 0, 0, 1.0f, 1.0f, 3, SLIM_F32); }
static void gemm_nobias_f16(cc_builder *b) { gemm(b, 1, 1, 1.0f, 1.0f, 0, SLIM_F16); }

/* MatMulBias (com.slimserve, the fuse_matmul_bias pass's): A [rows..., K]
 * times a weight [K, N] plus a bias [N], cuBLASLt's epilogue. */
static void mmb(cc_builder *b, slim_dtype dt, int na, const int64_t *da, int64_t n, bool relu)
{
    static const char *const AWB[] = {"a", "w", "bias"};
    cc_op(b, "MatMulBias", 1, 3, AWB, 1);
    slim_node *nd = cc_node(b);
    free(nd->domain);
    nd->domain = strdup("com.slimserve");
    nd->opset = 1;
    if (relu)
        cc_attr_s(b, "activation", "Relu");
    int64_t k = da[na - 1];
    cc_randn(b, 0, dt, na, da);
    cc_randn(b, 1, dt, 2, (int64_t[]){k, n});
    cc_randn(b, 2, dt, 1, (int64_t[]){n});
    cc_weight(b, 1);
    cc_weight(b, 2);
}

static void mmb_f32(cc_builder *b) { mmb(b, SLIM_F32, 3, (int64_t[]){3, 7, 64}, 96, false); }
static void mmb_f16_relu(cc_builder *b) { mmb(b, SLIM_F16, 3, (int64_t[]){2, 9, 128}, 40, true); }
static void mmb_f16_odd(cc_builder *b) { mmb(b, SLIM_F16, 2, (int64_t[]){33, 17}, 13, false); }
static void mmb_bf16(cc_builder *b) { mmb(b, SLIM_BF16, 2, (int64_t[]){70, 64}, 48, true); }
static void mmb_vec(cc_builder *b) { mmb(b, SLIM_F32, 1, (int64_t[]){19}, 5, false); }
static void mmb_k0(cc_builder *b) { mmb(b, SLIM_F16, 2, (int64_t[]){4, 0}, 6, true); }

const cc_case cc_cases_matmul[] = {
    {"MatMulBias [3,7,64]x[64,96]+b", mmb_f32, 1e-4, false},
    {"MatMulBias f16 Relu [2,9,128]x[128,40]+b", mmb_f16_relu, 2e-2, false},
    {"MatMulBias f16 odd [33,17]x[17,13]+b", mmb_f16_odd, 2e-2, false},
    {"MatMulBias bf16 Relu [70,64]x[64,48]+b", mmb_bf16, 5e-2, false},
    {"MatMulBias 1-D A", mmb_vec, 1e-4, false},
    {"MatMulBias K = 0 (the bias, Relu)", mmb_k0, 0, false},
    {"MatMul 2-D weight [33,65]x[65,17]", mm_2d, 1e-4, false},
    {"MatMul [3,7,64]x[64,96] folds rows", mm_3d_weight, 1e-4, false},
    {"MatMul f16 [2,9,128]x[128,40]", mm_f16, 2e-2, false},
    {"MatMul batched [2,3,5,16]x[2,3,16,5]", mm_batched, 1e-4, false},
    {"MatMul broadcast batch dims", mm_bcast, 1e-4, false},
    {"MatMul 1-D x 2-D", mm_vec, 1e-4, false},
    {"MatMul 3-D x 1-D", mm_vec_r, 1e-4, false},
    {"MatMul K = 0 (zeros)", mm_k0, 0, false},
    {"Gemm transB, row bias", gemm_fc, 1e-4, false},
    {"Gemm transA, alpha/beta, full C", gemm_ta, 1e-4, false},
    {"Gemm column bias [m,1]", gemm_col_bias, 1e-4, false},
    {"Gemm f16 both transposed, no C", gemm_nobias_f16, 2e-2, false},
    {0},
};

/* Row invariance: shapes with a short last 64-row block, more items than
 * one grouped call takes, broadcasting and fp16. */
static void rows_weight(cc_builder *b) { mm(b, SLIM_F32, 2, (int64_t[]){200, 96}, 2, (int64_t[]){96, 136}, true); }
static void rows_weight_f16(cc_builder *b) { mm(b, SLIM_F16, 3, (int64_t[]){5, 67, 128}, 2, (int64_t[]){128, 40}, true); }
static void rows_many_blocks(cc_builder *b) { mm(b, SLIM_F16, 2, (int64_t[]){64 * 70 + 3, 32}, 2, (int64_t[]){32, 8}, true); }
static void rows_attention(cc_builder *b) { mm(b, SLIM_F32, 4, (int64_t[]){5, 4, 33, 16}, 4, (int64_t[]){5, 4, 16, 33}, false); }
static void rows_attention_f16(cc_builder *b) { mm(b, SLIM_F16, 4, (int64_t[]){9, 12, 20, 64}, 4, (int64_t[]){9, 12, 64, 20}, false); }
/* Items of 70 and 90 bytes: pointers not 16-byte aligned after item 0. */
static void rows_odd_f16(cc_builder *b) { mm(b, SLIM_F16, 4, (int64_t[]){3, 2, 7, 5}, 4, (int64_t[]){3, 2, 5, 9}, false); }
static void rows_bcast(cc_builder *b) { mm(b, SLIM_F32, 4, (int64_t[]){5, 1, 9, 8}, 3, (int64_t[]){3, 8, 6}, true); }

static void rows_gemm(cc_builder *b)
{
    cc_op(b, "Gemm", 13, 3, ABC, 1);
    cc_attr_i(b, "transB", 1);
    cc_randn(b, 0, SLIM_F32, 2, (int64_t[]){150, 34});
    cc_randn(b, 1, SLIM_F32, 2, (int64_t[]){21, 34});
    cc_randn(b, 2, SLIM_F32, 1, (int64_t[]){21});
    cc_weight(b, 1);
    cc_weight(b, 2);
}

/* Items whose sizes are multiples of 64 bytes: cuBLASLt's pinned batched
 * path (matmul_lt.cu) rather than the grouped one. */
static void rows_batched_lt_f16(cc_builder *b) { mm(b, SLIM_F16, 4, (int64_t[]){6, 4, 32, 64}, 4, (int64_t[]){6, 4, 64, 32}, false); }
static void rows_batched_lt_f32(cc_builder *b) { mm(b, SLIM_F32, 4, (int64_t[]){3, 2, 16, 16}, 4, (int64_t[]){3, 2, 16, 16}, false); }
static void rows_mmb(cc_builder *b) { mmb(b, SLIM_F16, 3, (int64_t[]){5, 67, 128}, 40, true); }

const cc_rows_case cc_cases_rows[] = {
    {{"rows: MatMulBias f16 Relu [5,67,128]x[128,40], 1 alone", rows_mmb, 2e-2, false}, 1},
    {{"rows: MatMul f16 [6,4,32,64]x[6,4,64,32] (pinned batched), 1 alone", rows_batched_lt_f16, 2e-2, false}, 1},
    {{"rows: MatMul [3,2,16,16]x[3,2,16,16] (pinned batched), 2 alone", rows_batched_lt_f32, 1e-4, false}, 2},
    {{"rows: Conv f16 3x3 [5,16,14,14], 1 alone", cc_build_conv_rows, 2e-2, false}, 1},
    {{"rows: FusedAttention f16 [5,50,2x64], mask [B,1,1,T], 1 alone", cc_build_attention_rows, 2e-2, false}, 1},
    {{"rows: MatMul [200,96]x[96,136], 70 alone", rows_weight, 1e-4, false}, 70},
    {{"rows: MatMul f16 [5,67,128]x[128,40], 1 alone", rows_weight_f16, 2e-2, false}, 1},
    {{"rows: MatMul f16 4483 rows x [32,8], 65 alone", rows_many_blocks, 2e-2, false}, 65},
    {{"rows: MatMul [5,4,33,16]x[5,4,16,33], 2 alone", rows_attention, 1e-4, false}, 2},
    {{"rows: MatMul f16 [9,12,20,64]x[9,12,64,20], 1 alone", rows_attention_f16, 2e-2, false}, 1},
    {{"rows: MatMul f16 [3,2,7,5]x[3,2,5,9], 1 alone", rows_odd_f16, 2e-2, false}, 1},
    {{"rows: MatMul [5,1,9,8]x[3,8,6], 2 alone", rows_bcast, 1e-4, false}, 2},
    {{"rows: Gemm transB [150,34] + bias, 7 alone", rows_gemm, 1e-4, false}, 7},
    {{0}, 0},
};

/* TF32 by default: products large enough that cuBLAS / cuBLASLt take
 * tensor-core kernels, K at most 144 (CC_TF32_TOL). */
static void tf32_mm(cc_builder *b) { mm(b, SLIM_F32, 2, (int64_t[]){192, 128}, 2, (int64_t[]){128, 160}, true); }
static void tf32_batched(cc_builder *b) { mm(b, SLIM_F32, 3, (int64_t[]){4, 128, 64}, 3, (int64_t[]){4, 64, 128}, false); }
static void tf32_mmb(cc_builder *b) { mmb(b, SLIM_F32, 2, (int64_t[]){256, 128}, 128, false); }

const cc_case cc_cases_tf32[] = {
    {"TF32: MatMul [192,128]x[128,160] (cuBLAS)", tf32_mm, 1e-4, false},
    {"TF32: MatMul batched [4,128,64]x[4,64,128]", tf32_batched, 1e-4, false},
    {"TF32: MatMulBias [256,128]x[128,128]+b (cuBLASLt)", tf32_mmb, 1e-4, false},
    {"TF32: Conv 3x3 [4,16,32,32] (im2col)", cc_build_conv_tf32, 1e-4, false},
    {0},
};
