/*
 * attention.cu - FusedAttention (com.slimserve; passes/fuse_attention.c,
 * the CPU kernel in kernels/cpu/attention.c) in one kernel for half
 * operands: no head Transposes, no [B, H, Sq, T] score tensor, no separate
 * Softmax.
 *
 * Q [B, Sq, H*dk], K [B, T, H*dk] and V [B, T, H*dv] are read where the
 * projections wrote them, each head at its column offset; the output is
 * written as [B, Sq, H, dv], the bytes of the block's final Reshape. A
 * block of W warps (ATT_WARPS) takes 16 W query rows of one (batch, head),
 * 16 rows a warp, and walks the keys ATT_KEYS at a time, flash-attention
 * style: the scores of a key block come from tensor cores (WMMA 16x16x16,
 * fp32 sums), are scaled and masked in fp32, and an online softmax keeps
 * each row's running maximum and sum, rescaling the output accumulated so
 * far when the maximum grows. The probabilities are rounded to the
 * operands' type for the second product (P V), again with fp32 sums. The
 * output accumulates in fp32 in shared memory and is rounded once.
 *
 * A row's result depends only on its query, the keys and values of its
 * (batch, head) and the mask, in a fixed order: it is the same whatever
 * batch it ran in, so the server's row-invariant mode needs nothing more.
 * A row whose keys are all masked (-inf) gives NaN, as the CPU kernel and
 * the ONNX reference do.
 *
 * Heads of 16, 32, 64 or 128 (query and value alike: the kernel is built
 * per size, so its index arithmetic is shifts), fp16 or bf16; anything else
 * stays on the CPU kernel (supports). Rows load 8 elements at a time when
 * the operands are 16-byte aligned. The scores' shared memory is reused for
 * the P V product, which keeps a block at 65 KB for heads of 64: three
 * blocks per multiprocessor.
 */
#include "common.cuh"

#include <mma.h>
#include <math.h>
#include <string.h>

using namespace nvcuda;

/* Warps per block, 16 query rows each. 8 (a 128-token sequence's keys and
 * values loaded once per head instead of twice, half the blocks) measured
 * no faster on an H200: fp16 BERT-base 3.83-3.87 against 3.73 ms at batch
 * 32 (bench/results/gpu_h200_2026-11-27_attention.txt). */
#define ATT_WARPS 4
#define ATT_KEYS 64

typedef struct {
    int64_t B, Sq, T, H;
    int64_t ms[4];      /* mask strides over (B, H, Sq, T), 0 where it broadcasts */
    float scale;
    bool has_mask;
    bool vec;           /* every row 16-byte aligned: loads of 8 elements */
} att_args;

/* Per warp: the scores of its 16 rows against a key block (fp32), reused
 * for its P V product once the probabilities are out. */
template <int D, int W>
struct att_smem {
    static constexpr int SV = 16 * (ATT_KEYS > D ? ATT_KEYS : D); /* floats per warp */
    static constexpr size_t bytes(size_t es)
    {
        return (size_t)16 * W * D * es           /* Q */
               + (size_t)ATT_KEYS * D * es * 2   /* K, V */
               + (size_t)W * SV * 4              /* scores, then P V */
               + (size_t)16 * W * ATT_KEYS * es  /* probabilities */
               + (size_t)16 * W * D * 4          /* output, fp32 */
               + (size_t)16 * W * 4 * 3;         /* max, sum, rescale per row */
    }
};

/* rows x D elements of a [*, ld] operand from row r0 on (rows past n are
 * zero) into shared memory, 8 at a time when aligned. */
template <typename T, int D>
__device__ __forceinline__ void att_load(T *dst, const T *src, int64_t ld, int64_t r0,
                                         int64_t n, int rows, bool vec)
{
    if (vec) {
        constexpr int C = D / 8;
        for (int i = threadIdx.x; i < rows * C; i += blockDim.x) {
            int r = i / C, c = (i % C) * 8;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (r0 + r < n)
                x = *(const uint4 *)(src + (r0 + r) * ld + c);
            *(uint4 *)(dst + r * D + c) = x;
        }
        return;
    }
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        dst[i] = r0 + r < n ? src[(r0 + r) * ld + c] : T(0.0f);
    }
}

