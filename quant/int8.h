/*
 * int8.h - the dynamic int8 pass: float32 weights of matrix products and
 * embedding tables become int8 with per-channel scales.
 *
 *     slim_graph *g;                          (loaded, not yet finalized)
 *     slim_int8_opts o = {.exclude = names, .n_exclude = 2};
 *     slim_int8_report rep;
 *     slim_quant_int8(g, &o, &rep, &err);
 *     slim_model_from_graph(g, &m, &err);
 *     ...
 *     slim_int8_report_free(&rep);
 *
 * MatMul with a constant 2-D float32 weight, and Gemm with one (transA 0,
 * its C a constant [N], [1, N] or scalar), become com.slimserve MatMulInt8
 * (kernels/cpu/qlinear.c): weights int8, symmetric per output channel,
 * packed in the kernel's layout; activations quantized per row at run time.
 * A bias Add right after (a constant of N elements) and then a Relu are
 * fused into it when nothing else reads the values in between. Gather on
 * axis 0 of a constant 2-D float32 table becomes GatherInt8: int8 rows with
 * per-row scales, dequantized as gathered. The float32 weight is dropped
 * when nothing else reads it, so memory falls with it.
 *
 * Layers named in exclude (by node name or op type) stay float32, and so
 * do layers whose measured error is over opts->max_error.
 * A graph quantized before (a .slim file written with --precision int8) has
 * nothing left to quantize: the pass leaves it as it is.
 */
#ifndef SLIM_QUANT_INT8_H
#define SLIM_QUANT_INT8_H

#include "graph.h"

/* Float32 activations by value name, from one run of the float model on
 * sample inputs (int8_check.c): the inputs of the layers the pass may
 * quantize, which its error check multiplies both ways. */
typedef struct slim_int8_samples {
    int n;
    char **names;
    slim_tensor *tensors;
} slim_int8_samples;

typedef struct slim_int8_opts {
    const char *const *exclude;  /* node names or op types kept in float32 */
    int n_exclude;
    /* With samples: each layer's output is computed from its sample input
     * in float32 and in int8, and its relative L2 error (||y8 - y32|| /
     * ||y32||, the layer's own error given float inputs) is reported; a
     * layer whose error is over max_error (when > 0) stays float32. */
    const slim_int8_samples *samples;
    double max_error;
    /* Outlier input channels of a weight (rows with over
     * SLIM_INT8_OUTLIER_RATIO times the median row's RMS, at most K / 16)
     * are quantized on their own, with their own per-channel scales, and
     * multiplied by the float32 activations beside the int8 product of the
     * rest, unless this is set (benchmarks; the default splits them). */
    bool no_outlier_split;
} slim_int8_opts;

#define SLIM_INT8_OUTLIER_RATIO 3.0

typedef struct slim_int8_layer {
    char *name;                  /* the node's name */
    char *op_type;               /* as it was: MatMul, Gemm, Gather */
    bool quantized;
    const char *why;             /* why it stayed float32 (static string), or NULL */
    size_t bytes_before;         /* its float32 weight (and bias) */
    size_t bytes_after;          /* int8 weight, scales, column sums, bias */
    double weight_error;         /* ||W - dequant(Wq)|| / ||W|| (Frobenius) */
    double error;                /* measured output error (slim_int8_check), -1 if not */
    int weight;                  /* value id of the float weight (for the check) */
    int n_outliers;              /* input channels quantized on their own */
} slim_int8_layer;

typedef struct slim_int8_report {
    int n_layers;
    slim_int8_layer *layers;     /* every candidate, quantized or not */
    size_t bytes_before, bytes_after; /* of the quantized layers */
    /* Why the output errors were not measured when only a report asked
     * for them (slim inspect); empty otherwise. */
    char unmeasured[256];
} slim_int8_report;

/* rep may be NULL. */
slim_status slim_quant_int8(slim_graph *g, const slim_int8_opts *opts, slim_int8_report *rep,
                            slim_err *err);
void slim_int8_report_free(slim_int8_report *rep);
/* Whether the pass would split off the same outlier input channels (none
 * alike) from each of the n float32 MatMul weights [K, N_i]: then their
 * merge (passes/merge_qkv.c) quantizes as they would one by one. With
 * different ones a merged weight would keep only K / 16 of their union. */
bool slim_int8_same_outliers(const slim_tensor *const *w, int n);

/* Takes g (a float32 graph of the model read on its own, not finalized;
 * freed here, also on failure), runs it on the given inputs (matched by
 * name; inputs not given are drawn from their declared specs, see
 * int8_check.c) and keeps each candidate layer's input in *out
 * (slim_int8_samples_free). */
slim_status slim_int8_capture(slim_graph *g, int n_given, const char *const *given_names,
                              const slim_tensor *given, slim_int8_samples *out, slim_err *err);
const slim_tensor *slim_int8_sample(const slim_int8_samples *s, const char *name);
void slim_int8_samples_free(slim_int8_samples *s);
/* ||got - ref|| / ||ref|| over n floats (0 when both are 0). */
double slim_int8_rel_error(const float *ref, const float *got, int64_t n);

#endif
