/*
 * half.h - the half-weights pass: float32 weights of matrix products and
 * embedding tables are stored as fp16 or bf16; activations stay float32 and
 * products accumulate in float32 (kernels/hgemm.h). Layers the pruning
 * pass made sparse (SparseMatMul) get their kept values in half too.
 *
 *     slim_graph *g;                          (loaded, not yet finalized)
 *     slim_half_opts o = {.half = SLIM_BF16, .exclude = names, .n_exclude = 1};
 *     slim_half_report rep;
 *     slim_quant_half_weights(g, &o, &rep, &err);
 *     slim_model_from_graph(g, &m, &err);
 *     ...
 *     slim_half_report_free(&rep);
 *
 * MatMul with a constant 2-D float32 weight, and Gemm with one (transA 0,
 * its C a constant [N], [1, N] or scalar), become com.slimserve MatMulHalf
 * (kernels/cpu/hlinear.c), the weight packed once in hgemm.h's layout
 * (Gemm's alpha folded in before rounding). A bias Add right after (a
 * constant of N elements) and then a Relu are fused into it when nothing
 * else reads the values in between. Gather on axis 0 of a constant 2-D
 * float32 table becomes GatherHalf: half rows widened as gathered. Conv
 * with a constant float32 weight becomes ConvHalf: the weight half in
 * Conv's layout, widened per run into a transient buffer. Each
 * float32 weight is released as soon as its layer is converted, so the
 * load's peak is the float model plus one layer.
 *
 * Layers named in exclude (node names or op types) stay float32. Run after
 * the int8 pass, it converts what that pass left float32 (its excluded
 * layers and those over its error budget): int8 with a half fallback.
 * Everything else (LayerNormalization, Softmax, reductions) is untouched
 * and stays float32.
 */
#ifndef SLIM_QUANT_HALF_H
#define SLIM_QUANT_HALF_H

#include "graph.h"

typedef struct slim_half_opts {
    slim_dtype half;                 /* SLIM_F16 or SLIM_BF16 */
    const char *const *exclude;      /* node names or op types kept in float32 */
    int n_exclude;
} slim_half_opts;

typedef struct slim_half_layer {
    char *name;                  /* the node's name */
    char *op_type;               /* as it was: MatMul, Gemm, Gather */
    bool converted;
    const char *why;             /* why it stayed float32 (static string), or NULL */
    size_t bytes_before;         /* its float32 weight (and bias) */
    size_t bytes_after;          /* the packed half weight and float32 bias */
} slim_half_layer;

typedef struct slim_half_report {
    int n_layers;
    slim_half_layer *layers;     /* every candidate, converted or not */
    size_t bytes_before, bytes_after; /* of the converted layers */
} slim_half_report;

/* rep may be NULL. */
slim_status slim_quant_half_weights(slim_graph *g, const slim_half_opts *opts,
                                    slim_half_report *rep, slim_err *err);
void slim_half_report_free(slim_half_report *rep);

/* Convolutions and the optimization passes (passes/pass.h): before them,
 * ConvHalf goes back to Conv with its weight widened (exactly) so that
 * BatchNormalization folds into it and oneDNN's FusedConv takes it; *half
 * says which half type was seen (UNDEFINED: none). After them, the weights
 * of FusedConv and of Conv that stayed are made half again (Conv becomes
 * ConvHalf; FusedConv widens per run). A model loaded from .onnx with a
 * half precision and from its .slim conversion go the same way, so they
 * compute the same. opts->exclude applies as in the pass. */
slim_status slim_half_conv_widen(slim_graph *g, slim_dtype *half, slim_err *err);
slim_status slim_half_conv_narrow(slim_graph *g, slim_dtype half, const slim_half_opts *opts,
                                  slim_err *err);

/* Half activations (half_guard.c): the whole-graph pass (fp16.h), except
 * that LayerNormalization, Softmax, reductions, the spelled-out LayerNorm
 * and the half-weight operators read and write float32, with HalfCast
 * nodes where the two parts meet. Run after slim_quant_half_weights. */
slim_status slim_quant_half_activations(slim_graph *g, slim_dtype half, slim_err *err);

#endif
