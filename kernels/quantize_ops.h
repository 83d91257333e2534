/*
 * quantize_ops.h - pieces shared by the ONNX quantization operators
 * (kernels/cpu/quantize_ops.c) and the integer products behind them
 * (kernels/cpu/qinteger.c): where each element's scale and zero point come
 * from, the reference rounding, and exact 8-bit products into int32.
 */
#ifndef SLIM_QUANTIZE_OPS_H
#define SLIM_QUANTIZE_OPS_H

#include "kernel.h"

#include <stdint.h>

enum { SLIM_QAXIS_TENSOR, SLIM_QAXIS_AXIS, SLIM_QAXIS_BLOCK };

/* x viewed as [outer, A, inner] around the quantization axis; blocked
 * parameters have nb = ceil(A / bs) entries along it. */
typedef struct slim_qaxis {
    int mode;
    int64_t outer, A, inner, bs, nb;
} slim_qaxis;

/* Classifies scale (and zp, which must have its shape) against x: one
 * value, one per index of `axis`, or one per block of `block` along it. */
slim_status slim_qaxis_make(const slim_tensor *x, const slim_tensor *scale,
                            const slim_tensor *zp, int64_t axis, int64_t block, slim_qaxis *q,
                            slim_err *err);

/* The parameter index of element (o, a, i). */
static inline int64_t slim_qaxis_index(const slim_qaxis *q, int64_t o, int64_t a, int64_t i)
{
    if (q->mode == SLIM_QAXIS_TENSOR)
        return 0;
    if (q->mode == SLIM_QAXIS_AXIS)
        return a;
    return (o * q->nb + a / q->bs) * q->inner + i;
}

/* t's values as float32 / int32 arrays (accounted scratch: release with
 * slim_scratch_free; NULL when out of memory). slim_q_load_i32 of a NULL t gives n zeros. */
float *slim_q_load_f32(const slim_tensor *t);
int32_t *slim_q_load_i32(const slim_tensor *t, int64_t n);
/* The range of an integer quantized type; false for other types. */
bool slim_q_range(slim_dtype t, int32_t *lo, int32_t *hi);
/* round-half-even(v) + zp, clipped to [lo, hi]. */
int32_t slim_q_round(double v, int32_t zp, int32_t lo, int32_t hi);
void slim_q_store(slim_dtype t, void *data, int64_t i, int32_t v);

/* DynamicQuantizeLinear's scale and zero point for n floats, and the
 * quantization of the n floats with them. */
void slim_q_dynamic_params(const float *x, int64_t n, float *scale, uint8_t *zp);
void slim_q_dynamic_apply(const float *x, int64_t n, float scale, uint8_t zp, uint8_t *y);

/* MatMul's shape rules (numpy: rank-1 operands, broadcast batch dims). */
typedef struct slim_qmm_shape {
    int64_t m, n, k;
    int nb_a, nb_b, nb;
    int64_t batch[SLIM_MAX_DIMS];
} slim_qmm_shape;

slim_status slim_qmm_shapes(const slim_tensor *a, const slim_tensor *b, slim_qmm_shape *sh,
                            int *ndim, int64_t *dims, slim_err *err);
/* acc = (a - azp) @ (b - bzp), exact in int32, for 8-bit a and b; azp is
 * NULL, a scalar or one per row of a; bzp NULL, a scalar or one per column
 * of b. acc holds the broadcast batch of m x n results. */
/* Whether slim_qmm_int32 takes the packed VNNI/AVX2 kernel (qgemm.h):
 * u8 a with one zero point, a 2-D int8 b with none (or zeros) -- what
 * onnxruntime's quantize_dynamic writes. */
bool slim_qmm_fast_ok(const slim_tensor *a, const slim_tensor *azp, const slim_tensor *b,
                      const slim_tensor *bzp);
slim_status slim_qmm_int32(const slim_qmm_shape *sh, const slim_tensor *a, const slim_tensor *azp,
                           const slim_tensor *b, const slim_tensor *bzp, int32_t *acc,
                           slim_err *err);

#endif