template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W)
fused_attention_kernel(const T *q, const T *k, const T *v, const T *mask, T *y, att_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int SV = att_smem<D, W>::SV, ATT_ROWS = 16 * W;
    T *qs = (T *)smem;
    T *ks = qs + ATT_ROWS * D;
    T *vs = ks + ATT_KEYS * D;
    float *sv = (float *)(vs + ATT_KEYS * D);
    T *ps = (T *)(sv + W * SV);
    float *os = (float *)(ps + ATT_ROWS * ATT_KEYS);
    float *row_max = os + ATT_ROWS * D;
    float *row_sum = row_max + ATT_ROWS;
    float *row_alpha = row_sum + ATT_ROWS;

    const int64_t b = blockIdx.z, h = blockIdx.y, q0 = (int64_t)blockIdx.x * ATT_ROWS;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t ld = a.H * D;

    att_load<T, D>(qs, q + b * a.Sq * ld + h * D, ld, q0, a.Sq, ATT_ROWS, a.vec);
    for (int i = tid; i < ATT_ROWS * D; i += blockDim.x)
        os[i] = 0.0f;
    for (int i = tid; i < ATT_ROWS; i += blockDim.x) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
    }

    float *sw = sv + warp * SV;
    T *pw = ps + warp * 16 * ATT_KEYS;
    float *ow = os + warp * 16 * D;
    const T *qw = qs + warp * 16 * D;

    for (int64_t t0 = 0; t0 < a.T; t0 += ATT_KEYS) {
        __syncthreads(); /* the last key block's readers are done */
        att_load<T, D>(ks, k + b * a.T * ld + h * D, ld, t0, a.T, ATT_KEYS, a.vec);
        att_load<T, D>(vs, v + b * a.T * ld + h * D, ld, t0, a.T, ATT_KEYS, a.vec);
        __syncthreads();

        /* Scores of the warp's 16 rows against the block's keys. K is
         * [keys, D] row-major: as the product's right operand (D x keys)
         * that is column-major with leading dimension D. */
#pragma unroll
        for (int n = 0; n < ATT_KEYS / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int c = 0; c < D; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, qw + c, D);
                wmma::load_matrix_sync(fb, ks + n * 16 * D + c, D);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(sw + n * 16, acc, ATT_KEYS, wmma::mem_row_major);
        }
        __syncwarp();

        /* Online softmax, a row at a time across the warp: keys lane and
         * lane + 32, maximum and sum by shuffles. */
        for (int r = 0; r < 16; r++) {
            int gr = warp * 16 + r;
            int64_t s = q0 + gr;
            float x[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int64_t t = t0 + lane + 32 * j;
                x[j] = -INFINITY;
                if (t < a.T) {
                    x[j] = sw[r * ATT_KEYS + lane + 32 * j] * a.scale;
                    if (a.has_mask && s < a.Sq)
                        x[j] += to_f32(mask[b * a.ms[0] + h * a.ms[1] + s * a.ms[2] + t * a.ms[3]]);
                }
            }
            float mx = fmaxf(x[0], x[1]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float old = row_max[gr];
            float m = fmaxf(old, mx);
            /* Keys all masked so far: nothing to keep, nothing to add. */
            float alpha = old == -INFINITY ? 0.0f : __expf(old - m);
            float p0 = m == -INFINITY ? 0.0f : __expf(x[0] - m);
            float p1 = m == -INFINITY ? 0.0f : __expf(x[1] - m);
            pw[r * ATT_KEYS + lane] = T(p0);
            pw[r * ATT_KEYS + lane + 32] = T(p1);
            float sum = p0 + p1;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                row_max[gr] = m;
                row_sum[gr] = row_sum[gr] * alpha + sum;
                row_alpha[gr] = alpha;
            }
        }
        __syncwarp();

        /* P V for the warp's rows (into the scores' space), then
         * out = out * alpha + P V. */
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int c = 0; c < ATT_KEYS; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, pw + c, ATT_KEYS);
                wmma::load_matrix_sync(fb, vs + c * D + n * 16, D);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(sw + n * 16, acc, D, wmma::mem_row_major);
        }
        __syncwarp();
        for (int i = lane; i < 16 * D; i += 32)
            ow[i] = ow[i] * row_alpha[warp * 16 + i / D] + sw[i];
        __syncwarp();
    }

    /* Rows past Sq were computed on zeros and are not written. */
    for (int i = lane; i < 16 * D; i += 32) {
        int r = i / D, c = i % D;
        int64_t s = q0 + warp * 16 + r;
        if (s < a.Sq)
            from_f32(&y[(b * a.Sq + s) * ld + h * D + c], ow[i] / row_sum[warp * 16 + r]);
    }
}

template <typename T, int D, int W>
static slim_status att_launch(const slim_tensor *Q, const slim_tensor *K, const slim_tensor *V,
                              const slim_tensor *M, slim_tensor *Y, const att_args &a,
                              slim_cuda_ctx *cu, slim_err *err)
{
    size_t smem = att_smem<D, W>::bytes(sizeof(T));
    const int64_t rows = 16 * W;
    /* Idempotent, so threads racing on the first call do no harm. */
    static bool opted;
    if (!opted) {
        SLIM_CUDA_CHECK(cudaFuncSetAttribute(fused_attention_kernel<T, D, W>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem), err);
        opted = true;
    }
    dim3 grid((unsigned)((a.Sq + rows - 1) / rows), (unsigned)a.H, (unsigned)a.B);
    fused_attention_kernel<T, D, W><<<grid, 32 * W, smem, cu->stream>>>(
        (const T *)Q->data, (const T *)K->data, (const T *)V->data,
        M ? (const T *)M->data : NULL, (T *)Y->data, a);
    SLIM_CUDA_LAUNCH_CHECK(err);
    return SLIM_OK;
}

