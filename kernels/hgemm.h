/*
 * hgemm.h - float32 activations times half-precision weights (fp16 or
 * bf16), accumulated in float32: the product behind the half-weights pass
 * (quant/half.c inserts MatMulHalf, kernels/cpu/hlinear.c runs it).
 *
 *     uint16_t *packed = ...;   // slim_hgemm_packed_elems(n, k) halves, 64-byte aligned
 *     slim_hgemm_pack(w, n, k, SLIM_BF16, packed);          // once, at load (w is n x k float)
 *     slim_hgemm_args a = {.m = m, .n = n, .k = k, .x = x, .ldx = k, .packed = packed,
 *                          .wtype = SLIM_BF16, .bias = bias, .y = y, .ldy = n};
 *     slim_hgemm(&a, scratch);                              // per run
 *
 * y[i][j] = act(sum_k x[i][k] * w[j][k] + bias[j]).
 *
 * Packed layout (part of the MatMulHalf operator's definition, stored as is
 * in .slim files, so a model maps it without converting): channels padded
 * to a multiple of 16 and cut into panels of 64 (the last one 16, 32, 48 or
 * 64 wide); k padded to a multiple of 2 with zeros. Panel p starts at
 * element p * 64 * k2 and holds, for each pair g of k's, its width's
 * channels j with their 2 halves w[j][2g], w[j][2g+1]. One 64-byte row is
 * what one vdpbf16ps multiplies against a broadcast pair of bf16 inputs;
 * the float32 paths read the same bytes as (channel, parity) lanes.
 *
 * The paths (CPUID, once; SLIM_HALF_ISA=c|avx512|avx512bf16 lowers it):
 *   C          portable: per channel two float32 sums (even and odd k) of
 *              fmaf(x, w), added at the end.
 *   AVX512     the same operations on AVX-512F, the weights widened with
 *              vcvtph2ps (F16C) or a 16-bit shift (bf16): bitwise the same
 *              results as C, which is the tests' oracle.
 *   AVX512BF16 bf16 weights only: x rounded to bf16 per row, products by
 *              vdpbf16ps (exact bf16 x bf16 products, float32 sums, inputs
 *              and outputs below 2^-126 flushed to zero). Twice the
 *              multiply rate of float32 FMA; x's rounding costs accuracy,
 *              measured in docs/half.md.
 * Every path does the same work for a row whatever the other rows of the
 * call are, so a row's result never depends on the batch it ran in.
 */
#ifndef SLIM_HGEMM_H
#define SLIM_HGEMM_H

#include "slim.h"

#include <stdint.h>

#define SLIM_HGEMM_PANEL 64

typedef enum {
    SLIM_HGEMM_ACT_NONE = 0,
    SLIM_HGEMM_ACT_RELU,
    SLIM_HGEMM_ACT_GELU, /* ONNX Gelu, approximate "none" (kernels/cpu/gelu_poly.h) */
} slim_hgemm_act;

typedef enum {
    SLIM_HGEMM_AUTO = 0,
    SLIM_HGEMM_C,
    SLIM_HGEMM_AVX512,
    SLIM_HGEMM_AVX512BF16,
} slim_hgemm_isa;

int64_t slim_hgemm_k2(int64_t k);               /* k rounded up to 2 */
int64_t slim_hgemm_n16(int64_t n);              /* n rounded up to 16 */
size_t slim_hgemm_packed_elems(int64_t n, int64_t k);

/* Packs w, float32 with element (j, kk) at w[j * sj + kk * sk] (sj = k,
 * sk = 1 for n x k channel-major; sj = 1, sk = n for MatMul's k x n), into
 * wtype (SLIM_F16 or SLIM_BF16, rounded to nearest even). */
void slim_hgemm_pack(const float *w, int64_t n, int64_t k, int64_t sj, int64_t sk,
                     slim_dtype wtype, uint16_t *packed);
/* Element (j, kk) of a packed weight, as float32 (tests, inspection). */
float slim_hgemm_packed_get(const uint16_t *packed, int64_t n, int64_t k, slim_dtype wtype,
                            int64_t j, int64_t kk);

typedef struct slim_hgemm_args {
    int64_t m, n, k;
    const float *x;            /* m rows of k floats, row stride ldx */
    int64_t ldx;
    const uint16_t *packed;    /* slim_hgemm_pack's layout */
    slim_dtype wtype;          /* SLIM_F16 or SLIM_BF16 */
    const float *bias;         /* [n] or NULL */
    slim_hgemm_act act;
    float *y;                  /* m rows of n floats, row stride ldy */
    int64_t ldy;
} slim_hgemm_args;

/* Bytes of scratch slim_hgemm needs (the bf16 copy of x on that path). */
size_t slim_hgemm_scratch_bytes(int64_t m, int64_t k);
/* Runs the product on the kernel threads. scratch: slim_hgemm_scratch_bytes
 * bytes, 64-byte aligned. */
void slim_hgemm(const slim_hgemm_args *a, void *scratch);

/* dst[i] = src[i] widened from wtype (exact), on the fastest path the CPU
 * has: what half weights cost per run where a kernel needs float32. */
void slim_half_widen(const uint16_t *src, slim_dtype wtype, float *dst, int64_t n);

/* The path slim_hgemm takes for a weight type: the best available, or the
 * one forced with slim_hgemm_set_isa (tests). */
slim_hgemm_isa slim_hgemm_get_isa(slim_dtype wtype);
bool slim_hgemm_set_isa(slim_hgemm_isa isa);  /* false if the CPU lacks it */
bool slim_hgemm_isa_supported(slim_hgemm_isa isa);
const char *slim_hgemm_isa_name(slim_hgemm_isa isa);

#endif
