/*
 * sparse.h - matrix products with pruned (sparse) weights: what the pruning
 * pass (quant/prune.c) stores and kernels/cpu/sparse_op.c's SparseMatMul runs.
 *
 *     slim_sparse_w w = {.enc = SLIM_SPARSE_CSR, .n = n, .k = k, .vdtype = SLIM_F32,
 *                        .values = vals, .idx = cols, .idtype = SLIM_U16, .rowptr = rp};
 *     slim_sparse_matmul(&w, m, x, k, y, n);     // y[m][n] = x[m][k] * W[k][n] (+ bias)
 *
 * The weight is kept per output channel j (a row of W^T, K long):
 *
 *   csr  values[nnz] and column (k) indices idx[nnz], u16 when K <= 65536,
 *        int32 otherwise; channel j's entries are rowptr[j] .. rowptr[j+1]-1
 *        (rowptr int32 [N+1], rowptr[0] = 0, non-decreasing, rowptr[N] = nnz).
 *        Bytes: nnz * (value + index) + 4 (N + 1).
 *   2:4  K cut into G = ceil(K / 4) groups of 4 consecutive k's; each group
 *        keeps 2 values, values[N][2G] in group order, and their positions
 *        in the group as two 2-bit codes, a nibble per group (lo 2 bits the
 *        first value's, hi 2 bits the second's), two groups a byte (group
 *        2i in the low nibble of byte i): idx u8 [N][ceil(G / 2)]. A group
 *        with fewer than 2 nonzeros stores 0 values. The tail group of a K
 *        that is not a multiple of 4 has K % 4 positions: its codes must be
 *        below that. Bytes: N * (2G * value + ceil(G / 2)).
 *
 * Values are float32, float16 or bfloat16 (converted as read, accumulation
 * in float32). Each output element is one chain of fused multiply-adds in
 * the stored entry order, starting from 0, then + bias: every path (AVX-512,
 * portable C, few rows or many) computes exactly that chain, so a row's
 * result is bitwise the same alone or in any batch, and the C path is the
 * tests' oracle.
 *
 * int8 values (vdtype I8, SparseConv only; SparseMatMul refuses them) are
 * symmetric codes with one float32 scale per output channel: the chain
 * runs over the codes as floats (exact), and the scale comes once at the
 * end, fma(chain, scale[j], bias[j]) (or chain x scale[j] with no bias).
 */
#ifndef SLIM_SPARSE_H
#define SLIM_SPARSE_H

#include "slim.h"

typedef enum { SLIM_SPARSE_CSR = 0, SLIM_SPARSE_24 = 1 } slim_sparse_enc;

typedef struct slim_sparse_w {
    slim_sparse_enc enc;
    int64_t n, k;
    slim_dtype vdtype;        /* F32, F16 or BF16; I8 (SparseConv only) with scale */
    const void *values;
    const void *idx;          /* csr: U16 or I32 per idtype; 2:4: u8 codes */
    slim_dtype idtype;
    const int32_t *rowptr;    /* csr only */
    const float *bias;        /* [n] or NULL */
    const float *scale;       /* I8 values: [n], channel j's codes times scale[j] */
} slim_sparse_w;

/* y[i][j] = sum over channel j's entries of values * x[i][k] (+ bias[j]);
 * x is m rows of k floats (stride ldx), y m rows of n (stride ldy). Runs on
 * the kernel threads. Returns OK, or the allocator's error when the
 * scratch (x transposed, from 4 rows on; 2:4 from 16) is refused (a
 * memory limit, SLIM_EOOM); w must be valid
 * (slim_sparse_check). */
slim_status slim_sparse_matmul(const slim_sparse_w *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, slim_err *err);

/* Fills w from a sparse op's operands (values v, indices ix, row pointers rp
 * for csr, bias and scale or NULL) after checking their dtypes and shapes
 * against enc and K; data pointers are set, not read, and w->bias is left
 * NULL for the caller. rows names the channel count in messages ('N' for
 * SparseMatMul, 'M' for SparseConv); half allows a float16 / bfloat16 bias.
 * *nnz is the number of values held. The op checks v's dtype itself. */
