/* cases_attention.c - cross-device cases for kernels/cuda/attention.cu:
 * FusedAttention (com.slimserve) on half operands against the CPU kernel,
 * with key counts that leave a short last key block, query counts that
 * leave a short last row block, masks that broadcast, and rows far apart
 * in magnitude (the online softmax rescales). */
#include "cuda_cases.h"

#include <stdlib.h>
#include <string.h>

static void fattn(cc_builder *b, slim_dtype dt, int64_t B, int64_t S, int64_t T, int64_t H,
                  int64_t d, int mask_rank, bool mask_full)
{
    static const char *const QKVM[] = {"q", "k", "v", "m"};
    cc_op(b, "FusedAttention", 1, mask_rank ? 4 : 3, QKVM, 1);
    slim_node *nd = cc_node(b);
    free(nd->domain);
    nd->domain = strdup("com.slimserve");
    nd->opset = 1;
    cc_attr_i(b, "num_heads", H);
    cc_attr_i(b, "head_size", d);
    cc_attr_i(b, "v_head_size", d);
    cc_attr_f(b, "scale", 0.125f);
    cc_attr_ints(b, "q_shape", 2, (int64_t[]){0, 0});
    cc_attr_ints(b, "k_shape", 2, (int64_t[]){0, 0});
    cc_attr_ints(b, "v_shape", 2, (int64_t[]){0, 0});
    cc_attr_ints(b, "out_shape", 3, (int64_t[]){0, 0, -1});
    cc_randn(b, 0, dt, 3, (int64_t[]){B, S, H * d});
    cc_randn(b, 1, dt, 3, (int64_t[]){B, T, H * d});
    cc_randn(b, 2, dt, 3, (int64_t[]){B, T, H * d});
    if (mask_rank == 2)
        cc_uniform(b, 3, dt, 2, (int64_t[]){S, T}, -4, 0);
    else if (mask_rank == 4)
        cc_uniform(b, 3, dt, 4, mask_full ? (int64_t[]){B, H, S, T} : (int64_t[]){B, 1, 1, T},
                   -4, 0);
}

static void fa_f16(cc_builder *b) { fattn(b, SLIM_F16, 2, 70, 90, 3, 64, 0, false); }
static void fa_f16_d32(cc_builder *b) { fattn(b, SLIM_F16, 3, 17, 200, 2, 32, 0, false); }
static void fa_f16_mask2(cc_builder *b) { fattn(b, SLIM_F16, 2, 33, 65, 2, 64, 2, false); }
static void fa_f16_padmask(cc_builder *b) { fattn(b, SLIM_F16, 3, 40, 40, 4, 16, 4, false); }
static void fa_bf16_mask(cc_builder *b) { fattn(b, SLIM_BF16, 2, 64, 128, 2, 128, 4, true); }

/* Row invariance (cc_cases_rows): five sequences, the first alone. */
void cc_build_attention_rows(cc_builder *b) { fattn(b, SLIM_F16, 5, 50, 50, 2, 64, 4, false); }

const cc_case cc_cases_attention[] = {
    {"FusedAttention f16 [2,70,3x64] x 90 keys", fa_f16, 2e-2, false},
    {"FusedAttention f16 head 32, 200 keys, 17 queries", fa_f16_d32, 2e-2, false},
    {"FusedAttention f16 mask [S,T]", fa_f16_mask2, 2e-2, false},
    {"FusedAttention f16 head 16, mask [B,1,1,T]", fa_f16_padmask, 2e-2, false},
    {"FusedAttention bf16 head 128, mask [B,H,S,T]", fa_bf16_mask, 5e-2, false},
    {0},
};
