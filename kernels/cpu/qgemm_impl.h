/*
 * qgemm_impl.h - what qgemm.c and qgemm_quant.c share inside the int8
 * product: the x86 target attributes and the rows quantizer of a path.
 */
#ifndef SLIM_QGEMM_IMPL_H
#define SLIM_QGEMM_IMPL_H

#include "qgemm.h"

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#define QGEMM_X86 1
#include <immintrin.h>
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#endif

/* Width in channels of panel p of a packed weight with n16 channels (a
 * multiple of 16; SLIM_QGEMM_PANEL but for the last). */
static inline int64_t slim__qgemm_panel_width(int64_t n16, int64_t p)
{
    int64_t w = n16 - p * SLIM_QGEMM_PANEL;
    return w < SLIM_QGEMM_PANEL ? w : SLIM_QGEMM_PANEL;
}

/* Rows rows of k floats (row i at x + i * ldx) to u8 (row i at q + i *
 * ldq, k4 bytes, the padding 0), scale[i] and zp[i] as qgemm.h says. */
typedef void (*slim__qgemm_rows_fn)(const float *x, int64_t ldx, int64_t rows, int64_t k,
                                    uint8_t *q, int64_t ldq, float *scale, int32_t *zp);

/* The range of n floats with 0 (*lo <= 0 <= *hi; min and max, so exact
 * whatever the order) and *bad 1 when any is NaN or infinite (then lo and
 * hi say nothing), with path isa's loops (qgemm_quant.c; the per-image
 * quantization of convolutions uses it too). */
void slim__f32_range(slim_qgemm_isa isa, const float *x, int64_t n, float *lo, float *hi,
                     unsigned *bad);

/* The sparse float32 entries (qgemm_sparse.c). The VNNI path: rows
 * [r0, r1) of a chunk transposed into xt (16-row groups; a chunk takes
 * slim__qgemm_sparse_xt_floats(1, rows_per_chunk, k) floats, 64-byte
 * aligned) while the chunk is quantized, then per product task the sums
 * of channels [c0, c1) written to y for the epilogue to add (xt NULL: per
 * element, the same bits). The portable paths: a pass adding them to y
 * for rows [r, r + nr). */
size_t slim__qgemm_sparse_xt_floats(int64_t chunks, int64_t rows_per_chunk, int64_t k);
void slim__qgemm_sparse_transpose(const slim_qgemm_args *a, int64_t r0, int64_t r1, float *xt);
void slim__qgemm_sparse_sums(const slim_qgemm_args *a, const float *xt, int64_t r0, int64_t r1,
                             int64_t c0, int64_t c1);
void slim__qgemm_sparse_rows_c(const slim_qgemm_args *a, int64_t r, int nr);

/* The rows quantizer of a path (qgemm_quant.c). */
slim__qgemm_rows_fn slim__qgemm_quantizer(slim_qgemm_isa isa);

/* The AMX tiles (qgemm_amx.c), only where slim_qgemm_amx_active(): begin
 * loads the tile configuration on the calling thread, end releases it;
 * between them tile16 writes the exact int32 sums of 16 quantized rows (qx,
 * k4 bytes apart) against one full packed panel b into acc[16][64]. */
void slim__qgemm_amx_begin(void);
void slim__qgemm_amx_end(void);
void slim__qgemm_amx_tile16(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc);
/* The same for 32 rows into acc[32][64] (each weight tile serves both
 * 16-row halves). */
void slim__qgemm_amx_tile32(const uint8_t *qx, int64_t k4, const int8_t *b, int32_t *acc);

#endif