template <typename T, int W>
static slim_status att_dispatch(int64_t d, const slim_tensor *Q, const slim_tensor *K,
                                const slim_tensor *V, const slim_tensor *M, slim_tensor *Y,
                                const att_args &a, slim_cuda_ctx *cu, slim_err *err)
{
    switch (d) {
    case 16: return att_launch<T, 16, W>(Q, K, V, M, Y, a, cu, err);
    case 32: return att_launch<T, 32, W>(Q, K, V, M, Y, a, cu, err);
    case 64: return att_launch<T, 64, W>(Q, K, V, M, Y, a, cu, err);
    default: return att_launch<T, 128, W>(Q, K, V, M, Y, a, cu, err);
    }
}

/* Reshape (allowzero 0) of x's dims to the first two target entries plus
 * (heads, d): [B, S] of the block's view, as the CPU kernel's infer
 * (which has already accepted the shapes) computes it. */
static void att_view(const slim_tensor *x, const int64_t *r, int64_t heads, int64_t d,
                     int64_t *bs)
{
    int64_t total = slim_tensor_numel(x), known = heads * d;
    int infer = -1;
    for (int i = 0; i < 2; i++) {
        if (r[i] == -1) {
            infer = i;
            continue;
        }
        bs[i] = r[i] == 0 ? x->dims[i] : r[i];
        known *= bs[i];
    }
    if (infer >= 0)
        bs[infer] = known ? total / known : 0;
}

static bool att_supports(const slim_node *n, const slim_dtype *in)
{
    int64_t dk = slim_attr_int(n, "head_size", 0), dv = slim_attr_int(n, "v_head_size", 0);
    bool mask_ok = n->n_in < 4 || in[3] == SLIM_DTYPE_UNDEFINED || in[3] == in[0];
    return n->n_in >= 3 && (in[0] == SLIM_F16 || in[0] == SLIM_BF16) && in[1] == in[0] &&
           in[2] == in[0] && mask_ok && !slim_node_attr(n, "qkv_sizes") && dk == dv &&
           (dk == 16 || dk == 32 || dk == 64 || dk == 128);
}

static slim_status att_exec(slim_op_ctx *ctx, slim_cuda_ctx *cu)
{
    const slim_node *n = ctx->node;
    const slim_tensor *Q = ctx->in[0], *K = ctx->in[1], *V = ctx->in[2];
    const slim_tensor *M = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor *Y = ctx->out[0];
    att_args a;
    memset(&a, 0, sizeof(a));
    a.H = slim_attr_int(n, "num_heads", 0);
    int64_t d = slim_attr_int(n, "head_size", 0);
    a.scale = slim_attr_float(n, "scale", 1.0f);
    int64_t r[2], qb[2], kb[2];
    slim_attr_ints(n, "q_shape", r, 2);
    att_view(Q, r, a.H, d, qb);
    slim_attr_ints(n, "k_shape", r, 2);
    att_view(K, r, a.H, d, kb);
    a.B = qb[0];
    a.Sq = qb[1];
    a.T = kb[1];
    if (a.B == 0 || a.Sq == 0 || slim_tensor_numel(Y) == 0)
        return SLIM_OK;
    if (a.T == 0)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "attention over no keys");
    if (a.B > 65535 || (a.Sq + 15) / 16 > INT32_MAX || a.H > 65535)
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "attention of %lld x %lld heads is past "
                         "the kernel's grid", (long long)a.B, (long long)a.H);
    if (M) {
        /* Right-aligned against (B, H, Sq, T); infer checked each dim is
         * the scores' or 1. */
        const int64_t full[4] = {a.B, a.H, a.Sq, a.T};
        int64_t stride = 1;
        for (int i = 3; i >= 0; i--) {
            int j = i - (4 - M->ndim);
            bool here = j >= 0 && M->dims[j] == full[i] && full[i] != 1;
            a.ms[i] = here ? stride : 0;
            if (j >= 0)
                stride *= M->dims[j];
        }
        a.has_mask = true;
    }
    /* Rows are H * d elements, d a multiple of 16: 16-byte loads when the
     * bases are 16-byte aligned too (the arena's are). */
    uintptr_t any = (uintptr_t)Q->data | (uintptr_t)K->data | (uintptr_t)V->data |
                    (uintptr_t)Y->data;
    a.vec = (any & 15) == 0;
    if (Q->dtype == SLIM_F16)
        return att_dispatch<__half, ATT_WARPS>(d, Q, K, V, M, Y, a, cu, ctx->err);
    return att_dispatch<__nv_bfloat16, ATT_WARPS>(d, Q, K, V, M, Y, a, cu, ctx->err);
}

extern "C" const slim_cuda_op slim__cuda_ops_slimserve_attention[] = {
    {"FusedAttention", 1, 0, att_supports, att_exec},
    {NULL, 0, 0, NULL, NULL},
};