slim_status slim_sparse_operands(slim_sparse_enc enc, int64_t k, const slim_tensor *v,
                                 const slim_tensor *ix, const slim_tensor *rp,
                                 const slim_tensor *bias, const slim_tensor *scale, char rows,
                                 bool half, slim_sparse_w *w, int64_t *nnz, slim_err *err);

/* Checks an encoding read from an untrusted file: rowptr monotone from 0 to
 * nnz, every index below K (2:4: below the tail group's width). O(nnz).
 * nnz is the number of values the caller holds. */
slim_status slim_sparse_check(const slim_sparse_w *w, int64_t nnz, slim_err *err);

/* ---- encoding (at load, from a pruned dense weight) ---------------------- */

/* W is [K][N] (MatMul) or, with w_nk, [N][K] (Gemm transB). */
int64_t slim_sparse_count_nnz(const float *w, int64_t n, int64_t k, bool w_nk);
/* Fills values (float32, scaled by alpha), idx (U16 when k <= 65536, else
 * I32) and rowptr (n + 1) for a weight with nnz nonzeros. */
void slim_sparse_csr_encode(const float *w, int64_t n, int64_t k, bool w_nk, float alpha,
                            float *values, void *idx, int32_t *rowptr);
/* 2:4: fails (returns false) when a group holds more than 2 nonzeros.
 * values [n][2G] float32 (scaled by alpha), idx [n][ceil(G/2)]. */
bool slim_sparse_24_encode(const float *w, int64_t n, int64_t k, bool w_nk, float alpha,
                           float *values, uint8_t *idx);
static inline int64_t slim_sparse_24_groups(int64_t k) { return (k + 3) / 4; }
static inline int64_t slim_sparse_24_idx_bytes(int64_t k)
{
    return (slim_sparse_24_groups(k) + 1) / 2;
}
static inline slim_dtype slim_sparse_csr_idtype(int64_t k) { return k <= 65536 ? SLIM_U16 : SLIM_I32; }
size_t slim_sparse_csr_bytes(int64_t n, int64_t k, int64_t nnz, size_t value_size);
size_t slim_sparse_24_bytes(int64_t n, int64_t k, size_t value_size);

/* ---- convolutions (kernels/cpu/sparse_conv.c) ----------------------------- */

/* A 2-D convolution whose weight [M][C/group][kh][kw] is stored sparse per
 * output channel over its flattened C/group * kh * kw axis (w.n = M,
 * w.k = C/group * kh * kw, float32 or int8 values; csr or 2:4 as above). Output
 * channel j reads input channels of group j / (M / group). */
typedef struct slim_sparse_conv {
    slim_sparse_w w;
    int64_t c, h, wd;         /* input channels, height, width */
    int64_t kh, kw, sh, sw, dh, dw, pt, pl; /* window, strides, dilations, top/left pads */
    int64_t oh, ow, group;    /* output size (bottom/right pads are in it), groups */
    int act;                  /* 0 none, 1 Relu, 2 Clip to [lo, hi] */
    float lo, hi;
} slim_sparse_conv;

/* y[b][j] = act(conv(x[b], channel j's entries) + bias[j] + res[b][j]) for
 * each of the batch's images, res NULL for none. Each output is the chain
 * of fused multiply-adds over its channel's entries in stored order from 0,
 * then + bias, + res, then Relu: the same on every path and whatever the
 * batch (images never share work). Relu is v > 0 ? v : 0, Clip
 * min(max(v, lo), hi) as vmaxps / vminps do it (NaN becomes lo). Runs on the kernel threads; the im2col
 * tiles are scratch from the allocator (SLIM_EOOM under a memory limit). */
slim_status slim_sparse_conv_run(const slim_sparse_conv *c, int64_t batch, const float *x,
                                 const float *res, float *y, slim_err *err);

/* ---- paths --------------------------------------------------------------- */

typedef enum { SLIM_SPARSE_ISA_AUTO = 0, SLIM_SPARSE_ISA_C, SLIM_SPARSE_ISA_AVX512 } slim_sparse_isa;
/* Forces a path (tests, benchmarks); false if the CPU lacks it. AUTO picks
 * the best by CPUID; SLIM_SPARSE_ISA=c in the environment lowers it. */
bool slim_sparse_set_isa(slim_sparse_isa isa);
slim_sparse_isa slim_sparse_get_isa(void);

#endif
