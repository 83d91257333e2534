/*
 * fp16.h - the half-precision pass: a model's float32 weights and
 * activations become fp16 or bf16.
 *
 *     slim_graph *g;                          (loaded, not yet finalized)
 *     slim_fp16_report rep;
 *     slim_quant_half(g, SLIM_F16, &rep, &err);
 *     slim_model_from_graph(g, &m, &err);
 *
 * Float32 initializers and Constant tensors become half; Cast and CastLike
 * to float32 inside the graph target half; each float32 graph input gets a
 * Cast to half after it and each float32 graph output a Cast back before
 * it, so the model's interface (names, dtypes) is unchanged. Operands that
 * operators read by value as float32 parameters stay float32 (Resize's
 * scales). Normalizations, Softmax and reductions stay accurate because the
 * kernels accumulate in fp32 whatever the storage type.
 */
#ifndef SLIM_QUANT_FP16_H
#define SLIM_QUANT_FP16_H

#include "graph.h"

typedef struct slim_fp16_report {
    int n_weights;              /* initializers converted */
    size_t bytes_before, bytes_after;
    int n_casts;                /* Casts added at the interface */
} slim_fp16_report;

/* half is SLIM_F16 or SLIM_BF16. */
slim_status slim_quant_half(slim_graph *g, slim_dtype half, slim_fp16_report *rep, slim_err *err);
/* The same, float32 initializers with keep_f32[value id] set left float32
 * (keep_f32 NULL: none; quant/half_guard.c keeps what guarded nodes read). */
slim_status slim_quant_half_keep(slim_graph *g, slim_dtype half, const bool *keep_f32,
                                 slim_fp16_report *rep, slim_err *err);

#endif
